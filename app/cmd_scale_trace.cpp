// `fp8emu scale-trace`: an amax sequence through one per-tensor recipe (fp8emu/scaling/scale_trace.hpp).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "fp8emu/scaling/scale_trace.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {
namespace {

struct ScaleTraceOptions {
  std::string recipe, format = "e4m3", algo = "max", amax;
  bool unfused = false;
  scaling::DelayedScaling delayed;
  scaling::CurrentScaling current;
};

// Prints the trace as CSV. \throws fp8emu::Error on a bad flag or amax list.
int run_scale_trace(ScaleTraceOptions o) {
  Format fmt = Format::kE4M3;
  FP8EMU_CHECK(parse_fp8_format(o.format, &fmt), "unknown --format '", o.format, "' (accepted: ", fp8_format_names(), ")");
  const std::vector<float> amax = scaling::parse_amax_list(o.amax);
  o.delayed.amax_compute_algo = scaling::parse_amax_compute_algo(o.algo, "--algo");
  o.delayed.fused_update = !o.unfused;
  o.delayed.fp8_format = scaling::RecipeFormat::kE4M3;  // the trace's format is given by --format
  const std::optional<scaling::Recipe> picked = scaling::find_recipe(o.recipe, {o.delayed, o.current});
  FP8EMU_CHECK(picked && scaling::uses_per_tensor_scales(*picked), "scale-trace: unknown --recipe '", o.recipe,
               "' (accepted: delayed, current; mxfp8 and block scales are per block)");
  const std::vector<scaling::ScaleTraceRow> rows = scaling::trace_scales(*picked, fmt, amax);
  std::fputs(scaling::trace_csv(rows).c_str(), stdout);
  return 0;
}

}  // namespace

Command add_scale_trace(CLI::App& app) {
  auto o = std::make_shared<ScaleTraceOptions>();
  CLI::App* trace = app.add_subcommand(
      "scale-trace", "Feed an amax sequence to one per-tensor recipe and print how the scale evolves (CSV)");
  trace->add_option("--recipe", o->recipe, "delayed or current")->required();
  trace->add_option("--format", o->format, "Element format whose max the scale targets: e4m3 or e5m2")
      ->capture_default_str();
  trace->add_option("--history-len", o->delayed.amax_history_len, "Delayed: amax_history_len")
      ->capture_default_str();
  trace->add_option("--algo", o->algo, "Delayed: amax_compute_algo, max or most_recent")->capture_default_str();
  trace->add_option("--margin", o->delayed.margin, "Delayed: margin")->capture_default_str();
  trace->add_flag("--unfused", o->unfused, "Delayed: TE's unfused update path (always rolls)");
  trace->add_flag("--pow2", o->current.use_power_2_scales, "Current: power-of-2 scales");
  trace->add_option("--epsilon", o->current.amax_epsilon, "Current: amax_epsilon")->capture_default_str();
  trace->add_option("--amax", o->amax, "Comma-separated amax values (decimal, inf, nan, hex floats)")
      ->required();
  return {trace, [o] { return run_scale_trace(*o); }};
}

const CommandRegistrar registered{20, add_scale_trace};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
