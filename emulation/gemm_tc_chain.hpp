// Private: what the tensor-core GEMM kernels share (gemm_tensor_core.cpp, gemm_tc_fma.cpp): the
// per-code fields of an FP8 format and the bookkeeping of the block chain along K (TE's promotion
// and cuBLASLt's split-K ranges), identical on every path.
#pragma once

#include <cstdint>

#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu::detail {

// Per-code decode of a format (core::decode_fp8_term), for finite codes: |x| = m * 2^(e - f), m
// the integer significand (0 for zeros), e the exponent clamped at emin (0 for zeros), s = +1 or -1;
// `special` marks NaN and Inf.
struct CodeFields {
  std::int16_t m, e, s;
  bool special;
};

inline void decode_table(const FormatSpec& f, CodeFields* t) {
  for (int c = 0; c < 256; ++c) {
    const auto code = std::uint8_t(c);
    const bool special = f.is_special_code(code);
    const core::MmaTerm term = core::decode_fp8_term(special ? std::uint8_t(0) : code, f);
    t[c] = CodeFields{std::int16_t(term.sig), std::int16_t(term.sig ? term.exp : 0),
                      std::int16_t(term.sign ? -1 : 1), special};
  }
}

// The block's bookkeeping along K: at the start of block k0 (a K index) a split-K range may end
// (its value joins the fp32 sum of the ranges) and a promotion run may end (the chain joins the
// fp32 total with one RN add). Split-K ranges hold whole blocks, and so do promotion runs (the
// caller checked that the interval is a multiple of the block).
struct Chain {
  int promotion;  // 0: fast accumulation (or one run per range)
  int range;      // split-K range length (K itself without split-K)
  bool range_ends(int k0) const { return k0 > 0 && k0 % range == 0; }
  bool run_ends(int k0) const { return promotion > 0 && k0 % range > 0 && (k0 % range) % promotion == 0; }
};

// Scalar form of the bookkeeping, per element (the vector kernels do the same per lane).
inline void chain_boundary(const Chain& cp, int k0, float& chain, float& total, float& sum) {
  if (cp.range_ends(k0)) {
    const float v = cp.promotion > 0 ? total + chain : chain;
    sum = k0 == cp.range ? v : sum + v;
    chain = total = 0.0f;
  }
  if (cp.run_ends(k0)) {
    total += chain;
    chain = 0.0f;
  }
}

/// chain_boundary on every lane of a register tile's state in memory (n floats each): the vector
/// kernels' RN adds at a split-K range end or a promotion run end, in the caller's rounding mode
/// (which must be round-to-nearest there).
inline void chain_boundaries(const Chain& cp, int k0, int n, float* chain, float* total, float* sum) {
  if (!cp.range_ends(k0) && !cp.run_ends(k0)) return;
  for (int i = 0; i < n; ++i) chain_boundary(cp, k0, chain[i], total[i], sum[i]);
}

// The element's result: the open run joins the total, the range the split-K sum, times s (RN).
inline float chain_result(const Chain& cp, int K, float chain, float total, float sum, float s) {
  const float v = cp.promotion > 0 ? total + chain : chain;
  return (K > cp.range ? sum + v : v) * s;
}

/// The AVX2 tensor-core GEMM (gemm_tc_fma.cpp: FMAs rounded toward zero): D [M, N] for A [M, K]
/// and B [N, K] (FP8 codes, per-code fields ta, tb), blocks of `block` products (16 or 32) chained
/// along K with the bookkeeping cp, D = RN(result * s); rows holding NaN or Inf codes are computed
/// as zeros and flagged in bad_a [M] and bad_b [N] for the caller. Only on x86-64 processors with
/// AVX2 and FMA (gemm_tc_fma_avx2_supported). Returns false, computing nothing, for formats whose
/// codes do not follow the packing rule (gemm_tc_fma_packs; every FP8 operand format does).
bool gemm_tc_fma_avx2(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                      const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                      float* D, char* bad_a, char* bad_b);
bool gemm_tc_fma_avx2_supported();
/// The same kernel on AVX-512 (gemm_tc_fma512.cpp: 16-lane FMAs, VPOPCNTD for the negative
/// products' count), with the same packing rule and return.
bool gemm_tc_fma_avx512(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                        const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp,
                        float s, float* D, char* bad_a, char* bad_b);
bool gemm_tc_fma_packs(const CodeFields* ta, const CodeFields* tb);
bool gemm_tc_fma_avx512_supported();

}  // namespace fp8emu::emu::detail
