// The fp8emu command-line tool: one executable, one subcommand per job.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "fashion_mnist/train.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/util/error.hpp"

int main(int argc, char** argv) {
  using namespace fp8emu;
  CLI::App app{"fp8emu: bit-exact FP8 emulation and FP8-vs-FP32 training experiments"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FP8EMU_VERSION_STRING);

  experiments::TrainConfig cfg;
  std::string fmt = "hybrid", algo = "max";
  bool quiet = false;
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
  train->add_option("--recipe", cfg.recipe, "FP8 scaling recipe: delayed")->capture_default_str();
  train->add_option("--format", fmt, "FP8 formats: hybrid (E4M3 fwd, E5M2 bwd) or e4m3")
      ->capture_default_str();
  train->add_option("--amax-history-len", cfg.delayed.amax_history_len, "Delayed scaling amax_history_len")
      ->capture_default_str();
  train->add_option("--amax-compute-algo", algo, "Delayed scaling amax_compute_algo: max or most_recent")
      ->capture_default_str();
  train->add_option("--margin", cfg.delayed.margin, "Delayed scaling margin")->capture_default_str();
  train->add_option("--hidden", cfg.hidden, "Hidden layer widths")->delimiter(',')->capture_default_str();
  train->add_option("--activation", cfg.activation, "relu or gelu")->capture_default_str();
  train->add_option("--optimizer", cfg.optimizer, "adam or sgd (momentum 0.9)")->capture_default_str();
  train->add_option("--lr", cfg.lr, "Learning rate")->capture_default_str();
  train->add_flag("--quiet", quiet, "No progress output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*train) {
      if (fmt == "hybrid") cfg.delayed.fp8_format = scaling::Fp8Recipe::kHybrid;
      else if (fmt == "e4m3") cfg.delayed.fp8_format = scaling::Fp8Recipe::kE4M3;
      else FP8EMU_FAIL("unknown --format '", fmt, "' (accepted: hybrid, e4m3)");
      if (algo == "max") cfg.delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMax;
      else if (algo == "most_recent") cfg.delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMostRecent;
      else FP8EMU_FAIL("unknown --amax-compute-algo '", algo, "' (accepted: max, most_recent)");
      cfg.progress = !quiet;
      experiments::run_train(cfg);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8emu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
