// CPU quantize / dequantize kernels (see include/fp8emu/emulation/quantize.hpp).
#include "fp8emu/emulation/quantize.hpp"

#include <array>
#include <cmath>

#include "amax.hpp"
#include "fp8emu/core/convert.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

std::array<float, 256> make_table(FormatSpec f) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = core::fp8_to_f32(std::uint8_t(c), f);
  return t;
}

// The body of quantize for a format known at compile time, so the core conversion is inlined
// with constant field widths.
template <const FormatSpec& F>
QuantizeStats quantize_impl(const float* x, std::size_t n, float scale, std::uint8_t* q,
                            float* amax) {
  const std::uint8_t mag_mask = std::uint8_t(F.top_code());
  float local_amax_total = 0.0f;
  std::uint64_t sat = 0, under = 0, nans = 0;
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (count >= detail::kParallelMinElements) \
    reduction(max : local_amax_total) \
    reduction(+ : sat, under, nans)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const float v = x[i];
    const float s = v * scale;
    const std::uint8_t c = core::f32_to_fp8(s, F, Saturation::kSatFinite);
    q[i] = c;
    local_amax_total = detail::amax_step(local_amax_total, v);  // NaN ignored, as fmaxf
    const bool is_nan = std::isnan(v);
    nans += is_nan;
    sat += F.overflows(std::fabs(s));  // false for NaN
    under += (!is_nan && v != 0.0f && std::isfinite(v) && (c & mag_mask) == 0);
  }
  if (amax) *amax = std::fmax(*amax, local_amax_total);
  QuantizeStats st;
  st.count = n;
  st.saturated = sat;
  st.underflow = under;
  st.nan = nans;
  return st;
}

}  // namespace

const float* decode_table(Format fmt) {
  static const std::array<float, 256> e4m3 = make_table(kSpecE4M3);
  static const std::array<float, 256> e5m2 = make_table(kSpecE5M2);
  return fmt == Format::kE4M3 ? e4m3.data() : e5m2.data();
}

QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                       float* amax) {
  return fmt == Format::kE4M3 ? quantize_impl<kSpecE4M3>(x, n, scale, q, amax)
                              : quantize_impl<kSpecE5M2>(x, n, scale, q, amax);
}

void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) {
  const float* table = decode_table(fmt);
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = table[q[i]] * scale_inv;
}

float compute_amax(const float* x, std::size_t n) {
  float m = 0.0f;
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) reduction(max : m) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) m = detail::amax_step(m, x[i]);
  return m;
}

}  // namespace fp8emu::emu
