/// \file cast_policy.hpp
/// \brief The named conversion policies as records (a registry, as format_spec.hpp is for formats
/// and core/accumulation.hpp for accumulation models), their resolution for one target format and
/// a rounding mode, and the array cast under any of them. Host only.
///
/// The names are the values of `fp8emu convert --policy` and of the Python module's
/// `fp8emu.cast(policy=...)`; each row points at the core::encode_bits presets of core/encode.hpp,
/// which reproduce the systems named (docs/conversion-policies.md has the evidence):
///
///     cuda                CUDA __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8 (__NV_SATFINITE), the
///                         FP6/FP4 conversions, __nv_cvt_float_to_e8m0 (cudaRoundPosInf, satfinite)
///     cuda-nosat          the same with __NV_NOSAT
///     ml_dtypes           ml_dtypes astype (non-saturating)
///     ml_dtypes-saturate  ml_dtypes' C++ ConvertFrom<kSaturate=true>
///     pytorch             PyTorch c10 Float8_e4m3fn(float) / Float8_e5m2(float), <= 2.12
///     pytorch-2.13        PyTorch >= 2.13 (pytorch#178817: e4m3fn finite overflow and +-Inf saturate)
///
/// Rounding names (`--rounding`, `rounding=`): nearest (ties to even), zero, up (toward +Inf), down
/// (toward -Inf), stochastic (32 random bits per element); E8M0 takes up (CUDA's default) or zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fp8emu/core/encode.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// Run-time selector of a named policy: an index into kPolicyPresets.
enum class PolicyName : std::uint8_t { kCuda, kCudaNoSat, kMlDtypes, kMlDtypesSaturate, kPyTorch, kPyTorch213 };

/// One named policy.
struct PolicyPreset {
  PolicyName id;
  const char* name;        ///< "cuda", "ml_dtypes", ...
  const char* reproduces;  ///< What it reproduces, for help texts and docstrings.
  Policy from_float;       ///< fp32 inputs (fp16 and bfloat16 inputs widen to fp32 exactly first).
  Policy from_double;      ///< fp64 inputs: one rounding from the exact double.
  /// fp64 inputs are rounded to fp32 (RNE) first and then cast with from_float, as the system's
  /// conversion takes a float (PyTorch's c10 constructors).
  bool double_via_float;
  bool fp8_only;  ///< Modelled for e4m3fn and e5m2 only (PyTorch).
  bool e8m0;      ///< Applies to E8M0 (CUDA's __nv_cvt_*_to_e8m0; satfinite unless kNoSat).
};

/// The presets, indexed by PolicyName. ml_dtypes' float64 arrays: 0.7.0 rounds them once (this
/// table's from_double); 0.6.0 went through float32 first (docs/conversion-policies.md).
inline constexpr PolicyPreset kPolicyPresets[] = {
    {PolicyName::kCuda, "cuda",
     "CUDA __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8 with __NV_SATFINITE; the FP6/FP4/E8M0 conversions",
     Policy::cuda_float(true), Policy::cuda_double(true), false, false, true},
    {PolicyName::kCudaNoSat, "cuda-nosat", "CUDA __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8 with __NV_NOSAT",
     Policy::cuda_float(false), Policy::cuda_double(false), false, false, true},
    {PolicyName::kMlDtypes, "ml_dtypes", "ml_dtypes astype (non-saturating)", Policy::ml_dtypes(),
     Policy::ml_dtypes(), false, false, false},
    {PolicyName::kMlDtypesSaturate, "ml_dtypes-saturate", "ml_dtypes C++ ConvertFrom<kSaturate=true>",
     Policy::ml_dtypes_saturate(), Policy::ml_dtypes_saturate(), false, false, false},
    {PolicyName::kPyTorch, "pytorch", "PyTorch c10 Float8_e4m3fn(float) / Float8_e5m2(float), <= 2.12",
     Policy::pytorch(), Policy::pytorch(), true, true, false},
    {PolicyName::kPyTorch213, "pytorch-2.13", "PyTorch >= 2.13 (e4m3fn finite overflow and +-Inf saturate)",
     Policy::pytorch_2_13(), Policy::pytorch_2_13(), true, true, false},
};
inline constexpr int kPolicyPresetCount = int(sizeof(kPolicyPresets) / sizeof(kPolicyPresets[0]));

/// One rounding name.
struct RoundingName {
  Rounding rounding;
  const char* name;
};
/// The rounding names of element formats, in help-text order.
inline constexpr RoundingName kRoundingNames[] = {
    {Rounding::kNearestEven, "nearest"}, {Rounding::kTowardZero, "zero"},     {Rounding::kTowardPositive, "up"},
    {Rounding::kTowardNegative, "down"}, {Rounding::kStochastic, "stochastic"},
};

/// A policy resolved for one target format and rounding: what every element of a cast does.
struct CastPolicy {
  Format format = Format::kE4M3;
  const PolicyPreset* preset = &kPolicyPresets[0];
  Policy from_float;            ///< Element formats (not E8M0): fp32 inputs.
  Policy from_double;           ///< Element formats: fp64 inputs (unless double_via_float).
  bool double_via_float = false;
  bool e8m0_satfinite = true;   ///< E8M0: CUDA __NV_SATFINITE.
  bool e8m0_round_up = true;    ///< E8M0: cudaRoundPosInf (else cudaRoundZero).

  bool is_e8m0() const { return format == Format::kE8M0; }
  bool stochastic() const { return !is_e8m0() && from_float.rounding == Rounding::kStochastic; }
  /// True when the cast is CUDA's satfinite round-to-nearest cast to an OCP FP8 format: the SIMD
  /// kernels of bulk_convert.hpp compute it.
  bool is_cuda_satfinite_fp8() const;
};

/// The presets' names, comma-separated ("cuda, cuda-nosat, ..."), for help texts and errors.
std::string policy_names();
/// The rounding names, comma-separated.
std::string rounding_names();

/// Resolves a policy name and a rounding name (empty: the default, nearest; E8M0: up) for a target
/// format. `policy_what` and `rounding_what` name the arguments in messages ("--policy",
/// "--rounding" for the CLI).
/// \throws fp8emu::Error for an unknown name, a format that is not a code format (binary16,
///         bfloat16), a PyTorch policy for a format other than e4m3fn/e5m2, a policy other than
///         cuda/cuda-nosat or a rounding other than up/zero for E8M0.
CastPolicy resolve_cast_policy(Format format, const std::string& policy, const std::string& rounding,
                               const char* policy_what = "--policy", const char* rounding_what = "--rounding");

/// The code of one fp32 value (bits) under `p`; `random_bits` feeds stochastic rounding.
std::uint8_t cast_f32_bits(const CastPolicy& p, std::uint32_t bits, std::uint32_t random_bits);
/// The code of one fp64 value (bits) under `p` (via fp32 when p.double_via_float).
std::uint8_t cast_f64_bits(const CastPolicy& p, std::uint64_t bits, std::uint32_t random_bits);

/// binary16 bits -> fp32 bits for a cast: exact, a NaN keeping its sign and payload (quiet bit set).
/// CUDA's widening (core::half_to_f32_bits) drops the sign of NaN; the policies that read it
/// (ml_dtypes, PyTorch) see it kept, as those libraries do, and CUDA's canonical NaN ignores it.
std::uint32_t widen_f16_bits(std::uint16_t h);

/// Element type of a cast's input array.
enum class CastSource : std::uint8_t {
  kF32,   ///< float
  kF64,   ///< double
  kF16,   ///< IEEE binary16 bits (widened exactly; NaN keeps its sign and payload)
  kBF16,  ///< bfloat16 bits (widened exactly)
};

/// Casts `n` values to codes of p.format under `p`, elementwise (any layout):
///   fp32 / fp16 / bf16:  code = cast(RN32(widen(x) * scale))    one fp32 multiply, skipped for NaN
///   fp64:                code = cast(RN64(x * double(scale)))   one fp64 multiply, skipped for NaN
/// (scale == 1 multiplies exactly, so the cast is then a function of x alone). Stochastic rounding
/// draws one 32-bit word per element, in index order, from std::mt19937(seed) (as `fp8emu convert
/// --rounding stochastic --seed`); `seed` is ignored otherwise. CUDA's satfinite RNE cast of fp32,
/// fp16 and bf16 to e4m3fn/e5m2 runs on the SIMD kernels of bulk_convert.hpp, every other cast on
/// the element encoder (core/encode.hpp), OpenMP-parallel except for stochastic rounding. The codes
/// are identical for any thread count. `x` and `q` must not overlap.
/// \param x  Shape: [n] elements of `src`.  \param q  Shape: [n] codes (low bits; FP6/FP4 in 6/4 bits).
void cast_array(const void* x, CastSource src, std::size_t n, float scale, const CastPolicy& p, std::uint32_t seed,
                std::uint8_t* q);

/// Decodes `n` codes of `fmt` (any code format, E8M0 included) to fp32: y = RN(value(q) * scale_inv)
/// (exact when scale_inv == 1). NaN codes give the canonical NaN 0x7FFFFFFF; code bits above the
/// format's width are ignored. \throws fp8emu::Error for binary16 / bfloat16.
void decode_array(const std::uint8_t* q, std::size_t n, Format fmt, float scale_inv, float* y);

}  // namespace fp8emu::emu
