// The nn layers' element functions (include/fp8emu/core/nn_element.hpp) and the fp32 helpers they
// use (fmax_f32, sqrt_rn in core/fp32_ops.hpp), against oracles that are not the code under test:
//  - the mathematics: each function against the exact real formula evaluated in 50 digits
//    (Boost.Multiprecision cpp_bin_float_50) or in binary64, within a tolerance of a few fp32 ulps
//    (catches a wrong constant, sign, term or formula);
//  - the specification of the rounding: the documented operation order written out in the test one
//    step at a time, each step an exact binary64 operation on fp32 values rounded once to fp32 (for
//    +, -, *, / and sqrt that is the correctly rounded fp32 result: binary64 has more than 2 * 24 + 2
//    bits, so the double rounding is innocuous), with core::exp_rn / log_rn / tanh_rn as the spec's
//    transcendental functions; bits must match (catches a changed order or association);
//  - values and histories worked by hand (fmax's NaN and signed-zero rules, a column sum whose fp32
//    result differs from the exact sum, the delayed-scaling roll, FLT_MAX, NaN and Inf amaxes).
#include <boost/multiprecision/cpp_bin_float.hpp>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "support/bits.hpp"
#include "fp8emu/core/nn_element.hpp"

using namespace fp8emu;

namespace {

using Big = boost::multiprecision::cpp_bin_float_50;

using testing::bits;
using testing::from_bits;
bool same_bits(float a, float b) { return bits(a) == bits(b); }

// One correctly rounded fp32 operation, computed in binary64 and rounded once (innocuous double
// rounding for +, -, *, /, sqrt of fp32 operands).
float add(float a, float b) { return float(double(a) + double(b)); }
float sub(float a, float b) { return float(double(a) - double(b)); }
float mul(float a, float b) { return float(double(a) * double(b)); }
float dvd(float a, float b) { return float(double(a) / double(b)); }

// The exact constants' fp32 roundings, as TE's gelu writes them.
const float kC = float(std::sqrt(2.0 / 3.14159265358979323846));
const float kK = 0.044715f;

// The spec of gelu_tanh_forward, one rounding per step.
float gelu_spec(float x) {
  const float kx = mul(kK, x), kxx = mul(kx, x), kxxx = mul(kxx, x);
  const float u = mul(kC, add(x, kxxx));
  const float t = core::tanh_rn(u);
  return mul(mul(0.5f, x), add(1.0f, t));
}
float gelu_grad_spec(float x) {
  const float u = mul(kC, add(x, mul(mul(mul(kK, x), x), x)));
  const float t = core::tanh_rn(u);
  const float du = mul(kC, add(1.0f, mul(mul(mul(3.0f, kK), x), x)));
  const float left = mul(0.5f, add(1.0f, t));
  const float right = mul(mul(mul(0.5f, x), sub(1.0f, mul(t, t))), du);
  return add(left, right);
}

// The exact GELU (tanh form) and its derivative, in 50 digits, with the fp32 constants.
Big gelu_exact(float xf) {
  const Big x(xf), c(kC), k(kK);
  return Big(0.5) * x * (1 + tanh(c * (x + k * x * x * x)));
}
Big gelu_grad_exact(float xf) {
  const Big x(xf), c(kC), k(kK);
  const Big t = tanh(c * (x + k * x * x * x));
  return Big(0.5) * (1 + t) + Big(0.5) * x * (1 - t * t) * c * (1 + 3 * k * x * x);
}
Big sigmoid_exact(float xf) { return 1 / (1 + exp(-Big(xf))); }

// |got - exact| <= ulps * ulp(scale) with ulp(s) = 2^-23 |s| (and a floor for tiny values).
bool close(float got, const Big& exact, double ulps, double scale) {
  const double err = std::fabs(double(Big(got) - exact));
  return err <= ulps * std::ldexp(std::max(std::fabs(scale), 1e-30), -23);
}

std::vector<float> sample_inputs(std::uint32_t seed, int n, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(d(rng));
  return v;
}

}  // namespace

TEST_CASE("fmax_f32: glibc fmaxf semantics worked by hand (NaN ignored, signed zeros, sNaN)", "[core][nn_element]") {
  const float qa = from_bits(0x7FC00001u), qb = from_bits(0xFFC00002u);
  const float sa = from_bits(0x7F800001u);  // signaling
  CHECK(core::fmax_f32(1.0f, 2.0f) == 2.0f);
  CHECK(core::fmax_f32(2.0f, 1.0f) == 2.0f);
  CHECK(core::fmax_f32(-3.0f, -INFINITY) == -3.0f);
  CHECK(core::fmax_f32(INFINITY, 1.0f) == INFINITY);
  // Equal operands: the second one, so the sign of fmax(+-0, -+0) is the second operand's.
  CHECK(bits(core::fmax_f32(-0.0f, 0.0f)) == 0x00000000u);
  CHECK(bits(core::fmax_f32(0.0f, -0.0f)) == 0x80000000u);
  // One quiet NaN: the other operand; two: the first.
  CHECK(core::fmax_f32(qa, 1.0f) == 1.0f);
  CHECK(core::fmax_f32(1.0f, qa) == 1.0f);
  CHECK(core::fmax_f32(-INFINITY, qb) == -INFINITY);
  CHECK(bits(core::fmax_f32(qa, qb)) == 0x7FC00001u);
  CHECK(bits(core::fmax_f32(qb, qa)) == 0xFFC00002u);
  // A signaling NaN: the first NaN operand, quieted.
  CHECK(bits(core::fmax_f32(sa, 1.0f)) == 0x7FC00001u);
  CHECK(bits(core::fmax_f32(1.0f, sa)) == 0x7FC00001u);
  CHECK(bits(core::fmax_f32(qb, sa)) == 0xFFC00002u);
  // Ordinary values: the larger, both orders, against the comparison written the other way round.
  for (float a : sample_inputs(1, 200, -1e6f, 1e6f))
    for (float b : {-1.0f, 0.5f, 1e5f, -1e-30f}) {
      const float want = b > a ? b : a;
      CHECK(core::fmax_f32(a, b) == want);
      CHECK(core::fmax_f32(b, a) == want);
    }
  CHECK(core::f32_is_inf(INFINITY));
  CHECK(core::f32_is_inf(-INFINITY));
  CHECK_FALSE(core::f32_is_inf(FLT_MAX));
  CHECK_FALSE(core::f32_is_inf(qa));
  CHECK(core::f32_is_snan(sa));
  CHECK_FALSE(core::f32_is_snan(qa));
  CHECK_FALSE(core::f32_is_snan(INFINITY));
  CHECK(core::f32_max_finite() == FLT_MAX);
}

TEST_CASE("sqrt_rn: correctly rounded square root", "[core][nn_element]") {
  CHECK(core::sqrt_rn(4.0f) == 2.0f);
  CHECK(core::sqrt_rn(0.25f) == 0.5f);
  CHECK(bits(core::sqrt_rn(-0.0f)) == 0x80000000u);
  CHECK(core::sqrt_rn(INFINITY) == INFINITY);
  CHECK(bits(core::sqrt_rn(2.0f)) == 0x3FB504F3u);  // sqrt(2) = 1.41421353816986083984375 (RN)
  CHECK(std::isnan(core::sqrt_rn(-1.0f)));
  // Binary64 sqrt rounded to fp32 is the correctly rounded fp32 sqrt (53 >= 2 * 24 + 2).
  std::mt19937 rng(2);
  for (int i = 0; i < 100000; ++i) {
    const float x = from_bits(rng() & 0x7F7FFFFFu);
    REQUIRE(same_bits(core::sqrt_rn(x), float(std::sqrt(double(x)))));
  }
}

TEST_CASE("ReLU and its derivative", "[core][nn_element]") {
  CHECK(core::relu_forward(2.5f) == 2.5f);
  CHECK(core::relu_forward(-2.5f) == 0.0f);
  CHECK(bits(core::relu_forward(-0.0f)) == 0u);  // +0, not -0
  CHECK(bits(core::relu_forward(NAN)) == 0u);    // a NaN fails x > 0
  CHECK(core::relu_forward(FLT_MIN) == FLT_MIN);
  CHECK(core::relu_grad(2.5f) == 1.0f);
  CHECK(core::relu_grad(0.0f) == 0.0f);
  CHECK(core::relu_grad(-1e-40f) == 0.0f);
  CHECK(core::relu_grad(NAN) == 0.0f);
}

TEST_CASE("GELU (tanh form): values by hand, the exact formula, and the rounding spec", "[core][nn_element]") {
  // The fp32 constants are sqrt(2/pi) and 0.044715 rounded to fp32.
  CHECK(bits(core::kGeluSqrt2OverPi) == bits(kC));
  CHECK(bits(core::kGeluSqrt2OverPi) == 0x3F4C422Au);
  CHECK(bits(core::kGeluCoeff) == 0x3D372713u);
  // By hand: gelu(0) = 0.5 * 0 * (1 + 0) = +0; gelu'(0) = 0.5 * (1 + 0) + 0 = 0.5. For |x| = 10,
  // |u| > 9.1 so t = +-1 exactly: gelu(10) = 5 * 2 = 10, gelu(-10) = -5 * 0 = -0, gelu'(10) = 1,
  // gelu'(-10) = 0.5 * 0 + (-5 * 0) * du = 0 + -0 = +0.
  CHECK(bits(core::gelu_tanh_forward(0.0f)) == 0u);
  CHECK(core::gelu_tanh_grad(0.0f) == 0.5f);
  CHECK(core::gelu_tanh_forward(10.0f) == 10.0f);
  CHECK(bits(core::gelu_tanh_forward(-10.0f)) == 0x80000000u);
  CHECK(core::gelu_tanh_grad(10.0f) == 1.0f);
  CHECK(bits(core::gelu_tanh_grad(-10.0f)) == 0u);
  CHECK(std::isnan(core::gelu_tanh_forward(NAN)));
  CHECK(std::isnan(core::gelu_tanh_grad(NAN)));

  std::vector<float> xs = sample_inputs(3, 20000, -8.0f, 8.0f);
  for (float x : {-4.0f, -1.0f, -0.75f, -0.5f, -1e-3f, 1e-20f, 0.3f, 1.0f, 2.0f, 3.5f, 7.0f}) xs.push_back(x);
  for (float x : xs) {
    INFO("x = " << x);
    // Rounding spec: bit for bit.
    REQUIRE(same_bits(core::gelu_tanh_forward(x), gelu_spec(x)));
    REQUIRE(same_bits(core::gelu_tanh_grad(x), gelu_grad_spec(x)));
    // Mathematics: within a few ulps of the larger term (cancellation where the result is small).
    REQUIRE(close(core::gelu_tanh_forward(x), gelu_exact(x), 6.0, std::fabs(x)));
    REQUIRE(close(core::gelu_tanh_grad(x), gelu_grad_exact(x), 12.0, 1.0 + std::fabs(x)));
  }
}

TEST_CASE("sigmoid and SwiGLU: the exact formulas and the rounding spec", "[core][nn_element]") {
  CHECK(core::sigmoid(0.0f) == 0.5f);
  CHECK(core::sigmoid(200.0f) == 1.0f);  // exp_rn(-200) = 0 after rounding 1 + tiny
  CHECK(core::sigmoid(-200.0f) == 0.0f); // 1 / (1 + Inf)
  CHECK(core::swiglu_forward(0.0f, 3.0f) == 0.0f);
  CHECK(core::swiglu_forward(1.0f, 0.0f) == 0.0f);
  float da = -1.0f, db = -1.0f;
  core::swiglu_backward(0.0f, 2.0f, 1.0f, da, db);  // s = 0.5: d_a = 2 * 0.5 * 1 = 1, d_b = 0
  CHECK(da == 1.0f);
  CHECK(db == 0.0f);

  const std::vector<float> as = sample_inputs(4, 5000, -12.0f, 12.0f);
  const std::vector<float> bs = sample_inputs(5, 5000, -3.0f, 3.0f);
  const std::vector<float> dys = sample_inputs(6, 5000, -2.0f, 2.0f);
  for (std::size_t i = 0; i < as.size(); ++i) {
    const float a = as[i], b = bs[i], dy = dys[i];
    INFO("a = " << a << ", b = " << b << ", dy = " << dy);
    const float s = dvd(1.0f, add(1.0f, core::exp_rn(-a)));
    REQUIRE(same_bits(core::sigmoid(a), s));
    REQUIRE(same_bits(core::swiglu_forward(a, b), mul(mul(a, s), b)));
    core::swiglu_backward(a, b, dy, da, db);
    REQUIRE(same_bits(da, mul(mul(mul(dy, b), s), add(1.0f, mul(a, sub(1.0f, s))))));
    REQUIRE(same_bits(db, mul(mul(dy, a), s)));
    // Mathematics: d/da (a sigma(a) b) = b sigma (1 + a (1 - sigma)); d/db = a sigma.
    const Big se = sigmoid_exact(a);
    REQUIRE(close(core::sigmoid(a), se, 2.0, double(se)));
    REQUIRE(close(core::swiglu_forward(a, b), Big(a) * se * Big(b), 4.0, double(Big(a) * se * Big(b))));
    const Big da_exact = Big(dy) * Big(b) * se * (1 + Big(a) * (1 - se));
    // 1 - s cancels for large a: its absolute error is <= ulp(1), so bound by |a| dy b ulp(1).
    REQUIRE(close(da, da_exact, 8.0, std::fabs(dy * b) * (1.0f + std::fabs(a))));
    REQUIRE(close(db, Big(dy) * Big(a) * se, 4.0, std::fabs(dy * a)));
  }
}

namespace {

// The spec of softmax_xent_row, written out: the max ignoring NaNs (NaN only if all are NaN), the
// fp32 sum in column order of exp_rn(z_j - mx), loss and gradient, each step one rounding.
float xent_spec(const std::vector<float>& z, int label, float divisor, std::vector<float>* d) {
  float mx = NAN;
  for (float v : z)
    if (!std::isnan(v) && (std::isnan(mx) || v > mx)) mx = v;
  std::vector<float> p;
  float sum = 0.0f;
  for (float v : z) {
    p.push_back(core::exp_rn(sub(v, mx)));
    sum = add(sum, p.back());
  }
  if (d) {
    d->clear();
    for (std::size_t j = 0; j < z.size(); ++j)
      d->push_back(dvd(sub(dvd(p[j], sum), int(j) == label ? 1.0f : 0.0f), divisor));
  }
  return sub(core::log_rn(sum), sub(z[std::size_t(label)], mx));
}

}  // namespace

TEST_CASE("softmax_xent_row: binary64 reference, rounding spec, hand cases, NaN rows", "[core][nn_element]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int trial = 0; trial < 3000; ++trial) {
    const int classes = 1 + int(rng() % 40);
    const int label = int(rng() % unsigned(classes));
    const float divisor = float(1 + rng() % 128);
    std::vector<float> z(static_cast<std::size_t>(classes));
    for (float& v : z) v = nd(rng) + (trial % 3 == 0 ? 300.0f : 0.0f);  // large logits need the max
    INFO("trial " << trial << ", classes " << classes << ", label " << label);
    std::vector<float> d(z.size(), -7.0f), d_spec;
    const float loss = core::softmax_xent_row(z.data(), classes, label, divisor, d.data());
    const float loss_nod = core::softmax_xent_row(z.data(), classes, label, divisor, nullptr);
    // The spec, bit for bit; the loss does not depend on whether d is written.
    REQUIRE(same_bits(loss, xent_spec(z, label, divisor, &d_spec)));
    REQUIRE(same_bits(loss_nod, loss));
    for (int j = 0; j < classes; ++j) REQUIRE(same_bits(d[std::size_t(j)], d_spec[std::size_t(j)]));
    // Binary64 reference: loss = logsumexp(z) - z_label, d_j = (softmax_j - [j == label]) / divisor.
    double mx = z[0];
    for (float v : z) mx = std::max(mx, double(v));
    double s = 0.0;
    for (float v : z) s += std::exp(double(v) - mx);
    const double ref_loss = std::log(s) + mx - double(z[std::size_t(label)]);
    REQUIRE(std::fabs(double(loss) - ref_loss) <= 1e-5 * (1.0 + ref_loss));
    for (int j = 0; j < classes; ++j) {
      const double ref_d = (std::exp(double(z[std::size_t(j)]) - mx) / s - (j == label ? 1.0 : 0.0)) / divisor;
      REQUIRE(std::fabs(double(d[std::size_t(j)]) - ref_d) <= 1e-6 / divisor);
    }
  }

  // By hand. Two equal logits: p = [1, 1], sum 2, loss = log 2, d = [0.5 - 1, 0.5] / 2.
  std::vector<float> z = {3.0f, 3.0f}, d(2);
  CHECK(core::softmax_xent_row(z.data(), 2, 0, 2.0f, d.data()) == core::log_rn(2.0f));
  CHECK(d[0] == -0.25f);
  CHECK(d[1] == 0.25f);
  // A -Inf logit: p = [0, 1]; label 1: loss log(1) - 0 = 0, d = [0, 0]; label 0: loss +Inf.
  z = {-INFINITY, 5.0f};
  CHECK(core::softmax_xent_row(z.data(), 2, 1, 1.0f, d.data()) == 0.0f);
  CHECK(d[0] == 0.0f);
  CHECK(d[1] == 0.0f);
  CHECK(core::softmax_xent_row(z.data(), 2, 0, 1.0f, d.data()) == INFINITY);
  // Logits that overflow exp without the max: loss log(1 + e^-1 + e^-2) (one class).
  z = {1000.0f, 999.0f, 998.0f};
  const float l = core::softmax_xent_row(z.data(), 3, 0, 1.0f, nullptr);
  CHECK(std::fabs(double(l) - std::log(1.0 + std::exp(-1.0) + std::exp(-2.0))) < 1e-6);
  // One class: loss 0, gradient 0.
  z = {-2.5f};
  CHECK(core::softmax_xent_row(z.data(), 1, 0, 4.0f, d.data()) == 0.0f);
  CHECK(d[0] == 0.0f);

  // NaN logits: the max ignores a NaN (fmax), yet exp(NaN - mx) makes the sum, the loss and every
  // gradient NaN, wherever the NaN is (first, label, last) and when the whole row is NaN.
  for (int where = 0; where < 3; ++where) {
    z = {1.0f, 2.0f, 3.0f};
    z[std::size_t(where)] = NAN;
    std::vector<float> dd(3, 0.0f);
    CHECK(std::isnan(core::softmax_xent_row(z.data(), 3, 1, 1.0f, dd.data())));
    for (float v : dd) CHECK(std::isnan(v));
  }
  z = {NAN, NAN};
  CHECK(std::isnan(core::softmax_xent_row(z.data(), 2, 0, 1.0f, d.data())));
  CHECK(std::isnan(d[0]));
  CHECK(std::isnan(d[1]));
  // An Inf logit makes Inf - Inf: NaN loss as well.
  z = {INFINITY, 1.0f};
  CHECK(std::isnan(core::softmax_xent_row(z.data(), 2, 1, 1.0f, nullptr)));
}

TEST_CASE("adam_element and sgd_momentum_element: rounding spec and the first step", "[core][nn_element]") {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 1e-3f;
  const std::vector<float> gs = sample_inputs(8, 4000, -1.0f, 1.0f);
  const std::vector<float> ws = sample_inputs(9, 4000, -0.5f, 0.5f);
  for (std::size_t i = 0; i < gs.size(); ++i) {
    INFO("g = " << gs[i] << ", w = " << ws[i]);
    // Three steps with the same gradient, against the spec step by step.
    float w = ws[i], m = 0.0f, v = 0.0f, ws_ = ws[i], ms = 0.0f, vs = 0.0f;
    for (int t = 1; t <= 3; ++t) {
      const float bc1 = 1.0f - std::pow(b1, float(t)), bc2 = 1.0f - std::pow(b2, float(t));
      const float step = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
      core::adam_element(w, gs[i], m, v, b1, b2, step, sqrt_bc2, eps);
      ms = add(mul(b1, ms), mul(sub(1.0f, b1), gs[i]));
      vs = add(mul(b2, vs), mul(mul(sub(1.0f, b2), gs[i]), gs[i]));
      const float den = add(dvd(float(std::sqrt(double(vs))), sqrt_bc2), eps);
      ws_ = sub(ws_, dvd(mul(step, ms), den));
      REQUIRE(same_bits(m, ms));
      REQUIRE(same_bits(v, vs));
      REQUIRE(same_bits(w, ws_));
      // Mathematics: with a constant gradient, m/bc1 = g and sqrt(v/bc2) = |g|, so each step moves
      // w by lr * g / (|g| + eps) = lr * sign(g) (for |g| >> eps), up to rounding.
      if (t == 1 && std::fabs(gs[i]) > 1e-3f)
        REQUIRE(std::fabs(double(ws[i]) - double(w) - (gs[i] > 0 ? 1.0 : -1.0) * lr) <= 1e-4 * lr + 1e-7);
    }
    // SGD with momentum, two steps, spec and by value.
    float w2 = ws[i], m2 = 0.0f;
    core::sgd_momentum_element(w2, gs[i], m2, 0.9f, 0.1f);
    REQUIRE(same_bits(m2, add(mul(0.9f, 0.0f), gs[i])));
    REQUIRE(same_bits(w2, sub(ws[i], mul(0.1f, gs[i]))));
    const float w_before = w2, m_before = m2;
    core::sgd_momentum_element(w2, gs[i], m2, 0.9f, 0.1f);
    REQUIRE(same_bits(m2, add(mul(0.9f, m_before), gs[i])));
    REQUIRE(same_bits(w2, sub(w_before, mul(0.1f, m2))));
  }
  // By hand: w = 1, g = 0.5, m = 0: m = 0.5, w = 1 - 0.1f * 0.5 = 0.95 (rounded once from the exact
  // 1 - 0.0500000007450580596923828125).
  float w = 1.0f, m = 0.0f;
  core::sgd_momentum_element(w, 0.5f, m, 0.9f, 0.1f);
  CHECK(m == 0.5f);
  CHECK(w == float(1.0 - 0.0500000007450580596923828125));
}

TEST_CASE("column_sum: fp32 in row order from +0, and bias_add", "[core][nn_element]") {
  // Column 1 of a [4, 3] matrix: 1e8, 1, -1e8, 1. Exact sum 2; in fp32 row order
  // 1e8 + 1 = 1e8 (ulp 8), - 1e8 = 0, + 1 = 1.
  const std::vector<float> x = {0.0f, 1e8f, 5.0f,  //
                                0.0f, 1.0f, 6.0f,  //
                                0.0f, -1e8f, 7.0f,  //
                                -0.0f, 1.0f, 8.0f};
  CHECK(core::column_sum(x.data(), 4, 3, 1) == 1.0f);
  CHECK(core::column_sum(x.data(), 4, 3, 2) == 26.0f);
  // A column of zeros (one -0): 0 + 0 + 0 + -0 = +0.
  CHECK(bits(core::column_sum(x.data(), 4, 3, 0)) == 0u);
  const std::vector<float> neg = {-0.0f, -0.0f};
  CHECK(bits(core::column_sum(neg.data(), 2, 1, 0)) == 0u);  // starts from +0
  CHECK(core::column_sum(x.data(), 0, 3, 1) == 0.0f);        // no rows
  CHECK(core::column_sum(x.data(), 2, 3, 1) == 1e8f);        // first two rows only
  // Random columns against the row-order loop written in the test.
  const std::vector<float> r = sample_inputs(10, 257 * 9, -3.0f, 3.0f);
  for (int j = 0; j < 9; ++j) {
    float s = 0.0f;
    for (int i = 0; i < 257; ++i) s = add(s, r[std::size_t(i) * 9 + std::size_t(j)]);
    CHECK(same_bits(core::column_sum(r.data(), 257, 9, j), s));
  }
  CHECK(core::bias_add(1.5f, 0.25f) == 1.75f);
  CHECK(core::bias_add(1e8f, 1.0f) == 1e8f);
}

TEST_CASE("delayed_update_slot_fused: hand-worked histories", "[core][nn_element]") {
  // history [L = 4, slots = 2], row 0 = this step's amax.
  auto fresh = [] {
    return std::vector<float>{2.0f, 0.0f,  // row 0
                              1.0f, 5.0f,  // row 1
                              3.0f, 6.0f,  // row 2
                              0.5f, 7.0f};  // row 3
  };
  SECTION("max over the window, the roll, a zero staging value keeps the history") {
    std::vector<float> h = fresh(), s = {1.0f, 1.0f};
    core::delayed_update_slot_fused(h.data(), 2, 4, 0, s.data(), 448.0f, false);
    // Slot 0: m = max(1, 3, 0.5, 2) = 3; rows 1..2 take rows 2..3, row 3 takes 2, row 0 becomes 0.
    CHECK(h == std::vector<float>{0.0f, 0.0f, 3.0f, 5.0f, 0.5f, 6.0f, 2.0f, 7.0f});
    CHECK(s[0] == 448.0f / 3.0f);
    CHECK(s[1] == 1.0f);  // untouched
    // Slot 1: r = 0, so nothing rolls and amax = 0 keeps the scale.
    core::delayed_update_slot_fused(h.data(), 2, 4, 1, s.data(), 448.0f, false);
    CHECK(h == std::vector<float>{0.0f, 0.0f, 3.0f, 5.0f, 0.5f, 6.0f, 2.0f, 7.0f});
    CHECK(s[1] == 1.0f);
    // -0 is a zero staging value too.
    h[1] = -0.0f;
    core::delayed_update_slot_fused(h.data(), 2, 4, 1, s.data(), 448.0f, true);
    CHECK(h[3] == 5.0f);
    CHECK(h[7] == 7.0f);
    CHECK(s[1] == 1.0f);
  }
  SECTION("most_recent: this step's amax, the history still rolls") {
    std::vector<float> h = fresh(), s = {1.0f, 1.0f};
    core::delayed_update_slot_fused(h.data(), 2, 4, 0, s.data(), 448.0f, true);
    CHECK(s[0] == 224.0f);
    CHECK(h[6] == 2.0f);
    CHECK(h[0] == 0.0f);
  }
  SECTION("margin: scaled_max is used as given") {
    std::vector<float> h = fresh(), s = {1.0f, 1.0f};
    core::delayed_update_slot_fused(h.data(), 2, 4, 0, s.data(), 224.0f, true);
    CHECK(s[0] == 112.0f);
  }
  SECTION("an infinite quotient becomes FLT_MAX") {
    std::vector<float> h = {1e-45f, 0.0f}, s = {1.0f};
    core::delayed_update_slot_fused(h.data(), 1, 2, 0, s.data(), 448.0f, false);
    CHECK(s[0] == FLT_MAX);
    CHECK(h == std::vector<float>{0.0f, 1e-45f});
    // A kept infinite scale becomes FLT_MAX too (amax 0).
    s[0] = -INFINITY;
    core::delayed_update_slot_fused(h.data(), 1, 2, 0, s.data(), 448.0f, true);
    CHECK(s[0] == FLT_MAX);
  }
  SECTION("NaN and Inf amaxes keep the scale") {
    std::vector<float> h = {NAN, 0.0f, 0.0f}, s = {3.0f};
    // most_recent: amax = NaN, the scale stays; the NaN rolls into the last row.
    core::delayed_update_slot_fused(h.data(), 1, 3, 0, s.data(), 448.0f, true);
    CHECK(s[0] == 3.0f);
    CHECK(h[0] == 0.0f);
    CHECK(h[1] == 0.0f);
    CHECK(std::isnan(h[2]));
    // max: the NaN in the window is ignored (fmax): amax = max(NaN, 4) = 4 -> 112.
    h[0] = 4.0f;
    core::delayed_update_slot_fused(h.data(), 1, 3, 0, s.data(), 448.0f, false);
    CHECK(s[0] == 112.0f);
    CHECK(std::isnan(h[1]));
    CHECK(h[2] == 4.0f);
    // Inf amax: kept.
    h[0] = INFINITY;
    core::delayed_update_slot_fused(h.data(), 1, 3, 0, s.data(), 448.0f, false);
    CHECK(s[0] == 112.0f);
    CHECK(h[2] == INFINITY);
    // A negative amax (not produced by an amax, but defined): kept.
    std::vector<float> h2 = {-2.0f}, s2 = {5.0f};
    core::delayed_update_slot_fused(h2.data(), 1, 1, 0, s2.data(), 448.0f, true);
    CHECK(s2[0] == 5.0f);
  }
  SECTION("history length 1: amax = r, row 0 cleared") {
    std::vector<float> h = {4.0f, 8.0f}, s = {1.0f, 1.0f};
    core::delayed_update_slot_fused(h.data(), 2, 1, 1, s.data(), 448.0f, false);
    CHECK(s[1] == 56.0f);
    CHECK(s[0] == 1.0f);
    CHECK(h == std::vector<float>{4.0f, 0.0f});
  }
}

namespace {

// LayerNorm / RMSNorm of one row in binary64 (the mathematics, no fp32 rounding).
std::vector<double> norm_exact(const std::vector<double>& x, bool layernorm, double eps, const std::vector<double>& g,
                               const std::vector<double>& b) {
  const double n = double(x.size());
  double mu = 0.0, var = 0.0;
  if (layernorm) {
    for (double v : x) mu += v;
    mu /= n;
  }
  for (double v : x) var += (v - mu) * (v - mu);
  var /= n;
  std::vector<double> y;
  for (std::size_t j = 0; j < x.size(); ++j)
    y.push_back((x[j] - mu) / std::sqrt(var + eps) * g[j] + (layernorm ? b[j] : 0.0));
  return y;
}

// The spec of norm_forward_row, step by step (binary64 statistics rounded once to fp32, then fp32
// steps).
float norm_forward_spec(const std::vector<float>& x, bool layernorm, float eps, const std::vector<float>& g,
                        const std::vector<float>& b, std::vector<float>& y, std::vector<float>& xhat) {
  const int n = int(x.size());
  float mu = 0.0f;
  double acc = 0.0;
  if (layernorm) {
    for (float v : x) acc = acc + double(v);
    mu = float(acc / double(n));
    acc = 0.0;
    for (float v : x) acc = acc + (double(v) - double(mu)) * (double(v) - double(mu));
  } else {
    for (float v : x) acc = acc + double(v) * double(v);
  }
  const float var = float(acc / double(n));
  const float rs = dvd(1.0f, float(std::sqrt(double(add(var, eps)))));
  y.clear();
  xhat.clear();
  for (int j = 0; j < n; ++j) {
    const float xh = mul(sub(x[std::size_t(j)], mu), rs);
    xhat.push_back(xh);
    y.push_back(layernorm ? add(mul(xh, g[std::size_t(j)]), b[std::size_t(j)]) : mul(xh, g[std::size_t(j)]));
  }
  return rs;
}

}  // namespace

TEST_CASE("norm_forward_row: values by hand, binary64 reference, rounding spec", "[core][nn_element]") {
  // LayerNorm of [1, 2, 3, 4], eps 0: mu 2.5, var (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25,
  // rs = RN(1 / RN(sqrt(1.25))), xhat = [-1.5, -0.5, 0.5, 1.5] * rs, y = xhat * 2 + 1.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f}, g(4, 2.0f), b(4, 1.0f), y(4), xh(4);
  float rs = core::norm_forward_row(x.data(), 4, true, 0.0f, g.data(), b.data(), false, y.data(), xh.data());
  CHECK(rs == 1.0f / float(std::sqrt(1.25)));
  CHECK(xh[0] == -1.5f * rs);
  CHECK(xh[3] == 1.5f * rs);
  CHECK(y[1] == -0.5f * rs * 2.0f + 1.0f);
  // Zero-centered gamma: stored 1 means an effective 2, the same result; y without xhat.
  std::vector<float> g1(4, 1.0f), y2(4);
  CHECK(core::norm_forward_row(x.data(), 4, true, 0.0f, g1.data(), b.data(), true, y2.data(), nullptr) == rs);
  CHECK(y2 == y);
  // A constant row: var 0, so rs = 1 / sqrt(eps) and y = beta.
  std::vector<float> c(4, 3.0f);
  rs = core::norm_forward_row(c.data(), 4, true, 1e-4f, g.data(), b.data(), false, y.data(), xh.data());
  CHECK(rs == 1.0f / float(std::sqrt(double(1e-4f))));
  CHECK(y == std::vector<float>(4, 1.0f));
  // RMSNorm of [3, 4]: mean square 12.5, y = x / sqrt(12.5) * g (beta not read: null is fine).
  std::vector<float> r = {3.0f, 4.0f};
  rs = core::norm_forward_row(r.data(), 2, false, 0.0f, g.data(), nullptr, false, y.data(), xh.data());
  CHECK(rs == 1.0f / float(std::sqrt(12.5)));
  CHECK(y[0] == 3.0f * rs * 2.0f);
  CHECK(y[1] == 4.0f * rs * 2.0f);
  // In place (y == x) gives the same row.
  std::vector<float> inplace = {1.0f, 2.0f, 3.0f, 4.0f}, ref(4);
  core::norm_forward_row(inplace.data(), 4, true, 1e-5f, g.data(), b.data(), false, ref.data(), nullptr);
  core::norm_forward_row(inplace.data(), 4, true, 1e-5f, g.data(), b.data(), false, inplace.data(), nullptr);
  CHECK(inplace == ref);

  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + int(rng() % 300);
    const bool ln = trial % 2 == 0;
    const float eps = trial % 4 < 2 ? 1e-5f : 1e-6f;
    const float shift = float(trial % 5) * 10.0f;
    std::vector<float> xs, gs, bs;
    for (int j = 0; j < n; ++j) {
      xs.push_back(shift + 3.0f * nd(rng));
      gs.push_back(1.0f + 0.2f * nd(rng));
      bs.push_back(0.1f * nd(rng));
    }
    INFO("trial " << trial << ", n " << n << (ln ? " LayerNorm" : " RMSNorm"));
    std::vector<float> yo(xs.size()), xo(xs.size()), ys, xhs;
    const float rso = core::norm_forward_row(xs.data(), n, ln, eps, gs.data(), bs.data(), false, yo.data(), xo.data());
    REQUIRE(same_bits(rso, norm_forward_spec(xs, ln, eps, gs, bs, ys, xhs)));
    for (int j = 0; j < n; ++j) {
      REQUIRE(same_bits(yo[std::size_t(j)], ys[std::size_t(j)]));
      REQUIRE(same_bits(xo[std::size_t(j)], xhs[std::size_t(j)]));
    }
    const std::vector<double> ye = norm_exact(std::vector<double>(xs.begin(), xs.end()), ln, eps,
                                              std::vector<double>(gs.begin(), gs.end()),
                                              std::vector<double>(bs.begin(), bs.end()));
    for (int j = 0; j < n; ++j) REQUIRE(std::fabs(double(yo[std::size_t(j)]) - ye[std::size_t(j)]) <= 2e-6 * (8.0 + shift));
  }
}

TEST_CASE("norm_backward_row and norm_param_grad_column: finite differences, rounding spec, by hand",
          "[core][nn_element]") {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + int(rng() % 64);
    const bool ln = trial % 2 == 0;
    const bool zc = trial % 3 == 0;
    const float eps = 1e-5f;
    std::vector<float> xs, gs, bs(std::size_t(n), 0.0f), dy;
    for (int j = 0; j < n; ++j) {
      xs.push_back(1.0f + 2.0f * nd(rng));
      gs.push_back((zc ? 0.0f : 1.0f) + 0.3f * nd(rng));
      dy.push_back(nd(rng));
    }
    INFO("trial " << trial << ", n " << n << (ln ? " LayerNorm" : " RMSNorm") << (zc ? ", zero-centered" : ""));
    std::vector<float> y(xs.size()), xh(xs.size()), dx(xs.size());
    const float rs = core::norm_forward_row(xs.data(), n, ln, eps, gs.data(), bs.data(), zc, y.data(), xh.data());
    core::norm_backward_row(dy.data(), xh.data(), rs, n, ln, gs.data(), zc, dx.data());
    // Spec: binary64 sums of the fp32 g*dy, means rounded once, fp32 steps.
    double s1 = 0.0, s2 = 0.0;
    std::vector<float> geff;
    for (int j = 0; j < n; ++j) {
      geff.push_back(zc ? add(1.0f, gs[std::size_t(j)]) : gs[std::size_t(j)]);
      const float gdy = mul(geff.back(), dy[std::size_t(j)]);
      s1 = s1 + double(gdy);
      s2 = s2 + double(gdy) * double(xh[std::size_t(j)]);
    }
    const float m1 = ln ? float(s1 / double(n)) : 0.0f, m2 = float(s2 / double(n));
    for (int j = 0; j < n; ++j) {
      const std::size_t k = std::size_t(j);
      REQUIRE(same_bits(dx[k], mul(rs, sub(sub(mul(geff[k], dy[k]), m1), mul(xh[k], m2)))));
    }
    // Mathematics: dx = d/dx sum_j dy_j y_j(x), by central differences of the binary64 forward.
    const std::vector<double> gd(geff.begin(), geff.end()), bd(bs.begin(), bs.end());
    for (int j = 0; j < n; ++j) {
      std::vector<double> xp(xs.begin(), xs.end()), xm(xs.begin(), xs.end());
      const double h = 1e-5;
      xp[std::size_t(j)] += h;
      xm[std::size_t(j)] -= h;
      const std::vector<double> yp = norm_exact(xp, ln, eps, gd, bd), ym = norm_exact(xm, ln, eps, gd, bd);
      double fd = 0.0;
      for (int k = 0; k < n; ++k) fd += double(dy[std::size_t(k)]) * (yp[std::size_t(k)] - ym[std::size_t(k)]);
      fd /= 2 * h;
      REQUIRE(std::fabs(double(dx[std::size_t(j)]) - fd) <= 2e-4 * (1.0 + std::fabs(fd)));
    }
  }

  // Parameter gradients, by hand: dy = [[1, 2], [3, 4], [1e8, 0], [-1e8, 0]] (rows), xhat all 1
  // except xhat[1][1] = 0.5: column 0 sums 1 + 3 + 1e8 - 1e8 = 0 in fp32 order (exact 4), column 1
  // gives d_gamma 2 + 2 = 4, d_beta 6.
  const std::vector<float> dyp = {1.0f, 2.0f, 3.0f, 4.0f, 1e8f, 0.0f, -1e8f, 0.0f};
  const std::vector<float> xhp = {1.0f, 1.0f, 1.0f, 0.5f, 1.0f, 1.0f, 1.0f, 1.0f};
  float dg = -1.0f, db = -1.0f;
  core::norm_param_grad_column(dyp.data(), xhp.data(), 4, 2, 0, dg, db);
  CHECK(dg == 0.0f);
  CHECK(db == 0.0f);
  core::norm_param_grad_column(dyp.data(), xhp.data(), 4, 2, 1, dg, db);
  CHECK(dg == 4.0f);
  CHECK(db == 6.0f);
  core::norm_param_grad_column(dyp.data(), xhp.data(), 2, 2, 0, dg, db);
  CHECK(dg == 4.0f);
  CHECK(db == 4.0f);
  CHECK(db == core::column_sum(dyp.data(), 2, 2, 0));
}
