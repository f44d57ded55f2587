// GEMM accumulation order, worked by hand.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "gemm_isa.hpp"     // emulation/: the instruction-set paths
#include "gemm_kernel.hpp"  // emulation/: products_exact_fp32

using namespace fp8emu;

TEST_CASE("fp32 GEMM adds products in increasing k with fp32 rounding", "[emulation][gemm]") {
  // Row [1e8, 1, -1e8, 1] times a column of ones: sequential fp32 gives ((1e8 + 1) -> 1e8) - 1e8 + 1
  // = 1 (1e8 + 1 is not representable: the fp32 ulp at 1e8 is 8). The exact sum is 2.
  const std::vector<float> a{1e8f, 1.0f, -1e8f, 1.0f};
  const std::vector<float> b{1.0f, 1.0f, 1.0f, 1.0f};
  float c = -7.0f;
  emu::gemm_f32_nn(1, 1, 4, a.data(), b.data(), &c);
  CHECK(c == 1.0f);
}

TEST_CASE("FP8 GEMM: exact products, fp32 sequential sum, then scale_inv_a * scale_inv_b", "[emulation][gemm]") {
  // E4M3 codes: 0x7E = 448, 0x01 = 2^-9, 0xFE = -448. A row = [448, 2^-9, -448, 2^-9], B column =
  // [448, 2^-9, 448, 2^-9]. Products: 200704, 2^-18, -200704, 2^-18 (all exact in fp32).
  // Sequential fp32: 200704 + 2^-18 rounds to 200704 (ulp 2^-6 there), minus 200704 = 0, + 2^-18.
  // The exact sum would be 2^-17.
  const std::vector<std::uint8_t> A{0x7E, 0x01, 0xFE, 0x01};
  const std::vector<std::uint8_t> B{0x7E, 0x01, 0x7E, 0x01};
  float d = 0.0f;
  emu::gemm_fp8_nn(1, 1, 4, A.data(), Format::kE4M3, 1.0f, B.data(), Format::kE4M3, 1.0f, &d);
  CHECK(d == 0x1p-18f);
  // Scales: D = acc * (0.5 * 0.25).
  emu::gemm_fp8_nn(1, 1, 4, A.data(), Format::kE4M3, 0.5f, B.data(), Format::kE4M3, 0.25f, &d);
  CHECK(d == 0x1p-21f);
  // Mixed formats: E4M3 1.0 (0x38) x E5M2 -2.0 (1.10000.00 = 0xC0) = -2.
  const std::uint8_t a1 = 0x38, b1 = 0xC0;
  emu::gemm_fp8_nn(1, 1, 1, &a1, Format::kE4M3, 1.0f, &b1, Format::kE5M2, 1.0f, &d);
  CHECK(d == -2.0f);
}

TEST_CASE("GEMM layouts: C[i,j] = sum_k A[i,k] B[k,j], row-major, and transpose", "[emulation][gemm]") {
  // A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]] -> C = [[4,5],[10,11]].
  const std::vector<float> A{1, 2, 3, 4, 5, 6}, B{1, 0, 0, 1, 1, 1};
  std::vector<float> C(4), At(6);
  emu::gemm_f32_nn(2, 2, 3, A.data(), B.data(), C.data());
  CHECK(C == std::vector<float>{4, 5, 10, 11});
  emu::transpose(2, 3, A.data(), At.data());
  CHECK(At == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("fp32 GEMM equals a plain k-ordered loop for odd shapes", "[emulation][gemm]") {
  // The documented order, written out: c = 0; for k: c = c + a*b (separate roundings).
  const int M = 13, N = 21, K = 37;
  std::vector<float> A(std::size_t(M) * K), B(std::size_t(K) * N), C(std::size_t(M) * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = std::sin(float(i) * 1.7f) * 1e3f;
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = std::cos(float(i) * 0.9f) * 1e-2f;
  emu::gemm_f32_nn(M, N, K, A.data(), B.data(), C.data());
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float c = 0.0f;
      for (int k = 0; k < K; ++k) {
        const volatile float p = A[std::size_t(i) * K + k] * B[std::size_t(k) * N + j];  // no contraction
        c = c + p;
      }
      CHECK(std::memcmp(&c, &C[std::size_t(i) * N + j], 4) == 0);
    }
}

TEST_CASE("GEMMs are identical for 1 and 2 threads", "[emulation][gemm][determinism]") {
  const int M = 37, N = 29, K = 301;
  std::vector<float> A(std::size_t(M) * K), B(std::size_t(K) * N);
  std::vector<std::uint8_t> Aq(A.size()), Bq(B.size());
  for (std::size_t i = 0; i < A.size(); ++i) {
    A[i] = std::sin(float(i)) * 100.0f;
    Aq[i] = std::uint8_t((i * 37u) & 0x77u);  // no NaN codes
  }
  for (std::size_t i = 0; i < B.size(); ++i) {
    B[i] = std::cos(float(i) * 1.3f);
    Bq[i] = std::uint8_t((i * 91u) & 0x77u);  // no NaN codes
  }
  std::vector<float> c1(std::size_t(M) * N), c2(c1.size()), d1(c1.size()), d2(c1.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  emu::gemm_f32_nn(M, N, K, A.data(), B.data(), c1.data());
  emu::gemm_fp8_nn(M, N, K, Aq.data(), Format::kE4M3, 0.3f, Bq.data(), Format::kE5M2, 7.0f, d1.data());
  omp_set_num_threads(2);
  emu::gemm_f32_nn(M, N, K, A.data(), B.data(), c2.data());
  emu::gemm_fp8_nn(M, N, K, Aq.data(), Format::kE4M3, 0.3f, Bq.data(), Format::kE5M2, 7.0f, d2.data());
  omp_set_num_threads(saved);
  CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0);
  CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
}

TEST_CASE("FP8 GEMM: the FMA tiles run only where every product is an fp32", "[emulation][gemm]") {
  // The fp32-model and block-scaled tiles sum RN(c + a*b) with one FMA where products_exact_fp32
  // holds, which equals RN(c + RN(a*b)) only if every product is an fp32. Oracle: each product of
  // two fp32 values is exact in double; it is an fp32 iff converting it to float changes nothing.
  const auto all_exact = [](const float* ta, const float* tb) {
    for (int x = 0; x < 256; ++x)
      for (int y = 0; y < 256; ++y) {
        if (!std::isfinite(ta[x]) || !std::isfinite(tb[y])) continue;
        const double p = double(ta[x]) * double(tb[y]);
        if (double(float(p)) != p || !std::isfinite(float(p))) return false;
      }
    return true;
  };
  int pairs = 0;
  for (int a = 0; a < kFormatCount; ++a)
    for (int b = 0; b < kFormatCount; ++b) {
      const Format fa = Format(a), fb = Format(b);
      if (!(is_fp8_or_fnuz(fa) || is_mx_element(fa)) || !(is_fp8_or_fnuz(fb) || is_mx_element(fb))) continue;
      ++pairs;
      INFO(format_name(fa) << " x " << format_name(fb));
      CHECK(emu::detail::products_exact_fp32(fa, fb));  // the FP8 GEMMs take the FMA tiles ...
      CHECK(all_exact(emu::decode_table(fa), emu::decode_table(fb)));  // ... and may: every product is exact
    }
  CHECK(pairs == 49);  // e4m3fn, e5m2, their FNUZ forms, e2m3fn, e3m2fn, e2m1fn
  // Tables the test must refuse, each at one of its limits: 13 + 12 significant bits, the lowest bit
  // under 2^-149, a product of 2^128; and the same tables one step inside them.
  struct Case {
    float a, b;
    bool exact;
  };
  // (2^13 - 1) (2^12 - 1) needs 25 bits; (2^12 - 1)^2 needs 24.
  const float w13 = 2.0f - std::ldexp(1.0f, -12), w12 = 2.0f - std::ldexp(1.0f, -11);
  for (const Case c : {Case{w13, w12, false}, Case{w12, w12, true},
                       Case{std::ldexp(1.0f, -75), std::ldexp(1.0f, -75), false},
                       Case{std::ldexp(1.0f, -75), std::ldexp(1.0f, -74), true},
                       Case{std::ldexp(1.0f, 64), std::ldexp(1.0f, 64), false},
                       Case{std::ldexp(1.0f, 64), std::ldexp(1.0f, 63), true}}) {
    float ta[256], tb[256];
    std::fill(ta, ta + 256, 0.0f);
    std::fill(tb, tb + 256, 0.0f);
    ta[1] = c.a;
    tb[1] = -c.b;
    ta[2] = tb[2] = INFINITY;  // ignored: Inf and NaN products are the same with or without FMA
    tb[3] = NAN;
    INFO(c.a << " x " << c.b);
    CHECK(all_exact(ta, tb) == c.exact);
    CHECK(emu::detail::products_exact_fp32(ta, tb) == c.exact);
  }
}

TEST_CASE("FP8 GEMM: the fp32 model's NaN is 0x7FFFFFFF on every ISA path", "[emulation][gemm]") {
  // A row [NaN, +Inf] (E5M2 0x7F, 0x7C) times B [1, 0] (E4M3 0x38, 0x00): the running sum is NaN
  // when Inf * 0 (a new default NaN) joins it. A multiply then an add returns the product's NaN
  // (0xFFC00000 on x86), an FMA the accumulator's: every path writes the one NaN 0x7FFFFFFF.
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved = isa_ns::gemm_isa();
  const std::uint8_t A[] = {0x7F, 0x7C}, B[] = {0x38, 0x00};
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p) {
    REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
    for (int promotion : {0, 1}) {
      emu::GemmAccumulation acc;
      acc.promotion_interval = promotion;
      float d = 0.0f;
      emu::gemm_fp8_tn(1, 1, 2, A, Format::kE5M2, 1.0f, B, Format::kE4M3, 1.0f, acc, &d);
      std::uint32_t u;
      std::memcpy(&u, &d, 4);
      INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", promotion " << promotion);
      CHECK(u == 0x7FFFFFFFu);
    }
  }
  isa_ns::set_gemm_isa(saved);
}
