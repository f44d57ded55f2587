// Private: binary64 and binary32 vector helpers (GCC vector extensions, 8 lanes) restating the
// correctly rounded fp32 functions of include/fp8emu/core/fp32_math.hpp: tanh8 and exp8 give
// core::tanh_rn's and core::exp_rn's bits in the lanes they cover and flag the others for the
// scalar function. Every helper is always_inline, so each including .cpp compiles it for the target
// of the function it is inlined into (emulation/activation.cpp, emulation/attention.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8emu/core/fp32_math.hpp"

#pragma GCC diagnostic ignored "-Wpsabi"  // the vectors never cross a non-inlined call

namespace fp8emu::emu::simd {

typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef std::int64_t v8l __attribute__((vector_size(64)));
typedef std::uint64_t v8ul __attribute__((vector_size(64)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
typedef std::uint32_t v8u __attribute__((vector_size(32)));

#define FP8EMU_SIMD_INLINE [[gnu::always_inline]] inline

struct PairV {
  v8d hi, lo;
};

FP8EMU_SIMD_INLINE PairV fast_two_sum(v8d a, v8d b) {
  const v8d s = a + b;
  return {s, b - (s - a)};
}

FP8EMU_SIMD_INLINE PairV two_sum(v8d a, v8d b) {
  const v8d s = a + b;
  const v8d bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

FP8EMU_SIMD_INLINE PairV split(v8d a) {
  const v8d c = 134217729.0 * a;
  const v8d hi = c - (c - a);
  return {hi, a - hi};
}

FP8EMU_SIMD_INLINE PairV two_prod(v8d a, v8d b) {
  const v8d p = a * b;
  const PairV as = split(a);
  const PairV bs = split(b);
  return {p, ((as.hi * bs.hi - p) + as.hi * bs.lo + as.lo * bs.hi) + as.lo * bs.lo};
}

/// tanh_rn of 8 lanes. *scalar gets -1 in the lanes the caller must compute with core::tanh_rn
/// (NaN, |x| < 2^-12, |x| > 9.1, or an exact fp32 midpoint); their vector result is meaningless.
FP8EMU_SIMD_INLINE v8f tanh8(v8f x, v8i* scalar) {
  v8u u;
  std::memcpy(&u, &x, sizeof u);
  const v8u ax = u & 0x7FFFFFFFu;
  const v8u sign = u & 0x80000000u;
  const v8i special = (ax > 0x7F800000u) | (ax < 0x39800000u) | (ax > 0x4111999Au);
  v8f axf;
  std::memcpy(&axf, &ax, sizeof axf);
  v8d a = __builtin_convertvector(axf, v8d);
  const v8l special_l = __builtin_convertvector(special, v8l);
  a = special_l ? v8d{} + 1.0 : a;  // keep the vector arithmetic of those lanes in range
  // |x| < 1/8: tanh(a) = a + a z R(z), z = a^2 (core::tanh_rn's coefficients and order).
  const v8d z = a * a;
  v8d p = v8d{} + 0x1.3558248036744p-11;
  p = -0x1.7da36452b75e3p-10 + z * p;
  p = 0x1.d6d3d0e157de0p-9 + z * p;
  p = -0x1.226e355e6c23dp-7 + z * p;
  p = 0x1.664f4882c10fap-6 + z * p;
  p = -0x1.ba1ba1ba1ba1cp-5 + z * p;
  p = 0x1.1111111111111p-3 + z * p;
  p = -0x1.5555555555555p-2 + z * p;
  const PairV small = fast_two_sum(a, a * (z * p));
  // Otherwise (E - 1) / (E + 1), E = e^(2a) from exp_pair's steps.
  const v8d a2 = 2.0 * a;
  const v8d kd = (a2 * 0x1.71547652b82fep+5 + 0x1.8p52) - 0x1.8p52;
  const v8i k = __builtin_convertvector(kd, v8i);
  const v8d r = (a2 - kd * 0x1.62e42fefa4000p-6) - kd * -0x1.8432a1b0e2634p-48;
  v8d e = v8d{} + 0x1.a01a01a01a01ap-13;
  e = 0x1.6c16c16c16c17p-10 + r * e;
  e = 0x1.1111111111111p-7 + r * e;
  e = 0x1.5555555555555p-5 + r * e;
  e = 0x1.5555555555555p-3 + r * e;
  e = 0.5 + r * e;
  const v8d q = r + (r * r) * e;
  const v8i j = k & 31;
  const v8i m = (k - j) >> 5;  // exact: k - j is a multiple of 32
  v8d thi, tlo;
  for (int i = 0; i < 8; ++i) {
    const core::math_detail::Pair t = core::math_detail::exp2_table(j[i]);
    thi[i] = t.hi;
    tlo[i] = t.lo;
  }
  const v8d tail = tlo + (thi * q + tlo * q);
  const PairV ex = fast_two_sum(thi, tail);
  const v8ul scale_bits = (v8ul)((__builtin_convertvector(m, v8l) + 1023) << 52);
  v8d scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const v8d eh = ex.hi * scale;
  const v8d el = ex.lo * scale;
  const v8d nh = eh - 1.0;
  const v8d nl = el;
  const PairV dh = two_sum(eh, v8d{} + 1.0);
  const v8d dl = dh.lo + el;
  const v8d qh = nh / dh.hi;
  const PairV pr = two_prod(qh, dh.hi);
  const v8d rem = ((nh - pr.hi) - pr.lo) + (nl - qh * dl);
  const PairV big = fast_two_sum(qh, rem / dh.hi);
  const v8l is_small = __builtin_convertvector(ax < 0x3E000000u, v8l);
  const v8d hi = is_small ? small.hi : big.hi;
  // round_pair_to_f32: RN32(hi) unless hi is exactly an fp32 midpoint (results lie in [2^-12, 1]:
  // normal fp32, so a midpoint is a binary64 whose low 29 significand bits are 1 followed by 0s).
  v8ul hb;
  std::memcpy(&hb, &hi, sizeof hb);
  const v8l midpoint = (hb & 0x1FFFFFFFu) == 0x10000000u;
  *scalar = special | __builtin_convertvector(midpoint, v8i);
  const v8f f = __builtin_convertvector(hi, v8f);
  v8u fb;
  std::memcpy(&fb, &f, sizeof fb);
  fb |= sign;
  v8f out;
  std::memcpy(&out, &fb, sizeof out);
  return out;
}

/// exp_rn of 8 lanes. *scalar gets -1 in the lanes the caller must compute with core::exp_rn
/// (NaN, |x| < 2^-25, x > 88, x < -87 (subnormal or zero results), or an exact fp32 midpoint).
FP8EMU_SIMD_INLINE v8f exp8(v8f x, v8i* scalar) {
  v8u u;
  std::memcpy(&u, &x, sizeof u);
  const v8u ax = u & 0x7FFFFFFFu;
  const v8i special = (ax > 0x7F800000u) | (ax < 0x33000000u) | (x > 88.0f) | (x < -87.0f);
  v8d a = __builtin_convertvector(x, v8d);
  a = __builtin_convertvector(special, v8l) ? v8d{} + 1.0 : a;  // keep those lanes' arithmetic in range
  // exp_pair's steps, then 2^m exactly on both parts.
  const v8d kd = (a * 0x1.71547652b82fep+5 + 0x1.8p52) - 0x1.8p52;
  const v8i k = __builtin_convertvector(kd, v8i);
  const v8d r = (a - kd * 0x1.62e42fefa4000p-6) - kd * -0x1.8432a1b0e2634p-48;
  v8d e = v8d{} + 0x1.a01a01a01a01ap-13;
  e = 0x1.6c16c16c16c17p-10 + r * e;
  e = 0x1.1111111111111p-7 + r * e;
  e = 0x1.5555555555555p-5 + r * e;
  e = 0x1.5555555555555p-3 + r * e;
  e = 0.5 + r * e;
  const v8d q = r + (r * r) * e;
  const v8i j = k & 31;
  const v8i m = (k - j) >> 5;  // exact: k - j is a multiple of 32
  v8d thi, tlo;
  for (int i = 0; i < 8; ++i) {
    const core::math_detail::Pair t = core::math_detail::exp2_table(j[i]);
    thi[i] = t.hi;
    tlo[i] = t.lo;
  }
  const v8d tail = tlo + (thi * q + tlo * q);
  const PairV ex = fast_two_sum(thi, tail);
  const v8ul scale_bits = (v8ul)((__builtin_convertvector(m, v8l) + 1023) << 52);
  v8d scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const v8d hi = ex.hi * scale;
  // round_pair_to_f32 for a normal fp32 result: RN32(hi) unless hi is exactly a midpoint.
  v8ul hb;
  std::memcpy(&hb, &hi, sizeof hb);
  const v8l midpoint = (hb & 0x1FFFFFFFu) == 0x10000000u;
  *scalar = special | __builtin_convertvector(midpoint, v8i);
  return __builtin_convertvector(hi, v8f);
}

FP8EMU_SIMD_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

FP8EMU_SIMD_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

}  // namespace fp8emu::emu::simd
