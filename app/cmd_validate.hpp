// `fp8emu validate`: the GPU against the emulator, on the machine's GPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

namespace fp8emu::cli {

struct ValidateOptions {
  std::vector<int> sizes{1, 17, 64, 131, 256};  ///< see backend::DeviceCheckOptions::sizes
  std::uint64_t seed = 1;
};

/// Without a usable GPU (backend::cuda_status().usable() false): prints why_not() to `err` and
/// returns 2. Otherwise:
///   1. every FP8 operation of cuda_device() against cpu_device()'s on the same random inputs, bit
///      for bit (backend::check_devices), as a table operation x inputs x mismatches;
///   2. fp8emu's mma.sync E4M3 GEMM against every tensor-core model with fast accumulation (bit
///      mismatches) and the exact product (ULP and relative-error statistics); the mma.sync row of
///      the GPU's architecture (`ada` on sm_89, `hopper-mma-sync` on sm_90) is expected bit-exact;
///   3. the cuBLASLt FP8 GEMM, fast accumulation on and off, against `hopper` (no promotion, or
///      promotion every 128) with the split-K count of the algorithm cuBLASLt ran, and the exact
///      product; long-K shapes (16 x 16 x 65536, 128 x 128 x 16384) with the heuristic's split-K and
///      split-K forced to 2, 3 and 25; the E4M3 output (D_SCALE, AMAX_D) against the emulator's
///      epilogue; on sm_90 all of these are expected bit-exact. Also the bias epilogue (a finding);
///   4. device experiments: what `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` returns for NaN, Inf and
///      the overflow midpoints next to fp8emu's host mirror, both against each other over all 2^32
///      fp32 inputs, and how the device's fmaxf treats NaNs (findings).
/// Returns 0 when section 1 and the expected rows of sections 2 and 3 have 0 mismatches and no
/// failed call, 1 otherwise; the last line sums them up.
///
/// For testing the harness without a GPU, FP8EMU_VALIDATE_AGAINST_EMULATED=1 runs section 1 with
/// the emulator in place of the GPU (and skips sections 2-4).
int run_validate(const ValidateOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
