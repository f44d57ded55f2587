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

#include "fp8emu/scaling/delayed_scaling.hpp"

namespace fp8emu::experiments {

/// Folder where Debian's dataset-fashion-mnist installs the IDX files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct TrainConfig {
  std::string data_dir = kDefaultFashionMnistDir;
  std::string out_dir;             ///< Empty: results/<timestamp>.
  int epochs = 10;
  int batch_size = 64;
  int train_samples = 60000;       ///< First N training images (clamped to what the file holds).
  int test_samples = 10000;        ///< First N test images.
  std::uint64_t seed = 1;
  int threads = 0;                 ///< 0: OpenMP default.
  std::string recipe = "delayed";  ///< "delayed", "current", "mxfp8", "block" or "all".
  std::string format;              ///< "hybrid"/"e4m3" for every recipe; empty: each recipe's TE default.
  std::vector<int> hidden = {256, 128};
  std::string activation = "relu";
  /// GEMM accumulation of the per-tensor recipes: a tensor-core model "hopper" (default: TE on
  /// Hopper) or "ada" with TE's wrappers (fprop fast accumulation, dgrad/wgrad promoted every 128),
  /// or "fp32" (sequential) or "exact" for every GEMM.
  std::string accumulation = "hopper";
  /// Where each Linear layer runs (backend/select.hpp): "emulated" (default), "cuda",
  /// "reference" (FP32), for all layers or per layer as "fc1=cuda,fc2=reference" (layers fc1..fcN).
  /// A cuda layer that cannot run falls back to emulated with one line on stderr (same bits).
  std::string backend = "emulated";
  /// Make a cuda fallback an error instead.
  bool strict = false;
  /// Also train a BF16 run ("bf16", after "fp32"): every Linear in nn::Precision::kBf16 (bf16
  /// operands and outputs, fp32 accumulation), the baseline FP8 is usually measured against.
  bool bf16_baseline = false;
  /// Where a run keeps its model, activations and optimizer state between steps (nn::Mlp::to_device):
  /// "auto" (default) on the GPU when every layer runs on cuda with one shard; "on" on the device of
  /// the layers' one backend (the CPU for emulated: the same step program, a check), an error with
  /// several shards or mixed backends; "off" never (the host layers, each cuda call copying its
  /// operands). Runs it does not take (--unfused-update) run on the host with a note. Same bits.
  std::string resident = "auto";
  std::string optimizer = "adam";
  float lr = 1e-3f;
  /// Every recipe's parameters, from TE's defaults (delayed: HYBRID, history 1024, max, margin 0;
  /// current: HYBRID, no pow2, epsilon 0; mxfp8: E4M3, TE's E8M0 rule; block: E4M3, pow2 scales,
  /// epsilon 0); `recipe` selects which of them run. All are validated whichever run.
  scaling::RecipeSet recipes;
  bool progress = true;
  /// Plot curves.png and print the summary table on stdout at the end (`bench train` turns both
  /// off; the result files are written either way).
  bool report = true;
  /// Write <out>/checkpoint.bin (atomically) after every N epochs of a run and at the end of each
  /// run; 0: never. A checkpoint holds the whole state: weights, optimizer moments, every scale and
  /// amax history, the shuffle generator and order, and the metrics so far.
  int checkpoint_every = 0;
  /// Continue the run whose checkpoint.bin is in this folder (also the output folder). The other
  /// flags must be the ones of the interrupted run; the result is bit-identical to an uninterrupted
  /// run (timings aside).
  std::string resume;
  /// Data parallelism (docs/data-parallel.md): each batch is cut into this many fixed shards, each
  /// with its own casts and quantizer state, combined in shard order; `mpirun -np N` (N dividing
  /// it) spreads them over N ranks with bit-identical results for every N. 1: today's single batch.
  int dp_shards = 1;
  /// Delayed scaling's amax-reduction group over the shards: "dp" (all, TE's default), "none" (each
  /// shard its own amax and scale) or "group=K" (K consecutive shards).
  std::string amax_reduction = "dp";
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
