// Vectorised attention forward of one head (include/fp8emu/emulation/attention.hpp): the element
// function core::attention_row_forward (include/fp8emu/core/attention.hpp) with eight keys per
// vector for the scores and the exponentials, the same operations in the same order per element.
// Compiled for AVX-512, AVX2 and the x86-64 baseline from one body (simd_math.hpp), chosen by
// gemm_isa().
#include "fp8emu/emulation/attention.hpp"

#include <cstddef>
#include <vector>

#include "fp8emu/core/attention.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "gemm_isa.hpp"
#include "simd_math.hpp"

namespace fp8emu::emu {
namespace {

using namespace simd;

FP8EMU_SIMD_INLINE void forward_body(const float* q0, const float* k0, const float* v0, int ld, int T, int d,
                                     float scale, bool causal, float* p0, float* o0, int ldo, float* kt, int T8) {
  // K transposed and zero padded to whole vectors: kt[c * T8 + j] = k_j[c].
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < T8; ++j) kt[std::size_t(c) * T8 + j] = j < T ? k0[std::size_t(j) * ld + c] : 0.0f;
  for (int i = 0; i < T; ++i) {
    const float* q = q0 + std::size_t(i) * ld;
    float* p = p0 + std::size_t(i) * T;
    float* o = o0 + std::size_t(i) * ldo;
    const int last = causal ? i : T - 1;
    const int n = last + 1;
    // s_j = sum over c of q[c] * k_j[c] from +0 in c order, then times scale: eight keys at once.
    alignas(32) float s8[8];
    for (int j0 = 0; j0 < n; j0 += 8) {
      v8f s = v8f{};
      for (int c = 0; c < d; ++c) s = s + q[c] * load8(kt + std::size_t(c) * T8 + j0);
      s = s * scale;
      if (j0 + 8 <= n) {
        store8(p + j0, s);
      } else {
        store8(s8, s);
        for (int j = j0; j < n; ++j) p[j] = s8[j - j0];
      }
    }
    float mx = core::bits_to_f32(0xFF800000u);  // -inf, then fmax_f32 in j order as the element function
    for (int j = 0; j < n; ++j) mx = core::fmax_f32(mx, p[j]);
    for (int j0 = 0; j0 < n; j0 += 8) {
      const int cnt = n - j0 < 8 ? n - j0 : 8;
      alignas(32) float x8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int j = 0; j < cnt; ++j) x8[j] = p[j0 + j] - mx;
      v8i scalar;
      v8f e = exp8(load8(x8), &scalar);
      for (int j = 0; j < cnt; ++j) p[j0 + j] = scalar[j] ? core::exp_rn(x8[j]) : e[j];
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += p[j];
    for (int j = 0; j < n; ++j) p[j] /= sum;
    for (int j = n; j < T; ++j) p[j] = 0.0f;
    for (int c = 0; c < d; ++c) o[c] = 0.0f;
    for (int j = 0; j < n; ++j) {
      const float* v = v0 + std::size_t(j) * ld;
      const float pj = p[j];
      int c = 0;
      for (; c + 8 <= d; c += 8) store8(o + c, load8(o + c) + pj * load8(v + c));
      for (; c < d; ++c) o[c] += pj * v[c];
    }
  }
}

FP8EMU_SIMD_INLINE void backward_q_body(const float* p0, const float* go0, int ldg, const float* k0, const float* v0,
                                        int ld, int T, int d, float scale, bool causal, float* ds0, float* dq0,
                                        int lddq, float* vt, int T8) {
  // V transposed and zero padded: vt[c * T8 + j] = v_j[c].
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < T8; ++j) vt[std::size_t(c) * T8 + j] = j < T ? v0[std::size_t(j) * ld + c] : 0.0f;
  for (int i = 0; i < T; ++i) {
    const float* p = p0 + std::size_t(i) * T;
    const float* go = go0 + std::size_t(i) * ldg;
    float* ds = ds0 + std::size_t(i) * T;
    float* dq = dq0 + std::size_t(i) * lddq;
    const int n = (causal ? i : T - 1) + 1;
    // dp_j = go . v_j in c order, eight keys at once (stored in ds as the element function does).
    alignas(32) float s8[8];
    for (int j0 = 0; j0 < n; j0 += 8) {
      v8f s = v8f{};
      for (int c = 0; c < d; ++c) s = s + go[c] * load8(vt + std::size_t(c) * T8 + j0);
      store8(s8, s);
      for (int j = j0; j < n && j < j0 + 8; ++j) ds[j] = s8[j - j0];
    }
    float dot = 0.0f;
    for (int j = 0; j < n; ++j) dot += ds[j] * p[j];
    for (int j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - dot) * scale;
    for (int c = 0; c < d; ++c) dq[c] = 0.0f;
    for (int j = 0; j < n; ++j) {
      const float* k = k0 + std::size_t(j) * ld;
      const float dsj = ds[j];
      int c = 0;
      for (; c + 8 <= d; c += 8) store8(dq + c, load8(dq + c) + dsj * load8(k + c));
      for (; c < d; ++c) dq[c] += dsj * k[c];
    }
  }
}

#if defined(__x86_64__) || defined(_M_X64)
#define FP8EMU_ATT_BQ_PARAMS                                                                                   \
  (const float* p0, const float* go0, int ldg, const float* k0, const float* v0, int ld, int T, int d, float scale, \
   bool causal, float* ds0, float* dq0, int lddq, float* vt, int T8)
#define FP8EMU_ATT_BQ_ARGS (p0, go0, ldg, k0, v0, ld, T, d, scale, causal, ds0, dq0, lddq, vt, T8)
__attribute__((target("avx512f,avx512vl"))) void backward_q_avx512 FP8EMU_ATT_BQ_PARAMS {
  backward_q_body FP8EMU_ATT_BQ_ARGS;
}
__attribute__((target("avx2"))) void backward_q_avx2 FP8EMU_ATT_BQ_PARAMS { backward_q_body FP8EMU_ATT_BQ_ARGS; }
void backward_q_base FP8EMU_ATT_BQ_PARAMS { backward_q_body FP8EMU_ATT_BQ_ARGS; }
#define FP8EMU_ATT_PARAMS                                                                                     \
  (const float* q0, const float* k0, const float* v0, int ld, int T, int d, float scale, bool causal, float* p0, \
   float* o0, int ldo, float* kt, int T8)
#define FP8EMU_ATT_ARGS (q0, k0, v0, ld, T, d, scale, causal, p0, o0, ldo, kt, T8)
__attribute__((target("avx512f,avx512vl"))) void forward_avx512 FP8EMU_ATT_PARAMS { forward_body FP8EMU_ATT_ARGS; }
__attribute__((target("avx2"))) void forward_avx2 FP8EMU_ATT_PARAMS { forward_body FP8EMU_ATT_ARGS; }
void forward_base FP8EMU_ATT_PARAMS { forward_body FP8EMU_ATT_ARGS; }
#endif

}  // namespace

void attention_forward_head(const float* q0, const float* k0, const float* v0, int ld, int T, int d, float scale,
                            bool causal, float* p0, float* o0, int ldo) {
  if (T <= 0) return;
  const int T8 = (T + 7) / 8 * 8;
  thread_local std::vector<float> kt;
  if (kt.size() < std::size_t(T8) * std::size_t(d > 0 ? d : 1)) kt.resize(std::size_t(T8) * std::size_t(d > 0 ? d : 1));
#if defined(__x86_64__) || defined(_M_X64)
  switch (detail::gemm_isa()) {
    case detail::GemmIsa::kAvx512: forward_avx512(q0, k0, v0, ld, T, d, scale, causal, p0, o0, ldo, kt.data(), T8); break;
    case detail::GemmIsa::kAvx2: forward_avx2(q0, k0, v0, ld, T, d, scale, causal, p0, o0, ldo, kt.data(), T8); break;
    default: forward_base(q0, k0, v0, ld, T, d, scale, causal, p0, o0, ldo, kt.data(), T8);
  }
#else
  forward_body(q0, k0, v0, ld, T, d, scale, causal, p0, o0, ldo, kt.data(), T8);
#endif
}

void attention_backward_q_head(const float* p0, const float* go0, int ldg, const float* k0, const float* v0, int ld,
                               int T, int d, float scale, bool causal, float* ds0, float* dq0, int lddq) {
  if (T <= 0) return;
  const int T8 = (T + 7) / 8 * 8;
  thread_local std::vector<float> vt;
  if (vt.size() < std::size_t(T8) * std::size_t(d > 0 ? d : 1)) vt.resize(std::size_t(T8) * std::size_t(d > 0 ? d : 1));
#if defined(__x86_64__) || defined(_M_X64)
  switch (detail::gemm_isa()) {
    case detail::GemmIsa::kAvx512:
      backward_q_avx512(p0, go0, ldg, k0, v0, ld, T, d, scale, causal, ds0, dq0, lddq, vt.data(), T8);
      break;
    case detail::GemmIsa::kAvx2:
      backward_q_avx2(p0, go0, ldg, k0, v0, ld, T, d, scale, causal, ds0, dq0, lddq, vt.data(), T8);
      break;
    default: backward_q_base(p0, go0, ldg, k0, v0, ld, T, d, scale, causal, ds0, dq0, lddq, vt.data(), T8);
  }
#else
  backward_q_body(p0, go0, ldg, k0, v0, ld, T, d, scale, causal, ds0, dq0, lddq, vt.data(), T8);
#endif
}

}  // namespace fp8emu::emu
