// The optimized-BLAS baseline of `fp8emu bench gemm`: OpenBLAS's cblas_sgemm when the build found
// OpenBLAS (Debian's libopenblas-dev; runtime-dispatched kernels for the processor it runs on).
#pragma once

#include <string>

namespace fp8emu::cli {

/// Whether this build has the OpenBLAS baseline.
bool have_openblas();

/// C = A * B with OpenBLAS's cblas_sgemm: n x n fp32 matrices, column-major, alpha 1, beta 0, on
/// `threads` threads (OpenBLAS's own pool). Returns false (and leaves C alone) without OpenBLAS.
bool openblas_sgemm(int n, const float* A, const float* B, float* C, int threads);

/// OpenBLAS's description of itself, "OpenBLAS <version> <core> (<config>)", or "" without it.
std::string openblas_description();

}  // namespace fp8emu::cli
