// Transformer layers (see include/fp8emu/nn/transformer.hpp).
#include "fp8emu/nn/transformer.hpp"

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

void round_to_bf16(Matrix& m) {
  backend::cpu_device().round_bf16(m.data.data(), m.size());
}

namespace {
constexpr EnumName<MlpActivation> kMlpActivationNames[] = {{MlpActivation::kGelu, "gelu"},
                                                           {MlpActivation::kSwiGlu, "swiglu"}};
}  // namespace

MlpActivation parse_mlp_activation(const std::string& s) {
  return parse_enum(kMlpActivationNames, s, "MLP activation");
}

namespace {

backend::MlpActOp act_op(MlpActivation a) {
  return a == MlpActivation::kGelu ? backend::MlpActOp::kGelu : backend::MlpActOp::kSwiGlu;
}

template <class T>
using Tensor = backend::DeviceTensor<T>;

// (Re)allocates t as [rows, cols] on d when it holds fewer rows or another width.
void reserve_rows(const backend::Device& d, Tensor<float>& t, int rows, int cols) {
  if (t.rows() < rows || t.cols() != cols) t = Tensor<float>(d, rows, cols);
}

// TE: under current scaling the LN kernel writes bf16 and the FP8 cast reads it; under delayed
// scaling the LN kernel casts its fp32 result to FP8 directly.
bool reads_bf16(const Linear& l) {
  return l.precision() == Precision::kFp8 && l.forward_quantizer().reads_bf16_norm_output();
}

// A Linear of a layer moved to `device` (to_host() brings it back to its own).
void linear_to_device(Linear& l, const backend::Device& device) { l.move_to_device(device); }

// A refusal before anything moves: every Linear must be able to keep its state on a device.
void check_movable(std::initializer_list<const Linear*> ls) {
  for (const Linear* l : ls) {
    const std::string why = l->device_unsupported();
    FP8EMU_CHECK(why.empty(), "device-resident Linear: the layer ", why);
  }
}

void check_host(const backend::Device* d, const char* layer) {
  FP8EMU_CHECK(d->host_memory(), layer, ": the Matrix call of a layer on the ", d->name(),
               " device (call to_host() first)");
}

}  // namespace

// ---------------------------------------------------------------- LayerNormLinear

LayerNormLinear::LayerNormLinear(NormKind norm_kind, int in, int out, const LinearSpec& spec, float eps,
                                 bool zero_centered_gamma)
    : norm(norm_kind, in, eps, zero_centered_gamma), linear(in, out, spec.precision, spec.recipe) {}

LayerNormLinear& LayerNormLinear::operator=(const LayerNormLinear& o) {
  if (this != &o) *this = LayerNormLinear(o);
  return *this;
}

void LayerNormLinear::forward(const float* x, int rows, float* y, bool training) {
  const backend::Device& d = *device_;
  const int in = linear.in_features();
  reserve_rows(d, ln_, rows, in);
  reserve_rows(d, dln_, rows, in);
  norm.forward(x, rows, ln_.get(), training);
  if (reads_bf16(linear)) d.round_bf16(ln_.get(), std::size_t(rows) * std::size_t(in));
  linear.forward(ln_.get(), rows, y, training);
  rows_ = rows;
}

void LayerNormLinear::backward(const float* dy, int rows, float* dx) {
  linear.backward(dy, rows, dln_.get());
  norm.backward(dln_.get(), rows, dx);
}

void LayerNormLinear::forward(const Matrix& x, Matrix& y, bool training) {
  check_host(device_, "LayerNormLinear");
  FP8EMU_CHECK(x.cols == norm.features(), "Norm: input has ", x.cols, " features, layer expects ", norm.features());
  y.resize(x.rows, linear.out_features());
  forward(x.data.data(), x.rows, y.data.data(), training);
}

void LayerNormLinear::backward(const Matrix& dy, Matrix& dx) {
  check_host(device_, "LayerNormLinear");
  FP8EMU_CHECK(dy.cols == linear.out_features() && dy.rows == rows_, "Linear: grad_output shape [", dy.rows, ", ",
               dy.cols, "] does not match the forward output [", rows_, ", ", linear.out_features(), "]");
  dx.resize(dy.rows, norm.features());
  backward(dy.data.data(), dy.rows, dx.data.data());
}

void LayerNormLinear::params(ParamList& out) {
  out.emplace_back(&norm.gamma, &norm.grad_gamma);
  if (norm.kind() == NormKind::kLayerNorm) out.emplace_back(&norm.beta, &norm.grad_beta);
  out.emplace_back(&linear.weight, &linear.grad_weight);
  out.emplace_back(&linear.bias, &linear.grad_bias);
}

void LayerNormLinear::to_device(const backend::Device& device) {
  check_movable({&linear});
  norm.to_device(device);
  linear_to_device(linear, device);
  device_ = &device;
  ln_ = Tensor<float>();
  dln_ = Tensor<float>();
}

void LayerNormLinear::to_host() {
  norm.to_host();
  linear.to_host();
  device_ = &backend::cpu_device();
  ln_ = Tensor<float>();
  dln_ = Tensor<float>();
}

void LayerNormLinear::params(std::vector<DeviceParam>& out) {
  norm.params(out);
  linear.params(out);
}

void LayerNormLinear::copy_to(LayerNormLinear& dst) const {
  norm.copy_to(dst.norm);
  linear.copy_to(dst.linear);
}

// ---------------------------------------------------------------- LayerNormMLP

LayerNormMLP::LayerNormMLP(NormKind norm_kind, int hidden, int ffn, MlpActivation act, const LinearSpec& spec,
                           float eps, bool zero_centered_gamma)
    : norm(norm_kind, hidden, eps, zero_centered_gamma),
      fc1(hidden, act == MlpActivation::kSwiGlu ? 2 * ffn : ffn, spec.precision, spec.recipe),
      fc2(ffn, hidden, spec.precision, spec.recipe),
      act_(act) {}

LayerNormMLP& LayerNormMLP::operator=(const LayerNormMLP& o) {
  if (this != &o) *this = LayerNormMLP(o);
  return *this;
}

void LayerNormMLP::forward(const float* x, int rows, float* y, bool training) {
  const backend::Device& d = *device_;
  const int hidden = fc1.in_features(), ffn = fc2.in_features(), width = fc1.out_features();
  reserve_rows(d, ln_, rows, hidden);
  reserve_rows(d, h_, rows, width);
  reserve_rows(d, a_, rows, ffn);
  reserve_rows(d, da_, rows, ffn);
  reserve_rows(d, dh_, rows, width);
  reserve_rows(d, dln_, rows, hidden);
  const bool bf16 = act_dtype == ActivationDtype::kBf16;
  const std::size_t r = std::size_t(rows);
  norm.forward(x, rows, ln_.get(), training);
  if (reads_bf16(fc1)) d.round_bf16(ln_.get(), r * std::size_t(hidden));
  fc1.forward(ln_.get(), rows, h_.get(), training);
  if (bf16) d.round_bf16(h_.get(), r * std::size_t(width));
  d.mlp_act_forward(act_op(act_), h_.get(), rows, ffn, a_.get());
  if (bf16) d.round_bf16(a_.get(), r * std::size_t(ffn));
  fc2.forward(a_.get(), rows, y, training);
  if (bf16) d.round_bf16(y, r * std::size_t(fc2.out_features()));
  rows_ = rows;
}

void LayerNormMLP::backward(const float* dy, int rows, float* dx) {
  fc2.backward(dy, rows, da_.get());
  device_->mlp_act_backward(act_op(act_), h_.get(), da_.get(), rows, fc2.in_features(), dh_.get());
  fc1.backward(dh_.get(), rows, dln_.get());
  norm.backward(dln_.get(), rows, dx);
}

void LayerNormMLP::forward(const Matrix& x, Matrix& y, bool training) {
  check_host(device_, "LayerNormMLP");
  FP8EMU_CHECK(x.cols == norm.features(), "Norm: input has ", x.cols, " features, layer expects ", norm.features());
  y.resize(x.rows, fc2.out_features());
  forward(x.data.data(), x.rows, y.data.data(), training);
}

void LayerNormMLP::backward(const Matrix& dy, Matrix& dx) {
  check_host(device_, "LayerNormMLP");
  FP8EMU_CHECK(dy.cols == fc2.out_features() && dy.rows == rows_, "Linear: grad_output shape [", dy.rows, ", ",
               dy.cols, "] does not match the forward output [", rows_, ", ", fc2.out_features(), "]");
  dx.resize(dy.rows, norm.features());
  backward(dy.data.data(), dy.rows, dx.data.data());
}

void LayerNormMLP::params(ParamList& out) {
  out.emplace_back(&norm.gamma, &norm.grad_gamma);
  if (norm.kind() == NormKind::kLayerNorm) out.emplace_back(&norm.beta, &norm.grad_beta);
  for (Linear* l : {&fc1, &fc2}) {
    out.emplace_back(&l->weight, &l->grad_weight);
    out.emplace_back(&l->bias, &l->grad_bias);
  }
}

void LayerNormMLP::to_device(const backend::Device& device) {
  check_movable({&fc1, &fc2});
  norm.to_device(device);
  linear_to_device(fc1, device);
  linear_to_device(fc2, device);
  device_ = &device;
  for (Tensor<float>* t : {&ln_, &h_, &a_, &da_, &dh_, &dln_}) *t = Tensor<float>();
}

void LayerNormMLP::to_host() {
  norm.to_host();
  fc1.to_host();
  fc2.to_host();
  device_ = &backend::cpu_device();
  for (Tensor<float>* t : {&ln_, &h_, &a_, &da_, &dh_, &dln_}) *t = Tensor<float>();
}

void LayerNormMLP::params(std::vector<DeviceParam>& out) {
  norm.params(out);
  fc1.params(out);
  fc2.params(out);
}

void LayerNormMLP::copy_to(LayerNormMLP& dst) const {
  norm.copy_to(dst.norm);
  fc1.copy_to(dst.fc1);
  fc2.copy_to(dst.fc2);
}

// ---------------------------------------------------------------- DotProductAttention

DotProductAttention& DotProductAttention::operator=(const DotProductAttention& o) {
  if (this != &o) *this = DotProductAttention(o);
  return *this;
}

// Per sequence, head and query row (core/attention.hpp); scale 1/sqrt(d) in fp32.
void DotProductAttention::forward(const float* qkv, int rows, int seq_len, float* out, bool training) {
  const int H = heads_, d = head_dim_, T = seq_len;
  FP8EMU_CHECK(T > 0 && rows % T == 0, "attention: ", rows, " rows are not a whole number of sequences of ", T,
               " tokens");
  const int B = rows / T, prob_rows = B * H * T;
  if (probs_.rows() < prob_rows || probs_.cols() != T) {
    probs_ = Tensor<float>(*device_, prob_rows, T);
    ds_ = Tensor<float>(*device_, prob_rows, T);
  }
  const float scale = 1.0f / std::sqrt(float(d));
  device_->attention_forward(qkv, B, T, H, d, scale, causal_, out, probs_.get());
  rows_ = training ? rows : -1;
  qkv_ = qkv;
  seq_len_ = T;
}

// Per query row: ds and dq; then per key row: dK and dV summed over the later query rows in order.
void DotProductAttention::backward(const float* dout, int rows, float* dqkv) {
  FP8EMU_CHECK(rows_ >= 0 && rows == rows_, "attention: backward without a matching forward");
  const float scale = 1.0f / std::sqrt(float(head_dim_));
  device_->attention_backward(qkv_, probs_.get(), dout, rows / seq_len_, seq_len_, heads_, head_dim_, scale, causal_,
                              ds_.get(), dqkv);
  rows_ = -1;
}

void DotProductAttention::forward(const Matrix& qkv, int seq_len, Matrix& out, bool training) {
  check_host(device_, "attention");
  const int D = heads_ * head_dim_;
  FP8EMU_CHECK(seq_len > 0 && qkv.rows % seq_len == 0, "attention: ", qkv.rows,
               " rows are not a whole number of sequences of ", seq_len, " tokens");
  FP8EMU_CHECK(qkv.cols == 3 * D, "attention: packed QKV has ", qkv.cols, " columns, expected 3 * ", heads_,
               " heads * ", head_dim_, " = ", 3 * D);
  out.resize(qkv.rows, D);
  const float* in = qkv.data.data();
  if (training) {  // the backward reads the input: keep a copy
    reserve_rows(*device_, qkv_copy_, qkv.rows, qkv.cols);
    device_->copy(qkv_copy_.get(), in, qkv.size() * sizeof(float));
    in = qkv_copy_.get();
  }
  forward(in, qkv.rows, seq_len, out.data.data(), training);
}

void DotProductAttention::backward(const Matrix& dout, Matrix& dqkv) {
  check_host(device_, "attention");
  const int D = heads_ * head_dim_;
  FP8EMU_CHECK(rows_ >= 0 && dout.rows == rows_ && dout.cols == D, "attention: backward without a matching forward");
  dqkv.resize(dout.rows, 3 * D);
  backward(dout.data.data(), dout.rows, dqkv.data.data());
}

void DotProductAttention::to_device(const backend::Device& device) {
  device_ = &device;
  rows_ = -1;
  for (Tensor<float>* t : {&qkv_copy_, &probs_, &ds_}) *t = Tensor<float>();
}

void DotProductAttention::to_host() { to_device(backend::cpu_device()); }

// ---------------------------------------------------------------- TransformerLayer

TransformerLayer::TransformerLayer(int hidden, int heads, int ffn, NormKind norm_kind, MlpActivation act,
                                   const LinearSpec& spec, bool causal)
    : qkv(norm_kind, hidden, 3 * hidden, spec),
      attention(heads, hidden / heads, causal),
      proj(hidden, hidden, spec.precision, spec.recipe),
      mlp(norm_kind, hidden, ffn, act, spec) {
  FP8EMU_CHECK(heads > 0 && hidden % heads == 0, "TransformerLayer: hidden size ", hidden,
               " is not a multiple of the number of heads ", heads);
}

TransformerLayer& TransformerLayer::operator=(const TransformerLayer& o) {
  if (this != &o) *this = TransformerLayer(o);
  return *this;
}

void TransformerLayer::forward(const float* x, int rows, int seq_len, float* y, bool training) {
  const backend::Device& d = *device_;
  const int H = hidden(), H3 = qkv.linear.out_features();
  reserve_rows(d, qkv_out_, rows, H3);
  reserve_rows(d, attn_out_, rows, H);
  reserve_rows(d, a_, rows, H);
  reserve_rows(d, x1_, rows, H);
  reserve_rows(d, m_, rows, H);
  reserve_rows(d, dx1_, rows, H);
  reserve_rows(d, dattn_, rows, H);
  reserve_rows(d, dqkv_, rows, H3);
  const bool bf16 = act_dtype == ActivationDtype::kBf16;
  const std::size_t n = std::size_t(rows) * std::size_t(H);
  mlp.act_dtype = act_dtype;
  qkv.forward(x, rows, qkv_out_.get(), training);
  if (bf16) d.round_bf16(qkv_out_.get(), std::size_t(rows) * std::size_t(H3));
  attention.forward(qkv_out_.get(), rows, seq_len, attn_out_.get(), training);
  if (bf16) d.round_bf16(attn_out_.get(), n);
  proj.forward(attn_out_.get(), rows, a_.get(), training);
  d.add(x, a_.get(), x1_.get(), n);  // residual
  if (bf16) d.round_bf16(x1_.get(), n);
  mlp.forward(x1_.get(), rows, m_.get(), training);
  d.add(x1_.get(), m_.get(), y, n);  // residual
  if (bf16) d.round_bf16(y, n);
  rows_ = rows;
}

void TransformerLayer::backward(const float* dy, int rows, float* dx) {
  const backend::Device& d = *device_;
  const std::size_t n = std::size_t(rows) * std::size_t(hidden());
  mlp.backward(dy, rows, dx1_.get());
  d.add(dx1_.get(), dy, dx1_.get(), n);  // residual
  proj.backward(dx1_.get(), rows, dattn_.get());
  attention.backward(dattn_.get(), rows, dqkv_.get());
  qkv.backward(dqkv_.get(), rows, dx);
  d.add(dx, dx1_.get(), dx, n);  // residual
}

void TransformerLayer::forward(const Matrix& x, int seq_len, Matrix& y, bool training) {
  check_host(device_, "TransformerLayer");
  FP8EMU_CHECK(x.cols == hidden(), "Norm: input has ", x.cols, " features, layer expects ", hidden());
  y.resize(x.rows, hidden());
  forward(x.data.data(), x.rows, seq_len, y.data.data(), training);
}

void TransformerLayer::backward(const Matrix& dy, Matrix& dx) {
  check_host(device_, "TransformerLayer");
  FP8EMU_CHECK(dy.cols == hidden() && dy.rows == rows_, "Linear: grad_output shape [", dy.rows, ", ", dy.cols,
               "] does not match the forward output [", rows_, ", ", hidden(), "]");
  dx.resize(dy.rows, hidden());
  backward(dy.data.data(), dy.rows, dx.data.data());
}

void TransformerLayer::params(ParamList& out) {
  qkv.params(out);
  out.emplace_back(&proj.weight, &proj.grad_weight);
  out.emplace_back(&proj.bias, &proj.grad_bias);
  mlp.params(out);
}

std::vector<Linear*> TransformerLayer::linears() { return {&qkv.linear, &proj, &mlp.fc1, &mlp.fc2}; }

void TransformerLayer::to_device(const backend::Device& device) {
  check_movable({&qkv.linear, &proj, &mlp.fc1, &mlp.fc2});
  qkv.to_device(device);
  attention.to_device(device);
  linear_to_device(proj, device);
  mlp.to_device(device);
  device_ = &device;
  for (Tensor<float>* t : {&qkv_out_, &attn_out_, &a_, &x1_, &m_, &dx1_, &dattn_, &dqkv_}) *t = Tensor<float>();
}

void TransformerLayer::to_host() {
  qkv.to_host();
  attention.to_host();
  proj.to_host();
  mlp.to_host();
  device_ = &backend::cpu_device();
  for (Tensor<float>* t : {&qkv_out_, &attn_out_, &a_, &x1_, &m_, &dx1_, &dattn_, &dqkv_}) *t = Tensor<float>();
}

void TransformerLayer::params(std::vector<DeviceParam>& out) {
  qkv.params(out);
  proj.params(out);
  mlp.params(out);
}

void TransformerLayer::copy_to(TransformerLayer& dst) const {
  qkv.copy_to(dst.qkv);
  proj.copy_to(dst.proj);
  mlp.copy_to(dst.mlp);
}

}  // namespace fp8emu::nn
