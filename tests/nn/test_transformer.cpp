// Transformer layers in FP32 mode: backward (dx and parameter gradients) against central finite
// differences of a random linear functional of the output; attention against a direct evaluation
// of the formula in double; causality.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <functional>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/transformer.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using nn::Matrix;

namespace {

double dot(const Matrix& a, const Matrix& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a.data[i]) * double(b.data[i]);
  return s;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(2e-2, std::abs(b)); }

/// Checks analytic gradients against central differences of L = sum(forward(x) * w): every element
/// of dx (up to `max_checks`) and of each listed parameter tensor.
void check_fd(const std::function<void(const Matrix&, Matrix&, bool)>& fwd,
              const std::function<void(const Matrix&, Matrix&)>& bwd, Matrix x, const nn::ParamList& params,
              double tol, int stride = 1) {
  Matrix y, dx;
  fwd(x, y, true);
  nn::Rng rng(11);
  const Matrix w = testing::random_matrix(y.rows, y.cols, rng, 1.0f);
  bwd(w, dx);
  // Snapshot the parameter gradients before the finite-difference forwards.
  std::vector<std::vector<float>> grads;
  for (const auto& pg : params) grads.push_back(pg.second->data);
  const float h = 1e-2f;
  auto L = [&](const Matrix& xx) {
    Matrix yy;
    fwd(xx, yy, false);
    return dot(yy, w);
  };
  for (std::size_t i = 0; i < x.size(); i += std::size_t(stride)) {
    Matrix xp = x, xm = x;
    xp.data[i] += h;
    xm.data[i] -= h;
    const double fd = (L(xp) - L(xm)) / (double(xp.data[i]) - double(xm.data[i]));
    INFO("dx[" << i << "]");
    CHECK(rel(dx.data[i], fd) < tol);
  }
  for (std::size_t p = 0; p < params.size(); ++p) {
    Matrix* v = params[p].first;
    for (std::size_t i = 0; i < v->size(); i += std::size_t(stride) * 3 + 1) {
      const float keep = v->data[i];
      v->data[i] = keep + h;
      const double lp = L(x);
      v->data[i] = keep - h;
      const double lm = L(x);
      v->data[i] = keep;
      INFO("param " << p << " [" << i << "]");
      CHECK(rel(grads[p][i], (lp - lm) / (2.0 * h)) < tol);
    }
  }
}

nn::LinearSpec fp32() { return {nn::Precision::kFp32, scaling::DelayedScaling{}}; }

void init(nn::Linear& l, nn::Rng& rng) { l.init(rng); }

}  // namespace

TEST_CASE("LayerNormLinear backward matches finite differences (FP32)", "[nn][transformer]") {
  for (nn::NormKind kind : {nn::NormKind::kLayerNorm, nn::NormKind::kRMSNorm}) {
    nn::Rng rng(1);
    nn::LayerNormLinear m(kind, 12, 7, fp32());
    init(m.linear, rng);
    nn::ParamList ps;
    m.params(ps);
    check_fd([&](const Matrix& x, Matrix& y, bool t) { m.forward(x, y, t); },
             [&](const Matrix& dy, Matrix& dx) { m.backward(dy, dx); }, testing::random_matrix(4, 12, rng, 1.5f), ps,
             2e-2);
  }
}

TEST_CASE("LayerNormMLP backward matches finite differences (FP32, GELU and SwiGLU)", "[nn][transformer]") {
  for (nn::MlpActivation act : {nn::MlpActivation::kGelu, nn::MlpActivation::kSwiGlu}) {
    nn::Rng rng(2);
    nn::LayerNormMLP m(nn::NormKind::kLayerNorm, 10, 16, act, fp32());
    init(m.fc1, rng);
    init(m.fc2, rng);
    nn::ParamList ps;
    m.params(ps);
    check_fd([&](const Matrix& x, Matrix& y, bool t) { m.forward(x, y, t); },
             [&](const Matrix& dy, Matrix& dx) { m.backward(dy, dx); }, testing::random_matrix(3, 10, rng, 1.5f), ps,
             2e-2);
  }
}

namespace {
// Attention's output against its formula in double: for each sequence b, head h and query i, the
// softmax over the keys it sees (j <= i when causal, every j otherwise) of (q . k_j) / sqrt(d),
// times V; within 1e-5.
void check_attention_formula(const Matrix& qkv, const Matrix& out, int B, int T, int H, int d, bool causal) {
  const int D = H * d;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const int keys = causal ? i + 1 : T;
        std::vector<double> s(static_cast<std::size_t>(keys));
        double mx = -1e300, sum = 0;
        for (int j = 0; j < keys; ++j) {
          double v = 0;
          for (int c = 0; c < d; ++c) v += double(qkv(b * T + i, h * d + c)) * qkv(b * T + j, D + h * d + c);
          s[std::size_t(j)] = v / std::sqrt(double(d));
          mx = std::max(mx, s[std::size_t(j)]);
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int c = 0; c < d; ++c) {
          double o = 0;
          for (int j = 0; j < keys; ++j) o += s[std::size_t(j)] / sum * qkv(b * T + j, 2 * D + h * d + c);
          CHECK(std::abs(out(b * T + i, h * d + c) - o) < 1e-5);
        }
      }
}
}  // namespace

TEST_CASE("attention: forward equals the formula in double, causal, backward matches finite differences",
          "[nn][transformer]") {
  const int B = 2, T = 5, H = 2, d = 3, D = H * d;
  nn::Rng rng(3);
  const Matrix qkv = testing::random_matrix(B * T, 3 * D, rng, 1.0f);
  nn::DotProductAttention att(H, d);
  Matrix out;
  att.forward(qkv, T, out, false);
  check_attention_formula(qkv, out, B, T, H, d, true);
  // Causality: changing token 3 of sequence 0 changes no output before position 3.
  Matrix q2 = qkv, out2;
  for (int c = 0; c < 3 * D; ++c) q2(3, c) += 0.5f;
  att.forward(q2, T, out2, false);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < D; ++c) CHECK(out2(i, c) == out(i, c));
  check_fd([&](const Matrix& x, Matrix& y, bool t) { att.forward(x, T, y, t); },
           [&](const Matrix& dy, Matrix& dx) { att.backward(dy, dx); }, qkv, {}, 2e-2);
}

TEST_CASE("attention without a mask: every query sees every key, the forward as the formula and the backward as "
          "finite differences", "[nn][transformer]") {
  const int B = 2, T = 5, H = 2, d = 3, D = H * d;
  nn::Rng rng(13);
  const Matrix qkv = testing::random_matrix(B * T, 3 * D, rng, 1.0f);
  nn::DotProductAttention att(H, d, false), causal(H, d);
  CHECK_FALSE(att.causal());
  CHECK(causal.causal());
  Matrix out, out_c;
  att.forward(qkv, T, out, false);
  causal.forward(qkv, T, out_c, false);
  check_attention_formula(qkv, out, B, T, H, d, false);
  // The last query row sees every key under both masks: the same sums in the same order.
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < H * d; ++c) CHECK(out(b * T + T - 1, c) == out_c(b * T + T - 1, c));
  // No causality: changing token 3 of sequence 0 changes the outputs before it too.
  Matrix q2 = qkv, out2;
  for (int c = 0; c < 3 * D; ++c) q2(3, c) += 0.5f;
  att.forward(q2, T, out2, false);
  bool earlier_changed = false;
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < D; ++c) earlier_changed |= out2(i, c) != out(i, c);
  CHECK(earlier_changed);
  check_fd([&](const Matrix& x, Matrix& y, bool t) { att.forward(x, T, y, t); },
           [&](const Matrix& dy, Matrix& dx) { att.backward(dy, dx); }, qkv, {}, 2e-2);
  // A TransformerLayer passes its mask on.
  nn::TransformerLayer enc(8, 2, 16, nn::NormKind::kLayerNorm, nn::MlpActivation::kGelu, fp32(), false);
  CHECK_FALSE(enc.attention.causal());
  CHECK_FALSE(nn::TransformerLayer(enc).attention.causal());
}

TEST_CASE("TransformerLayer backward matches finite differences (FP32)", "[nn][transformer]") {
  nn::Rng rng(4);
  nn::TransformerLayer layer(8, 2, 16, nn::NormKind::kLayerNorm, nn::MlpActivation::kGelu, fp32());
  for (nn::Linear* l : layer.linears()) init(*l, rng);
  nn::ParamList ps;
  layer.params(ps);
  const int T = 4;
  check_fd([&](const Matrix& x, Matrix& y, bool t) { layer.forward(x, T, y, t); },
           [&](const Matrix& dy, Matrix& dx) { layer.backward(dy, dx); }, testing::random_matrix(2 * T, 8, rng, 1.0f),
           ps, 3e-2, 2);
}

TEST_CASE("layer errors: shapes and names", "[nn][transformer]") {
  CHECK_THROWS_WITH(nn::TransformerLayer(10, 3, 8, nn::NormKind::kLayerNorm, nn::MlpActivation::kGelu, fp32()),
                    Catch::Contains("not a multiple of the number of heads"));
  CHECK_THROWS_WITH(nn::parse_mlp_activation("relu6"), Catch::Contains("accepted: gelu, swiglu"));
  nn::DotProductAttention att(2, 4);
  Matrix out;
  CHECK_THROWS_WITH(att.forward(Matrix(6, 24), 4, out, false), Catch::Contains("not a whole number of sequences"));
  CHECK_THROWS_WITH(att.forward(Matrix(8, 20), 4, out, false), Catch::Contains("packed QKV has 20 columns"));
}

namespace {
// The dequantized operand of a per-tensor cast: decode(Q(v * scale)) / scale, in double.
std::vector<double> dequantized(const Matrix& m, float scale, Format fmt) {
  std::vector<std::uint8_t> q(m.size());
  emu::quantize(m.data.data(), m.size(), scale, fmt, q.data(), nullptr);
  std::vector<double> out(m.size());
  for (std::size_t i = 0; i < m.size(); ++i)
    out[i] = double(core::fp8_to_f32(q[i], spec_of(fmt))) * double(1.0f / scale);
  return out;
}
}  // namespace

TEST_CASE("FP8 LayerNormLinear equals a reference from the dequantized operands, TE's cast placement",
          "[nn][transformer][fp8]") {
  // Delayed scaling (first step: every scale is 1) casts the fp32 norm output; current scaling
  // rounds it to bf16 first (TE's LN kernel writes bf16 there) and scales from its amax.
  for (int recipe = 0; recipe < 2; ++recipe) {
    nn::Rng rng(5);
    const nn::LinearSpec spec{nn::Precision::kFp8, recipe == 0 ? scaling::Recipe(scaling::DelayedScaling{})
                                                               : scaling::Recipe(scaling::CurrentScaling{})};
    nn::LayerNormLinear m(nn::NormKind::kLayerNorm, 40, 24, spec);
    m.linear.init(rng);
    const emu::GemmAccumulation exact{emu::Accumulation::kExact, 0};
    m.linear.set_accumulation(exact, exact, exact);
    const Matrix x = testing::random_matrix(6, 40, rng, 3.0f);
    Matrix y, ln;
    m.forward(x, y, false);
    m.norm.forward(x, ln, false);
    if (recipe == 1) nn::round_to_bf16(ln);
    const float fmax = max_finite_f32(Format::kE4M3);
    const float sx = recipe == 0 ? 1.0f : core::compute_scale_from_amax(emu::compute_amax(ln.data.data(), ln.size()), fmax, false, 0.0f, FLT_MAX);
    const float sw = recipe == 0 ? 1.0f : core::compute_scale_from_amax(emu::compute_amax(m.linear.weight.data.data(), m.linear.weight.size()), fmax, false, 0.0f, FLT_MAX);
    const std::vector<double> xq = dequantized(ln, sx, Format::kE4M3), wq = dequantized(m.linear.weight, sw, Format::kE4M3);
    double err = 0, ref = 0;
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 24; ++j) {
        double s = 0;
        for (int k = 0; k < 40; ++k) s += xq[std::size_t(i * 40 + k)] * wq[std::size_t(j * 40 + k)];
        s += testing::bf16_round(m.linear.bias(0, j));  // TE's bf16 bias
        err = std::max(err, std::abs(double(y(i, j)) - s));
        ref = std::max(ref, std::abs(s));
      }
    INFO("recipe " << recipe);
    CHECK(err <= 1e-6 * ref);
  }
}

TEST_CASE("FP8 TransformerLayer stays close to its FP32 twin (same weights)", "[nn][transformer][fp8]") {
  nn::Rng r1(9), r2(9);
  nn::TransformerLayer f32(16, 2, 32, nn::NormKind::kRMSNorm, nn::MlpActivation::kSwiGlu, fp32());
  nn::TransformerLayer f8(16, 2, 32, nn::NormKind::kRMSNorm, nn::MlpActivation::kSwiGlu,
                          {nn::Precision::kFp8, scaling::CurrentScaling{}});
  for (nn::Linear* l : f32.linears()) l->init(r1);
  for (nn::Linear* l : f8.linears()) l->init(r2);
  nn::Rng rx(10);
  const Matrix x = testing::random_matrix(8, 16, rx, 1.0f);
  Matrix y32, y8, dx32, dx8;
  f32.forward(x, 4, y32, true);
  f8.forward(x, 4, y8, true);
  double e = 0, n = 0;
  for (std::size_t i = 0; i < y32.size(); ++i) {
    e += (y8.data[i] - y32.data[i]) * (y8.data[i] - y32.data[i]);
    n += y32.data[i] * y32.data[i];
  }
  CHECK(std::sqrt(e / n) < 0.05);  // E4M3 has 3 mantissa bits: a few percent per GEMM at most
  CHECK(std::sqrt(e / n) > 0.0);   // and it is really FP8
  const Matrix dy = testing::random_matrix(8, 16, rx, 1.0f);
  f32.backward(dy, dx32);
  f8.backward(dy, dx8);
  e = n = 0;
  for (std::size_t i = 0; i < dx32.size(); ++i) {
    e += (dx8.data[i] - dx32.data[i]) * (dx8.data[i] - dx32.data[i]);
    n += dx32.data[i] * dx32.data[i];
  }
  CHECK(std::sqrt(e / n) < 0.2);  // E5M2 gradients: 2 mantissa bits
}

TEST_CASE("FP8 LayerNormLinear backward equals a reference from the dequantized operands", "[nn][transformer][fp8]") {
  // Delayed scaling, first step (every scale 1): dgrad dln = deq(dy) deq(W) with dy in E5M2 (HYBRID),
  // then the FP32 norm backward; wgrad dW = deq(dy)^T deq(x_ln).
  nn::Rng rng(12);
  nn::LayerNormLinear m(nn::NormKind::kRMSNorm, 32, 20, {nn::Precision::kFp8, scaling::DelayedScaling{}});
  m.linear.init(rng);
  const emu::GemmAccumulation exact{emu::Accumulation::kExact, 0};
  m.linear.set_accumulation(exact, exact, exact);
  const Matrix x = testing::random_matrix(5, 32, rng, 2.0f);
  const Matrix dy = testing::random_matrix(5, 20, rng, 1.0f);
  Matrix y, dx;
  m.forward(x, y, true);
  m.backward(dy, dx);
  // Reference.
  nn::Norm norm = m.norm;
  Matrix ln;
  norm.forward(x, ln, true);
  const std::vector<double> dyq = dequantized(dy, 1.0f, Format::kE5M2), wq = dequantized(m.linear.weight, 1.0f, Format::kE4M3),
                            xq = dequantized(ln, 1.0f, Format::kE4M3);
  Matrix dln(5, 32);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 32; ++k) {
      double s = 0;
      for (int j = 0; j < 20; ++j) s += dyq[std::size_t(i * 20 + j)] * wq[std::size_t(j * 32 + k)];
      dln(i, k) = float(s);
    }
  Matrix dx_ref;
  norm.backward(dln, dx_ref);
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < dx.size(); ++i) {
    err = std::max(err, std::abs(double(dx.data[i]) - dx_ref.data[i]));
    ref = std::max(ref, std::abs(double(dx_ref.data[i])));
  }
  CHECK(err <= 1e-5 * ref);
  double werr = 0, wref = 0;
  for (int j = 0; j < 20; ++j)
    for (int k = 0; k < 32; ++k) {
      double s = 0;
      for (int i = 0; i < 5; ++i) s += dyq[std::size_t(i * 20 + j)] * xq[std::size_t(i * 32 + k)];
      werr = std::max(werr, std::abs(double(m.linear.grad_weight(j, k)) - s));
      wref = std::max(wref, std::abs(s));
    }
  CHECK(werr <= 1e-6 * wref);
}
