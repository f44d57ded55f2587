// fp8emu::nv (the CUDA mirror API) and the general encoder against CUDA's own host code in
// cuda_fp8.h / cuda_fp6.h / cuda_fp4.h (CUDA 13; they compile with plain g++ and run without a
// GPU): every float entry over all 2^32 inputs, every half/bfloat16 entry over all 2^16, every
// decoder over every code, the double entries over millions of structured and random doubles.
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp8emu/core/encode.hpp"
#include "fp8emu/nv.hpp"
#include "fp8emu/types.hpp"

using namespace fp8emu;
namespace fnv = fp8emu::nv;  // CUDA headers declare a global namespace nv

namespace {

float f32(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
double f64(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, 8);
  return x;
}

/// Runs `body(bits, x)` on all 2^32 fp32 bit patterns (OpenMP over the top 16 bits); body returns
/// a mask with bit k set when check k mismatches. Checks that check k mismatched on exactly expected[k]
/// inputs (0 when no expectation is given), reporting the first mismatching input.
template <class Body>
void sweep_all_floats(const std::vector<std::string>& names, Body body,
                      std::vector<std::uint64_t> expected = {}) {
  expected.resize(names.size(), 0);
  const std::size_t n = names.size();
  std::vector<std::uint64_t> bad(n, 0);
  std::vector<std::uint32_t> first(n, 0);
  std::uint64_t checked = 0;
#pragma omp parallel
  {
    std::vector<std::uint64_t> lbad(n, 0);
    std::vector<std::uint32_t> lfirst(n, 0);
    std::uint64_t lchecked = 0;
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < (std::int64_t(1) << 16); ++hi) {
      for (std::uint32_t lo = 0; lo < (1u << 16); ++lo) {
        const std::uint32_t bits = (std::uint32_t(hi) << 16) | lo;
        const std::uint32_t mask = body(bits, f32(bits));
        if (mask) {
          for (std::size_t k = 0; k < n; ++k) {
            if (mask & (1u << k)) {
              if (lbad[k] == 0 || bits < lfirst[k]) lfirst[k] = bits;
              ++lbad[k];
            }
          }
        }
        ++lchecked;
      }
    }
#pragma omp critical
    {
      for (std::size_t k = 0; k < n; ++k) {
        if (lbad[k] && (bad[k] == 0 || lfirst[k] < first[k])) first[k] = lfirst[k];
        bad[k] += lbad[k];
      }
      checked += lchecked;
    }
  }
  CHECK(checked == (std::uint64_t(1) << 32));
  for (std::size_t k = 0; k < n; ++k) {
    INFO(names[k] << ": " << bad[k] << " mismatches (expected " << expected[k] << "); first input bits 0x"
                   << std::hex << first[k]);
    CHECK(bad[k] == expected[k]);
  }
}

const fnv::Saturation kSats[] = {fnv::Saturation::kSatFinite, fnv::Saturation::kNoSat};
const __nv_saturation_t kNvSats[] = {__NV_SATFINITE, __NV_NOSAT};
const fnv::Fp8Interpretation kFp8[] = {fnv::Fp8Interpretation::kE4M3, fnv::Fp8Interpretation::kE5M2};
const __nv_fp8_interpretation_t kNvFp8[] = {__NV_E4M3, __NV_E5M2};
const fnv::Fp6Interpretation kFp6[] = {fnv::Fp6Interpretation::kE2M3, fnv::Fp6Interpretation::kE3M2};
const __nv_fp6_interpretation_t kNvFp6[] = {__NV_E2M3, __NV_E3M2};
const fnv::RoundMode kRn[] = {fnv::RoundMode::kNearest, fnv::RoundMode::kZero};
const cudaRoundMode kNvRn[] = {cudaRoundNearest, cudaRoundZero};
const fnv::RoundMode kE8Rn[] = {fnv::RoundMode::kZero, fnv::RoundMode::kPosInf};
const cudaRoundMode kNvE8Rn[] = {cudaRoundZero, cudaRoundPosInf};
const char* kSatName[] = {"satfinite", "nosat"};
const char* kFp8Name[] = {"e4m3", "e5m2"};
const char* kFp6Name[] = {"e2m3", "e3m2"};
const char* kRnName[] = {"rn", "rz"};
const char* kE8RnName[] = {"rz", "rp"};
const FormatSpec* kFp8Spec[] = {&kSpecE4M3, &kSpecE5M2};

}  // namespace

TEST_CASE("nv fp8: float entry and the general encoder equal __nv_cvt_float_to_fp8 for all 2^32 inputs",
          "[exhaustive][cuda-oracle]") {
  std::vector<std::string> names;
  for (int f = 0; f < 2; ++f)
    for (int s = 0; s < 2; ++s)
      for (const char* what : {"nv::cvt_float_to_fp8 ", "core::encode_f32_bits_with(Policy::cuda_float) "})
        names.push_back(std::string(what) + kFp8Name[f] + " " + kSatName[s]);
  // Where the ecosystem differs from CUDA, counted over all 2^32 inputs: each preset against CUDA's
  // host code, never against another preset. Expected counts are those measured with ml_dtypes'
  // header (b793a6e) and PyTorch's <= 2.12 algorithm against CUDA 13's host code, and PyTorch
  // 2.13-2.15's casts (tests/python/test_cast.py; docs/conversion-policies.md §Where they differ):
  std::vector<std::uint64_t> expected(names.size(), 0);
  const std::uint64_t kNegNaN = (1u << 23) - 1;  // negative NaN patterns
  names.push_back("e4m3 ml_dtypes vs CUDA nosat: exactly the negative NaNs");
  expected.push_back(kNegNaN);
  names.push_back("e4m3 PyTorch <= 2.12 vs CUDA nosat: exactly the negative NaNs (as ml_dtypes)");
  expected.push_back(kNegNaN);
  names.push_back("e4m3 ml_dtypes kSaturate vs CUDA satfinite: the 2 infinities + the negative NaNs");
  expected.push_back(kNegNaN + 2);
  names.push_back("e5m2 ml_dtypes vs CUDA nosat: every NaN");
  expected.push_back(2 * kNegNaN);
  names.push_back("e5m2 PyTorch vs CUDA nosat: the negative NaNs");
  expected.push_back(kNegNaN);
  names.push_back("e4m3 PyTorch >= 2.13 vs CUDA satfinite: exactly the negative NaNs (PyTorch keeps the sign)");
  expected.push_back(kNegNaN);
  // Every format and mode is spelled out with constant arguments, so that the compiler folds each
  // format record into its conversion (half the run time of a loop over run-time records).
  sweep_all_floats(
      names,
      [](std::uint32_t bits, float x) {
        std::uint32_t m = 0;
        using fnv::Fp8Interpretation;
        const auto sat = fnv::Saturation::kSatFinite, nosat = fnv::Saturation::kNoSat;
        const std::uint8_t c4s = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
        const std::uint8_t c4n = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3);
        const std::uint8_t c5s = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        const std::uint8_t c5n = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
        m |= std::uint32_t(fnv::cvt_float_to_fp8(x, sat, Fp8Interpretation::kE4M3) != c4s) << 0;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE4M3, Policy::cuda_float(true)) != c4s) << 1;
        m |= std::uint32_t(fnv::cvt_float_to_fp8(x, nosat, Fp8Interpretation::kE4M3) != c4n) << 2;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE4M3, Policy::cuda_float(false)) != c4n) << 3;
        m |= std::uint32_t(fnv::cvt_float_to_fp8(x, sat, Fp8Interpretation::kE5M2) != c5s) << 4;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE5M2, Policy::cuda_float(true)) != c5s) << 5;
        m |= std::uint32_t(fnv::cvt_float_to_fp8(x, nosat, Fp8Interpretation::kE5M2) != c5n) << 6;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE5M2, Policy::cuda_float(false)) != c5n) << 7;
        const std::uint8_t ml4 = core::encode_f32_bits_with(bits, kSpecE4M3, Policy::ml_dtypes());
        m |= std::uint32_t(ml4 != c4n) << 8;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE4M3, Policy::pytorch()) != c4n) << 9;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE4M3, Policy::ml_dtypes_saturate()) != c4s) << 10;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE5M2, Policy::ml_dtypes()) != c5n) << 11;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE5M2, Policy::pytorch()) != c5n) << 12;
        m |= std::uint32_t(core::encode_f32_bits_with(bits, kSpecE4M3, Policy::pytorch_2_13()) != c4s) << 13;
        return m;
      },
      expected);
}

TEST_CASE("nv fp6: cvt_float_to_fp6 equals CUDA for all 2^32 inputs, both formats, rn and rz",
          "[exhaustive][cuda-oracle]") {
  std::vector<std::string> names;
  for (int f = 0; f < 2; ++f)
    for (int r = 0; r < 2; ++r) names.push_back(std::string("cvt_float_to_fp6 ") + kFp6Name[f] + " " + kRnName[r]);
  sweep_all_floats(names, [](std::uint32_t, float x) {
    std::uint32_t m = 0;
    using fnv::Fp6Interpretation;
    using fnv::RoundMode;
    m |= std::uint32_t(fnv::cvt_float_to_fp6(x, Fp6Interpretation::kE2M3, RoundMode::kNearest) !=
             __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest)) << 0;
    m |= std::uint32_t(fnv::cvt_float_to_fp6(x, Fp6Interpretation::kE2M3, RoundMode::kZero) !=
             __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundZero)) << 1;
    m |= std::uint32_t(fnv::cvt_float_to_fp6(x, Fp6Interpretation::kE3M2, RoundMode::kNearest) !=
             __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest)) << 2;
    m |= std::uint32_t(fnv::cvt_float_to_fp6(x, Fp6Interpretation::kE3M2, RoundMode::kZero) !=
             __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundZero)) << 3;
    return m;
  });
}

TEST_CASE("nv fp4 and e8m0: float entries equal CUDA for all 2^32 inputs, every mode", "[exhaustive][cuda-oracle]") {
  std::vector<std::string> names;
  for (int r = 0; r < 2; ++r) names.push_back(std::string("cvt_float_to_fp4 e2m1 ") + kRnName[r]);
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 2; ++r) names.push_back(std::string("cvt_float_to_e8m0 ") + kSatName[s] + " " + kE8RnName[r]);
  sweep_all_floats(names, [](std::uint32_t, float x) {
    std::uint32_t m = 0;
    using fnv::RoundMode;
    const auto e2m1 = fnv::Fp4Interpretation::kE2M1;
    const auto sat = fnv::Saturation::kSatFinite, nosat = fnv::Saturation::kNoSat;
    m |= std::uint32_t(fnv::cvt_float_to_fp4(x, e2m1, RoundMode::kNearest) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) << 0;
    m |= std::uint32_t(fnv::cvt_float_to_fp4(x, e2m1, RoundMode::kZero) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero)) << 1;
    m |= std::uint32_t(fnv::cvt_float_to_e8m0(x, sat, RoundMode::kZero) != __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero)) << 2;
    m |= std::uint32_t(fnv::cvt_float_to_e8m0(x, sat, RoundMode::kPosInf) != __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)) << 3;
    m |= std::uint32_t(fnv::cvt_float_to_e8m0(x, nosat, RoundMode::kZero) != __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero)) << 4;
    m |= std::uint32_t(fnv::cvt_float_to_e8m0(x, nosat, RoundMode::kPosInf) != __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf)) << 5;
    return m;
  });
}

TEST_CASE("nv: every half and bfloat16 entry equals CUDA for all 2^16 inputs", "[cuda-oracle]") {
  std::uint64_t bad = 0;
  for (std::uint32_t v = 0; v < 65536; ++v) {
    __half_raw h;
    h.x = std::uint16_t(v);
    __nv_bfloat16_raw b;
    b.x = std::uint16_t(v);
    const std::uint16_t u = std::uint16_t(v);
    for (int f = 0; f < 2; ++f) {
      for (int s = 0; s < 2; ++s) {
        INFO("fp8 " << kFp8Name[f] << " " << kSatName[s] << " input 0x" << std::hex << v);
        bad += fnv::cvt_halfraw_to_fp8(u, kSats[s], kFp8[f]) != __nv_cvt_halfraw_to_fp8(h, kNvSats[s], kNvFp8[f]);
        bad += fnv::cvt_bfloat16raw_to_fp8(u, kSats[s], kFp8[f]) != __nv_cvt_bfloat16raw_to_fp8(b, kNvSats[s], kNvFp8[f]);
      }
    }
    for (int f = 0; f < 2; ++f) {
      for (int r = 0; r < 2; ++r) {
        bad += fnv::cvt_halfraw_to_fp6(u, kFp6[f], kRn[r]) != __nv_cvt_halfraw_to_fp6(h, kNvFp6[f], kNvRn[r]);
        bad += fnv::cvt_bfloat16raw_to_fp6(u, kFp6[f], kRn[r]) != __nv_cvt_bfloat16raw_to_fp6(b, kNvFp6[f], kNvRn[r]);
      }
    }
    for (int r = 0; r < 2; ++r) {
      bad += fnv::cvt_halfraw_to_fp4(u, fnv::Fp4Interpretation::kE2M1, kRn[r]) != __nv_cvt_halfraw_to_fp4(h, __NV_E2M1, kNvRn[r]);
      bad += fnv::cvt_bfloat16raw_to_fp4(u, fnv::Fp4Interpretation::kE2M1, kRn[r]) !=
             __nv_cvt_bfloat16raw_to_fp4(b, __NV_E2M1, kNvRn[r]);
    }
    for (int s = 0; s < 2; ++s)
      for (int r = 0; r < 2; ++r)
        bad += fnv::cvt_bfloat16raw_to_e8m0(u, kSats[s], kE8Rn[r]) != __nv_cvt_bfloat16raw_to_e8m0(b, kNvSats[s], kNvE8Rn[r]);
  }
  CHECK(bad == 0);
}

TEST_CASE("nv: every decoder equals CUDA on every storage value", "[cuda-oracle]") {
  for (std::uint32_t c = 0; c < 256; ++c) {
    INFO("storage 0x" << std::hex << c);
    for (int f = 0; f < 2; ++f)
      CHECK(fnv::cvt_fp8_to_halfraw(std::uint8_t(c), kFp8[f]) == __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), kNvFp8[f]).x);
    for (int f = 0; f < 2; ++f)
      CHECK(fnv::cvt_fp6_to_halfraw(std::uint8_t(c), kFp6[f]) == __nv_cvt_fp6_to_halfraw(__nv_fp6_storage_t(c), kNvFp6[f]).x);
    CHECK(fnv::cvt_fp4_to_halfraw(std::uint8_t(c), fnv::Fp4Interpretation::kE2M1) ==
          __nv_cvt_fp4_to_halfraw(__nv_fp4_storage_t(c), __NV_E2M1).x);
    CHECK(fnv::cvt_e8m0_to_bf16raw(std::uint8_t(c)) == __nv_cvt_e8m0_to_bf16raw(__nv_fp8_storage_t(c)).x);
    const fnv::Half2Raw h4 = fnv::cvt_fp4x2_to_halfraw2(std::uint8_t(c), fnv::Fp4Interpretation::kE2M1);
    const __half2_raw w4 = __nv_cvt_fp4x2_to_halfraw2(__nv_fp4x2_storage_t(c), __NV_E2M1);
    CHECK((h4.x == w4.x && h4.y == w4.y));
  }
  std::uint64_t bad = 0;
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const std::uint16_t u = std::uint16_t(c);
    for (int f = 0; f < 2; ++f) {
      const fnv::Half2Raw a = fnv::cvt_fp8x2_to_halfraw2(u, kFp8[f]);
      const __half2_raw w = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u), kNvFp8[f]);
      bad += a.x != w.x || a.y != w.y;
      const fnv::Half2Raw a6 = fnv::cvt_fp6x2_to_halfraw2(u, kFp6[f]);
      const __half2_raw w6 = __nv_cvt_fp6x2_to_halfraw2(__nv_fp6x2_storage_t(u), kNvFp6[f]);
      bad += a6.x != w6.x || a6.y != w6.y;
    }
    const fnv::Bfloat162Raw e = fnv::cvt_e8m0x2_to_bf162raw(u);
    const __nv_bfloat162_raw we = __nv_cvt_e8m0x2_to_bf162raw(__nv_fp8x2_storage_t(u));
    bad += e.x != we.x || e.y != we.y;
  }
  CHECK(bad == 0);
}

namespace {

/// Doubles that probe single rounding: around every rounding boundary of `f` (midpoints between
/// neighbours, half the smallest subnormal, the overflow threshold, and every finite value) at
/// offsets of 0..40 double ulps and 2^j ulps (j < 52), both signs; plus NaNs with varied payloads,
/// infinities, zeros and double subnormals.
std::vector<double> structured_doubles(const FormatSpec& f) {
  std::vector<double> points;
  const std::uint32_t maxc = f.max_finite_code();
  for (std::uint32_t c = 0; c <= maxc; ++c) {
    const double v = f.value_of_code(c);
    const double next = c < maxc ? f.value_of_code(c + 1) : f.max_finite() + 2 * (f.overflow_threshold() - f.max_finite());
    points.push_back(v);
    points.push_back((v + next) / 2);  // exact: both are short dyadics
  }
  std::vector<double> out;
  for (double m : points) {
    std::uint64_t b;
    std::memcpy(&b, &m, 8);
    for (int sgn = 0; sgn < 2; ++sgn) {
      const std::uint64_t sb = sgn ? (b | 0x8000000000000000ull) : b;
      for (std::uint64_t k = 0; k <= 40; ++k) {
        out.push_back(f64(sb + k));
        if (m != 0) out.push_back(f64(sb - k));
      }
      for (int j = 6; j < 52; ++j) {
        out.push_back(f64(sb + (std::uint64_t(1) << j)));
        if (m != 0) out.push_back(f64(sb - (std::uint64_t(1) << j)));
      }
    }
  }
  for (std::uint64_t payload : {1ull, 2ull, 0x4000000000000ull, 0x8000000000000ull, 0xC000000000000ull,
                                0x3FFFFFFFFFFFFull, 0xFFFFFFFFFFFFFull, 0x123456789ABCull}) {
    out.push_back(f64(0x7FF0000000000000ull | payload));
    out.push_back(f64(0xFFF0000000000000ull | payload));
  }
  for (std::uint64_t b : {0x7FF0000000000000ull, 0xFFF0000000000000ull, 0ull, 0x8000000000000000ull, 1ull,
                          0x8000000000000001ull, 0x000FFFFFFFFFFFFFull, 0x7FEFFFFFFFFFFFFFull})
    out.push_back(f64(b));
  return out;
}

/// Random doubles: uniform bit patterns (every class), and values with exponents in the formats'
/// range (-160..140) and random mantissas.
std::vector<double> random_doubles(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t b = rng();
    if (i % 2) {
      const std::uint64_t e = std::uint64_t(1023 - 160 + std::int64_t(rng() % 300));
      b = (b & 0x800FFFFFFFFFFFFFull) | (e << 52);
    }
    out[i] = f64(b);
  }
  return out;
}

template <class Ours, class Cuda>
std::uint64_t count_mismatches(const std::vector<double>& xs, Ours ours, Cuda cuda, double* first) {
  std::uint64_t bad = 0;
  for (double x : xs) {
    if (ours(x) != cuda(x)) {
      if (!bad) *first = x;
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("nv: double entries equal CUDA on millions of structured and random doubles", "[cuda-oracle]") {
  const std::vector<double> rnd = random_doubles(std::size_t(1) << 22, 2026);
  std::uint64_t total = 0;
  double first = 0;
  for (int f = 0; f < 2; ++f) {
    std::vector<double> xs = structured_doubles(*kFp8Spec[f]);
    xs.insert(xs.end(), rnd.begin(), rnd.end());
    total += xs.size();
    for (int s = 0; s < 2; ++s) {
      const auto of = kFp8[f];
      const auto os = kSats[s];
      const auto nf = kNvFp8[f];
      const auto ns = kNvSats[s];
      INFO("cvt_double_to_fp8 " << kFp8Name[f] << " " << kSatName[s]);
      CHECK(count_mismatches(
                xs, [&](double x) { return fnv::cvt_double_to_fp8(x, os, of); },
                [&](double x) { return __nv_cvt_double_to_fp8(x, ns, nf); }, &first) == 0);
      INFO("first mismatch " << first);
    }
  }
  for (int f = 0; f < 2; ++f) {
    std::vector<double> xs = structured_doubles(f == 0 ? kSpecE2M3 : kSpecE3M2);
    xs.insert(xs.end(), rnd.begin(), rnd.end());
    total += xs.size();
    for (int r = 0; r < 2; ++r) {
      INFO("cvt_double_to_fp6 " << kFp6Name[f] << " " << kRnName[r]);
      CHECK(count_mismatches(
                xs, [&](double x) { return fnv::cvt_double_to_fp6(x, kFp6[f], kRn[r]); },
                [&](double x) { return __nv_cvt_double_to_fp6(x, kNvFp6[f], kNvRn[r]); }, &first) == 0);
      INFO("first mismatch " << first);
    }
  }
  {
    std::vector<double> xs = structured_doubles(kSpecE2M1);
    xs.insert(xs.end(), rnd.begin(), rnd.end());
    total += xs.size();
    for (int r = 0; r < 2; ++r) {
      INFO("cvt_double_to_fp4 " << kRnName[r]);
      CHECK(count_mismatches(
                xs, [&](double x) { return fnv::cvt_double_to_fp4(x, fnv::Fp4Interpretation::kE2M1, kRn[r]); },
                [&](double x) { return __nv_cvt_double_to_fp4(x, __NV_E2M1, kNvRn[r]); }, &first) == 0);
      INFO("first mismatch " << first);
    }
  }
  {
    // E8M0 boundaries are the powers of two (and the fp32 rounding of the double): 2^k +- ulps.
    std::vector<double> xs = rnd;
    for (int k = -1080; k <= 1030; ++k) {
      const double p = std::ldexp(1.0, k);
      std::uint64_t b;
      std::memcpy(&b, &p, 8);
      for (std::uint64_t d = 0; d <= 40; ++d) {
        for (std::uint64_t sb : {b, std::uint64_t(b | 0x8000000000000000ull)}) {
          xs.push_back(f64(sb + d));
          if (p != 0) xs.push_back(f64(sb - d));
          xs.push_back(f64(sb + (std::uint64_t(1) << (d % 52))));
          xs.push_back(f64(sb + (std::uint64_t(1) << 29) - d));  // one fp32 ulp away
        }
      }
    }
    total += xs.size();
    for (int s = 0; s < 2; ++s) {
      for (int r = 0; r < 2; ++r) {
        INFO("cvt_double_to_e8m0 " << kSatName[s] << " " << kE8RnName[r]);
        CHECK(count_mismatches(
                  xs, [&](double x) { return fnv::cvt_double_to_e8m0(x, kSats[s], kE8Rn[r]); },
                  [&](double x) { return __nv_cvt_double_to_e8m0(x, kNvSats[s], kNvE8Rn[r]); }, &first) == 0);
        INFO("first mismatch " << first);
      }
    }
  }
  CHECK(total > 10'000'000);
}

TEST_CASE("nv: x2 entry points pack .x low and .y high as CUDA", "[cuda-oracle]") {
  std::mt19937_64 rng(7);
  std::uint64_t bad = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t r = rng();
    const float fx = f32(std::uint32_t(r)), fy = f32(std::uint32_t(r >> 32));
    const double dx = f64(rng()), dy = double(fx) * 1.5;
    float2 cf;
    cf.x = fx;
    cf.y = fy;
    double2 cd;
    cd.x = dx;
    cd.y = dy;
    __half2_raw ch;
    ch.x = std::uint16_t(r);
    ch.y = std::uint16_t(r >> 16);
    __nv_bfloat162_raw cb;
    cb.x = std::uint16_t(r >> 32);
    cb.y = std::uint16_t(r >> 48);
    const fnv::Float2 of{fx, fy};
    const fnv::Double2 od{dx, dy};
    const fnv::Half2Raw oh{ch.x, ch.y};
    const fnv::Bfloat162Raw ob{cb.x, cb.y};
    for (int f = 0; f < 2; ++f) {
      for (int s = 0; s < 2; ++s) {
        bad += fnv::cvt_float2_to_fp8x2(of, kSats[s], kFp8[f]) != __nv_cvt_float2_to_fp8x2(cf, kNvSats[s], kNvFp8[f]);
        bad += fnv::cvt_double2_to_fp8x2(od, kSats[s], kFp8[f]) != __nv_cvt_double2_to_fp8x2(cd, kNvSats[s], kNvFp8[f]);
        bad += fnv::cvt_halfraw2_to_fp8x2(oh, kSats[s], kFp8[f]) != __nv_cvt_halfraw2_to_fp8x2(ch, kNvSats[s], kNvFp8[f]);
        bad += fnv::cvt_bfloat16raw2_to_fp8x2(ob, kSats[s], kFp8[f]) !=
               __nv_cvt_bfloat16raw2_to_fp8x2(cb, kNvSats[s], kNvFp8[f]);
      }
      for (int rr = 0; rr < 2; ++rr) {
        bad += fnv::cvt_float2_to_fp6x2(of, kFp6[f], kRn[rr]) != __nv_cvt_float2_to_fp6x2(cf, kNvFp6[f], kNvRn[rr]);
        bad += fnv::cvt_double2_to_fp6x2(od, kFp6[f], kRn[rr]) != __nv_cvt_double2_to_fp6x2(cd, kNvFp6[f], kNvRn[rr]);
        bad += fnv::cvt_halfraw2_to_fp6x2(oh, kFp6[f], kRn[rr]) != __nv_cvt_halfraw2_to_fp6x2(ch, kNvFp6[f], kNvRn[rr]);
        bad += fnv::cvt_bfloat16raw2_to_fp6x2(ob, kFp6[f], kRn[rr]) !=
               __nv_cvt_bfloat16raw2_to_fp6x2(cb, kNvFp6[f], kNvRn[rr]);
      }
    }
    for (int rr = 0; rr < 2; ++rr) {
      const auto e = fnv::Fp4Interpretation::kE2M1;
      bad += fnv::cvt_float2_to_fp4x2(of, e, kRn[rr]) != __nv_cvt_float2_to_fp4x2(cf, __NV_E2M1, kNvRn[rr]);
      bad += fnv::cvt_double2_to_fp4x2(od, e, kRn[rr]) != __nv_cvt_double2_to_fp4x2(cd, __NV_E2M1, kNvRn[rr]);
      bad += fnv::cvt_halfraw2_to_fp4x2(oh, e, kRn[rr]) != __nv_cvt_halfraw2_to_fp4x2(ch, __NV_E2M1, kNvRn[rr]);
      bad += fnv::cvt_bfloat16raw2_to_fp4x2(ob, e, kRn[rr]) != __nv_cvt_bfloat16raw2_to_fp4x2(cb, __NV_E2M1, kNvRn[rr]);
    }
    for (int s = 0; s < 2; ++s) {
      for (int rr = 0; rr < 2; ++rr) {
        bad += fnv::cvt_float2_to_e8m0x2(of, kSats[s], kE8Rn[rr]) != __nv_cvt_float2_to_e8m0x2(cf, kNvSats[s], kNvE8Rn[rr]);
        bad += fnv::cvt_double2_to_e8m0x2(od, kSats[s], kE8Rn[rr]) != __nv_cvt_double2_to_e8m0x2(cd, kNvSats[s], kNvE8Rn[rr]);
        bad += fnv::cvt_bfloat162raw_to_e8m0x2(ob, kSats[s], kE8Rn[rr]) !=
               __nv_cvt_bfloat162raw_to_e8m0x2(cb, kNvSats[s], kNvE8Rn[rr]);
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("value types: T(float) and T(double) equal CUDA's class constructors", "[cuda-oracle]") {
  std::mt19937_64 rng(99);
  std::uint64_t bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const std::uint64_t r = rng();
    const float x = f32(std::uint32_t(r));
    const double d = (i % 2) ? f64(rng()) : double(x) * (1.0 + std::ldexp(1.0, -40));
    bad += float8_e4m3fn(x).bits() != __nv_fp8_e4m3(x).__x;
    bad += float8_e5m2(x).bits() != __nv_fp8_e5m2(x).__x;
    bad += float8_e4m3fn(d).bits() != __nv_fp8_e4m3(d).__x;
    bad += float8_e5m2(d).bits() != __nv_fp8_e5m2(d).__x;
    bad += float6_e2m3fn(x).bits() != __nv_fp6_e2m3(x).__x;
    bad += float6_e3m2fn(x).bits() != __nv_fp6_e3m2(x).__x;
    bad += float6_e2m3fn(d).bits() != __nv_fp6_e2m3(d).__x;
    bad += float4_e2m1fn(x).bits() != __nv_fp4_e2m1(x).__x;
    bad += float4_e2m1fn(d).bits() != __nv_fp4_e2m1(d).__x;
    bad += float8_e8m0fnu(x).bits() != __nv_fp8_e8m0(x).__x;
    bad += float8_e8m0fnu(d).bits() != __nv_fp8_e8m0(d).__x;
  }
  CHECK(bad == 0);
}
