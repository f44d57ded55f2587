/// \file accumulation_error.hpp
/// \brief Experiment `fp8emu accumulation-error`: how much FP8 GEMM accuracy the tensor-core
/// accumulator costs, against the exact product, as K grows (DeepSeek-V3 §3.3.2 reports ~2 %
/// maximum relative error at K = 4096 on H800 without promotion).
///
/// For each K in 256, 512, ..., k_max and each input distribution (standard normal, and its
/// absolute value: all products positive, the worst case for truncation), A [m, K] and B [n, K] are
/// drawn from a seeded generator, quantized to E4M3 with current scaling (scale = E4M3 max / amax), and
/// multiplied with each accumulation model; errors are measured against the `exact` model on the
/// same FP8 operands, so they come from accumulation alone:
///   mean / max over elements of |D - X| / |X| (X != 0), and ||D - X||_F / ||X||_F.
/// Models: hopper_fast (FAST_ACCUM, whole K in the tensor-core chain), hopper_promote128 (TE's split
/// accumulator / CUTLASS default), ada_fast, fp32 (sequential fp32).
/// Outputs in out_dir, written atomically: accumulation_error.csv, accumulation_error.png, table.md.
/// Deterministic for a seed, whatever the thread count.
#pragma once

#include <cstdint>
#include <string>

namespace fp8emu::experiments {

struct AccumulationErrorConfig {
  std::string out_dir;  ///< Empty: results/accumulation-error-<timestamp>.
  int m = 64, n = 64;
  int k_max = 16384;    ///< K doubles from 256 up to this.
  std::uint64_t seed = 1;
  bool progress = true;
};

/// Runs the experiment and prints the table. \throws fp8emu::Error for bad sizes or an unwritable out_dir.
void run_accumulation_error(AccumulationErrorConfig cfg);

}  // namespace fp8emu::experiments
