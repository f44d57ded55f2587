// `fp8emu explain`, `fp8emu table` and `fp8emu convert` (see convert_tools.hpp).
#include "convert_tools.hpp"

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

namespace fp8emu::cli {
namespace {

// ------------------------------------------------------------------------------------ formats

/// One format the tools accept: a FormatSpec, or E8M0 (spec == nullptr).
struct FormatInfo {
  const char* name;
  const char* aliases[2];  ///< nullptr-padded
  const FormatSpec* spec;  ///< nullptr: E8M0 (core/e8m0.hpp)
  const char* title;
};

const FormatInfo kFormats[] = {
    {"e4m3fn", {"e4m3", nullptr}, &kSpecE4M3, "OCP FP8 E4M3"},
    {"e5m2", {nullptr, nullptr}, &kSpecE5M2, "OCP FP8 E5M2"},
    {"e4m3fnuz", {nullptr, nullptr}, &kSpecE4M3FNUZ, "FP8 E4M3 fnuz, Graphcore/AMD"},
    {"e5m2fnuz", {nullptr, nullptr}, &kSpecE5M2FNUZ, "FP8 E5M2 fnuz, Graphcore/AMD"},
    {"e8m0fnu", {"e8m0", nullptr}, nullptr, "OCP MX E8M0 scale"},
    {"e2m3fn", {"e2m3", "fp6"}, &kSpecE2M3, "OCP MX FP6 E2M3"},
    {"e3m2fn", {nullptr, nullptr}, &kSpecE3M2, "OCP MX FP6 E3M2"},
    {"e2m1fn", {"e2m1", "fp4"}, &kSpecE2M1, "OCP MX FP4 E2M1"},
};

const FormatInfo* lookup_format(const std::string& s) {
  for (const FormatInfo& f : kFormats) {
    if (s == f.name) return &f;
    for (const char* a : f.aliases)
      if (a && s == a) return &f;
  }
  return nullptr;
}

const FormatInfo& find_format(const std::string& s, const char* what) {
  const FormatInfo* f = lookup_format(s);
  FP8EMU_CHECK(f, "unknown ", what, " '", s, "' (accepted: ", format_names(), ")");
  return *f;
}

int code_bits(const FormatInfo& f) { return f.spec ? f.spec->bits() : 8; }
std::uint32_t code_count(const FormatInfo& f) { return 1u << code_bits(f); }

// Exact decimal expansion of a double (every double is a dyadic rational, so it terminates):
// glibc's printf prints exact digits at any precision, and 767 significant digits after the first
// cover every double. Plain notation for 1e-7 <= |v| < 1e21, otherwise d.ddd...e+XX.
std::string exact_decimal(double v) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  std::vector<char> buf(1100);
  std::snprintf(buf.data(), buf.size(), "%.767e", std::fabs(v));
  const std::string s(buf.data());
  const std::size_t epos = s.find('e');
  std::string digits = s.substr(0, 1) + s.substr(2, epos - 2);
  const int exp10 = std::stoi(s.substr(epos + 1));
  digits.erase(digits.find_last_not_of('0') + 1);
  const int n = int(digits.size());
  std::string r = v < 0 ? "-" : "";
  if (exp10 >= 0 && exp10 <= 20) {
    if (n <= exp10 + 1) return r + digits + std::string(std::size_t(exp10 + 1 - n), '0');
    return r + digits.substr(0, std::size_t(exp10 + 1)) + "." + digits.substr(std::size_t(exp10 + 1));
  }
  if (exp10 < 0 && exp10 >= -7) return r + "0." + std::string(std::size_t(-exp10 - 1), '0') + digits;
  r += digits.substr(0, 1);
  if (n > 1) r += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%+03d", exp10);
  return r + e;
}

std::string binary(std::uint32_t v, int n) {
  std::string s;
  for (int i = n - 1; i >= 0; --i) s += ((v >> i) & 1u) ? '1' : '0';
  return s;
}

std::string hex_code(std::uint32_t code, const FormatInfo& f) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%0*X", (code_bits(f) + 3) / 4, code);
  return b;
}

/// The code's fields: "s | eeee | mmm", or E8M0's 8 exponent bits.
std::string fields(std::uint32_t code, const FormatInfo& f) {
  if (!f.spec) return binary(code, 8);
  const FormatSpec& s = *f.spec;
  return binary(code >> (s.bits() - 1), 1) + " | " +
         binary((code >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1u), s.exponent_bits) + " | " +
         binary(code & ((1u << s.mantissa_bits) - 1u), s.mantissa_bits);
}

bool is_nan_code(std::uint32_t code, const FormatInfo& f) {
  if (!f.spec) return code == core::kE8M0NaN;
  const FormatSpec& s = *f.spec;
  if (s.fnuz) return code == s.nan_code();
  const std::uint32_t mag = code & s.top_code();
  return mag > s.max_finite_code() && !(s.has_inf && mag == s.inf_code());
}

bool is_inf_code(std::uint32_t code, const FormatInfo& f) {
  return f.spec && f.spec->has_inf && (code & f.spec->top_code()) == f.spec->inf_code();
}

/// zero, subnormal, normal, max, inf or nan. Every E8M0 code but NaN and the max is "normal"
/// (E8M0 has neither zero nor subnormals: code 0 is 2^-127).
const char* code_class(std::uint32_t code, const FormatInfo& f) {
  if (is_nan_code(code, f)) return "nan";
  if (is_inf_code(code, f)) return "inf";
  if (!f.spec) return code == core::kE8M0MaxCode ? "max" : "normal";
  const FormatSpec& s = *f.spec;
  const std::uint32_t mag = code & s.top_code();
  if (mag == s.max_finite_code()) return "max";
  if (mag == 0) return "zero";
  return (mag >> s.mantissa_bits) == 0 ? "subnormal" : "normal";
}

std::uint32_t decode_bits(std::uint32_t code, const FormatInfo& f) {
  return f.spec ? core::decode_code_to_f32_bits(code, *f.spec) : core::e8m0_to_f32_bits(std::uint8_t(code));
}

double code_value(std::uint32_t code, const FormatInfo& f) { return core::bits_to_f32(decode_bits(code, f)); }

/// The value of a code as text: exact decimal, Inf, NaN (with the sign the code carries).
std::string code_value_text(std::uint32_t code, const FormatInfo& f) {
  const bool neg = f.spec && !f.spec->fnuz && (code & f.spec->sign_mask());
  if (is_nan_code(code, f)) return neg ? "-NaN" : "NaN";
  if (is_inf_code(code, f)) return neg ? "-Inf" : "Inf";
  return exact_decimal(code_value(code, f));
}

/// code_value_text, with E8M0 values also written as powers of two ("2^-3 = 0.125"), for explain.
std::string shown_value(std::uint32_t code, const FormatInfo& f) {
  if (f.spec || is_nan_code(code, f)) return code_value_text(code, f);
  return "2^" + std::to_string(int(code) - core::kE8M0Bias) + " = " + code_value_text(code, f);
}

/// One line describing the format, every number derived from its record.
std::string describe(const FormatInfo& f) {
  std::ostringstream os;
  os << f.name << " (" << f.title << "): ";
  if (!f.spec) {
    os << "bits: 8 exponent, no sign, no mantissa; bias " << core::kE8M0Bias << "; values 2^"
       << -core::kE8M0Bias << " (0x00) .. 2^" << int(core::kE8M0MaxCode) - core::kE8M0Bias
       << " (0x" << std::hex << std::uppercase << int(core::kE8M0MaxCode) << std::dec
       << "); no zero, no Inf; NaN " << hex_code(core::kE8M0NaN, f);
    return os.str();
  }
  const FormatSpec& s = *f.spec;
  os << "bits: 1 sign, " << s.exponent_bits << " exponent, " << s.mantissa_bits << " mantissa; bias " << s.bias
     << "; max finite " << exact_decimal(s.max_finite()) << " (" << hex_code(s.max_finite_code(), f)
     << "), min normal 2^" << s.emin() << ", min subnormal 2^" << s.emin() - s.mantissa_bits << "; ";
  if (s.fnuz) {
    os << "no Inf, no -0; NaN " << hex_code(s.nan_code(), f) << " (the code of -0)";
  } else if (s.has_inf) {
    os << "Inf " << hex_code(s.inf_code(), f) << "/" << hex_code(s.inf_code() | s.sign_mask(), f) << "; NaN "
       << hex_code(s.inf_code() + 1, f) << ".." << hex_code(s.top_code(), f) << " and "
       << hex_code((s.inf_code() + 1) | s.sign_mask(), f) << ".." << hex_code(s.top_code() | s.sign_mask(), f);
  } else if (s.has_nan()) {
    os << "no Inf; NaN " << hex_code(s.nan_code(), f) << "/" << hex_code(s.nan_code() | s.sign_mask(), f);
  } else {
    os << "no Inf, no NaN";
  }
  return os.str();
}

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
    rows.push_back({"PyTorch <= 2.11", f32(Policy::pytorch())});
    // PyTorch 2.12 (pytorch#178817) changed e4m3fn's finite overflow only.
    rows.push_back({"PyTorch >= 2.12", f32(e4m3fn ? Policy::pytorch_2_12() : Policy::pytorch())});
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

// ------------------------------------------------------------------------------------ convert

enum class Kind { kF32, kF16, kBF16, kCodes };

struct Dtype {
  Kind kind;
  const FormatInfo* fmt;  ///< kCodes only
  std::string name() const {
    switch (kind) {
      case Kind::kF32: return "float32";
      case Kind::kF16: return "float16";
      case Kind::kBF16: return "bfloat16";
      default: return fmt ? fmt->name : "uint8 codes";
    }
  }
  std::size_t itemsize() const { return kind == Kind::kF32 ? 4 : kind == Kind::kCodes ? 1 : 2; }
  const char* descr() const {
    return kind == Kind::kF32 ? "<f4" : kind == Kind::kF16 ? "<f2" : kind == Kind::kBF16 ? "<u2" : "|u1";
  }
};

std::string dtype_names() { return "float32, float16, bfloat16, " + format_names(); }

Dtype parse_dtype(const std::string& s, const char* flag) {
  if (s == "float32") return {Kind::kF32, nullptr};
  if (s == "float16") return {Kind::kF16, nullptr};
  if (s == "bfloat16") return {Kind::kBF16, nullptr};
  const FormatInfo* f = lookup_format(s);
  FP8EMU_CHECK(f, "unknown ", flag, " '", s, "' (accepted: ", dtype_names(), ")");
  return {Kind::kCodes, f};
}

bool has_npy_suffix(const std::string& p) {
  return p.size() >= 4 && (p.compare(p.size() - 4, 4, ".npy") == 0 || p.compare(p.size() - 4, 4, ".NPY") == 0);
}

float parse_scale(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  FP8EMU_CHECK(!s.empty() && end != s.c_str() && *end == '\0', "--scale '", s, "' is not a number");
  const float f = float(d);
  FP8EMU_CHECK(std::isfinite(d) && std::isfinite(f), "--scale ", s, " is not finite",
               std::isfinite(d) ? " as fp32" : "", " (the scale must be a finite, non-zero fp32 number)");
  FP8EMU_CHECK(f != 0.0f, "--scale ", s, " is zero", d != 0 ? " as fp32" : "",
               " (the scale must be a finite, non-zero fp32 number)");
  return f;
}

std::uint32_t parse_seed(const std::string& s) {
  FP8EMU_CHECK(!s.empty() && s.size() <= 10 && s.find_first_not_of("0123456789") == std::string::npos,
               "--seed '", s, "' is not an integer in 0..4294967295");
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  FP8EMU_CHECK(v <= 0xFFFFFFFFull, "--seed '", s, "' is not an integer in 0..4294967295");
  return std::uint32_t(v);
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (a == b) return true;
  std::error_code e1, e2;
  const fs::path ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
  if (!e1 && !e2 && ca == cb) return true;
  std::error_code e3;
  return fs::exists(a, e3) && fs::exists(b, e3) && fs::equivalent(a, b, e3) && !e3;
}

std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::error_code ec;
  FP8EMU_CHECK(!std::filesystem::is_directory(path, ec), path, ": is a folder, not a file");
  std::ifstream f(path, std::ios::binary);
  FP8EMU_CHECK(f.good(), path, ": cannot open");
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// How the encoder to a small format is configured.
struct Encoder {
  const FormatInfo* fmt = nullptr;
  Policy policy;
  bool e8m0_satfinite = true, e8m0_up = true;
  bool stochastic = false;
};

Encoder make_encoder(const ConvertOptions& o, const FormatInfo& f) {
  Encoder enc;
  enc.fmt = &f;
  const std::string pol = o.policy.empty() ? "cuda" : o.policy;
  if (!f.spec) {  // E8M0: CUDA's conversions only
    FP8EMU_CHECK(pol == "cuda" || pol == "cuda-nosat", "--policy ", pol, " does not apply to e8m0fnu (accepted: "
                 "cuda, cuda-nosat: CUDA's __nv_cvt_float_to_e8m0)");
    enc.e8m0_satfinite = pol == "cuda";
    FP8EMU_CHECK(o.rounding.empty() || o.rounding == "up" || o.rounding == "zero", "--rounding ", o.rounding,
                 " does not apply to e8m0fnu (accepted: up, CUDA's default, or zero)");
    enc.e8m0_up = o.rounding != "zero";
    return enc;
  }
  const bool e4m3fn = f.spec == &kSpecE4M3, e5m2 = f.spec == &kSpecE5M2;
  if (pol == "cuda") enc.policy = Policy::cuda_float(true);
  else if (pol == "cuda-nosat") enc.policy = Policy::cuda_float(false);
  else if (pol == "ml_dtypes") enc.policy = Policy::ml_dtypes();
  else if (pol == "ml_dtypes-saturate") enc.policy = Policy::ml_dtypes_saturate();
  else if (pol == "pytorch" || pol == "pytorch-2.12") {
    FP8EMU_CHECK(e4m3fn || e5m2, "--policy ", pol, " applies to e4m3fn and e5m2 only (PyTorch's casts to ", f.name,
                 " are not modelled)");
    // PyTorch 2.12 (pytorch#178817) changed e4m3fn's finite overflow only.
    enc.policy = pol == "pytorch-2.12" && e4m3fn ? Policy::pytorch_2_12() : Policy::pytorch();
  } else {
    FP8EMU_FAIL("unknown --policy '", pol, "' (accepted: cuda, cuda-nosat, ml_dtypes, ml_dtypes-saturate, pytorch, "
                "pytorch-2.12)");
  }
  if (o.rounding.empty() || o.rounding == "nearest") enc.policy.rounding = Rounding::kNearestEven;
  else if (o.rounding == "zero") enc.policy.rounding = Rounding::kTowardZero;
  else if (o.rounding == "up") enc.policy.rounding = Rounding::kTowardPositive;
  else if (o.rounding == "down") enc.policy.rounding = Rounding::kTowardNegative;
  else if (o.rounding == "stochastic") enc.policy.rounding = Rounding::kStochastic;
  else FP8EMU_FAIL("unknown --rounding '", o.rounding, "' (accepted: nearest, zero, up, down, stochastic)");
  enc.stochastic = enc.policy.rounding == Rounding::kStochastic;
  return enc;
}

int convert(const ConvertOptions& o, std::ostream& out) {
  // 1. Flags, before any file is read.
  FP8EMU_CHECK(!same_file(o.in, o.out), "OUT ", o.out, " is the input file; write the result to another file");
  const Dtype to = parse_dtype(o.to, "--to");
  const bool from_given = !o.from.empty(), format_given = !o.format.empty();
  Dtype from{Kind::kF32, nullptr};
  if (from_given) from = parse_dtype(o.from, "--from");
  const FormatInfo* format = format_given ? &find_format(o.format, "--format") : nullptr;
  const bool scale_given = !o.scale.empty();
  const float scale = scale_given ? parse_scale(o.scale) : 1.0f;

  // 2. The input and its type: the .npy descr, or --from for a raw file.
  const bool in_npy = has_npy_suffix(o.in), out_npy = has_npy_suffix(o.out);
  io::NpyArray a;
  Dtype in{Kind::kF32, nullptr};
  if (in_npy) {
    a = io::read_npy(o.in);
    if (a.dtype == "<f4") in = {Kind::kF32, nullptr};
    else if (a.dtype == "<f2") in = {Kind::kF16, nullptr};
    else if (a.dtype == "<u2") in = {Kind::kBF16, nullptr};
    else in = {Kind::kCodes, nullptr};  // |u1 (read_npy accepts no other descr)
    if (from_given) {
      FP8EMU_CHECK(from.kind == in.kind, o.in, " holds ", in.name(), " (descr ", a.dtype,
                   "), which contradicts --from ",
                   o.from, " (", from.name(), " is stored as ", from.descr(), ")");
      in.fmt = from.fmt;
    }
    if (in.kind == Kind::kCodes && !in.fmt) {
      FP8EMU_CHECK(format, o.in, " holds uint8 codes (descr |u1): name their format with --format or --from (",
                   format_names(), ")");
      in.fmt = format;
    }
  } else {
    FP8EMU_CHECK(from_given, o.in, " is a raw file (no .npy suffix): give its type with --from (", dtype_names(), ")");
    in = from;
    a.dtype = in.descr();
    a.data = read_raw(o.in);
    FP8EMU_CHECK(a.data.size() % in.itemsize() == 0, o.in, ": ", a.data.size(), " bytes is not a whole number of ",
                 in.name(), " items (", in.itemsize(), " bytes each)");
    a.shape = {a.data.size() / in.itemsize()};
  }

  // 3. Flags that must agree with the types.
  if (format) {
    const bool used = (in.kind == Kind::kCodes && in.fmt == format) || (to.kind == Kind::kCodes && to.fmt == format);
    FP8EMU_CHECK(used, "--format ", o.format, " contradicts the conversion ", in.name(), " -> ", to.name(),
                 (in.kind != Kind::kCodes && to.kind != Kind::kCodes) ? " (no side is a small format)" : "");
  }
  const bool enc_side = to.kind == Kind::kCodes, dec_side = in.kind == Kind::kCodes;
  FP8EMU_CHECK(!scale_given || enc_side != dec_side, "--scale applies when exactly one side is a small format (",
               in.name(), " -> ", to.name(), ")");
  FP8EMU_CHECK(enc_side || (o.policy.empty() && o.rounding.empty()),
               "--policy and --rounding apply to conversions to a small format, not to ", to.name(),
               " (float16 and bfloat16 outputs always round to nearest even)");
  Encoder enc;
  if (enc_side) enc = make_encoder(o, *to.fmt);
  FP8EMU_CHECK(!enc.stochastic || !o.seed.empty(), "--rounding stochastic needs --seed N (results are reproducible "
               "for a given seed)");
  FP8EMU_CHECK(o.seed.empty() || enc.stochastic, "--seed applies to --rounding stochastic only");
  const std::uint32_t seed = o.seed.empty() ? 0u : parse_seed(o.seed);
  const float scale_inv = 1.0f / scale;
  FP8EMU_CHECK(!dec_side || !scale_given || std::isfinite(scale_inv), "--scale ", o.scale,
               ": 1/scale overflows fp32, so the codes cannot be dequantized");

  // 4. Convert element by element, through fp32.
  const std::size_t n = a.count();
  const std::uint8_t* src = a.data.data();
  io::NpyArray r;
  r.dtype = to.descr();
  r.shape = a.shape;
  r.data.resize(n * to.itemsize());
  std::mt19937 rng(seed);
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b = 0;
    std::uint16_t h = 0;
    switch (in.kind) {
      case Kind::kF32: std::memcpy(&b, src + 4 * i, 4); break;
      case Kind::kF16: std::memcpy(&h, src + 2 * i, 2); b = core::half_to_f32_bits(h); break;
      case Kind::kBF16: std::memcpy(&h, src + 2 * i, 2); b = core::bf16_to_f32_bits(h); break;
      case Kind::kCodes:
        FP8EMU_CHECK(src[i] < code_count(*in.fmt), o.in, ": element ", i, " is ", hex_code(src[i], *in.fmt),
                     ", not a code of ", in.fmt->name, " (", code_bits(*in.fmt), " bits: ", hex_code(0, *in.fmt), "..",
                     hex_code(code_count(*in.fmt) - 1, *in.fmt), ")");
        b = decode_bits(src[i], *in.fmt);
        break;
    }
    float v = core::bits_to_f32(b);
    if (!std::isnan(v)) amax = std::fmax(amax, std::fabs(v));
    // NaNs pass the scale multiplies unchanged (sign and payload kept for the NaN encodings).
    if (scale_given && !std::isnan(v)) v = dec_side ? v * scale_inv : v * scale;
    b = core::f32_to_bits(v);
    std::uint8_t* dst = r.data.data() + i * to.itemsize();
    switch (to.kind) {
      case Kind::kF32: std::memcpy(dst, &b, 4); break;
      case Kind::kF16: h = core::f32_bits_to_half_rne(b); std::memcpy(dst, &h, 2); break;
      case Kind::kBF16: h = core::f32_bits_to_bf16_rne(b); std::memcpy(dst, &h, 2); break;
      case Kind::kCodes: {
        const std::uint32_t random = enc.stochastic ? std::uint32_t(rng()) : 0u;
        *dst = to.fmt->spec ? core::encode_f32_bits_with(b, *to.fmt->spec, enc.policy, random)
                            : core::e8m0_from_f32_bits(b, enc.e8m0_satfinite, enc.e8m0_up);
        break;
      }
    }
  }

  // 5. Write once, atomically.
  if (out_npy) io::write_npy(o.out, r);
  else io::write_file_atomic(o.out, std::string(r.data.begin(), r.data.end()));
  if (o.amax) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", double(amax));
    out << "amax: " << b << "\n";
  }
  out << o.in << " (" << in.name() << ", shape " << shape_text(a.shape) << ") -> " << o.out << " (" << to.name()
      << (to.kind == Kind::kCodes ? " codes, " : ", ") << (out_npy ? std::string(".npy ") + r.dtype : "raw") << ")\n";
  return 0;
}

}  // namespace

std::string format_names() {
  std::string s;
  for (const FormatInfo& f : kFormats) {
    if (!s.empty()) s += ", ";
    s += f.name;
    std::string al;
    for (const char* a : f.aliases)
      if (a) al += std::string(al.empty() ? "" : ", ") + a;
    if (!al.empty()) s += " (" + al + ")";
  }
  return s;
}

int run_explain(const ExplainOptions& o, std::ostream& out, std::ostream& err) {
  try {
    std::vector<const FormatInfo*> fmts;
    if (o.format == "all") {
      FP8EMU_CHECK(!o.code, "--code needs one format, not --format all");
      for (const FormatInfo& f : kFormats) fmts.push_back(&f);
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
    err << "fp8emu explain: error: " << e.what() << "\n";
    return 2;
  }
}

int run_table(const TableOptions& o, std::ostream& out, std::ostream& err) {
  try {
    const FormatInfo& f = find_format(o.format, "--format");
    struct Line {
      std::string code, fields, sign, exponent, mantissa, value, cls;
    };
    std::vector<Line> lines;
    for (std::uint32_t c = 0; c < code_count(f); ++c) {
      Line l;
      l.code = hex_code(c, f);
      l.fields = fields(c, f);
      if (f.spec) {
        const FormatSpec& s = *f.spec;
        l.sign = binary(c >> (s.bits() - 1), 1);
        l.exponent = binary((c >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1u), s.exponent_bits);
        l.mantissa = binary(c & ((1u << s.mantissa_bits) - 1u), s.mantissa_bits);
      } else {
        l.exponent = binary(c, 8);
      }
      l.value = code_value_text(c, f);
      if (o.csv) {
        if (l.value == "NaN" || l.value == "-NaN") l.value = "nan";
        if (l.value == "Inf") l.value = "inf";
        if (l.value == "-Inf") l.value = "-inf";
      }
      l.cls = code_class(c, f);
      lines.push_back(l);
    }
    std::ostringstream text;
    if (o.csv) {
      text << "code,sign,exponent,mantissa,value,class\n";
      for (const Line& l : lines)
        text << l.code << "," << l.sign << "," << l.exponent << "," << l.mantissa << "," << l.value << "," << l.cls
             << "\n";
    } else {
      std::size_t wv = 5;
      for (const Line& l : lines) wv = std::max(wv, l.value.size());
      text << describe(f) << "\n";
      const std::string fields_head = f.spec ? "s | " + std::string(std::size_t(f.spec->exponent_bits), 'e') + " | " +
                                                   std::string(std::size_t(f.spec->mantissa_bits), 'm')
                                             : "eeeeeeee";
      const std::size_t wc = lines[0].code.size(), wf = std::max(fields_head.size(), std::size_t(6));
      auto row = [&](const std::string& c, const std::string& fl, const std::string& v, const std::string& k) {
        text << c << std::string(wc + 2 - c.size(), ' ') << fl << std::string(wf + 2 - fl.size(), ' ')
             << std::string(wv - v.size(), ' ') << v << "  " << k << "\n";
      };
      row(std::string("code").substr(0, std::max<std::size_t>(wc, 4)), fields_head, "value", "class");
      for (const Line& l : lines) row(l.code, l.fields, l.value, l.cls);
    }
    out << text.str();
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu table: error: " << e.what() << "\n";
    return 2;
  }
}

int run_convert(const ConvertOptions& o, std::ostream& out, std::ostream& err) {
  try {
    return convert(o, out);
  } catch (const std::exception& e) {
    err << "fp8emu convert: error: " << e.what() << "\n";
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

}  // namespace fp8emu::cli
