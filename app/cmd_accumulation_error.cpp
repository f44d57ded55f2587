// `fp8emu accumulation-error` (experiments/accumulation_error/accumulation_error.hpp).
#include <memory>

#include "accumulation_error/accumulation_error.hpp"
#include "commands.hpp"

namespace fp8emu::cli {

Command add_accumulation_error(CLI::App& app) {
  struct Options {
    experiments::AccumulationErrorConfig ae;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  experiments::AccumulationErrorConfig& ae = o->ae;
  CLI::App* accerr = app.add_subcommand(
      "accumulation-error", "FP8 GEMM relative error of the accumulations TE runs (hopper fast and promoted every 128, ada fast, fp32) vs the exact product, K = 256..k-max");
  accerr->add_option("--out", ae.out_dir, "Output folder (default results/accumulation-error-<timestamp>)");
  accerr->add_option("--m", ae.m, "Rows of A")->capture_default_str();
  accerr->add_option("--n", ae.n, "Rows of B (columns of D)")->capture_default_str();
  accerr->add_option("--k-max", ae.k_max, "Largest K (K doubles from 256)")->capture_default_str();
  accerr->add_option("--seed", ae.seed, "Seed of the random inputs")->capture_default_str();
  accerr->add_flag("--quiet", o->quiet, "No progress output");
  return {accerr, [o] {
            o->ae.progress = !o->quiet;
            experiments::run_accumulation_error(o->ae);
            return 0;
          }};
}

const CommandRegistrar registered{30, add_accumulation_error};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
