// `fp8emu explain`, `fp8emu table` and `fp8emu convert`: teaching and data tools for every small
// format of format_spec.hpp (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e2m3fn, e3m2fn, e2m1fn) and E8M0.
//
// Every run returns 0, or 2 after one line "fp8emu <command>: error: ..." naming the problem; a
// failed `convert` leaves no output file (the output is written once, atomically, at the end).
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

/// `fp8emu table --format F [--csv]`.
struct TableOptions {
  std::string format;
  bool csv = false;
};

/// Prints every code of the format: code, binary fields, exact value, class. \return 0 or 2.
int run_table(const TableOptions& o, std::ostream& out, std::ostream& err);

/// `fp8emu convert IN OUT --to DTYPE ...` (see run_convert).
struct ConvertOptions {
  std::string in, out;
  std::string to, from, format;  ///< DTYPEs: float32, float16, bfloat16 or a format name
  std::string scale;             ///< empty: 1
  std::string policy;            ///< empty: cuda
  std::string rounding;          ///< empty: the policy's (nearest; E8M0: up)
  std::string seed;              ///< required by --rounding stochastic
  bool amax = false;
};

/// Converts IN to OUT, each a raw little-endian file or a .npy file (by the ".npy" suffix).
/// To a small format: code = Q(x * scale), one fp32 multiply (as Transformer Engine's cast), Q by
/// the policy and rounding; from a small format: value * scale_inv with scale_inv = 1/scale
/// rounded to fp32; float16/bfloat16 <-> float32 exactly or with round to nearest even (core/half.hpp).
/// Stochastic rounding draws 32 bits per element, in element order, from std::mt19937(seed).
/// \return 0, or 2 on bad input (nothing written).
int run_convert(const ConvertOptions& o, std::ostream& out, std::ostream& err);

/// The accepted --format names and aliases, for help texts and error messages.
std::string format_names();

/// CLI11 reads `-inf`, `-nan` or `-.5` as short options. For an `explain` command line, returns the
/// arguments with such negative numbers moved behind a "--", where they parse as VALUE; any other
/// command line is returned unchanged.
std::vector<std::string> protect_negative_values(int argc, char** argv);

}  // namespace fp8emu::cli
