// `fp8emu validate`: the GPU against the emulator, on the machine's GPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

namespace fp8emu::cli {

struct ValidateOptions {
  std::vector<int> sizes{1, 17, 64, 131, 256};  ///< see backend::KernelCheckOptions::sizes
  std::uint64_t seed = 1;
};

/// Without a usable GPU (backend::cuda_status().usable() false): prints why_not() to `err` and
/// returns 2. Otherwise:
///   1. every CudaKernels method against its emulated twin on the same random inputs, bit for bit
///      (backend::check_kernels), as a table kernel x inputs x mismatches;
///   2. fp8emu's mma.sync E4M3 GEMM against the emulator's `ada` and `hopper` models with fast
///      accumulation (bit mismatches) and the exact product (ULP and relative-error statistics);
///   3. the cuBLASLt FP8 GEMM, fast accumulation on and off, against the `hopper` models and the
///      exact product (ULP and relative error), its amax of D and its bias epilogue;
///   4. device experiments: what `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` returns for NaN, Inf and
///      the overflow midpoints next to fp8emu's host mirror, both against each other over all 2^32
///      fp32 inputs, and how the device's fmaxf treats NaNs.
/// Sections 2-4 are findings and do not change the exit code. Returns 0 when every bit-exact
/// kernel of section 1 has 0 mismatches, 1 otherwise.
///
/// For testing the harness without a GPU, FP8EMU_VALIDATE_AGAINST_EMULATED=1 runs section 1 with
/// the emulator in place of the GPU (and skips sections 2-4).
int run_validate(const ValidateOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
