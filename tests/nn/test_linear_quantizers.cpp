// Linear through its quantizers gives the bits of the recipe-branch Linear it replaced: each
// recipe's fprop, dgrad and wgrad are rebuilt here from direct emu:: calls in the order and with the
// operands the earlier Linear used (per-tensor: cast, FP8 transposes, emu::gemm_fp8_tn with TE's
// Hopper accumulation; block: emu::quantize_mxfp8 / quantize_block_1d / quantize_block_2d and
// emu::gemm_fp8_block_tn), and compared bit for bit.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <vector>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/linear.hpp"
#include "support/bits.hpp"
#include "support/forward_device.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using namespace fp8emu::nn;
using testing::bits;
using testing::random_matrix;

namespace {
constexpr float kE4M3Max = 0x1.cp8f, kE5M2Max = 0x1.cp15f;
constexpr auto kHopper = emu::Accumulation::kHopper;

float max_abs(const Matrix& m) {
  float a = 0.0f;
  for (float v : m.data) a = std::max(a, std::fabs(v));
  return a;
}

struct Expected {
  std::vector<float> y, dx, dw;
};

void add_bias(std::vector<float>& y, int rows, const Matrix& bias) {
  const int cols = bias.cols;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) y[std::size_t(i * cols + j)] += testing::bf16_round(bias.data[std::size_t(j)]);
}

// Per-tensor recipes with given scales of x, W (E4M3) and dy (E5M2).
Expected per_tensor(const Matrix& w, const Matrix& b, const Matrix& x, const Matrix& dy, float sx, float sw,
                    float sdy) {
  const int B = x.rows, IN = x.cols, OUT = w.rows;
  std::vector<std::uint8_t> xq(x.size()), wq(w.size()), dyq(dy.size()), xt(x.size()), wt(w.size()), dyt(dy.size());
  emu::quantize(w.data.data(), w.size(), sw, Format::kE4M3, wq.data(), nullptr);
  emu::quantize(x.data.data(), x.size(), sx, Format::kE4M3, xq.data(), nullptr);
  emu::quantize(dy.data.data(), dy.size(), sdy, Format::kE5M2, dyq.data(), nullptr);
  emu::transpose(B, IN, xq.data(), xt.data());
  emu::transpose(OUT, IN, wq.data(), wt.data());
  emu::transpose(B, OUT, dyq.data(), dyt.data());
  Expected e{std::vector<float>(std::size_t(B) * OUT), std::vector<float>(std::size_t(B) * IN),
             std::vector<float>(std::size_t(OUT) * IN)};
  emu::gemm_fp8_tn(B, OUT, IN, xq.data(), Format::kE4M3, 1.0f / sx, wq.data(), Format::kE4M3, 1.0f / sw,
                   emu::te_fprop(kHopper), e.y.data());
  add_bias(e.y, B, b);
  emu::gemm_fp8_tn(OUT, IN, B, dyt.data(), Format::kE5M2, 1.0f / sdy, xt.data(), Format::kE4M3, 1.0f / sx,
                   emu::te_wgrad(kHopper), e.dw.data());
  emu::gemm_fp8_tn(B, IN, OUT, dyq.data(), Format::kE5M2, 1.0f / sdy, wt.data(), Format::kE4M3, 1.0f / sw,
                   emu::te_dgrad(kHopper), e.dx.data());
  return e;
}

// Block recipes (TE defaults: E4M3 everywhere; 128-block: pow2 scales, epsilon 0).
Expected block(bool mxfp8, const Matrix& w, const Matrix& b, const Matrix& x, const Matrix& dy) {
  const int B = x.rows, IN = x.cols, OUT = w.rows;
  auto q = [&](const Matrix& m, emu::BlockAxis axis) {
    return mxfp8 ? emu::quantize_mxfp8(m.data.data(), m.rows, m.cols, axis, Format::kE4M3,
                                       E8M0Rule::kTransformerEngine, nullptr)
                 : emu::quantize_block_1d(m.data.data(), m.rows, m.cols, axis, Format::kE4M3, 128, true, 0.0f, nullptr);
  };
  emu::BlockQuantized w_row, w_col;
  if (mxfp8) {
    w_row = q(w, emu::BlockAxis::kRowwise);
    w_col = q(w, emu::BlockAxis::kColumnwise);
  } else {
    emu::BlockQuantized2D t = emu::quantize_block_2d(w.data.data(), OUT, IN, Format::kE4M3, 128, true, 0.0f, nullptr);
    w_row = t.rowwise;
    w_col = t.columnwise;
  }
  Expected e{std::vector<float>(std::size_t(B) * OUT), std::vector<float>(std::size_t(B) * IN),
             std::vector<float>(std::size_t(OUT) * IN)};
  emu::gemm_fp8_block_tn(q(x, emu::BlockAxis::kRowwise), w_row, e.y.data());
  add_bias(e.y, B, b);
  emu::gemm_fp8_block_tn(q(dy, emu::BlockAxis::kColumnwise), q(x, emu::BlockAxis::kColumnwise), e.dw.data());
  emu::gemm_fp8_block_tn(q(dy, emu::BlockAxis::kRowwise), w_col, e.dx.data());
  return e;
}

void check_bits(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) mismatches += bits(got[i]) != bits(want[i]);
  CHECK(mismatches == 0);
}

void check_step(Linear& lin, const Matrix& x, const Matrix& dy, const Expected& e) {
  Matrix y, dx;
  lin.forward(x, y, true);
  lin.backward(dy, &dx);
  check_bits(y.data, e.y);
  check_bits(dx.data, e.dx);
  check_bits(lin.grad_weight.data, e.dw);
}
}  // namespace

TEST_CASE("Linear through quantizers: bit-identical to the per-recipe casts and GEMMs", "[nn][linear][quantizer]") {
  const int B = 40, IN = 150, OUT = 36;  // partial blocks in every GEMM; K = 150 crosses one 128 promotion
  Rng rng(77);
  const Matrix x1 = random_matrix(B, IN, rng, 4.0f), dy1 = random_matrix(B, OUT, rng, 0.02f);
  const Matrix x2 = random_matrix(B, IN, rng, 2.0f), dy2 = random_matrix(B, OUT, rng, 0.05f);

  SECTION("delayed: scale 1 first, then 448/amax and 57344/amax after the updates") {
    Linear lin(IN, OUT, Precision::kFp8, scaling::DelayedScaling{});
    lin.init(rng);
    check_step(lin, x1, dy1, per_tensor(lin.weight, lin.bias, x1, dy1, 1.0f, 1.0f, 1.0f));
    lin.update_forward_scales();
    lin.update_backward_scales();
    const float sx = kE4M3Max / max_abs(x1), sw = kE4M3Max / max_abs(lin.weight), sdy = kE5M2Max / max_abs(dy1);
    check_step(lin, x2, dy2, per_tensor(lin.weight, lin.bias, x2, dy2, sx, sw, sdy));
    CHECK(lin.last_scale_input() == sx);
    CHECK(lin.last_scale_weight() == sw);
    CHECK(lin.last_scale_grad_output() == sdy);
  }
  SECTION("current: each tensor by its own amax") {
    Linear lin(IN, OUT, Precision::kFp8, scaling::CurrentScaling{});
    lin.init(rng);
    auto s = [](const Matrix& m, float fmax) {
      return core::compute_scale_from_amax(max_abs(m), fmax, false, 0.0f, FLT_MAX);
    };
    for (int step = 0; step < 2; ++step) {
      const Matrix& x = step == 0 ? x1 : x2;
      const Matrix& dy = step == 0 ? dy1 : dy2;
      check_step(lin, x, dy,
                 per_tensor(lin.weight, lin.bias, x, dy, s(x, kE4M3Max), s(lin.weight, kE4M3Max), s(dy, kE5M2Max)));
    }
  }
  SECTION("mxfp8 and 128-block") {
    for (bool mx : {true, false}) {
      INFO((mx ? "mxfp8" : "block"));
      Linear lin(IN, OUT, Precision::kFp8,
                 mx ? scaling::Recipe(scaling::MXFP8BlockScaling{}) : scaling::Recipe(scaling::Float8BlockScaling{}));
      lin.init(rng);
      check_step(lin, x1, dy1, block(mx, lin.weight, lin.bias, x1, dy1));
      CHECK(std::isnan(lin.last_scale_weight()));
    }
  }
  SECTION("a copied layer carries its own quantizer state") {
    Linear a(IN, OUT, Precision::kFp8, scaling::DelayedScaling{});
    a.init(rng);
    Matrix y, dx;
    a.forward(x1, y, true);
    a.backward(dy1, &dx);
    a.update_forward_scales();
    a.update_backward_scales();
    Linear b = a;
    CHECK(b.forward_state().scales() == a.forward_state().scales());
    CHECK(&b.forward_state() != &a.forward_state());
    Matrix ya, yb;
    a.forward(x2, ya, false);
    b.forward(x2, yb, false);
    check_bits(yb.data, ya.data);
    // Idle state of a recipe without amax history keeps TE's checkpoint shape.
    Linear c(IN, OUT, Precision::kFp8, scaling::MXFP8BlockScaling{});
    CHECK(c.forward_state().num_slots() == 3);
    CHECK(c.backward_state().num_slots() == 2);
    CHECK(c.forward_state().history_len() == 1);
  }
}

TEST_CASE("Linear on a device of its own memory: the bits of the element reference", "[nn][linear][device]") {
  // A host Linear whose FP8 work runs on a device that is not host memory (as `--backend cuda` per
  // layer runs it on the GPU) stages every operand up and every result down; the oracle is the same
  // layer on element_device(), the per-element reference working on the host buffers in place.
  const testing::ForwardDevice staged(false);
  scaling::DelayedScaling delayed;
  delayed.amax_history_len = 4;
  const std::vector<scaling::Recipe> recipes = {delayed, scaling::CurrentScaling{}, scaling::MXFP8BlockScaling{},
                                                scaling::Float8BlockScaling{}};
  for (const scaling::Recipe& recipe : recipes) {
    INFO(scaling::recipe_name(recipe));
    Rng rng(5);
    Linear a(70, 40, Precision::kFp8, recipe);
    a.init(rng);
    Linear b = a;
    a.set_device(staged);
    b.set_device(backend::element_device());
    for (int step = 0; step < 3; ++step) {
      const Matrix x = random_matrix(33, 70, rng, 2.0f), dy = random_matrix(33, 40, rng, 0.01f);
      Matrix ya, yb, dxa, dxb;
      a.forward(x, ya, true);
      b.forward(x, yb, true);
      a.backward(dy, &dxa);
      b.backward(dy, &dxb);
      a.update_forward_scales();
      b.update_forward_scales();
      a.update_backward_scales();
      b.update_backward_scales();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < ya.size(); ++i) differ += bits(ya.data[i]) != bits(yb.data[i]);
      for (std::size_t i = 0; i < dxa.size(); ++i) differ += bits(dxa.data[i]) != bits(dxb.data[i]);
      for (std::size_t i = 0; i < a.grad_weight.size(); ++i)
        differ += bits(a.grad_weight.data[i]) != bits(b.grad_weight.data[i]);
      CHECK(differ == 0);
      CHECK(bits(a.last_scale_input()) == bits(b.last_scale_input()));
      CHECK(bits(a.last_scale_grad_output()) == bits(b.last_scale_grad_output()));
      CHECK(a.stats.input.count == b.stats.input.count);
      CHECK(a.stats.grad_output.saturated == b.stats.grad_output.saturated);
    }
    CHECK(a.forward_state().scales() == b.forward_state().scales());
  }
}
