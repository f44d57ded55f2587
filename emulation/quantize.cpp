// CPU quantize / dequantize kernels (see include/fp8emu/emulation/quantize.hpp).
#include "fp8emu/emulation/quantize.hpp"

#include <array>
#include <cmath>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/util/error.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

std::array<float, 256> make_table(FormatSpec f) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = core::fp8_to_f32(std::uint8_t(c), f);
  return t;
}

}  // namespace

void require_fp8(Format fmt, const char* what) {
  FP8EMU_CHECK(is_fp8_or_fnuz(fmt), what, ": format ", format_name(fmt),
               " is not an FP8 kernel format (the FP8 kernels take e4m3fn, e5m2, e4m3fnuz and e5m2fnuz)");
}

void require_ocp_fp8(Format fmt, const char* what) {
  FP8EMU_CHECK(is_fp8(fmt), what, ": format ", format_name(fmt),
               is_fp8_or_fnuz(fmt) ? " runs on the emulated and element backends only (the GPU's FP8 kernels "
                                     "and cuBLASLt take e4m3fn and e5m2)"
                                   : " is not an FP8 kernel format (the GPU's FP8 kernels take e4m3fn and e5m2)");
}

void require_block_element(Format fmt, const char* what) {
  FP8EMU_CHECK(is_mx_element(fmt), what, ": format ", format_name(fmt),
               " is not a block-scaled element format (e4m3fn, e5m2, e2m3fn, e3m2fn, e2m1fn)");
}

const float* decode_table(Format fmt) {
  FP8EMU_CHECK(is_mx_element(fmt) || is_fp8_or_fnuz(fmt), "decode_table: format ", format_name(fmt),
               " is not an element format of the FP8 casts (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e2m3fn, e3m2fn, "
               "e2m1fn)");
  static const std::array<std::array<float, 256>, kFormatCount> tables = [] {
    std::array<std::array<float, 256>, kFormatCount> t{};
    for (const FormatRecord& r : kFormats)
      if (is_mx_element(r.id) || is_fp8_or_fnuz(r.id)) t[std::size_t(r.id)] = make_table(*r.spec);
    return t;
  }();
  return tables[std::size_t(fmt)].data();
}

// The per-tensor cast is the bulk kernel (bulk_convert.hpp), which computes the same bytes, amax
// and counts (tests/emulation/test_bulk_convert.cpp).
QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                       float* amax) {
  require_fp8(fmt, "quantize");
  QuantizeStats st;
  quantize_f32(x, n, scale, fmt, q, amax, &st);
  return st;
}

void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) {
  require_fp8(fmt, "dequantize");
  dequantize_to_f32(q, n, scale_inv, fmt, y);
}

// A max over core::amax_bits (NaN ignored, as TE's fmaxf): exact, so any split over threads gives
// the same value.
float compute_amax(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) reduction(max : m) if (count >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < count; ++i) m = core::max_u32(m, core::amax_bits(x[i]));
  return core::bits_to_f32(m);
}

}  // namespace fp8emu::emu
