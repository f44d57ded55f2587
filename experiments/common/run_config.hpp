// The settings every training experiment takes (`fp8emu train`, `fp8emu train-lm`): the base of
// each experiment's config, registered as flags once (app/run_flags.cpp) and checked once here.
#pragma once

#include <cstdint>
#include <string>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::experiments::common {

struct RunConfig {
  /// \param default_lr  the experiment's learning rate unless --lr says otherwise.
  explicit RunConfig(float default_lr) : lr(default_lr) {}

  std::string out_dir;             ///< --out; empty: results/<prefix><timestamp>.
  /// --resume: continue the run whose checkpoint.bin is in this folder (also the output folder). The
  /// other flags must be the interrupted run's; the result is bit-identical to an uninterrupted run
  /// (timings aside).
  std::string resume;
  std::uint64_t seed = 1;          ///< Seed of the initial weights and of the batches.
  int threads = 0;                 ///< OpenMP threads; 0: OpenMP's default.
  std::string recipe = "delayed";  ///< "delayed", "current", "mxfp8", "block" or "all".
  std::string format;              ///< "hybrid"/"e4m3" for every recipe; empty: each recipe's TE default.
  /// Every recipe's parameters, from TE's defaults (delayed: HYBRID, history 1024, max, margin 0;
  /// current: HYBRID, no pow2, epsilon 0; mxfp8: E4M3, TE's E8M0 rule; block: E4M3, pow2 scales,
  /// epsilon 0); `recipe` selects which of them run. All are validated whichever run.
  scaling::RecipeSet recipes;
  /// GEMM accumulation of the per-tensor recipes: a tensor-core model "hopper" (default: TE on
  /// Hopper) or "ada" with TE's wrappers (fprop fast accumulation, dgrad/wgrad promoted every 128),
  /// or "fp32" (sequential) or "exact" for every GEMM.
  std::string accumulation = "hopper";
  /// Where each Linear runs (backend/select.hpp): "emulated" (default), "cuda", "reference" (FP32),
  /// for all layers or per layer ("fc1=cuda,fc2=reference"); a cuda layer that cannot run falls back
  /// to emulated with one line on stderr (same bits).
  std::string backend = "emulated";
  bool strict = false;             ///< Make a cuda fallback an error instead.
  /// Also train a BF16 run ("bf16", after "fp32"): every Linear in nn::Precision::kBf16 (bf16
  /// operands and outputs, fp32 accumulation), the baseline FP8 is usually measured against.
  bool bf16_baseline = false;
  /// How the bf16 run's GEMMs sum (nn::Linear::set_bf16_accumulation): "fp32" (default: fp32
  /// sequential sums) or a bf16 tensor-core row, "hopper-bf16" (also ampere-bf16, ada-bf16,
  /// blackwell-bf16): what the GPU's bf16 tensor cores compute.
  std::string bf16_accumulation = "fp32";
  /// How the FP32 run's GEMMs run (nn::Linear::set_fp32_accumulation): "fp32" (default: fp32
  /// operands, sequential sums) or a tf32 tensor-core row, "hopper-tf32" (also ampere-tf32,
  /// ada-tf32, blackwell-tf32): PyTorch's allow_tf32.
  std::string fp32_accumulation = "fp32";
  /// Where a run keeps its model, activations and optimizer state between steps: "auto" (default) on
  /// the GPU when every layer runs on cuda with one shard; "on" on the device of the layers' one
  /// backend (the CPU for emulated: the same step program, a check), an error with several shards or
  /// mixed backends; "off" never. Same bits.
  std::string resident = "auto";
  float lr;                        ///< Learning rate (Adam's, or SGD's).
  /// Write <out>/checkpoint.bin (atomically) every N epochs or steps of a run and at the end of each
  /// run; 0: never. A checkpoint holds the whole state (weights, optimizer moments, every scale and
  /// amax history, the generators, the metrics so far).
  int checkpoint_every = 0;
  /// Data parallelism (docs/data-parallel.md): each batch is cut into this many fixed shards, each
  /// with its own casts and quantizer state, combined in shard order; `mpirun -np N` (N dividing
  /// it) spreads them over N ranks with bit-identical results for every N. 1: one batch.
  int dp_shards = 1;
  /// Delayed scaling's amax-reduction group over the shards: "dp" (all, TE's default), "none" (each
  /// shard its own amax and scale) or "group=K" (K consecutive shards).
  std::string amax_reduction = "dp";
  bool progress = true;            ///< Progress lines on stderr (--quiet turns them off).
};

/// Largest --threads.
inline constexpr int kMaxThreads = 1024;

/// The checks of the shared flags, each error naming its flag: --lr positive and finite, --threads
/// in [0, kMaxThreads], --checkpoint-every >= 0, --bf16-accumulation fp32 or a bf16 tensor-core row,
/// --fp32-accumulation fp32 or a tf32 one. (The recipe parameters are the experiment's to
/// validate, after --format has been applied.)
/// \throws fp8emu::Error for the first that fails.
void check_run_config(const RunConfig& c);

/// The model of --bf16-accumulation. \throws fp8emu::Error for a name that is not fp32 or a bf16
/// tensor-core row.
Accumulation bf16_accumulation_of(const RunConfig& c);
/// The model of --fp32-accumulation. \throws fp8emu::Error for a name that is not fp32 or a tf32
/// tensor-core row.
Accumulation fp32_accumulation_of(const RunConfig& c);

}  // namespace fp8emu::experiments::common
