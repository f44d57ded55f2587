// MXFP8 and 128-block quantization and the block-scaled GEMM, values worked by hand from TE's rules
// (TE cast/mxfp8/quantize_mxfp8.cuh, util/ptx.cuh float_to_e8m0; transpose/
// quantize_transpose_vector_blockwise.cu and quantize_transpose_square_blockwise.cu;
// docs/transformer-engine.md §MXFP8, §Block scaling) and from the OCP MX v1.0 spec (§6.3).
#include <omp.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/emulation/block_quantize.hpp"

using namespace fp8emu;
using namespace fp8emu::emu;

TEST_CASE("MXFP8 scale at the rounding boundary of the E8M0 code", "[emulation][mxfp8]") {
  // fl32(1/448) = 0x3B124925 (TE max_norm_rcp) = 9586981 * 2^-32, just above 1/448.
  const float rcp = float(1.0 / kSpecE4M3.max_finite());
  std::uint32_t rb;
  std::memcpy(&rb, &rcp, 4);
  CHECK(rb == 0x3B124925u);
  // amax 448: 448 * 9586981 * 2^-32 = 1 + 192 * 2^-32, which is 0.375 ulp above 1: RN gives exactly 1,
  // so e = 127 (scale 1) and 448 is stored unsaturated as 0x7E.
  CHECK(mxfp8_scale_code(0x1.cp8f, Format::kE4M3, E8M0Rule::kTransformerEngine) == 127);
  // amax 449: t = 1.0022.. has a non-zero mantissa -> rounds up to e = 128 (scale 2).
  CHECK(mxfp8_scale_code(449.0f, Format::kE4M3, E8M0Rule::kTransformerEngine) == 128);
  // E5M2: fl32(1/57344) = 0x37924925.
  const float rcp5 = float(1.0 / kSpecE5M2.max_finite());
  std::memcpy(&rb, &rcp5, 4);
  CHECK(rb == 0x37924925u);
  CHECK(mxfp8_scale_code(0x1.cp15f, Format::kE5M2, E8M0Rule::kTransformerEngine) == 127);
  // Zero block -> code 0; Inf amax -> 0xFE (saturated).
  CHECK(mxfp8_scale_code(0.0f, Format::kE4M3, E8M0Rule::kTransformerEngine) == 0);
  CHECK(mxfp8_scale_code(INFINITY, Format::kE4M3, E8M0Rule::kTransformerEngine) == 0xFE);
}

TEST_CASE("MXFP8 TE rule never saturates a block, the OCP floor rule can", "[emulation][mxfp8]") {
  // amax 480: TE t = 480/448 -> rounds up to 2 (e = 128): 480 * 2^-1 = 240 fits.
  // OCP: floor(log2 480) = 8, minus E4M3 emax 8 -> X = 2^0: 480 saturates to 448.
  CHECK(mxfp8_scale_code(480.0f, Format::kE4M3, E8M0Rule::kTransformerEngine) == 128);
  CHECK(mxfp8_scale_code(480.0f, Format::kE4M3, E8M0Rule::kOcp) == 127);
  std::vector<float> x(32, 1.0f);
  x[5] = 480.0f;
  QuantizeStats te, ocp;
  const BlockQuantized a = quantize_mxfp8(x.data(), 1, 32, BlockAxis::kRowwise, Format::kE4M3,
                                          E8M0Rule::kTransformerEngine, &te);
  const BlockQuantized b = quantize_mxfp8(x.data(), 1, 32, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kOcp, &ocp);
  CHECK(a.codes[5] == 0x77);  // 240 = 1.875 * 2^7 = 0.1110.111
  CHECK(a.scale_inv[0] == 2.0f);
  CHECK(te.saturated == 0);
  CHECK(b.codes[5] == 0x7E);  // 448: clipped
  CHECK(b.scale_inv[0] == 1.0f);
  CHECK(ocp.saturated == 1);
  // Both rules agree when amax is a power of two times fp8_max's binade start, e.g. amax 256:
  // TE: 256/448 -> up to 1 (e=127); OCP: floor(log2 256) - 8 = 0 (e=127).
  CHECK(mxfp8_scale_code(256.0f, Format::kE4M3, E8M0Rule::kTransformerEngine) ==
        mxfp8_scale_code(256.0f, Format::kE4M3, E8M0Rule::kOcp));
}

// torchao's ScaleCalculationMode.EVEN (prototype/mx_formats/mx_tensor.py to_mx), restated as
// arithmetic rather than torchao's bit operations: amax rounded half up to the element format's
// significand (1 + mantissa bits), then floor(log2) - emax, biased by 127 and clamped to [0, 254].
// Hand-worked values: E4M3 (3 mantissa bits, emax 8): 480 = 1.111b * 2^8 stays, code 127; 496 =
// 1.1111b * 2^8 rounds up to 2^9, code 128. E2M1 (1 bit, emax 2): the scale steps up at 7 * 2^s,
// halfway between the grid maxima 6 and 8 (so 6.99 keeps code 127, 7 gives 128), as the
// MXFP4 checkpoint code that states "same rule as torchao's EVEN" documents.
TEST_CASE("The EVEN E8M0 rule rounds amax to the element precision, then floors", "[emulation][mxfp8]") {
  CHECK(mxfp8_scale_code(480.0f, Format::kE4M3, E8M0Rule::kEven) == 127);
  CHECK(mxfp8_scale_code(496.0f, Format::kE4M3, E8M0Rule::kEven) == 128);
  CHECK(mxfp8_scale_code(6.99f, Format::kE2M1, E8M0Rule::kEven) == 127);
  CHECK(mxfp8_scale_code(7.0f, Format::kE2M1, E8M0Rule::kEven) == 128);
  CHECK(mxfp8_scale_code(6.0f, Format::kE2M1, E8M0Rule::kEven) == 127);
  CHECK(mxfp8_scale_code(0.0f, Format::kE4M3, E8M0Rule::kEven) == 0);
  CHECK(mxfp8_scale_code(std::nanf(""), Format::kE4M3, E8M0Rule::kEven) == 0xFF);
  const Format formats[] = {Format::kE4M3, Format::kE5M2, Format::kE2M3, Format::kE3M2, Format::kE2M1};
  std::uint64_t checked = 0;
  for (const Format f : formats) {
    const FormatSpec s = spec_of(f);
    for (std::uint64_t u = 0; u < 0x7F800000u; u += 4093) {  // every binade, many significands
      float a;
      const std::uint32_t b = std::uint32_t(u);
      std::memcpy(&a, &b, 4);
      int want = 0;
      if (a > 0.0f) {
        int k = 0;
        std::frexp(double(a), &k);                                 // a in [2^(k-1), 2^k)
        const double ulp = std::ldexp(1.0, k - 1 - s.mantissa_bits);  // of a (1 + mantissa bits) significand
        const double r = std::floor(double(a) / ulp + 0.5) * ulp;    // half up
        int kr = 0;
        std::frexp(r, &kr);
        want = std::min(254, std::max(0, (kr - 1) - s.emax() + 127));
      }
      INFO(spec_of(f).name << " amax " << a);
      REQUIRE(int(mxfp8_scale_code(a, f, E8M0Rule::kEven)) == want);
      ++checked;
    }
  }
  CHECK(checked > 2000000);
}

TEST_CASE("MXFP8 blocks: zero block, NaN element, partial block, column-wise direction", "[emulation][mxfp8]") {
  // 2 rows x 40 columns: row 0 = block of 1.0 then 8 values 0.0; row 1 = 3.0 with one NaN.
  std::vector<float> x(80, 0.0f);
  for (int c = 0; c < 32; ++c) x[std::size_t(c)] = 1.0f;
  for (int c = 0; c < 40; ++c) x[std::size_t(40 + c)] = 3.0f;
  x[40 + 7] = NAN;
  const BlockQuantized q = quantize_mxfp8(x.data(), 2, 40, BlockAxis::kRowwise, Format::kE4M3,
                                          E8M0Rule::kTransformerEngine, nullptr);
  REQUIRE(q.blocks() == 2);
  // amax 1: t = RN(1 * fl32(1/448)) = 0x3B124925 (2^-9 * 1.14) -> rounds up to 2^-8: e = 119,
  // multiplier 2^8: 1 -> 256 = 0.1111.000 = 0x78; scale_inv 2^-8.
  CHECK(int(q.e8m0[0]) == 119);
  CHECK(q.codes[0] == 0x78);
  CHECK(q.scale_inv[0] == 0x1p-8f);
  // Zero partial block (8 elements): e = 0, outputs 0.
  CHECK(int(q.e8m0[1]) == 0);
  CHECK(q.codes[35] == 0x00);
  // Row 1: amax 3 (NaN ignored): t = 3 * 0x3B124925 -> 2^-8 * 1.71 -> up to 2^-7: e = 120,
  // 3 * 128 = 384 = 1.5 * 2^8 = 0.1111.100 = 0x7C; the NaN element is the NaN code 0x7F.
  CHECK(int(q.e8m0[2]) == 120);
  CHECK(q.codes[40] == 0x7C);
  CHECK(q.codes[47] == 0x7F);
  // Column-wise: blocks run down the columns; view [40, 2], every column's block holds 2 rows.
  const BlockQuantized c = quantize_mxfp8(x.data(), 2, 40, BlockAxis::kColumnwise, Format::kE4M3,
                                          E8M0Rule::kTransformerEngine, nullptr);
  CHECK(c.n == 40);
  CHECK(c.k == 2);
  CHECK(c.blocks() == 1);
  // Column 0 holds {1, 3}: amax 3 -> e = 120 (multiplier 2^7): 1 -> 128 = 0x70, 3 -> 0x7C.
  CHECK(int(c.e8m0[0]) == 120);
  CHECK(c.codes[0] == 0x70);
  CHECK(c.codes[1] == 0x7C);
}

TEST_CASE("128-block scaling: pow2 scales, zero block, 2D tiles and their transpose", "[emulation][block]") {
  // 1 x 130 row: first block amax 3 -> s = 448/3 -> pow2 128; second (partial, 2 elements) all zero -> s = 1.
  std::vector<float> x(130, 0.0f);
  for (int i = 0; i < 128; ++i) x[std::size_t(i)] = (i % 2) ? -3.0f : 1.5f;
  const BlockQuantized q = quantize_block_1d(x.data(), 1, 130, BlockAxis::kRowwise, Format::kE4M3, 128, true, 0.0f, nullptr);
  REQUIRE(q.blocks() == 2);
  CHECK(q.scale_inv[0] == 1.0f / 128.0f);
  CHECK(q.scale_inv[1] == 1.0f);
  CHECK(q.codes[0] == 0x74);  // 1.5 * 128 = 192 = 1.5 * 2^7: exponent field 14 -> 0.1110.100
  CHECK(q.codes[1] == 0xFC);  // -384 = -1.5 * 2^8 = 1.1111.100
  // fp32 scales: s = RN(448/3), scale_inv = RN(1/s).
  const BlockQuantized f = quantize_block_1d(x.data(), 1, 130, BlockAxis::kRowwise, Format::kE4M3, 128, false, 0.0f, nullptr);
  CHECK(f.scale_inv[0] == 1.0f / (0x1.cp8f / 3.0f));

  // 2D: a 130 x 3 matrix; tile (0,0) holds rows 0..127 with amax 2, tile (1,0) rows 128..129 amax 0.5.
  std::vector<float> w(130 * 3, 2.0f);
  for (int c = 0; c < 3; ++c) {
    w[std::size_t(128 * 3 + c)] = 0.5f;
    w[std::size_t(129 * 3 + c)] = -0.25f;
  }
  const BlockQuantized2D t = quantize_block_2d(w.data(), 130, 3, Format::kE4M3, 128, true, 0.0f, nullptr);
  // Row-wise view [130, 3], one K-block: rows 0..127 scale 448/2 -> 128 (inv 2^-7); rows 128.. scale
  // 448/0.5 = 896 -> 512 (inv 2^-9).
  CHECK(t.rowwise.scale_inv[0] == 0x1p-7f);
  CHECK(t.rowwise.scale_inv[128] == 0x1p-9f);
  // Column-wise view [3, 130], two K-blocks: (tile 0, tile 1) scales.
  CHECK(t.columnwise.n == 3);
  CHECK(t.columnwise.k == 130);
  CHECK(t.columnwise.scale_inv[0] == 0x1p-7f);
  CHECK(t.columnwise.scale_inv[1] == 0x1p-9f);
  for (int r = 0; r < 130; ++r)
    for (int c = 0; c < 3; ++c)
      CHECK(t.columnwise.codes[std::size_t(c * 130 + r)] == t.rowwise.codes[std::size_t(r * 3 + c)]);
}

TEST_CASE("block-scaled GEMM sums each block's partial times its scales", "[emulation][block][gemm]") {
  // A = [1 x 64]: block 0 all 1.0, block 1 all 2.0; B = [1 x 64]: all 1.0. Each value is stored
  // exactly with a power-of-two E8M0 scale (TE's rule: amax 1.0 -> 256 * 2^-8, amax 2.0 -> 256 *
  // 2^-7, code 0x78 each), so D = 32*1*1 + 32*2*1 = 96.
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  for (int i = 32; i < 64; ++i) a[std::size_t(i)] = 2.0f;
  const BlockQuantized qa = quantize_mxfp8(a.data(), 1, 64, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
  const BlockQuantized qb = quantize_mxfp8(b.data(), 1, 64, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
  REQUIRE(qa.scale_inv.size() == 2);
  CHECK(qa.scale_inv[0] == 0x1p-8f);
  CHECK(qa.scale_inv[1] == 0x1p-7f);
  CHECK(qb.scale_inv[0] == 0x1p-8f);
  CHECK(qb.scale_inv[1] == 0x1p-8f);
  float d = -1.0f;
  gemm_fp8_block_tn(qa, qb, &d);
  CHECK(d == 96.0f);
  // Scales are applied per block: the scale products are 2^-16 in block 0 and 2^-15 in block 1, so a
  // GEMM that used block 0's product for all of K would give 64, and one that used block 1's 128.
  const BlockQuantized qc = quantize_mxfp8(b.data(), 1, 32, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
  CHECK_THROWS_WITH(gemm_fp8_block_tn(qa, qc, &d), Catch::Contains("K mismatch"));
}

TEST_CASE("block quantize and GEMM are identical for 1 and 2 threads", "[emulation][block][determinism]") {
  const int M = 150, N = 120, K = 300;  // large enough that the kernels fork threads
  std::vector<float> a(std::size_t(M) * K), b(std::size_t(N) * K);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i) * 0.7f) * std::exp2(float(i % 13) - 6.0f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(float(i) * 0.3f);
  std::vector<float> d1(std::size_t(M) * N), d2(d1.size()), e1(d1.size()), e2(d1.size());
  const int saved = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    const BlockQuantized qa = quantize_mxfp8(a.data(), M, K, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
    const BlockQuantized qb = quantize_mxfp8(b.data(), N, K, BlockAxis::kRowwise, Format::kE5M2, E8M0Rule::kTransformerEngine, nullptr);
    gemm_fp8_block_tn(qa, qb, (t == 1 ? d1 : d2).data());
    const BlockQuantized ra = quantize_block_1d(a.data(), M, K, BlockAxis::kRowwise, Format::kE4M3, 128, true, 0.0f, nullptr);
    const BlockQuantized rb = quantize_block_1d(b.data(), N, K, BlockAxis::kRowwise, Format::kE4M3, 128, true, 0.0f, nullptr);
    gemm_fp8_block_tn(ra, rb, (t == 1 ? e1 : e2).data());
  }
  omp_set_num_threads(saved);
  CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
  CHECK(std::memcmp(e1.data(), e2.data(), e1.size() * 4) == 0);
}

TEST_CASE("Block amax ignores a signaling NaN (MXFP8, 1x128 and 128x128)", "[emulation][mxfp8]") {
  const std::uint32_t snan_bits = 0x7F800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, sizeof snan);
  // One block: 4.0 then a signaling NaN then 1.0: amax 4, not 1 (the max must not restart).
  const std::vector<float> x{4.0f, snan, 1.0f};
  const emu::BlockQuantized mx = emu::quantize_mxfp8(x.data(), 1, 3, emu::BlockAxis::kRowwise, Format::kE4M3,
                                                     E8M0Rule::kOcp, nullptr);
  CHECK(mx.e8m0[0] == 127 + 2 - 8);  // OCP: floor(log2 4) - emax(E4M3) = 2 - 8
  const emu::BlockQuantized b1 =
      emu::quantize_block_1d(x.data(), 1, 3, emu::BlockAxis::kRowwise, Format::kE4M3, 128, false, 0.0f, nullptr);
  CHECK(b1.scale_inv[0] == 4.0f / 448.0f);
  const emu::BlockQuantized2D b2 = emu::quantize_block_2d(x.data(), 1, 3, Format::kE4M3, 128, false, 0.0f, nullptr);
  CHECK(b2.rowwise.scale_inv[0] == 4.0f / 448.0f);
}

TEST_CASE("block-scaled GEMM with a model: each block's partial is that model's per-tensor GEMM over the block",
          "[emulation][block][gemm]") {
  // Oracle: the per-tensor GEMM (emu::gemm_fp8_tn, its hopper model reproduced bit for bit on H200
  // recordings) of each K-block alone, unscaled (scale_inv 1) and without promotion, then TE's
  // block recipe composed by hand in fp32: d = RN(d + RN(p_b * RN(sa_b * sb_b))) in increasing b.
  // K = 3 whole blocks of 32 and a ragged one of 10; 1 and 2 threads.
  const int M = 5, N = 7, K = 106, block = 32;
  std::vector<float> a(std::size_t(M) * K), b(std::size_t(N) * K);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i) * 1.3f) * std::exp2(float(i % 7) - 3.0f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(float(i) * 0.9f) * std::exp2(float(i % 5) - 2.0f);
  const BlockQuantized qa = quantize_mxfp8(a.data(), M, K, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
  const BlockQuantized qb = quantize_mxfp8(b.data(), N, K, BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr);
  const int nb = qa.blocks();
  REQUIRE(nb == 4);
  for (const Accumulation model : {Accumulation::kHopper, Accumulation::kAda, Accumulation::kExact}) {
    std::vector<float> want(std::size_t(M) * N, 0.0f);
    for (int blk = 0; blk < nb; ++blk) {
      const int k0 = blk * block, len = std::min(block, K - k0);
      std::vector<std::uint8_t> ab(std::size_t(M) * len), bb(std::size_t(N) * len);
      for (int i = 0; i < M; ++i)
        std::memcpy(&ab[std::size_t(i) * len], &qa.codes[std::size_t(i) * K + k0], std::size_t(len));
      for (int j = 0; j < N; ++j)
        std::memcpy(&bb[std::size_t(j) * len], &qb.codes[std::size_t(j) * K + k0], std::size_t(len));
      std::vector<float> p(want.size());
      gemm_fp8_tn(M, N, len, ab.data(), Format::kE4M3, 1.0f, bb.data(), Format::kE4M3, 1.0f, {model, 0, 1}, p.data());
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          volatile float s = qa.scale_inv[std::size_t(i) * nb + blk] * qb.scale_inv[std::size_t(j) * nb + blk];
          volatile float t = p[std::size_t(i) * N + j] * s;
          want[std::size_t(i) * N + j] = want[std::size_t(i) * N + j] + t;
        }
    }
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> got(want.size(), -1.0f);
      gemm_fp8_block_tn(qa, qb, {model, 0, 1}, got.data());
      INFO(to_string(model) << ", " << threads << " threads");
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
    omp_set_num_threads(saved);
  }
  // The model matters: the hopper chain loses bits the fp32 sum keeps somewhere here.
  std::vector<float> hop(std::size_t(M) * N), f32(hop.size());
  gemm_fp8_block_tn(qa, qb, {Accumulation::kHopper, 0, 1}, hop.data());
  gemm_fp8_block_tn(qa, qb, f32.data());
  CHECK(std::memcmp(hop.data(), f32.data(), hop.size() * 4) != 0);
  // Every block promotes: a promotion interval or split-K is refused, naming both.
  CHECK_THROWS_WITH(gemm_fp8_block_tn(qa, qb, te_dgrad(Accumulation::kHopper), hop.data()),
                    Catch::Contains("promotion interval must be 0 and split_k 1, got 128 and 1"));
}
