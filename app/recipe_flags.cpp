// The recipe flags of the training commands (see recipe_flags.hpp).
#include "recipe_flags.hpp"

#include <memory>
#include <string>

namespace fp8emu::cli {

std::function<void()> add_recipe_flags(CLI::App* cmd, scaling::RecipeSet& recipes) {
  struct Named {
    std::string algo = "max", mx_rule = "te";
    bool unfused = false;
  };
  auto n = std::make_shared<Named>();
  auto& delayed = recipes.get<scaling::DelayedScaling>();
  auto& current = recipes.get<scaling::CurrentScaling>();
  cmd->add_option("--amax-history-len", delayed.amax_history_len, "Delayed scaling amax_history_len")
      ->capture_default_str();
  cmd->add_option("--amax-compute-algo", n->algo, "Delayed scaling amax_compute_algo: max or most_recent")
      ->capture_default_str();
  cmd->add_option("--margin", delayed.margin, "Delayed scaling margin")->capture_default_str();
  cmd->add_flag("--unfused-update", n->unfused, "Delayed scaling: TE's unfused (Python) update path");
  cmd->add_flag("--pow2", current.use_power_2_scales, "Current scaling: power-of-2 scales");
  cmd->add_option("--amax-epsilon", current.amax_epsilon, "Current and block scaling amax_epsilon")
      ->capture_default_str();
  cmd->add_flag("--block-f32-scales", recipes.get<scaling::Float8BlockScaling>().use_f32_scales,
                "Block scaling: plain fp32 scales instead of powers of 2");
  cmd->add_option("--mxfp8-rule", n->mx_rule, "MXFP8 E8M0 scale rule: te (round up) or ocp (floor)")
      ->capture_default_str();
  return [n, &recipes] {
    auto& d = recipes.get<scaling::DelayedScaling>();
    d.fused_update = !n->unfused;
    d.amax_compute_algo = scaling::parse_amax_compute_algo(n->algo, "--amax-compute-algo");
    recipes.get<scaling::Float8BlockScaling>().amax_epsilon = recipes.get<scaling::CurrentScaling>().amax_epsilon;
    recipes.get<scaling::MXFP8BlockScaling>().rule = scaling::parse_e8m0_rule(n->mx_rule, "--mxfp8-rule");
  };
}

}  // namespace fp8emu::cli
