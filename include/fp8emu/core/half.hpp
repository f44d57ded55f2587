/// \file half.hpp
/// \brief IEEE binary16 ("half", fp16) and bfloat16 raw bits <-> fp32 bits: the 16-bit formats that
/// CUDA's conversion API takes and returns as `__half_raw` / `__nv_bfloat16_raw`. Integer-only,
/// total, host and device (FP8EMU_HD).
///
/// Semantics mirrored (CUDA 13 host code, checked for all 2^16 / 2^32 inputs by
/// tests/core/test_nv_cuda_oracle.cpp):
///   - half -> fp32: exact. NaN gives the canonical 0x7FFFFFFF with the sign dropped, as
///     `__internal_halfraw_to_float` in cuda_fp8.hpp (which every fp16 entry point of cuda_fp8.h,
///     cuda_fp6.h and cuda_fp4.h uses).
///   - bfloat16 -> fp32: exact, the 16 bits become the top of the fp32 (NaN payload and sign kept),
///     as `__internal_bf16raw_to_float`.
///   - fp32 -> half / bfloat16: round to nearest even, overflow to +-Inf, every NaN to 0x7FFF, as
///     `__float2half_rn` / `__float2bfloat16_rn` host code.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"

namespace fp8emu::core {

/// binary16 bits -> fp32 bits, exact; NaN -> 0x7FFFFFFF (sign dropped, as CUDA).
FP8EMU_HD constexpr std::uint32_t half_to_f32_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t man = h & 0x3FFu;
  if (exp == 0x1Fu) return man != 0 ? 0x7FFFFFFFu : (sign | 0x7F800000u);
  if (exp != 0) return sign | ((exp + 112u) << 23) | (man << 13);  // rebias 15 -> 127
  if (man == 0) return sign;
  // Subnormal half: man * 2^-24. Normalise: the leading one moves to bit 10.
  int e = 113;  // biased fp32 exponent of 2^-14, decremented per shift
  while (!(man & 0x400u)) {
    man <<= 1;
    --e;
  }
  return sign | (std::uint32_t(e) << 23) | ((man & 0x3FFu) << 13);
}

/// bfloat16 bits -> fp32 bits, exact (NaN payload and sign kept).
FP8EMU_HD constexpr std::uint32_t bf16_to_f32_bits(std::uint16_t b) { return std::uint32_t(b) << 16; }

/// What fp32 -> bfloat16 makes of a NaN: the two rules in use.
enum class Bf16Nan : std::uint8_t {
  kCuda,           ///< Every NaN -> 0x7FFF (CUDA `__float2bfloat16_rn` host code).
  kQuietKeepSign,  ///< Sign kept, quiet NaN 0x7FC0 (the GEMM epilogue's bf16 output, as x86 and
                   ///< PyTorch truncation of a default NaN give).
};

/// fp32 bits -> bfloat16 bits, round to nearest even, overflow to +-Inf; NaN per `nan` (CUDA's
/// `__float2bfloat16_rn` by default).
FP8EMU_HD constexpr std::uint16_t f32_bits_to_bf16_rne(std::uint32_t u, Bf16Nan nan = Bf16Nan::kCuda) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return nan == Bf16Nan::kCuda ? std::uint16_t(0x7FFFu) : std::uint16_t(((u >> 16) & 0x8000u) | 0x7FC0u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return std::uint16_t((u + 0x7FFFu + lsb) >> 16);  // carries into the exponent round up / to Inf
}

/// fp32 bits -> tf32 (an fp32 whose low 13 significand bits are zero), round to nearest with ties
/// away from zero, as PTX `cvt.rna.tf32.f32` (and CUTLASS's default tfloat32_t conversion) round:
/// the carry of a tie moves the exponent, up to +-Inf; fp32 subnormals round in the same grid; Inf
/// stays; NaN -> a quiet NaN of the same sign with the low 13 bits cleared.
FP8EMU_HD constexpr std::uint32_t f32_bits_to_tf32_rna(std::uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u | 0x00400000u) & 0xFFFFE000u;
  if ((u & 0x7FFFFFFFu) == 0x7F800000u) return u;
  return (u + 0x1000u) & 0xFFFFE000u;  // sign-magnitude: adding half an ulp rounds ties away
}

/// fp32 bits -> binary16 bits, round to nearest even, overflow to +-Inf; NaN -> 0x7FFF
/// (CUDA `__float2half_rn`).
FP8EMU_HD constexpr std::uint16_t f32_bits_to_half_rne(std::uint32_t u) {
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7FFFu;
  if (abs >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);  // >= 65520 rounds to Inf
  const int e = int(abs >> 23) - 127;
  if (e >= -14) {  // normal half: drop 13 bits, RNE; a carry moves the exponent (at most to 65504)
    const std::uint32_t r = abs - (112u << 23);
    const std::uint32_t q = r >> 13, rem = r & 0x1FFFu;
    return std::uint16_t(sign | (q + ((rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ? 1u : 0u)));
  }
  if (e < -25) return sign;  // below half the smallest subnormal 2^-25 (fp32 subnormals included)
  // Subnormal half: value / 2^-24 = sig * 2^(e - 23 + 24); sig has its implicit one at bit 23.
  const std::uint32_t sig = (abs & 0x7FFFFFu) | 0x800000u;
  const int s = -1 - e;  // 14..24: bits of sig to drop (e = -15 keeps 10 bits)
  const std::uint32_t q = sig >> s, rem = sig & ((1u << s) - 1u), half = 1u << (s - 1);
  return std::uint16_t(sign | (q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u)));
}

}  // namespace fp8emu::core
