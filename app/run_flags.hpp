// The flags every training command takes (`fp8emu train`, `fp8emu train-lm`), registered once here
// onto the command's experiments::common::RunConfig: the run's place (--out, --resume), seed and
// threads, the recipes and their TE parameters, the GEMM accumulation, where the layers run, the
// BF16 baseline, the learning rate, checkpoints, data parallelism and --quiet.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "common/run_config.hpp"

namespace fp8emu::cli {

/// The words of the help texts that differ between the commands.
struct RunFlagWords {
  std::string out_default;    ///< "results/<timestamp>"
  std::string step;           ///< what --checkpoint-every counts: "epochs", "steps"
  std::string layer_example;  ///< a per-layer --backend, "fc1=cuda,fc3=reference"
  std::string batch;          ///< what --dp-shards cuts: "each batch", "each batch of sequences"
};

/// Registers on `cmd`, writing into `cfg` (its defaults shown):
///   --out, --resume, --seed, --threads, --recipe, --format, the recipe parameters (--amax-history-len,
///   --amax-compute-algo max | most_recent, --margin, --unfused-update; --pow2, --amax-epsilon, the
///   epsilon also Float8BlockScaling's; --block-f32-scales; --mxfp8-rule te | ocp), --accumulation,
///   --backend, --strict, --resident, --bf16, --lr, --checkpoint-every, --dp-shards,
///   --amax-reduction, --quiet.
/// Returns what to call once the command line is parsed: it turns the named values into the
/// records' enums, copies the shared epsilon and sets cfg.progress.
/// \throws fp8emu::Error (from the returned function) naming the flag and its accepted values.
std::function<void()> add_run_flags(CLI::App* cmd, experiments::common::RunConfig& cfg, const RunFlagWords& words);

}  // namespace fp8emu::cli
