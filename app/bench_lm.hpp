// `fp8emu bench lm`: the training step of `fp8emu train-lm` in FP32, BF16 and every FP8 recipe.
#pragma once

#include <ostream>
#include <string>

namespace fp8emu::cli {

/// What `bench lm` trains: experiments::TrainLmConfig with these fields (everything else at the
/// experiment's defaults).
struct BenchLmOptions {
  std::string text;            ///< Corpus; empty: train-lm's default (Debian's fortunes).
  int steps = 6;               ///< Training steps per run (>= 2; the first is left out of the mean).
  int batch_size = 16, seq_len = 64, d_model = 128, heads = 4, layers = 2, ffn = 512;
  std::string activation_dtype = "bf16";
  std::string backend = "emulated";  ///< emulated | cuda (device-resident on the GPU), for every layer.
  /// cuda: FP32 and BF16 GEMMs on cuBLASLt (backend::set_library_gemms; not bit-identical), as a
  /// user's FP32 or BF16 training would run them; false: fp8emu's exact kernels.
  bool library_gemms = false;
  int threads = 0;
  /// Trainings of all the runs, one after the other; each row keeps its best ms per step (the
  /// runs are bit-identical, only their timings differ; the first training also warms the process).
  int repeat = 2;
};

/// Runs experiments::run_train_lm `repeat` times with --bf16 and --recipe all, without evaluation
/// (TrainLmConfig::evaluate = false; results in a temporary folder, removed afterwards), and prints
/// a Markdown table: per run (fp32, bf16, fp8_delayed, fp8_current, fp8_mxfp8, fp8_block) the mean
/// milliseconds of a training step over steps 2..N (the first includes a device's set-up), the best
/// of the repeats, and the speed-ups against the fp32 and the bf16 runs; then one line per FP8
/// recipe, `lm_step_speedup_fp8_<recipe>_vs_bf16: X` (BF16 step time over the recipe's). On the
/// emulated backend with OpenBLAS in the build, the FP32 and BF16 runs are trained again with
/// OpenBLAS's SGEMM for their GEMMs (backend::set_cpu_library_gemm; not bit-identical: a speed
/// baseline), giving the rows fp32_openblas and bf16_openblas and, last, one line per FP8 recipe
/// `lm_step_fp8_<recipe>_over_fp32_openblas: X` (the recipe's step time over that FP32 step's).
/// Restores the library-GEMM switches it found. \return 0. \throws fp8emu::Error for steps < 2, repeat < 1, a
/// backend other than emulated or cuda, --library-gemms without cuda, or as run_train_lm (bad
/// sizes, a missing corpus, no GPU for cuda).
int run_bench_lm(const BenchLmOptions& o, std::ostream& out);

}  // namespace fp8emu::cli
