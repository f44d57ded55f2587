// libFuzzer target: the --amax list of `fp8emu scale-trace` (scaling::parse_amax_list) and the
// traces of the delayed and current recipes over what it accepts (both FP8 formats). Every scale a
// trace reports is positive (TE never produces a zero or negative scale) and its CSV has one row
// per amax.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8emu/scaling/scale_trace.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  std::vector<float> amax;
  try {
    amax = scaling::parse_amax_list(s);
  } catch (const Error& e) {
    fuzz::require_one_line(e.what());
    return 0;
  }
  fuzz::require(!amax.empty(), "accepted an empty list");
  scaling::DelayedScaling delayed;
  delayed.amax_history_len = 1 + int(size % 16);
  scaling::CurrentScaling current;
  current.use_power_2_scales = size % 2 == 1;
  for (Format f : {Format::kE4M3, Format::kE5M2})
    for (const scaling::Recipe& r : {scaling::Recipe(delayed), scaling::Recipe(current)}) {
      const std::vector<scaling::ScaleTraceRow> rows = scaling::trace_scales(r, f, amax);
      fuzz::require(rows.size() == amax.size(), "one row per amax");
      for (const auto& row : rows) fuzz::require(!(row.scale <= 0.0f), "scale <= 0");
      const std::string csv = scaling::trace_csv(rows);
      std::size_t lines = 0;
      for (char c : csv) lines += c == '\n';
      fuzz::require(lines == rows.size() + 1, "CSV rows");
    }
  return 0;
}
