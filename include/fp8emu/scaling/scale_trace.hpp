/// \file scale_trace.hpp
/// \brief `fp8emu scale-trace`: feed an amax sequence to one per-tensor recipe and report how the
/// scale evolves (teaching and debugging TE's scale arithmetic).
#pragma once

#include <string>
#include <vector>

#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::scaling {

/// One row of a trace: the step (from 0), the amax as fp32, the scale after that step's update
/// (current scaling: the scale computed from that amax), and RN(1/scale).
struct ScaleTraceRow {
  int step;
  float amax, scale, scale_inv;
};

/// Delayed scaling from TE's initial state (scale 1, zero history): each amax is written into the
/// staging slot (as TE's amax reduction writes the reduced value back) and the update runs.
std::vector<ScaleTraceRow> trace_delayed(const DelayedScaling& recipe, Format fmt, const std::vector<float>& amax);

/// Current scaling: each row is compute_scale_from_amax(amax, fp8_max, pow2, epsilon, FLT_MAX).
std::vector<ScaleTraceRow> trace_current(const CurrentScaling& recipe, Format fmt, const std::vector<float>& amax);

/// The trace of a per-tensor recipe: trace_delayed or trace_current of the recipe it holds.
/// \throws fp8emu::Error for a recipe without per-tensor scales (MXFP8, block: scales per block).
std::vector<ScaleTraceRow> trace_scales(const Recipe& recipe, Format fmt, const std::vector<float>& amax);

/// CSV with header `step,amax,scale,scale_inv`, every number printed with C's `%.9g`.
std::string trace_csv(const std::vector<ScaleTraceRow>& rows);

/// Parse a comma-separated amax list: decimals, `inf`, `nan` and hex floats, each rounded to fp32.
/// \throws fp8emu::Error naming the entry that is not a number, or an empty list.
std::vector<float> parse_amax_list(const std::string& s);

}  // namespace fp8emu::scaling
