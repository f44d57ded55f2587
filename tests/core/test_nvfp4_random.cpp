// TE NVFP4's random pieces in the element layer (core/philox.hpp, core/hadamard.hpp) against
// oracles that are not the code under test:
//  - Random123's known-answer vectors for philox4x32 10 (its kat_vectors file), reached through TE's
//    state layout worked from TE common/util/curanddx.hpp: key = (seed low, seed high), counter
//    (w:z:y:x) = (subsequence << 64) + offset + step, with the carry from y into z;
//  - TE's software stochastic rounder (common/util/ptx.cuh stochastic_round_fp4_e2m1) against the
//    definition of unbiased rounding: for every E2M1 interval [lo, hi] and every v in it that the 8
//    bits resolve (v - lo a multiple of (hi - lo) / 256), the 256 byte values give hi exactly
//    256 (v - lo) / (hi - lo) times; the edges (NaN -> +6, +-Inf and beyond 6 -> +-6, signs) worked
//    from the source;
//  - the Hadamard element against the exact sum (Boost cpp_bin_float_100) of x_i s_i H_ij / 4 with H
//    built by Sylvester's doubling, rounded to fp32, then to bf16 by the rule of IEEE RNE written
//    here.
#include <boost/multiprecision/cpp_bin_float.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/hadamard.hpp"
#include "fp8emu/core/philox.hpp"

using namespace fp8emu;

TEST_CASE("Philox in TE's layout gives Random123's known answers", "[nvfp4][philox]") {
  // kat_vectors: philox4x32 10, ctr = 0, key = 0.
  core::PhiloxWords w = core::te_philox(0, 0, 0, 0);
  CHECK(w.w[0] == 0x6627e8d5u);
  CHECK(w.w[1] == 0xe169c58du);
  CHECK(w.w[2] == 0xbc57ac4cu);
  CHECK(w.w[3] == 0x9b00dbd8u);
  // ctr = (243f6a88, 85a308d3, 13198a2e, 03707344), key = (a4093822, 299f31d0): offset holds
  // (y:x), subsequence (w:z), the seed (key.y:key.x).
  w = core::te_philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, 0);
  CHECK(w.w[0] == 0xd16cfe09u);
  CHECK(w.w[1] == 0x94fdccebu);
  CHECK(w.w[2] == 0x5001e420u);
  CHECK(w.w[3] == 0x24126ea1u);
  // The same counter reached by steps (generate4 calls) instead of the offset.
  CHECK(core::te_philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a00ull, 0x88).w[0] == 0xd16cfe09u);
  // All ones: ctr = key = ffffffff.
  w = core::te_philox(~0ull, ~0ull, ~0ull - 1, 1);
  CHECK(w.w[0] == 0x408f276du);
  CHECK(w.w[1] == 0x41c83b0eu);
  CHECK(w.w[2] == 0xa20bc7c6u);
  CHECK(w.w[3] == 0x6d5451fdu);
  // An offset step past 2^64 - 1 carries into the subsequence's words (TE philox_state_incr).
  const core::PhiloxWords a = core::te_philox(5, 0x12345678ffffffffull, ~0ull, 1),
                          b = core::te_philox(5, 0x1234567900000000ull, 0, 0);
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
}

namespace {
float sr(float v, unsigned b) { return core::sr_fp4_e2m1(v, b); }
}  // namespace

TEST_CASE("TE's software stochastic rounder is unbiased on every E2M1 interval", "[nvfp4][sr]") {
  const float grid[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int k = 0; k + 1 < 8; ++k) {
    const float lo = grid[k], hi = grid[k + 1];
    for (int m = 0; m < 256; ++m) {
      const float v = lo + (hi - lo) * float(m) / 256.0f;  // exact: 8 more bits than the grid
      int up = 0;
      for (unsigned b = 0; b < 256; ++b) {
        const float q = sr(v, b);
        REQUIRE((q == lo || q == hi));
        up += q == hi;
        CHECK(sr(-v, b) == -q);  // the sign is copied
      }
      INFO("v = " << v);
      CHECK(up == m);
    }
  }
}

TEST_CASE("The stochastic rounder's edges follow TE's source", "[nvfp4][sr]") {
  for (unsigned b : {0u, 1u, 127u, 255u}) {
    CHECK(sr(std::nanf(""), b) == 6.0f);
    CHECK(sr(-std::nanf(""), b) == 6.0f);  // NaN -> +6 whatever its sign
    CHECK(sr(INFINITY, b) == 6.0f);
    CHECK(sr(-INFINITY, b) == -6.0f);
    CHECK(sr(7.5f, b) == 6.0f);
    CHECK(sr(6.0f, b) == 6.0f);
    CHECK(std::signbit(sr(-0.0f, b)));  // -0 stays -0 (nibble 8)
  }
  CHECK(sr(0.25f, 127) == 0.0f);  // u = 127/256: 0.25 + 0.25 * 127/256 < 0.5
  CHECK(sr(0.25f, 128) == 0.5f);
  CHECK(sr(5.99f, 0) == 4.0f);
  CHECK(sr(5.99f, 255) == 6.0f);
}

namespace {
using Big = boost::multiprecision::cpp_bin_float_100;

// Sylvester's construction: H1 = [1], H2n = [[Hn, Hn], [Hn, -Hn]].
std::vector<int> sylvester16() {
  std::vector<int> h{1};
  for (int n = 1; n < 16; n *= 2) {
    std::vector<int> g(std::size_t(4 * n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const int v = h[std::size_t(i * n + j)];
        g[std::size_t(i * 2 * n + j)] = v;
        g[std::size_t(i * 2 * n + j + n)] = v;
        g[std::size_t((i + n) * 2 * n + j)] = v;
        g[std::size_t((i + n) * 2 * n + j + n)] = -v;
      }
    h.swap(g);
  }
  return h;
}

float bf16_rne(float f) {  // IEEE round to nearest even at 8 significant bits, finite inputs
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t rest = u & 0xFFFFu, keep = u >> 16;
  std::uint32_t r = keep + ((rest > 0x8000u || (rest == 0x8000u && (keep & 1u))) ? 1u : 0u);
  r <<= 16;
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}
}  // namespace

TEST_CASE("The Hadamard element is the exact sum rounded to fp32, then bf16", "[nvfp4][rht]") {
  const int signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};  // TE's vector
  const std::vector<int> h = sylvester16();
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-20, 20);
  for (int trial = 0; trial < 2000; ++trial) {
    float x[16];
    for (float& v : x) v = bf16_rne(std::ldexp(nd(gen), trial % 2 ? ex(gen) : 0));  // bf16 inputs, spread 2^40
    for (int j = 0; j < 16; ++j) {
      Big s = 0;
      for (int i = 0; i < 16; ++i) s += Big(x[i]) * signs[i] * h[std::size_t(i * 16 + j)];
      const float ref = bf16_rne(static_cast<float>(s / 4));
      const float got = core::rht16_element(x, 1, j, core::kTeRhtSignMask);
      INFO("trial " << trial << " output " << j);
      REQUIRE(std::memcmp(&ref, &got, 4) == 0);
    }
  }
}

namespace {
// The comparison encoder against the general encoder over fp32 bit patterns [lo, hi).
std::uint64_t e2m1_mismatches(std::uint64_t lo, std::uint64_t hi, std::uint64_t step) {
  std::uint64_t bad = 0;
  for (std::uint64_t u = lo; u < hi; u += step) {
    const float v = core::bits_to_f32(std::uint32_t(u));
    bad += core::e2m1_code_satfinite(v) != core::f32_to_fp8(v, kSpecE2M1, Saturation::kSatFinite);
  }
  return bad;
}
}  // namespace

TEST_CASE("The E2M1 comparison encoder equals the general encoder near every boundary", "[nvfp4][e2m1]") {
  CHECK(core::is_e2m1(kSpecE2M1));
  CHECK_FALSE(core::is_e2m1(kSpecE4M3));
  CHECK_FALSE(core::is_e2m1(kSpecE2M3));
  // 4096 fp32 neighbours on each side of every boundary, value and zero, both signs; then a
  // stride through all patterns.
  for (float b : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const std::uint64_t u = core::f32_to_bits(b) | sign;
      CHECK(e2m1_mismatches(u > 4096 ? u - 4096 : 0, u + 4096, 1) == 0);
    }
  }
  CHECK(e2m1_mismatches(0, std::uint64_t(1) << 32, 9973) == 0);
}

TEST_CASE("The E2M1 comparison encoder equals the general encoder on all 2^32 inputs", "[nvfp4][e2m1][exhaustive]") {
  CHECK(e2m1_mismatches(0, std::uint64_t(1) << 32, 1) == 0);
}
