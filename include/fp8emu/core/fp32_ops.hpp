/// \file fp32_ops.hpp
/// \brief fp32 arithmetic with one IEEE rounding per operation, and the exact bit-level helpers the
/// element layer builds on. Host and device (FP8EMU_HD); the one place where the CPU and the GPU
/// spellings of "one correctly rounded fp32 operation" meet.
///
/// On the device add_rn / mul_rn / div_rn are `__fadd_rn` / `__fmul_rn` / `__fdiv_rn`: round to
/// nearest even, never contracted into an FMA, subnormals kept (the CUDA code is also built with
/// `--fmad=false -ftz=false -prec-div=true`). On the host they are plain IEEE operations: fp8emu
/// builds with `-ffp-contract=off` and SSE arithmetic, which rounds each operation once.
///
/// NaN payloads are the one thing the two sides cannot share: when an fp32 operation creates or
/// propagates a NaN, x86 SSE returns the first NaN operand or the default NaN 0xFFC00000, NVIDIA GPUs
/// always 0x7FFFFFFF. FP8 codes and counts never depend on it (every fp32 -> FP8 conversion maps all
/// NaNs to one code), and fp32 outputs that are NaN are NaN on both sides.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>  // std::sqrt only: IEEE 754 requires sqrt correctly rounded (sqrtss on x86-64)
#endif

namespace fp8emu::core {

/// RN(a + b).
FP8EMU_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// RN(a * b).
FP8EMU_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// RN(a / b).
FP8EMU_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// RN(sqrt(x)): IEEE 754 requires square root correctly rounded, so the host's std::sqrt (one
/// sqrtss on x86-64) and the device's __fsqrt_rn give the same bits for every input except the NaN
/// payload of sqrt(x < 0) (see above).
FP8EMU_HD float sqrt_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// Whether x is a NaN (quiet or signaling), from its bits.
FP8EMU_HD bool f32_is_nan(float x) { return (f32_to_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
/// Whether x is finite, from its bits.
FP8EMU_HD bool f32_is_finite(float x) { return (f32_to_bits(x) & 0x7F800000u) != 0x7F800000u; }
/// Whether x is +Inf or -Inf, from its bits.
FP8EMU_HD bool f32_is_inf(float x) { return (f32_to_bits(x) & 0x7FFFFFFFu) == 0x7F800000u; }
/// Whether x is a signaling NaN (a NaN with the quiet bit 0x00400000 clear), from its bits.
FP8EMU_HD bool f32_is_snan(float x) {
  const std::uint32_t u = f32_to_bits(x) & 0x7FFFFFFFu;
  return u > 0x7F800000u && (u & 0x00400000u) == 0u;
}
/// The largest finite fp32 value, FLT_MAX (0x7F7FFFFF), without <cfloat>.
FP8EMU_HD float f32_max_finite() { return bits_to_f32(0x7F7FFFFFu); }

/// fmaxf(a, b) exactly as glibc's x86-64 fmaxf returns it (std::fmax on the hosts fp8emu was written
/// on), with comparisons and bit tests only, so host and device agree:
///  - neither is a NaN: a > b ? a : b; so for equal operands, +0 and -0 included, the second (b);
///  - one NaN, both quiet: the other operand (a NaN is ignored), two quiet NaNs: a;
///  - a signaling NaN among them: the first NaN operand (a if a is a NaN, else b), made quiet.
/// IEEE 754's maxNum leaves the sign of max(+0, -0) open and CUDA's fmaxf and other libms may choose
/// differently; this function fixes glibc's choice on both sides.
FP8EMU_HD float fmax_f32(float a, float b) {
  const bool na = f32_is_nan(a), nb = f32_is_nan(b);
  if (na || nb) {
    if (f32_is_snan(a) || f32_is_snan(b)) return bits_to_f32(f32_to_bits(na ? a : b) | 0x00400000u);
    return nb ? a : b;
  }
  return a > b ? a : b;
}

/// |x|, by clearing the sign bit (exact; a NaN keeps its payload).
FP8EMU_HD float f32_abs(float x) { return bits_to_f32(f32_to_bits(x) & 0x7FFFFFFFu); }

/// The bits of |x| as an amax contribution: the max over these bits is fmaxf's max over |x| (fp32
/// order equals integer order for non-negative values, +Inf included), and a NaN gives 0, so it is
/// ignored as TE's fmaxf(fabsf(x), m) ignores it, signaling NaNs included. An exact reduction whose
/// result does not depend on the order or grouping of the elements.
FP8EMU_HD std::uint32_t amax_bits(float x) {
  const std::uint32_t u = f32_to_bits(x) & 0x7FFFFFFFu;
  return u > 0x7F800000u ? 0u : u;
}

/// max of two unsigned values (the amax reduction step on amax_bits).
FP8EMU_HD constexpr std::uint32_t max_u32(std::uint32_t a, std::uint32_t b) { return a > b ? a : b; }
/// min of two ints.
FP8EMU_HD constexpr int min_int(int a, int b) { return a < b ? a : b; }

}  // namespace fp8emu::core
