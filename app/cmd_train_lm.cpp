// `fp8emu train-lm`: the character-level transformer experiment (experiments/char_lm/train_lm.hpp).
#include <memory>

#include "char_lm/train_lm.hpp"
#include "commands.hpp"
#include "run_flags.hpp"

namespace fp8emu::cli {

Command add_train_lm(CLI::App& app) {
  auto lm = std::make_shared<experiments::TrainLmConfig>();
  CLI::App* train_lm = app.add_subcommand(
      "train-lm", "Train a character-level transformer LM on real text in FP32 and FP8 side by side");
  train_lm->add_option("--text", lm->text, "Text file, or folder of text files (default: Debian's fortunes)")
      ->capture_default_str();
  train_lm->add_option("--steps", lm->steps, "Optimizer steps per run")->capture_default_str();
  train_lm->add_option("--batch-size", lm->batch_size, "Sequences per step")->capture_default_str();
  train_lm->add_option("--seq-len", lm->seq_len, "Tokens (bytes) per sequence")->capture_default_str();
  train_lm->add_option("--d-model", lm->d_model, "Hidden size")->capture_default_str();
  train_lm->add_option("--heads", lm->heads, "Attention heads")->capture_default_str();
  train_lm->add_option("--layers", lm->layers, "Transformer layers")->capture_default_str();
  train_lm->add_option("--ffn", lm->ffn, "MLP hidden size")->capture_default_str();
  train_lm->add_option("--norm", lm->norm, "layernorm or rmsnorm")->capture_default_str();
  train_lm->add_option("--mlp-activation", lm->mlp_activation, "gelu or swiglu")->capture_default_str();
  train_lm->add_option("--activation-dtype", lm->activation_dtype, "fp32 or bf16 (activations stored in bf16, as TE)")
      ->capture_default_str();
  train_lm->add_option("--layer-recipe", lm->layer_recipe,
                       "Per-layer recipe of the FP8 runs, e.g. l0.qkv=current,l1.fc2=block");
  train_lm->add_option("--layer-accumulation", lm->layer_accumulation,
                       "Per-layer GEMM accumulation of the FP8 runs, e.g. l0.fc1=fp32 (per-tensor recipes)");
  train_lm->add_flag("--fp8-head", lm->fp8_head, "Run the LM head in FP8 too (default: FP32, as TE practice)");
  train_lm->add_option("--eval-every", lm->eval_every, "Validation loss every N steps")->capture_default_str();
  train_lm->add_option("--eval-batches", lm->eval_batches, "Fixed validation batches")->capture_default_str();
  train_lm->add_option("--sample-chars", lm->sample_chars, "Length of each run's generated sample")
      ->capture_default_str();
  const std::function<void()> run_flags = add_run_flags(
      train_lm, *lm, {"results/lm-<timestamp>", "steps", "l0.qkv=cuda,head=reference (l0.qkv, l0.proj, l0.fc1, "
                      "l0.fc2, ..., head)", "each batch of sequences"});
  return {train_lm, [lm, run_flags] {
            run_flags();
            experiments::run_train_lm(*lm);
            return 0;
          }};
}

const CommandRegistrar registered{130, add_train_lm};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
