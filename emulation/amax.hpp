// Private: the amax step of every cast, max(m, |x|) with NaN ignored, as TE's fmaxf(fabsf(x), m)
// on the GPU. std::fmax is not used: glibc's fmax follows IEEE 754-2008 maxNum, which returns NaN
// for a signaling NaN operand (0x7F800001 ... 0x7FBFFFFF and their negatives), and a running max
// that became NaN then restarts from the next element, losing every value before it.
#pragma once

#include <cmath>

namespace fp8emu::emu::detail {

/// max(m, |x|) for a non-NaN m >= 0, ignoring any NaN x (quiet or signaling); exact.
inline float amax_step(float m, float x) {
  const float a = std::fabs(x);
  return a > m ? a : m;  // false for NaN
}

}  // namespace fp8emu::emu::detail
