/// \file e8m0.hpp
/// \brief E8M0 block scales (OCP MX v1.0 "E8M0", ml_dtypes float8_e8m0fnu): 8 exponent bits, bias
/// 127, value 2^(code - 127), no sign and no zero, code 0xFF = NaN. Integer-only, host and device.
///
/// The amax -> scale rule mirrors TE `float_to_e8m0` (transformer_engine/common/util/ptx.cuh,
/// software branch; on sm_100 the same as `cvt.rp.satfinite.ue8m0x2.f32`): round toward +inf,
/// saturating at 0xFE; see docs/transformer-engine.md §MXFP8.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"

namespace fp8emu {

/// How the E8M0 block scale is chosen from the block amax.
enum class E8M0Rule : std::uint8_t {
  /// TE / CUDA (quantize_mxfp8.cuh, ptx float_to_e8m0): e = round-up of RN(amax * fl32(1/fp8_max)),
  /// so amax * 2^-scale never exceeds fp8_max: no block value saturates.
  kTransformerEngine,
  /// OCP MX v1.0 §6.3: X = 2^(floor(log2 amax) - emax_elem); values above fp8_max * X saturate.
  kOcp,
  /// torchao's ScaleCalculationMode.EVEN (prototype/mx_formats): amax first rounded to the element
  /// format's mantissa width (half an element ulp added to its fp32 bits, the mantissa then
  /// dropped), then the OCP floor: the scale steps up halfway between the element grid's top
  /// values, so blocks near a power-of-two boundary keep their scale; values above fp8_max * X
  /// saturate.
  kEven,
};

}  // namespace fp8emu

namespace fp8emu::core {

inline constexpr int kE8M0Bias = 127;           ///< OCP MX v1.0 Table: E8M0 exponent bias.
inline constexpr std::uint8_t kE8M0NaN = 0xFF;  ///< The only NaN code.
inline constexpr std::uint8_t kE8M0MaxCode = 0xFE;  ///< 2^127.

/// E8M0 code of a non-negative fp32 value t (bits), rounding toward +inf:
///   NaN -> 0xFF; +Inf -> 0xFE; 0 -> 0; fp32 subnormal: 1 if t > 2^-127 else 0;
///   otherwise biased exponent + (mantissa != 0), except that 0xFE stays 0xFE (satfinite).
/// The sign bit is ignored.
FP8EMU_HD constexpr std::uint8_t e8m0_round_up_from_f32_bits(std::uint32_t bits) {
  const std::uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return kE8M0NaN;
  if (abs == 0x7F800000u) return kE8M0MaxCode;
  if (abs == 0) return 0;
  const std::uint32_t exp = abs >> 23, man = abs & 0x007FFFFFu;
  if (exp == 0) return man > 0x00400000u ? 1 : 0;  // 0x00400000 = 2^-127, the value of code 0
  if (exp == kE8M0MaxCode) return kE8M0MaxCode;
  return std::uint8_t(exp + (man != 0 ? 1u : 0u));
}

/// fp32 bits of 2^(code - 127): code 0 -> 2^-127 (fp32 subnormal 0x00400000); 0xFF -> NaN.
FP8EMU_HD constexpr std::uint32_t e8m0_to_f32_bits(std::uint8_t code) {
  if (code == kE8M0NaN) return 0x7FFFFFFFu;
  if (code == 0) return 0x00400000u;
  return std::uint32_t(code) << 23;
}

/// E8M0 code of a power-of-two fp32 block scale_inv (bits): its fp32 exponent field, as TE converts
/// Float8BlockScaling's scales for Blackwell's MXFP8 GEMM (common/swizzle/swizzle_block_scaling.cu:
/// `(sf >> 23) & 0xFF`). For every power of two from 2^-126 to 2^127, and for 2^-127 (the fp32
/// subnormal 0x00400000, exponent field 0 = code 0), e8m0_to_f32_bits of the code gives the value
/// back; other values lose their mantissa, which is why TE requires power-of-two scales there.
FP8EMU_HD constexpr std::uint8_t e8m0_from_pow2_scale_inv_bits(std::uint32_t bits) {
  return std::uint8_t((bits >> 23) & 0xFFu);
}

/// One element of that conversion, back to the fp32 scale the MXFP8 GEMM multiplies by
/// (2^(code - 127)): out[r][j] = this of in[r][j / repeat] (backend::Device::block_scales_to_mxfp8).
FP8EMU_HD constexpr std::uint32_t mxfp8_scale_from_block_scale_inv_bits(std::uint32_t bits) {
  return e8m0_to_f32_bits(e8m0_from_pow2_scale_inv_bits(bits));
}

/// fp32 bits of 2^(127 - code), the multiplier TE applies before the FP8 cast (`exp2f_rcp`):
/// code 0 -> 2^127, code 254 -> 2^-127 (subnormal 0x00400000), 0xFF -> NaN.
FP8EMU_HD constexpr std::uint32_t e8m0_reciprocal_f32_bits(std::uint8_t code) {
  if (code == kE8M0NaN) return 0x7FFFFFFFu;
  if (code == kE8M0MaxCode) return 0x00400000u;
  return std::uint32_t(2 * kE8M0Bias - code) << 23;
}

// ---- CUDA's E8M0 conversions (cuda_fp8.h, CUDA 13 host code; all inputs checked by
// tests/core/test_nv_cuda_oracle.cpp). CUDA converts through bfloat16: the E8M0 code is the bf16
// exponent field, rounded per mode.

/// `__nv_cvt_bfloat16raw_to_e8m0(x, sat, rounding)`: the exponent field of |x|; `round_up`
/// (cudaRoundPosInf) adds one when the bf16 mantissa is non-zero, |x| > 2^-127 and x is finite;
/// without it (cudaRoundZero) the field is kept. Values at or below 2^-127 give code 0 (2^-127),
/// zero included. `satfinite` turns a non-NaN result of 0xFF (Inf, or rounding past 2^127) into
/// 0xFE; NaN gives 0xFF. The sign is ignored.
FP8EMU_HD constexpr std::uint8_t e8m0_from_bf16_bits(std::uint16_t x, bool satfinite, bool round_up) {
  const std::uint32_t mag = x & 0x7FFFu;
  std::uint32_t code = mag >> 7;
  if (round_up && (x & 0x7Fu) != 0 && mag > 0x0040u && mag < 0x7F80u) ++code;
  if (satfinite && mag <= 0x7F80u && code == 0xFFu) code = kE8M0MaxCode;
  return std::uint8_t(code);
}

/// `__nv_cvt_float_to_e8m0(x, sat, rounding)`: x goes to bfloat16 first, truncated
/// (cudaRoundZero; NaN -> 0x7FFF) or, for cudaRoundPosInf, |x| rounded up (a non-zero low half
/// increments, possibly to Inf; NaN -> 0x7FFF), then e8m0_from_bf16_bits.
FP8EMU_HD constexpr std::uint8_t e8m0_from_f32_bits(std::uint32_t u, bool satfinite, bool round_up) {
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  std::uint16_t b = 0;
  if (abs > 0x7F800000u) {
    b = 0x7FFFu;
  } else if (!round_up) {
    b = std::uint16_t(u >> 16);
  } else {
    b = std::uint16_t((abs >> 16) + ((abs & 0xFFFFu) != 0 ? 1u : 0u));
  }
  return e8m0_from_bf16_bits(b, satfinite, round_up);
}

/// fp64 -> fp32 rounding to odd (truncate toward zero, then set the last bit if inexact; beyond the
/// fp32 range: +-FLT_MAX|1 = +-FLT_MAX; NaN as the C++ cast, quiet with the top payload bits): the
/// "float with sticky bit" that CUDA's `__nv_cvt_double_to_e8m0` passes to the float entry, so
/// that one rounding to E8M0 stays correct.
FP8EMU_HD constexpr std::uint32_t f64_bits_to_f32_bits_round_to_odd(std::uint64_t d) {
  const std::uint32_t sign = std::uint32_t(d >> 63) << 31;
  const std::uint64_t abs = d & 0x7FFFFFFFFFFFFFFFull;
  if (abs > 0x7FF0000000000000ull) return sign | 0x7FC00000u | std::uint32_t((abs >> 29) & 0x3FFFFFu);
  if (abs == 0x7FF0000000000000ull) return sign | 0x7F800000u;
  if (abs == 0) return sign;
  const int biased = int(abs >> 52);
  const std::uint64_t sig = (abs & 0x000FFFFFFFFFFFFFull) | (biased ? 0x0010000000000000ull : 0u);
  const int e = biased ? biased - 1023 : -1022;
  if (e > 127) return sign | 0x7F7FFFFFu;  // above FLT_MAX: truncates to FLT_MAX, odd already
  // fp32 ulp exponent: e - 23 for normals, -149 below 2^-126.
  const int ue = e >= -126 ? e : -126;
  const int s = 29 + (ue - e);  // bits of sig below the fp32 ulp
  const std::uint64_t q = s < 64 ? sig >> s : 0u;
  const bool inexact = s < 64 ? (sig & ((std::uint64_t(1) << s) - 1u)) != 0 : true;
  // Normals: q holds the implicit bit, so adding (biased exponent - 1) << 23 gives the fields.
  const std::uint64_t mag = q + (std::uint64_t(ue + 126) << 23);
  return sign | std::uint32_t(mag | (inexact ? 1u : 0u));
}

/// `__nv_cvt_double_to_e8m0(x, sat, rounding)`: round to odd to fp32, then e8m0_from_f32_bits.
FP8EMU_HD constexpr std::uint8_t e8m0_from_f64_bits(std::uint64_t d, bool satfinite, bool round_up) {
  return e8m0_from_f32_bits(f64_bits_to_f32_bits_round_to_odd(d), satfinite, round_up);
}

/// `__nv_cvt_e8m0_to_bf16raw(x)`: bf16 bits of 2^(x - 127); code 0 -> 0x0040 (2^-127, a bf16
/// subnormal), 0xFF -> 0x7FFF (NaN).
FP8EMU_HD constexpr std::uint16_t e8m0_to_bf16_bits(std::uint8_t x) {
  if (x == kE8M0NaN) return 0x7FFFu;
  if (x == 0) return 0x0040u;
  return std::uint16_t(std::uint32_t(x) << 7);
}

}  // namespace fp8emu::core
