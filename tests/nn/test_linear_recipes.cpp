// The FP8 Linear under current, MXFP8 and block scaling against references built in double from
// the dequantized operands each GEMM consumes, and TE's weight caching (is_first_microbatch).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "support/nn_helpers.hpp"
#include "fp8emu/nn/linear.hpp"

using namespace fp8emu;
using namespace fp8emu::nn;

namespace {
using testing::random_matrix;

// Dequantized K-major view in double: value[n][k] = decode(code) * scale_inv of its block.
std::vector<double> dequant(const emu::BlockQuantized& q) {
  std::vector<double> v(q.codes.size());
  const FormatSpec& f = spec_of(q.format);
  for (int n = 0; n < q.n; ++n)
    for (int k = 0; k < q.k; ++k)
      v[std::size_t(n * q.k + k)] = double(core::fp8_to_f32(q.codes[std::size_t(n * q.k + k)], f)) *
                                    double(q.scale_inv[std::size_t(n * q.blocks() + k / q.block)]);
  return v;
}

// ref[i][j] = sum_k A[i][k] B[j][k] (+ bias[j]).
std::vector<double> tn(const std::vector<double>& A, const std::vector<double>& B, int M, int N, int K) {
  std::vector<double> out(std::size_t(M) * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) out[std::size_t(i * N + j)] += A[std::size_t(i * K + k)] * B[std::size_t(j * K + k)];
  return out;
}

void check_close(const Matrix& got, const std::vector<double>& want, double tol) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(double(got.data[i]) - want[i]) <= tol * scale);
}
}  // namespace

TEST_CASE("Linear FP8 with MXFP8 and block scaling matches dequantized references", "[nn][linear][mxfp8][block]") {
  const int B = 40, IN = 70, OUT = 36;  // not multiples of the block: partial blocks in every GEMM
  for (int which = 0; which < 2; ++which) {
    Rng rng(5 + which);
    scaling::Recipe recipe = which == 0 ? scaling::Recipe(scaling::MXFP8BlockScaling{})
                                        : scaling::Recipe(scaling::Float8BlockScaling{});
    INFO("recipe " << scaling::recipe_name(recipe));
    Linear lin(IN, OUT, Precision::kFp8, recipe);
    lin.init(rng);
    Matrix x = random_matrix(B, IN, rng, 4.0f), dy = random_matrix(B, OUT, rng, 0.02f), y, dx;
    lin.forward(x, y, true);
    lin.backward(dy, &dx);

    auto q = [&](const Matrix& m, emu::BlockAxis axis, Format f) {
      return which == 0 ? emu::quantize_mxfp8(m.data.data(), m.rows, m.cols, axis, f,
                                             E8M0Rule::kTransformerEngine, nullptr)
                        : emu::quantize_block_1d(m.data.data(), m.rows, m.cols, axis, f, 128, true, 0.0f, nullptr);
    };
    emu::BlockQuantized w_row, w_col;
    if (which == 0) {
      w_row = q(lin.weight, emu::BlockAxis::kRowwise, Format::kE4M3);
      w_col = q(lin.weight, emu::BlockAxis::kColumnwise, Format::kE4M3);
    } else {  // weights: 128x128 tiles
      emu::BlockQuantized2D t = emu::quantize_block_2d(lin.weight.data.data(), OUT, IN, Format::kE4M3, 128, true, 0.0f, nullptr);
      w_row = t.rowwise;
      w_col = t.columnwise;
    }
    const Format fb = which == 0 ? Format::kE4M3 : Format::kE4M3;  // both recipes default to E4M3 everywhere
    // fprop: x row-wise (K = IN) with W row-wise.
    std::vector<double> yref = tn(dequant(q(x, emu::BlockAxis::kRowwise, Format::kE4M3)), dequant(w_row), B, OUT, IN);
    for (int i = 0; i < B; ++i)
      for (int o = 0; o < OUT; ++o) yref[std::size_t(i * OUT + o)] += testing::bf16_round(lin.bias.data[std::size_t(o)]);
    check_close(y, yref, 1e-5);
    // dgrad: dy row-wise (K = OUT) with W column-wise.
    check_close(dx, tn(dequant(q(dy, emu::BlockAxis::kRowwise, fb)), dequant(w_col), B, IN, OUT), 1e-5);
    // wgrad: dy column-wise (K = B) with x column-wise.
    check_close(lin.grad_weight,
                tn(dequant(q(dy, emu::BlockAxis::kColumnwise, fb)), dequant(q(x, emu::BlockAxis::kColumnwise, Format::kE4M3)),
                   OUT, IN, B),
                1e-5);
    CHECK(std::isnan(lin.last_scale_input()));  // no per-tensor scale for block recipes
  }
}

TEST_CASE("Linear FP8 with current scaling uses each tensor's own amax", "[nn][linear][current]") {
  Rng rng(8);
  scaling::CurrentScaling cur;  // HYBRID: x, W in E4M3, dy in E5M2
  Linear lin(20, 6, Precision::kFp8, cur);
  lin.init(rng);
  Matrix x = random_matrix(8, 20, rng, 5.0f), dy = random_matrix(8, 6, rng, 0.1f), y, dx;
  lin.forward(x, y, true);
  lin.backward(dy, &dx);
  auto amax = [](const Matrix& m) {
    float a = 0;
    for (float v : m.data) a = std::fmax(a, std::fabs(v));
    return a;
  };
  // TE: scale = compute_scale_from_amax(amax(tensor)) at cast time, no history, no delay.
  CHECK(lin.last_scale_input() == 0x1.cp8f / amax(x));
  CHECK(lin.last_scale_weight() == 0x1.cp8f / amax(lin.weight));
  CHECK(lin.last_scale_grad_output() == 0x1.cp15f / amax(dy));
  // update_* are no-ops: the next cast of the same x gets the same scale.
  lin.update_forward_scales();
  lin.forward(x, y, false);
  CHECK(lin.last_scale_input() == 0x1.cp8f / amax(x));
}

TEST_CASE("is_first_microbatch caches the FP8 weight as TE does", "[nn][linear][delayed]") {
  Rng rng(3);
  scaling::DelayedScaling d;
  d.amax_history_len = 2;
  Linear lin(16, 4, Precision::kFp8, d);
  lin.init(rng);
  Matrix x = random_matrix(5, 16, rng, 1.0f), y1, y2, y3;
  float w_amax = 0;
  for (float v : lin.weight.data) w_amax = std::fmax(w_amax, std::fabs(v));
  lin.forward(x, y1, false, true);  // cast and cache
  float new_amax = 0;
  for (float& w : lin.weight.data) {
    w += 1.0f;  // master weight changes (an optimizer step)
    new_amax = std::fmax(new_amax, std::fabs(w));
  }
  lin.forward(x, y2, false, false);  // reuse the cached FP8 weight: same output, no weight amax
  CHECK(y2.data == y1.data);
  CHECK(lin.forward_state().history(0, Linear::kWeight) == w_amax);  // only the first cast recorded
  lin.forward(x, y3, false);  // re-cast: the new weight is used
  CHECK(y3.data != y1.data);
  CHECK(lin.forward_state().history(0, Linear::kWeight) == new_amax);
  Linear fresh(16, 4, Precision::kFp8, d);
  CHECK_THROWS_WITH(fresh.forward(x, y1, false, false), Catch::Contains("no FP8 weight is cached"));
}

TEST_CASE("Linear GEMMs follow the chosen accumulation model (TE's Hopper wrappers)", "[nn][linear][hopper]") {
  Rng rng(12);
  Linear fast(64, 8, Precision::kFp8, scaling::CurrentScaling{}), hop(64, 8, Precision::kFp8, scaling::CurrentScaling{});
  fast.init(rng);
  hop.weight = fast.weight;
  hop.bias = fast.bias;
  fast.set_accumulation({emu::Accumulation::kFp32, 0}, {emu::Accumulation::kFp32, 0}, {emu::Accumulation::kFp32, 0});
  // hop keeps the default: TE's choice on Hopper.
  Matrix x = random_matrix(16, 64, rng, 30.0f), y_fast, y_hop;
  fast.forward(x, y_fast, false);
  hop.forward(x, y_hop, false);
  // Reference for the Hopper run: the scaled TN GEMM with the same casts, plus the bias.
  const float sx = hop.last_scale_input(), sw = hop.last_scale_weight();
  std::vector<std::uint8_t> xq(x.size()), wq(hop.weight.size());
  emu::quantize(x.data.data(), x.size(), sx, Format::kE4M3, xq.data(), nullptr);
  emu::quantize(hop.weight.data.data(), wq.size(), sw, Format::kE4M3, wq.data(), nullptr);
  std::vector<float> ref(16 * 8);
  emu::gemm_fp8_tn(16, 8, 64, xq.data(), Format::kE4M3, 1.0f / sx, wq.data(), Format::kE4M3, 1.0f / sw,
                   {emu::Accumulation::kHopper, 0}, ref.data());
  for (int i = 0; i < 16; ++i)
    for (int o = 0; o < 8; ++o)
      CHECK(y_hop(i, o) == ref[std::size_t(i * 8 + o)] + testing::bf16_round(hop.bias.data[std::size_t(o)]));
  // The 14-bit tensor-core accumulator loses bits that fp32 keeps somewhere in this product.
  CHECK(y_hop.data != y_fast.data);
  Linear block(32, 4, Precision::kFp8, scaling::MXFP8BlockScaling{});
  CHECK_THROWS_WITH(block.set_accumulation(emu::te_dgrad(emu::Accumulation::kHopper), {}, {}),
                    Catch::Contains("takes no promotion interval or split-K there"));
  block.set_accumulation({emu::Accumulation::kHopper, 0, 1}, {}, {});  // a model per scale block
}

namespace {
// The block-scaled GEMM's definition (docs/transformer-engine.md, Block scaling), written here from
// the text: d = +0; per K-block in order, P = the block's exact products summed in fp32 from zero in
// K order, d = RN(d + RN(P * RN(sa * sb))). Inputs: K-major codes with one scale_inv per `block`.
std::vector<float> block_gemm_ref(const std::vector<std::uint8_t>& a, const std::vector<float>& sa,
                                  const std::vector<std::uint8_t>& b, const std::vector<float>& sb, int M, int N,
                                  int K, int block) {
  const FormatSpec& f = spec_of(Format::kE4M3);
  const int nb = (K + block - 1) / block;
  std::vector<float> d(std::size_t(M) * std::size_t(N));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int kb = 0; kb < nb; ++kb) {
        float p = 0.0f;
        for (int k = kb * block; k < std::min(K, (kb + 1) * block); ++k)
          p += core::fp8_to_f32(a[std::size_t(i) * K + k], f) * core::fp8_to_f32(b[std::size_t(j) * K + k], f);
        const float s = sa[std::size_t(i) * nb + kb] * sb[std::size_t(j) * nb + kb];
        acc += p * s;
      }
      d[std::size_t(i) * N + j] = acc;
    }
  return d;
}

// TE's conversion for Blackwell (common/swizzle/swizzle_block_scaling.cu), restated: the E8M0 code
// is the fp32 exponent field of the 128-block scale_inv, `(bits >> 23) & 0xFF`, its value 2^(code -
// 127), broadcast to the four 1 x 32 blocks of each 128-block (a ragged last 128-block to as many
// 32-blocks as K needs).
std::vector<float> te_mxfp8_scales(const emu::BlockQuantized& q) {
  const int nb32 = (q.k + 31) / 32;
  std::vector<float> out(std::size_t(q.n) * nb32);
  for (int r = 0; r < q.n; ++r)
    for (int j = 0; j < nb32; ++j) {
      const float v = q.scale_inv[std::size_t(r) * q.blocks() + j / 4];
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      out[std::size_t(r) * nb32 + j] = std::ldexp(1.0f, int((bits >> 23) & 0xFFu) - 127);
    }
  return out;
}
}  // namespace

TEST_CASE("Float8BlockScaling on Blackwell: TE's E8M0 scales on 1 x 32 blocks, MXFP8 GEMMs",
          "[nn][linear][block][blackwell]") {
  // The conversion on hand-worked values: the exponent field, the mantissa dropped.
  CHECK(core::e8m0_from_pow2_scale_inv_bits(0x3F800000u) == 127);  // 1.0
  CHECK(core::e8m0_from_pow2_scale_inv_bits(0x00400000u) == 0);    // 2^-127 (fp32 subnormal)
  CHECK(core::e8m0_from_pow2_scale_inv_bits(0x7F000000u) == 254);  // 2^127
  CHECK(core::e8m0_from_pow2_scale_inv_bits(0x3FC00000u) == 127);  // 1.5: mantissa dropped
  CHECK(core::mxfp8_scale_from_block_scale_inv_bits(0x00400000u) == 0x00400000u);
  CHECK(core::mxfp8_scale_from_block_scale_inv_bits(0x3B000000u) == 0x3B000000u);  // 2^-9 back

  scaling::Float8BlockScaling bad;
  bad.mxfp8_gemms = true;
  bad.use_f32_scales = true;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("power-of-two scales"));

  // K = 300 in fprop: three 128-blocks (the last ragged), ten 32-blocks; K = 36 in dgrad, 40 in wgrad.
  const int B = 40, IN = 300, OUT = 36;
  Rng rng(11);
  scaling::Float8BlockScaling recipe;
  recipe.mxfp8_gemms = true;
  Linear lin(IN, OUT, Precision::kFp8, scaling::Recipe(recipe));
  lin.init(rng);
  std::fill(lin.bias.data.begin(), lin.bias.data.end(), 0.0f);
  Matrix x = random_matrix(B, IN, rng, 4.0f), dy = random_matrix(B, OUT, rng, 0.02f), y, dx;
  for (int i = 0; i < B; ++i) x.data[std::size_t(i) * IN + 7] *= 300.0f;  // spread the block scales
  lin.forward(x, y, true);
  lin.backward(dy, &dx);

  // The operands Hopper would use (128-blocks), from the library's tested casts.
  auto q1 = [](const Matrix& m, emu::BlockAxis axis) {
    return emu::quantize_block_1d(m.data.data(), m.rows, m.cols, axis, Format::kE4M3, 128, true, 0.0f, nullptr);
  };
  const emu::BlockQuantized2D w = emu::quantize_block_2d(lin.weight.data.data(), OUT, IN, Format::kE4M3, 128, true,
                                                         0.0f, nullptr);
  struct Gemm {
    const char* name;
    emu::BlockQuantized a, b;
    const Matrix* got;
  };
  const Gemm gemms[] = {{"fprop", q1(x, emu::BlockAxis::kRowwise), w.rowwise, &y},
                        {"dgrad", q1(dy, emu::BlockAxis::kRowwise), w.columnwise, &dx},
                        {"wgrad", q1(dy, emu::BlockAxis::kColumnwise), q1(x, emu::BlockAxis::kColumnwise),
                         &lin.grad_weight}};
  for (const Gemm& g : gemms) {
    INFO(g.name);
    const int M = g.a.n, N = g.b.n, K = g.a.k;
    const std::vector<float> want = block_gemm_ref(g.a.codes, te_mxfp8_scales(g.a), g.b.codes, te_mxfp8_scales(g.b), M, N, K, 32);
    const std::vector<float> hopper = block_gemm_ref(g.a.codes, g.a.scale_inv, g.b.codes, g.b.scale_inv, M, N, K, 128);
    REQUIRE(g.got->size() == want.size());
    int differ_from_hopper = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(g.got->data[i] == want[i]);
      differ_from_hopper += g.got->data[i] != hopper[i];
    }
    // fprop's long K: the 32-block partials round differently from 128-block ones somewhere (with
    // dgrad's and wgrad's short K every partial is exact, and the two GEMMs agree).
    if (K > 256) CHECK(differ_from_hopper > 0);
  }
}
