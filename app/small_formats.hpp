// The small formats that `fp8emu explain`, `table` and `convert` accept (every format of
// format_spec.hpp and E8M0), with the code-level helpers the three share: names and aliases, fields,
// classes and exact values of codes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {

/// The accepted --format names and aliases, for help texts and error messages.
inline std::string format_names();

// ------------------------------------------------------------------------------------ formats

/// One format the tools accept: a view of a row of fp8emu's format registry (kFormats in
/// format_spec.hpp), with spec == nullptr for E8M0, whose conversions are core/e8m0.hpp rather than
/// the element encoder.
struct FormatInfo {
  Format id;
  const char* name;
  const char* aliases[2];  ///< nullptr-padded
  const FormatSpec* spec;  ///< nullptr: E8M0 (core/e8m0.hpp)
  const char* title;
};

/// The registry's code formats in registry order (binary16 and bfloat16 are dtypes of --from/--to).
inline const std::vector<FormatInfo>& tool_formats() {
  static const std::vector<FormatInfo> formats = [] {
    std::vector<FormatInfo> v;
    for (const FormatRecord& r : ::fp8emu::kFormats) {
      if (r.family == FormatFamily::kWide) continue;
      v.push_back({r.id, r.spec->name, {r.aliases[0], r.aliases[1]}, r.id == Format::kE8M0 ? nullptr : r.spec,
                   r.title});
    }
    return v;
  }();
  return formats;
}

inline const FormatInfo* lookup_format(const std::string& s) {
  Format f = Format::kE4M3;
  if (!find_format(s.data(), s.size(), &f)) return nullptr;
  for (const FormatInfo& i : tool_formats())
    if (i.id == f) return &i;
  return nullptr;  // a registry format that is not a code format (binary16, bfloat16)
}

inline const FormatInfo& find_format(const std::string& s, const char* what) {
  const FormatInfo* f = lookup_format(s);
  FP8EMU_CHECK(f, "unknown ", what, " '", s, "' (accepted: ", format_names(), ")");
  return *f;
}

inline int code_bits(const FormatInfo& f) { return f.spec ? f.spec->bits() : 8; }
inline std::uint32_t code_count(const FormatInfo& f) { return 1u << code_bits(f); }

// Exact decimal expansion of a double (every double is a dyadic rational, so it terminates):
// glibc's printf prints exact digits at any precision, and 767 significant digits after the first
// cover every double. Plain notation for 1e-7 <= |v| < 1e21, otherwise d.ddd...e+XX.
inline std::string exact_decimal(double v) {
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

inline std::string binary(std::uint32_t v, int n) {
  std::string s;
  for (int i = n - 1; i >= 0; --i) s += ((v >> i) & 1u) ? '1' : '0';
  return s;
}

inline std::string hex_code(std::uint32_t code, const FormatInfo& f) {
  char b[16];
  const int digits = code_bits(f) <= 4 ? 1 : 2;  // every format has at most 8 bits
  std::snprintf(b, sizeof b, "0x%0*X", digits, code);
  return b;
}

/// The code's fields: "s | eeee | mmm", or E8M0's 8 exponent bits.
inline std::string fields(std::uint32_t code, const FormatInfo& f) {
  if (!f.spec) return binary(code, 8);
  const FormatSpec& s = *f.spec;
  return binary(code >> (s.bits() - 1), 1) + " | " +
         binary((code >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1u), s.exponent_bits) + " | " +
         binary(code & ((1u << s.mantissa_bits) - 1u), s.mantissa_bits);
}

inline bool is_nan_code(std::uint32_t code, const FormatInfo& f) {
  if (!f.spec) return code == core::kE8M0NaN;
  const FormatSpec& s = *f.spec;
  if (s.fnuz) return code == s.nan_code();
  const std::uint32_t mag = code & s.top_code();
  return mag > s.max_finite_code() && !(s.has_inf && mag == s.inf_code());
}

inline bool is_inf_code(std::uint32_t code, const FormatInfo& f) {
  return f.spec && f.spec->has_inf && (code & f.spec->top_code()) == f.spec->inf_code();
}

/// zero, subnormal, normal, max, inf or nan. Every E8M0 code but NaN and the max is "normal"
/// (E8M0 has neither zero nor subnormals: code 0 is 2^-127).
inline const char* code_class(std::uint32_t code, const FormatInfo& f) {
  if (is_nan_code(code, f)) return "nan";
  if (is_inf_code(code, f)) return "inf";
  if (!f.spec) return code == core::kE8M0MaxCode ? "max" : "normal";
  const FormatSpec& s = *f.spec;
  const std::uint32_t mag = code & s.top_code();
  if (mag == s.max_finite_code()) return "max";
  if (mag == 0) return "zero";
  return (mag >> s.mantissa_bits) == 0 ? "subnormal" : "normal";
}

inline std::uint32_t decode_bits(std::uint32_t code, const FormatInfo& f) {
  return f.spec ? core::decode_code_to_f32_bits(code, *f.spec) : core::e8m0_to_f32_bits(std::uint8_t(code));
}

inline double code_value(std::uint32_t code, const FormatInfo& f) { return core::bits_to_f32(decode_bits(code, f)); }

/// The value of a code as text: exact decimal, Inf, NaN (with the sign the code carries).
inline std::string code_value_text(std::uint32_t code, const FormatInfo& f) {
  const bool neg = f.spec && !f.spec->fnuz && (code & f.spec->sign_mask());
  if (is_nan_code(code, f)) return neg ? "-NaN" : "NaN";
  if (is_inf_code(code, f)) return neg ? "-Inf" : "Inf";
  return exact_decimal(code_value(code, f));
}

/// code_value_text, with E8M0 values also written as powers of two ("2^-3 = 0.125"), for explain.
inline std::string shown_value(std::uint32_t code, const FormatInfo& f) {
  if (f.spec || is_nan_code(code, f)) return code_value_text(code, f);
  return "2^" + std::to_string(int(code) - core::kE8M0Bias) + " = " + code_value_text(code, f);
}

/// One line describing the format, every number derived from its record.
inline std::string describe(const FormatInfo& f) {
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

inline std::string format_names() {
  std::string s;
  for (const FormatInfo& f : tool_formats()) {
    if (!s.empty()) s += ", ";
    s += f.name;
    std::string al;
    for (const char* a : f.aliases)
      if (a) al += std::string(al.empty() ? "" : ", ") + a;
    if (!al.empty()) s += " (" + al + ")";
  }
  return s;
}

}  // namespace fp8emu::cli
