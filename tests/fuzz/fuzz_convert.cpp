// libFuzzer target: `fp8emu convert` input (run_convert) from a raw file or an .npy file. Byte 0
// picks the input type (raw with --from, or .npy), byte 1 the output type, byte 2 the options
// (--scale, --policy, --rounding); the rest is the input file. Every outcome is status 0 with the
// output written, or status 2 with one `fp8emu convert: error:` line that is fp8emu's own message
// (never a C++ library exception such as std::bad_alloc or a std::sto* failure).
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cmd_convert.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

namespace {
const char* const kTypes[] = {"float32", "float16", "bfloat16", "e4m3", "e5m2", "e2m1", "e2m3",
                              "e3m2fn", "e8m0", "e4m3fnuz", "e5m2fnuz", "bogus"};
const char* const kScales[] = {"", "2", "0.5", "1e-30", "3e38", "nan"};
const char* const kPolicies[] = {"", "cuda-nosat", "ml_dtypes", "pytorch"};
const char* const kRoundings[] = {"", "zero", "up", "stochastic"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  static fuzz::InputFile in("convert");
  static const std::string dir = fuzz::scratch_dir();
  static const std::string npy_in = [] {  // an .npy name for the in-memory file
    const std::string p = fuzz::scratch_dir() + "/in.npy";
    ::unlink(p.c_str());
    if (::symlink(in.path().c_str(), p.c_str()) != 0) std::abort();
    return p;
  }();
  in.set(data + 3, size - 3);
  const std::size_t ntypes = sizeof kTypes / sizeof kTypes[0];
  const bool as_npy = data[0] & 0x80;
  cli::ConvertOptions o;
  o.in = as_npy ? npy_in : in.path();
  if (!as_npy || (data[0] & 0x40)) o.from = kTypes[(data[0] & 0x3F) % ntypes];
  o.to = kTypes[data[1] % ntypes];
  o.out = dir + ((data[1] & 0x80) ? "/out.npy" : "/out.bin");
  o.scale = kScales[data[2] % 6];
  o.policy = kPolicies[(data[2] >> 3) % 4];
  o.rounding = kRoundings[(data[2] >> 5) % 4];
  if (o.rounding == "stochastic") o.seed = "7";
  o.amax = data[2] & 0x80;
  std::ostringstream out, err;
  const int rc = cli::run_convert(o, out, err);
  fuzz::require(rc == 0 || rc == 2, "exit status");
  const std::string e = err.str();
  if (rc == 2) {
    const std::string prefix = "fp8emu convert: error: ";
    fuzz::require(e.rfind(prefix, 0) == 0 && e.find('\n') == e.size() - 1, "one error line");
    // fp8emu's messages start with a path, a flag or a word of their own; a C++ library
    // exception's what() starts with its own name.
    const std::string what = e.substr(prefix.size());
    for (const char* leak : {"std::", "basic_string", "bad_alloc", "sto", "vector", "filesystem error", "map::at"})
      fuzz::require(what.rfind(leak, 0) != 0, e.c_str());
  } else {
    fuzz::require(e.empty() && ::access(o.out.c_str(), F_OK) == 0, "status 0 writes the output");
  }
  return 0;
}
