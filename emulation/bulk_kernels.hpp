// Private: the per-element kernels of the bulk FP8 cast (emulation/bulk_convert.cpp), kept in a
// header so that the tests can instantiate them for every instruction set the library is cloned
// for and compare each build with the scalar core (tests/emulation/test_bulk_convert.cpp).
//
// Everything here is always_inline and branch-free, written for GCC's auto-vectoriser: selects are
// mask arithmetic and the loop body has no calls. What the vectoriser made of it (objdump -d of
// bulk_convert.cpp.o, g++ 12.2 -O3, the fp32 -> E4M3 span kernel):
//   AVX-512 clone: 64 elements per iteration on zmm: vmulps; vpandd/vpsrld/vpaddd (normal path);
//     vaddps + vpaddd (subnormal path); vpcmpnleud into k registers with zero-masked vpxord (the
//     selects); vpminud (SATFINITE clamp); vpermt2w + vpmovwb (pack to bytes); vpternlogd (sign
//     merge); vpmaxud (amax).
//   AVX2 clone: the same on ymm, with vpcmpgtd/vpcmpeqd + vpblendvb selects, vpminud/vpmaxud and
//     vpackusdw + vpackuswb + vpermq packing.
//   Baseline clone: SSE2 on xmm (mulps, addps, psrld, paddd; pcmpgtd + pand/pandn/por in place of
//     the unsigned min/max and blends that SSE2 lacks; punpck*wd + packuswb packing).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu::detail {

using u32 = std::uint32_t;

constexpr u32 kAbsMask = 0x7FFFFFFFu;
constexpr u32 kInfBits = 0x7F800000u;

// Bit casts that the vectoriser sees through (memcpy of one lane).
__attribute__((always_inline)) inline u32 bits_of(float f) {
  u32 u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
__attribute__((always_inline)) inline float float_of(u32 u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// c ? a : b as mask arithmetic. Written with ?: GCC turns the selects of the loops below into
// branches before if-conversion, and the loops stay scalar ("control flow in loop").
__attribute__((always_inline)) inline u32 select_bits(bool c, u32 a, u32 b) { return b ^ ((a ^ b) & (0u - u32(c))); }

// Exact widening of one input element to fp32 bits.
struct WidenF32 {
  using T = float;
  static u32 bits(float x) { return bits_of(x); }
};
struct WidenBF16 {
  using T = std::uint16_t;
  static u32 bits(std::uint16_t b) { return core::bf16_to_f32_bits(b); }
};
// core::half_to_f32_bits without its normalisation loop: a subnormal half is man * 2^-24, which
// int -> float conversion and a power-of-two multiply give exactly (man < 2^10, product normal), so
// the result does not depend on the rounding mode. Equal to the core for all 2^16 inputs (tested).
struct WidenF16 {
  using T = std::uint16_t;
  static u32 bits(std::uint16_t h) {
    const u32 sign = u32(h & 0x8000u) << 16;
    const u32 exp = (u32(h) >> 10) & 0x1Fu;
    const u32 man = u32(h) & 0x3FFu;
    const u32 normal = sign | ((exp + 112u) << 23) | (man << 13);                 // rebias 15 -> 127
    const u32 subnormal = sign | bits_of(float(std::int32_t(man)) * 0x1p-24f);   // +-0 when man == 0
    const u32 special = select_bits(man != 0, kAbsMask, sign | kInfBits);              // NaN sign dropped
    return select_bits(exp == 0x1Fu, special, select_bits(exp == 0, subnormal, normal));
  }
};

// Per-call counters of QuantizeStats (32-bit inside a span; spans are shorter than 2^32).
struct Counts {
  std::uint64_t saturated = 0, underflow = 0, nan = 0;
};

// core::encode_f32_bits(u, F, kSatFinite) without branches: both rounding paths are computed and
// one is selected per lane.
//  1. Normal FP8 range (|v| >= 2^emin): RNE of the magnitude bits by kShift = 23 - m bits,
//     (abs + half - 1 + lsb) >> kShift, with the exponent re-bias folded into the added constant; a
//     carry moves the exponent. Inf and finite overflow land above the max code.
//  2. Subnormal FP8 range (|v| < 2^emin): |v| + M with M = 2^(emin - m + 23), whose ulp is the
//     FP8 subnormal step 2^(emin - m): the fp32 addition rounds |v| to a multiple of that step with
//     RNE (ties to even; a carry reaches the min normal code), and bits(|v| + M) - bits(M) is the
//     code. The sum stays in [M, 2M), so this is exact integer RNE, given the default rounding mode
//     that the fp32 product x * scale already assumes. (An all-integer variant, the 24-bit
//     significand shifted by a per-lane amount with vpsrlvd, measured 1.4-1.5x slower in the
//     AVX-512 and AVX2 clones and 4.8x slower in the baseline one, whose SSE2 has no per-lane
//     shifts.)
//  3. Clamp to the max finite code (SATFINITE), add the sign; NaN -> the positive NaN code.
// FNUZ formats (core::cast_code: ROCm's cast) add no sign to a zero magnitude (no -0) and send
// +-Inf, like NaN, to the NaN code 0x80.
template <const FormatSpec& F>
__attribute__((always_inline)) inline u32 encode_satfinite(u32 u) {
  constexpr int kShift = 23 - F.mantissa_bits;
  constexpr u32 kMinNormalBits = u32(F.emin() + 127) << 23;
  constexpr u32 kRoundNormal = ((1u << (kShift - 1)) - 1u) - ((u32(127 - F.bias) << F.mantissa_bits) << kShift);
  constexpr int kMagicExp = F.emin() - F.mantissa_bits + 23;
  constexpr float kMagic = float(pow2(kMagicExp));
  constexpr u32 kMagicBits = u32(kMagicExp + 127) << 23;
  const u32 abs = u & kAbsMask;
  const u32 sign = (u >> 24) & u32(F.sign_mask());
  const u32 normal = (abs + kRoundNormal + ((abs >> kShift) & 1u)) >> kShift;
  const u32 subnormal = bits_of(float_of(abs) + kMagic) - kMagicBits;
  const u32 mag = std::min<u32>(select_bits(abs >= kMinNormalBits, normal, subnormal), F.max_finite_code());
  if constexpr (F.fnuz) return select_bits(abs >= kInfBits, u32(F.nan_code()), mag | select_bits(mag != 0, sign, 0u));
  return select_bits(abs > kInfBits, u32(F.nan_code()), mag | sign);
}

// The multiplier of element i: one per-tensor scale, or one per element (the block-scaled casts
// expand each block's multiplier over its elements).
struct ScaleOne {
  float s;
  __attribute__((always_inline)) float operator[](std::size_t) const { return s; }
};
struct ScaleEach {
  const float* __restrict m;
  __attribute__((always_inline)) float operator[](std::size_t i) const { return m[i]; }
};

// The span kernel: q[i] = encode(bits(widen(x[i]) * scale[i])), amax and optional counts.
// n < 2^32. One fp32 multiply per element (-ffp-contract=off; a lone multiply cannot contract).
template <const FormatSpec& F, class W, bool kStats, class S = ScaleOne>
__attribute__((always_inline)) inline void cast_span_with(const typename W::T* __restrict x, std::size_t n, S scale,
                                                          std::uint8_t* __restrict q, u32* amax_bits, Counts* counts) {
  // |x*scale| bit patterns that F.overflows(): from the threshold (max finite + half an ulp;
  // included when it ties to the odd max's even neighbour) up to Inf.
  constexpr u32 kThreshold = core::decode_to_f32_bits(std::uint8_t(F.max_finite_code()), F) +
                             (1u << (22 - F.mantissa_bits));
  constexpr u32 kSatLo = kThreshold + (F.overflow_at_threshold() ? 0u : 1u);
  constexpr u32 kSatHi = F.fnuz ? kInfBits - 1u : kInfBits;  // FNUZ: an infinity becomes NaN, not clipped
  u32 amax = *amax_bits;
  u32 sat = 0, under = 0, nans = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const u32 xb = W::bits(x[i]);
    const u32 sb = bits_of(float_of(xb) * scale[i]);
    const u32 code = encode_satfinite<F>(sb);
    q[i] = std::uint8_t(code);
    const u32 xabs = xb & kAbsMask;
    const bool x_nan = xabs > kInfBits;
    amax = std::max(amax, select_bits(x_nan, 0u, xabs));  // non-negative fp32 order = integer order
    if constexpr (kStats) {
      nans += x_nan ? 1u : 0u;
      sat += ((sb & kAbsMask) - kSatLo <= kSatHi - kSatLo) ? 1u : 0u;
      under += (xabs - 1u < kInfBits - 1u && F.is_zero_code(code)) ? 1u : 0u;
    }
  }
  *amax_bits = amax;
  if constexpr (kStats) {
    counts->saturated += sat;
    counts->underflow += under;
    counts->nan += nans;
  }
}

template <const FormatSpec& F, class W, bool kStats>
__attribute__((always_inline)) inline void cast_span(const typename W::T* __restrict x, std::size_t n, float scale,
                                                     std::uint8_t* __restrict q, u32* amax_bits, Counts* counts) {
  cast_span_with<F, W, kStats>(x, n, ScaleOne{scale}, q, amax_bits, counts);
}

// out[b] = the max of the amax bits (|x| bits, NaN as 0) of x[b * block, min(n, (b + 1) * block)),
// for every block b of a row.
__attribute__((always_inline)) inline void block_amax_bits(const float* __restrict x, std::size_t n,
                                                           std::size_t block, u32* __restrict out) {
  for (std::size_t b = 0, k0 = 0; k0 < n; ++b, k0 += block) {
    const std::size_t k1 = std::min(n, k0 + block);
    u32 m = 0;
    for (std::size_t k = k0; k < k1; ++k) {
      const u32 a = bits_of(x[k]) & kAbsMask;
      m = std::max(m, select_bits(a > kInfBits, 0u, a));
    }
    out[b] = m;
  }
}

// out[c] = max(out[c], amax bits of x[r * ld + c]) over rows r < rows, for columns c < cols.
__attribute__((always_inline)) inline void column_amax_bits(const float* __restrict x, std::size_t rows,
                                                            std::size_t cols, std::size_t ld, u32* __restrict out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const u32 a = bits_of(x[r * ld + c]) & kAbsMask;
      out[c] = std::max(out[c], select_bits(a > kInfBits, 0u, a));
    }
}

// B x B byte blocks: dst[j * ld_dst + r] = src[r * ld_src + j] for r, j < B.
//  - transpose_block_u64 (B = 8, portable): the rows as little-endian 64-bit words (byte j = bits
//    8j..8j+7), three rounds of masked swaps exchanging the off-diagonal halves of the 4 x 4, 2 x 2
//    and 1 x 1 sub-blocks.
//  - transpose_block_sse2 (B = 16, x86-64): four rounds of byte interleaves of rows i and i + 8
//    (unpacklo/unpackhi_epi8 into rows 2i, 2i + 1); four perfect shuffles of the 16 row indices are
//    the identity and move every byte (r, c) to (c, r).
inline void transpose_block_u64(const std::uint8_t* src, std::size_t ld_src, std::uint8_t* dst, std::size_t ld_dst) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "transpose_block_u64 assumes little-endian words");
  std::uint64_t m[8];
  for (std::size_t i = 0; i < 8; ++i) std::memcpy(&m[i], src + i * ld_src, 8);
  for (std::size_t i : {0, 1, 2, 3}) {
    const std::uint64_t t = ((m[i] >> 32) ^ m[i + 4]) & 0x00000000'FFFFFFFFu;
    m[i] ^= t << 32;
    m[i + 4] ^= t;
  }
  for (std::size_t i : {0, 1, 4, 5}) {
    const std::uint64_t t = ((m[i] >> 16) ^ m[i + 2]) & 0x0000FFFF'0000FFFFu;
    m[i] ^= t << 16;
    m[i + 2] ^= t;
  }
  for (std::size_t i : {0, 2, 4, 6}) {
    const std::uint64_t t = ((m[i] >> 8) ^ m[i + 1]) & 0x00FF00FF'00FF00FFu;
    m[i] ^= t << 8;
    m[i + 1] ^= t;
  }
  for (std::size_t i = 0; i < 8; ++i) std::memcpy(dst + i * ld_dst, &m[i], 8);
}

#if defined(__SSE2__)
inline void transpose_block_sse2(const std::uint8_t* src, std::size_t ld_src, std::uint8_t* dst, std::size_t ld_dst) {
  __m128i a[16], b[16];
  for (std::size_t i = 0; i < 16; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ld_src));
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < 8; ++i) {
      b[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
      b[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
    }
    for (std::size_t i = 0; i < 16; ++i) a[i] = b[i];
  }
  for (std::size_t i = 0; i < 16; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i * ld_dst), a[i]);
}
inline constexpr std::size_t kTransposeBlock = 16;
inline void transpose_block(const std::uint8_t* src, std::size_t ld_src, std::uint8_t* dst, std::size_t ld_dst) {
  transpose_block_sse2(src, ld_src, dst, ld_dst);
}
#else
inline constexpr std::size_t kTransposeBlock = 8;
inline void transpose_block(const std::uint8_t* src, std::size_t ld_src, std::uint8_t* dst, std::size_t ld_dst) {
  transpose_block_u64(src, ld_src, dst, ld_dst);
}
#endif

}  // namespace fp8emu::emu::detail
