/// \file types.hpp
/// \brief Native value types for the small formats, named as ml_dtypes and PyTorch name them:
/// float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, float6_e2m3fn,
/// float6_e3m2fn, float4_e2m1fn; with std::numeric_limits, all derived from format_spec.hpp.
///
/// Storage: one byte holding the code in its low bits (FP6: 6, FP4: 4; the rest zero).
/// Conversions:
///   - `T(float)` / `T(double)`: CUDA's constructor semantics (`__nv_fp8_e4m3(float)`,
///     `__nv_fp6_e2m3(float)`, `__nv_fp8_e8m0(float)`, ...): round to nearest even, saturate to
///     +-max finite (Inf included), NaN to the canonical code (float) or keeping its sign and payload
///     (double). E8M0 rounds up (`cudaRoundPosInf`, satfinite). fnuz types have no CUDA twin and use
///     the same rules (NaN -> 0x80).
///   - `T::from_float(x, policy, random_bits)` / `T::from_double(...)`: any Policy of
///     core/encode.hpp (rounding incl. stochastic, overflow, NaN encoding), e.g. Policy::ml_dtypes()
///     or Policy::pytorch() to reproduce those libraries (docs/conversion-policies.md).
///   - `static_cast<float>(t)` / `static_cast<double>(t)`: exact; NaN codes give a quiet NaN.
/// Comparisons follow IEEE (NaN unordered, -0 == +0), through the exact float value.
/// No +, -, *, / between values, on purpose: an FP8 scalar must never accumulate a sum or product
/// (see eigen.hpp); compute in float and convert the result explicitly. Only the exact operations
/// are defined: unary minus and abs (sign bit), comparisons.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <type_traits>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu {

namespace detail {
inline std::uint64_t bits_of_double(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
}  // namespace detail

/// A value of the sign/exponent/mantissa format `F` (see file comment).
template <const FormatSpec& F>
class SmallFloat {
 public:
  using storage_type = std::uint8_t;
  /// The format record.
  static constexpr const FormatSpec& spec() { return F; }

  /// +0.
  constexpr SmallFloat() = default;
  /// CUDA constructor semantics: RNE, satfinite, canonical NaN.
  explicit SmallFloat(float x) : bits_(core::encode_f32_bits_with(core::f32_to_bits(x), F, Policy{})) {}
  /// Integers (any integral type) convert through double, as `T(double(x))`: exact for
  /// |x| < 2^53, and every larger magnitude saturates anyway.
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  explicit SmallFloat(I x) : SmallFloat(double(x)) {}
  /// CUDA double constructor semantics: one rounding, satfinite, NaN keeps sign and payload.
  explicit SmallFloat(double x)
      : bits_(core::encode_f64_bits(detail::bits_of_double(x), F, Policy::cuda_double(true))) {}
  /// The value with code `bits` (bits above the format are cleared).
  static constexpr SmallFloat from_bits(std::uint8_t bits) {
    SmallFloat r;
    r.bits_ = std::uint8_t(bits & ((F.sign_mask() << 1) - 1u));
    return r;
  }
  /// fp32 -> this format under `p`; `random_bits` is used by Rounding::kStochastic only.
  static SmallFloat from_float(float x, Policy p, std::uint32_t random_bits = 0) {
    return from_bits(core::encode_f32_bits_with(core::f32_to_bits(x), F, p, random_bits));
  }
  /// fp64 -> this format under `p`, one rounding.
  static SmallFloat from_double(double x, Policy p, std::uint32_t random_bits = 0) {
    return from_bits(core::encode_f64_bits(detail::bits_of_double(x), F, p, random_bits));
  }

  /// The code.
  constexpr std::uint8_t bits() const { return bits_; }
  /// Exact value (NaN codes: quiet NaN).
  explicit operator float() const { return core::bits_to_f32(core::decode_code_to_f32_bits(bits_, F)); }
  explicit operator double() const { return double(float(*this)); }

  bool isnan() const { return F.has_nan() && core::decode_code_to_f32_bits(bits_, F) == 0x7FFFFFFFu; }
  bool isinf() const { return F.has_inf && (bits_ & F.top_code()) == F.inf_code(); }
  bool signbit() const { return (bits_ & F.sign_mask()) != 0; }

  friend bool operator==(SmallFloat a, SmallFloat b) { return float(a) == float(b); }
  friend bool operator!=(SmallFloat a, SmallFloat b) { return float(a) != float(b); }
  friend bool operator<(SmallFloat a, SmallFloat b) { return float(a) < float(b); }
  friend bool operator<=(SmallFloat a, SmallFloat b) { return float(a) <= float(b); }
  friend bool operator>(SmallFloat a, SmallFloat b) { return float(a) > float(b); }
  friend bool operator>=(SmallFloat a, SmallFloat b) { return float(a) >= float(b); }
  friend std::ostream& operator<<(std::ostream& os, SmallFloat v) { return os << float(v); }

  /// Exact sign flip (the sign bit; fnuz formats have no -0 and keep +0 and their NaN).
  friend SmallFloat operator-(SmallFloat v) {
    if (F.fnuz && (v.bits_ & F.top_code()) == 0) return v;
    return from_bits(std::uint8_t(v.bits_ ^ F.sign_mask()));
  }
  /// Exact magnitude (found by Eigen's cwiseAbs through argument-dependent lookup).
  friend SmallFloat abs(SmallFloat v) {
    if (F.fnuz && v.bits_ == F.nan_code()) return v;
    return from_bits(std::uint8_t(v.bits_ & ~F.sign_mask()));
  }

  // Deleted on purpose: no sum or product may be formed (or accumulated) in an FP8 scalar; this
  // is also what makes an Eigen product of FP8 matrices fail to compile (eigen.hpp).
  friend SmallFloat operator+(SmallFloat, SmallFloat) = delete;
  friend SmallFloat operator-(SmallFloat, SmallFloat) = delete;
  friend SmallFloat operator*(SmallFloat, SmallFloat) = delete;
  friend SmallFloat operator/(SmallFloat, SmallFloat) = delete;
  SmallFloat& operator+=(SmallFloat) = delete;
  SmallFloat& operator-=(SmallFloat) = delete;
  SmallFloat& operator*=(SmallFloat) = delete;
  SmallFloat& operator/=(SmallFloat) = delete;

 private:
  std::uint8_t bits_ = 0;
};

/// OCP MX v1.0 E8M0 scale (ml_dtypes float8_e8m0fnu): 2^(code - 127), code 0xFF = NaN, no sign,
/// no zero, no Inf.
class float8_e8m0fnu {
 public:
  using storage_type = std::uint8_t;
  /// 2^-127 (code 0).
  constexpr float8_e8m0fnu() = default;
  /// CUDA `__nv_fp8_e8m0(float)`: `__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)`:
  /// the exponent of |x| rounded up; 0 and values <= 2^-127 give 2^-127; NaN -> 0xFF.
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  explicit float8_e8m0fnu(I x) : float8_e8m0fnu(double(x)) {}
  explicit float8_e8m0fnu(float x) : bits_(core::e8m0_from_f32_bits(core::f32_to_bits(x), true, true)) {}
  /// `__nv_cvt_double_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)`.
  explicit float8_e8m0fnu(double x) : bits_(core::e8m0_from_f64_bits(detail::bits_of_double(x), true, true)) {}
  static constexpr float8_e8m0fnu from_bits(std::uint8_t bits) {
    float8_e8m0fnu r;
    r.bits_ = bits;
    return r;
  }
  constexpr std::uint8_t bits() const { return bits_; }
  explicit operator float() const { return core::bits_to_f32(core::e8m0_to_f32_bits(bits_)); }
  explicit operator double() const { return double(float(*this)); }
  bool isnan() const { return bits_ == core::kE8M0NaN; }
  bool isinf() const { return false; }
  bool signbit() const { return false; }
  friend bool operator==(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) == float(b); }
  friend bool operator!=(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) != float(b); }
  friend bool operator<(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) < float(b); }
  friend bool operator<=(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) <= float(b); }
  friend bool operator>(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) > float(b); }
  friend bool operator>=(float8_e8m0fnu a, float8_e8m0fnu b) { return float(a) >= float(b); }
  friend std::ostream& operator<<(std::ostream& os, float8_e8m0fnu v) { return os << float(v); }
  friend float8_e8m0fnu operator+(float8_e8m0fnu, float8_e8m0fnu) = delete;
  friend float8_e8m0fnu operator-(float8_e8m0fnu, float8_e8m0fnu) = delete;
  friend float8_e8m0fnu operator*(float8_e8m0fnu, float8_e8m0fnu) = delete;
  friend float8_e8m0fnu operator/(float8_e8m0fnu, float8_e8m0fnu) = delete;

 private:
  std::uint8_t bits_ = 0;
};

using float8_e4m3fn = SmallFloat<kSpecE4M3>;
using float8_e5m2 = SmallFloat<kSpecE5M2>;
using float8_e4m3fnuz = SmallFloat<kSpecE4M3FNUZ>;
using float8_e5m2fnuz = SmallFloat<kSpecE5M2FNUZ>;
using float6_e2m3fn = SmallFloat<kSpecE2M3>;
using float6_e3m2fn = SmallFloat<kSpecE3M2>;
using float4_e2m1fn = SmallFloat<kSpecE2M1>;

namespace detail {
/// floor(x * log10(2)) and ceil for the small digit counts here (x <= 60), in integers:
/// log10(2) ~ 30103 / 100000.
constexpr int floor_log10_2(int x) { return x >= 0 ? (x * 30103) / 100000 : -((-x * 30103 + 99999) / 100000); }
constexpr int ceil_log10_2(int x) { return -floor_log10_2(-x); }
}  // namespace detail

}  // namespace fp8emu

/// std::numeric_limits, derived from the format record (C/C++ conventions: min() is the smallest
/// positive normal, min_exponent = emin + 1, max_exponent = emax + 1, epsilon = 2^-mantissa_bits).
template <const fp8emu::FormatSpec& F>
class std::numeric_limits<fp8emu::SmallFloat<F>> {
  using T = fp8emu::SmallFloat<F>;
  static constexpr std::uint8_t mag(double v) {
    for (std::uint32_t c = 0; c <= F.max_finite_code(); ++c)
      if (F.value_of_code(c) == v) return std::uint8_t(c);
    return 0;
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = F.has_inf;
  static constexpr bool has_quiet_NaN = F.has_nan();
  static constexpr bool has_signaling_NaN = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F.mantissa_bits + 1;
  static constexpr int digits10 = fp8emu::detail::floor_log10_2(digits - 1);
  static constexpr int max_digits10 = 1 + fp8emu::detail::ceil_log10_2(digits);
  static constexpr int radix = 2;
  static constexpr int min_exponent = F.emin() + 1;
  static constexpr int min_exponent10 = fp8emu::detail::ceil_log10_2(F.emin());
  static constexpr int max_exponent = F.emax() + 1;
  static constexpr int max_exponent10 = fp8emu::detail::floor_log10_2(F.emax() + 1);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() { return T::from_bits(std::uint8_t(1u << F.mantissa_bits)); }
  static constexpr T lowest() { return T::from_bits(std::uint8_t(F.sign_mask() | F.max_finite_code())); }
  static constexpr T max() { return T::from_bits(std::uint8_t(F.max_finite_code())); }
  static constexpr T epsilon() { return T::from_bits(mag(fp8emu::pow2(-F.mantissa_bits))); }
  static constexpr T round_error() { return T::from_bits(mag(0.5)); }
  /// +Inf where the format has it, else +0 (as the standard asks of has_infinity == false).
  static constexpr T infinity() { return T::from_bits(std::uint8_t(F.has_inf ? F.inf_code() : 0u)); }
  /// The canonical NaN where the format has one, else +0.
  static constexpr T quiet_NaN() { return T::from_bits(std::uint8_t(F.has_nan() ? F.nan_code() : 0u)); }
  static constexpr T signaling_NaN() { return quiet_NaN(); }
  static constexpr T denorm_min() { return T::from_bits(1); }
};

/// std::numeric_limits for E8M0: unsigned, no zero, no subnormals; min() = 2^-127 (code 0).
template <>
class std::numeric_limits<fp8emu::float8_e8m0fnu> {
  using T = fp8emu::float8_e8m0fnu;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = false;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_toward_infinity;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 1;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 1 + fp8emu::detail::ceil_log10_2(1);
  static constexpr int radix = 2;
  static constexpr int min_exponent = -fp8emu::core::kE8M0Bias + 1;
  static constexpr int min_exponent10 = fp8emu::detail::ceil_log10_2(-fp8emu::core::kE8M0Bias);
  static constexpr int max_exponent = fp8emu::core::kE8M0MaxCode - fp8emu::core::kE8M0Bias + 1;
  static constexpr int max_exponent10 = fp8emu::detail::floor_log10_2(max_exponent);
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() { return T::from_bits(0); }
  static constexpr T lowest() { return T::from_bits(0); }
  static constexpr T max() { return T::from_bits(fp8emu::core::kE8M0MaxCode); }
  /// 2^0 - the next value is 2^1: the gap above 1 is 1.
  static constexpr T epsilon() { return T::from_bits(fp8emu::core::kE8M0Bias); }
  static constexpr T round_error() { return T::from_bits(fp8emu::core::kE8M0Bias); }
  static constexpr T infinity() { return T::from_bits(0); }
  static constexpr T quiet_NaN() { return T::from_bits(fp8emu::core::kE8M0NaN); }
  static constexpr T signaling_NaN() { return quiet_NaN(); }
  static constexpr T denorm_min() { return min(); }
};
