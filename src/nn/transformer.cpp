// Transformer layers (see include/fp8emu/nn/transformer.hpp).
#include "fp8emu/nn/transformer.hpp"

#include <cmath>
#include <cstddef>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

void round_to_bf16(Matrix& m) {
  backend::cpu_device().round_bf16(m.data.data(), m.size());
}

MlpActivation parse_mlp_activation(const std::string& s) {
  if (s == "gelu") return MlpActivation::kGelu;
  if (s == "swiglu") return MlpActivation::kSwiGlu;
  FP8EMU_FAIL("unknown MLP activation '", s, "' (accepted: gelu, swiglu)");
}

namespace {

backend::MlpActOp act_op(MlpActivation a) {
  return a == MlpActivation::kGelu ? backend::MlpActOp::kGelu : backend::MlpActOp::kSwiGlu;
}

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
  backend::cpu_device().mlp_act_forward(act_op(act_), h_.data.data(), h_.rows, ffn, a_.data.data());
  if (act_dtype == ActivationDtype::kBf16) round_to_bf16(a_);
  fc2.forward(a_, y, training);
  if (act_dtype == ActivationDtype::kBf16) round_to_bf16(y);
}

void LayerNormMLP::backward(const Matrix& dy, Matrix& dx) {
  Matrix da, dh, dln;
  fc2.backward(dy, &da);
  const int ffn = fc2.in_features();
  dh.resize(h_.rows, h_.cols);
  backend::cpu_device().mlp_act_backward(act_op(act_), h_.data.data(), da.data.data(), h_.rows, ffn, dh.data.data());
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
  // Per sequence, head and query row (core/attention.hpp), the decomposition the GPU device uses.
  backend::cpu_device().attention_forward(qkv.data.data(), B, T, H, d, scale, out.data.data(), probs.data.data());
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
  // Per query row: ds and dq; then per key row: dK and dV summed over the later query rows in order
  // (core/attention.hpp).
  std::vector<float> ds(std::size_t(B) * std::size_t(H) * std::size_t(T) * std::size_t(T));
  backend::cpu_device().attention_backward(qkv_.data.data(), probs_.data.data(), dout.data.data(), B, T, H, d, scale,
                                           ds.data(), dqkv.data.data());
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
