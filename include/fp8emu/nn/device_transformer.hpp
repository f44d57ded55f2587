/// \file device_transformer.hpp
/// \brief TE's transformer layer set of transformer.hpp kept in a backend::Device's memory:
/// DeviceNorm, DeviceLayerNormLinear, DeviceLayerNormMLP, DeviceAttention and
/// DeviceTransformerLayer, each made from its host layer and giving its bits (the step program of
/// the host layer on backend::Device operations; tests/nn/test_device_transformer.cpp checks them
/// on backend::cpu_device() against the host layers, forward, backward and parameter gradients).
///
/// Conventions of every class here: pointers are the device's memory, row-major; forward() is the
/// host layer's training forward and keeps what backward() needs (an input passed to forward() must
/// stay unchanged until backward()); outputs must not overlap inputs; params() appends the
/// (parameter, gradient) pairs in the host layer's params() order; download() copies parameters,
/// gradients and the Linear layers' recipe state back. The Linear layers are resident copies (nn::resident_copy)
/// (device_layers.hpp): FP32 or any recipe (delayed scaling with its fused update).
#pragma once

#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/device_layers.hpp"
#include "fp8emu/nn/transformer.hpp"

namespace fp8emu::nn {

/// nn::Norm (LayerNorm, RMSNorm).
class DeviceNorm {
 public:
  DeviceNorm(const backend::Device& device, const Norm& src);
  /// y [rows, features] = norm(x).
  void forward(const float* x, int rows, float* y);
  /// dx [rows, features] and grad_gamma (grad_beta for LayerNorm) from dy.
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  void download(Norm& dst) const;

 private:
  template <class T>
  using Tensor = backend::DeviceTensor<T>;
  const backend::Device* dev_;
  backend::NormOp op_;
  int n_;
  float eps_;
  bool zero_centered_;
  int capacity_ = 0;
  Tensor<float> gamma_, beta_, grad_gamma_, grad_beta_;
  Tensor<float> xhat_, rsigma_;  // [capacity, n], [capacity]
};

/// nn::LayerNormLinear: y = Linear(Norm(x)), the norm output rounded to bf16 before an FP8 cast
/// that reads it so (current scaling).
class DeviceLayerNormLinear {
 public:
  DeviceLayerNormLinear(const backend::Device& device, const LayerNormLinear& src);
  void forward(const float* x, int rows, float* y);
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  void download(LayerNormLinear& dst) const;
  DeviceNorm norm;
  Linear linear;

 private:
  const backend::Device* dev_;
  bool bf16_norm_out_;
  int capacity_ = 0;
  backend::DeviceTensor<float> ln_, dln_;  // [capacity, in]
};

/// nn::LayerNormMLP: y = fc2(act(fc1(Norm(x)))), with its bf16 rounding points.
class DeviceLayerNormMLP {
 public:
  DeviceLayerNormMLP(const backend::Device& device, const LayerNormMLP& src);
  void forward(const float* x, int rows, float* y);
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  void download(LayerNormMLP& dst) const;
  /// Where activations are rounded to bf16 (TransformerLayer sets its own on its MLP, as the host
  /// layer does at each forward).
  void set_act_dtype(ActivationDtype t) { bf16_ = t == ActivationDtype::kBf16; }
  DeviceNorm norm;
  Linear fc1, fc2;

 private:
  const backend::Device* dev_;
  backend::MlpActOp act_;
  bool bf16_, bf16_norm_out_;
  int capacity_ = 0;
  backend::DeviceTensor<float> ln_, h_, a_, da_, dh_, dln_;
};

/// nn::DotProductAttention (causal self-attention on packed QKV).
class DeviceAttention {
 public:
  DeviceAttention(const backend::Device& device, const DotProductAttention& src);
  /// out [B*T, H*d] from qkv [B*T, 3*H*d], rows = B*T.
  void forward(const float* qkv, int rows, int seq_len, float* out);
  /// dqkv [B*T, 3*H*d] from dout [B*T, H*d].
  void backward(const float* dout, int rows, float* dqkv);

 private:
  const backend::Device* dev_;
  int heads_, head_dim_, seq_len_ = 0, capacity_ = 0;
  const float* qkv_ = nullptr;
  backend::DeviceTensor<float> probs_, ds_;  // [B*H*T, T] each
};

/// nn::TransformerLayer (pre-norm, residuals, activations optionally stored as bf16).
class DeviceTransformerLayer {
 public:
  DeviceTransformerLayer(const backend::Device& device, const TransformerLayer& src);
  /// y [rows, hidden] from x [rows, hidden], rows = B * seq_len.
  void forward(const float* x, int rows, int seq_len, float* y);
  /// dx [rows, hidden] from dy.
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  /// qkv, proj, fc1, fc2 (TransformerLayer::linears()).
  std::vector<Linear*> linears();
  void download(TransformerLayer& dst) const;
  DeviceLayerNormLinear qkv;
  DeviceAttention attention;
  Linear proj;
  DeviceLayerNormMLP mlp;

 private:
  const backend::Device* dev_;
  bool bf16_;
  int hidden_, capacity_ = 0;
  backend::DeviceTensor<float> qkv_out_, attn_out_, a_, x1_, m_;  // forward
  backend::DeviceTensor<float> dx1_, dattn_, dqkv_;                // backward
};

}  // namespace fp8emu::nn
