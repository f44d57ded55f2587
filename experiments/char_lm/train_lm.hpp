// `fp8emu train-lm`: a small decoder-only transformer trained on characters (bytes) of real text,
// in FP32 and in FP8 side by side from the same initial weights and batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.hpp"

namespace fp8emu::experiments {

/// The experiment's settings: the shared training flags (common::RunConfig, as `fp8emu train`
/// takes them; --checkpoint-every in steps, --backend per layer l<i>.qkv, l<i>.proj, l<i>.fc1,
/// l<i>.fc2, head) and its own.
struct TrainLmConfig : common::RunConfig {
  TrainLmConfig() : RunConfig(3e-3f) {}
  /// A text file, or a folder whose regular files (sorted by name, `.dat` index files and
  /// symbolic links skipped) are concatenated. Default: Debian's `fortunes` package.
  std::string text = "/usr/share/games/fortunes";
  int steps = 1200;            ///< Optimizer steps per run.
  int batch_size = 16;         ///< Sequences per step.
  int seq_len = 64;            ///< Tokens per sequence.
  int d_model = 128;
  int heads = 4;
  int layers = 2;
  int ffn = 512;               ///< MLP hidden size.
  std::string norm = "layernorm";        ///< "layernorm" | "rmsnorm".
  std::string mlp_activation = "gelu";   ///< "gelu" | "swiglu".
  std::string activation_dtype = "fp32"; ///< "fp32" | "bf16" (TE's usual activations).
  /// Per-layer recipe of the FP8 runs, "l0.fc1=current,head=delayed" (names as --backend); layers
  /// not named use the run's recipe.
  std::string layer_recipe;
  /// Per-layer accumulation of the FP8 runs, "l1.fc2=fp32,..." (per-tensor recipes only).
  std::string layer_accumulation;
  /// The LM head runs FP32 unless this is set (TE practice: first and last layers stay in higher
  /// precision); per-layer --backend can still choose for it when set.
  bool fp8_head = false;
  int eval_every = 100;        ///< Validation loss every N steps (and at the end).
  int eval_batches = 8;        ///< Fixed validation batches (same for every run).
  double val_fraction = 0.1;   ///< The last fraction of the corpus is the validation split.
  int sample_chars = 300;      ///< Length of the sample generated per run (temperature 0.8).
  /// false: the training steps alone, for benchmarks (`fp8emu bench gpu`): no validation loss,
  /// layers.csv rows, FP32 twins or sample (metrics.csv has its header only; summary.json's losses are
  /// 0). A non-finite training loss still ends the run as diverged. Not a command-line flag.
  bool evaluate = true;
};

struct LmRunResult {
  std::string name;
  double final_val_loss = 0.0;
  double final_train_loss = 0.0;
  /// Seconds in this process's training steps (no evaluation, checkpoint or copy to the host),
  /// their count, and the first step's seconds alone (it includes a device's set-up).
  double step_seconds = 0.0;
  long timed_steps = 0;
  double first_step_seconds = 0.0;
};

/// Trains FP32 and the FP8 recipe(s), writing metrics.csv, layers.csv, samples.txt, summary.json
/// and curves.png (and shards.csv with --dp-shards > 1: every shard's stored delayed scales per
/// evaluation) to the output folder (atomically; under mpirun, rank 0 alone writes). \throws fp8emu::Error on bad flags, a missing,
/// empty or too-short corpus, a corrupt or mismatched checkpoint; nothing is written before the
/// configuration and the corpus are known to be good.
std::vector<LmRunResult> run_train_lm(TrainLmConfig cfg);

/// What run_train_lm reads before training, on its own (fuzzing and tests):
/// the corpus at `text` as loaded for --seq-len and --val-fraction (their ranges checked as by
/// run_train_lm), and a checkpoint.bin as --resume reads it (structure and checksum; the flags it was
/// written with are not compared). \throws fp8emu::Error exactly as run_train_lm would.
struct LmCorpusInfo {
  std::size_t files = 0, train_bytes = 0, val_bytes = 0;
  int vocab = 0;  ///< distinct bytes
};
LmCorpusInfo inspect_lm_corpus(const std::string& text, int seq_len, double val_fraction);
/// \return "<runs done> run(s) done, next run <i>[, at step <s>]".
std::string inspect_lm_checkpoint(const std::string& path);

}  // namespace fp8emu::experiments
