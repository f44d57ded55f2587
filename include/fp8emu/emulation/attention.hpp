/// \file attention.hpp
/// \brief Vectorised CPU forward (and the query side of the backward) of the attention core for
/// one (batch, head): the bits of core::attention_row_forward (attention_row_backward_q) for every
/// query row, eight keys at a time.
///
/// Each query row's scores are its q . k_j sums in c order (one fp32 product and one fp32 sum per
/// term, as core::attention_row_forward), with eight keys in the lanes; the exponentials are
/// core::exp_rn's binary64 steps on eight lanes (the lanes the vector path does not cover call
/// core::exp_rn); the maximum, the sum of the exponentials and the output's p_j v_j sums keep the
/// element function's order. Bit-identical to core::attention_row_forward on every instruction-set
/// path (FP8EMU_GEMM_ISA, as the GEMMs), checked by tests/emulation/test_attention.cpp.
#pragma once

namespace fp8emu::emu {

/// Rows i = 0 .. T-1 of one head: q_i = q0 + i * ld, k_j = k0 + j * ld, v_j = v0 + j * ld (d floats
/// each); probs row i at p0 + i * T (T floats, zeros past the last key when causal), output row i
/// at o0 + i * ldo (d floats). Equals core::attention_row_forward(q_i, k0, v0, ld, i, T, d, scale,
/// causal, p0 + i * T, o0 + i * ldo) for every i. Single-threaded (callers parallelise over heads).
void attention_forward_head(const float* q0, const float* k0, const float* v0, int ld, int T, int d, float scale,
                            bool causal, float* p0, float* o0, int ldo);

/// The query side of the backward for rows i = 0 .. T-1 of one head: equals
/// core::attention_row_backward_q(p0 + i * T, go0 + i * ldg, k0, v0, ld, i, T, d, scale, causal,
/// ds0 + i * T, dq0 + i * lddq) for every i (its go . v_j sums eight keys at a time, in c order;
/// the rest in the element function's order). Single-threaded.
void attention_backward_q_head(const float* p0, const float* go0, int ldg, const float* k0, const float* v0, int ld,
                               int T, int d, float scale, bool causal, float* ds0, float* dq0, int lddq);

}  // namespace fp8emu::emu
