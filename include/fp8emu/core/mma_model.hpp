/// \file mma_model.hpp
/// \brief Bit-exact model of the FP8 tensor-core dot product on Hopper (`wgmma` k32 and `mma.sync`)
/// and Ada (`mma.sync.m16n8k32`), shared by the CPU emulator and CUDA code (integer-only, host and
/// device).
///
/// The block-FMA model of Khattak & Mikaitis ("Accurate Models of NVIDIA Tensor Cores", arXiv
/// 2512.07004; MATLAB-tensor-core `Generic_BFMA_TC.m`), as specified in
/// docs/tensor-core-model.md §Block FMA. One block FMA of n products and an accumulator c:
///   1. decode every FP8 operand exactly: |x| = M * 2^(e - f), e clamped at emin (subnormals), or,
///      for Hopper mma.sync, the fields of the equal fp16 value (MmaOperands::kFp16);
///   2. each non-zero product is exact: P = Ma * Mb with unnormalised exponent E_i = ea + eb;
///      a non-zero c joins as a term with its own significand and exponent;
///   3. E = max E_i; every term is aligned to F fraction bits below 2^E by truncating its magnitude
///      (round toward zero, no sticky bit), and the aligned integers are summed exactly;
///   4. fp32 accumulator: the sum is cut to `significant_bits` (round toward zero) and is then
///      exactly an fp32; fp16 accumulator (Ada `.f16`): the sum is rounded to fp16 (RNE).
/// A block (one instruction) is one or more such steps chained through the accumulator (MmaDatapath);
/// blocks chain along K, the result of one block being the C of the next.
/// Hopper wgmma: one step of 32, F = 13, 14 bits kept, the chain starting from c = 0 (scale-d = 0).
/// Ada mma.sync: steps of 16, F = 13, 14 bits, C from the caller joining the first step's alignment.
/// Hopper mma.sync (measured on an H200): FP8 widened to fp16, two steps of 16 (k mod 4 in {0, 1},
/// then {2, 3}) from +0, F = 25, 24 bits kept, then D = RN_fp32(C + step 2).
///
/// Verified bit for bit on recorded GPU outputs (tests/data/tensor-core-mma: H100 E4M3 and E5M2 fp32,
/// Ada E4M3 fp32 and fp16; tests/data/h200: H200 mma.sync, all three FP8 pairs, special values
/// included). Choices the recorded data does not settle, documented here and tested:
///   - an exact-zero sum (and an empty block with c = 0) gives +0 (measured for Hopper mma.sync);
///   - NaN and Inf inputs follow the model's rule, applied before the datapath: any NaN operand or
///     c, Inf * 0, or +Inf and -Inf together give NaN (0x7FFFFFFF); otherwise the Inf's sign wins
///     (measured for Hopper mma.sync, step by step);
///   - a result >= 2^128 gives +-Inf; below 2^-126 it is truncated to the fp32 subnormal quantum;
///   - fp16 accumulator overflow gives +-Inf;
///   - mixed E4M3 x E5M2 decodes each operand with its own format through the same datapath.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::core {

/// Accumulator of the tensor-core datapath.
enum class MmaAccumulator : std::uint8_t {
  kFp32,  ///< 14 significant bits kept by truncation; result exactly an fp32 (Hopper, Ada .f32).
  kFp16,  ///< Round to nearest even fp16 after each block (Ada .f16); c must be an fp16 value.
};

/// Fraction bits kept below the largest product exponent (F = 13, Hopper and Ada FP8).
inline constexpr int kMmaFractionBits = 13;
/// Significant bits of the fp32 accumulator after a block (1 + F).
inline constexpr int kMmaSignificantBits = 14;
/// Hopper mma.sync's fp16 HMMA steps: terms truncated to 2^(E - 25), the sum to 24 bits (an fp32).
inline constexpr int kHmmaFractionBits = 25;
inline constexpr int kHmmaSignificantBits = 24;

/// One operand or addend of a block: |v| = sig * 2^(exp - frac), exp the exponent of the leading
/// position (products: the unnormalised e_a + e_b).
struct MmaTerm {
  std::uint32_t sign;
  std::uint32_t sig;
  int exp;
  int frac;
};

/// Number of significant bits of v (0 for 0).
FP8EMU_HD constexpr int bit_length(std::uint64_t v) {
  int n = 0;
  while (v) {
    v >>= 1;
    ++n;
  }
  return n;
}

/// Exact FP8 decode into sign, integer significand (hidden bit included; 0 for zero) and exponent
/// clamped at emin. Only for finite codes.
FP8EMU_HD constexpr MmaTerm decode_fp8_term(std::uint8_t code, FormatSpec f) {
  const std::uint32_t mag = code & f.top_code();
  const int m = f.mantissa_bits;
  const std::uint32_t e = mag >> m, man = mag & ((1u << m) - 1u);
  MmaTerm t{(code & f.sign_mask()) ? 1u : 0u, 0u, f.emin(), m};
  if (e == 0) {
    t.sig = man;
  } else {
    t.sig = man | (1u << m);
    t.exp = int(e) - f.bias;
  }
  return t;
}

/// Exact decode of a finite fp32 into a term (exponent clamped at -126).
FP8EMU_HD constexpr MmaTerm decode_f32_term(std::uint32_t bits) {
  const std::uint32_t e = (bits >> 23) & 0xFFu, man = bits & 0x7FFFFFu;
  return MmaTerm{bits >> 31, e ? (man | 0x800000u) : man, e ? int(e) - 127 : -126, 23};
}

/// Exact decode of a finite fp16 (bits) into a term (exponent clamped at -14).
FP8EMU_HD constexpr MmaTerm decode_f16_term(std::uint32_t bits) {
  const std::uint32_t e = (bits >> 10) & 0x1Fu, man = bits & 0x3FFu;
  return MmaTerm{(bits >> 15) & 1u, e ? (man | 0x400u) : man, e ? int(e) - 15 : -14, 10};
}

/// fp32 bits of (-1)^sign * T * 2^k, exact when representable; rounding toward zero into the
/// subnormal range; +-Inf at or above 2^128.
FP8EMU_HD constexpr std::uint32_t scaled_int_to_f32_rz(std::uint32_t sign, std::uint64_t T, int k) {
  const std::uint32_t s = sign << 31;
  if (T == 0) return s;
  int p = bit_length(T) - 1;
  if (p > 23) {  // keep 24 bits (RZ); the callers never need more
    T >>= (p - 23);
    k += p - 23;
    p = 23;
  }
  const int exp = p + k;
  if (exp > 127) return s | 0x7F800000u;
  if (exp >= -126) return s | (std::uint32_t(exp + 127) << 23) | (std::uint32_t(T << (23 - p)) & 0x7FFFFFu);
  const int sh = k + 149;  // subnormal quantum 2^-149
  if (sh >= 0) return s | std::uint32_t(T << sh);
  return s | (-sh >= 64 ? 0u : std::uint32_t(T >> -sh));
}

/// fp16 bits of (-1)^sign * T * 2^k rounded to nearest even (subnormals; overflow -> +-Inf).
FP8EMU_HD constexpr std::uint32_t scaled_int_to_f16_rne(std::uint32_t sign, std::uint64_t T, int k) {
  const std::uint32_t s = sign << 15;
  if (T == 0) return s;
  const int exp = bit_length(T) - 1 + k;
  const int q = exp - 10 > -24 ? exp - 10 : -24;  // quantum of the result
  const int shift = q - k;
  std::uint64_t mant = 0;
  if (shift <= 0) {
    mant = T << -shift;
  } else if (shift < 64) {
    const std::uint64_t rem = T & ((std::uint64_t(1) << shift) - 1), half = std::uint64_t(1) << (shift - 1);
    mant = T >> shift;
    if (rem > half || (rem == half && (mant & 1u))) ++mant;
  }
  int qq = q;
  if (mant >> 11) {  // rounding carried into a new binade
    mant >>= 1;
    ++qq;
  }
  if (mant < 0x400u) return s | std::uint32_t(mant);  // subnormal (qq == -24) or zero
  const int efield = qq + 10 + 15;
  if (efield >= 31) return s | 0x7C00u;
  return s | (std::uint32_t(efield) << 10) | (std::uint32_t(mant) & 0x3FFu);
}

namespace detail {
// Classifies an FP8 code: 0 finite, 1 NaN, 2 Inf.
FP8EMU_HD constexpr int fp8_class(std::uint8_t code, FormatSpec f) {
  const std::uint32_t mag = code & f.top_code();
  if (mag <= f.max_finite_code()) return 0;
  return (f.has_inf && mag == f.inf_code()) ? 2 : 1;
}
}  // namespace detail

/// How a tensor core turns an FP8 operand into a term of the block FMA.
enum class MmaOperands : std::uint8_t {
  kFp8,   ///< The FP8 value's own fields: integer significand, exponent clamped at the FP8 format's
          ///< emin (Hopper wgmma, Ada mma.sync).
  kFp16,  ///< Widened exactly to fp16 first (Hopper mma.sync: ptxas unpacks FP8 to fp16 and runs the
          ///< fp16 HMMA): 11-bit significand, 10 fraction bits; E4M3 subnormals become normal fp16
          ///< numbers, E5M2 subnormals stay fp16 subnormals aligned at exponent -14.
};

/// The whole tensor-core datapath of a model (a row of core/accumulation.hpp gives it by
/// AccumulationModel::tensor_core()). Along K the products are cut into blocks of `block` (one MMA
/// instruction, or one block FMA); a block is cut into `steps` block FMAs chained through the
/// accumulator; blocks are chained along K, the result of one being the C of the next.
struct MmaDatapath {
  int block;              ///< Products per block (chained along K).
  int steps;              ///< Block FMAs per block, chained through the accumulator (1 or more).
  int step_interleave;    ///< Product i of a block (0-based) belongs to step (i / step_interleave) % steps.
  int fraction_bits;      ///< F: every term is truncated to a multiple of 2^(E - F).
  int significant_bits;   ///< kFp32 accumulator: significant bits kept (truncated) after each step.
  MmaAccumulator accumulator;
  MmaOperands operands;
  /// true: C (along K: the previous block's result) is the accumulator of the block's first step,
  /// inside its alignment. false: the block's steps start from +0 and C is added last with one RN
  /// fp32 addition, every NaN result being 0x7FFFFFFF (needs the kFp32 accumulator).
  bool c_joins_first_step;
};

/// The datapath of one block FMA of F fraction bits, 1 + F significant bits, FP8 operands, C in the
/// alignment (Hopper wgmma and Ada with their block length).
FP8EMU_HD constexpr MmaDatapath block_fma_datapath(int block, MmaAccumulator acc, int fraction_bits = kMmaFractionBits) {
  return MmaDatapath{block, 1, 1, fraction_bits, fraction_bits + 1, acc, MmaOperands::kFp8, true};
}

/// An FP8 code as a term of the datapath (finite codes only): its own fields (kFp8), or the fields
/// of the equal fp16 value (kFp16; every E4M3 and E5M2 value is exactly an fp16).
FP8EMU_HD constexpr MmaTerm operand_term(std::uint8_t code, FormatSpec f, MmaOperands operands) {
  MmaTerm t = decode_fp8_term(code, f);
  if (operands == MmaOperands::kFp8 || t.sig == 0) return t;
  // value = sig * 2^(exp - frac); its leading bit is 2^(exp - frac + p).
  const int p = bit_length(t.sig) - 1, lead = t.exp - t.frac + p;
  constexpr int kHalfEmin = -14, kHalfFrac = 10;
  if (lead >= kHalfEmin) return MmaTerm{t.sign, t.sig << (kHalfFrac - p), lead, kHalfFrac};
  // fp16 subnormal: value / 2^-24, an integer for every FP8 value.
  return MmaTerm{t.sign, t.sig << (t.exp - t.frac + 24), kHalfEmin, kHalfFrac};
}

/// One block FMA: the products a[i]*b[i] (FP8 codes) with i in [0, n) that belong to `step`
/// ((i / step_interleave) % steps == step), plus the accumulator c. For kFp32, c and the result are
/// fp32 bits; for kFp16, fp16 bits. See the file comment; `p` gives F, the bits kept and how the
/// operands are decoded. Specials: NaN (0x7FFFFFFF) when a product of the step is NaN (a NaN factor,
/// Inf * 0), c is NaN, or +Inf and -Inf meet among them; else the Inf.
FP8EMU_HD constexpr std::uint32_t mma_step(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                           int n, int step, std::uint32_t c, const MmaDatapath& p) {
  const bool f16 = p.accumulator == MmaAccumulator::kFp16;
  auto in_step = [&](int i) { return p.steps <= 1 || (i / p.step_interleave) % p.steps == step; };
  // Special values first (model rule).
  bool nan = false, pos_inf = false, neg_inf = false;
  for (int i = 0; i < n; ++i) {
    if (!in_step(i)) continue;
    const int ca = detail::fp8_class(a[i], fa), cb = detail::fp8_class(b[i], fb);
    if (ca == 0 && cb == 0) continue;
    const bool za = (a[i] & fa.top_code()) == 0, zb = (b[i] & fb.top_code()) == 0;
    if (ca == 1 || cb == 1 || za || zb) {
      nan = true;
    } else {
      const bool neg = ((a[i] ^ b[i]) & 0x80u) != 0;
      (neg ? neg_inf : pos_inf) = true;
    }
  }
  const std::uint32_t c_abs = f16 ? (c & 0x7FFFu) : (c & 0x7FFFFFFFu);
  const std::uint32_t c_inf = f16 ? 0x7C00u : 0x7F800000u;
  if (c_abs > c_inf) nan = true;
  if (c_abs == c_inf) ((f16 ? (c >> 15) : (c >> 31)) & 1u ? neg_inf : pos_inf) = true;
  if (nan || (pos_inf && neg_inf)) return f16 ? 0x7FFFu : 0x7FFFFFFFu;
  if (pos_inf || neg_inf) return f16 ? ((neg_inf ? 0x8000u : 0u) | 0x7C00u) : ((neg_inf ? 0x80000000u : 0u) | 0x7F800000u);

  // Terms and the alignment exponent.
  const MmaTerm cterm = f16 ? decode_f16_term(c) : decode_f32_term(c);
  const bool have_c = cterm.sig != 0;
  bool any = have_c;
  int E = have_c ? cterm.exp : 0;
  for (int i = 0; i < n; ++i) {
    if (!in_step(i)) continue;
    const MmaTerm ta = operand_term(a[i], fa, p.operands), tb = operand_term(b[i], fb, p.operands);
    if (ta.sig == 0 || tb.sig == 0) continue;
    const int e = ta.exp + tb.exp;
    if (!any || e > E) E = e;
    any = true;
  }
  if (!any) return 0u;
  // Aligned, truncated, exact integer sum: every |term| < 2^(F + 2), so 64 bits hold any block.
  std::int64_t S = 0;
  auto add = [&](std::uint32_t sign, std::uint64_t sig, int exp, int frac) {
    const int sh = p.fraction_bits - frac - (E - exp);
    const std::uint64_t t = sh >= 0 ? (sig << sh) : (-sh >= 64 ? 0u : (sig >> -sh));
    S += sign ? -std::int64_t(t) : std::int64_t(t);
  };
  if (have_c) add(cterm.sign, cterm.sig, cterm.exp, cterm.frac);
  for (int i = 0; i < n; ++i) {
    if (!in_step(i)) continue;
    const MmaTerm ta = operand_term(a[i], fa, p.operands), tb = operand_term(b[i], fb, p.operands);
    if (ta.sig == 0 || tb.sig == 0) continue;
    add(ta.sign ^ tb.sign, std::uint64_t(ta.sig) * tb.sig, ta.exp + tb.exp, ta.frac + tb.frac);
  }
  if (S == 0) return 0u;  // exact zero: +0 (measured on Hopper mma.sync; fp8emu's choice elsewhere)
  const std::uint32_t sign = S < 0 ? 1u : 0u;
  std::uint64_t T = std::uint64_t(S < 0 ? -S : S);
  const int k = E - p.fraction_bits;
  if (f16) return scaled_int_to_f16_rne(sign, T, k);
  const int nbits = bit_length(T), keep = p.significant_bits;
  if (nbits > keep) T = (T >> (nbits - keep)) << (nbits - keep);
  return scaled_int_to_f32_rz(sign, T, k);
}

/// One fused block of n products with FP8 operands, C in the alignment, F fraction bits and 1 + F
/// significant bits (the Hopper wgmma / Ada block FMA). For kFp32, c and the result are fp32 bits;
/// for kFp16, fp16 bits.
FP8EMU_HD constexpr std::uint32_t mma_block(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b,
                                            FormatSpec fb, int n, std::uint32_t c, MmaAccumulator acc,
                                            int fraction_bits = kMmaFractionBits) {
  return mma_step(a, fa, b, fb, n, 0, c, block_fma_datapath(n, acc, fraction_bits));
}

/// One block of n <= p.block products with the addend c, as one MMA instruction computes it: the
/// steps chained through the accumulator, C joining the first step or added last (see MmaDatapath).
/// c and the result: fp32 bits (fp16 bits for the kFp16 accumulator, which needs c_joins_first_step).
FP8EMU_HD std::uint32_t mma_instruction(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                        int n, std::uint32_t c, const MmaDatapath& p) {
  std::uint32_t d = p.c_joins_first_step ? c : 0u;
  for (int s = 0; s < (p.steps > 1 ? p.steps : 1); ++s) d = mma_step(a, fa, b, fb, n, s, d, p);
  if (p.c_joins_first_step) return d;
  const std::uint32_t r = f32_to_bits(add_rn(bits_to_f32(c), bits_to_f32(d)));
  return (r & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFFFFFFu : r;  // every NaN D is 0x7FFFFFFF
}

/// A dot product of length K on the tensor cores: blocks of p.block products chained along K (each
/// block's result is the C of the next, mma_instruction), the first block's C being c (fp32 bits,
/// or fp16 bits for kFp16). A short last block is the same as padding with zero codes. Returns fp32
/// bits (the fp16 result widened exactly for kFp16).
FP8EMU_HD std::uint32_t mma_dot(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                std::uint32_t c, const MmaDatapath& p) {
  std::uint32_t d = c;
  for (int k0 = 0; k0 < K; k0 += p.block)
    d = mma_instruction(a + k0, fa, b + k0, fb, K - k0 < p.block ? K - k0 : p.block, d, p);
  return p.accumulator == MmaAccumulator::kFp16 ? half_to_f32_bits(std::uint16_t(d)) : d;
}

/// mma_dot with single-step blocks of `block` FP8 products, C in the alignment, F fraction bits
/// (Hopper wgmma: block 32, c = 0; Ada mma.sync: block 16 with the caller's C).
FP8EMU_HD std::uint32_t mma_dot(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                int block, std::uint32_t c, MmaAccumulator acc, int fraction_bits = kMmaFractionBits) {
  return mma_dot(a, fa, b, fb, K, c, block_fma_datapath(block, acc, fraction_bits));
}

}  // namespace fp8emu::core
