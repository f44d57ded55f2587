// The recipe parameters every training command takes (`fp8emu train`, `fp8emu train-lm`): TE's
// recipe fields as flags, registered once here onto a command's scaling::RecipeSet.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::cli {

/// Registers on `cmd`, writing into `recipes` (defaults: TE's, as RecipeSet holds them):
///   --amax-history-len, --amax-compute-algo (max | most_recent), --margin, --unfused-update
///   (DelayedScaling); --pow2, --amax-epsilon (CurrentScaling; the epsilon also Float8BlockScaling's);
///   --block-f32-scales (Float8BlockScaling); --mxfp8-rule (te | ocp, MXFP8BlockScaling).
/// Returns what to call once the command line is parsed: it turns the named values into the
/// records' enums and copies the shared epsilon.
/// \throws fp8emu::Error (from the returned function) naming the flag and its accepted values.
std::function<void()> add_recipe_flags(CLI::App* cmd, scaling::RecipeSet& recipes);

}  // namespace fp8emu::cli
