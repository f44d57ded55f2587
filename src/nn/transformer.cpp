// Transformer layers (see include/fp8emu/nn/transformer.hpp).
#include "fp8emu/nn/transformer.hpp"

#include <cmath>
#include <cstddef>
#include <variant>
#include <vector>

#include "fp8emu/core/attention.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

void round_to_bf16(Matrix& m) {
  for (float& v : m.data) v = core::bits_to_f32(core::bf16_to_f32_bits(core::f32_bits_to_bf16_rne(core::f32_to_bits(v))));
}

MlpActivation parse_mlp_activation(const std::string& s) {
  if (s == "gelu") return MlpActivation::kGelu;
  if (s == "swiglu") return MlpActivation::kSwiGlu;
  FP8EMU_FAIL("unknown MLP activation '", s, "' (accepted: gelu, swiglu)");
}

namespace {

void add_into(Matrix& a, const Matrix& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a.data[i] += b.data[i];
}

}  // namespace

// ---------------------------------------------------------------- LayerNormLinear

LayerNormLinear::LayerNormLinear(NormKind norm_kind, int in, int out, const LinearSpec& spec, float eps,
                                 bool zero_centered_gamma)
    : norm(norm_kind, in, eps, zero_centered_gamma), linear(in, out, spec.precision, spec.recipe) {}

void LayerNormLinear::forward(const Matrix& x, Matrix& y, bool training) {
  Matrix ln;
  norm.forward(x, ln, training);
  // TE: under current scaling the LN kernel writes bf16 and the FP8 cast reads it; under delayed
  // scaling the LN kernel casts its fp32 result to FP8 directly.
  if (linear.precision() == Precision::kFp8 && linear.forward_quantizer().reads_bf16_norm_output())
    round_to_bf16(ln);
  linear.forward(ln, y, training);
}

void LayerNormLinear::backward(const Matrix& dy, Matrix& dx) {
  Matrix dln;
  linear.backward(dy, &dln);
  norm.backward(dln, dx);
}

void LayerNormLinear::params(ParamList& out) {
  out.emplace_back(&norm.gamma, &norm.grad_gamma);
  if (norm.kind() == NormKind::kLayerNorm) out.emplace_back(&norm.beta, &norm.grad_beta);
  out.emplace_back(&linear.weight, &linear.grad_weight);
  out.emplace_back(&linear.bias, &linear.grad_bias);
}

// ---------------------------------------------------------------- LayerNormMLP

LayerNormMLP::LayerNormMLP(NormKind norm_kind, int hidden, int ffn, MlpActivation act, const LinearSpec& spec,
                           float eps, bool zero_centered_gamma)
    : norm(norm_kind, hidden, eps, zero_centered_gamma),
      fc1(hidden, act == MlpActivation::kSwiGlu ? 2 * ffn : ffn, spec.precision, spec.recipe),
      fc2(ffn, hidden, spec.precision, spec.recipe),
      act_(act) {}

void LayerNormMLP::forward(const Matrix& x, Matrix& y, bool training) {
  norm.forward(x, ln_out_, training);
  if (fc1.precision() == Precision::kFp8 && fc1.forward_quantizer().reads_bf16_norm_output())
    round_to_bf16(ln_out_);
  fc1.forward(ln_out_, h_, training);
  if (act_dtype == ActivationDtype::kBf16) round_to_bf16(h_);
  const int ffn = fc2.in_features();
  a_.resize(h_.rows, ffn);
  // Elements are independent: any split over threads gives the same bits.
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(h_.rows) * ffn >= 2048)
  for (int i = 0; i < h_.rows; ++i) {
    for (int j = 0; j < ffn; ++j) {
      if (act_ == MlpActivation::kGelu) {
        a_(i, j) = core::gelu_tanh_forward(h_(i, j));
      } else {
        a_(i, j) = core::swiglu_forward(h_(i, j), h_(i, ffn + j));
      }
    }
  }
  if (act_dtype == ActivationDtype::kBf16) round_to_bf16(a_);
  fc2.forward(a_, y, training);
  if (act_dtype == ActivationDtype::kBf16) round_to_bf16(y);
}

void LayerNormMLP::backward(const Matrix& dy, Matrix& dx) {
  Matrix da, dh, dln;
  fc2.backward(dy, &da);
  const int ffn = fc2.in_features();
  dh.resize(h_.rows, h_.cols);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(h_.rows) * ffn >= 2048)
  for (int i = 0; i < h_.rows; ++i) {
    for (int j = 0; j < ffn; ++j) {
      if (act_ == MlpActivation::kGelu) {
        dh(i, j) = da(i, j) * core::gelu_tanh_grad(h_(i, j));
      } else {
        core::swiglu_backward(h_(i, j), h_(i, ffn + j), da(i, j), dh(i, j), dh(i, ffn + j));
      }
    }
  }
  fc1.backward(dh, &dln);
  norm.backward(dln, dx);
}

void LayerNormMLP::params(ParamList& out) {
  out.emplace_back(&norm.gamma, &norm.grad_gamma);
  if (norm.kind() == NormKind::kLayerNorm) out.emplace_back(&norm.beta, &norm.grad_beta);
  for (Linear* l : {&fc1, &fc2}) {
    out.emplace_back(&l->weight, &l->grad_weight);
    out.emplace_back(&l->bias, &l->grad_bias);
  }
}

// ---------------------------------------------------------------- DotProductAttention

void DotProductAttention::forward(const Matrix& qkv, int seq_len, Matrix& out, bool training) {
  const int H = heads_, d = head_dim_, D = H * d, T = seq_len;
  FP8EMU_CHECK(T > 0 && qkv.rows % T == 0, "attention: ", qkv.rows, " rows are not a whole number of sequences of ",
               T, " tokens");
  FP8EMU_CHECK(qkv.cols == 3 * D, "attention: packed QKV has ", qkv.cols, " columns, expected 3 * ", H, " heads * ",
               d, " = ", 3 * D);
  const int B = qkv.rows / T;
  const float scale = 1.0f / std::sqrt(float(d));
  out.resize(qkv.rows, D);
  Matrix probs(B * H * T, T);
#pragma omp parallel for schedule(static) collapse(2) if (B * H >= 4)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const float* k0 = qkv.row(b * T) + D + h * d;
      const float* v0 = qkv.row(b * T) + 2 * D + h * d;
      for (int i = 0; i < T; ++i)
        core::attention_row_forward(qkv.row(b * T + i) + h * d, k0, v0, 3 * D, i, T, d, scale,
                                    probs.row((b * H + h) * T + i), out.row(b * T + i) + h * d);
    }
  }
  if (training) {
    qkv_ = qkv;
    probs_ = std::move(probs);
    seq_len_ = T;
  }
}

void DotProductAttention::backward(const Matrix& dout, Matrix& dqkv) {
  const int H = heads_, d = head_dim_, D = H * d, T = seq_len_;
  FP8EMU_CHECK(T > 0 && dout.rows == qkv_.rows && dout.cols == D, "attention: backward without a matching forward");
  const int B = qkv_.rows / T;
  const float scale = 1.0f / std::sqrt(float(d));
  dqkv.resize(qkv_.rows, 3 * D);
#pragma omp parallel for schedule(static) collapse(2) if (B * H >= 4)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      // Per query row: ds and dq; then per key row j: dK and dV summed over the rows i >= j in
      // increasing order (core/attention.hpp).
      std::vector<float> ds(std::size_t(T) * std::size_t(T), 0.0f);
      const float* q0 = qkv_.row(b * T) + h * d;
      const float* k0 = qkv_.row(b * T) + D + h * d;
      const float* v0 = qkv_.row(b * T) + 2 * D + h * d;
      const float* p0 = probs_.row((b * H + h) * T);
      const float* go0 = dout.row(b * T) + h * d;
      for (int i = 0; i < T; ++i)
        core::attention_row_backward_q(p0 + std::size_t(i) * std::size_t(T), go0 + std::size_t(i) * std::size_t(D),
                                       k0, v0, 3 * D, i, d, scale, ds.data() + std::size_t(i) * std::size_t(T),
                                       dqkv.row(b * T + i) + h * d);
      for (int j = 0; j < T; ++j)
        core::attention_col_backward_kv(ds.data(), p0, T, q0, 3 * D, go0, D, j, T, d, dqkv.row(b * T + j) + D + h * d,
                                        dqkv.row(b * T + j) + 2 * D + h * d);
    }
  }
}

// ---------------------------------------------------------------- TransformerLayer

TransformerLayer::TransformerLayer(int hidden, int heads, int ffn, NormKind norm_kind, MlpActivation act,
                                   const LinearSpec& spec)
    : qkv(norm_kind, hidden, 3 * hidden, spec),
      attention(heads, hidden / heads),
      proj(hidden, hidden, spec.precision, spec.recipe),
      mlp(norm_kind, hidden, ffn, act, spec) {
  FP8EMU_CHECK(heads > 0 && hidden % heads == 0, "TransformerLayer: hidden size ", hidden,
               " is not a multiple of the number of heads ", heads);
}

void TransformerLayer::forward(const Matrix& x, int seq_len, Matrix& y, bool training) {
  const bool bf16 = act_dtype == ActivationDtype::kBf16;
  mlp.act_dtype = act_dtype;
  qkv.forward(x, qkv_out_, training);
  if (bf16) round_to_bf16(qkv_out_);
  attention.forward(qkv_out_, seq_len, attn_out_, training);
  if (bf16) round_to_bf16(attn_out_);
  Matrix a;
  proj.forward(attn_out_, a, training);
  x1_ = x;
  add_into(x1_, a);
  if (bf16) round_to_bf16(x1_);
  Matrix m;
  mlp.forward(x1_, m, training);
  y = x1_;
  add_into(y, m);
  if (bf16) round_to_bf16(y);
}

void TransformerLayer::backward(const Matrix& dy, Matrix& dx) {
  Matrix dx1, dattn, dqkv;
  mlp.backward(dy, dx1);
  add_into(dx1, dy);  // residual
  proj.backward(dx1, &dattn);
  attention.backward(dattn, dqkv);
  qkv.backward(dqkv, dx);
  add_into(dx, dx1);  // residual
}

void TransformerLayer::params(ParamList& out) {
  qkv.params(out);
  out.emplace_back(&proj.weight, &proj.grad_weight);
  out.emplace_back(&proj.bias, &proj.grad_bias);
  mlp.params(out);
}

std::vector<Linear*> TransformerLayer::linears() { return {&qkv.linear, &proj, &mlp.fc1, &mlp.fc2}; }

}  // namespace fp8emu::nn
