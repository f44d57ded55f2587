// Quantize kernel: TE cast semantics (q = Q(RN(x*scale)), amax ignoring NaN, SATFINITE), values
// worked by hand from the OCP encoding: 1.0 = 0.0111.000 = 0x38, -2.5 = -1.25*2^1 = 1.1000.010 = 0xC2,
// 1.5 = 0.0111.100 = 0x3C, E4M3 max = 0.1111.110 = 0x7E.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"

using namespace fp8emu;

TEST_CASE("quantize E4M3 with NaN, Inf, overflow and underflow", "[emulation][quantize][e4m3]") {
  const std::vector<float> x{1.0f, -2.5f, 1000.0f, -INFINITY, NAN, 0x1p-10f, 0x1.8p-10f, 0.0f, -0.0f};
  const std::vector<std::uint8_t> want{0x38, 0xC2, 0x7E, 0xFE, 0x7F, 0x00, 0x01, 0x00, 0x80};
  std::vector<std::uint8_t> q(x.size());
  float amax = 0.0f;
  const emu::QuantizeStats st = emu::quantize(x.data(), x.size(), 1.0f, Format::kE4M3, q.data(), &amax);
  CHECK(q == want);
  CHECK(std::isinf(amax));  // +Inf is kept by amax (|-Inf|), NaN ignored
  CHECK(st.count == 9);
  CHECK(st.saturated == 2);  // 1000 and -Inf
  CHECK(st.underflow == 1);  // 2^-10 -> 0 (tie to even); 1.5*2^-10 -> 2^-9
  CHECK(st.nan == 1);
}

TEST_CASE("amax ignores NaN and max-accumulates into the existing value", "[emulation][quantize]") {
  const std::vector<float> x{NAN, -3.0f, 2.0f, NAN};
  std::vector<std::uint8_t> q(x.size());
  float amax = 0.0f;
  emu::quantize(x.data(), x.size(), 1.0f, Format::kE5M2, q.data(), &amax);
  CHECK(amax == 3.0f);
  float big = 5000.0f;
  emu::quantize(x.data(), x.size(), 1.0f, Format::kE5M2, q.data(), &big);
  CHECK(big == 5000.0f);
  std::vector<float> only_nan{NAN, NAN};
  float a0 = 0.0f;
  emu::quantize(only_nan.data(), 2, 1.0f, Format::kE4M3, q.data(), &a0);
  CHECK(a0 == 0.0f);
  CHECK(emu::compute_amax(x.data(), x.size()) == 3.0f);
}

TEST_CASE("scale multiplies before the cast, dequantize multiplies by scale_inv", "[emulation][quantize]") {
  const std::vector<float> x{3.0f, -3.0f};
  std::vector<std::uint8_t> q(2);
  emu::quantize(x.data(), 2, 0.5f, Format::kE4M3, q.data(), nullptr);
  CHECK(q[0] == 0x3C);  // 1.5
  CHECK(q[1] == 0xBC);
  std::vector<float> y(2);
  emu::dequantize(q.data(), 2, emu::scale_inv_of(0.5f), Format::kE4M3, y.data());
  CHECK(y[0] == 3.0f);
  CHECK(y[1] == -3.0f);
  // scale_inv = RN(1/scale): 1/3 in fp32 is 0x1.555556p-2 (round to nearest of 0x1.5555555...p-2).
  CHECK(emu::scale_inv_of(3.0f) == 0x1.555556p-2f);
}

TEST_CASE("quantize is identical for 1 and 2 threads", "[emulation][quantize][determinism]") {
  std::vector<float> x(100003);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f) * std::exp2(float(i % 50) - 25.0f);
  x[777] = NAN;
  x[4242] = -INFINITY;
  std::vector<std::uint8_t> q1(x.size()), q2(x.size());
  float a1 = 0, a2 = 0;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto s1 = emu::quantize(x.data(), x.size(), 3.7f, Format::kE5M2, q1.data(), &a1);
  omp_set_num_threads(2);
  const auto s2 = emu::quantize(x.data(), x.size(), 3.7f, Format::kE5M2, q2.data(), &a2);
  omp_set_num_threads(saved);
  CHECK(q1 == q2);
  CHECK(std::memcmp(&a1, &a2, 4) == 0);
  CHECK(s1.saturated == s2.saturated);
  CHECK(s1.underflow == s2.underflow);
}

TEST_CASE("saturation counts only values that overflow under round-to-nearest-even", "[emulation][quantize]") {
  // E4M3: 460 and 464 round to 448 (464 = 448 + half ulp 16, tie to even 0.1111.110): not clipped;
  // 465 and Inf are. E5M2: 61439 rounds to 57344; 61440 ties to the odd max's even neighbour 2^16:
  // clipped.
  std::vector<float> x4{460.0f, 464.0f, 465.0f, INFINITY};
  std::vector<std::uint8_t> q(4);
  CHECK(emu::quantize(x4.data(), 4, 1.0f, Format::kE4M3, q.data(), nullptr).saturated == 2);
  CHECK(q == std::vector<std::uint8_t>{0x7E, 0x7E, 0x7E, 0x7E});
  std::vector<float> x5{61439.0f, 61440.0f};
  CHECK(emu::quantize(x5.data(), 2, 1.0f, Format::kE5M2, q.data(), nullptr).saturated == 1);
}

TEST_CASE("amax ignores signaling NaNs too (glibc's fmax would return NaN and restart the max)",
          "[emulation][quantize]") {
  // 0x7F800001 and 0xFFBFFFFF are signaling NaNs; Inf before them must survive, as with CUDA's fmaxf.
  const std::uint32_t snan_bits[] = {0x7F800001u, 0xFFBFFFFFu};
  float snan[2];
  std::memcpy(snan, snan_bits, sizeof snan);
  const std::vector<float> x{INFINITY, snan[0], 2.0f, snan[1], -3.0f};
  CHECK(std::isinf(emu::compute_amax(x.data(), x.size())));
  std::vector<std::uint8_t> q(x.size());
  float amax = 0.0f;
  const emu::QuantizeStats st = emu::quantize(x.data(), x.size(), 1.0f, Format::kE4M3, q.data(), &amax);
  CHECK(std::isinf(amax));
  CHECK(st.nan == 2);
  const std::vector<float> y{snan[0], 3.0f, snan[1]};
  CHECK(emu::compute_amax(y.data(), y.size()) == 3.0f);
}

TEST_CASE("FP8 kernels reject formats that are not FP8, by name", "[quantize][registry]") {
  const float x[2] = {1.0f, 2.0f};
  std::uint8_t q[2] = {0, 0};
  float y[2] = {0, 0};
  const char* const kTake = " is not an FP8 kernel format (the FP8 kernels take e4m3fn, e5m2, e4m3fnuz and e5m2fnuz)";
  CHECK_THROWS_WITH(emu::quantize(x, 2, 1.0f, Format::kE2M1, q, nullptr), std::string("quantize: format e2m1fn") + kTake);
  CHECK_THROWS_WITH(emu::dequantize(q, 2, 1.0f, Format::kE8M0, y), std::string("dequantize: format e8m0fnu") + kTake);
  float d = 0.0f;
  CHECK_THROWS_WITH(emu::gemm_fp8_tn(1, 1, 1, q, Format::kE8M0, 1.0f, q, Format::kE4M3, 1.0f,
                                     {Accumulation::kFp32, 0}, &d),
                    std::string("GEMM operand A: format e8m0fnu") + kTake);
  // The CPU kernels take the FNUZ formats; a GEMM does not mix them with OCP ones, and the GPU's
  // kernels refuse them by name.
  CHECK_NOTHROW(emu::dequantize(q, 2, 1.0f, Format::kE4M3FNUZ, y));
  CHECK_THROWS_WITH(emu::gemm_fp8_tn(1, 1, 1, q, Format::kE4M3FNUZ, 1.0f, q, Format::kE4M3, 1.0f,
                                     {Accumulation::kFp32, 0}, &d),
                    "GEMM: operands e4m3fnuz and e4m3fn mix OCP and FNUZ FP8 (no GPU multiplies the two)");
  CHECK_THROWS_WITH(emu::gemm_fp8_tn(1, 1, 1, q, Format::kE5M2FNUZ, 1.0f, q, Format::kE5M2FNUZ, 1.0f,
                                     {Accumulation::kFp32, 0}, &d),
                    Catch::Contains("E5M2 x E5M2 is not supported"));
  CHECK_THROWS_WITH(emu::require_ocp_fp8(Format::kE4M3FNUZ, "cast_transpose"),
                    "cast_transpose: format e4m3fnuz runs on the emulated and element backends only (the GPU's FP8 "
                    "kernels and cuBLASLt take e4m3fn and e5m2)");
  // The block casts take every OCP MX element format (FP8, FP6, FP4), and nothing else.
  CHECK_THROWS_WITH(emu::quantize_mxfp8(x, 1, 2, emu::BlockAxis::kRowwise, Format::kE4M3FNUZ,
                                        E8M0Rule::kTransformerEngine, nullptr),
                    "block quantize: format e4m3fnuz is not a block-scaled element format (e4m3fn, e5m2, e2m3fn, "
                    "e3m2fn, e2m1fn)");
  CHECK_THROWS_WITH(emu::quantize_mxfp8(x, 1, 2, emu::BlockAxis::kRowwise, Format::kBFloat16,
                                        E8M0Rule::kTransformerEngine, nullptr),
                    "block quantize: format bfloat16 is not a block-scaled element format (e4m3fn, e5m2, e2m3fn, "
                    "e3m2fn, e2m1fn)");
  CHECK_NOTHROW(emu::quantize_mxfp8(x, 1, 2, emu::BlockAxis::kRowwise, Format::kE2M3, E8M0Rule::kTransformerEngine,
                                    nullptr));
}
