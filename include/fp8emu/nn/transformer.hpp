/// \file transformer.hpp
/// \brief TE's transformer layer set, forward and backward, with FP8 Linear layers: LayerNormLinear,
/// LayerNormMLP, DotProductAttention (causal self-attention) and TransformerLayer (pre-norm,
/// residuals), and a small decoder-only language model built from them.
///
/// Mirrors TE `pytorch/module/{layernorm_linear,layernorm_mlp}.py`, `pytorch/attention` and
/// `pytorch/transformer.py` (docs/transformer-engine.md §Linear, §LayerNormLinear and LayerNormMLP):
///   - every projection is an nn::Linear (FP8 under the layer's recipe, or FP32); softmax, the
///     attention matmuls, norms, activations and residual adds run in fp32;
///   - LayerNormLinear casts the norm output to FP8 straight from fp32 under delayed scaling, and
///     rounds it to bf16 first under current scaling (TE's LN kernel writes bf16 there);
///   - activations may be kept in bf16 (`ActivationDtype::kBf16`, TE's usual setting): every layer
///     output and residual sum is rounded to bf16 (RNE) as it is stored.
/// Layouts: a batch of B sequences of T tokens is a row-major [B*T, features] matrix, sequence-major.
/// One step program per layer, on backend::Device operations: the host calls (Matrix arguments) run
/// it on cpu_device() with the layer's Linears wherever they run; after to_device(d) the layer, its
/// Norms and Linears keep everything in d's memory and take the pointer calls, as device-resident
/// models do (nn::resident_copy). The same bits either way.
/// Determinism: bit-identical for any OpenMP thread count and on every device.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/device_param.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/matrix.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "fp8emu/nn/norm.hpp"

namespace fp8emu::nn {

/// Storage type of activations between layers.
enum class ActivationDtype : std::uint8_t { kFp32, kBf16 };
/// Rounds every element to bfloat16 (RNE, as CUDA `__float2bfloat16_rn`), kept in fp32 storage.
void round_to_bf16(Matrix& m);

/// The MLP's nonlinearity.
enum class MlpActivation : std::uint8_t {
  kGelu,    ///< GELU, tanh form (TE's "gelu").
  kSwiGlu,  ///< SwiGLU (TE's "swiglu"): fc1 has 2*ffn outputs [a | b], act = silu(a) * b.
};
/// "gelu" | "swiglu". \throws fp8emu::Error.
MlpActivation parse_mlp_activation(const std::string& s);

/// What every Linear of a block is built with (each can be changed afterwards, per layer).
struct LinearSpec {
  Precision precision = Precision::kFp32;
  scaling::Recipe recipe = scaling::DelayedScaling{};
};

/// (parameter, gradient) pairs of a module, in a fixed order (for the optimizer and checkpoints).
using ParamList = std::vector<std::pair<Matrix*, Matrix*>>;

/// Norm followed by a Linear: y = Linear(Norm(x)).
class LayerNormLinear {
 public:
  LayerNormLinear(NormKind norm_kind, int in, int out, const LinearSpec& spec, float eps = 1e-5f,
                  bool zero_centered_gamma = false);
  /// A copy on the host (its norm and linear copied), with no saved forward.
  LayerNormLinear(const LayerNormLinear& o) : norm(o.norm), linear(o.linear) {}
  LayerNormLinear& operator=(const LayerNormLinear& o);
  LayerNormLinear(LayerNormLinear&&) noexcept = default;
  LayerNormLinear& operator=(LayerNormLinear&&) noexcept = default;
  /// \param x Shape [rows, in]. \param y Shape [rows, out].
  void forward(const Matrix& x, Matrix& y, bool training);
  /// \param dy Shape [rows, out]. \param dx Shape [rows, in].
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);

  /// Residency (see the file comment): the norm and the linear move to `device` with the layer.
  void to_device(const backend::Device& device);
  void to_host();
  /// The step on pointers where the layer lives: x [rows, in] to y [rows, out].
  void forward(const float* x, int rows, float* y, bool training = true);
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  /// Copies the parameters, gradients and recipe state into `dst` (waits).
  void copy_to(LayerNormLinear& dst) const;

  Norm norm;
  Linear linear;

 private:
  const backend::Device* device_ = &backend::cpu_device();
  int rows_ = 0;
  backend::DeviceTensor<float> ln_, dln_;  // norm output and its gradient [rows, in]
};

/// Norm, fc1, activation (GELU or SwiGLU), fc2: TE's LayerNormMLP.
class LayerNormMLP {
 public:
  LayerNormMLP(NormKind norm_kind, int hidden, int ffn, MlpActivation act, const LinearSpec& spec,
               float eps = 1e-5f, bool zero_centered_gamma = false);
  LayerNormMLP(const LayerNormMLP& o)
      : norm(o.norm), fc1(o.fc1), fc2(o.fc2), act_dtype(o.act_dtype), act_(o.act_) {}
  LayerNormMLP& operator=(const LayerNormMLP& o);
  LayerNormMLP(LayerNormMLP&&) noexcept = default;
  LayerNormMLP& operator=(LayerNormMLP&&) noexcept = default;
  void forward(const Matrix& x, Matrix& y, bool training);
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);

  void to_device(const backend::Device& device);
  void to_host();
  void forward(const float* x, int rows, float* y, bool training = true);
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  void copy_to(LayerNormMLP& dst) const;

  Norm norm;
  Linear fc1, fc2;
  ActivationDtype act_dtype = ActivationDtype::kFp32;

 private:
  MlpActivation act_;
  const backend::Device* device_ = &backend::cpu_device();
  int rows_ = 0;
  backend::DeviceTensor<float> ln_, h_, a_, da_, dh_, dln_;  // saved: norm output, fc1 output, activation
};

/// Causal scaled dot-product self-attention over packed QKV, per sequence and head.
class DotProductAttention {
 public:
  /// causal: each query attends to the keys up to its own position (TE's attn_mask_type "causal", its
  /// default); false: to every key of its sequence ("no_mask", as an encoder or a ViT).
  DotProductAttention(int heads, int head_dim, bool causal = true)
      : heads_(heads), head_dim_(head_dim), causal_(causal) {}
  DotProductAttention(const DotProductAttention& o) : heads_(o.heads_), head_dim_(o.head_dim_), causal_(o.causal_) {}
  bool causal() const { return causal_; }
  DotProductAttention& operator=(const DotProductAttention& o);
  DotProductAttention(DotProductAttention&&) noexcept = default;
  DotProductAttention& operator=(DotProductAttention&&) noexcept = default;
  /// \param qkv Shape [B*T, 3*H*d], columns [Q | K | V], head h at columns h*d..(h+1)*d of each.
  /// \param out Shape [B*T, H*d]. A training call keeps a copy of qkv for the backward.
  void forward(const Matrix& qkv, int seq_len, Matrix& out, bool training);
  void backward(const Matrix& dout, Matrix& dqkv);

  void to_device(const backend::Device& device);
  void to_host();
  /// The step on pointers where the layer lives; a training call keeps the qkv pointer (qkv must
  /// stay unchanged until backward).
  void forward(const float* qkv, int rows, int seq_len, float* out, bool training = true);
  void backward(const float* dout, int rows, float* dqkv);

 private:
  int heads_, head_dim_, seq_len_ = 0, rows_ = -1;  // rows_: of the last training forward, -1: none
  bool causal_ = true;
  const backend::Device* device_ = &backend::cpu_device();
  const float* qkv_ = nullptr;                      // the saved input
  backend::DeviceTensor<float> qkv_copy_, probs_, ds_;  // host calls' copy of qkv; probabilities [B*H*T, T]
};

/// Pre-norm transformer block: x1 = x + proj(attention(qkv(x))); y = x1 + mlp(x1).
class TransformerLayer {
 public:
  /// causal: the attention's mask (DotProductAttention; TE's self_attn_mask_type "causal" by
  /// default, "no_mask" when false).
  TransformerLayer(int hidden, int heads, int ffn, NormKind norm_kind, MlpActivation act, const LinearSpec& spec,
                   bool causal = true);
  TransformerLayer(const TransformerLayer& o)
      : qkv(o.qkv), attention(o.attention), proj(o.proj), mlp(o.mlp), act_dtype(o.act_dtype) {}
  TransformerLayer& operator=(const TransformerLayer& o);
  TransformerLayer(TransformerLayer&&) noexcept = default;
  TransformerLayer& operator=(TransformerLayer&&) noexcept = default;
  /// \param x Shape [B*seq_len, hidden]. \param y Shape [B*seq_len, hidden].
  void forward(const Matrix& x, int seq_len, Matrix& y, bool training);
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);
  /// The four FP8-capable Linears: qkv, proj, fc1, fc2.
  std::vector<Linear*> linears();

  void to_device(const backend::Device& device);
  void to_host();
  void forward(const float* x, int rows, int seq_len, float* y, bool training = true);
  void backward(const float* dy, int rows, float* dx);
  void params(std::vector<DeviceParam>& out);
  void copy_to(TransformerLayer& dst) const;

  LayerNormLinear qkv;
  DotProductAttention attention;
  Linear proj;
  LayerNormMLP mlp;
  ActivationDtype act_dtype = ActivationDtype::kFp32;

 private:
  int hidden() const { return proj.out_features(); }
  const backend::Device* device_ = &backend::cpu_device();
  int rows_ = 0;
  backend::DeviceTensor<float> qkv_out_, attn_out_, a_, x1_, m_;  // forward
  backend::DeviceTensor<float> dx1_, dattn_, dqkv_;                // backward
};

}  // namespace fp8emu::nn
