// The vectorised E2M1 span cast (emulation/e2m1_span.cpp) against the element layer's
// core::cast_element, code and counts, on every fp32 input and on random inputs and multipliers.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "block_cast.hpp"  // emulation/: cast_e2m1_span
#include "fp8emu/core/cast.hpp"

using namespace fp8emu;

namespace {

struct Mismatches {
  std::uint64_t codes = 0, counts = 0;
};

// One span through cast_e2m1_span and through core::cast_element element by element.
Mismatches compare_span(const float* x, std::size_t n, float mult) {
  std::uint8_t q[64];
  core::CastCounts got, want;
  emu::detail::cast_e2m1_span(x, n, mult, q, got);
  Mismatches m;
  for (std::size_t i = 0; i < n; ++i) m.codes += q[i] != core::cast_element(x[i], mult, kSpecE2M1, want);
  m.counts += got.saturated != want.saturated || got.underflow != want.underflow || got.nan != want.nan;
  return m;
}

}  // namespace

TEST_CASE("E2M1 span cast: random inputs, multipliers and span lengths equal core::cast_element",
          "[emulation][nvfp4]") {
  std::mt19937 g(2026);
  const float mults[] = {1.0f, 0.75f, 3.0e-39f, 1.5e38f, 0x1p-20f, 0x1p+20f, 6.0f / 448.0f, 3.4028235e38f};
  Mismatches total;
  std::uint64_t checked = 0, saturated = 0, underflow = 0, nan = 0;
  std::vector<float> x(64);
  for (int rep = 0; rep < 20000; ++rep) {
    const std::size_t n = rep % 3 == 0 ? 16 : 1 + g() % 64;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t u = g();
      if (rep % 2) u = (u & 0x80FFFFFFu) | ((120u + g() % 12u) << 23);  // near E2M1's range: the boundaries
      if (g() % 16 == 0) u = (u & 0x80000000u) | 0x3E800000u | ((g() % 8u) << 21);  // 0.25..0.47: ties and steps
      std::memcpy(&x[i], &u, 4);
    }
    const float mult = mults[g() % 8];
    const Mismatches m = compare_span(x.data(), n, mult);
    total.codes += m.codes;
    total.counts += m.counts;
    checked += n;
    core::CastCounts c;
    for (std::size_t i = 0; i < n; ++i) core::cast_element(x[i], mult, kSpecE2M1, c);
    saturated += c.saturated;
    underflow += c.underflow;
    nan += c.nan;
  }
  CHECK(total.codes == 0);
  CHECK(total.counts == 0);
  // The inputs reach every count (the comparison is not vacuous).
  CHECK(saturated > 0);
  CHECK(underflow > 0);
  CHECK(nan > 0);
  CHECK(checked > 500000);
  // Rounding boundaries, exactly and one ulp either side: 0.25 ties to 0, 0.75 to 1, 1.25 to 1,
  // 1.75 to 2, 2.5 to 2, 3.5 to 4, 5 to 4 (ties to the even code); NaN to 7; -0 to 8.
  const float b[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f};
  std::vector<float> e;
  for (float v : b)
    for (float s : {1.0f, -1.0f}) {
      e.push_back(s * v);
      e.push_back(s * std::nextafter(v, 0.0f));
      e.push_back(s * std::nextafter(v, 100.0f));
    }
  e.insert(e.end(), {-0.0f, 0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-45f, -1e-45f});
  std::uint8_t q[64];
  core::CastCounts c;
  emu::detail::cast_e2m1_span(e.data(), e.size(), 1.0f, q, c);
  // Worked from the OCP MX spec's E2M1 values (codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6), RNE, SATFINITE:
  // each boundary v is a tie that goes to the even code; 6 and 7 give the max code 7; -v adds bit 3.
  const std::uint8_t tie_code[] = {0, 2, 2, 4, 4, 6, 6, 7, 7};
  for (std::size_t k = 0; k < 9; ++k) {
    INFO("boundary " << b[k]);
    CHECK(q[6 * k] == tie_code[k]);
    CHECK(q[6 * k + 3] == (tie_code[k] | 8));
  }
  CHECK(q[54] == 8);  // -0
  CHECK(q[56] == 7);  // NaN
  CHECK(compare_span(e.data(), e.size(), 1.0f).codes == 0);
  CHECK(compare_span(e.data(), e.size(), 1.0f).counts == 0);
}

TEST_CASE("E2M1 span cast: every fp32 input gives core::cast_element's code and counts",
          "[emulation][nvfp4][exhaustive]") {
  // mult = 1: s = x, so the 2^32 inputs are every value the code is decided on; spans of 16 (the
  // constant-length path) and of 13 (the general loop).
  std::uint64_t codes = 0, counts = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : codes, counts)
  for (std::int64_t chunk = 0; chunk < (std::int64_t(1) << 20); ++chunk) {
    float x[4096];
    for (std::uint32_t i = 0; i < 4096; ++i) {
      const std::uint32_t u = std::uint32_t(chunk) * 4096u + i;
      std::memcpy(&x[i], &u, 4);
    }
    for (std::size_t at = 0; at < 4096; at += 16) {
      const std::size_t n = (chunk & 1) ? 13 : 16;
      const Mismatches m = compare_span(x + at, n, 1.0f);
      codes += m.codes;
      counts += m.counts;
      if (n == 13) {
        const Mismatches rest = compare_span(x + at + 13, 3, 1.0f);
        codes += rest.codes;
        counts += rest.counts;
      }
    }
  }
  CHECK(codes == 0);
  CHECK(counts == 0);
}
