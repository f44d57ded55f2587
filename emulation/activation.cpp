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
#include "simd_math.hpp"

namespace fp8emu::emu {
namespace {

using namespace simd;
#define FP8EMU_ACT_INLINE FP8EMU_SIMD_INLINE

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

FP8EMU_ACT_INLINE void exp_body(const float* x, float* y, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const v8f v = load8(x + 8 * b);
    v8i scalar;
    v8f e = exp8(v, &scalar);
    for (int i = 0; i < 8; ++i)
      if (scalar[i]) e[i] = core::exp_rn(v[i]);
    store8(y + 8 * b, e);
  }
}

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
FP8EMU_ACT_TARGETS(exp_body, (const float* x, float* y, std::size_t blocks), (x, y, blocks))
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

}  // namespace

void exp_rn(const float* x, std::size_t n, float* y) {
  detail::for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(exp_body, x + o, y + o, b) },
      [&](std::size_t i) { y[i] = core::exp_rn(x[i]); });
}

void tanh_rn(const float* x, std::size_t n, float* y) {
  detail::for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(tanh_body, x + o, y + o, b) },
      [&](std::size_t i) { y[i] = core::tanh_rn(x[i]); });
}

void gelu_tanh_forward(const float* x, std::size_t n, float* y) {
  detail::for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(gelu_body, x + o, y + o, b) },
      [&](std::size_t i) { y[i] = core::gelu_tanh_forward(x[i]); });
}

void gelu_tanh_backward(const float* x, const float* dy, std::size_t n, float* dx) {
  detail::for_blocks(
      n, [&](std::size_t o, std::size_t b) { FP8EMU_ACT_DISPATCH(gelu_grad_body, x + o, dy + o, dx + o, b) },
      [&](std::size_t i) { dx[i] = dy[i] * core::gelu_tanh_grad(x[i]); });
}

}  // namespace fp8emu::emu
