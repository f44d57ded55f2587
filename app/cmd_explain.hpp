// `fp8emu explain`: how one value is stored in a small format.
//
// Returns 0, or 2 after one line "fp8emu <command>: error: ..." naming the problem.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fp8emu::cli {

/// `fp8emu explain VALUE [--format F] [--code]`.
struct ExplainOptions {
  std::string value;              ///< decimal, hex float, inf, -inf, nan, -nan; with `code`, a raw code
  std::string format = "e4m3fn";  ///< a format name or alias, or "all"
  bool code = false;              ///< VALUE is a raw code of the format (0x.. or decimal)
};

/// Prints the input, the code stored by round-to-nearest (CUDA satfinite) with its fields, value,
/// exponent and class, the neighbouring representable values, the rounding error, and the code that
/// each system (CUDA, ml_dtypes, PyTorch, directed roundings) stores. \return 0, or 2 on bad input.
int run_explain(const ExplainOptions& o, std::ostream& out, std::ostream& err);

/// CLI11 reads `-inf`, `-nan` or `-.5` as short options. For an `explain` command line, returns the
/// arguments with such negative numbers moved behind a "--", where they parse as VALUE; any other
/// command line is returned unchanged.
std::vector<std::string> protect_negative_values(int argc, char** argv);

}  // namespace fp8emu::cli
