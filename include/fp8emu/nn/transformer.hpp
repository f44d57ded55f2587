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
/// Determinism: bit-identical for any OpenMP thread count.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  /// \param x Shape [rows, in]. \param y Shape [rows, out].
  void forward(const Matrix& x, Matrix& y, bool training);
  /// \param dy Shape [rows, out]. \param dx Shape [rows, in].
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);
  Norm norm;
  Linear linear;
};

/// Norm, fc1, activation, fc2: y = fc2(act(fc1(Norm(x)))).
class LayerNormMLP {
 public:
  LayerNormMLP(NormKind norm_kind, int hidden, int ffn, MlpActivation act, const LinearSpec& spec,
               float eps = 1e-5f, bool zero_centered_gamma = false);
  void forward(const Matrix& x, Matrix& y, bool training);
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);
  Norm norm;
  Linear fc1, fc2;
  ActivationDtype act_dtype = ActivationDtype::kFp32;

 private:
  friend class DeviceLayerNormMLP;
  MlpActivation act_;
  Matrix ln_out_, h_, a_;  // saved: norm output, fc1 output, activation output
};

/// Causal multi-head self-attention on packed QKV: out = softmax(Q K^T / sqrt(d) + causal mask) V
/// per sequence and head, in fp32 (no dropout).
class DotProductAttention {
 public:
  DotProductAttention(int heads, int head_dim) : heads_(heads), head_dim_(head_dim) {}
  /// \param qkv Shape [B*T, 3*H*d], columns [Q | K | V], head h at columns h*d..(h+1)*d of each.
  /// \param out Shape [B*T, H*d].
  void forward(const Matrix& qkv, int seq_len, Matrix& out, bool training);
  void backward(const Matrix& dout, Matrix& dqkv);

 private:
  friend class DeviceAttention;
  int heads_, head_dim_, seq_len_ = 0;
  Matrix qkv_, probs_;  // saved: inputs, and probabilities [B*H*T, T]
};

/// Pre-norm transformer block: x1 = x + proj(attn(LNLinear_qkv(x))); y = x1 + LayerNormMLP(x1).
class TransformerLayer {
 public:
  TransformerLayer(int hidden, int heads, int ffn, NormKind norm_kind, MlpActivation act, const LinearSpec& spec);
  void forward(const Matrix& x, int seq_len, Matrix& y, bool training);
  void backward(const Matrix& dy, Matrix& dx);
  void params(ParamList& out);
  /// The four FP8-capable Linears: qkv, proj, fc1, fc2.
  std::vector<Linear*> linears();
  LayerNormLinear qkv;
  DotProductAttention attention;
  Linear proj;
  LayerNormMLP mlp;
  ActivationDtype act_dtype = ActivationDtype::kFp32;

 private:
  Matrix qkv_out_, attn_out_, x1_;
};

}  // namespace fp8emu::nn
