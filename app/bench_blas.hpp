// The optimized baselines of `fp8emu bench gemm`: OpenBLAS's cblas_sgemm when the build found
// OpenBLAS (Debian's libopenblas-dev; runtime-dispatched kernels for the processor it runs on), and
// Eigen's product compiled for the best x86-64 ISA level the processor runs (the modules
// fp8emu_eigen_v4.so / fp8emu_eigen_v3.so built from bench_eigen_isa.cpp, loaded at run time).
#pragma once

#include <string>

namespace fp8emu::cli {

/// Whether this build has the OpenBLAS baseline.
bool have_openblas();

/// C = A * B with OpenBLAS's cblas_sgemm: n x n fp32 matrices, column-major, alpha 1, beta 0, on
/// `threads` threads (OpenBLAS's own pool). Returns false (and leaves C alone) without OpenBLAS.
bool openblas_sgemm(int n, const float* A, const float* B, float* C, int threads);

/// D [M, N] = A [M, K] B [K, N], row-major, with OpenBLAS's cblas_sgemm on its own thread pool as
/// configured (a backend::CpuLibraryGemm). Does nothing without OpenBLAS (check have_openblas).
void openblas_sgemm_nn(int M, int N, int K, const float* A, const float* B, float* D);

/// OpenBLAS's description of itself, "OpenBLAS <version> <core> (<config>)", or "" without it.
std::string openblas_description();

/// The ISA level of the Eigen module this processor runs ("x86-64-v4", "x86-64-v3"), or "" when
/// there is none (not x86-64, a build without the modules, a processor below v3, or the module
/// file missing beside the executable and in the install's lib/fp8emu).
std::string eigen_isa_level();

/// C = A * B with the Eigen module (as openblas_sgemm). Returns false without it.
bool eigen_isa_sgemm(int n, const float* A, const float* B, float* C, int threads);

/// "Eigen <version> (<SIMD sets in use>)" from the module, or why there is none.
std::string eigen_isa_description();

}  // namespace fp8emu::cli
