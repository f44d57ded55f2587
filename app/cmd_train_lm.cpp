// `fp8emu train-lm`: the character-level transformer experiment (experiments/char_lm/train_lm.hpp).
#include <memory>

#include "char_lm/train_lm.hpp"
#include "commands.hpp"
#include "recipe_flags.hpp"
#include "fp8emu/emulation/gemm_models.hpp"

namespace fp8emu::cli {

Command add_train_lm(CLI::App& app) {
  struct Options {
    experiments::TrainLmConfig lm;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  experiments::TrainLmConfig& lm = o->lm;
  CLI::App* train_lm = app.add_subcommand(
      "train-lm", "Train a character-level transformer LM on real text in FP32 and FP8 side by side");
  train_lm->add_option("--text", lm.text, "Text file, or folder of text files (default: Debian's fortunes)")
      ->capture_default_str();
  train_lm->add_option("--out", lm.out_dir, "Output folder (default results/lm-<timestamp>)");
  train_lm->add_option("--steps", lm.steps, "Optimizer steps per run")->capture_default_str();
  train_lm->add_option("--batch-size", lm.batch_size, "Sequences per step")->capture_default_str();
  train_lm->add_option("--seq-len", lm.seq_len, "Tokens (bytes) per sequence")->capture_default_str();
  train_lm->add_option("--d-model", lm.d_model, "Hidden size")->capture_default_str();
  train_lm->add_option("--heads", lm.heads, "Attention heads")->capture_default_str();
  train_lm->add_option("--layers", lm.layers, "Transformer layers")->capture_default_str();
  train_lm->add_option("--ffn", lm.ffn, "MLP hidden size")->capture_default_str();
  train_lm->add_option("--norm", lm.norm, "layernorm or rmsnorm")->capture_default_str();
  train_lm->add_option("--mlp-activation", lm.mlp_activation, "gelu or swiglu")->capture_default_str();
  train_lm->add_option("--activation-dtype", lm.activation_dtype, "fp32 or bf16 (activations stored in bf16, as TE)")
      ->capture_default_str();
  train_lm->add_option("--recipe", lm.recipe, "FP8 recipe: " + recipe_list() + ", or all")->capture_default_str();
  train_lm->add_option("--format", lm.format, "hybrid or e4m3 (default: each recipe's TE default)");
  const std::function<void()> recipe_flags = add_recipe_flags(train_lm, lm.recipes);
  train_lm->add_option("--accumulation", lm.accumulation, "FP8 GEMM accumulation model: " + emu::accumulation_names())->capture_default_str();
  train_lm->add_option("--backend", lm.backend,
                       "emulated, cuda or reference, for all or per layer (l0.qkv, l0.proj, l0.fc1, l0.fc2, ..., head)")
      ->capture_default_str();
  train_lm->add_option("--layer-recipe", lm.layer_recipe,
                       "Per-layer recipe of the FP8 runs, e.g. l0.qkv=current,l1.fc2=block");
  train_lm->add_option("--layer-accumulation", lm.layer_accumulation,
                       "Per-layer GEMM accumulation of the FP8 runs, e.g. l0.fc1=fp32 (per-tensor recipes)");
  train_lm->add_flag("--strict", lm.strict, "With --backend cuda: fail instead of falling back to the emulator");
  train_lm->add_option("--resident", lm.resident,
                       "Keep each run's model and Adam state on the device between steps: auto (on the GPU when every "
                       "layer runs on cuda), on (also on the CPU with --backend emulated: the same step program), "
                       "off. Same results")
      ->capture_default_str();
  train_lm->add_flag("--fp8-head", lm.fp8_head, "Run the LM head in FP8 too (default: FP32, as TE practice)");
  train_lm->add_flag("--bf16", lm.bf16_baseline,
                     "Also train a BF16 run (every Linear with bf16 operands and outputs, fp32 accumulation), "
                     "the baseline FP8 is measured against");
  train_lm->add_option("--lr", lm.lr, "Adam learning rate")->capture_default_str();
  train_lm->add_option("--seed", lm.seed, "Seed of the initial weights and the batches")->capture_default_str();
  train_lm->add_option("--eval-every", lm.eval_every, "Validation loss every N steps")->capture_default_str();
  train_lm->add_option("--eval-batches", lm.eval_batches, "Fixed validation batches")->capture_default_str();
  train_lm->add_option("--sample-chars", lm.sample_chars, "Length of each run's generated sample")->capture_default_str();
  train_lm->add_option("--threads", lm.threads, "OpenMP threads (0: default)")->capture_default_str();
  train_lm->add_option("--checkpoint-every", lm.checkpoint_every, "Write checkpoint.bin every N steps (0: never)")
      ->capture_default_str();
  train_lm->add_option("--resume", lm.resume, "Continue the run whose checkpoint.bin is in this folder");
  train_lm->add_option("--dp-shards", lm.dp_shards,
                       "Data parallelism: cut each batch of sequences into S fixed shards (each with its own casts "
                       "and scales); mpirun -np N with N dividing S gives the same bits for every N")
      ->capture_default_str();
  train_lm->add_option("--amax-reduction", lm.amax_reduction,
                       "Delayed scaling's amax-reduction group over the shards: dp (all, TE's default), none (each "
                       "shard its own amax and scale) or group=K (K consecutive shards)")
      ->capture_default_str();
  train_lm->add_flag("--quiet", o->quiet, "No progress output");
  return {train_lm, [o, recipe_flags] {
            recipe_flags();
            o->lm.progress = !o->quiet;
            experiments::run_train_lm(o->lm);
            return 0;
          }};
}

const CommandRegistrar registered{130, add_train_lm};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
