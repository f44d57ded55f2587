/// \file encode.hpp
/// \brief The general conversion to any small format of format_spec.hpp (FP8 e4m3fn/e5m2 and their
/// fnuz variants, FP6 e2m3/e3m2, FP4 e2m1) from fp64 or fp32 bits, under named policies: rounding,
/// overflow and NaN encoding. One rounding, from the exact input (fp32 widens to fp64 exactly).
/// Integer-only, total, no exceptions, host and device (FP8EMU_HD).
///
/// Presets reproduce each system exactly (tests pin every difference; see docs/conversion-policies.md
/// §Where they differ):
///   - CUDA `__nv_cvt_float_to_fp8` / `__nv_cvt_double_to_fp8` (sat and nosat), `__nv_cvt_*_to_fp6`,
///     `__nv_cvt_*_to_fp4` (round to nearest or toward zero): Policy::cuda_float / cuda_double;
///   - ml_dtypes (default cast and the C++ kSaturate flag): Policy::ml_dtypes / ml_dtypes_saturate;
///   - PyTorch c10 <= 2.12 and >= 2.13: Policy::pytorch / pytorch_2_13.
///
/// The kernels' fp32 -> FP8 cast (convert.hpp, `encode_f32_bits`) is this encoder under
/// `Policy::cuda_float(sat)`.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu {

/// Rounding of the exact input to the target precision.
enum class Rounding : std::uint8_t {
  kNearestEven,     ///< IEEE 754 roundTiesToEven (CUDA `cudaRoundNearest`, `cvt.rn`).
  kTowardZero,      ///< Truncation (CUDA `cudaRoundZero`, `cvt.rz`).
  kTowardPositive,  ///< Toward +Inf (CUDA `cudaRoundPosInf`, `cvt.rp`).
  kTowardNegative,  ///< Toward -Inf (CUDA `cudaRoundMinInf`, `cvt.rm`).
  kStochastic,      ///< Round up with probability equal to the discarded fraction of an ulp, decided
                    ///< by 32 caller-supplied random bits (see encode_f64_bits): reproducible.
};

/// What happens to magnitudes beyond the largest finite value, and to +-Inf inputs.
enum class Overflow : std::uint8_t {
  kSatFinite,         ///< CUDA `__NV_SATFINITE`: finite overflow and +-Inf go to +-max finite.
  kSatFiniteKeepInf,  ///< ml_dtypes `kSaturate`: finite overflow to +-max finite, but +-Inf stays
                      ///< +-Inf (or becomes NaN where the format has no Inf).
  kNoSat,             ///< CUDA `__NV_NOSAT` / IEEE 754 §7.4: overflow gives +-Inf (or the NaN code
                      ///< where there is no Inf), except that a directed rounding toward the range
                      ///< (toward zero; toward +Inf for negatives; toward -Inf for positives) gives
                      ///< +-max finite. Formats with neither Inf nor NaN (FP6, FP4) always saturate.
};

/// How a NaN input is encoded (formats with a NaN code; see encode_f64_bits for the others).
enum class NanEncoding : std::uint8_t {
  kCanonical,  ///< The positive canonical code (0x7F for e4m3fn and e5m2), sign dropped: CUDA's
               ///< float, half and bfloat16 entry points.
  kSigned,     ///< Sign kept, all exponent and mantissa bits set (0x7F | sign): PyTorch.
  kSignedQuiet,  ///< Sign kept, quiet-bit code (e5m2: 0x7E | sign; e4m3fn has only 0x7F): ml_dtypes.
  kPayload,  ///< Sign kept, quiet bit set, the next mantissa bits copied from the top of the input's
             ///< payload (e5m2: 0x7E | sign | top payload bit): CUDA's double entry point.
};

/// A complete conversion policy. The defaults are CUDA's `__nv_fp8_e4m3(float)` constructor.
struct Policy {
  Rounding rounding = Rounding::kNearestEven;
  Overflow overflow = Overflow::kSatFinite;
  NanEncoding nan = NanEncoding::kCanonical;

  /// `__nv_cvt_float_to_fp8(x, sat, ...)` (and the half/bfloat16 entries, which widen to float).
  FP8EMU_HD static constexpr Policy cuda_float(bool satfinite = true) {
    return {Rounding::kNearestEven, satfinite ? Overflow::kSatFinite : Overflow::kNoSat,
            NanEncoding::kCanonical};
  }
  /// `__nv_cvt_double_to_fp8(x, sat, ...)`: as the float entry, but NaN keeps sign and payload.
  FP8EMU_HD static constexpr Policy cuda_double(bool satfinite = true) {
    return {Rounding::kNearestEven, satfinite ? Overflow::kSatFinite : Overflow::kNoSat,
            NanEncoding::kPayload};
  }
  /// ml_dtypes' default cast (e.g. `np.float32(x).astype(float8_e4m3fn)`): non-saturating.
  FP8EMU_HD static constexpr Policy ml_dtypes() {
    return {Rounding::kNearestEven, Overflow::kNoSat, NanEncoding::kSignedQuiet};
  }
  /// ml_dtypes' C++ `ConvertFrom<kSaturate=true>`: finite overflow saturates, Inf does not.
  FP8EMU_HD static constexpr Policy ml_dtypes_saturate() {
    return {Rounding::kNearestEven, Overflow::kSatFiniteKeepInf, NanEncoding::kSignedQuiet};
  }
  /// PyTorch c10 `Float8_e4m3fn(float)` / `Float8_e5m2(float)` up to 2.12: non-saturating (equal to
  /// PyTorch 2.12.1's CPU Tensor.to on every fp32 input of tests/python/test_cast.py).
  FP8EMU_HD static constexpr Policy pytorch() {
    return {Rounding::kNearestEven, Overflow::kNoSat, NanEncoding::kSigned};
  }
  /// PyTorch >= 2.13 (pytorch#178817 "Properly saturate E4M3 on finite-overflow"): e4m3fn finite
  /// overflow and +-Inf saturate to +-max, NaN keeps its sign; e5m2 unchanged (the `pytorch`
  /// policy; cast_policy applies this one to e4m3fn only). Measured: equal to the CPU Tensor.to of
  /// PyTorch 2.13.0, 2.14.1 and 2.15.0 on every fp32 input of tests/python/test_cast.py; 2.12.1
  /// does not saturate (the `pytorch` policy).
  FP8EMU_HD static constexpr Policy pytorch_2_13() {
    return {Rounding::kNearestEven, Overflow::kSatFinite, NanEncoding::kSigned};
  }
};

namespace core {

/// fp32 bits -> fp64 bits, exact (NaN payload kept in the top mantissa bits, sign kept).
FP8EMU_HD constexpr std::uint64_t f32_bits_to_f64_bits(std::uint32_t u) {
  const std::uint64_t sign = std::uint64_t(u >> 31) << 63;
  const std::uint32_t exp = (u >> 23) & 0xFFu;
  std::uint64_t man = u & 0x7FFFFFu;
  if (exp == 0xFFu) return sign | 0x7FF0000000000000ull | (man << 29);
  if (exp != 0) return sign | (std::uint64_t(exp + 896u) << 52) | (man << 29);  // rebias 127 -> 1023
  if (man == 0) return sign;
  int e = 897;  // biased fp64 exponent of 2^-126, decremented per normalising shift
  while (!(man & 0x800000u)) {
    man <<= 1;
    --e;
  }
  return sign | (std::uint64_t(e) << 52) | ((man & 0x7FFFFFu) << 29);
}

/// The code of a NaN input under policy `nan` (formats with a NaN code): `neg` its sign, `payload_top`
/// the top mantissa_bits bits of its payload (quiet bit first).
FP8EMU_HD constexpr std::uint8_t nan_code_for(bool neg, std::uint32_t payload_top, FormatSpec f, NanEncoding nan) {
  if (f.fnuz) return std::uint8_t(f.nan_code());
  const std::uint32_t sign = neg ? f.sign_mask() : 0u;
  switch (nan) {
    case NanEncoding::kCanonical:
      return std::uint8_t(f.nan_code());
    case NanEncoding::kSigned:
      return std::uint8_t(sign | f.nan_code());
    case NanEncoding::kSignedQuiet:
      return std::uint8_t(sign | (f.has_inf ? f.inf_code() | (1u << (f.mantissa_bits - 1)) : f.nan_code()));
    case NanEncoding::kPayload:
      if (!f.has_inf) return std::uint8_t(sign | f.nan_code());
      return std::uint8_t(sign | f.inf_code() | (1u << (f.mantissa_bits - 1)) | payload_top);
  }
  return std::uint8_t(f.nan_code());  // unreachable: every NanEncoding is handled above
}

/// The IEEE binary source formats of the encoder: bit container, exponent and trailing significand
/// widths.
template <class U, int kExponentBits, int kMantissaBits>
struct IeeeSource {
  using Bits = U;
  static constexpr int kExpBits = kExponentBits;
  static constexpr int kManBits = kMantissaBits;
  static constexpr int kWidth = 1 + kExponentBits + kMantissaBits;
  static constexpr int kBias = (1 << (kExponentBits - 1)) - 1;
};
using Binary32Source = IeeeSource<std::uint32_t, 8, 23>;
using Binary64Source = IeeeSource<std::uint64_t, 11, 52>;

/// The one encoder: IEEE binary32 or binary64 bits (Src) -> code of `f` (bits() wide, sign in bit
/// bits()-1), one rounding of the exact input under `p`. Every fp32/fp64 -> small-format conversion
/// of fp8emu (CUDA's, ml_dtypes', PyTorch's, the kernels' satfinite cast) is this routine with a
/// policy.
///
/// Steps:
///  1. NaN: encoded by p.nan (nan_code_for). Formats without NaN (FP6, FP4) give +max finite for
///     every NaN, as CUDA's `__nv_cvt_*_to_fp6/fp4`, except under kSignedQuiet (ml_dtypes), which
///     gives zero with the opposite sign (+NaN -> -0, -NaN -> +0), as ml_dtypes 0.6.0 does.
///  2. +-Inf: kSatFinite -> +-max finite; otherwise +-Inf, or the NaN code (sign kept; fnuz 0x80)
///     where the format has no Inf, or +-max where it has neither.
///  3. Finite x: q = |x| / ulp, ulp = 2^(max(e, emin) - mantissa_bits), rounded per p.rounding from
///     the exact remainder. kStochastic adds `random_bits` to the first 32 bits of the discarded
///     fraction (as a 0.32 fixed-point number) and rounds up on carry-out: P(up) = that fraction,
///     exactly when at most 32 bits are discarded, else truncated to 32 bits (bias < 2^-32 ulp).
///  4. A rounded magnitude above max finite overflows per p.overflow (see Overflow).
///  5. Zero results keep the sign (-0), except in fnuz formats, which have no -0 (code 0).
template <class Src>
FP8EMU_HD_FLATTEN constexpr std::uint8_t encode_bits(typename Src::Bits bits, FormatSpec f, Policy p,
                                             std::uint32_t random_bits = 0) {
  using U = typename Src::Bits;
  constexpr int kMan = Src::kManBits;
  constexpr U kSignBit = U(1) << (Src::kWidth - 1);
  constexpr U kInf = ((U(1) << Src::kExpBits) - 1u) << kMan;
  const bool neg = (bits & kSignBit) != 0;
  const std::uint32_t sign = neg ? f.sign_mask() : 0u;
  const U abs = bits & (kSignBit - 1u);
  const std::uint32_t maxc = f.max_finite_code();
  const int m = f.mantissa_bits;
  // The code of an overflow that does not saturate.
  const std::uint32_t big = f.has_inf ? (sign | f.inf_code())
                            : f.fnuz  ? f.nan_code()
                            : f.has_nan() ? (sign | f.nan_code())
                                          : (sign | maxc);
  if (abs > kInf) {  // step 1
    if (f.has_nan()) return nan_code_for(neg, std::uint32_t((abs >> (kMan - m)) & ((U(1) << m) - 1u)), f, p.nan);
    // No NaN code: CUDA gives +max finite; ml_dtypes (0.6.0) gives zero of the opposite sign.
    return std::uint8_t(p.nan == NanEncoding::kSignedQuiet ? (neg ? 0u : f.sign_mask()) : maxc);
  }
  if (abs == kInf) return std::uint8_t(p.overflow == Overflow::kSatFinite ? (sign | maxc) : big);  // step 2
  if (abs == 0) return std::uint8_t(f.fnuz ? 0u : sign);
  // Step 3. |x| = sig * 2^(e - kMan) (subnormal sources: e = 1 - bias, no implicit bit).
  const int biased = int(abs >> kMan);
  const U sig = (abs & ((U(1) << kMan) - 1u)) | (biased ? (U(1) << kMan) : U(0));
  const int e = biased ? biased - Src::kBias : 1 - Src::kBias;
  const int ue = e > f.emin() ? e : f.emin();  // exponent of the target ulp's binade
  const int s = kMan - m + (ue - e);           // bits of sig below the target ulp (>= 20)
  U q = 0, rem = sig;  // |x| far below the ulp (s >= width): q = 0 and all of sig is discarded
  bool half_exact = false, above_half = false;
  if (s < Src::kWidth) {
    q = sig >> s;
    rem = sig & ((U(1) << s) - 1u);
    const U half = U(1) << (s - 1);
    half_exact = rem == half;
    above_half = rem > half;
  }
  bool up = false;
  switch (p.rounding) {
    case Rounding::kNearestEven: up = above_half || (half_exact && (q & 1u)); break;
    case Rounding::kTowardZero: break;
    case Rounding::kTowardPositive: up = rem != 0 && !neg; break;
    case Rounding::kTowardNegative: up = rem != 0 && neg; break;
    case Rounding::kStochastic: {
      // The first 32 bits of the discarded fraction rem / 2^s, as a 0.32 fixed-point number.
      const std::uint32_t frac32 = s >= 32 ? (s - 32 < Src::kWidth ? std::uint32_t(rem >> (s - 32)) : 0u)
                                           : std::uint32_t(rem << (32 - s));
      up = std::uint64_t(frac32) + random_bits >= (std::uint64_t(1) << 32);
      break;
    }
  }
  // Code = q + (biased exponent - 1) << m for normals (q holds the implicit bit), q for subnormals;
  // a carry out of the mantissa moves the exponent.
  const U mag = q + (up ? 1u : 0u) + (U(ue - f.emin()) << m);
  if (mag > maxc) {  // step 4
    if (p.overflow != Overflow::kNoSat) return std::uint8_t(sign | maxc);
    const bool toward_range = p.rounding == Rounding::kTowardZero ||
                              (p.rounding == Rounding::kTowardPositive && neg) ||
                              (p.rounding == Rounding::kTowardNegative && !neg);
    return std::uint8_t(toward_range ? (sign | maxc) : big);
  }
  if (mag == 0 && f.fnuz) return 0;  // step 5
  return std::uint8_t(sign | std::uint32_t(mag));
}

/// fp64 bits -> code of `f`, one rounding under `p` (encode_bits).
FP8EMU_HD constexpr std::uint8_t encode_f64_bits(std::uint64_t bits, FormatSpec f, Policy p,
                                                 std::uint32_t random_bits = 0) {
  return encode_bits<Binary64Source>(bits, f, p, random_bits);
}

/// fp32 bits -> code of `f` under `p` (encode_bits): the same result as encode_f64_bits of the
/// exactly widened value, since both round the same exact value once.
FP8EMU_HD constexpr std::uint8_t encode_f32_bits_with(std::uint32_t bits, FormatSpec f, Policy p,
                                                      std::uint32_t random_bits = 0) {
  return encode_bits<Binary32Source>(bits, f, p, random_bits);
}

/// Code of `f` -> fp32 bits, exact for every finite code (every value of these formats is an fp32
/// value). NaN codes give the canonical 0x7FFFFFFF (sign dropped, as CUDA's decoders), Inf codes
/// +-Inf. Bits above bits() are ignored.
FP8EMU_HD constexpr std::uint32_t decode_code_to_f32_bits(std::uint32_t code, FormatSpec f) {
  code &= (f.sign_mask() << 1) - 1u;
  if (f.fnuz && code == f.nan_code()) return 0x7FFFFFFFu;
  const std::uint32_t sign = (code & f.sign_mask()) ? 0x80000000u : 0u;
  const std::uint32_t mag = code & f.top_code();
  const int m = f.mantissa_bits;
  if (mag > f.max_finite_code()) {
    return (f.has_inf && mag == f.inf_code()) ? (sign | 0x7F800000u) : 0x7FFFFFFFu;
  }
  const std::uint32_t e = mag >> m;
  std::uint32_t man = mag & ((1u << m) - 1u);
  if (e != 0) return sign | ((e - std::uint32_t(f.bias) + 127u) << 23) | (man << (23 - m));
  if (man == 0) return sign;
  int p = m - 1;  // subnormal: man * 2^(emin - m); the leading one becomes implicit
  while (!(man & (1u << p))) --p;
  man &= ~(1u << p);
  return sign | (std::uint32_t(f.emin() - m + p + 127) << 23) | (man << (23 - p));
}

}  // namespace core
}  // namespace fp8emu
