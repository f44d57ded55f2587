/// \file format_spec.hpp
/// \brief The one description of each FP8 format. Every limit, code and threshold used anywhere in
/// fp8emu (conversions, kernels, recipes, tests of the library's own constants) is derived from
/// these records.
///
/// Formats (OCP 8-bit Floating Point Specification (OFP8) Revision 1.0, 2023, Table 1 and 2):
///
///     E4M3 (OCP "e4m3fn", ml_dtypes float8_e4m3fn, CUDA __NV_E4M3)
///       S.EEEE.MMM  bias 7, no infinity, NaN = S.1111.111 only, max finite S.1111.110
///     E5M2 (OCP "e5m2", ml_dtypes float8_e5m2, CUDA __NV_E5M2)
///       S.EEEEE.MM  bias 15, IEEE-like: Inf = S.11111.00, NaN = S.11111.{01,10,11}
///
/// A record states the field widths, the bias, whether the top exponent holds an infinity, and how
/// many codes per sign at the top of the code space are NaN. Everything else is a constexpr function
/// of those fields, checked against the OCP table by the static_asserts at the end of this file.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/config.hpp"

namespace fp8emu {

/// Exact power of two as a double, usable in constant expressions (|e| <= 1000).
FP8EMU_HD constexpr double pow2(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r *= 0.5;
  return r;
}

/// Description of one small binary floating-point format with sign bit, exponent field and
/// trailing significand field (the OCP/IEEE layout). Instances are constexpr; see kSpecE4M3 / kSpecE5M2.
struct FormatSpec {
  const char* name;   ///< The field's name for the format: "e4m3fn", "e5m2".
  int exponent_bits;  ///< Width of the exponent field.
  int mantissa_bits;  ///< Width of the trailing significand field (no implicit bit).
  int bias;           ///< Exponent bias.
  bool has_inf;       ///< True when the code below the NaNs at the top exponent is +-Inf.
  int nan_codes;      ///< NaN codes per sign, at the top of the code space (S.1..1.1..1 downwards).
  bool fnuz = false;  ///< "fnuz" layout (AMD/Graphcore): no -0 and no Inf; the one NaN is the code
                      ///< of -0 (sign bit only); all other codes are finite.
  bool has_sign = true;    ///< False for unsigned formats (E8M0): no sign bit, sign_mask() is 0.
  bool subnormals = true;  ///< False when exponent field 0 is a normal binade (E8M0: code 0 = 2^-bias).

  /// Total width in bits (sign included).
  FP8EMU_HD constexpr int bits() const { return (has_sign ? 1 : 0) + exponent_bits + mantissa_bits; }
  /// The sign bit of a code (0 for unsigned formats).
  FP8EMU_HD constexpr std::uint32_t sign_mask() const {
    return has_sign ? 1u << (exponent_bits + mantissa_bits) : 0u;
  }
  /// Largest magnitude code (all exponent and mantissa bits set).
  FP8EMU_HD constexpr std::uint32_t top_code() const { return (1u << (exponent_bits + mantissa_bits)) - 1u; }
  /// Whether the format has a NaN code at all (the OCP FP6/FP4 element formats have none).
  FP8EMU_HD constexpr bool has_nan() const { return fnuz || nan_codes > 0; }
  /// Canonical NaN code, positive sign (CUDA's float entry point returns this for every NaN); for
  /// fnuz formats the -0 code. Only meaningful when has_nan().
  FP8EMU_HD constexpr std::uint32_t nan_code() const { return fnuz ? sign_mask() : top_code(); }
  /// Infinity code, positive sign; only meaningful when has_inf.
  FP8EMU_HD constexpr std::uint32_t inf_code() const { return top_code() - std::uint32_t(nan_codes); }
  /// Whether a code is NaN or Inf: a magnitude above max_finite_code(), or for fnuz formats the one
  /// NaN (the -0 code).
  FP8EMU_HD constexpr bool is_special_code(std::uint32_t c) const {
    return fnuz ? c == nan_code() : (c & top_code()) > max_finite_code();
  }
  /// Whether a code is a zero: +0 or -0 (fnuz formats: only code 0, their -0 code being NaN).
  FP8EMU_HD constexpr bool is_zero_code(std::uint32_t c) const { return fnuz ? c == 0 : (c & top_code()) == 0; }
  /// Code of the largest finite magnitude.
  FP8EMU_HD constexpr std::uint32_t max_finite_code() const {
    return top_code() - std::uint32_t(nan_codes) - (has_inf ? 1u : 0u);
  }
  /// Smallest exponent of a normal number (unbiased).
  FP8EMU_HD constexpr int emin() const { return subnormals ? 1 - bias : -bias; }
  /// Exponent of the largest finite number (unbiased).
  FP8EMU_HD constexpr int emax() const { return int(max_finite_code() >> mantissa_bits) - bias; }
  /// Value of a non-negative finite magnitude code, exactly, as a double.
  FP8EMU_HD constexpr double value_of_code(std::uint32_t mag) const {
    const std::uint32_t e = mag >> mantissa_bits;
    const std::uint32_t m = mag & ((1u << mantissa_bits) - 1u);
    return e == 0 && subnormals ? double(m) * pow2(emin() - mantissa_bits)
                                : double((1u << mantissa_bits) + m) * pow2(int(e) - bias - mantissa_bits);
  }
  /// Largest finite value.
  FP8EMU_HD constexpr double max_finite() const { return value_of_code(max_finite_code()); }
  /// Smallest positive normal value, 2^emin.
  FP8EMU_HD constexpr double min_normal() const { return pow2(emin()); }
  /// Smallest positive subnormal value, 2^(emin - mantissa_bits).
  FP8EMU_HD constexpr double min_subnormal() const { return pow2(emin() - mantissa_bits); }
  /// Max finite plus half an ulp: magnitudes above it overflow under round-to-nearest-even.
  FP8EMU_HD constexpr double overflow_threshold() const {
    return max_finite() + pow2(emax() - mantissa_bits - 1);
  }
  /// Whether the threshold itself overflows: the tie goes to the even neighbour, which is above the
  /// max when the max code's mantissa is odd.
  FP8EMU_HD constexpr bool overflow_at_threshold() const { return (max_finite_code() & 1u) != 0; }
  /// Whether a magnitude |v| (fp32, not NaN) overflows the format under RNE: what __NV_SATFINITE
  /// clips and __NV_NOSAT turns into Inf/NaN.
  FP8EMU_HD constexpr bool overflows(float abs_v) const {
    return abs_v > float(overflow_threshold()) || (overflow_at_threshold() && abs_v == float(overflow_threshold()));
  }
};

/// OCP E4M3 ("e4m3fn"): finite only, one NaN code per sign.
inline constexpr FormatSpec kSpecE4M3{"e4m3fn", 4, 3, 7, false, 1};
/// OCP E5M2: IEEE-like, +-Inf and three NaN codes per sign.
inline constexpr FormatSpec kSpecE5M2{"e5m2", 5, 2, 15, true, 3};

/// ml_dtypes float8_e4m3fnuz (Graphcore/AMD): bias 8, no Inf, no -0, NaN = 0x80.
inline constexpr FormatSpec kSpecE4M3FNUZ{"e4m3fnuz", 4, 3, 8, false, 0, true};
/// ml_dtypes float8_e5m2fnuz: bias 16, no Inf, no -0, NaN = 0x80.
inline constexpr FormatSpec kSpecE5M2FNUZ{"e5m2fnuz", 5, 2, 16, false, 0, true};
/// OCP MX v1.0 FP6 E2M3 (ml_dtypes float6_e2m3fn, CUDA __NV_E2M3): bias 1, no Inf, no NaN.
inline constexpr FormatSpec kSpecE2M3{"e2m3fn", 2, 3, 1, false, 0};
/// OCP MX v1.0 FP6 E3M2 (ml_dtypes float6_e3m2fn, CUDA __NV_E3M2): bias 3, no Inf, no NaN.
inline constexpr FormatSpec kSpecE3M2{"e3m2fn", 3, 2, 3, false, 0};
/// OCP MX v1.0 FP4 E2M1 (ml_dtypes float4_e2m1fn, CUDA __NV_E2M1): bias 1, no Inf, no NaN.
inline constexpr FormatSpec kSpecE2M1{"e2m1fn", 2, 1, 1, false, 0};

/// OCP MX v1.0 E8M0 scale (ml_dtypes float8_e8m0fnu): unsigned, 8 exponent bits, bias 127, no zero
/// (code 0 is 2^-127), NaN = 0xFF. Its conversions are core/e8m0.hpp.
inline constexpr FormatSpec kSpecE8M0{"e8m0fnu", 8, 0, 127, false, 1, false, false, false};
/// IEEE 754 binary16 ("half"): the wide source and destination format of the casts (core/half.hpp).
inline constexpr FormatSpec kSpecBinary16{"binary16", 5, 10, 15, true, 1023};
/// bfloat16: fp32's exponent with 7 mantissa bits (core/half.hpp).
inline constexpr FormatSpec kSpecBFloat16{"bfloat16", 8, 7, 127, true, 127};

/// Run-time selector of a format: an index into kFormats. The FP8 kernels, recipes and GEMMs take
/// the OCP FP8 formats (is_fp8(f)); the conversion tools take every element format.
enum class Format : std::uint8_t {
  kE4M3,      ///< OCP FP8 e4m3fn.
  kE5M2,      ///< OCP FP8 e5m2.
  kE4M3FNUZ,  ///< e4m3fnuz.
  kE5M2FNUZ,  ///< e5m2fnuz.
  kE8M0,      ///< OCP MX scale e8m0fnu.
  kE2M3,      ///< OCP MX FP6 e2m3fn.
  kE3M2,      ///< OCP MX FP6 e3m2fn.
  kE2M1,      ///< OCP MX FP4 e2m1fn.
  kBinary16,  ///< IEEE half.
  kBFloat16,  ///< bfloat16.
};

/// What a format is for.
enum class FormatFamily : std::uint8_t {
  kFp8,      ///< OCP FP8: the operands of the FP8 kernels, recipes and GEMMs.
  kFp8Fnuz,  ///< FP8 without -0 and Inf (Graphcore/AMD): conversions, and the per-tensor casts
             ///< and GEMMs on the CPU (ROCm TE's FP8 types on MI300).
  kFp6,      ///< OCP MX FP6 elements: conversions only.
  kFp4,      ///< OCP MX FP4 elements: conversions only.
  kScale,    ///< Block scales (E8M0).
  kWide,     ///< 16-bit source/destination formats of the casts.
};

/// One row of the format registry.
struct FormatRecord {
  Format id;
  const FormatSpec* spec;  ///< The layout; spec->name is the canonical name.
  const char* aliases[2];  ///< Other accepted names (nullptr-padded).
  const char* title;       ///< One line for tables and help texts.
  FormatFamily family;
};

/// The registry, indexed by Format. Adding a format: its FormatSpec above (with the static_asserts
/// of its defining table below), an enumerator and a row here.
inline constexpr FormatRecord kFormats[] = {
    {Format::kE4M3, &kSpecE4M3, {"e4m3", nullptr}, "OCP FP8 E4M3", FormatFamily::kFp8},
    {Format::kE5M2, &kSpecE5M2, {nullptr, nullptr}, "OCP FP8 E5M2", FormatFamily::kFp8},
    {Format::kE4M3FNUZ, &kSpecE4M3FNUZ, {nullptr, nullptr}, "FP8 E4M3 fnuz, Graphcore/AMD", FormatFamily::kFp8Fnuz},
    {Format::kE5M2FNUZ, &kSpecE5M2FNUZ, {nullptr, nullptr}, "FP8 E5M2 fnuz, Graphcore/AMD", FormatFamily::kFp8Fnuz},
    {Format::kE8M0, &kSpecE8M0, {"e8m0", nullptr}, "OCP MX E8M0 scale", FormatFamily::kScale},
    {Format::kE2M3, &kSpecE2M3, {"e2m3", "fp6"}, "OCP MX FP6 E2M3", FormatFamily::kFp6},
    {Format::kE3M2, &kSpecE3M2, {nullptr, nullptr}, "OCP MX FP6 E3M2", FormatFamily::kFp6},
    {Format::kE2M1, &kSpecE2M1, {"e2m1", "fp4"}, "OCP MX FP4 E2M1", FormatFamily::kFp4},
    {Format::kBinary16, &kSpecBinary16, {"half", nullptr}, "IEEE binary16", FormatFamily::kWide},
    {Format::kBFloat16, &kSpecBFloat16, {nullptr, nullptr}, "bfloat16", FormatFamily::kWide},
};
inline constexpr int kFormatCount = int(sizeof(kFormats) / sizeof(kFormats[0]));

/// The registry row of a format.
constexpr const FormatRecord& record_of(Format f) { return kFormats[int(f)]; }
/// The layout record of a run-time format.
constexpr const FormatSpec& spec_of(Format f) { return *kFormats[int(f)].spec; }
/// The canonical name ("e4m3fn", "e5m2", ...).
constexpr const char* format_name(Format f) { return spec_of(f).name; }
/// Whether f is an OCP FP8 format, the operand formats of the FP8 kernels, recipes and GEMMs.
constexpr bool is_fp8(Format f) { return record_of(f).family == FormatFamily::kFp8; }
/// Whether f is an FP8 format of the per-tensor recipes, casts and GEMMs of the CPU devices: the
/// OCP formats (TE on NVIDIA GPUs) and the FNUZ ones (ROCm's TE on MI300), each cast as its platform
/// casts (core::cast_code). The CUDA kernels take the OCP formats only (is_fp8).
constexpr bool is_fp8_or_fnuz(Format f) {
  const FormatFamily k = record_of(f).family;
  return k == FormatFamily::kFp8 || k == FormatFamily::kFp8Fnuz;
}
/// Whether f is an OCP MX element format (FP8 E4M3/E5M2, FP6 E2M3/E3M2, FP4 E2M1): the element
/// formats of the block-scaled casts and GEMMs.
constexpr bool is_mx_element(Format f) {
  const FormatFamily k = record_of(f).family;
  return k == FormatFamily::kFp8 || k == FormatFamily::kFp6 || k == FormatFamily::kFp4;
}

namespace detail {
constexpr bool same_name(const char* a, const char* b, std::size_t nb) {
  std::size_t i = 0;
  for (; i < nb; ++i)
    if (a[i] == '\0' || a[i] != b[i]) return false;
  return a[i] == '\0';
}
constexpr bool format_table_in_order() {
  for (int i = 0; i < kFormatCount; ++i)
    if (int(kFormats[i].id) != i) return false;
  return true;
}
}  // namespace detail
static_assert(detail::format_table_in_order(), "kFormats must be indexed by Format");

/// The format whose canonical name or alias is the `n` characters at `name`; false if none.
constexpr bool find_format(const char* name, std::size_t n, Format* out) {
  for (const FormatRecord& r : kFormats) {
    bool hit = detail::same_name(r.spec->name, name, n);
    for (const char* a : r.aliases) hit = hit || (a != nullptr && detail::same_name(a, name, n));
    if (hit) {
      *out = r.id;
      return true;
    }
  }
  return false;
}

/// Largest finite value of a run-time format as fp32 (exact for every format of the registry).
constexpr float max_finite_f32(Format f) { return float(spec_of(f).max_finite()); }

// The OCP OFP8 r1.0 table, checked once here; the only place these values are written.
static_assert(kSpecE4M3.max_finite_code() == 0b0'1111'110, "OCP: E4M3 max normal is S.1111.110");
static_assert(kSpecE4M3.max_finite() == 448.0, "OCP: E4M3 max normal = 448");
static_assert(kSpecE4M3.min_normal() == 1.0 / 64, "OCP: E4M3 min normal = 2^-6");
static_assert(kSpecE4M3.min_subnormal() == 1.0 / 512, "OCP: E4M3 min subnormal = 2^-9");
static_assert(kSpecE4M3.nan_code() == 0b0'1111'111, "OCP: E4M3 NaN is S.1111.111");
static_assert(kSpecE4M3.emax() == 8, "OCP: E4M3 emax = 8");
static_assert(kSpecE4M3.overflow_threshold() == 464.0 && !kSpecE4M3.overflow_at_threshold(),
              "E4M3: 464 = 448 + 16 ties to even 448; above it overflows");
static_assert(kSpecE5M2.max_finite_code() == 0b0'11110'11, "OCP: E5M2 max normal is S.11110.11");
static_assert(kSpecE5M2.max_finite() == 57344.0, "OCP: E5M2 max normal = 57344");
static_assert(kSpecE5M2.min_normal() == 1.0 / 16384, "OCP: E5M2 min normal = 2^-14");
static_assert(kSpecE5M2.min_subnormal() == 1.0 / 65536, "OCP: E5M2 min subnormal = 2^-16");
static_assert(kSpecE5M2.inf_code() == 0b0'11111'00, "OCP: E5M2 Inf is S.11111.00");
static_assert(kSpecE5M2.emax() == 15, "OCP: E5M2 emax = 15");
static_assert(kSpecE5M2.overflow_threshold() == 61440.0 && kSpecE5M2.overflow_at_threshold(),
              "E5M2: 61440 = 57344 + 4096 ties to even 2^16, which overflows");

// OCP Microscaling Formats (MX) v1.0, Tables 3-5 (FP6 and FP4 element formats).
static_assert(kSpecE2M3.max_finite() == 7.5 && kSpecE2M3.min_normal() == 1.0 &&
                  kSpecE2M3.min_subnormal() == 0.125 && kSpecE2M3.bits() == 6 && !kSpecE2M3.has_nan(),
              "OCP MX: FP6 E2M3 max 7.5, min normal 1, min subnormal 2^-3, no Inf/NaN");
static_assert(kSpecE3M2.max_finite() == 28.0 && kSpecE3M2.min_normal() == 0.25 &&
                  kSpecE3M2.min_subnormal() == 0.0625 && kSpecE3M2.bits() == 6 && !kSpecE3M2.has_nan(),
              "OCP MX: FP6 E3M2 max 28, min normal 2^-2, min subnormal 2^-4, no Inf/NaN");
static_assert(kSpecE2M1.max_finite() == 6.0 && kSpecE2M1.min_normal() == 1.0 &&
                  kSpecE2M1.min_subnormal() == 0.5 && kSpecE2M1.bits() == 4 && !kSpecE2M1.has_nan(),
              "OCP MX: FP4 E2M1 max 6, min normal 1, min subnormal 2^-1, no Inf/NaN");
// fnuz formats: Noune et al., "8-bit Numerical Formats for Deep Neural Networks" (2022), and the
// ml_dtypes README (float8_e4m3fnuz max 240, float8_e5m2fnuz max 57344, NaN = 0x80).
static_assert(kSpecE4M3FNUZ.max_finite() == 240.0 && kSpecE4M3FNUZ.max_finite_code() == 0x7F &&
                  kSpecE4M3FNUZ.min_normal() == 1.0 / 128 && kSpecE4M3FNUZ.min_subnormal() == 1.0 / 1024 &&
                  kSpecE4M3FNUZ.nan_code() == 0x80,
              "e4m3fnuz: max 240 at 0x7F, min normal 2^-7, min subnormal 2^-10, NaN 0x80");
static_assert(kSpecE5M2FNUZ.max_finite() == 57344.0 && kSpecE5M2FNUZ.max_finite_code() == 0x7F &&
                  kSpecE5M2FNUZ.min_normal() == 1.0 / 32768 && kSpecE5M2FNUZ.min_subnormal() == 1.0 / 131072 &&
                  kSpecE5M2FNUZ.nan_code() == 0x80,
              "e5m2fnuz: max 57344 at 0x7F, min normal 2^-15, min subnormal 2^-17, NaN 0x80");

// OCP MX v1.0 Table 7 (E8M0): 2^-127 .. 2^127, NaN 0xFF, no sign, no zero.
static_assert(kSpecE8M0.bits() == 8 && kSpecE8M0.max_finite_code() == 0xFE && kSpecE8M0.nan_code() == 0xFF &&
                  kSpecE8M0.max_finite() == pow2(127) && kSpecE8M0.value_of_code(0) == pow2(-127) &&
                  kSpecE8M0.sign_mask() == 0,
              "OCP MX: E8M0 spans 2^-127 (code 0) to 2^127 (0xFE), NaN 0xFF, unsigned");
// IEEE 754-2019 Table 3.5 (binary16) and the bfloat16 definition (fp32's top 16 bits).
static_assert(kSpecBinary16.bits() == 16 && kSpecBinary16.max_finite() == 65504.0 &&
                  kSpecBinary16.min_normal() == pow2(-14) && kSpecBinary16.min_subnormal() == pow2(-24) &&
                  kSpecBinary16.inf_code() == 0x7C00 && kSpecBinary16.max_finite_code() == 0x7BFF,
              "binary16: max 65504, min normal 2^-14, min subnormal 2^-24, Inf 0x7C00");
static_assert(kSpecBFloat16.bits() == 16 && kSpecBFloat16.max_finite() == (2.0 - pow2(-7)) * pow2(127) &&
                  kSpecBFloat16.min_normal() == pow2(-126) && kSpecBFloat16.min_subnormal() == pow2(-133) &&
                  kSpecBFloat16.inf_code() == 0x7F80,
              "bfloat16: max (2 - 2^-7) 2^127, min normal 2^-126, min subnormal 2^-133, Inf 0x7F80");
static_assert(is_fp8(Format::kE4M3) && is_fp8(Format::kE5M2) && !is_fp8(Format::kE2M1),
              "the FP8 kernels take e4m3fn and e5m2");

}  // namespace fp8emu
