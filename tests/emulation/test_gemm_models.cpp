// GEMM accumulation models: kExact against Boost.Multiprecision, the tensor-core wrappers
// (fast accumulation vs promotion) worked by hand, argument checks, thread invariance.
#include <omp.h>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "support/bits.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/emulation/gemm_models.hpp"

using namespace fp8emu;
using namespace fp8emu::emu;
using Big = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<400, boost::multiprecision::digit_base_2>>;

namespace {
// Boost reference: the exact sum in 400-bit binary floating point (every partial sum of FP8
// products is exact there), then one rounding to float.
float boost_exact(const std::vector<std::uint8_t>& a, Format fa, const std::vector<std::uint8_t>& b, Format fb) {
  Big s = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    s += Big(core::fp8_to_f32(a[k], spec_of(fa))) * Big(core::fp8_to_f32(b[k], spec_of(fb)));
  return s.convert_to<float>();
}

std::uint8_t random_finite(std::mt19937& g, Format f) {
  for (;;) {
    const auto c = std::uint8_t(g());
    if (std::isfinite(core::fp8_to_f32(c, spec_of(f)))) return c;
  }
}

using testing::bits;
}  // namespace

TEST_CASE("exact accumulation equals Boost.Multiprecision", "[emulation][gemm][exact]") {
  std::mt19937 g(42);
  const GemmAccumulation exact{Accumulation::kExact, 0};
  for (const auto& fmts : {std::pair<Format, Format>{Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}}) {
    for (int K : {1, 7, 32, 1000, 16384}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::uint8_t> a(static_cast<std::size_t>(K)), b(static_cast<std::size_t>(K));
        for (int k = 0; k < K; ++k) {
          a[std::size_t(k)] = random_finite(g, fmts.first);
          b[std::size_t(k)] = random_finite(g, fmts.second);
        }
        INFO("K = " << K << " rep " << rep);
        CHECK(bits(dot_fp8(a.data(), fmts.first, b.data(), fmts.second, K, exact)) ==
              bits(boost_exact(a, fmts.first, b, fmts.second)));
      }
    }
  }
}

TEST_CASE("exact accumulation on adversarial inputs", "[emulation][gemm][exact]") {
  const GemmAccumulation exact{Accumulation::kExact, 0};
  // Cancellation: 448*448 - 448*448 + 2^-9*2^-9 = 2^-18 exactly (fp32 sequential would too, but
  // here with the tiny term first: 2^-18 + 200704 - 200704 -> fp32 gives 0).
  std::vector<std::uint8_t> a{0x01, 0x7E, 0xFE}, b{0x01, 0x7E, 0x7E};
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 3, exact) == 0x1p-18f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 3, {Accumulation::kFp32, 0}) == 0.0f);
  CHECK(bits(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 3, exact)) == bits(boost_exact(a, Format::kE4M3, b, Format::kE4M3)));
  // Huge K of maximal products: 65536 * 448 * 57344 (E4M3 x E5M2) = 2^16 * 25690112.
  std::vector<std::uint8_t> big_a(65536, 0x7E), big_b(65536, 0x7B);
  CHECK(dot_fp8(big_a.data(), Format::kE4M3, big_b.data(), Format::kE5M2, 65536, exact) ==
        boost_exact(big_a, Format::kE4M3, big_b, Format::kE5M2));
  // All subnormal operands, alternating signs, plus one rounding tie: the sum 1 + 2^-24 ties to 1.
  std::vector<std::uint8_t> s_a, s_b;
  for (int i = 0; i < 1000; ++i) {
    s_a.push_back(std::uint8_t(1 + i % 7) | (i % 2 ? 0x80 : 0));
    s_b.push_back(std::uint8_t(1 + (i * 3) % 7));
  }
  CHECK(bits(dot_fp8(s_a.data(), Format::kE4M3, s_b.data(), Format::kE4M3, 1000, exact)) ==
        bits(boost_exact(s_a, Format::kE4M3, s_b, Format::kE4M3)));
  // Special values: Inf * 0 -> NaN; Inf alone -> Inf.
  std::vector<std::uint8_t> ia{0x7C, 0x3C}, ib{0x38, 0x38};
  CHECK(std::isinf(dot_fp8(ib.data(), Format::kE4M3, ia.data(), Format::kE5M2, 2, exact)));
  std::vector<std::uint8_t> z{0x00, 0x38};
  CHECK(std::isnan(dot_fp8(z.data(), Format::kE4M3, ia.data(), Format::kE5M2, 2, exact)));
}

TEST_CASE("tensor-core models: fast accumulation vs promotion every N, worked by hand", "[emulation][gemm][hopper]") {
  // K = 64, E4M3. Block 1 (k < 32): one product 256 (0x78 * 0x38); block 2: one product 2^-6
  // (0x08 * 0x38). Fast accumulation chains block 2 onto 256: alignment at 2^8 keeps 13 fraction
  // bits (quantum 2^-5), so 2^-6 is truncated away: 256. Promotion every 32: block 2 alone is 2^-6,
  // and the fp32 add 256 + 2^-6 = 256.015625 is exact.
  std::vector<std::uint8_t> a(64, 0x00), b(64, 0x38);
  a[0] = 0x78;
  a[40] = 0x08;
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 64, {Accumulation::kHopper, 0}) == 256.0f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 64, {Accumulation::kHopper, 32}) == 256.015625f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 64, {Accumulation::kAda, 0}) == 256.0f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 64, te_dgrad(Accumulation::kHopper)) == 256.0f);  // 128 > K
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 64, {Accumulation::kFp32, 0}) == 256.015625f);
  // The fast Hopper GEMM element equals the validated block chain (core::mma_dot, blocks of 32).
  std::mt19937 g(7);
  std::vector<std::uint8_t> x(4096), y(4096);
  for (auto& c : x) c = random_finite(g, Format::kE4M3);
  for (auto& c : y) c = random_finite(g, Format::kE4M3);
  CHECK(bits(dot_fp8(x.data(), Format::kE4M3, y.data(), Format::kE4M3, 4096, {Accumulation::kHopper, 0})) ==
        core::mma_dot(x.data(), kSpecE4M3, y.data(), kSpecE4M3, 4096, 32, 0u, core::MmaAccumulator::kFp32));
}

TEST_CASE("split-K: ranges of whole 128-element tiles, partials summed in fp32, worked by hand",
          "[emulation][gemm][split-k]") {
  // K = 256, E4M3: one product 256 (0x78 * 0x38) at k = 0 and one 2^-6 (0x08 * 0x38) at k = 200.
  // Un-split fast accumulation truncates 2^-6 away at the alignment on 2^8 (quantum 2^-5): 256.
  // split_k 2 or 3: ceil(256 / S) = 128 or 86, rounded up to 128: ranges [0, 128) and [128, 256),
  // partials 256 and 2^-6, fp32 sum 256.015625 (exact).
  std::vector<std::uint8_t> a(256, 0x00), b(256, 0x38);
  a[0] = 0x78;
  a[200] = 0x08;
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 256, {Accumulation::kHopper, 0, 1}) == 256.0f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 256, {Accumulation::kHopper, 0, 2}) == 256.015625f);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 256, {Accumulation::kHopper, 0, 3}) == 256.015625f);
  // split_k 4: ranges of 128 too (ceil(256 / 4) = 64 -> 128): two non-empty ranges, two empty.
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 256, {Accumulation::kHopper, 0, 4}) == 256.015625f);
  // With the 2^-6 product at k = 100 both products fall into the first range: 256, as un-split.
  std::swap(a[100], a[200]);
  CHECK(dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE4M3, 256, {Accumulation::kHopper, 0, 2}) == 256.0f);
  // K = 300, split_k 2: ceil(150) -> 256: ranges [0, 256) and [256, 300); a product at k = 280 is
  // kept, one at k = 250 is truncated (the same range as 256).
  std::vector<std::uint8_t> c(300, 0x00), d(300, 0x38);
  c[0] = 0x78;
  c[280] = 0x08;
  CHECK(dot_fp8(c.data(), Format::kE4M3, d.data(), Format::kE4M3, 300, {Accumulation::kHopper, 0, 2}) == 256.015625f);
  std::swap(c[250], c[280]);
  CHECK(dot_fp8(c.data(), Format::kE4M3, d.data(), Format::kE4M3, 300, {Accumulation::kHopper, 0, 2}) == 256.0f);
  // The scale product scales the sum of the partials: (256 + 2^-6) * 0.5 * 0.25, exact.
  float D = 0.0f;
  std::swap(c[250], c[280]);
  gemm_fp8_tn(1, 1, 300, c.data(), Format::kE4M3, 0.5f, d.data(), Format::kE4M3, 0.25f, {Accumulation::kHopper, 0, 2},
              &D);
  CHECK(D == 32.001953125f);
  // Argument checks.
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 1, 300, c.data(), Format::kE4M3, 1, d.data(), Format::kE4M3, 1,
                                {Accumulation::kHopper, 0, 0}, &D),
                    "GEMM: split_k must be >= 1, got 0");
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 1, 300, c.data(), Format::kE4M3, 1, d.data(), Format::kE4M3, 1,
                                {Accumulation::kExact, 0, 2}, &D),
                    "GEMM: the exact model takes no split_k (it would no longer be exact)");
}

TEST_CASE("scaled GEMM: layout, scales, argument checks, thread invariance", "[emulation][gemm]") {
  // A = [[1, 2]], B = [[1, 1], [2, 0.5]] (E4M3: 1 = 0x38, 2 = 0x40, 0.5 = 0x30): D = [[3, 3]] * 0.5 * 4.
  const std::uint8_t A[2] = {0x38, 0x40}, B[4] = {0x38, 0x38, 0x40, 0x30};
  float D[2];
  gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 0.5f, B, Format::kE4M3, 4.0f, {Accumulation::kHopper, 0}, D);
  CHECK(D[0] == 6.0f);
  CHECK(D[1] == 6.0f);
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 1, 1, A, Format::kE5M2, 1, B, Format::kE5M2, 1, {}, D),
                    Catch::Contains("E5M2 x E5M2 is not supported"));
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 1, 1, A, Format::kE4M3, 1, B, Format::kE4M3, 1, {Accumulation::kHopper, 48}, D),
                    Catch::Contains("not a multiple of the hopper block (32)"));
  CHECK_THROWS_WITH(parse_accumulation("tf32"), Catch::Contains("accepted: exact, fp32, hopper, ada"));
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 1, 1, A, Format::kE4M3, 1, B, Format::kE4M3, 1, {Accumulation::kExact, 32}, D),
                    Catch::Contains("exact model takes no promotion"));
  const int M = 40, N = 30, K = 256;
  std::mt19937 g(3);
  std::vector<std::uint8_t> a(std::size_t(M) * K), b(std::size_t(N) * K);
  for (auto& c : a) c = random_finite(g, Format::kE4M3);
  for (auto& c : b) c = random_finite(g, Format::kE5M2);
  for (Accumulation m : {Accumulation::kExact, Accumulation::kFp32, Accumulation::kHopper, Accumulation::kAda}) {
    std::vector<float> d1(std::size_t(M) * N), d2(d1.size());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const GemmAccumulation acc{m, m == Accumulation::kExact ? 0 : 128};
    gemm_fp8_tn(M, N, K, a.data(), Format::kE4M3, 0.25f, b.data(), Format::kE5M2, 3.0f, acc, d1.data());
    omp_set_num_threads(2);
    gemm_fp8_tn(M, N, K, a.data(), Format::kE4M3, 0.25f, b.data(), Format::kE5M2, 3.0f, acc, d2.data());
    omp_set_num_threads(saved);
    INFO(to_string(m));
    CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
  }
}

TEST_CASE("vectorised tensor-core GEMM equals the scalar model element by element", "[emulation][gemm][hopper]") {
  // The scalar model (dot_fp8 -> core::mma_dot) reproduces the recorded GPU rows; the vectorised
  // GEMM path must give the same bits for every element, model and wrapper.
  std::mt19937 g(11);
  const int M = 7, N = 140, K = 300;  // N crosses a 128-column chunk; K is not a multiple of 32
  for (const auto& fmts : {std::pair<Format, Format>{Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2},
                           {Format::kE5M2, Format::kE4M3}}) {
    std::vector<std::uint8_t> a(std::size_t(M) * K), b(std::size_t(N) * K);
    for (auto& c : a) c = (g() % 5 == 0) ? std::uint8_t(g() % 8) : random_finite(g, fmts.first);  // zeros, subnormals
    for (auto& c : b) c = (g() % 7 == 0) ? std::uint8_t(0x80) : random_finite(g, fmts.second);
    // split_k 2 and 3: ranges [0, 256) + [256, 300), and three of 128 with a short last one.
    for (const GemmAccumulation acc :
         {GemmAccumulation{Accumulation::kHopper, 0}, GemmAccumulation{Accumulation::kHopper, 64},
          GemmAccumulation{Accumulation::kAda, 0}, GemmAccumulation{Accumulation::kAda, 128},
          GemmAccumulation{Accumulation::kFp32, 0}, GemmAccumulation{Accumulation::kHopper, 0, 2},
          GemmAccumulation{Accumulation::kHopper, 0, 3}, GemmAccumulation{Accumulation::kHopper, 96, 2},
          GemmAccumulation{Accumulation::kAda, 128, 3}, GemmAccumulation{Accumulation::kFp32, 0, 2},
          GemmAccumulation{Accumulation::kHopperMmaSync, 0, 2}}) {
      std::vector<float> d(std::size_t(M) * N);
      gemm_fp8_tn(M, N, K, a.data(), fmts.first, 1.0f, b.data(), fmts.second, 1.0f, acc, d.data());
      // The expected element: without split-K, the scalar model; with it, split-K as cuBLASLt's
      // measured definition (docs/tensor-core-model.md) composed here by hand from the scalar model
      // of each range without split: ranges of L = roundup(ceil(K / split_k), 128) K-elements, their
      // partials added in fp32 in range order from the first (so the split-K of a model that has no
      // vectorised path, hopper-mma-sync, is not checked against itself).
      auto expected = [&](int i, int j) {
        if (acc.split_k <= 1) return dot_fp8(a.data() + i * K, fmts.first, b.data() + j * K, fmts.second, K, acc);
        const int L = ((K + acc.split_k - 1) / acc.split_k + 127) / 128 * 128;
        const GemmAccumulation one{acc.model, acc.promotion_interval, 1};
        float total = 0.0f;
        for (int k0 = 0; k0 < K; k0 += L) {
          const float p = dot_fp8(a.data() + i * K + k0, fmts.first, b.data() + j * K + k0, fmts.second,
                                  std::min(L, K - k0), one);
          total = k0 == 0 ? p : total + p;
        }
        return total;
      };
      int mismatches = 0;
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) mismatches += bits(d[std::size_t(i * N + j)]) != bits(expected(i, j));
      INFO(to_string(acc.model) << " promotion " << acc.promotion_interval << " split_k " << acc.split_k);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("epilogue: alpha, beta*C, bias, amax of D and the output types, worked by hand", "[emulation][gemm][epilogue]") {
  // acc = A B^T = [[3, 3]] for A = [[1, 2]], B = [[1, 1], [2, 0.5]] (E4M3 0x38 = 1, 0x40 = 2, 0x30 = 0.5);
  // scale_inv 0.5 * 4 -> t = [[6, 6]]; alpha 0.5 -> [[3, 3]]; + 2 * C with C = [[1, -1]] -> [[5, 1]];
  // + bias [0.25, 0] -> [[5.25, 1]].
  const std::uint8_t A[2] = {0x38, 0x40}, B[4] = {0x38, 0x38, 0x40, 0x30};
  const float C[2] = {1.0f, -1.0f}, bias[2] = {0.25f, 0.0f};
  GemmEpilogue ep;
  ep.alpha = 0.5f;
  ep.beta = 2.0f;
  ep.C = C;
  ep.bias = bias;
  float amax = 0.0f;
  ep.amax_d = &amax;
  const GemmAccumulation acc{Accumulation::kHopper, 0};
  float d32[2];
  gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 0.5f, B, Format::kE4M3, 4.0f, acc, ep, d32);
  CHECK(d32[0] == 5.25f);
  CHECK(d32[1] == 1.0f);
  CHECK(amax == 5.25f);
  std::uint16_t d16[2];
  ep.output = GemmOutput::kBf16;
  gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 0.5f, B, Format::kE4M3, 4.0f, acc, ep, d16);
  CHECK(d16[0] == 0x40A8);  // 5.25 = 1.3125 * 2^2
  CHECK(d16[1] == 0x3F80);
  ep.output = GemmOutput::kFp16;
  gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 0.5f, B, Format::kE4M3, 4.0f, acc, ep, d16);
  CHECK(d16[0] == 0x4540);  // 0.10001.0101000000
  CHECK(d16[1] == 0x3C00);
  // E4M3 output with D scale 2: 10.5 = 1.3125 * 8 ties between 1.25 and 1.375 -> even 1.25: 0x52;
  // 2 -> 0x40. amax of D is taken before the D scale: still 5.25.
  std::uint8_t d8[2];
  ep.output = GemmOutput::kFp8;
  ep.output_format = Format::kE4M3;
  ep.d_scale = 2.0f;
  amax = 0.0f;
  gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 0.5f, B, Format::kE4M3, 4.0f, acc, ep, d8);
  CHECK(d8[0] == 0x52);
  CHECK(d8[1] == 0x40);
  CHECK(amax == 5.25f);
  GemmEpilogue no_c;
  no_c.beta = 1.0f;
  CHECK_THROWS_WITH(gemm_fp8_tn(1, 2, 2, A, Format::kE4M3, 1, B, Format::kE4M3, 1, acc, no_c, d32),
                    Catch::Contains("needs a C matrix"));
  // bf16 rounding: 1 + 2^-8 ties to even 1.0; 1 + 3*2^-8 goes up to 1 + 2^-6; NaN stays NaN.
  CHECK(f32_to_bf16_bits(1.0f + 0x1p-8f) == 0x3F80);
  CHECK(f32_to_bf16_bits(1.0f + 3 * 0x1p-8f) == 0x3F82);
  CHECK(f32_to_bf16_bits(NAN) == 0x7FC0);
}
