// CPU quantize / dequantize kernels (see include/fp8emu/emulation/quantize.hpp).
#include "fp8emu/emulation/quantize.hpp"

#include <array>
#include <cmath>

#include "amax.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

std::array<float, 256> make_table(FormatSpec f) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = core::fp8_to_f32(std::uint8_t(c), f);
  return t;
}

}  // namespace

const float* decode_table(Format fmt) {
  static const std::array<float, 256> e4m3 = make_table(kSpecE4M3);
  static const std::array<float, 256> e5m2 = make_table(kSpecE5M2);
  return fmt == Format::kE4M3 ? e4m3.data() : e5m2.data();
}

// The per-tensor cast is the bulk kernel (bulk_convert.hpp), which computes the same bytes, amax
// and counts (tests/emulation/test_bulk_convert.cpp).
QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                       float* amax) {
  QuantizeStats st;
  quantize_f32(x, n, scale, fmt, q, amax, &st);
  return st;
}

void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) {
  dequantize_to_f32(q, n, scale_inv, fmt, y);
}

float compute_amax(const float* x, std::size_t n) {
  float m = 0.0f;
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) reduction(max : m) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) m = detail::amax_step(m, x[i]);
  return m;
}

}  // namespace fp8emu::emu
