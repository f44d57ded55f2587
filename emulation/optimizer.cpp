// Vectorised Adam step (include/fp8emu/emulation/optimizer.hpp): core::adam_element's IEEE binary32
// operations, in the same order, on eight lanes. The body is written once with GCC vector
// extensions and compiled for AVX-512, AVX2 and the x86-64 baseline, chosen at run time by
// gemm_isa() as for activation.cpp; the square root is SSE's (correctly rounded, as std::sqrt and
// CUDA's __fsqrt_rn), on two 4-lane halves, which every x86-64 target has. Nothing contracts a
// product and a sum into an FMA (fp8emu builds with -ffp-contract=off).
#include "fp8emu/emulation/optimizer.hpp"

#include <cstring>

#include "fp8emu/core/nn_element.hpp"
#include "gemm_isa.hpp"
#include "parallel.hpp"
#include "simd_math.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define FP8EMU_ADAM_X86 1
#endif

namespace fp8emu::emu {
namespace {

#ifdef FP8EMU_ADAM_X86
using simd::load8;
using simd::store8;
using simd::v8f;

typedef float v4f __attribute__((vector_size(16)));

// The halves through registers (a round trip through memory stalled each block on store
// forwarding: the two 16-byte stores cannot feed one 32-byte load).
FP8EMU_SIMD_INLINE v8f sqrt8(v8f x) {
  const v4f lo = v4f(_mm_sqrt_ps(__m128(__builtin_shufflevector(x, x, 0, 1, 2, 3))));
  const v4f hi = v4f(_mm_sqrt_ps(__m128(__builtin_shufflevector(x, x, 4, 5, 6, 7))));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}

struct AdamArgs {
  float b1, b2, step, sqrt_bc2, eps;
};

// Blocks of 8 weights from offset 0 of each array.
FP8EMU_SIMD_INLINE void adam_body(float* w, const float* g, float* m, float* v, std::size_t blocks,
                                  const AdamArgs& a) {
  // Local copies: the stores below may alias `a` as far as the compiler knows.
  const float b1 = a.b1, b2 = a.b2, step = a.step, sqrt_bc2 = a.sqrt_bc2, eps = a.eps;
  const float cb1 = 1.0f - b1, cb2 = 1.0f - b2;  // the element function's (1 - b1), (1 - b2)
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t o = 8 * b;
    const v8f gg = load8(g + o);
    const v8f mm = b1 * load8(m + o) + cb1 * gg;
    const v8f vv = b2 * load8(v + o) + cb2 * gg * gg;
    store8(m + o, mm);
    store8(v + o, vv);
    store8(w + o, load8(w + o) - step * mm / (sqrt8(vv) / sqrt_bc2 + eps));
  }
}

#define FP8EMU_ADAM_PARAMS (float* w, const float* g, float* m, float* v, std::size_t blocks, const AdamArgs& a)
__attribute__((target("avx512f,avx512vl"))) void adam_avx512 FP8EMU_ADAM_PARAMS { adam_body(w, g, m, v, blocks, a); }
__attribute__((target("avx2"))) void adam_avx2 FP8EMU_ADAM_PARAMS { adam_body(w, g, m, v, blocks, a); }
void adam_base FP8EMU_ADAM_PARAMS { adam_body(w, g, m, v, blocks, a); }
#undef FP8EMU_ADAM_PARAMS
#endif

}  // namespace

void adam_step(float* w, const float* g, float* m, float* v, std::size_t n, float b1, float b2, float step,
               float sqrt_bc2, float eps) {
  const auto tail = [&](std::size_t i) { core::adam_element(w[i], g[i], m[i], v[i], b1, b2, step, sqrt_bc2, eps); };
#ifdef FP8EMU_ADAM_X86
  const AdamArgs args{b1, b2, step, sqrt_bc2, eps};
  void (*body)(float*, const float*, float*, float*, std::size_t, const AdamArgs&) = adam_base;
  if (detail::gemm_isa() == detail::GemmIsa::kAvx512) body = adam_avx512;
  else if (detail::gemm_isa() == detail::GemmIsa::kAvx2) body = adam_avx2;
  detail::for_blocks(
      n, [&](std::size_t o, std::size_t blocks) { body(w + o, g + o, m + o, v + o, blocks, args); }, tail);
#else
  for (std::size_t i = 0; i < n; ++i) tail(i);
#endif
}

}  // namespace fp8emu::emu
