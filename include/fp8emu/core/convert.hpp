/// \file convert.hpp
/// \brief fp32 <-> FP8 conversion: the one definition of the arithmetic, shared by the CPU
/// emulator and the CUDA kernels. Integer-only, total (no input can fail), no <cmath>, no
/// exceptions; builds with g++ alone and under nvcc (FP8EMU_HD).
///
/// Mirrors CUDA 13 `cuda_fp8.hpp` host code: `__nv_cvt_float_to_fp8(x, __NV_SATFINITE|__NV_NOSAT,
/// __NV_E4M3|__NV_E5M2)` and `__nv_cvt_fp8_to_halfraw` followed by `__half2float`. Equality is
/// checked for all 2^32 fp32 inputs, both formats and both modes (tests/core/test_nv_cuda_oracle.cpp,
/// the `nv fp8` sweep; the decoder on all 256 codes in tests/core/test_convert_cuda_oracle.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8emu/config.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu {

/// Overflow policy of fp32 -> FP8, named as CUDA's `__nv_saturation_t`.
enum class Saturation : std::uint8_t {
  kSatFinite,  ///< `__NV_SATFINITE`: finite overflow and +-Inf go to +-max finite.
  kNoSat,      ///< `__NV_NOSAT`: overflow and +-Inf go to +-Inf (E5M2) or +-NaN code (E4M3).
};

namespace core {

/// Bits of an fp32 value.
FP8EMU_HD std::uint32_t f32_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

/// fp32 value of a bit pattern.
FP8EMU_HD float bits_to_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// fp32 (given as bits) -> FP8 code, round to nearest even, one rounding: the general encoder
/// (encode.hpp, encode_bits) under CUDA's float policy, as `__nv_cvt_float_to_fp8(x, sat, fmt)`:
///  1. NaN -> the positive canonical NaN code (0x7F): CUDA's float entry drops the NaN's sign.
///  2. +-Inf -> +-max finite (kSatFinite) or the overflow code (kNoSat: Inf for E5M2, NaN for E4M3).
///  3. Finite: keep `mantissa_bits` bits (fewer in the subnormal range), RNE on the rest; exactly
///     half the smallest subnormal goes to zero (ties to even), the sign of zero is kept.
///  4. A result above max finite (incl. rounding onto the Inf/NaN code) is overflow, handled as 2.
/// \param bits  fp32 bit pattern; every pattern is valid.
/// \param f     target format record.
/// \param sat   overflow policy.
/// \return      code, sign in bit bits()-1.
FP8EMU_HD constexpr std::uint8_t encode_f32_bits(std::uint32_t bits, FormatSpec f, Saturation sat) {
  return encode_bits<Binary32Source>(bits, f, Policy::cuda_float(sat == Saturation::kSatFinite));
}

/// FP8 code -> fp32 bits, exact. NaN codes give 0x7FFFFFFF, the canonical NaN that CUDA's
/// fp8 -> half -> float path yields (its sign is dropped); E5M2 Inf gives +-Inf. The general decoder
/// of every small format (encode.hpp).
FP8EMU_HD constexpr std::uint32_t decode_to_f32_bits(std::uint8_t code, FormatSpec f) {
  return decode_code_to_f32_bits(code, f);
}

/// fp32 -> FP8 code (see encode_f32_bits).
FP8EMU_HD std::uint8_t f32_to_fp8(float x, FormatSpec f, Saturation sat) {
  return encode_f32_bits(f32_to_bits(x), f, sat);
}

/// FP8 code -> fp32, exact (see decode_to_f32_bits).
FP8EMU_HD float fp8_to_f32(std::uint8_t code, FormatSpec f) {
  return bits_to_f32(decode_to_f32_bits(code, f));
}

}  // namespace core
}  // namespace fp8emu
