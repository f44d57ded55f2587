// `fp8emu compare` (see cmd_compare.hpp).
#include "cmd_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {

int run_compare(const std::string& x, const std::string& y, std::ostream& out, std::ostream& err) {
  try {
    const io::NpyArray X = io::read_npy(x), Y = io::read_npy(y);
    FP8EMU_CHECK(X.dtype == "<f4" && Y.dtype == "<f4", "compare: both arrays must be float32, got ", X.dtype,
                 " and ", Y.dtype);
    auto shape_str = [](const std::vector<std::size_t>& s) {
      std::string r = "[";
      for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + "]";
    };
    FP8EMU_CHECK(X.shape == Y.shape, "compare: shapes differ: ", shape_str(X.shape), " vs ", shape_str(Y.shape));
    const std::size_t n = X.count();
    std::vector<float> a(n), b(n);
    if (n) {  // (empty arrays: data() may be null, which memcpy must not get)
      std::memcpy(a.data(), X.data.data(), n * 4);
      std::memcpy(b.data(), Y.data.data(), n * 4);
    }
    const emu::CompareStats st = emu::compare_f32(a.data(), b.data(), n);
    out << "elements: " << n << "\nbitwise mismatches: " << st.mismatches << "\nNaN in one only: " << st.nan_in_one
        << "\nmax ulp: " << st.max_ulp << "\nmax abs error: " << st.max_abs_error
        << "\nmax rel error (vs second): " << st.max_rel_error << "\n";
    return st.identical() ? 0 : 1;
  } catch (const std::exception& e) {
    err << "fp8emu compare: error: " << error_text(e) << "\n";
    return 2;
  }
}

Command add_compare(CLI::App& app) {
  struct Options {
    std::string x, y;
  };
  auto o = std::make_shared<Options>();
  CLI::App* compare = app.add_subcommand("compare", "Compare two float32 .npy arrays bit for bit (ULP, errors)");
  compare->add_option("X", o->x, "First .npy (e.g. a GPU dump)")->required();
  compare->add_option("Y", o->y, "Second .npy (e.g. fp8emu gemm output)")->required();
  return {compare, [o] { return run_compare(o->x, o->y, std::cout, std::cerr); }};
}

const CommandRegistrar registered{50, add_compare};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
