// libFuzzer target: the row files of `fp8emu mma-check` (run_mma_check). Byte 0 picks the format,
// the output type and the tensor-core model; the rest is split at NUL bytes into the a, b, d and
// (optional) c files. Every outcome is an exit status 0 (all rows match), 1 (mismatches) or 2 (bad
// input, one error line); nothing may throw.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cmd_mma_check.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static fuzz::InputFile files[4] = {fuzz::InputFile("a"), fuzz::InputFile("b"), fuzz::InputFile("d"),
                                     fuzz::InputFile("c")};
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> v;
    for (const AccumulationModel& m : kAccumulationModels)
      if (m.datapath == Datapath::kTensorCore) v.push_back(m.name);
    v.push_back("volta");  // not a model: an error
    return v;
  }();
  std::vector<std::string> parts(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == 0 && parts.size() < 4) parts.emplace_back();
    else parts.back() += char(data[i]);
  }
  for (std::size_t k = 0; k < 4; ++k) {
    const std::string& s = k < parts.size() ? parts[k] : std::string();
    files[k].set(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  }
  cli::MmaCheckOptions o;
  o.format = (data[0] & 1) ? "e5m2" : "e4m3";
  o.output = (data[0] & 2) ? "fp16" : "fp32";
  o.arch = archs[(data[0] >> 2) % archs.size()];
  o.a = files[0].path();
  o.b = files[1].path();
  o.d = files[2].path();
  if (parts.size() == 4) o.c = files[3].path();
  std::ostringstream out, err;
  const int rc = cli::run_mma_check(o, out, err);
  fuzz::require(rc == 0 || rc == 1 || rc == 2, "exit status");
  fuzz::require((rc == 2) == !err.str().empty(), "an error line exactly when the status is 2");
  if (rc == 2) fuzz::require_one_line(err.str().substr(0, err.str().size() - 1));
  return 0;
}
