// Scale traces (see include/fp8emu/scaling/scale_trace.hpp).
#include "fp8emu/scaling/scale_trace.hpp"

#include <cerrno>
#include <cmath>
#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/scaling/delayed_scaling.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

std::vector<ScaleTraceRow> trace_delayed(const DelayedScaling& recipe, Format fmt, const std::vector<float>& amax) {
  recipe.validate();
  DelayedScalingState st(1, recipe.amax_history_len);
  std::vector<ScaleTraceRow> rows;
  for (std::size_t i = 0; i < amax.size(); ++i) {
    st.set_amax(0, amax[i]);
    st.update(recipe, fmt);
    rows.push_back({int(i), amax[i], st.scale(0), st.scale_inv(0)});
  }
  return rows;
}

std::vector<ScaleTraceRow> trace_current(const CurrentScaling& recipe, Format fmt, const std::vector<float>& amax) {
  FP8EMU_CHECK(std::isfinite(recipe.amax_epsilon) && recipe.amax_epsilon >= 0.0f,
               "current scaling: amax_epsilon must be finite and >= 0, got ", recipe.amax_epsilon);
  std::vector<ScaleTraceRow> rows;
  for (std::size_t i = 0; i < amax.size(); ++i) {
    const float s = core::compute_scale_from_amax(amax[i], max_finite_f32(fmt), recipe.use_power_2_scales,
                                                  recipe.amax_epsilon, FLT_MAX);
    rows.push_back({int(i), amax[i], s, 1.0f / s});
  }
  return rows;
}

std::vector<ScaleTraceRow> trace_scales(const Recipe& recipe, Format fmt, const std::vector<float>& amax) {
  return std::visit(
      [&](const auto& r) -> std::vector<ScaleTraceRow> {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, DelayedScaling>) return trace_delayed(r, fmt, amax);
        else if constexpr (std::is_same_v<R, CurrentScaling>) return trace_current(r, fmt, amax);
        else FP8EMU_FAIL("scale-trace: the ", R::kName, " recipe has per-block scales, not one per tensor");
      },
      recipe);
}

std::string trace_csv(const std::vector<ScaleTraceRow>& rows) {
  std::string out = "step,amax,scale,scale_inv\n";
  char buf[160];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%d,%.9g,%.9g,%.9g\n", r.step, double(r.amax), double(r.scale),
                  double(r.scale_inv));
    out += buf;
  }
  return out;
}

std::vector<float> parse_amax_list(const std::string& s) {
  std::vector<float> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    const std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    FP8EMU_CHECK(!tok.empty(), "--amax: empty entry at position ", out.size() + 1, " in '", excerpt(s), "'");
    char* end = nullptr;
    errno = 0;
    const float v = std::strtof(tok.c_str(), &end);  // decimals, inf, nan, hex floats; RN to fp32
    FP8EMU_CHECK(end != tok.c_str() && *end == '\0', "--amax: '", excerpt(tok), "' is not a number");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace fp8emu::scaling
