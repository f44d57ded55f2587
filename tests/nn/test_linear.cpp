// Linear / MLP: FP32 gradients against finite differences; FP8 mode against a reference built from
// the dequantized operands in double precision; TE's update points.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "support/nn_helpers.hpp"
#include "fp8emu/nn/mlp.hpp"

using namespace fp8emu;
using namespace fp8emu::nn;

namespace {
using testing::random_matrix;

// Central finite differences of `loss` in every entry of `param` against `grad` (copied before the
// calls, as the loss may run forward passes).
template <class Loss>
void check_finite_differences(Matrix& param, const Matrix& grad, Loss loss, float h, double margin) {
  const Matrix g = grad;
  for (std::size_t i = 0; i < param.size(); ++i) {
    const float p0 = param.data[i];
    param.data[i] = p0 + h;
    const double lp = loss();
    param.data[i] = p0 - h;
    const double lm = loss();
    param.data[i] = p0;
    INFO("entry " << i);
    CHECK(g.data[i] == Approx((lp - lm) / (2 * h)).margin(margin));
  }
}

// L = sum(y .* R) in double.
double weighted_sum(const Matrix& y, const Matrix& R) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += double(y.data[i]) * double(R.data[i]);
  return s;
}
}  // namespace

TEST_CASE("Linear FP32 gradients match central finite differences", "[nn][linear]") {
  Rng rng(7);
  Linear lin(5, 3, Precision::kFp32);
  lin.init(rng);
  Matrix x = random_matrix(4, 5, rng, 1.0f), R = random_matrix(4, 3, rng, 1.0f), y, dx;
  lin.forward(x, y, true);
  lin.backward(R, &dx);  // dL/dy = R
  const float h = 1e-2f;
  auto loss = [&]() {
    Matrix yy;
    lin.forward(x, yy, false);
    return weighted_sum(yy, R);
  };
  check_finite_differences(lin.weight, lin.grad_weight, loss, h, 1e-4);
  check_finite_differences(lin.bias, lin.grad_bias, loss, h, 1e-4);
  check_finite_differences(x, dx, loss, h, 1e-4);
}

TEST_CASE("MLP (GELU and ReLU, softmax cross-entropy) FP32 gradients match finite differences", "[nn][mlp]") {
  struct Case {
    std::vector<int> sizes;
    Activation act;
    int batch;
    float h;
    double margin;  // ReLU: small steps, so that no pre-activation crosses its kink
  };
  for (const Case& c : {Case{{6, 5, 4, 3}, Activation::kGELU, 5, 1e-2f, 2e-4},
                        Case{{4, 8, 3}, Activation::kReLU, 3, 1e-3f, 5e-4}}) {
    Mlp mlp(c.sizes, c.act, Precision::kFp32, {}, 11);
    Rng rng(3);
    Matrix x = random_matrix(c.batch, c.sizes.front(), rng, 2.0f), logits, dlogits;
    std::vector<std::uint8_t> labels;
    for (int i = 0; i < c.batch; ++i) labels.push_back(std::uint8_t((i * 7 + 1) % c.sizes.back()));
    mlp.forward(x, logits, true);
    softmax_cross_entropy(logits, labels, &dlogits);
    mlp.backward(dlogits);
    auto loss = [&]() {
      Matrix z;
      mlp.forward(x, z, false);
      return softmax_cross_entropy(z, labels, nullptr);
    };
    for (Linear& l : mlp.layers) {
      check_finite_differences(l.weight, l.grad_weight, loss, c.h, c.margin);
      check_finite_differences(l.bias, l.grad_bias, loss, c.h, c.margin);
    }
  }
}

TEST_CASE("Linear FP8 matches a reference built from dequantized operands", "[nn][linear][fp8]") {
  Rng rng(21);
  scaling::DelayedScaling recipe;  // HYBRID: x, W in E4M3; dy in E5M2
  recipe.amax_history_len = 4;
  Linear lin(33, 7, Precision::kFp8, recipe);
  // fp32 accumulation, so that a double reference differs only by fp32 rounding.
  lin.set_accumulation({emu::Accumulation::kFp32, 0}, {emu::Accumulation::kFp32, 0}, {emu::Accumulation::kFp32, 0});
  lin.init(rng);
  Matrix x = random_matrix(9, 33, rng, 3.0f), dy = random_matrix(9, 7, rng, 0.01f), y, dx;

  // Step 0 uses scale 1 (TE's initial state); step 1 uses fp8_max / amax of step 0.
  for (int step = 0; step < 2; ++step) {
    const float sx = lin.forward_state().scale(Linear::kInput);
    const float sw = lin.forward_state().scale(Linear::kWeight);
    const float sdy = lin.backward_state().scale(Linear::kGradOutput);
    lin.forward(x, y, true);
    lin.update_forward_scales();
    lin.backward(dy, &dx);
    lin.update_backward_scales();

    // Reference: dequantize each operand with its own scale, products and sums in double.
    auto dq = [](const Matrix& m, float s, Format f) {
      std::vector<std::uint8_t> q(m.size());
      std::vector<float> v(m.size());
      emu::quantize(m.data.data(), m.size(), s, f, q.data(), nullptr);
      emu::dequantize(q.data(), q.size(), 1.0f, f, v.data());
      std::vector<double> out(v.begin(), v.end());
      for (double& d : out) d /= double(s);  // exact value of decode(q) / s
      return out;
    };
    const std::vector<double> xd = dq(x, sx, Format::kE4M3), wd = dq(lin.weight, sw, Format::kE4M3),
                              dyd = dq(dy, sdy, Format::kE5M2);
    for (int i = 0; i < 9; ++i)
      for (int o = 0; o < 7; ++o) {
        double acc = testing::bf16_round(lin.bias.data[std::size_t(o)]);  // TE's bf16 bias
        for (int k = 0; k < 33; ++k) acc += xd[std::size_t(i * 33 + k)] * wd[std::size_t(o * 33 + k)];
        CHECK(y(i, o) == Approx(acc).epsilon(1e-5).margin(1e-4));
      }
    for (int i = 0; i < 9; ++i)
      for (int k = 0; k < 33; ++k) {
        double acc = 0;
        for (int o = 0; o < 7; ++o) acc += dyd[std::size_t(i * 7 + o)] * wd[std::size_t(o * 33 + k)];
        CHECK(dx(i, k) == Approx(acc).epsilon(1e-5).margin(1e-7));
      }
    for (int o = 0; o < 7; ++o)
      for (int k = 0; k < 33; ++k) {
        double acc = 0;
        for (int i = 0; i < 9; ++i) acc += dyd[std::size_t(i * 7 + o)] * xd[std::size_t(i * 33 + k)];
        CHECK(lin.grad_weight(o, k) == Approx(acc).epsilon(1e-5).margin(1e-7));
      }
  }
  // After step 0 the forward scales are fp8_max / amax (history covers steps 0 and 1, same x).
  float ax = 0;
  for (float v : x.data) ax = std::fmax(ax, std::fabs(v));
  CHECK(lin.forward_state().scale(Linear::kInput) == 0x1.cp8f / ax);
  // The output / grad_input slots are never cast: amax 0, scale stays 1.
  CHECK(lin.forward_state().scale(Linear::kOutput) == 1.0f);
  CHECK(lin.backward_state().scale(Linear::kGradInput) == 1.0f);
}

TEST_CASE("Linear rejects shape mismatches and backward without forward", "[nn][linear]") {
  Linear lin(4, 2, Precision::kFp8);
  Matrix x(3, 5), y, dy(3, 2);
  CHECK_THROWS_WITH(lin.forward(x, y, true), Catch::Contains("5 features") && Catch::Contains("expects 4"));
  CHECK_THROWS_WITH(lin.backward(dy, nullptr), Catch::Contains("without a preceding training forward"));
  Matrix x2(3, 4), bad(2, 2);
  lin.forward(x2, y, true);
  CHECK_THROWS_WITH(lin.backward(bad, nullptr), Catch::Contains("does not match"));
}


TEST_CASE("Linear BF16: bf16 operands and outputs, fp32-sequential sums, worked from the definition", "[nn][linear][bf16]") {
  Rng rng(21);
  const int batch = 5, in = 7, out = 3;
  Linear lin(in, out, Precision::kBf16);
  lin.init(rng);
  Matrix x = random_matrix(batch, in, rng, 2.0f), dy = random_matrix(batch, out, rng, 1.0f), y, dx;
  // Exact ties of bf16: 1 + 2^-8 rounds down to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6; truncation
  // or round-half-up would differ.
  x.data[0] = 1.0f + 0x1p-8f;
  x.data[1] = -(1.0f + 0x3p-8f);
  lin.weight.data[0] = 1.0f + 0x1p-8f;
  lin.forward(x, y, true);
  lin.backward(dy, &dx);
  REQUIRE(y.rows == batch);
  REQUIRE(y.cols == out);
  std::size_t differs_from_fp32 = 0;
  Matrix y32;
  lin.forward_fp32(x, y32);
  for (int r = 0; r < batch; ++r)
    for (int o = 0; o < out; ++o) {
      float c = 0.0f;
      for (int k = 0; k < in; ++k) {
        const float p = float(double(testing::bf16_round(x.data[std::size_t(r * in + k)])) *
                              double(testing::bf16_round(lin.weight.data[std::size_t(o * in + k)])));  // exact
        c = c + p;
      }
      const float expect = testing::bf16_round(c + lin.bias.data[std::size_t(o)]);
      INFO("y[" << r << ", " << o << "]");
      CHECK(y.data[std::size_t(r * out + o)] == expect);
      differs_from_fp32 += y.data[std::size_t(r * out + o)] != y32.data[std::size_t(r * out + o)];
    }
  CHECK(differs_from_fp32 > 0);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      float c = 0.0f;
      for (int r = 0; r < batch; ++r)
        c = c + float(double(testing::bf16_round(dy.data[std::size_t(r * out + o)])) * double(testing::bf16_round(x.data[std::size_t(r * in + i)])));
      INFO("dW[" << o << ", " << i << "] stays fp32");
      CHECK(lin.grad_weight.data[std::size_t(o * in + i)] == c);
    }
  for (int r = 0; r < batch; ++r)
    for (int i = 0; i < in; ++i) {
      float c = 0.0f;
      for (int o = 0; o < out; ++o)
        c = c + float(double(testing::bf16_round(dy.data[std::size_t(r * out + o)])) *
                      double(testing::bf16_round(lin.weight.data[std::size_t(o * in + i)])));
      INFO("dx[" << r << ", " << i << "]");
      CHECK(dx.data[std::size_t(r * in + i)] == testing::bf16_round(c));
    }
  for (int o = 0; o < out; ++o) {
    float c = 0.0f;
    for (int r = 0; r < batch; ++r) c = c + dy.data[std::size_t(r * out + o)];  // the unrounded dy
    CHECK(lin.grad_bias.data[std::size_t(o)] == c);
  }
  CHECK(std::string(precision_name(Precision::kBf16)) == "bf16");
}

TEST_CASE("Linear BF16 on the Hopper bf16 tensor core: every GEMM is the recorded datapath", "[nn][linear][bf16]") {
  // With set_bf16_accumulation(hopper-bf16) each GEMM element is core::mma_dot on the bf16 operands
  // (blocks of 16 products, 25 fraction bits, 24 bits kept: the row that reproduces the recorded
  // H100/H200 bf16 tensor cores), the rest of the bf16 layer unchanged.
  Rng rng(22);
  const int batch = 6, in = 40, out = 5;  // K = 40: two whole blocks of 16 and a short one
  Linear lin(in, out, Precision::kBf16);
  lin.init(rng);
  Matrix x = random_matrix(batch, in, rng, 2.0f), dy = random_matrix(batch, out, rng, 1.0f), y, dx, y_seq, dx_seq;
  for (std::size_t i = 0; i < x.data.size(); i += 3) x.data[i] *= 4096.0f;  // wide exponent spread: truncation shows
  Linear seq = lin;
  lin.set_bf16_accumulation(Accumulation::kHopperBf16);
  CHECK(lin.bf16_accumulation() == Accumulation::kHopperBf16);
  CHECK_THROWS_WITH(lin.set_bf16_accumulation(Accumulation::kHopperFp16),
                    Catch::Contains("not 'hopper-fp16'") && Catch::Contains("hopper-bf16"));
  lin.forward(x, y, true);
  lin.backward(dy, &dx);
  seq.forward(x, y_seq, true);
  seq.backward(dy, &dx_seq);
  const core::MmaDatapath p = model_of(Accumulation::kHopperBf16).tensor_core();
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> u(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) u[i] = core::f32_to_bits(testing::bf16_round(v[i]));
    return u;
  };
  const std::vector<std::uint32_t> xb = bits_of(x.data), wb = bits_of(lin.weight.data), dyb = bits_of(dy.data);
  auto dot = [&](const std::uint32_t* a, int sa, const std::uint32_t* b, int sb, int K) {
    return core::bits_to_f32(core::mma_dot(core::MmaValues{a, sa}, core::MmaValues{b, sb}, K, 0u, p));
  };
  std::size_t differs = 0;
  for (int r = 0; r < batch; ++r)
    for (int o = 0; o < out; ++o) {
      const float d = dot(&xb[std::size_t(r * in)], 1, &wb[std::size_t(o * in)], 1, in);
      const float expect = testing::bf16_round(d + lin.bias.data[std::size_t(o)]);
      CHECK(y.data[std::size_t(r * out + o)] == expect);
    }
  for (std::size_t i = 0; i < lin.grad_weight.data.size(); ++i)
    differs += lin.grad_weight.data[i] != seq.grad_weight.data[i];
  CHECK(differs > 0);  // the fp32-sequential bf16 layer's dW (kept in fp32) has other bits here
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i)  // dW = dy^T x over the batch, fp32
      CHECK(lin.grad_weight.data[std::size_t(o * in + i)] == dot(&dyb[std::size_t(o)], out, &xb[std::size_t(i)], in, batch));
  for (int r = 0; r < batch; ++r)
    for (int i = 0; i < in; ++i)  // dx = bf16(dy W)
      CHECK(dx.data[std::size_t(r * in + i)] ==
            testing::bf16_round(dot(&dyb[std::size_t(r * out)], 1, &wb[std::size_t(i)], in, out)));
}

TEST_CASE("Linear FP32 on the Hopper tf32 tensor core (allow_tf32): operands rounded, every GEMM the datapath",
          "[nn][linear][tf32]") {
  Rng rng(23);
  const int batch = 6, in = 20, out = 4;  // K = 20: two blocks of 8 and a short one
  Linear lin(in, out, Precision::kFp32);
  lin.init(rng);
  Matrix x = random_matrix(batch, in, rng, 2.0f), dy = random_matrix(batch, out, rng, 1.0f), y, dx;
  Linear plain = lin;
  lin.set_fp32_accumulation(Accumulation::kHopperTf32);
  CHECK_THROWS_WITH(lin.set_fp32_accumulation(Accumulation::kHopperBf16), Catch::Contains("not 'hopper-bf16'"));
  lin.forward(x, y, true);
  lin.backward(dy, &dx);
  Matrix y_plain, dx_plain;
  plain.forward(x, y_plain, true);
  plain.backward(dy, &dx_plain);
  const core::MmaDatapath p = model_of(Accumulation::kHopperTf32).tensor_core();
  auto tf32_of = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> u(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) u[i] = core::f32_bits_to_tf32_rna(core::f32_to_bits(v[i]));
    return u;
  };
  const std::vector<std::uint32_t> xt = tf32_of(x.data), wt = tf32_of(lin.weight.data), dyt = tf32_of(dy.data);
  auto dot = [&](const std::uint32_t* a, int sa, const std::uint32_t* b, int sb, int K) {
    return core::bits_to_f32(core::mma_dot(core::MmaValues{a, sa}, core::MmaValues{b, sb}, K, 0u, p));
  };
  std::size_t differs = 0;
  for (int r = 0; r < batch; ++r)
    for (int o = 0; o < out; ++o) {
      const float want = dot(&xt[std::size_t(r * in)], 1, &wt[std::size_t(o * in)], 1, in) + lin.bias.data[std::size_t(o)];
      CHECK(y.data[std::size_t(r * out + o)] == want);  // fp32 output, fp32 bias add
      differs += y.data[std::size_t(r * out + o)] != y_plain.data[std::size_t(r * out + o)];
    }
  CHECK(differs > 0);  // tf32 operands: other bits than the fp32 layer
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i)
      CHECK(lin.grad_weight.data[std::size_t(o * in + i)] == dot(&dyt[std::size_t(o)], out, &xt[std::size_t(i)], in, batch));
  for (int r = 0; r < batch; ++r)
    for (int i = 0; i < in; ++i)
      CHECK(dx.data[std::size_t(r * in + i)] == dot(&dyt[std::size_t(r * out)], 1, &wt[std::size_t(i)], in, out));
  for (int o = 0; o < out; ++o) CHECK(lin.grad_bias.data[std::size_t(o)] == plain.grad_bias.data[std::size_t(o)]);
}
