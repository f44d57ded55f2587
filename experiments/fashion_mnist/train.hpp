/// \file train.hpp
/// \brief The main experiment (`fp8emu train`): the same MLP trained on Fashion-MNIST in FP32 and
/// in emulated FP8 under one or all of TE's recipes (delayed, current, mxfp8, block), from the same
/// seed, initial weights and batch order.
///
/// Outputs in `out_dir` (each written atomically; metrics files rewritten after every epoch):
///   metrics.csv   run,epoch,train_loss,test_loss,test_accuracy,seconds
///   layers.csv    per FP8 run, epoch and layer: relative error of the layer output against its
///                 FP32 twin on the test set, saturated / underflow fractions of the input, weight
///                 and grad_output casts during the epoch, and the scales of the epoch's last casts
///                 (per-tensor recipes; empty for block recipes, whose scales are per block)
///   summary.json  {"runs": {"fp32": {...}, "fp8_<recipe>": {...}}, "config": {...}, ...}
///   curves.png    loss and accuracy per epoch for both runs (when gnuplot is installed)
///   shards.csv    with --dp-shards S > 1: per FP8 run, epoch, layer and shard the stored delayed
///                 scales of input, weight and grad_output (how far the shards' scales drift apart)
/// Determinism: identical metrics (not timings) for the same seed at any thread count, and for any
/// MPI rank count that divides --dp-shards. Under mpirun, rank 0 alone writes files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.hpp"

namespace fp8emu::experiments {

/// Folder where Debian's dataset-fashion-mnist installs the IDX files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// The experiment's settings: the shared training flags (common::RunConfig: --out, --resume, --seed,
/// --threads, --recipe, --format and the recipe parameters, --accumulation, --backend, --strict,
/// --bf16, --resident, --lr, --checkpoint-every in epochs, --dp-shards, --amax-reduction, --quiet)
/// and its own.
struct TrainConfig : common::RunConfig {
  TrainConfig() : RunConfig(1e-3f) {}
  std::string data_dir = kDefaultFashionMnistDir;
  int epochs = 10;
  int batch_size = 64;
  int train_samples = 60000;       ///< First N training images (clamped to what the file holds).
  int test_samples = 10000;        ///< First N test images.
  std::vector<int> hidden = {256, 128};
  std::string activation = "relu";
  std::string optimizer = "adam";
  /// Plot curves.png and print the summary table on stdout at the end (`bench train` turns both
  /// off; the result files are written either way).
  bool report = true;
};

/// Outcome of one run, for callers and tests.
struct RunResult {
  std::string name;                 ///< "fp32", "fp8_delayed", "fp8_current", "fp8_mxfp8", "fp8_block".
  std::vector<double> train_loss;   ///< Mean over the epoch's batches, per epoch.
  std::vector<double> test_loss;
  std::vector<double> test_accuracy;
  double seconds = 0.0;
  /// Wall-clock seconds spent in training steps (forward, backward, scale update, gradient
  /// reduction and optimizer step of each batch; no evaluation, logging or file output), and the
  /// number of steps, both counted in this process only (a resumed run counts its own epochs).
  double step_seconds = 0.0;
  long steps = 0;
};

/// Run the experiment. \return the runs in order (fp32 first, then the recipes as listed above).
/// \throws fp8emu::Error for a bad config, a missing or corrupt dataset, or an unwritable out_dir
///         (checked before any training).
std::vector<RunResult> run_train(TrainConfig cfg);

/// The checkpoint parser of --resume on its own (fuzzing and tests): reads `path` and checks its
/// checksum and structure (not the flags it was written with).
/// \return "<runs done> run(s) done, next run <i>[, after epoch <e>]".
/// \throws fp8emu::Error as run_train would for a missing or corrupt checkpoint.
std::string inspect_checkpoint(const std::string& path);

}  // namespace fp8emu::experiments
