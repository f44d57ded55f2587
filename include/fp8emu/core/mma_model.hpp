/// \file mma_model.hpp
/// \brief Bit-exact model of the FP8 tensor-core dot product on Hopper (`wgmma` k32) and Ada
/// (`mma.sync.m16n8k32`), shared by the CPU emulator and CUDA code (integer-only, host and device).
///
/// The block-FMA model of Khattak & Mikaitis ("Accurate Models of NVIDIA Tensor Cores", arXiv
/// 2512.07004; MATLAB-tensor-core `Generic_BFMA_TC.m`), as specified in
/// docs/tensor-core-model.md §Block FMA. One block of n products and an addend c:
///   1. decode every FP8 operand exactly: |x| = M * 2^(e - f), e clamped at emin (subnormals);
///   2. each non-zero product is exact: P = Ma * Mb with unnormalised exponent E_i = ea + eb;
///      a non-zero c joins as a term with its own significand and exponent;
///   3. E = max E_i; every term is aligned to 13 fraction bits below 2^E by truncating its magnitude
///      (round toward zero, no sticky bit), and the aligned integers are summed exactly;
///   4. fp32 accumulator: the sum is cut to 14 significant bits (round toward zero) and is then
///      exactly an fp32; fp16 accumulator (Ada `.f16`): the sum is rounded to fp16 (RNE).
/// Blocks chain along K: the result of one block is the addend c of the next.
/// Hopper wgmma: n = 32 and the first block starts from c = 0 (scale-d = 0). Ada mma.sync: n = 16,
/// C from the caller joins the first block's alignment.
///
/// Verified bit for bit on recorded GPU outputs (tests/data/tensor-core-mma; H100 E4M3 and E5M2 fp32,
/// Ada E4M3 fp32 and fp16). Choices the recorded data does not settle, documented here and tested:
///   - an exact-zero sum (and an empty block with c = 0) gives +0;
///   - NaN and Inf inputs follow the model's rule, applied before the datapath: any NaN operand or
///     c, Inf * 0, or +Inf and -Inf together give NaN (0x7FFFFFFF); otherwise the Inf's sign wins;
///   - a result >= 2^128 gives +-Inf; below 2^-126 it is truncated to the fp32 subnormal quantum;
///   - fp16 accumulator overflow gives +-Inf;
///   - mixed E4M3 x E5M2 decodes each operand with its own format through the same datapath.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
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

/// One fused block: n products a[i]*b[i] (FP8 codes) plus the addend c. For kFp32, c and the
/// result are fp32 bits; for kFp16, c and the result are fp16 bits. See the file comment.
/// `fraction_bits` is F (13 for every FP8 tensor core measured); the fp32 accumulator keeps F + 1
/// significant bits.
FP8EMU_HD constexpr std::uint32_t mma_block(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b,
                                            FormatSpec fb, int n, std::uint32_t c, MmaAccumulator acc,
                                            int fraction_bits = kMmaFractionBits) {
  const bool f16 = acc == MmaAccumulator::kFp16;
  // Special values first (model rule).
  bool nan = false, pos_inf = false, neg_inf = false;
  for (int i = 0; i < n; ++i) {
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
  MmaTerm cterm = f16 ? decode_f16_term(c) : decode_f32_term(c);
  const bool have_c = cterm.sig != 0;
  bool any = have_c;
  int E = have_c ? cterm.exp : 0;
  for (int i = 0; i < n; ++i) {
    const MmaTerm ta = decode_fp8_term(a[i], fa), tb = decode_fp8_term(b[i], fb);
    if (ta.sig == 0 || tb.sig == 0) continue;
    const int e = ta.exp + tb.exp;
    if (!any || e > E) E = e;
    any = true;
  }
  if (!any) return 0u;
  // Aligned, truncated, exact integer sum.
  std::int64_t S = 0;
  auto add = [&](std::uint32_t sign, std::uint64_t sig, int exp, int frac) {
    const int sh = fraction_bits - frac - (E - exp);
    const std::uint64_t t = sh >= 0 ? (sig << sh) : (-sh >= 64 ? 0u : (sig >> -sh));
    S += sign ? -std::int64_t(t) : std::int64_t(t);
  };
  if (have_c) add(cterm.sign, cterm.sig, cterm.exp, cterm.frac);
  for (int i = 0; i < n; ++i) {
    const MmaTerm ta = decode_fp8_term(a[i], fa), tb = decode_fp8_term(b[i], fb);
    if (ta.sig == 0 || tb.sig == 0) continue;
    add(ta.sign ^ tb.sign, std::uint64_t(ta.sig) * tb.sig, ta.exp + tb.exp, ta.frac + tb.frac);
  }
  if (S == 0) return 0u;  // exact zero: +0 (documented choice)
  const std::uint32_t sign = S < 0 ? 1u : 0u;
  std::uint64_t T = std::uint64_t(S < 0 ? -S : S);
  const int k = E - fraction_bits;
  if (f16) return scaled_int_to_f16_rne(sign, T, k);
  const int nbits = bit_length(T), keep = fraction_bits + 1;
  if (nbits > keep) T = (T >> (nbits - keep)) << (nbits - keep);
  return scaled_int_to_f32_rz(sign, T, k);
}

/// A dot product of length K on the tensor cores: blocks of `block` products chained along K, the
/// first block's addend being c (fp32 bits, or fp16 bits for kFp16). Returns fp32 bits (the fp16
/// result widened exactly for kFp16).
FP8EMU_HD constexpr std::uint32_t mma_dot(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb,
                                          int K, int block, std::uint32_t c, MmaAccumulator acc,
                                          int fraction_bits = kMmaFractionBits) {
  std::uint32_t d = c;
  for (int k0 = 0; k0 < K; k0 += block)
    d = mma_block(a + k0, fa, b + k0, fb, K - k0 < block ? K - k0 : block, d, acc, fraction_bits);
  return acc == MmaAccumulator::kFp16 ? half_to_f32_bits(std::uint16_t(d)) : d;
}

}  // namespace fp8emu::core
