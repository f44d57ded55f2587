/// \file attention.hpp
/// \brief Scaled dot-product attention in fp32, causal or not (TE's attn_mask_type "causal" or
/// "no_mask"), one query row or one key column at a time:
/// the element functions of nn::DotProductAttention (src/nn/transformer.cpp), of backend::Device's
/// attention operations on the CPU and of their GPU kernels, so every one of them adds the same
/// terms in the same order.
///
/// Layout: packed QKV rows of one sequence and one head. `q`, `k0`, `v0` point at the head's first
/// column of Q (the query row), K and V (the sequence's first row); row j of K is k0 + j * ld. All
/// sums are fp32, one rounding per operation (no FMA: the host builds with -ffp-contract=off, the
/// device with --fmad=false), in increasing index order from 0.0f. Softmax uses the correctly
/// rounded core::exp_rn; its max ignores NaN as std::fmax does.
#pragma once

#include "fp8emu/config.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"

namespace fp8emu::core {

/// Query row i (0 <= i < T): the keys it sees are j <= last, last = i when causal, else T - 1.
/// s_j = (q . k_j) * scale for those j (dot products over c = 0..d-1), p_j = exp_rn(s_j - max_j s_j)
/// / sum_j exp_rn(...) (the sum over j in order, then one division per p_j), p_j = 0 for j > last
/// (the causal mask), and o[c] = sum_{j <= last} p_j * v_j[c]. Writes p[0..T) and o[0..d).
FP8EMU_HD void attention_row_forward(const float* q, const float* k0, const float* v0, int ld, int i, int T,
                                            int d, float scale, bool causal, float* p, float* o) {
  const int last = causal ? i : T - 1;
  float mx = bits_to_f32(0xFF800000u);  // -inf
  for (int j = 0; j <= last; ++j) {
    const float* k = k0 + static_cast<long>(j) * ld;
    float s = 0.0f;
    for (int c = 0; c < d; ++c) s += q[c] * k[c];
    p[j] = s * scale;
    mx = fmax_f32(mx, p[j]);
  }
  float sum = 0.0f;
  for (int j = 0; j <= last; ++j) {
    p[j] = exp_rn(p[j] - mx);
    sum += p[j];
  }
  for (int j = 0; j <= last; ++j) p[j] /= sum;
  for (int j = last + 1; j < T; ++j) p[j] = 0.0f;
  for (int c = 0; c < d; ++c) o[c] = 0.0f;
  for (int j = 0; j <= last; ++j) {
    const float* v = v0 + static_cast<long>(j) * ld;
    for (int c = 0; c < d; ++c) o[c] += p[j] * v[c];
  }
}

/// The backward of query row i, given its probabilities p[0..last] (last as attention_row_forward:
/// i when causal, else T - 1) and output gradient go[0..d): dp_j = go . v_j, dot = sum_{j <= last}
/// dp_j * p_j, ds_j = p_j * (dp_j - dot) * scale (written to ds[0..last]), and dq[c] =
/// sum_{j <= last} ds_j * k_j[c] (overwrites dq[0..d)).
FP8EMU_HD void attention_row_backward_q(const float* p, const float* go, const float* k0, const float* v0,
                                               int ld, int i, int T, int d, float scale, bool causal, float* ds,
                                               float* dq) {
  const int last = causal ? i : T - 1;
  float dot = 0.0f;
  for (int j = 0; j <= last; ++j) {
    const float* v = v0 + static_cast<long>(j) * ld;
    float s = 0.0f;
    for (int c = 0; c < d; ++c) s += go[c] * v[c];
    ds[j] = s;
    dot += s * p[j];
  }
  for (int j = 0; j <= last; ++j) ds[j] = p[j] * (ds[j] - dot) * scale;
  for (int c = 0; c < d; ++c) dq[c] = 0.0f;
  for (int j = 0; j <= last; ++j) {
    const float* k = k0 + static_cast<long>(j) * ld;
    for (int c = 0; c < d; ++c) dq[c] += ds[j] * k[c];
  }
}

/// The backward of key/value row j over the query rows that see it (i from first = j when causal,
/// else 0, to T - 1): dk[c] = sum_i ds_ij * q_i[c] and dv[c] = sum_i p_ij * go_i[c], i increasing;
/// ds_ij at ds0[i * ldp + j], p_ij at p0[i * ldp + j], q_i at q0 + i * ld, go_i at go0 + i * ldg.
/// Overwrites dk[0..d) and dv[0..d).
FP8EMU_HD void attention_col_backward_kv(const float* ds0, const float* p0, int ldp, const float* q0, int ld,
                                                const float* go0, int ldg, int j, int T, int d, bool causal, float* dk,
                                                float* dv) {
  for (int c = 0; c < d; ++c) {
    dk[c] = 0.0f;
    dv[c] = 0.0f;
  }
  for (int i = causal ? j : 0; i < T; ++i) {
    const float ds = ds0[static_cast<long>(i) * ldp + j], p = p0[static_cast<long>(i) * ldp + j];
    const float* q = q0 + static_cast<long>(i) * ld;
    const float* go = go0 + static_cast<long>(i) * ldg;
    for (int c = 0; c < d; ++c) {
      dk[c] += ds * q[c];
      dv[c] += p * go[c];
    }
  }
}

}  // namespace fp8emu::core
