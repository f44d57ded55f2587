// `fp8emu train`: the Fashion-MNIST experiment (experiments/fashion_mnist/train.hpp).
#include <memory>
#include <string>

#include "commands.hpp"
#include "recipe_flags.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fashion_mnist/train.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {

Command add_train(CLI::App& app) {
  struct Options {
    experiments::TrainConfig cfg;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  experiments::TrainConfig& cfg = o->cfg;
  CLI::App* train = app.add_subcommand(
      "train", "Train the same MLP on Fashion-MNIST in FP32 and in emulated FP8, side by side");
  train->add_option("--data-dir", cfg.data_dir, "Folder with the Fashion-MNIST IDX files")
      ->capture_default_str();
  train->add_option("--out", cfg.out_dir, "Output folder (default results/<timestamp>)");
  train->add_option("--epochs", cfg.epochs, "Epochs per run")->capture_default_str();
  train->add_option("--batch-size", cfg.batch_size, "Mini-batch size")->capture_default_str();
  train->add_option("--train-samples", cfg.train_samples, "Use the first N training images")
      ->capture_default_str();
  train->add_option("--test-samples", cfg.test_samples, "Use the first N test images")
      ->capture_default_str();
  train->add_option("--seed", cfg.seed, "Seed of the initial weights and batch order")
      ->capture_default_str();
  train->add_option("--threads", cfg.threads, "OpenMP threads (0: OpenMP default)")
      ->capture_default_str();
  train->add_option("--recipe", cfg.recipe, "FP8 recipe: " + recipe_list() + ", or all (FP32 and every recipe)")
      ->capture_default_str();
  train->add_option("--format", cfg.format,
                    "FP8 formats for every recipe: hybrid (E4M3 fwd, E5M2 bwd) or e4m3 "
                    "(default: TE's per recipe, hybrid for delayed/current, e4m3 for mxfp8/block)");
  const std::function<void()> recipe_flags = add_recipe_flags(train, cfg.recipes);
  train->add_option("--hidden", cfg.hidden, "Hidden layer widths")->delimiter(',')->capture_default_str();
  train->add_option("--activation", cfg.activation, "relu or gelu")->capture_default_str();
  train->add_option("--accumulation", cfg.accumulation,
                    "FP8 GEMM accumulation (delayed/current): " + emu::accumulation_names() + " (TE's fast/split wrappers)")
      ->capture_default_str();
  train->add_option("--optimizer", cfg.optimizer, "adam or sgd (momentum 0.9)")->capture_default_str();
  train->add_option("--lr", cfg.lr, "Learning rate")->capture_default_str();
  train->add_flag("--quiet", o->quiet, "No progress output");
  train->add_option("--backend", cfg.backend,
                    "Where the Linear layers run: emulated, cuda (falls back to emulated without a usable GPU) or "
                    "reference (FP32); for all layers or per layer, e.g. fc1=cuda,fc3=reference")
      ->capture_default_str();
  train->add_flag("--strict", cfg.strict, "With --backend cuda: fail instead of falling back to the emulator");
  train->add_flag("--bf16", cfg.bf16_baseline,
                  "Also train a BF16 run (every Linear with bf16 operands and outputs, fp32 accumulation)");
  train->add_option("--resident", cfg.resident,
                    "Keep each run's model and optimizer on the device between steps: auto (on the GPU when every "
                    "layer runs on cuda), on (also on the CPU with --backend emulated: the same step program), off. "
                    "Same results")
      ->capture_default_str();
  train->add_option("--checkpoint-every", cfg.checkpoint_every,
                    "Write <out>/checkpoint.bin every N epochs and at the end of each run (0: never)")
      ->capture_default_str();
  train->add_option("--resume", cfg.resume, "Continue the interrupted run in this folder (same flags as that run)");
  train->add_option("--dp-shards", cfg.dp_shards,
                    "Data parallelism: cut each batch into S fixed shards (each with its own casts and scales); "
                    "mpirun -np N with N dividing S gives the same bits for every N")
      ->capture_default_str();
  train->add_option("--amax-reduction", cfg.amax_reduction,
                    "Delayed scaling's amax-reduction group over the shards: dp (all, TE's default), none (each "
                    "shard its own amax and scale) or group=K (K consecutive shards)")
      ->capture_default_str();
  return {train, [o, recipe_flags] {
            experiments::TrainConfig& c = o->cfg;
            recipe_flags();
            c.progress = !o->quiet;
            experiments::run_train(c);
            return 0;
          }};
}

const CommandRegistrar registered{10, add_train};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
