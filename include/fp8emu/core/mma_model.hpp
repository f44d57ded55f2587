/// \file mma_model.hpp
/// \brief Bit-exact model of the tensor-core dot product (fp16, bf16, tf32 and FP8 inputs; Volta to
/// Blackwell), shared by the CPU emulator and CUDA code (integer-only, host and device).
///
/// The block-FMA model of Khattak & Mikaitis ("Accurate Models of NVIDIA Tensor Cores", arXiv
/// 2512.07004; MATLAB-tensor-core `Generic_BFMA_TC.m`), as specified in
/// docs/tensor-core-model.md §Block FMA. One block FMA of n products and an accumulator c:
///   1. decode every operand exactly in the operand format's fields: |x| = M * 2^(e - f), e clamped
///      at the format's emin (FP8 codes: their own fields, or those of the equal fp16, bf16 or tf32
///      value: MmaOperands);
///   2. each non-zero product is exact: P = Ma * Mb with unnormalised exponent E_i = ea + eb;
///      a non-zero c joins as a term with its own significand and exponent;
///   3. E = max(max E_i, the row's exponent floor); every term is aligned to F fraction bits below
///      2^E by truncating its magnitude (round toward zero, no sticky bit), and the aligned integers
///      are summed exactly;
///   4. fp32 accumulator: the sum is cut to `significant_bits` (round toward zero) and is then
///      exactly an fp32; fp16 accumulator: the sum is rounded to fp16 (RNE).
/// A block (one instruction) is one or more such steps chained through the accumulator (MmaDatapath),
/// C joining the first step or added last with one RN add; blocks chain along K, the result of one
/// block being the C of the next. The rows (core/accumulation.hpp) give n, F, the bits kept, the
/// floor and where C joins for each GPU and input format.
///
/// Verified bit for bit on recorded GPU outputs: tests/data/tensor-core-mma (V100, A100, A2, Ada,
/// L40S, H100, H200, B200; fp16, bf16, tf32, E4M3, E5M2; fp32 and fp16 output) and tests/data/h200
/// (H200 mma.sync, all three FP8 pairs, special values included). Choices the recorded data do not
/// settle, documented here and tested:
///   - an exact-zero sum (and an empty block with c = 0) gives +0 (measured for Hopper mma.sync);
///   - NaN and Inf inputs follow the model's rule, applied before the datapath: any NaN operand or
///     c, Inf * 0, or +Inf and -Inf together give NaN (0x7FFFFFFF); otherwise the Inf's sign wins
///     (measured for Hopper mma.sync, step by step);
///   - a result >= 2^128 gives +-Inf; below 2^-126 it is truncated to the fp32 subnormal quantum;
///   - fp16 accumulator overflow gives +-Inf;
///   - the exponent floor (the authors' `min_exp_limit`; no recording exercises it);
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
  if (!f.is_special_code(code)) return 0;
  return (f.has_inf && (code & f.top_code()) == f.inf_code()) ? 2 : 1;
}
}  // namespace detail

/// The operand format of a tensor-core instruction: the format whose fields the block FMA reads.
/// FP8 codes given to a row of another format are first widened exactly to it (every E4M3 and E5M2
/// value is an fp16, a bf16 and a tf32 value).
enum class MmaOperands : std::uint8_t {
  kFp8,   ///< The FP8 value's own fields: integer significand, exponent clamped at the FP8 format's
          ///< emin (Hopper wgmma, Ada mma.sync, Blackwell FP8).
  kFp16,  ///< fp16 fields: 11-bit significand, exponent clamped at -14 (fp16 HMMA; Hopper's FP8
          ///< mma.sync, which ptxas runs on the fp16 tensor core: E4M3 subnormals become normal fp16
          ///< numbers, E5M2 subnormals stay fp16 subnormals aligned at exponent -14).
  kBf16,  ///< bf16 fields: 8-bit significand, exponent clamped at -126.
  kTf32,  ///< tf32 fields: 11-bit significand, exponent clamped at -126.
};

/// The operand format's name: "fp8", "fp16", "bf16", "tf32".
FP8EMU_HD constexpr const char* operand_format_name(MmaOperands o) {
  return o == MmaOperands::kFp8 ? "fp8" : o == MmaOperands::kFp16 ? "fp16" : o == MmaOperands::kBf16 ? "bf16" : "tf32";
}

/// Exponent floor and fraction bits of a non-FP8 operand format.
FP8EMU_HD constexpr int operand_emin(MmaOperands o) { return o == MmaOperands::kFp16 ? -14 : -126; }
FP8EMU_HD constexpr int operand_fraction_bits(MmaOperands o) { return o == MmaOperands::kBf16 ? 7 : 10; }

/// Whether fp32 bits hold exactly a value of the operand format `o` (kFp16, kBf16, kTf32): NaN and
/// the infinities included; for kFp8 always false (FP8 operands are codes).
FP8EMU_HD constexpr bool is_operand_value(std::uint32_t bits, MmaOperands o) {
  if (o == MmaOperands::kFp8) return false;
  if (o == MmaOperands::kFp16) {
    const std::uint32_t back = half_to_f32_bits(f32_bits_to_half_rne(bits));
    return back == bits || ((bits & 0x7FFFFFFFu) > 0x7F800000u);  // NaN payloads need not survive
  }
  return (bits & ((1u << (23 - operand_fraction_bits(o))) - 1u)) == 0u ||
         ((bits & 0x7FFFFFFFu) > 0x7F800000u);
}

/// Exact decode of a finite value of the operand format `o` (not kFp8), given as fp32 bits, into a
/// term with the format's fraction bits and its exponent clamped at the format's emin (fp16
/// subnormals are fp32 normals). Bits below the format's precision are dropped (callers check
/// is_operand_value).
FP8EMU_HD constexpr MmaTerm decode_operand_term(std::uint32_t bits, MmaOperands o) {
  const MmaTerm t = decode_f32_term(bits);
  const int frac = operand_fraction_bits(o), emin = operand_emin(o);
  MmaTerm r{t.sign, 0u, t.exp, frac};
  if (t.sig == 0) return MmaTerm{t.sign, 0u, emin, frac};
  const int drop = (23 - frac) + (t.exp < emin ? emin - t.exp : 0);
  r.sig = drop >= 32 ? 0u : t.sig >> drop;
  if (t.exp < emin) r.exp = emin;
  return r;
}

/// An FP8 code as a term of the datapath (finite codes only): its own fields (kFp8), or the fields
/// of the equal value of the operand format.
FP8EMU_HD constexpr MmaTerm operand_term(std::uint8_t code, FormatSpec f, MmaOperands operands) {
  if (operands == MmaOperands::kFp8) return decode_fp8_term(code, f);
  return decode_operand_term(decode_to_f32_bits(code, f), operands);
}

/// FP8 codes as the operands of a block: K consecutive codes of one format.
struct MmaFp8Codes {
  const std::uint8_t* p;
  FormatSpec f;
  FP8EMU_HD constexpr int cls(int i) const { return detail::fp8_class(p[i], f); }
  FP8EMU_HD constexpr bool is_zero(int i) const { return f.is_zero_code(p[i]); }
  FP8EMU_HD constexpr std::uint32_t sign(int i) const { return (p[i] & f.sign_mask()) ? 1u : 0u; }
  FP8EMU_HD constexpr MmaTerm term(int i, MmaOperands o) const { return operand_term(p[i], f, o); }
  FP8EMU_HD constexpr MmaFp8Codes at(int k) const { return MmaFp8Codes{p + k, f}; }
};

/// fp16, bf16 or tf32 operands given as fp32 bit patterns (each exactly a value of the row's
/// operand format: core::is_operand_value), element i at p[i * stride].
struct MmaValues {
  const std::uint32_t* p;
  int stride = 1;
  FP8EMU_HD constexpr std::uint32_t v(int i) const { return p[std::ptrdiff_t(i) * stride]; }
  FP8EMU_HD constexpr int cls(int i) const {
    const std::uint32_t m = v(i) & 0x7FFFFFFFu;
    return m < 0x7F800000u ? 0 : (m == 0x7F800000u ? 2 : 1);
  }
  FP8EMU_HD constexpr bool is_zero(int i) const { return (v(i) & 0x7FFFFFFFu) == 0u; }
  FP8EMU_HD constexpr std::uint32_t sign(int i) const { return v(i) >> 31; }
  FP8EMU_HD constexpr MmaTerm term(int i, MmaOperands o) const { return decode_operand_term(v(i), o); }
  FP8EMU_HD constexpr MmaValues at(int k) const { return MmaValues{p + std::ptrdiff_t(k) * stride, stride}; }
};

/// An operand decoded once (MmaDecodedTerms): its term in one operand format and its class (0
/// finite, 1 NaN, 2 Inf).
struct MmaDecoded {
  MmaTerm term;
  std::uint32_t cls;
};

/// Decodes fp32 bits of a value of the operand format `o` (not kFp8) for MmaDecodedTerms.
FP8EMU_HD constexpr MmaDecoded decode_value(std::uint32_t bits, MmaOperands o) {
  const std::uint32_t m = bits & 0x7FFFFFFFu;
  const std::uint32_t cls = m < 0x7F800000u ? 0u : (m == 0x7F800000u ? 2u : 1u);
  // (Built in two statements: nvcc 13.0's cicc crashes on the one-expression conditional form.)
  MmaDecoded d{MmaTerm{bits >> 31, 0u, 0, 0}, cls};
  if (cls == 0u) d.term = decode_operand_term(bits, o);
  return d;
}

/// Operands decoded ahead (decode_value with the datapath's operand format): the same block FMA as
/// MmaValues without decoding each operand once per output element.
struct MmaDecodedTerms {
  const MmaDecoded* p;
  FP8EMU_HD constexpr int cls(int i) const { return int(p[i].cls); }
  FP8EMU_HD constexpr bool is_zero(int i) const { return p[i].cls == 0u && p[i].term.sig == 0u; }
  FP8EMU_HD constexpr std::uint32_t sign(int i) const { return p[i].term.sign; }
  FP8EMU_HD constexpr MmaTerm term(int i, MmaOperands) const { return p[i].term; }
  FP8EMU_HD constexpr MmaDecodedTerms at(int k) const { return MmaDecodedTerms{p + k}; }
};

/// "No floor": the largest exponent of a step is not raised.
inline constexpr int kNoExponentFloor = -1024;

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
  /// addition in the accumulator's format (fp32: every NaN result being 0x7FFFFFFF; fp16:
  /// add_f16_rne).
  bool c_joins_first_step;
  /// The alignment exponent E of a step is at least this (fp32 accumulator; the model's minimum
  /// product exponent, `min_exp_limit` in MATLAB-tensor-core): terms far below it are cut.
  int exponent_floor = kNoExponentFloor;
  /// The same for the fp16 accumulator.
  int exponent_floor_f16 = kNoExponentFloor;
};

/// The datapath of one block FMA of F fraction bits, 1 + F significant bits, FP8 operands, C in the
/// alignment (Hopper wgmma and Ada with their block length).
FP8EMU_HD constexpr MmaDatapath block_fma_datapath(int block, MmaAccumulator acc, int fraction_bits = kMmaFractionBits) {
  return MmaDatapath{block, 1, 1, fraction_bits, fraction_bits + 1, acc, MmaOperands::kFp8, true};
}

/// One block FMA: the products a[i]*b[i] with i in [0, n) that belong to `step`
/// ((i / step_interleave) % steps == step), plus the accumulator c. A and B are operand sources
/// (MmaFp8Codes, MmaValues). For kFp32, c and the result are fp32 bits; for kFp16, fp16 bits (c
/// joins with its own exponent, as a value, not clamped at fp16's emin). See the file comment; `p`
/// gives F, the bits kept, the exponent floor and how operands are decoded. Specials: NaN
/// (0x7FFFFFFF) when a product of the step is NaN (a NaN factor, Inf * 0), c is NaN, or +Inf and
/// -Inf meet among them; else the Inf.
template <class A, class B>
FP8EMU_HD constexpr std::uint32_t mma_step(A a, B b, int n, int step, std::uint32_t c, const MmaDatapath& p) {
  const bool f16 = p.accumulator == MmaAccumulator::kFp16;
  auto in_step = [&](int i) { return p.steps <= 1 || (i / p.step_interleave) % p.steps == step; };
  // Special values first (model rule).
  bool nan = false, pos_inf = false, neg_inf = false;
  for (int i = 0; i < n; ++i) {
    if (!in_step(i)) continue;
    const int ca = a.cls(i), cb = b.cls(i);
    if (ca == 0 && cb == 0) continue;
    if (ca == 1 || cb == 1 || a.is_zero(i) || b.is_zero(i)) {
      nan = true;
    } else {
      (a.sign(i) != b.sign(i) ? neg_inf : pos_inf) = true;
    }
  }
  const std::uint32_t c_abs = f16 ? (c & 0x7FFFu) : (c & 0x7FFFFFFFu);
  const std::uint32_t c_inf = f16 ? 0x7C00u : 0x7F800000u;
  if (c_abs > c_inf) nan = true;
  if (c_abs == c_inf) ((f16 ? (c >> 15) : (c >> 31)) & 1u ? neg_inf : pos_inf) = true;
  if (nan || (pos_inf && neg_inf)) return f16 ? 0x7FFFu : 0x7FFFFFFFu;
  if (pos_inf || neg_inf) return f16 ? ((neg_inf ? 0x8000u : 0u) | 0x7C00u) : ((neg_inf ? 0x80000000u : 0u) | 0x7F800000u);

  // Terms and the alignment exponent.
  const MmaTerm cterm = decode_f32_term(f16 ? half_to_f32_bits(std::uint16_t(c)) : c);
  const bool have_c = cterm.sig != 0;
  bool any = have_c;
  int E = have_c ? cterm.exp : 0;
  for (int i = 0; i < n; ++i) {
    if (!in_step(i)) continue;
    const MmaTerm ta = a.term(i, p.operands), tb = b.term(i, p.operands);
    if (ta.sig == 0 || tb.sig == 0) continue;
    const int e = ta.exp + tb.exp;
    if (!any || e > E) E = e;
    any = true;
  }
  if (!any) return 0u;
  const int floor = f16 ? p.exponent_floor_f16 : p.exponent_floor;
  if (E < floor) E = floor;
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
    const MmaTerm ta = a.term(i, p.operands), tb = b.term(i, p.operands);
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

/// mma_step on FP8 codes (a, b: n codes of formats fa, fb).
FP8EMU_HD constexpr std::uint32_t mma_step(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                           int n, int step, std::uint32_t c, const MmaDatapath& p) {
  return mma_step(MmaFp8Codes{a, fa}, MmaFp8Codes{b, fb}, n, step, c, p);
}

/// One fused block of n products with FP8 operands, C in the alignment, F fraction bits and 1 + F
/// significant bits (the Hopper wgmma / Ada block FMA). For kFp32, c and the result are fp32 bits;
/// for kFp16, fp16 bits.
FP8EMU_HD constexpr std::uint32_t mma_block(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b,
                                            FormatSpec fb, int n, std::uint32_t c, MmaAccumulator acc,
                                            int fraction_bits = kMmaFractionBits) {
  return mma_step(a, fa, b, fb, n, 0, c, block_fma_datapath(n, acc, fraction_bits));
}

/// The fp16 sum x + y of two fp16 values (bits), rounded once to nearest even (the exact sum is an
/// integer multiple of 2^-24 below 2^41); NaN is 0x7FFF; +Inf and -Inf give NaN; an exact zero sum
/// is +0 unless both are -0.
FP8EMU_HD constexpr std::uint32_t add_f16_rne(std::uint32_t x, std::uint32_t y) {
  const std::uint32_t ax = x & 0x7FFFu, ay = y & 0x7FFFu;
  if (ax > 0x7C00u || ay > 0x7C00u) return 0x7FFFu;
  if (ax == 0x7C00u && ay == 0x7C00u) return ((x ^ y) & 0x8000u) ? 0x7FFFu : x;
  if (ax == 0x7C00u) return x;
  if (ay == 0x7C00u) return y;
  const MmaTerm tx = decode_f16_term(x), ty = decode_f16_term(y);  // |v| = sig * 2^(exp + 14) * 2^-24
  const std::int64_t vx = std::int64_t(std::uint64_t(tx.sig) << (tx.exp + 14));
  const std::int64_t vy = std::int64_t(std::uint64_t(ty.sig) << (ty.exp + 14));
  const std::int64_t S = (tx.sign ? -vx : vx) + (ty.sign ? -vy : vy);
  if (S == 0) return (x & y & 0x8000u) ? 0x8000u : 0u;
  return scaled_int_to_f16_rne(S < 0 ? 1u : 0u, std::uint64_t(S < 0 ? -S : S), -24);
}

/// One block of n <= p.block products with the addend c, as one MMA instruction computes it: the
/// steps chained through the accumulator, C joining the first step or added last (see MmaDatapath):
/// one RN fp32 add (kFp32), or one RN fp16 add (kFp16: add_f16_rne). c and the result: fp32 bits
/// (fp16 bits for the kFp16 accumulator).
template <class A, class B>
FP8EMU_HD std::uint32_t mma_instruction(A a, B b, int n, std::uint32_t c, const MmaDatapath& p) {
  std::uint32_t d = p.c_joins_first_step ? c : 0u;
  for (int s = 0; s < (p.steps > 1 ? p.steps : 1); ++s) d = mma_step(a, b, n, s, d, p);
  if (p.c_joins_first_step) return d;
  if (p.accumulator == MmaAccumulator::kFp16) return add_f16_rne(c, d);
  const std::uint32_t r = f32_to_bits(add_rn(bits_to_f32(c), bits_to_f32(d)));
  return (r & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFFFFFFu : r;  // every NaN D is 0x7FFFFFFF
}

/// mma_instruction on FP8 codes.
FP8EMU_HD std::uint32_t mma_instruction(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                        int n, std::uint32_t c, const MmaDatapath& p) {
  return mma_instruction(MmaFp8Codes{a, fa}, MmaFp8Codes{b, fb}, n, c, p);
}

/// A dot product of length K on the tensor cores: blocks of p.block products chained along K (each
/// block's result is the C of the next, mma_instruction), the first block's C being c (fp32 bits,
/// or fp16 bits for kFp16). A short last block is the same as padding with zero operands. Returns
/// fp32 bits (the fp16 result widened exactly for kFp16). A, B: operand sources.
template <class A, class B>
FP8EMU_HD std::uint32_t mma_dot(A a, B b, int K, std::uint32_t c, const MmaDatapath& p) {
  std::uint32_t d = c;
  for (int k0 = 0; k0 < K; k0 += p.block)
    d = mma_instruction(a.at(k0), b.at(k0), K - k0 < p.block ? K - k0 : p.block, d, p);
  return p.accumulator == MmaAccumulator::kFp16 ? half_to_f32_bits(std::uint16_t(d)) : d;
}

/// mma_dot on FP8 codes.
FP8EMU_HD std::uint32_t mma_dot(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                std::uint32_t c, const MmaDatapath& p) {
  return mma_dot(MmaFp8Codes{a, fa}, MmaFp8Codes{b, fb}, K, c, p);
}

/// mma_dot with single-step blocks of `block` FP8 products, C in the alignment, F fraction bits
/// (Hopper wgmma: block 32, c = 0; Ada mma.sync: block 16 with the caller's C).
FP8EMU_HD std::uint32_t mma_dot(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                int block, std::uint32_t c, MmaAccumulator acc, int fraction_bits = kMmaFractionBits) {
  return mma_dot(a, fa, b, fb, K, c, block_fma_datapath(block, acc, fraction_bits));
}

}  // namespace fp8emu::core
