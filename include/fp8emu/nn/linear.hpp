/// \file linear.hpp
/// \brief Linear layer y = x W^T + b in FP32 or in emulated FP8 with TE's delayed-scaling quantizers.
///
/// FP8 mode mirrors TE `pytorch/module/linear.py` (_Linear forward/backward) with a DelayedScaling
/// recipe; see ../shared/reference/transformer-engine-fp8.md §1.2-1.6:
///   fprop: y  = (x_q  W_q^T) * RN(sinv_x * sinv_w)  + b     x_q, W_q: forward format (E4M3)
///   dgrad: dx = (dy_q W_q)   * RN(sinv_dy * sinv_w)         dy_q: backward format (E5M2 HYBRID)
///   wgrad: dW = (dy_q^T x_q) * RN(sinv_dy * sinv_x)
///   db    = sum over the batch of the fp32 dy (TE's fused cast+dbias uses the high-precision grad)
/// Each cast is Q(RN(v * scale)) with __NV_SATFINITE, its amax max-accumulated into the slot's
/// history row 0; scale_inv = RN(1/scale) at cast time. GEMMs: exact products, fp32 sequential
/// accumulation (emu::gemm_fp8_nn). Master weights, bias and all gradients are fp32.
/// TE slots: forward {input 0, weight 1, output 2}, backward {grad_output 0, grad_input 1}; the
/// output and grad_input slots are never cast in a Linear, so their amax stays 0 and they never roll.
///
/// Determinism: bit-identical results for any OpenMP thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/matrix.hpp"
#include "fp8emu/scaling/delayed_scaling.hpp"

namespace fp8emu::nn {

/// Arithmetic of a layer.
enum class Precision : std::uint8_t {
  kFp32,  ///< Reference: fp32 GEMMs.
  kFp8,   ///< Emulated FP8 GEMMs with delayed scaling.
};

/// Counts of what the FP8 casts of one layer did, per tensor role.
struct LinearFp8Stats {
  emu::QuantizeStats input, weight, grad_output;
};

class Linear {
 public:
  static constexpr int kInput = 0, kWeight = 1, kOutput = 2;  ///< TE forward slots.
  static constexpr int kGradOutput = 0, kGradInput = 1;       ///< TE backward slots.

  /// \throws fp8emu::Error for non-positive sizes or an invalid recipe.
  Linear(int in_features, int out_features, Precision precision,
         const scaling::DelayedScaling& recipe = {});

  /// torch.nn.Linear's default init: W and b uniform in [-1/sqrt(in), 1/sqrt(in)).
  void init(Rng& rng);

  /// y = x W^T + b. \param x Shape: [batch, in]. \param y Shape: [batch, out] (resized).
  /// \param training  true: keep what backward needs. FP8 casts record amax in both cases
  ///                  (as TE under no_grad); scales change only in update_*_scales().
  /// \throws fp8emu::Error on a shape mismatch.
  void forward(const Matrix& x, Matrix& y, bool training);

  /// FP32 twin of forward: the same x, W and b through fp32 GEMMs; touches no FP8 state.
  void forward_fp32(const Matrix& x, Matrix& y) const;

  /// Gradients of the last training forward. \param dy Shape: [batch, out].
  /// \param dx If non-null, receives Shape: [batch, in]. grad_weight / grad_bias are overwritten.
  /// \throws fp8emu::Error on a shape mismatch or when no training forward preceded it.
  void backward(const Matrix& dy, Matrix* dx);

  /// TE forward update point (after the forward): fused delayed-scaling update of slots 0..2.
  void update_forward_scales();
  /// TE backward update point (after the backward): fused update of the backward slots.
  void update_backward_scales();

  int in_features() const { return weight.cols; }
  int out_features() const { return weight.rows; }
  Precision precision() const { return precision_; }
  const scaling::DelayedScalingState& forward_state() const { return fwd_state_; }
  const scaling::DelayedScalingState& backward_state() const { return bwd_state_; }

  Matrix weight;       ///< Shape: [out, in].
  Matrix bias;         ///< Shape: [1, out].
  Matrix grad_weight;  ///< Shape: [out, in].
  Matrix grad_bias;    ///< Shape: [1, out].
  LinearFp8Stats stats;  ///< Accumulated by FP8 casts; reset by the caller.

 private:
  Precision precision_;
  scaling::DelayedScaling recipe_;
  scaling::DelayedScalingState fwd_state_;
  scaling::DelayedScalingState bwd_state_;
  // Saved by a training forward.
  bool have_saved_ = false;
  Matrix saved_x_;                     // fp32 mode
  std::vector<std::uint8_t> x_q_;      // fp8 mode: Shape [batch, in]
  std::vector<std::uint8_t> w_q_;      // Shape [out, in]
  float sinv_x_ = 1.0f, sinv_w_ = 1.0f;
  int saved_batch_ = 0;
};

}  // namespace fp8emu::nn
