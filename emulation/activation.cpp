// Vectorised tanh_rn and tanh-form GELU (include/fp8emu/emulation/activation.hpp): the element
// functions of include/fp8emu/core (fp32_math.hpp, nn_element.hpp) eight lanes at a time, with the
// same IEEE operations in the same order, so the bits are the element functions'.
//
// The kernel body is written once with GCC vector extensions (8 doubles, 8 floats) and compiled
// three times: for AVX-512 (one zmm per 8 doubles), AVX2 (two ymm) and the x86-64 baseline (four
// xmm), chosen at run time by gemm_isa() (FP8EMU_GEMM_ISA caps it, as for the GEMMs). The helpers are
// always_inline so each copy is built for its target. Nothing here contracts a product and a sum
// into an FMA: fp8emu builds with -ffp-contract=off and vector `*` and `+` are separate IEEE
// operations.
#include "fp8emu/emulation/activation.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "gemm_isa.hpp"
#include "parallel.hpp"

#pragma GCC diagnostic ignored "-Wpsabi"  // the vectors never cross a non-inlined call

namespace fp8emu::emu {
namespace {

typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef std::int64_t v8l __attribute__((vector_size(64)));
typedef std::uint64_t v8ul __attribute__((vector_size(64)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
typedef std::uint32_t v8u __attribute__((vector_size(32)));

#define FP8EMU_ACT_INLINE [[gnu::always_inline]] inline

struct PairV {
  v8d hi, lo;
};

FP8EMU_ACT_INLINE PairV fast_two_sum(v8d a, v8d b) {
  const v8d s = a + b;
  return {s, b - (s - a)};
}

FP8EMU_ACT_INLINE PairV two_sum(v8d a, v8d b) {
  const v8d s = a + b;
  const v8d bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

FP8EMU_ACT_INLINE PairV split(v8d a) {
  const v8d c = 134217729.0 * a;
  const v8d hi = c - (c - a);
  return {hi, a - hi};
}

FP8EMU_ACT_INLINE PairV two_prod(v8d a, v8d b) {
  const v8d p = a * b;
  const PairV as = split(a);
  const PairV bs = split(b);
  return {p, ((as.hi * bs.hi - p) + as.hi * bs.lo + as.lo * bs.hi) + as.lo * bs.lo};
}

/// tanh_rn of 8 lanes. *scalar gets -1 in the lanes the caller must compute with core::tanh_rn
/// (NaN, |x| < 2^-12, |x| > 9.1, or an exact fp32 midpoint); their vector result is meaningless.
FP8EMU_ACT_INLINE v8f tanh8(v8f x, v8i* scalar) {
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

FP8EMU_ACT_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

FP8EMU_ACT_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

/// tanh of 8 lanes with the scalar lanes filled in.
FP8EMU_ACT_INLINE v8f tanh8_full(v8f x) {
  v8i scalar;
  v8f t = tanh8(x, &scalar);
  for (int i = 0; i < 8; ++i)
    if (scalar[i]) t[i] = core::tanh_rn(x[i]);
  return t;
}

constexpr float kC = core::kGeluSqrt2OverPi;
constexpr float kK = core::kGeluCoeff;

FP8EMU_ACT_INLINE void tanh_body(const float* x, float* y, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b) store8(y + 8 * b, tanh8_full(load8(x + 8 * b)));
}

FP8EMU_ACT_INLINE void gelu_body(const float* x, float* y, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const v8f v = load8(x + 8 * b);
    const v8f t = tanh8_full(kC * (v + kK * v * v * v));
    store8(y + 8 * b, 0.5f * v * (1.0f + t));
  }
}

FP8EMU_ACT_INLINE void gelu_grad_body(const float* x, const float* dy, float* dx, std::size_t blocks) {
  constexpr float k3 = 3.0f * kK;  // the fp32 product of the constants, as core::gelu_tanh_grad
  for (std::size_t b = 0; b < blocks; ++b) {
    const v8f v = load8(x + 8 * b);
    const v8f t = tanh8_full(kC * (v + kK * v * v * v));
    const v8f du = kC * (1.0f + k3 * v * v);
    const v8f g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    store8(dx + 8 * b, load8(dy + 8 * b) * g);
  }
}

#if defined(__x86_64__) || defined(_M_X64)
#define FP8EMU_ACT_TARGETS(name, params, args)                                              \
  __attribute__((target("avx512f,avx512vl"))) void name##_avx512 params { name args; } \
  __attribute__((target("avx2"))) void name##_avx2 params { name args; }                    \
  void name##_base params { name args; }
FP8EMU_ACT_TARGETS(tanh_body, (const float* x, float* y, std::size_t blocks), (x, y, blocks))
FP8EMU_ACT_TARGETS(gelu_body, (const float* x, float* y, std::size_t blocks), (x, y, blocks))
FP8EMU_ACT_TARGETS(gelu_grad_body, (const float* x, const float* dy, float* dx, std::size_t blocks),
                   (x, dy, dx, blocks))
#define FP8EMU_ACT_DISPATCH(name, ...)                                           \
  switch (detail::gemm_isa()) {                                                  \
    case detail::GemmIsa::kAvx512: name##_avx512(__VA_ARGS__); break;            \
    case detail::GemmIsa::kAvx2: name##_avx2(__VA_ARGS__); break;                \
    default: name##_base(__VA_ARGS__);                                           \
  }
#else
#define FP8EMU_ACT_DISPATCH(name, ...) name(__VA_ARGS__)
#endif

/// Runs body(offset, count of 8-blocks) over n elements in chunks of 4096 (OpenMP for large n),
/// then tail(i) for the last n % 8.
template <class Body, class Tail>
void for_blocks(std::size_t n, Body body, Tail tail) {
  constexpr std::size_t kChunk = 4096;
  const std::size_t blocks = n / 8;
  const std::ptrdiff_t chunks = std::ptrdiff_t((blocks * 8 + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= std::size_t(detail::kParallelMinElements) / 4)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t lo = std::size_t(c) * kChunk;
    const std::size_t hi = std::min(lo + kChunk, blocks * 8);
    body(lo, (hi - lo) / 8);
  }
  for (std::size_t i = blocks * 8; i < n; ++i) tail(i);
}

}  // namespace

void tanh_rn(const float* x, std::size_t n, float* y) {
  for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(tanh_body, x + o, y + o, b) },
      [&](std::size_t i) { y[i] = core::tanh_rn(x[i]); });
}

void gelu_tanh_forward(const float* x, std::size_t n, float* y) {
  for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(gelu_body, x + o, y + o, b) },
      [&](std::size_t i) { y[i] = core::gelu_tanh_forward(x[i]); });
}

void gelu_tanh_backward(const float* x, const float* dy, std::size_t n, float* dx) {
  for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(gelu_grad_body, x + o, dy + o, dx + o, b) },
      [&](std::size_t i) { dx[i] = dy[i] * core::gelu_tanh_grad(x[i]); });
}

}  // namespace fp8emu::emu
