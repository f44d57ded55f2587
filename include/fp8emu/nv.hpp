/// \file nv.hpp
/// \brief CUDA mirror API: every conversion of CUDA 13's `cuda_fp8.h`, `cuda_fp6.h` and
/// `cuda_fp4.h`, named as CUDA names it without the `__nv_` prefix, with the same argument order,
/// returning exactly what CUDA's host code returns for every input. No CUDA toolkit needed.
///
///   fp8emu::nv::cvt_float_to_fp8(x, Saturation::kSatFinite, Fp8Interpretation::kE4M3)
///       == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)       for every float x.
///
/// Types: raw storage is `std::uint8_t` (`__nv_fp8_storage_t`, `__nv_fp6_storage_t`,
/// `__nv_fp4_storage_t`) or `std::uint16_t` (the x2 storages, and `__half_raw::x`,
/// `__nv_bfloat16_raw::x`); `float2`/`double2`/`__half2_raw`/`__nv_bfloat162_raw` are the structs
/// Float2/Double2/Half2Raw/Bfloat162Raw below (`.x` is the low half of an x2 storage, as in CUDA).
///
/// CUDA's quirks, mirrored on purpose (each pinned against CUDA's own host code by
/// tests/core/test_nv_cuda_oracle.cpp, built when cuda_fp8.h is found):
///   - The float entry `cvt_float_to_fp8` drops the sign of NaN (0x7F); the double entry keeps it
///     and, for E5M2, copies the input's top payload bit (0x7E | sign | bit). Half and bfloat16
///     inputs widen to float first, so they drop it too.
///   - The double entries round once, from the exact double (no double rounding through float).
///   - FP6 and FP4 have no Inf or NaN: overflow and +-Inf saturate to +-max, NaN gives +max.
///   - FP6/FP4 accept kNearest and kZero; CUDA asserts on other modes and, with NDEBUG, treats them
///     as kZero; so does this mirror (it never asserts).
///   - E8M0 converts through bfloat16 and accepts kZero and kPosInf (others behave as kPosInf, as
///     CUDA's host code with NDEBUG); the double entry rounds to odd to float first.
///   - Decoders ignore the storage bits above the format (fp6: 2 bits, fp4: 4 bits); NaN decodes to
///     0x7FFF (half) / 0x7FFF (bfloat16).
/// On sm_89+ devices CUDA uses the `cvt` instruction for some of these; whether it equals the host
/// code is an open question for a GPU run (docs/gpu.md once measured), not assumed here.
///
/// Thread-safety: pure functions. Errors: none (every input is valid, as in CUDA).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::nv {

/// `__nv_saturation_t`.
enum class Saturation { kNoSat, kSatFinite };
/// `__nv_fp8_interpretation_t`.
enum class Fp8Interpretation { kE4M3, kE5M2 };
/// `__nv_fp6_interpretation_t`.
enum class Fp6Interpretation { kE2M3, kE3M2 };
/// `__nv_fp4_interpretation_t`.
enum class Fp4Interpretation { kE2M1 };
/// `cudaRoundMode`.
enum class RoundMode { kNearest, kZero, kPosInf, kMinInf };

struct Float2 { float x, y; };                 ///< `float2`
struct Double2 { double x, y; };               ///< `double2`
struct Half2Raw { std::uint16_t x, y; };       ///< `__half2_raw`
struct Bfloat162Raw { std::uint16_t x, y; };   ///< `__nv_bfloat162_raw`

namespace detail {
FP8EMU_HD std::uint64_t f64_bits(double x) {
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
// (if/return rather than ?: so that device code copies the constexpr records, never binds them)
FP8EMU_HD constexpr FormatSpec spec(Fp8Interpretation i) {
  if (i == Fp8Interpretation::kE4M3) return kSpecE4M3;
  return kSpecE5M2;
}
FP8EMU_HD constexpr FormatSpec spec(Fp6Interpretation i) {
  if (i == Fp6Interpretation::kE2M3) return kSpecE2M3;
  return kSpecE3M2;
}
FP8EMU_HD constexpr FormatSpec spec(Fp4Interpretation) { return kSpecE2M1; }
FP8EMU_HD constexpr bool sat(Saturation s) { return s == Saturation::kSatFinite; }
/// FP6/FP4 rounding: nearest, else toward zero (CUDA's host code with NDEBUG).
FP8EMU_HD constexpr Policy small_policy(RoundMode r) {
  return {r == RoundMode::kNearest ? Rounding::kNearestEven : Rounding::kTowardZero,
          Overflow::kSatFinite, NanEncoding::kCanonical};
}
/// E8M0 rounding: toward zero, else up (CUDA's host code with NDEBUG).
FP8EMU_HD constexpr bool e8m0_up(RoundMode r) { return r != RoundMode::kZero; }
/// Any small format's code -> half bits (exact; NaN -> 0x7FFF).
FP8EMU_HD constexpr std::uint16_t to_half(std::uint32_t code, FormatSpec f) {
  return core::f32_bits_to_half_rne(core::decode_code_to_f32_bits(code, f));
}
}  // namespace detail

// ---------------------------------------------------------------- FP8 (cuda_fp8.h)

/// `__nv_cvt_double_to_fp8`: one rounding (RNE); NaN keeps its sign, E5M2 NaN keeps the top
/// payload bit.
FP8EMU_HD std::uint8_t cvt_double_to_fp8(double x, Saturation s, Fp8Interpretation i) {
  return core::encode_f64_bits(detail::f64_bits(x), detail::spec(i), Policy::cuda_double(detail::sat(s)));
}
/// `__nv_cvt_double2_to_fp8x2`: `.x` in the low byte.
FP8EMU_HD std::uint16_t cvt_double2_to_fp8x2(Double2 x, Saturation s, Fp8Interpretation i) {
  return std::uint16_t(cvt_double_to_fp8(x.x, s, i) | (cvt_double_to_fp8(x.y, s, i) << 8));
}
/// `__nv_cvt_float_to_fp8`: RNE; NaN -> 0x7F (sign dropped).
FP8EMU_HD std::uint8_t cvt_float_to_fp8(float x, Saturation s, Fp8Interpretation i) {
  return core::encode_f32_bits(core::f32_to_bits(x), detail::spec(i),
                               detail::sat(s) ? fp8emu::Saturation::kSatFinite : fp8emu::Saturation::kNoSat);
}
/// `__nv_cvt_float2_to_fp8x2`.
FP8EMU_HD std::uint16_t cvt_float2_to_fp8x2(Float2 x, Saturation s, Fp8Interpretation i) {
  return std::uint16_t(cvt_float_to_fp8(x.x, s, i) | (cvt_float_to_fp8(x.y, s, i) << 8));
}
/// `__nv_cvt_halfraw_to_fp8`: the half widens exactly to float, then as the float entry.
FP8EMU_HD std::uint8_t cvt_halfraw_to_fp8(std::uint16_t x, Saturation s, Fp8Interpretation i) {
  return cvt_float_to_fp8(core::bits_to_f32(core::half_to_f32_bits(x)), s, i);
}
/// `__nv_cvt_halfraw2_to_fp8x2`.
FP8EMU_HD std::uint16_t cvt_halfraw2_to_fp8x2(Half2Raw x, Saturation s, Fp8Interpretation i) {
  return std::uint16_t(cvt_halfraw_to_fp8(x.x, s, i) | (cvt_halfraw_to_fp8(x.y, s, i) << 8));
}
/// `__nv_cvt_bfloat16raw_to_fp8`: the bfloat16 widens exactly to float, then as the float entry.
FP8EMU_HD std::uint8_t cvt_bfloat16raw_to_fp8(std::uint16_t x, Saturation s, Fp8Interpretation i) {
  return cvt_float_to_fp8(core::bits_to_f32(core::bf16_to_f32_bits(x)), s, i);
}
/// `__nv_cvt_bfloat16raw2_to_fp8x2`.
FP8EMU_HD std::uint16_t cvt_bfloat16raw2_to_fp8x2(Bfloat162Raw x, Saturation s, Fp8Interpretation i) {
  return std::uint16_t(cvt_bfloat16raw_to_fp8(x.x, s, i) | (cvt_bfloat16raw_to_fp8(x.y, s, i) << 8));
}
/// `__nv_cvt_fp8_to_halfraw`: exact; NaN -> 0x7FFF.
FP8EMU_HD std::uint16_t cvt_fp8_to_halfraw(std::uint8_t x, Fp8Interpretation i) {
  return detail::to_half(x, detail::spec(i));
}
/// `__nv_cvt_fp8x2_to_halfraw2`.
FP8EMU_HD Half2Raw cvt_fp8x2_to_halfraw2(std::uint16_t x, Fp8Interpretation i) {
  return {cvt_fp8_to_halfraw(std::uint8_t(x), i), cvt_fp8_to_halfraw(std::uint8_t(x >> 8), i)};
}

// ---------------------------------------------------------------- E8M0 (cuda_fp8.h)

/// `__nv_cvt_bfloat16raw_to_e8m0` (see core::e8m0_from_bf16_bits).
FP8EMU_HD std::uint8_t cvt_bfloat16raw_to_e8m0(std::uint16_t x, Saturation s, RoundMode r) {
  return core::e8m0_from_bf16_bits(x, detail::sat(s), detail::e8m0_up(r));
}
/// `__nv_cvt_bfloat162raw_to_e8m0x2`.
FP8EMU_HD std::uint16_t cvt_bfloat162raw_to_e8m0x2(Bfloat162Raw x, Saturation s, RoundMode r) {
  return std::uint16_t(cvt_bfloat16raw_to_e8m0(x.x, s, r) | (cvt_bfloat16raw_to_e8m0(x.y, s, r) << 8));
}
/// `__nv_cvt_float_to_e8m0` (see core::e8m0_from_f32_bits).
FP8EMU_HD std::uint8_t cvt_float_to_e8m0(float x, Saturation s, RoundMode r) {
  return core::e8m0_from_f32_bits(core::f32_to_bits(x), detail::sat(s), detail::e8m0_up(r));
}
/// `__nv_cvt_float2_to_e8m0x2`.
FP8EMU_HD std::uint16_t cvt_float2_to_e8m0x2(Float2 x, Saturation s, RoundMode r) {
  return std::uint16_t(cvt_float_to_e8m0(x.x, s, r) | (cvt_float_to_e8m0(x.y, s, r) << 8));
}
/// `__nv_cvt_double_to_e8m0`: round to odd to float, then the float entry.
FP8EMU_HD std::uint8_t cvt_double_to_e8m0(double x, Saturation s, RoundMode r) {
  return core::e8m0_from_f64_bits(detail::f64_bits(x), detail::sat(s), detail::e8m0_up(r));
}
/// `__nv_cvt_double2_to_e8m0x2`.
FP8EMU_HD std::uint16_t cvt_double2_to_e8m0x2(Double2 x, Saturation s, RoundMode r) {
  return std::uint16_t(cvt_double_to_e8m0(x.x, s, r) | (cvt_double_to_e8m0(x.y, s, r) << 8));
}
/// `__nv_cvt_e8m0_to_bf16raw`: 2^(x - 127) exactly; 0 -> 0x0040, 0xFF -> 0x7FFF.
FP8EMU_HD std::uint16_t cvt_e8m0_to_bf16raw(std::uint8_t x) { return core::e8m0_to_bf16_bits(x); }
/// `__nv_cvt_e8m0x2_to_bf162raw`.
FP8EMU_HD Bfloat162Raw cvt_e8m0x2_to_bf162raw(std::uint16_t x) {
  return {cvt_e8m0_to_bf16raw(std::uint8_t(x)), cvt_e8m0_to_bf16raw(std::uint8_t(x >> 8))};
}

// ---------------------------------------------------------------- FP6 (cuda_fp6.h)

/// `__nv_cvt_double_to_fp6`: one rounding (kNearest or kZero); saturating; NaN -> +max (0x1F).
FP8EMU_HD std::uint8_t cvt_double_to_fp6(double x, Fp6Interpretation i, RoundMode r) {
  return core::encode_f64_bits(detail::f64_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_double2_to_fp6x2`: `.x` in the low byte.
FP8EMU_HD std::uint16_t cvt_double2_to_fp6x2(Double2 x, Fp6Interpretation i, RoundMode r) {
  return std::uint16_t(cvt_double_to_fp6(x.x, i, r) | (cvt_double_to_fp6(x.y, i, r) << 8));
}
/// `__nv_cvt_float_to_fp6`: the float widens exactly to double.
FP8EMU_HD std::uint8_t cvt_float_to_fp6(float x, Fp6Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::f32_to_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_float2_to_fp6x2`.
FP8EMU_HD std::uint16_t cvt_float2_to_fp6x2(Float2 x, Fp6Interpretation i, RoundMode r) {
  return std::uint16_t(cvt_float_to_fp6(x.x, i, r) | (cvt_float_to_fp6(x.y, i, r) << 8));
}
/// `__nv_cvt_halfraw_to_fp6`.
FP8EMU_HD std::uint8_t cvt_halfraw_to_fp6(std::uint16_t x, Fp6Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::half_to_f32_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_halfraw2_to_fp6x2`.
FP8EMU_HD std::uint16_t cvt_halfraw2_to_fp6x2(Half2Raw x, Fp6Interpretation i, RoundMode r) {
  return std::uint16_t(cvt_halfraw_to_fp6(x.x, i, r) | (cvt_halfraw_to_fp6(x.y, i, r) << 8));
}
/// `__nv_cvt_bfloat16raw_to_fp6`.
FP8EMU_HD std::uint8_t cvt_bfloat16raw_to_fp6(std::uint16_t x, Fp6Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::bf16_to_f32_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_bfloat16raw2_to_fp6x2`.
FP8EMU_HD std::uint16_t cvt_bfloat16raw2_to_fp6x2(Bfloat162Raw x, Fp6Interpretation i, RoundMode r) {
  return std::uint16_t(cvt_bfloat16raw_to_fp6(x.x, i, r) | (cvt_bfloat16raw_to_fp6(x.y, i, r) << 8));
}
/// `__nv_cvt_fp6_to_halfraw`: exact; the top two storage bits are ignored.
FP8EMU_HD std::uint16_t cvt_fp6_to_halfraw(std::uint8_t x, Fp6Interpretation i) {
  return detail::to_half(x & 0x3Fu, detail::spec(i));
}
/// `__nv_cvt_fp6x2_to_halfraw2`.
FP8EMU_HD Half2Raw cvt_fp6x2_to_halfraw2(std::uint16_t x, Fp6Interpretation i) {
  return {cvt_fp6_to_halfraw(std::uint8_t(x), i), cvt_fp6_to_halfraw(std::uint8_t(x >> 8), i)};
}

// ---------------------------------------------------------------- FP4 (cuda_fp4.h)

/// `__nv_cvt_double_to_fp4`: one rounding (kNearest or kZero); saturating; NaN -> +max (0x7).
FP8EMU_HD std::uint8_t cvt_double_to_fp4(double x, Fp4Interpretation i, RoundMode r) {
  return core::encode_f64_bits(detail::f64_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_double2_to_fp4x2`: `.x` in the low nibble.
FP8EMU_HD std::uint8_t cvt_double2_to_fp4x2(Double2 x, Fp4Interpretation i, RoundMode r) {
  return std::uint8_t(cvt_double_to_fp4(x.x, i, r) | (cvt_double_to_fp4(x.y, i, r) << 4));
}
/// `__nv_cvt_float_to_fp4`.
FP8EMU_HD std::uint8_t cvt_float_to_fp4(float x, Fp4Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::f32_to_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_float2_to_fp4x2`.
FP8EMU_HD std::uint8_t cvt_float2_to_fp4x2(Float2 x, Fp4Interpretation i, RoundMode r) {
  return std::uint8_t(cvt_float_to_fp4(x.x, i, r) | (cvt_float_to_fp4(x.y, i, r) << 4));
}
/// `__nv_cvt_halfraw_to_fp4`.
FP8EMU_HD std::uint8_t cvt_halfraw_to_fp4(std::uint16_t x, Fp4Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::half_to_f32_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_halfraw2_to_fp4x2`.
FP8EMU_HD std::uint8_t cvt_halfraw2_to_fp4x2(Half2Raw x, Fp4Interpretation i, RoundMode r) {
  return std::uint8_t(cvt_halfraw_to_fp4(x.x, i, r) | (cvt_halfraw_to_fp4(x.y, i, r) << 4));
}
/// `__nv_cvt_bfloat16raw_to_fp4`.
FP8EMU_HD std::uint8_t cvt_bfloat16raw_to_fp4(std::uint16_t x, Fp4Interpretation i, RoundMode r) {
  return core::encode_f32_bits_with(core::bf16_to_f32_bits(x), detail::spec(i), detail::small_policy(r));
}
/// `__nv_cvt_bfloat16raw2_to_fp4x2`.
FP8EMU_HD std::uint8_t cvt_bfloat16raw2_to_fp4x2(Bfloat162Raw x, Fp4Interpretation i, RoundMode r) {
  return std::uint8_t(cvt_bfloat16raw_to_fp4(x.x, i, r) | (cvt_bfloat16raw_to_fp4(x.y, i, r) << 4));
}
/// `__nv_cvt_fp4_to_halfraw`: exact; the top four storage bits are ignored.
FP8EMU_HD std::uint16_t cvt_fp4_to_halfraw(std::uint8_t x, Fp4Interpretation i) {
  return detail::to_half(x & 0xFu, detail::spec(i));
}
/// `__nv_cvt_fp4x2_to_halfraw2`: low nibble to `.x`.
FP8EMU_HD Half2Raw cvt_fp4x2_to_halfraw2(std::uint8_t x, Fp4Interpretation i) {
  return {cvt_fp4_to_halfraw(x, i), cvt_fp4_to_halfraw(std::uint8_t(x >> 4), i)};
}

}  // namespace fp8emu::nv
