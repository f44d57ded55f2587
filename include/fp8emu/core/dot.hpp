/// \file dot.hpp
/// \brief The per-element bodies of the FP8 GEMMs: one output element's dot product under an
/// accumulation model (core/accumulation.hpp), the promotion wrapper, and the scaled GEMM elements.
/// Host and device (FP8EMU_HD): the CPU emulator's scalar paths and the CUDA kernels call exactly
/// these functions, so both compute the same bits by construction; the CPU's vectorised GEMMs are
/// tested against them (tests/emulation/test_simd_vs_element.cpp).
///
/// Operands are FP8 codes with their format records passed by value; a and b are K consecutive codes
/// (row i of A and row j of B of a TN GEMM). fp32 arithmetic goes through core/fp32_ops.hpp (one
/// rounding per operation). Results are deterministic: no reduction order depends on threads.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/core/u128.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::core {

/// fp32 sequential: c = +0, then c = RN(c + RN(a_k * b_k)) for k = 0..K-1 (the products are exact).
FP8EMU_HD float dot_fp32(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K) {
  float c = 0.0f;
  for (int k = 0; k < K; ++k) c = add_rn(c, mul_rn(fp8_to_f32(a[k], fa), fp8_to_f32(b[k], fb)));
  return c;
}

/// The exact sum of the exact products rounded once to fp32 (RNE); NaN if any product is NaN (a NaN
/// operand, Inf * 0) or +Inf and -Inf products meet, else the Inf. Exact for K < 2^31: every FP8 x
/// FP8 product is a multiple of 2^-32 below 2^58 there, so positive and negative parts each fit in
/// 128 bits.
FP8EMU_HD float dot_exact(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K) {
  constexpr int kLsbExponent = -32;  // every FP8 x FP8 product is a multiple of 2^-32
  bool nan = false, pinf = false, ninf = false;
  U128 pos, neg;
  for (int k = 0; k < K; ++k) {
    const float va = fp8_to_f32(a[k], fa), vb = fp8_to_f32(b[k], fb);
    if (!f32_is_finite(va) || !f32_is_finite(vb)) {
      const float p = mul_rn(va, vb);
      if (f32_is_nan(p)) nan = true;
      else (p > 0.0f ? pinf : ninf) = true;
      continue;
    }
    const MmaTerm ta = decode_fp8_term(a[k], fa), tb = decode_fp8_term(b[k], fb);
    const int e = ta.exp - ta.frac + tb.exp - tb.frac - kLsbExponent;  // 0 .. 50
    const std::uint64_t p = std::uint64_t(ta.sig) * tb.sig;           // < 2^8
    add_u128((ta.sign ^ tb.sign) ? neg : pos, p << e);                 // p << e < 2^58
  }
  if (nan || (pinf && ninf)) return bits_to_f32(0x7FC00000u);
  if (pinf) return bits_to_f32(0x7F800000u);
  if (ninf) return bits_to_f32(0xFF800000u);
  return less_u128(pos, neg) ? round_u128_to_f32(true, sub_u128(neg, pos), kLsbExponent)
                             : round_u128_to_f32(false, sub_u128(pos, neg), kLsbExponent);
}

/// One run of K products under a model, from a zero accumulator; fp32 result.
FP8EMU_HD float dot_run(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                        const AccumulationModel& m) {
  switch (m.datapath) {
    case Datapath::kExactSum: return dot_exact(a, fa, b, fb, K);
    case Datapath::kFp32Sequential: return dot_fp32(a, fa, b, fb, K);
    case Datapath::kTensorCore: return bits_to_f32(mma_dot(a, fa, b, fb, K, 0u, m.tensor_core()));
  }
  return bits_to_f32(0x7FFFFFFFu);  // unreachable: every Datapath is handled above
}

/// A tensor-core dot product with an addend C (fp32 bits; fp16 bits for an fp16 accumulator), as
/// chained MMA instructions compute it: C is the first block's C, which joins the first step's
/// alignment or is added last with one RN fp32 add (the row's c_joins_first_block). Returns fp32
/// bits. Only for kTensorCore models.
FP8EMU_HD std::uint32_t mma_dot_with_c(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                       int K, const AccumulationModel& m, std::uint32_t c) {
  return mma_dot(a, fa, b, fb, K, c, m.tensor_core());
}

/// The accumulation of one output element with TE's promotion wrapper: runs of `promotion`
/// K-elements, each summed from zero under the model, added to an fp32 total with one RN add per run
/// in increasing K; promotion 0 (fast accumulation) or >= K: one run.
FP8EMU_HD float dot_promoted(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                             const AccumulationModel& m, int promotion) {
  if (promotion == 0 || promotion >= K) return dot_run(a, fa, b, fb, K, m);
  float total = 0.0f;
  for (int k0 = 0; k0 < K; k0 += promotion)
    total = add_rn(total, dot_run(a + k0, fa, b + k0, fb, min_int(promotion, K - k0), m));
  return total;
}

/// cuBLASLt's split-K cuts K on tiles of this many elements (measured on an H200).
inline constexpr int kSplitKTile = 128;

/// The K-elements of one split-K range: roundup(ceil(K / split_k), kSplitKTile); K for split_k <= 1.
/// The ranges are [0, L), [L, 2L), ...: the last non-empty one may be short and trailing ones empty
/// (K = 16384, split_k = 25: L = 768, 22 non-empty ranges).
FP8EMU_HD constexpr int split_k_range(int K, int split_k) {
  if (split_k <= 1) return K;
  const long long per = (static_cast<long long>(K) + split_k - 1) / split_k;
  return int((per + kSplitKTile - 1) / kSplitKTile * kSplitKTile);
}

/// One output element's accumulation with both GEMM-level wrappers, as cuBLASLt computes it (measured
/// on an H200, every reduction scheme): K cut into split_k_range(K, split_k) ranges; each range's
/// partial is dot_promoted over it (from a zero accumulator, promotion runs starting at the range's
/// start); D = the fp32 RN sum of the partials in range order (p0 + p1 + ...; an empty range's +0
/// changes nothing, as no partial is -0). split_k <= 1: dot_promoted over K.
FP8EMU_HD float dot_split_k(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                            const AccumulationModel& m, int promotion, int split_k) {
  const int L = split_k_range(K, split_k);
  if (L >= K) return dot_promoted(a, fa, b, fb, K, m, promotion);
  float total = dot_promoted(a, fa, b, fb, L, m, promotion);
  for (int k0 = L; k0 < K; k0 += L)
    total = add_rn(total, dot_promoted(a + k0, fa, b + k0, fb, min_int(L, K - k0), m, promotion));
  return total;
}

/// One element of the per-tensor-scaled GEMM (emu::gemm_fp8_tn): RN(acc * s), acc = dot_split_k,
/// s = RN(scale_inv_a * scale_inv_b) computed once by the caller. a: row i of A, b: row j of B (K
/// codes each).
FP8EMU_HD float gemm_tn_element(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                const AccumulationModel& m, int promotion, int split_k, float s) {
  return mul_rn(dot_split_k(a, fa, b, fb, K, m, promotion, split_k), s);
}

/// One element of the block-scaled GEMM (emu::gemm_fp8_block_tn): d = +0; for each K-block in
/// increasing order, d = RN(d + RN(P * RN(sa[blk] * sb[blk]))), P the block's products summed from
/// zero under the model (dot_run: the fp32-sequential sum for kFp32, the exact sum, or the
/// tensor-core chain of a kTensorCore row), so every scale block's partial is promoted to the fp32
/// total. a, b: row i of A and row j of B (K codes); sa, sb: their per-block scale_inv rows.
FP8EMU_HD float gemm_block_element(const std::uint8_t* a, FormatSpec fa, const float* sa, const std::uint8_t* b,
                                   FormatSpec fb, const float* sb, int K, int block, const AccumulationModel& m) {
  float d = 0.0f;
  for (int k0 = 0, blk = 0; k0 < K; k0 += block, ++blk) {
    const float p = dot_run(a + k0, fa, b + k0, fb, min_int(block, K - k0), m);
    d = add_rn(d, mul_rn(p, mul_rn(sa[blk], sb[blk])));
  }
  return d;
}

}  // namespace fp8emu::core
