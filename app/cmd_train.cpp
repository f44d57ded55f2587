// `fp8emu train`: the Fashion-MNIST experiment (experiments/fashion_mnist/train.hpp).
#include <memory>
#include <string>

#include "commands.hpp"
#include "run_flags.hpp"
#include "fashion_mnist/train.hpp"

namespace fp8emu::cli {

Command add_train(CLI::App& app) {
  auto cfg = std::make_shared<experiments::TrainConfig>();
  CLI::App* train = app.add_subcommand(
      "train", "Train the same MLP on Fashion-MNIST in FP32 and in emulated FP8, side by side");
  train->add_option("--data-dir", cfg->data_dir, "Folder with the Fashion-MNIST IDX files")->capture_default_str();
  train->add_option("--epochs", cfg->epochs, "Epochs per run")->capture_default_str();
  train->add_option("--batch-size", cfg->batch_size, "Mini-batch size")->capture_default_str();
  train->add_option("--train-samples", cfg->train_samples, "Use the first N training images")->capture_default_str();
  train->add_option("--test-samples", cfg->test_samples, "Use the first N test images")->capture_default_str();
  train->add_option("--hidden", cfg->hidden, "Hidden layer widths")->delimiter(',')->capture_default_str();
  train->add_option("--activation", cfg->activation, "relu or gelu")->capture_default_str();
  train->add_option("--optimizer", cfg->optimizer, "adam or sgd (momentum 0.9)")->capture_default_str();
  const std::function<void()> run_flags =
      add_run_flags(train, *cfg, {"results/<timestamp>", "epochs", "fc1=cuda,fc3=reference", "each batch"});
  return {train, [cfg, run_flags] {
            run_flags();
            experiments::run_train(*cfg);
            return 0;
          }};
}

const CommandRegistrar registered{10, add_train};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
