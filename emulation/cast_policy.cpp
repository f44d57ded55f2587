// Named conversion policies and the array cast under any of them (see
// include/fp8emu/emulation/cast_policy.hpp).
#include "fp8emu/emulation/cast_policy.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/util/error.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

template <class Rows, class Name>
std::string join_names(const Rows& rows, Name name) {
  std::string s;
  for (const auto& r : rows) s += (s.empty() ? "" : ", ") + std::string(name(r));
  return s;
}

// The registry's code formats (every family but the wide 16-bit ones), comma-separated.
std::string code_format_names() {
  std::string s;
  for (const FormatRecord& r : kFormats)
    if (r.family != FormatFamily::kWide) s += (s.empty() ? "" : ", ") + std::string(r.spec->name);
  return s;
}

constexpr bool policy_table_in_order() {
  for (int i = 0; i < kPolicyPresetCount; ++i)
    if (int(kPolicyPresets[i].id) != i) return false;
  return true;
}
static_assert(policy_table_in_order(), "kPolicyPresets must be indexed by PolicyName");

float f32_of(const void* x, CastSource src, std::size_t i) {
  switch (src) {
    case CastSource::kF32: return static_cast<const float*>(x)[i];
    case CastSource::kF16: return core::bits_to_f32(widen_f16_bits(static_cast<const std::uint16_t*>(x)[i]));
    case CastSource::kBF16: return core::bits_to_f32(core::bf16_to_f32_bits(static_cast<const std::uint16_t*>(x)[i]));
    case CastSource::kF64: break;
  }
  return 0.0f;  // unreachable: fp64 elements take cast_element's double branch
}

std::uint8_t cast_element(const void* x, CastSource src, std::size_t i, float scale, const CastPolicy& p,
                          std::uint32_t random) {
  if (src == CastSource::kF64) {
    double v = static_cast<const double*>(x)[i];
    if (scale != 1.0f && v == v) v *= double(scale);
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return cast_f64_bits(p, b, random);
  }
  float v = f32_of(x, src, i);
  if (scale != 1.0f && !core::f32_is_nan(v)) v = core::mul_rn(v, scale);
  return cast_f32_bits(p, core::f32_to_bits(v), random);
}

}  // namespace

std::uint32_t widen_f16_bits(std::uint16_t h) {
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0)
    return (std::uint32_t(h & 0x8000u) << 16) | 0x7FC00000u | (std::uint32_t(h & 0x3FFu) << 13);
  return core::half_to_f32_bits(h);
}

bool CastPolicy::is_cuda_satfinite_fp8() const {
  return !is_e8m0() && is_fp8(format) && from_float.rounding == Rounding::kNearestEven &&
         from_float.overflow == Overflow::kSatFinite && from_float.nan == NanEncoding::kCanonical;
}

std::string policy_names() {
  return join_names(kPolicyPresets, [](const PolicyPreset& p) { return p.name; });
}

std::string rounding_names() {
  return join_names(kRoundingNames, [](const RoundingName& r) { return r.name; });
}

CastPolicy resolve_cast_policy(Format format, const std::string& policy, const std::string& rounding,
                               const char* policy_what, const char* rounding_what) {
  const FormatRecord& rec = record_of(format);
  FP8EMU_CHECK(rec.family != FormatFamily::kWide, rec.spec->name,
               " is not a code format (casts go to ", code_format_names(), ")");
  const std::string name = policy.empty() ? "cuda" : policy;
  const PolicyPreset* preset = nullptr;
  for (const PolicyPreset& p : kPolicyPresets)
    if (name == p.name) preset = &p;
  FP8EMU_CHECK(preset, "unknown ", policy_what, " '", name, "' (accepted: ", policy_names(), ")");
  CastPolicy c;
  c.format = format;
  c.preset = preset;
  if (format == Format::kE8M0) {  // CUDA's E8M0 conversions only
    FP8EMU_CHECK(preset->e8m0, policy_what, " ", name, " does not apply to e8m0fnu (accepted: cuda, cuda-nosat: "
                 "CUDA's __nv_cvt_float_to_e8m0)");
    c.e8m0_satfinite = preset->from_float.overflow == Overflow::kSatFinite;
    FP8EMU_CHECK(rounding.empty() || rounding == "up" || rounding == "zero", rounding_what, " ", rounding,
                 " does not apply to e8m0fnu (accepted: up, CUDA's default, or zero)");
    c.e8m0_round_up = rounding != "zero";
    return c;
  }
  const bool fp8_ocp = format == Format::kE4M3 || format == Format::kE5M2;
  FP8EMU_CHECK(!preset->fp8_only || fp8_ocp, policy_what, " ", name, " applies to e4m3fn and e5m2 only (PyTorch's "
               "casts to ", rec.spec->name, " are not modelled)");
  c.from_float = preset->from_float;
  c.from_double = preset->from_double;
  // PyTorch 2.13 (pytorch#178817) changed e4m3fn's overflow only (finite and infinite).
  if (preset->id == PolicyName::kPyTorch213 && format != Format::kE4M3)
    c.from_float = c.from_double = kPolicyPresets[int(PolicyName::kPyTorch)].from_float;
  c.double_via_float = preset->double_via_float;
  const std::string r = rounding.empty() ? "nearest" : rounding;
  const RoundingName* found = nullptr;
  for (const RoundingName& rn : kRoundingNames)
    if (r == rn.name) found = &rn;
  FP8EMU_CHECK(found, "unknown ", rounding_what, " '", r, "' (accepted: ", rounding_names(), ")");
  c.from_float.rounding = c.from_double.rounding = found->rounding;
  return c;
}

std::uint8_t cast_f32_bits(const CastPolicy& p, std::uint32_t bits, std::uint32_t random_bits) {
  if (p.is_e8m0()) return core::e8m0_from_f32_bits(bits, p.e8m0_satfinite, p.e8m0_round_up);
  return core::encode_f32_bits_with(bits, spec_of(p.format), p.from_float, random_bits);
}

std::uint8_t cast_f64_bits(const CastPolicy& p, std::uint64_t bits, std::uint32_t random_bits) {
  if (p.is_e8m0()) return core::e8m0_from_f64_bits(bits, p.e8m0_satfinite, p.e8m0_round_up);
  if (p.double_via_float) {
    double d = 0.0;
    std::memcpy(&d, &bits, sizeof d);
    return cast_f32_bits(p, core::f32_to_bits(float(d)), random_bits);  // RNE to fp32 (default environment)
  }
  return core::encode_f64_bits(bits, spec_of(p.format), p.from_double, random_bits);
}

void cast_array(const void* x, CastSource src, std::size_t n, float scale, const CastPolicy& p, std::uint32_t seed,
                std::uint8_t* q) {
  if (n == 0) return;
  if (p.is_cuda_satfinite_fp8() && src != CastSource::kF64) {
    switch (src) {
      case CastSource::kF32: return quantize_f32(static_cast<const float*>(x), n, scale, p.format, q, nullptr);
      case CastSource::kBF16:
        return quantize_bf16(static_cast<const std::uint16_t*>(x), n, scale, p.format, q, nullptr);
      case CastSource::kF16:
        return quantize_f16(static_cast<const std::uint16_t*>(x), n, scale, p.format, q, nullptr);
      case CastSource::kF64: break;
    }
  }
  if (p.stochastic()) {
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < n; ++i) q[i] = cast_element(x, src, i, scale, p, std::uint32_t(rng()));
    return;
  }
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) q[i] = cast_element(x, src, std::size_t(i), scale, p, 0u);
}

void decode_array(const std::uint8_t* q, std::size_t n, Format fmt, float scale_inv, float* y) {
  const FormatRecord& rec = record_of(fmt);
  FP8EMU_CHECK(rec.family != FormatFamily::kWide, rec.spec->name, " is not a code format (decode takes codes of ",
               code_format_names(), ")");
  float table[256];
  for (std::uint32_t c = 0; c < 256; ++c) {
    const std::uint32_t bits = fmt == Format::kE8M0 ? core::e8m0_to_f32_bits(std::uint8_t(c))
                                                    : core::decode_code_to_f32_bits(c, *rec.spec);
    const float v = core::bits_to_f32(bits);
    table[c] = scale_inv == 1.0f || core::f32_is_nan(v) ? v : core::mul_rn(v, scale_inv);
  }
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = table[q[i]];
}

}  // namespace fp8emu::emu
