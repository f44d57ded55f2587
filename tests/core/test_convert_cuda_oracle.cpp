// fp8emu's conversions against CUDA's own host code in cuda_fp8.h (CUDA 13), the oracle for
// "identical to __nv_cvt_float_to_fp8". The header compiles with plain g++ and runs without a GPU.
#include <cuda_fp8.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/emulation/quantize.hpp"

using namespace fp8emu;

namespace {
struct Combo {
  const FormatSpec* spec;
  Saturation sat;
  __nv_fp8_interpretation_t nv_fmt;
  __nv_saturation_t nv_sat;
  const char* name;
};
const Combo kCombos[] = {
    {&kSpecE4M3, Saturation::kSatFinite, __NV_E4M3, __NV_SATFINITE, "e4m3 satfinite"},
    {&kSpecE4M3, Saturation::kNoSat, __NV_E4M3, __NV_NOSAT, "e4m3 nosat"},
    {&kSpecE5M2, Saturation::kSatFinite, __NV_E5M2, __NV_SATFINITE, "e5m2 satfinite"},
    {&kSpecE5M2, Saturation::kNoSat, __NV_E5M2, __NV_NOSAT, "e5m2 nosat"},
};
}  // namespace

TEST_CASE("FP8 -> fp32 equals CUDA's fp8 -> half -> float for all 256 codes", "[cuda-oracle]") {
  for (int c = 0; c < 256; ++c) {
    for (const Combo& k : {kCombos[0], kCombos[2]}) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), k.nv_fmt);
      const float want = __half2float(__half(h));
      std::uint32_t want_bits;
      std::memcpy(&want_bits, &want, 4);
      INFO(k.spec->name << " code 0x" << std::hex << c);
      CHECK(core::decode_to_f32_bits(std::uint8_t(c), *k.spec) == want_bits);
    }
  }
}

TEST_CASE("quantize kernel equals the __nv_fp8_e4m3/e5m2 constructor of x*scale", "[cuda-oracle]") {
  // TE's cast: static_cast<__nv_fp8_*>(x * scale) (SATFINITE). Inputs: a sweep over many binades
  // with awkward scales, plus the specials.
  std::vector<float> x;
  for (int e = -40; e <= 40; ++e)
    for (int m = 0; m < 64; ++m) x.push_back(std::ldexp(1.0f + m / 64.0f + 1e-3f, e) * ((m & 1) ? -1 : 1));
  x.insert(x.end(), {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN});
  for (float scale : {1.0f, 0.3f, 1.0f / 3.0f, 7.77e-3f, 6.1e4f}) {
    std::vector<std::uint8_t> q4(x.size()), q5(x.size());
    emu::quantize(x.data(), x.size(), scale, Format::kE4M3, q4.data(), nullptr);
    emu::quantize(x.data(), x.size(), scale, Format::kE5M2, q5.data(), nullptr);
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i] << " scale = " << scale);
      CHECK(q4[i] == __nv_fp8_e4m3(x[i] * scale).__x);
      CHECK(q5[i] == __nv_fp8_e5m2(x[i] * scale).__x);
    }
  }
}
