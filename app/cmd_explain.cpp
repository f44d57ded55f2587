// `fp8emu explain` (see cmd_explain.hpp).
#include "cmd_explain.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "small_formats.hpp"

namespace fp8emu::cli {
namespace {

// ------------------------------------------------------------------------------------ explain

struct Finite {
  double value;
  std::uint32_t code;
};

/// Every finite value of the format once, ascending (zero as +0; E8M0: codes 0x00..0xFE).
std::vector<Finite> finite_values(const FormatInfo& f) {
  std::vector<Finite> v;
  if (!f.spec) {
    for (std::uint32_t c = 0; c <= core::kE8M0MaxCode; ++c) v.push_back({code_value(c, f), c});
    return v;
  }
  const FormatSpec& s = *f.spec;
  for (std::uint32_t c = s.max_finite_code(); c >= 1; --c) v.push_back({-code_value(c, f), c | s.sign_mask()});
  for (std::uint32_t c = 0; c <= s.max_finite_code(); ++c) v.push_back({code_value(c, f), c});
  return v;
}

std::string value_and_code(const Finite& n, const FormatInfo& f, bool negative_zero) {
  std::uint32_t c = n.code;
  if (n.value == 0 && negative_zero && f.spec && !f.spec->fnuz) c |= f.spec->sign_mask();
  return (c == n.code ? shown_value(c, f) : "-0") + " (" + hex_code(c, f) + ")";
}

/// "next down X (code), next up Y (code)": the nearest representable values on either side of x.
std::string neighbours(double x, const FormatInfo& f) {
  if (std::isnan(x)) return "none (NaN)";
  const std::vector<Finite> v = finite_values(f);
  const Finite* below = nullptr;
  const Finite* above = nullptr;
  for (const Finite& n : v) {
    if (n.value < x) below = &n;
    if (n.value > x && !above) above = &n;
  }
  const bool neg = std::signbit(x);
  std::string s = "next down ";
  if (below) {
    s += value_and_code(*below, f, neg);
  } else {
    s += f.spec ? "none (below the most negative finite value)" : "none (E8M0 has nothing below 2^-127)";
  }
  s += ", next up ";
  s += above ? value_and_code(*above, f, neg) : "none (above the max finite)";
  return s;
}

/// "exponent" line of a stored code.
std::string exponent_text(std::uint32_t code, const FormatInfo& f) {
  const std::string cls = code_class(code, f);
  if (cls == "nan") return "NaN";
  if (cls == "inf") return "Inf (exponent all ones, mantissa zero)";
  std::ostringstream os;
  if (!f.spec) {
    os << int(code) - core::kE8M0Bias << " = field " << binary(code, 8) << " (" << code << ") - bias "
       << core::kE8M0Bias;
    if (cls == "max") os << "; the max";
    if (code == 0) os << "; the min (E8M0 has no zero)";
    return os.str();
  }
  const FormatSpec& s = *f.spec;
  const std::uint32_t mag = code & s.top_code();
  const std::uint32_t e = mag >> s.mantissa_bits;
  if (cls == "zero") return "none: zero (exponent and mantissa fields all zero)";
  if (cls == "subnormal") {
    os << s.emin() << " (field " << binary(0, s.exponent_bits) << ": subnormal, value = 0."
       << binary(mag, s.mantissa_bits) << " x 2^" << s.emin() << ")";
    return os.str();
  }
  os << int(e) - s.bias << " = field " << binary(e, s.exponent_bits) << " (" << e << ") - bias " << s.bias
     << "; normal, value = 1." << binary(mag & ((1u << s.mantissa_bits) - 1u), s.mantissa_bits) << " x 2^"
     << int(e) - s.bias << (cls == "max" ? "; the max finite" : "");
  return os.str();
}

struct Row {
  std::string label;
  std::uint32_t code;
};

std::uint64_t f64_bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

/// The code every modelled system stores for the input (fp32 bits fb, double bits db), and the
/// notes on rows left out. Row 0 is the reference (CUDA satfinite).
std::vector<Row> system_rows(const FormatInfo& f, std::uint32_t fb, std::uint64_t db, std::vector<std::string>& notes) {
  std::vector<Row> rows;
  if (!f.spec) {
    rows.push_back({"CUDA round up, satfinite (float entry)", core::e8m0_from_f32_bits(fb, true, true)});
    rows.push_back({"CUDA round up, nosat (float entry)", core::e8m0_from_f32_bits(fb, false, true)});
    rows.push_back({"CUDA double entry (round up, satfinite)", core::e8m0_from_f64_bits(db, true, true)});
    rows.push_back({"CUDA round toward zero, satfinite", core::e8m0_from_f32_bits(fb, true, false)});
    notes.push_back("not shown: ml_dtypes and PyTorch (their E8M0 casts are not modelled by fp8emu), round "
                    "down and stochastic (CUDA's E8M0 conversions round up or toward zero only)");
    if (fb >> 31) notes.push_back("E8M0 has no sign: CUDA converts |x|");
    return rows;
  }
  const FormatSpec& s = *f.spec;
  auto f32 = [&](Policy p) { return std::uint32_t(core::encode_f32_bits_with(fb, s, p)); };
  rows.push_back({"CUDA satfinite (float entry)", f32(Policy::cuda_float(true))});
  if (s.has_nan()) rows.push_back({"CUDA nosat (float entry)", f32(Policy::cuda_float(false))});
  rows.push_back({"CUDA double entry, satfinite", core::encode_f64_bits(db, s, Policy::cuda_double(true))});
  rows.push_back({"ml_dtypes (default cast)", f32(Policy::ml_dtypes())});
  rows.push_back({"ml_dtypes kSaturate", f32(Policy::ml_dtypes_saturate())});
  const bool e4m3fn = &s == &kSpecE4M3, e5m2 = &s == &kSpecE5M2;
  if (e4m3fn || e5m2) {
    rows.push_back({"PyTorch <= 2.12", f32(Policy::pytorch())});
    // PyTorch 2.13 (pytorch#178817) changed e4m3fn's overflow only (finite and infinite).
    rows.push_back({"PyTorch >= 2.13", f32(e4m3fn ? Policy::pytorch_2_13() : Policy::pytorch())});
  }
  auto directed = [&](Rounding r) { return f32({r, Overflow::kNoSat, NanEncoding::kCanonical}); };
  rows.push_back({"round toward zero", directed(Rounding::kTowardZero)});
  rows.push_back({"round up (toward +Inf)", directed(Rounding::kTowardPositive)});
  rows.push_back({"round down (toward -Inf)", directed(Rounding::kTowardNegative)});
  if (s.fnuz) {
    notes.push_back(std::string("CUDA has no ") + f.name +
                    " type: the CUDA rows apply CUDA's rules to this format (as fp8emu's value type does); "
                    "PyTorch rows not shown (its fnuz casts are not modelled by fp8emu)");
  } else if (!s.has_nan()) {
    notes.push_back(std::string("not shown: CUDA nosat (") + f.name +
                    " has no Inf or NaN, so CUDA's conversions always saturate) and PyTorch (no FP6/FP4 "
                    "casts modelled)");
  }
  notes.push_back("directed roundings: overflow as IEEE 754 (max finite when rounding toward the range, "
                  "else Inf or NaN where the format has them)");
  return rows;
}

// With `given_code`, the stored/exponent/class lines describe that code (explain --code) rather than
// the code its value converts to (the two differ for Inf, NaN and -0 codes under some systems).
void explain_one(const FormatInfo& f, double d, const std::string& input_line, std::ostream& out,
                 const std::uint32_t* given_code = nullptr) {
  const float x = float(d);
  const std::uint32_t fb = core::f32_to_bits(x);
  const std::uint64_t db = f64_bits(d);
  std::vector<std::string> notes;
  const std::vector<Row> rows = system_rows(f, fb, db, notes);
  const std::uint32_t code = given_code ? *given_code : rows[0].code;
  char line[256];
  auto put = [&](const char* label, const std::string& text) {
    std::snprintf(line, sizeof line, "%-13s ", label);
    out << line << text << "\n";
  };
  out << describe(f) << "\n";
  out << input_line;
  if (std::isnan(d)) {
    put("fp32", std::string(std::signbit(d) ? "-nan" : "nan"));
  } else if (double(x) == d) {
    put("fp32", exact_decimal(x) + " (exact)");
  } else {
    const char* why = std::isinf(x) ? " (the double overflows fp32)"
                      : x == 0.0f   ? " (the double underflows fp32)"
                                    : " (the double is not exact in fp32)";
    put("fp32", exact_decimal(x) + why +
                    "; every row but the CUDA double entry starts from this fp32 value");
  }
  put("stored", hex_code(code, f) + " = " + fields(code, f) + " = " + shown_value(code, f) +
                    (given_code ? "   (the code given)"
                     : f.spec   ? "   (round to nearest even, CUDA satfinite)"
                                : "   (round up, CUDA satfinite)"));
  put("exponent", exponent_text(code, f));
  put("class", code_class(code, f));
  const double xv = f.spec ? double(x) : std::fabs(double(x));
  put("neighbours", neighbours(xv, f));
  const double sv = code_value(code, f);
  if (std::isnan(xv) || std::isinf(xv) || std::isnan(sv) || std::isinf(sv)) {
    put("error", "n/a (not finite)");
  } else if (sv == xv) {
    put("error", "0 (exact)");
  } else {
    const double e = sv - xv;
    char b[128];
    if (xv != 0) {
      std::snprintf(b, sizeof b, "%.9g (stored - %s), relative %.3g %%", e, f.spec ? "fp32 input" : "|fp32 input|",
                    100.0 * e / std::fabs(xv));
    } else {
      std::snprintf(b, sizeof b, "%.9g (stored - %s)", e, f.spec ? "fp32 input" : "|fp32 input|");
    }
    put("error", b);
  }
  out << "what each system stores (* = differs from the first row):\n";
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "  %c %-40s %-5s ", r.code == code ? ' ' : '*', r.label.c_str(),
                  hex_code(r.code, f).c_str());
    out << line << shown_value(r.code, f) << "\n";
  }
  for (const std::string& n : notes) out << "  note: " << n << "\n";
}

double parse_value(const std::string& s) {
  FP8EMU_CHECK(!s.empty(), "VALUE is empty");
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  FP8EMU_CHECK(end != s.c_str() && *end == '\0', "VALUE '", s,
               "' is not a number (decimal, hex float such as 0x1.8p3, inf, -inf or nan; with --code, a raw code)");
  return d;
}

std::uint32_t parse_code(const std::string& s, const FormatInfo& f) {
  const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const std::string digits = hex ? s.substr(2) : s;
  FP8EMU_CHECK(!digits.empty() && digits.size() <= 8 &&
                   digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos,
               "--code: '", s, "' is not a code (0x.. in hex, or a decimal integer)");
  const unsigned long v = std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10);
  FP8EMU_CHECK(v < code_count(f), "--code: ", s, " is not a code of ", f.name, " (", code_bits(f), " bits: ",
               hex_code(0, f), "..", hex_code(code_count(f) - 1, f), ")");
  return std::uint32_t(v);
}

}  // namespace

int run_explain(const ExplainOptions& o, std::ostream& out, std::ostream& err) {
  try {
    std::vector<const FormatInfo*> fmts;
    if (o.format == "all") {
      FP8EMU_CHECK(!o.code, "--code needs one format, not --format all");
      for (const FormatInfo& f : tool_formats()) fmts.push_back(&f);
    } else {
      fmts.push_back(&find_format(o.format, "--format"));
    }
    std::ostringstream text;
    for (std::size_t k = 0; k < fmts.size(); ++k) {
      const FormatInfo& f = *fmts[k];
      if (k) text << "\n";
      if (o.code) {
        const std::uint32_t c = parse_code(o.value, f);
        double d = code_value(c, f);
        if (is_nan_code(c, f) && f.spec && !f.spec->fnuz && (c & f.spec->sign_mask())) d = -d;
        const std::string input = hex_code(c, f) + " = " + fields(c, f) + " = " + shown_value(c, f);
        explain_one(f, d, "input         code " + input + "\n", text, &c);
      } else {
        const double d = parse_value(o.value);
        std::string line = "input         " + o.value;
        const std::string ex = exact_decimal(d);
        if (ex != o.value) line += " (as double: " + ex + ")";
        const bool hex_int = o.value.size() > 2 && o.value[0] == '0' && (o.value[1] == 'x' || o.value[1] == 'X') &&
                             o.value.find_first_of(".pP") == std::string::npos;
        if (hex_int) line += "; read as a number: add --code to read it as a code";
        explain_one(f, d, line + "\n", text);
      }
    }
    out << text.str();
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu explain: error: " << error_text(e) << "\n";
    return 2;
  }
}

std::vector<std::string> protect_negative_values(int argc, char** argv) {
  std::vector<std::string> a(argv, argv + argc);
  if (argc < 2 || a[1] != "explain") return a;
  std::vector<std::string> keep(a.begin(), a.begin() + 2), moved;
  bool after_mark = false;
  for (std::size_t i = 2; i < a.size(); ++i) {
    const std::string& t = a[i];
    if (t == "--") after_mark = true;
    char* end = nullptr;
    const bool negative_number = !after_mark && t.size() > 1 && t[0] == '-' && t[1] != '-' &&
                                 (std::strtod(t.c_str(), &end), end && *end == '\0');
    (negative_number ? moved : keep).push_back(t);
  }
  if (moved.empty()) return a;
  if (!after_mark) keep.push_back("--");
  keep.insert(keep.end(), moved.begin(), moved.end());
  return keep;
}

Command add_explain(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "Show how one value is stored in a small format: code, fields, error, and what each system stores");
  explain_cmd->add_option("VALUE", o->value,
                          "Decimal, hex float (0x1.8p3), inf, -inf, nan, -nan; with --code, a raw code (0x38)")
      ->required();
  explain_cmd->add_option("--format", o->format, "Format, or all: " + format_names())->capture_default_str();
  explain_cmd->add_flag("--code", o->code, "Read VALUE as a raw code of --format");
  return {explain_cmd, [o] { return run_explain(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{100, add_explain};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
