/// \file fp32_math.hpp
/// \brief Correctly rounded fp32 exp, log and tanh: `core::exp_rn`, `core::log_rn`,
/// `core::tanh_rn`. Host and device (FP8EMU_HD), no libm, the same bits on the CPU and the GPU.
///
/// fp8emu's own implementation, written for the project from the mathematics (range reduction,
/// Taylor series, double-double corrections); no code was taken from a math library.
///
/// **Rounding.** Each function returns the fp32 value nearest to the exact real result (round to
/// nearest, ties to even; ties cannot occur for these transcendental functions except at the exact
/// cases exp(0) = 1, log(1) = 0, tanh(+-0) = +-0), for every fp32 input: subnormal inputs and
/// outputs, overflow to +Inf and underflow to subnormals and +0 as IEEE 754 round-to-nearest
/// defines them. glibc's expf/logf/tanhf (and CUDA's expf/logf/tanhf, which differ from glibc's) are
/// not correctly rounded, so an fp32 layer that calls them gives libm-dependent bits and cannot have
/// a GPU twin with the CPU's bits; a correctly rounded function has exactly one right answer.
///
/// **Special values.** exp: exp(+-0) = 1, exp(+Inf) = +Inf, exp(-Inf) = +0, x > 88.7228... -> +Inf,
/// x < -103.97... -> +0. log: log(+-0) = -Inf, log(+Inf) = +Inf, log(1) = +0, log(x < 0) and
/// log(-Inf) = the default quiet NaN 0x7FC00000. tanh: tanh(+-0) = +-0, tanh(+-Inf) = +-1,
/// |x| < 2^-12 -> x (subnormals included), |x| > 9.1 -> +-1. A NaN input returns the same NaN made
/// quiet (its bits with the quiet bit set): bit operations only, so host and device agree even on
/// NaN payloads.
///
/// **Method and error analysis, in brief.** The result is computed in binary64 as an unevaluated
/// sum s + t (|t| <= ulp(s)/2) whose relative error against the exact value is below 2^-54 (the
/// sums of the bounds below; every operation is an IEEE binary64 +, -, *, / or an exact
/// transformation built from them: TwoSum, Fast2Sum, Dekker's product with Veltkamp's split; no
/// FMA, so `-ffp-contract=off` and `--fmad=false` builds give identical bits). Then s + t is rounded
/// to fp32 once (round_pair_to_f32): s is rounded, and when s is exactly an fp32 rounding midpoint
/// the sign of t decides. The result is therefore correctly rounded unless the exact value lies
/// within 2^-54 relative of an fp32 midpoint; the exhaustive test (tests/core/test_fp32_math.cpp,
/// all 2^32 inputs of each function against glibc's binary64 function with Boost.Multiprecision
/// deciding near midpoints) finds no such input, so no exception list is needed.
///  - exp(a) (exp_pair): a = k ln2/32 + r with k = round(32 a / ln2), |r| <= 0.0109; k ln2/32 with a
///    40-bit head (exact product and difference) and a tail (rounding error of r < 2^-60 absolute);
///    exp(a) = 2^(k/32) (1 + q), q = e^r - 1 by its Taylor series to r^7 (truncation < 2^-67),
///    evaluated with error < 3 * 2^-53 |q| < 2^-57.5; 2^(j/32) from a 32-entry double-double table
///    (error < 2^-104). Total < 2^-56.5 relative.
///  - log(x): x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m-1)/(m+1) as a
///    double-double (Dekker's product for the division's remainder), 2 atanh(s) = 2s + 2s z Q(z),
///    z = s^2 <= 0.0295, Q to z^10 (truncation < 2^-65 relative); e ln2 with a 44-bit head (exact)
///    and a tail; 2s + e ln2_hi by TwoSum. The polynomial term is below 0.01 of the result and is
///    computed with relative error < 2^-50: total < 2^-56 relative (no cancellation: for e != 0,
///    |log x| >= ln2/2 >= |log m|).
///  - tanh(x), |x| < 1/8: x + x z R(z), z = x^2, R the Taylor series of (tanh(x) - x)/x^3 to
///    z^7, i.e. tanh to x^17 (truncation < 2^-66 relative); the correction is below x/190 with
///    relative error < 2^-50: total < 2^-57.
///  - tanh(x), 1/8 <= |x| <= 9.1: E = exp(2|x|) as a double-double from exp_pair (< 2^-56.5),
///    tanh = (E - 1)/(E + 1) as a double-double division (E - 1 exact in its head, TwoSum for
///    E + 1, the quotient's remainder by Dekker's product); the relative error of E is amplified
///    by 1/sinh(2|x|) <= 4: total < 2^-54.5.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"

#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

namespace fp8emu::core {

namespace math_detail {

/// Bits of a binary64 value.
FP8EMU_HD std::uint64_t f64_to_bits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

/// binary64 value of a bit pattern.
FP8EMU_HD double bits_to_f64(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// RN(x) to fp32 (one IEEE conversion; cvt.rn.f32.f64 on the device).
FP8EMU_HD float f64_to_f32_rn(double x) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}

/// 2^e for -1022 <= e <= 1023, exact.
FP8EMU_HD double pow2(int e) { return bits_to_f64(std::uint64_t(e + 1023) << 52); }

/// A double-double: the unevaluated sum hi + lo.
struct Pair {
  double hi;
  double lo;
};

/// Knuth's TwoSum: s + e == a + b exactly, s = RN(a + b) (no condition on the magnitudes).
FP8EMU_HD Pair two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  const double e = (a - (s - bb)) + (b - bb);
  return {s, e};
}

/// Dekker's Fast2Sum: s + e == a + b exactly when |a| >= |b| (or a == 0).
FP8EMU_HD Pair fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}

/// Veltkamp's split: hi + lo == a, each with at most 26 significant bits (|a| < 2^996).
FP8EMU_HD Pair split(double a) {
  const double c = 134217729.0 * a;  // 2^27 + 1
  const double hi = c - (c - a);
  return {hi, a - hi};
}

/// Dekker's product: p + e == a * b exactly, p = RN(a * b) (no FMA; no overflow or underflow in
/// the ranges used here).
FP8EMU_HD Pair two_prod(double a, double b) {
  const double p = a * b;
  const Pair as = split(a);
  const Pair bs = split(b);
  const double e = ((as.hi * bs.hi - p) + as.hi * bs.lo + as.lo * bs.hi) + as.lo * bs.lo;
  return {p, e};
}

/// 2^(j/32) = kExp2Hi[j] + kExp2Lo[j] (j = 0..31): hi = RN(2^(j/32)), lo = RN(2^(j/32) - hi),
/// computed with 300-bit arithmetic (mpmath) and checked by the tests against Boost.Multiprecision.
FP8EMU_HD Pair exp2_table(int j) {
  static constexpr double kHi[32] = {
      0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
      0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
      0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
      0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
      0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
      0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
      0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
      0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0};
  static constexpr double kLo[32] = {
      0x0.0p+0,               0x1.d73e2a475b465p-55,  0x1.8a62e4adc610bp-54,  -0x1.6c51039449b3ap-54,
      -0x1.19041b9d78a76p-55, 0x1.e016e00a2643cp-54,  0x1.9b07eb6c70573p-54,  0x1.612e8afad1255p-55,
      0x1.6f46ad23182e4p-55,  -0x1.63aeabf42eae2p-54, 0x1.ada0911f09ebcp-55,  0x1.89b7a04ef80d0p-59,
      0x1.d4397afec42e2p-56,  -0x1.07abe1db13cadp-55, 0x1.6324c054647adp-54,  -0x1.383c17e40b497p-54,
      -0x1.bdd3413b26456p-54, -0x1.16e4786887a99p-55, -0x1.41577ee04992fp-55, -0x1.d4c1dd41532d8p-54,
      0x1.6e9f156864b27p-54,  -0x1.75fc781b57ebcp-57, 0x1.c7c46b071f2bep-56,  -0x1.d2f6edb8d41e1p-54,
      0x1.7a1cd345dcc81p-54,  -0x1.5584f7e54ac3bp-56, 0x1.11065895048ddp-55,  0x1.503cbd1e949dbp-56,
      0x1.2ed02d75b3707p-55,  -0x1.1a5cd4f184b5cp-54, -0x1.e9c23179c2893p-54, 0x1.9d3e12dd8a18bp-54};
  return {kHi[j], kLo[j]};
}

/// exp(a) = 2^m (hi + lo) for |a| <= 104: m returned in *m, hi + lo in [0.98, 2.02] with relative
/// error < 2^-56.5 and |lo| <= ulp(hi)/2 (see the file comment).
FP8EMU_HD Pair exp_pair(double a, int* m) {
  constexpr double kInvC = 0x1.71547652b82fep+5;    // RN(32 / ln2)
  constexpr double kCHi = 0x1.62e42fefa4000p-6;     // ln2/32 to 39 bits: k * kCHi is exact
  constexpr double kCLo = -0x1.8432a1b0e2634p-48;   // RN(ln2/32 - kCHi)
  constexpr double kShift = 0x1.8p52;               // adding and subtracting it rounds to an integer
  const double kd = (a * kInvC + kShift) - kShift;  // round(32 a / ln2), |kd| <= 4802
  const int k = int(kd);
  const double r = (a - kd * kCHi) - kd * kCLo;  // first difference exact; |r| <= 0.0109
  // q = e^r - 1 = r + r^2 (1/2 + r (1/6 + r (1/24 + r (1/120 + r (1/720 + r/5040))))).
  double p = 0x1.a01a01a01a01ap-13;
  p = 0x1.6c16c16c16c17p-10 + r * p;
  p = 0x1.1111111111111p-7 + r * p;
  p = 0x1.5555555555555p-5 + r * p;
  p = 0x1.5555555555555p-3 + r * p;
  p = 0.5 + r * p;
  const double q = r + (r * r) * p;
  const int j = k & 31;
  *m = (k - j) / 32;
  const Pair t = exp2_table(j);
  // 2^(j/32) (1 + q) = t.hi + (t.lo + t.hi q + t.lo q).
  const double tail = t.lo + (t.hi * q + t.lo * q);
  return fast_two_sum(t.hi, tail);
}

/// The fp32 value nearest to s + t (ties to even), given s = RN64(s + t): RN32(s) is that value
/// unless s is exactly an fp32 midpoint, where the sign of t decides (t == 0: a true tie, to even).
FP8EMU_HD float round_pair_to_f32(double s, double t) {
  float f = f64_to_f32_rn(s);
  const std::uint32_t fb = f32_to_bits(f);
  if (t == 0.0) return f;
  if ((fb & 0x7FFFFFFFu) == 0x7F800000u) {
    // Overflowed: s >= the midpoint between FLT_MAX and 2^128 in magnitude; exactly on it with t
    // pointing down, the value is below the midpoint.
    const double mid = 0x1.ffffffp127;
    if ((s == mid && t < 0.0) || (s == -mid && t > 0.0))
      return bits_to_f32((fb & 0x80000000u) | 0x7F7FFFFFu);  // +-FLT_MAX
    return f;
  }
  const double d = s - double(f);  // exact (Sterbenz, or f == 0)
  if (d == 0.0) return f;
  // The neighbour of f on the side of s: one step up in magnitude when d has f's sign.
  const bool f_neg = (fb >> 31) != 0;
  const bool up = (d < 0.0) == f_neg;
  const std::uint32_t gb = up ? fb + 1u : fb - 1u;
  if ((gb & 0x7FFFFFFFu) >= 0x7F800000u) return f;  // beyond FLT_MAX: no finite midpoint there
  const float g = bits_to_f32(gb);
  const double half = (double(g) - double(f)) * 0.5;  // exact: adjacent fp32 values
  if (d != half) return f;  // s is not a midpoint
  // s is the midpoint of f and g: s + t lies on the side of g when t has d's sign.
  return ((t > 0.0) == (d > 0.0)) ? g : f;
}

/// NaN x made quiet (bits of x with the quiet bit set).
FP8EMU_HD float quiet(float x) { return bits_to_f32(f32_to_bits(x) | 0x00400000u); }

}  // namespace math_detail

/// e^x correctly rounded to nearest-even (see the file comment). exp(+-0) = 1, exp(+Inf) = +Inf,
/// exp(-Inf) = +0, overflow to +Inf, underflow to subnormals and +0; NaN -> the NaN made quiet.
FP8EMU_HD float exp_rn(float x) {
  using namespace math_detail;
  const std::uint32_t u = f32_to_bits(x);
  const std::uint32_t ax = u & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return quiet(x);
  if (ax < 0x33000000u) return 1.0f;  // |x| < 2^-25: e^x within 2^-25 of 1, inside 1's interval
  if (x > 89.0f) return bits_to_f32(0x7F800000u);  // e^89 > 2^128: +Inf (and x = +Inf)
  if (x < -104.0f) return 0.0f;  // e^-104 < 2^-150: +0 (and x = -Inf)
  int m = 0;
  const Pair e = exp_pair(double(x), &m);
  // 2^m exact on both parts: -151 <= m <= 129, s in [2^-152, 2^130] and t stay normal binary64.
  const double scale = pow2(m);
  return round_pair_to_f32(e.hi * scale, e.lo * scale);
}

/// log(x) (natural) correctly rounded to nearest-even (see the file comment). log(+-0) = -Inf,
/// log(+Inf) = +Inf, log(1) = +0, x < 0 or -Inf -> NaN 0x7FC00000, NaN -> the NaN made quiet.
FP8EMU_HD float log_rn(float x) {
  using namespace math_detail;
  const std::uint32_t u = f32_to_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return quiet(x);
  if ((u & 0x7FFFFFFFu) == 0u) return bits_to_f32(0xFF800000u);  // -Inf
  if (u >> 31) return bits_to_f32(0x7FC00000u);                  // x < 0
  if (u == 0x7F800000u) return x;                                // +Inf
  // x = 2^e * m, m in [sqrt(1/2), sqrt(2)), from the exact binary64 of x (subnormals normalised).
  const std::uint64_t d = math_detail::f64_to_bits(double(x));
  int e = int(d >> 52) - 1023;
  std::uint64_t mant = d & 0x000FFFFFFFFFFFFFull;
  if (mant >= (std::uint64_t(0x3504F3u) << 29) + (std::uint64_t(1) << 29)) {  // m > 1.4142135 (> sqrt 2)
    ++e;
    mant |= std::uint64_t(1022) << 52;  // m / 2 in [0.707, 1)
  } else {
    mant |= std::uint64_t(1023) << 52;  // m in [1, 1.4142135]
  }
  const double m = bits_to_f64(mant);
  const double num = m - 1.0;  // exact
  const double den = m + 1.0;  // exact (at most 26 significant bits)
  // s = num / den as sh + sl: sh = num * (1/den) is within 2 ulps of num / den, and the remainder
  // num - sh * den is exact with Dekker's product (num - p.hi by Sterbenz's lemma).
  const double inv = 1.0 / den;
  const double sh = num * inv;
  const Pair p = two_prod(sh, den);
  const double sl = ((num - p.hi) - p.lo) * inv;
  const double z = sh * sh;
  // Q(z) = sum_{k=0..10} z^k / (2k + 3), in Estrin's scheme (all terms positive: relative error
  // below 6 * 2^-53 in any order).
  const double z2 = z * z;
  const double z4 = z2 * z2;
  const double q01 = 0x1.5555555555555p-2 + z * 0x1.999999999999ap-3;  // 1/3, 1/5
  const double q23 = 0x1.2492492492492p-3 + z * 0x1.c71c71c71c71cp-4;  // 1/7, 1/9
  const double q45 = 0x1.745d1745d1746p-4 + z * 0x1.3b13b13b13b14p-4;  // 1/11, 1/13
  const double q67 = 0x1.1111111111111p-4 + z * 0x1.e1e1e1e1e1e1ep-5;  // 1/15, 1/17
  const double q89 = 0x1.af286bca1af28p-5 + z * 0x1.8618618618618p-5;  // 1/19, 1/21
  const double q10 = 0x1.642c8590b2164p-5;                             // 1/23
  const double q = (q01 + z2 * q23) + z4 * ((q45 + z2 * q67) + z4 * (q89 + z2 * q10));
  const double poly = (2.0 * sh) * (z * q);
  constexpr double kLn2Hi = 0x1.62e42fefa3a00p-1;  // ln2 to 44 bits: e * kLn2Hi is exact
  constexpr double kLn2Lo = -0x1.0ca86c3898d00p-49;  // RN(ln2 - kLn2Hi)
  const double ed = double(e);
  const Pair head = two_sum(ed * kLn2Hi, 2.0 * sh);
  const double tail = head.lo + ((ed * kLn2Lo + 2.0 * sl) + poly);
  const Pair r = fast_two_sum(head.hi, tail);
  return round_pair_to_f32(r.hi, r.lo);
}

/// tanh(x) correctly rounded to nearest-even (see the file comment). tanh(+-0) = +-0,
/// tanh(+-Inf) = +-1; NaN -> the NaN made quiet. Odd: tanh_rn(-x) == -tanh_rn(x).
FP8EMU_HD float tanh_rn(float x) {
  using namespace math_detail;
  const std::uint32_t u = f32_to_bits(x);
  const std::uint32_t ax = u & 0x7FFFFFFFu;
  const std::uint32_t sign = u & 0x80000000u;
  if (ax > 0x7F800000u) return quiet(x);
  if (ax < 0x39800000u) return x;  // |x| < 2^-12: 0 < |x| - |tanh x| < |x|^3/3 < half the gap below |x|
  if (ax > 0x4111999Au) return bits_to_f32(sign | 0x3F800000u);  // |x| > 9.1: 1 - tanh < 2^-25
  const double a = double(bits_to_f32(ax));
  Pair r{0.0, 0.0};
  if (ax < 0x3E000000u) {  // |x| < 1/8: tanh(a) = a + a z R(z)
    const double z = a * a;
    double p = 0x1.3558248036744p-11;
    p = -0x1.7da36452b75e3p-10 + z * p;
    p = 0x1.d6d3d0e157de0p-9 + z * p;
    p = -0x1.226e355e6c23dp-7 + z * p;
    p = 0x1.664f4882c10fap-6 + z * p;
    p = -0x1.ba1ba1ba1ba1cp-5 + z * p;
    p = 0x1.1111111111111p-3 + z * p;
    p = -0x1.5555555555555p-2 + z * p;
    r = fast_two_sum(a, a * (z * p));
  } else {  // tanh(a) = (E - 1) / (E + 1), E = e^(2a) as a double-double
    int m = 0;
    const Pair e = exp_pair(2.0 * a, &m);
    const double scale = pow2(m);
    const double eh = e.hi * scale;
    const double el = e.lo * scale;
    const double nh = eh - 1.0;  // exact: 1.28 < eh < 2^27
    const double nl = el;
    const Pair dh = two_sum(eh, 1.0);
    const double dl = dh.lo + el;
    const double qh = nh / dh.hi;
    const Pair p = two_prod(qh, dh.hi);
    const double rem = ((nh - p.hi) - p.lo) + (nl - qh * dl);
    r = fast_two_sum(qh, rem / dh.hi);
  }
  const float f = round_pair_to_f32(r.hi, r.lo);
  return bits_to_f32(f32_to_bits(f) | sign);
}

}  // namespace fp8emu::core
