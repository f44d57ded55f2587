// The bulk FP8 cast against CUDA's own host code in cuda_fp8.h (CUDA 13; compiled with g++, no GPU):
// TE's per-tensor cast is __nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE, fmt) per element, with
// bf16 / fp16 inputs widened to fp32 by CUDA's __bfloat162float / __half2float first.
#include <cuda_fp8.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8emu/emulation/bulk_convert.hpp"

using namespace fp8emu;

namespace {

const float kScales[] = {1.0f, 0.3f, 1.0f / 3.0f, max_finite_f32(Format::kE4M3) / 3.7f, 7.77e-3f, 6.1e4f, 0x1p-20f, -2.5e-3f};

__nv_fp8_interpretation_t nv_format(Format f) { return f == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2; }

// Max |x| over non-NaN x (CUDA's fmaxf ignores every NaN).
float amax_of(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x)
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  return m;
}

void check_bytes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                 const std::vector<float>& wide) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  std::uint32_t first_bits = 0;
  if (bad) std::memcpy(&first_bits, &wide[first], 4);
  INFO(bad << " mismatches; first at " << first << ", input bits 0x" << std::hex << first_bits);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bulk fp32 cast equals __nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE) on 4 Mi inputs",
          "[cuda-oracle][bulk]") {
  // Half random bit patterns (every class: NaN, Inf, subnormal), half normal-distributed values
  // around the scales' overflow and underflow edges.
  std::mt19937 g(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(std::size_t(1) << 22);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i % 2) {
      const std::uint32_t u = std::uint32_t(g());
      std::memcpy(&x[i], &u, 4);
    } else {
      x[i] = normal(g) * std::ldexp(1.0f, int(g() % 41) - 20);
    }
  }
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    for (float scale : kScales) {
      INFO(spec_of(fmt).name << " scale " << scale);
      std::vector<std::uint8_t> want(x.size()), got(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = __nv_cvt_float_to_fp8(x[i] * scale, __NV_SATFINITE, nv_format(fmt));
      float amax = 0.0f;
      emu::quantize_f32(x.data(), x.size(), scale, fmt, got.data(), &amax);
      check_bytes(got, want, x);
      CHECK(amax == amax_of(x));
    }
  }
}

TEST_CASE("bulk bf16 and fp16 casts equal CUDA's widening then __nv_cvt_float_to_fp8 for all 2^16 inputs",
          "[cuda-oracle][bulk]") {
  std::vector<std::uint16_t> h(0x10000);
  for (std::uint32_t i = 0; i < 0x10000u; ++i) h[i] = std::uint16_t(i);
  std::vector<float> wide_bf16(h.size()), wide_f16(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    __nv_bfloat16_raw b;
    b.x = h[i];
    __half_raw r;
    r.x = h[i];
    wide_bf16[i] = __bfloat162float(__nv_bfloat16(b));
    wide_f16[i] = __half2float(__half(r));
  }
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    // Scale 1: CUDA's direct 16-bit entry points.
    std::vector<std::uint8_t> want_b(h.size()), want_h(h.size()), got(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      __nv_bfloat16_raw b;
      b.x = h[i];
      __half_raw r;
      r.x = h[i];
      want_b[i] = __nv_cvt_bfloat16raw_to_fp8(b, __NV_SATFINITE, nv_format(fmt));
      want_h[i] = __nv_cvt_halfraw_to_fp8(r, __NV_SATFINITE, nv_format(fmt));
    }
    INFO(spec_of(fmt).name);
    emu::quantize_bf16(h.data(), h.size(), 1.0f, fmt, got.data(), nullptr);
    check_bytes(got, want_b, wide_bf16);
    emu::quantize_f16(h.data(), h.size(), 1.0f, fmt, got.data(), nullptr);
    check_bytes(got, want_h, wide_f16);
    for (float scale : kScales) {
      INFO("scale " << scale);
      float amax_b = 0.0f, amax_h = 0.0f;
      for (std::size_t i = 0; i < h.size(); ++i) {
        want_b[i] = __nv_cvt_float_to_fp8(wide_bf16[i] * scale, __NV_SATFINITE, nv_format(fmt));
        want_h[i] = __nv_cvt_float_to_fp8(wide_f16[i] * scale, __NV_SATFINITE, nv_format(fmt));
      }
      emu::quantize_bf16(h.data(), h.size(), scale, fmt, got.data(), &amax_b);
      check_bytes(got, want_b, wide_bf16);
      CHECK(amax_b == amax_of(wide_bf16));
      emu::quantize_f16(h.data(), h.size(), scale, fmt, got.data(), &amax_h);
      check_bytes(got, want_h, wide_f16);
      CHECK(amax_h == amax_of(wide_f16));
    }
  }
}
