/// \file e8m0.hpp
/// \brief E8M0 block scales (OCP MX v1.0 "E8M0", ml_dtypes float8_e8m0fnu): 8 exponent bits, bias
/// 127, value 2^(code - 127), no sign and no zero, code 0xFF = NaN. Integer-only, host and device.
///
/// The amax -> scale rule mirrors TE `float_to_e8m0` (transformer_engine/common/util/ptx.cuh,
/// software branch; on sm_100 the same as `cvt.rp.satfinite.ue8m0x2.f32`): round toward +inf,
/// saturating at 0xFE; see ../shared/reference/transformer-engine-fp8.md §4.1.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"

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

/// fp32 bits of 2^(127 - code), the multiplier TE applies before the FP8 cast (`exp2f_rcp`):
/// code 0 -> 2^127, code 254 -> 2^-127 (subnormal 0x00400000), 0xFF -> NaN.
FP8EMU_HD constexpr std::uint32_t e8m0_reciprocal_f32_bits(std::uint8_t code) {
  if (code == kE8M0NaN) return 0x7FFFFFFFu;
  if (code == kE8M0MaxCode) return 0x00400000u;
  return std::uint32_t(2 * kE8M0Bias - code) << 23;
}

}  // namespace fp8emu::core
