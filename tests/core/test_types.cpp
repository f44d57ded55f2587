// Value types, numeric_limits, conversion policies (ml_dtypes / PyTorch / directed / stochastic /
// fnuz) and the Eigen integration. Oracles: ml_dtypes 0.6.0's own casts and finfo, recorded by
// scripts/record-ml-dtypes into tests/data/ml_dtypes; values worked by hand from the OCP specs and
// from docs/conversion-policies.md §Where they differ (each cited where used).
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "fp8emu/core/encode.hpp"
#include "fp8emu/eigen.hpp"
#include "fp8emu/types.hpp"

using namespace fp8emu;

namespace {

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
std::uint8_t enc(float x, const FormatSpec& f, Policy p, std::uint32_t r = 0) {
  return core::encode_f32_bits_with(bits(x), f, p, r);
}

std::vector<std::uint8_t> read_gz(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  REQUIRE(g != nullptr);
  std::vector<std::uint8_t> out;
  std::uint8_t buf[65536];
  int n;
  while ((n = gzread(g, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(g);
  return out;
}

const FormatSpec* const kMlTypes[] = {&kSpecE4M3, &kSpecE5M2, &kSpecE4M3FNUZ, &kSpecE5M2FNUZ,
                                      &kSpecE2M3, &kSpecE3M2, &kSpecE2M1};
const char* const kMlNames[] = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"};

}  // namespace

TEST_CASE("Policy::ml_dtypes equals ml_dtypes 0.6.0's float32 casts for every recorded input", "[types][ml_dtypes]") {
  const std::vector<std::uint8_t> rec = read_gz(FP8EMU_TEST_DATA_DIR "/ml_dtypes/casts-0.6.0.bin.gz");
  const std::size_t n = 4 * 65536;
  REQUIRE(rec.size() == n * 7);
  const std::uint32_t lows[] = {0x0000u, 0x8000u, 0x0001u, 0xFFFFu};
  for (int t = 0; t < 7; ++t) {
    std::size_t bad = 0;
    std::uint32_t first = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t in = (std::uint32_t(i % 65536) << 16) | lows[i / 65536];
      const std::uint8_t ours = core::encode_f32_bits_with(in, *kMlTypes[t], Policy::ml_dtypes());
      if (ours != rec[t * n + i] && bad++ == 0) first = in;
    }
    INFO(kMlNames[t] << ": first mismatching input bits 0x" << std::hex << first);
    CHECK(bad == 0);
  }
}

TEST_CASE("numeric_limits match ml_dtypes' finfo and the format specs", "[types][ml_dtypes]") {
  std::ifstream in(FP8EMU_TEST_DATA_DIR "/ml_dtypes/finfo-0.6.0.json");
  REQUIRE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  auto check = [&](auto tag, const char* name) {
    using T = decltype(tag);
    using L = std::numeric_limits<T>;
    const auto& f = j.at(name);
    INFO(name);
    CHECK(double(float(L::max())) == f.at("max").get<double>());
    CHECK(double(float(L::lowest())) == -f.at("max").get<double>());
    CHECK(double(float(L::min())) == f.at("smallest_normal").get<double>());
    CHECK(double(float(L::denorm_min())) == f.at("smallest_subnormal").get<double>());
    CHECK(double(float(L::epsilon())) == f.at("eps").get<double>());
    CHECK(L::min_exponent == f.at("minexp").get<int>() + 1);  // C: one more than numpy's minexp
    CHECK(L::max_exponent == f.at("maxexp").get<int>());
    CHECK(L::digits == f.at("nmant").get<int>() + 1);
  };
  check(float8_e4m3fn{}, "float8_e4m3fn");
  check(float8_e5m2{}, "float8_e5m2");
  check(float8_e4m3fnuz{}, "float8_e4m3fnuz");
  check(float8_e5m2fnuz{}, "float8_e5m2fnuz");
  check(float6_e2m3fn{}, "float6_e2m3fn");
  check(float6_e3m2fn{}, "float6_e3m2fn");
  check(float4_e2m1fn{}, "float4_e2m1fn");
  // Hand values: OCP OFP8 r1.0 Table 1 (E4M3 / E5M2); ml_dtypes C++ numeric_limits digits10 /
  // max_digits10 for float8_e4m3fn are 0 / 3 (floor(3 log10 2), 1 + ceil(4 log10 2)).
  using L4 = std::numeric_limits<float8_e4m3fn>;
  CHECK(L4::digits10 == 0);
  CHECK(L4::max_digits10 == 3);
  CHECK(!L4::has_infinity);
  CHECK(L4::has_quiet_NaN);
  CHECK(std::isnan(float(L4::quiet_NaN())));
  CHECK(std::numeric_limits<float8_e5m2>::has_infinity);
  CHECK(std::isinf(float(std::numeric_limits<float8_e5m2>::infinity())));
  CHECK(!std::numeric_limits<float4_e2m1fn>::has_quiet_NaN);
  // E8M0 (OCP MX v1.0 §5.4.1): 2^-127 .. 2^127, NaN 0xFF, unsigned.
  using L8 = std::numeric_limits<float8_e8m0fnu>;
  CHECK(float(L8::min()) == std::ldexp(1.0f, -127));
  CHECK(float(L8::max()) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(float(L8::quiet_NaN())));
  CHECK(!L8::is_signed);
}

TEST_CASE("every finite code round-trips through float, -0 and NaN codes behave", "[types]") {
  auto roundtrip = [](auto tag) {
    using T = decltype(tag);
    const FormatSpec& f = T::spec();
    for (std::uint32_t c = 0; c < (f.sign_mask() << 1); ++c) {
      const T v = T::from_bits(std::uint8_t(c));
      INFO(f.name << " code 0x" << std::hex << c);
      if (v.isnan()) {
        CHECK(std::isnan(float(v)));
        CHECK(!(v == v));
        continue;
      }
      if (v.isinf()) {  // the CUDA constructors saturate Inf (satfinite); nosat keeps it
        CHECK(T(float(v)).bits() == (c & f.sign_mask() ? 0xFB : 0x7B));
        CHECK(T::from_float(float(v), Policy::cuda_float(false)).bits() == c);
        continue;
      }
      CHECK(T(float(v)).bits() == c);
      CHECK(T(double(v)).bits() == c);
    }
  };
  roundtrip(float8_e4m3fn{});
  roundtrip(float8_e5m2{});
  roundtrip(float8_e4m3fnuz{});
  roundtrip(float8_e5m2fnuz{});
  roundtrip(float6_e2m3fn{});
  roundtrip(float6_e3m2fn{});
  roundtrip(float4_e2m1fn{});
  for (int c = 0; c < 255; ++c) CHECK(float8_e8m0fnu(float(float8_e8m0fnu::from_bits(std::uint8_t(c)))).bits() == c);
  CHECK(float8_e4m3fn(-0.0f) == float8_e4m3fn(0.0f));  // IEEE: -0 == +0
  CHECK(float8_e4m3fn(-0.0f).bits() == 0x80);
  CHECK(float8_e4m3fn(1.0f) < float8_e4m3fn(1.125f));
}

TEST_CASE("policies reproduce CUDA, ml_dtypes and PyTorch on the classes where they differ", "[types]") {
  // docs/conversion-policies.md §Where they differ (E4M3FN unless stated).
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Policy cuda_sat = Policy::cuda_float(true), cuda_nosat = Policy::cuda_float(false);
  const Policy mld = Policy::ml_dtypes(), mlds = Policy::ml_dtypes_saturate(), pt = Policy::pytorch(),
               pt13 = Policy::pytorch_2_13();
  // finite, |x| > 464: NaN (0x7F|s) / 448 (0x7E|s).
  for (float x : {465.0f, 1e30f}) {
    CHECK(enc(x, kSpecE4M3, cuda_nosat) == 0x7F);
    CHECK(enc(-x, kSpecE4M3, cuda_nosat) == 0xFF);
    CHECK(enc(-x, kSpecE4M3, cuda_sat) == 0xFE);
    CHECK(enc(-x, kSpecE4M3, mld) == 0xFF);
    CHECK(enc(-x, kSpecE4M3, mlds) == 0xFE);
    CHECK(enc(-x, kSpecE4M3, pt) == 0xFF);
    CHECK(enc(-x, kSpecE4M3, pt13) == 0xFE);
  }
  CHECK(enc(464.0f, kSpecE4M3, mld) == 0x7E);  // the tie rounds to even 448
  // +-Inf: CUDA nosat NaN, CUDA sat 448, ml_dtypes NaN, ml_dtypes kSaturate NaN, PyTorch <= 2.12
  // NaN, PyTorch >= 2.13 448 (measured: tests/python/test_cast.py against PyTorch itself).
  CHECK(enc(-inf, kSpecE4M3, cuda_nosat) == 0xFF);
  CHECK(enc(-inf, kSpecE4M3, cuda_sat) == 0xFE);
  CHECK(enc(-inf, kSpecE4M3, mld) == 0xFF);
  CHECK(enc(-inf, kSpecE4M3, mlds) == 0xFF);
  CHECK(enc(-inf, kSpecE4M3, pt) == 0xFF);
  CHECK(enc(-inf, kSpecE4M3, pt13) == 0xFE);
  CHECK(enc(inf, kSpecE4M3, pt13) == 0x7E);
  CHECK(enc(-nan, kSpecE4M3, pt13) == 0xFF);  // NaN keeps its sign
  // -NaN: CUDA 0x7F (sign dropped); ml_dtypes and PyTorch 0xFF.
  CHECK(enc(-nan, kSpecE4M3, cuda_sat) == 0x7F);
  CHECK(enc(-nan, kSpecE4M3, mld) == 0xFF);
  CHECK(enc(-nan, kSpecE4M3, pt) == 0xFF);
  CHECK(enc(nan, kSpecE4M3, pt) == 0x7F);
  // E5M2: overflow Inf vs 57344; +-Inf; NaN codes 0x7F (CUDA), 0x7E|s (ml_dtypes), 0x7F|s (PyTorch).
  CHECK(enc(61440.0f, kSpecE5M2, cuda_nosat) == 0x7C);
  CHECK(enc(61440.0f, kSpecE5M2, cuda_sat) == 0x7B);
  CHECK(enc(-61440.0f, kSpecE5M2, mlds) == 0xFB);
  CHECK(enc(-inf, kSpecE5M2, mlds) == 0xFC);
  CHECK(enc(-inf, kSpecE5M2, cuda_sat) == 0xFB);
  CHECK(enc(-nan, kSpecE5M2, cuda_nosat) == 0x7F);
  CHECK(enc(-nan, kSpecE5M2, mld) == 0xFE);
  CHECK(enc(nan, kSpecE5M2, mld) == 0x7E);
  CHECK(enc(-nan, kSpecE5M2, pt) == 0xFF);
  // Single rounding from double (docs/conversion-policies.md §Double rounding): 464 + 2^-30 -> NaN
  // (nosat) / 448 (sat) directly, 448 through float; 1.0625 + 2^-40 -> 1.125 directly, 1.0 through
  // float.
  const double d1 = 464.0 + std::ldexp(1.0, -30), d2 = 1.0625 + std::ldexp(1.0, -40);
  auto encd = [](double d, const FormatSpec& f, Policy p) {
    std::uint64_t u;
    std::memcpy(&u, &d, 8);
    return core::encode_f64_bits(u, f, p);
  };
  CHECK(encd(d1, kSpecE4M3, Policy::cuda_double(false)) == 0x7F);
  CHECK(encd(d1, kSpecE4M3, Policy::cuda_double(true)) == 0x7E);
  CHECK(enc(float(d1), kSpecE4M3, cuda_nosat) == 0x7E);
  CHECK(encd(d2, kSpecE4M3, mld) == 0x39);  // 1.125 = 0.0111.001
  CHECK(enc(float(d2), kSpecE4M3, mld) == 0x38);
}

TEST_CASE("directed rounding modes, worked by hand", "[types]") {
  const Policy rz{Rounding::kTowardZero, Overflow::kNoSat, NanEncoding::kCanonical};
  const Policy ru{Rounding::kTowardPositive, Overflow::kNoSat, NanEncoding::kCanonical};
  const Policy rd{Rounding::kTowardNegative, Overflow::kNoSat, NanEncoding::kCanonical};
  // E4M3 ulp in [1, 2) is 2^-3: 1.01 lies between 1.0 (0x38) and 1.125 (0x39).
  CHECK(enc(1.01f, kSpecE4M3, rz) == 0x38);
  CHECK(enc(1.01f, kSpecE4M3, ru) == 0x39);
  CHECK(enc(1.01f, kSpecE4M3, rd) == 0x38);
  CHECK(enc(-1.01f, kSpecE4M3, ru) == 0xB8);
  CHECK(enc(-1.01f, kSpecE4M3, rd) == 0xB9);
  CHECK(enc(1.0f, kSpecE4M3, ru) == 0x38);  // exact values never move
  // Smallest subnormal 2^-9 (0x01): tiny positives round up to it under RU, to 0 under RZ.
  CHECK(enc(1e-30f, kSpecE4M3, ru) == 0x01);
  CHECK(enc(1e-30f, kSpecE4M3, rz) == 0x00);
  CHECK(enc(-1e-30f, kSpecE4M3, rd) == 0x81);
  // Overflow under IEEE 754 §7.4: RZ gives max finite; RU gives +Inf (E4M3: NaN) for positives.
  CHECK(enc(1000.0f, kSpecE4M3, rz) == 0x7E);
  CHECK(enc(1000.0f, kSpecE4M3, ru) == 0x7F);
  CHECK(enc(1000.0f, kSpecE4M3, rd) == 0x7E);
  CHECK(enc(-1000.0f, kSpecE4M3, ru) == 0xFE);
  CHECK(enc(-1000.0f, kSpecE4M3, rd) == 0xFF);
  CHECK(enc(60000.0f, kSpecE5M2, ru) == 0x7C);  // +Inf
  CHECK(enc(60000.0f, kSpecE5M2, rz) == 0x7B);  // 57344
  // 449 truncates to 448 but rounds up past the max under RU.
  CHECK(enc(449.0f, kSpecE4M3, rz) == 0x7E);
  CHECK(enc(449.0f, kSpecE4M3, ru) == 0x7F);
}

TEST_CASE("fnuz formats: no -0, NaN is 0x80, overflow per policy", "[types]") {
  const Policy sat = Policy{}, nosat = Policy::ml_dtypes();
  CHECK(enc(-0.0f, kSpecE4M3FNUZ, sat) == 0x00);
  CHECK(enc(-1e-10f, kSpecE4M3FNUZ, sat) == 0x00);  // underflows to +0
  CHECK(enc(std::nanf(""), kSpecE4M3FNUZ, sat) == 0x80);
  CHECK(enc(1000.0f, kSpecE4M3FNUZ, nosat) == 0x80);
  CHECK(enc(1000.0f, kSpecE4M3FNUZ, sat) == 0x7F);  // 240
  CHECK(enc(-1000.0f, kSpecE4M3FNUZ, sat) == 0xFF);  // -240
  CHECK(float(float8_e4m3fnuz::from_bits(0x7F)) == 240.0f);
  CHECK(float8_e4m3fnuz::from_bits(0x80).isnan());
  CHECK(float(float8_e5m2fnuz::from_bits(0x01)) == std::ldexp(1.0f, -17));
}

TEST_CASE("stochastic rounding: reproducible, and exactly unbiased over the random bits", "[types]") {
  const Policy sr{Rounding::kStochastic, Overflow::kSatFinite, NanEncoding::kCanonical};
  // x = 1 + 0.3 ulp in E4M3 ([1, 2): ulp 2^-3). The discarded fraction, as 0.32 fixed point, is
  // frac = floor(0.3 * 2^32) of the float's bits: 1.0375f = 0x3F84CCCD, 20 discarded bits 0x4CCCD.
  const float x = 1.0375f;
  const std::uint64_t frac32 = std::uint64_t(bits(x) & 0xFFFFFu) << 12;
  // The rule for any random word r: round up (0x39) exactly when frac32 + r carries out of 32 bits,
  // else down (0x38); words around the carry and at both ends.
  for (std::uint32_t r : {0u, 1u, 0xB3332FFFu, 0xB3333000u, 0xB3333001u, 0xFFFFFFFFu})
    CHECK(enc(x, kSpecE4M3, sr, r) == (frac32 + r >= (1ull << 32) ? 0x39 : 0x38));
  // Rounds up exactly when frac32 + r carries out of 32 bits.
  CHECK(enc(x, kSpecE4M3, sr, std::uint32_t((1ull << 32) - frac32 - 1)) == 0x38);
  CHECK(enc(x, kSpecE4M3, sr, std::uint32_t((1ull << 32) - frac32)) == 0x39);
  // Over r = k * 2^12, k < 2^20 (a uniform grid of random words), the number of round-ups is
  // exactly frac32 / 2^12: the mean equals x with no bias at all.
  std::uint64_t ups = 0;
  for (std::uint64_t k = 0; k < (1u << 20); ++k) ups += enc(x, kSpecE4M3, sr, std::uint32_t(k << 12)) == 0x39;
  CHECK(ups == frac32 >> 12);
  // Statistical: 10^6 draws of a seeded generator; mean within 5 standard errors of x.
  std::mt19937 rng(12345);
  double sum = 0;
  const int n = 1000000;
  for (int i = 0; i < n; ++i) sum += double(float(float8_e4m3fn::from_float(x, sr, rng())));
  const double p = 0.3, se = 0.125 * std::sqrt(p * (1 - p) / n);
  CHECK(std::abs(sum / n - double(x)) < 5 * se);
}

TEST_CASE("Eigen: NumTraits, zero-copy maps and dequantize", "[types][eigen]") {
  const std::uint8_t codes[6] = {0x38, 0x40, 0xB8, 0x7E, 0x00, 0x7F};  // 1, 2, -1, 448, 0, NaN
  const auto m = eigen::map_codes<float8_e4m3fn>(codes, 2, 3);
  CHECK(m.rows() == 2);
  CHECK(float(m(0, 1)) == 2.0f);
  CHECK(float(m(1, 0)) == 448.0f);  // row-major: element 3
  const Eigen::MatrixXf y = eigen::dequantize(m, 0.5f);
  CHECK(y(0, 0) == 0.5f);
  CHECK(y(0, 2) == -0.5f);
  CHECK(std::isnan(y(1, 2)));
  const Eigen::MatrixXf c = m.cast<float>();
  CHECK(c(1, 0) == 448.0f);
  CHECK(Eigen::NumTraits<float8_e4m3fn>::highest() == float8_e4m3fn(448.0f));
  CHECK(float(Eigen::NumTraits<float8_e5m2>::epsilon()) == 0.25f);
  CHECK((m.data() == reinterpret_cast<const float8_e4m3fn*>(codes)));  // no copy
}

TEST_CASE("value types: integer constructors of every width, exact negation and abs", "[types]") {
  CHECK(float(float8_e4m3fn(3u)) == 3.0f);
  CHECK(float(float8_e4m3fn(5L)) == 5.0f);
  CHECK(float(float8_e4m3fn(std::size_t(7))) == 7.0f);
  CHECK(float(float8_e4m3fn(static_cast<std::int64_t>(1) << 40)) == 448.0f);  // saturates (satfinite)
  CHECK(float(float8_e8m0fnu(8u)) == 8.0f);
  CHECK(float(-float8_e4m3fn(1.5f)) == -1.5f);
  CHECK((-float8_e4m3fn(0.0f)).bits() == 0x80);                // -0
  CHECK((-float8_e4m3fnuz(0.0f)).bits() == 0x00);              // fnuz has no -0
  CHECK((-float8_e4m3fnuz::from_bits(0x80)).isnan());          // and keeps its NaN
  CHECK(float(abs(float8_e5m2(-3.0f))) == 3.0f);
  CHECK(abs(float8_e4m3fnuz::from_bits(0x80)).isnan());
  const std::uint8_t codes[4] = {0xB8, 0x38, 0xC0, 0x00};  // -1, 1, -2, 0
  const auto m = eigen::map_codes<float8_e4m3fn>(codes, 2, 2);
  const eigen::Matrix<float8_e4m3fn> a = m.cwiseAbs();
  CHECK(float(a(0, 0)) == 1.0f);
  CHECK(float(a(1, 0)) == 2.0f);
}
