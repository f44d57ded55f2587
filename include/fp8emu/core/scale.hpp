/// \file scale.hpp
/// \brief Scale arithmetic shared by the CPU emulator and CUDA kernels (host and device).
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"

namespace fp8emu::core {

/// TE `compute_scale_from_amax` (transformer_engine/common/recipe/recipe_common.cuh), used by
/// current scaling (value_for_inf = FLT_MAX) and by 128-block scaling (value_for_inf = max of the
/// input type):
///   if amax < epsilon: amax = epsilon            (a NaN amax fails the compare)
///   if amax is inf, 0 or NaN: return 1           (1, not the previous scale)
///   s = RN(fp8_max / amax)                       (IEEE division, as TE's __fdiv_rn)
///   if s is inf: s = value_for_inf
///   if pow2: s = bits(s) & 0xFF800000            (keep sign and exponent: round down to 2^k)
FP8EMU_HD float compute_scale_from_amax(float amax, float fp8_max, bool pow2, float epsilon,
                                        float value_for_inf) {
  if (amax < epsilon) amax = epsilon;
  const std::uint32_t abits = f32_to_bits(amax) & 0x7FFFFFFFu;
  if (abits >= 0x7F800000u || abits == 0) return 1.0f;  // inf, NaN, +-0
  float s = fp8_max / amax;
  if ((f32_to_bits(s) & 0x7FFFFFFFu) == 0x7F800000u) s = value_for_inf;
  if (pow2) s = bits_to_f32(f32_to_bits(s) & 0xFF800000u);
  return s;
}

}  // namespace fp8emu::core
