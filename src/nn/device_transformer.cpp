// Transformer layers on a backend::Device (see include/fp8emu/nn/device_transformer.hpp). Each
// method repeats the host method of src/nn/transformer.cpp or src/nn/norm.cpp, in its order, on
// backend::Device operations.
#include "fp8emu/nn/device_transformer.hpp"

#include <cmath>

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

namespace {
template <class T>
using Tensor = backend::DeviceTensor<T>;

// (Re)allocates t as [rows, cols] when it holds fewer rows.
void reserve_rows(const backend::Device& d, Tensor<float>& t, int rows, int cols) {
  if (t.rows() < rows || t.cols() != cols) t = Tensor<float>(d, rows, cols);
}

bool reads_bf16(const Linear& l) {
  return l.precision() == Precision::kFp8 && l.forward_quantizer().reads_bf16_norm_output();
}
}  // namespace

// ---------------------------------------------------------------- DeviceNorm

DeviceNorm::DeviceNorm(const backend::Device& device, const Norm& src)
    : dev_(&device),
      op_(src.kind() == NormKind::kLayerNorm ? backend::NormOp::kLayerNorm : backend::NormOp::kRMSNorm),
      n_(src.features()),
      eps_(src.eps()),
      zero_centered_(src.zero_centered_gamma()),
      gamma_(device, 1, src.features()),
      beta_(device, 1, src.features()),
      grad_gamma_(device, 1, src.features()),
      grad_beta_(device, 1, src.features()) {
  gamma_.upload(src.gamma.data.data());
  beta_.upload(src.beta.data.data());
  grad_gamma_.upload(src.grad_gamma.data.data());
  grad_beta_.upload(src.grad_beta.data.data());
}

void DeviceNorm::forward(const float* x, int rows, float* y) {
  if (rows > capacity_) {
    xhat_ = Tensor<float>(*dev_, rows, n_);
    rsigma_ = Tensor<float>(*dev_, 1, rows);
    capacity_ = rows;
  }
  dev_->norm_forward(op_, x, rows, n_, gamma_.get(), beta_.get(), eps_, zero_centered_, y, xhat_.get(),
                     rsigma_.get());
}

void DeviceNorm::backward(const float* dy, int rows, float* dx) {
  FP8EMU_CHECK(rows <= capacity_, "Norm: backward of ", rows, " rows without a forward of as many");
  dev_->norm_backward(op_, dy, xhat_.get(), rsigma_.get(), rows, n_, gamma_.get(), zero_centered_, dx,
                      grad_gamma_.get(), grad_beta_.get());
}

void DeviceNorm::params(std::vector<DeviceParam>& out) {
  out.push_back({gamma_.get(), grad_gamma_.get(), gamma_.size()});
  if (op_ == backend::NormOp::kLayerNorm) out.push_back({beta_.get(), grad_beta_.get(), beta_.size()});
}

void DeviceNorm::download(Norm& dst) const {
  FP8EMU_CHECK(dst.features() == n_, "device-resident Norm: download into a norm of another width");
  gamma_.download(dst.gamma.data.data());
  beta_.download(dst.beta.data.data());
  grad_gamma_.download(dst.grad_gamma.data.data());
  grad_beta_.download(dst.grad_beta.data.data());
}

// ---------------------------------------------------------------- DeviceLayerNormLinear

DeviceLayerNormLinear::DeviceLayerNormLinear(const backend::Device& device, const LayerNormLinear& src)
    : norm(device, src.norm), linear(resident_copy(device, src.linear)), dev_(&device), bf16_norm_out_(reads_bf16(src.linear)) {}

// LayerNormLinear::forward / backward.
void DeviceLayerNormLinear::forward(const float* x, int rows, float* y) {
  reserve_rows(*dev_, ln_, rows, linear.in_features());
  reserve_rows(*dev_, dln_, rows, linear.in_features());
  norm.forward(x, rows, ln_.get());
  if (bf16_norm_out_) dev_->round_bf16(ln_.get(), std::size_t(rows) * std::size_t(linear.in_features()));
  linear.forward(ln_.get(), rows, y);
}

void DeviceLayerNormLinear::backward(const float* dy, int rows, float* dx) {
  linear.backward(dy, rows, dln_.get());
  norm.backward(dln_.get(), rows, dx);
}

void DeviceLayerNormLinear::params(std::vector<DeviceParam>& out) {
  norm.params(out);
  linear.params(out);
}

void DeviceLayerNormLinear::download(LayerNormLinear& dst) const {
  norm.download(dst.norm);
  linear.copy_to(dst.linear);
}

// ---------------------------------------------------------------- DeviceLayerNormMLP

DeviceLayerNormMLP::DeviceLayerNormMLP(const backend::Device& device, const LayerNormMLP& src)
    : norm(device, src.norm),
      fc1(resident_copy(device, src.fc1)),
      fc2(resident_copy(device, src.fc2)),
      dev_(&device),
      act_(src.act_ == MlpActivation::kGelu ? backend::MlpActOp::kGelu : backend::MlpActOp::kSwiGlu),
      bf16_(src.act_dtype == ActivationDtype::kBf16),
      bf16_norm_out_(reads_bf16(src.fc1)) {}

// LayerNormMLP::forward / backward.
void DeviceLayerNormMLP::forward(const float* x, int rows, float* y) {
  const backend::Device& d = *dev_;
  const int hidden = fc1.in_features(), ffn = fc2.in_features(), width = fc1.out_features();
  reserve_rows(d, ln_, rows, hidden);
  reserve_rows(d, h_, rows, width);
  reserve_rows(d, a_, rows, ffn);
  reserve_rows(d, da_, rows, ffn);
  reserve_rows(d, dh_, rows, width);
  reserve_rows(d, dln_, rows, hidden);
  const std::size_t r = std::size_t(rows);
  norm.forward(x, rows, ln_.get());
  if (bf16_norm_out_) d.round_bf16(ln_.get(), r * std::size_t(hidden));
  fc1.forward(ln_.get(), rows, h_.get());
  if (bf16_) d.round_bf16(h_.get(), r * std::size_t(width));
  d.mlp_act_forward(act_, h_.get(), rows, ffn, a_.get());
  if (bf16_) d.round_bf16(a_.get(), r * std::size_t(ffn));
  fc2.forward(a_.get(), rows, y);
  if (bf16_) d.round_bf16(y, r * std::size_t(fc2.out_features()));
}

void DeviceLayerNormMLP::backward(const float* dy, int rows, float* dx) {
  fc2.backward(dy, rows, da_.get());
  dev_->mlp_act_backward(act_, h_.get(), da_.get(), rows, fc2.in_features(), dh_.get());
  fc1.backward(dh_.get(), rows, dln_.get());
  norm.backward(dln_.get(), rows, dx);
}

void DeviceLayerNormMLP::params(std::vector<DeviceParam>& out) {
  norm.params(out);
  fc1.params(out);
  fc2.params(out);
}

void DeviceLayerNormMLP::download(LayerNormMLP& dst) const {
  norm.download(dst.norm);
  fc1.copy_to(dst.fc1);
  fc2.copy_to(dst.fc2);
}

// ---------------------------------------------------------------- DeviceAttention

DeviceAttention::DeviceAttention(const backend::Device& device, const DotProductAttention& src)
    : dev_(&device), heads_(src.heads_), head_dim_(src.head_dim_) {}

// DotProductAttention::forward / backward (scale 1/sqrt(d) in fp32, as the host layer).
void DeviceAttention::forward(const float* qkv, int rows, int seq_len, float* out) {
  const int T = seq_len;
  FP8EMU_CHECK(T > 0 && rows % T == 0, "attention: ", rows, " rows are not a whole number of sequences of ", T,
               " tokens");
  const int B = rows / T;
  const int prob_rows = B * heads_ * T;
  if (probs_.rows() < prob_rows || probs_.cols() != T) {
    probs_ = Tensor<float>(*dev_, prob_rows, T);
    ds_ = Tensor<float>(*dev_, prob_rows, T);
  }
  const float scale = 1.0f / std::sqrt(float(head_dim_));
  dev_->attention_forward(qkv, B, T, heads_, head_dim_, scale, out, probs_.get());
  qkv_ = qkv;
  seq_len_ = T;
  capacity_ = rows;
}

void DeviceAttention::backward(const float* dout, int rows, float* dqkv) {
  FP8EMU_CHECK(qkv_ && rows == capacity_, "attention: backward without a matching forward");
  const float scale = 1.0f / std::sqrt(float(head_dim_));
  dev_->attention_backward(qkv_, probs_.get(), dout, rows / seq_len_, seq_len_, heads_, head_dim_, scale, ds_.get(),
                           dqkv);
}

// ---------------------------------------------------------------- DeviceTransformerLayer

DeviceTransformerLayer::DeviceTransformerLayer(const backend::Device& device, const TransformerLayer& src)
    : qkv(device, src.qkv),
      attention(device, src.attention),
      proj(resident_copy(device, src.proj)),
      mlp(device, src.mlp),
      dev_(&device),
      bf16_(src.act_dtype == ActivationDtype::kBf16),
      hidden_(src.proj.out_features()) {
  mlp.set_act_dtype(src.act_dtype);  // TransformerLayer::forward sets it on its MLP
}

// TransformerLayer::forward / backward.
void DeviceTransformerLayer::forward(const float* x, int rows, int seq_len, float* y) {
  const backend::Device& d = *dev_;
  const int H3 = qkv.linear.out_features();
  reserve_rows(d, qkv_out_, rows, H3);
  reserve_rows(d, attn_out_, rows, hidden_);
  reserve_rows(d, a_, rows, hidden_);
  reserve_rows(d, x1_, rows, hidden_);
  reserve_rows(d, m_, rows, hidden_);
  reserve_rows(d, dx1_, rows, hidden_);
  reserve_rows(d, dattn_, rows, hidden_);
  reserve_rows(d, dqkv_, rows, H3);
  const std::size_t n = std::size_t(rows) * std::size_t(hidden_);
  qkv.forward(x, rows, qkv_out_.get());
  if (bf16_) d.round_bf16(qkv_out_.get(), std::size_t(rows) * std::size_t(H3));
  attention.forward(qkv_out_.get(), rows, seq_len, attn_out_.get());
  if (bf16_) d.round_bf16(attn_out_.get(), n);
  proj.forward(attn_out_.get(), rows, a_.get());
  d.add(x, a_.get(), x1_.get(), n);
  if (bf16_) d.round_bf16(x1_.get(), n);
  mlp.forward(x1_.get(), rows, m_.get());
  d.add(x1_.get(), m_.get(), y, n);
  if (bf16_) d.round_bf16(y, n);
}

void DeviceTransformerLayer::backward(const float* dy, int rows, float* dx) {
  const backend::Device& d = *dev_;
  const std::size_t n = std::size_t(rows) * std::size_t(hidden_);
  mlp.backward(dy, rows, dx1_.get());
  d.add(dx1_.get(), dy, dx1_.get(), n);  // residual
  proj.backward(dx1_.get(), rows, dattn_.get());
  attention.backward(dattn_.get(), rows, dqkv_.get());
  qkv.backward(dqkv_.get(), rows, dx);
  d.add(dx, dx1_.get(), dx, n);  // residual
}

void DeviceTransformerLayer::params(std::vector<DeviceParam>& out) {
  qkv.params(out);
  proj.params(out);
  mlp.params(out);
}

std::vector<Linear*> DeviceTransformerLayer::linears() { return {&qkv.linear, &proj, &mlp.fc1, &mlp.fc2}; }

void DeviceTransformerLayer::download(TransformerLayer& dst) const {
  qkv.download(dst.qkv);
  proj.copy_to(dst.proj);
  mlp.download(dst.mlp);
}

}  // namespace fp8emu::nn
