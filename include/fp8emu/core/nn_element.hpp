/// \file nn_element.hpp
/// \brief The per-element (per-row, per-column, per-slot) arithmetic of the nn layers, the loss,
/// the optimizers and delayed scaling: activations, SwiGLU, the softmax cross-entropy of one row,
/// Adam and SGD steps of one weight, a column sum, the fused amax-history update of one slot, and
/// LayerNorm/RMSNorm of one row. Host and device (FP8EMU_HD), no libm: the CPU layers in `src/nn/`
/// and `src/scaling/` call these functions, and a GPU kernel of the same layer calls the same
/// function, so the arithmetic exists once (docs/architecture.md, "One element layer").
///
/// **Rounding.** Every fp32 `+`, `-`, `*`, `/` below is one IEEE operation rounded to nearest even,
/// evaluated in the order written in each function's documentation (C++'s left-to-right order for
/// chains such as `a * b * c` = `(a * b) * c`). That holds on the host because fp8emu builds with
/// `-ffp-contract=off` (a usage requirement of fp8emu::core) and SSE arithmetic, and on the device
/// because the CUDA code is built with `--fmad=false -ftz=false -prec-div=true -prec-sqrt=true`.
/// exp, log and tanh are the correctly rounded `core::exp_rn`, `log_rn`, `tanh_rn`
/// (fp32_math.hpp), square roots `core::sqrt_rn`, maxima `core::fmax_f32` (glibc's fmaxf
/// semantics: a NaN is ignored unless both are NaN), all with one right answer on either side. The
/// binary64 statistics of the norms are IEEE binary64 operations in the order written, rounded to
/// fp32 once (`f64_to_f32_rn`). As for every fp32 function of the core, only the payload of a NaN
/// result may differ between host and device (fp32_ops.hpp).
#pragma once

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/fp32_ops.hpp"

namespace fp8emu::core {

/// sqrt(2/pi) rounded to fp32 (0x3F4C422A), GELU's tanh-form constant (TE's gelu).
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
/// 0.044715 rounded to fp32, GELU's cubic coefficient (TE's gelu).
constexpr float kGeluCoeff = 0.044715f;

// ------------------------------------------------------------------------- activations

/// ReLU: `x > 0 ? x : 0` (NaN and -0 give +0). Called by Device::activation_forward (the MLP
/// of `fp8emu train`) on every device.
FP8EMU_HD float relu_forward(float x) { return x > 0.0f ? x : 0.0f; }

/// ReLU's derivative: `x > 0 ? 1 : 0` (0 at x = 0 and for NaN). Called by Device::activation_backward.
FP8EMU_HD float relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

/// GELU, tanh form (TE's gelu): with c = kGeluSqrt2OverPi, k = kGeluCoeff,
///   u = c * (x + ((k * x) * x) * x);  t = tanh_rn(u);  return (0.5 * x) * (1 + t),
/// every operation one fp32 rounding in that order. Called by Device::activation_forward (MLP)
/// and Device::mlp_act_forward (LayerNormMLP's GELU) on every device.
FP8EMU_HD float gelu_tanh_forward(float x) {
  const float t = tanh_rn(kGeluSqrt2OverPi * (x + kGeluCoeff * x * x * x));
  return 0.5f * x * (1.0f + t);
}

/// GELU's derivative (tanh form): u and t as in gelu_tanh_forward,
///   du = c * (1 + (((3 * k) * x) * x));
///   return 0.5 * (1 + t) + (((0.5 * x) * (1 - t * t)) * du),
/// every operation one fp32 rounding in that order (3 * k is an fp32 product of the two fp32
/// constants). Called by nn::activation_grad (MLP) and nn::LayerNormMLP's backward (transformer).
FP8EMU_HD float gelu_tanh_grad(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  const float t = tanh_rn(u);
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/// The logistic sigmoid: `1 / (1 + exp_rn(-x))`, three fp32 roundings after exp_rn (-x exact).
/// Called through swiglu_forward / swiglu_backward.
FP8EMU_HD float sigmoid(float x) { return 1.0f / (1.0f + exp_rn(-x)); }

/// SwiGLU of one element pair (gate a, linear b): `(a * sigmoid(a)) * b` (SiLU(a) times b).
/// Called by nn::LayerNormMLP's forward (`--mlp-activation swiglu`) and any GPU kernel of it.
FP8EMU_HD float swiglu_forward(float a, float b) { return a * sigmoid(a) * b; }

/// SwiGLU's backward for one element pair, given dy (the gradient of swiglu_forward(a, b)): with
/// s = sigmoid(a),
///   d_a = ((dy * b) * s) * (1 + a * (1 - s));  d_b = (dy * a) * s,
/// every operation one fp32 rounding in that order. Called by nn::LayerNormMLP's backward.
FP8EMU_HD void swiglu_backward(float a, float b, float dy, float& d_a, float& d_b) {
  const float s = sigmoid(a);
  d_a = dy * b * s * (1.0f + a * (1.0f - s));
  d_b = dy * a * s;
}

// ------------------------------------------------------------------------- loss

/// One row of the softmax cross-entropy (nn::softmax_cross_entropy_sum; the loss of `train` and
/// `train-lm`), z the row's `classes` logits, label its class (0 <= label < classes, which the caller
/// checks), divisor > 0 the gradient's divisor (the batch's row count). In this order:
///   mx = z[0], then mx = fmax_f32(mx, z[j]) for j = 1 .. classes-1 (a NaN logit is ignored unless
///        all are NaN);
///   p_j = exp_rn(z[j] - mx) and sum = ((0 + p_0) + p_1) + ... in fp32, in column order;
///   returns the fp32 value log_rn(sum) - (z[label] - mx) (the caller adds it to a double total);
///   when d is not null: d[j] = (p_j / sum - (j == label ? 1 : 0)) / divisor, each step one fp32
///   rounding.
/// No scratch: p_j is stored in d[j] and then overwritten, and only summed when d is null; d must not
/// overlap z. Called by nn::softmax_cross_entropy_sum (once per row, in row order) and any GPU
/// kernel of the loss.
FP8EMU_HD float softmax_xent_row(const float* z, int classes, int label, float divisor, float* d) {
  float mx = z[0];
  for (int j = 1; j < classes; ++j) mx = fmax_f32(mx, z[j]);
  float sum = 0.0f;
  if (d) {
    for (int j = 0; j < classes; ++j) {
      d[j] = exp_rn(z[j] - mx);
      sum += d[j];
    }
  } else {
    for (int j = 0; j < classes; ++j) sum += exp_rn(z[j] - mx);
  }
  const float loss = log_rn(sum) - (z[label] - mx);
  if (d) {
    for (int j = 0; j < classes; ++j) d[j] = (d[j] / sum - (j == label ? 1.0f : 0.0f)) / divisor;
  }
  return loss;
}

// ------------------------------------------------------------------------- optimizers

/// One Adam step of one weight w with gradient g and moments m, v (nn::Optimizer, kind adam):
///   m = b1 * m + (1 - b1) * g;
///   v = b2 * v + ((1 - b2) * g) * g;
///   w = w - (step * m) / (sqrt_rn(v) / sqrt_bc2 + eps),
/// every operation one fp32 rounding in that order. step = lr / bc1 and sqrt_bc2 = sqrt(bc2), with
/// the bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t, are computed once per step by the caller on
/// the host (std::pow). Called by nn::Optimizer::step and any GPU kernel of it.
FP8EMU_HD void adam_element(float& w, float g, float& m, float& v, float b1, float b2, float step, float sqrt_bc2,
                            float eps) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  w -= step * m / (sqrt_rn(v) / sqrt_bc2 + eps);
}

/// One SGD-with-momentum step of one weight w with gradient g and momentum buffer m
/// (nn::Optimizer, kind sgd): `m = momentum * m + g; w = w - lr * m`, each operation one fp32
/// rounding in that order. Called by nn::Optimizer::step and any GPU kernel of it.
FP8EMU_HD void sgd_momentum_element(float& w, float g, float& m, float momentum, float lr) {
  m = momentum * m + g;
  w -= lr * m;
}

// ------------------------------------------------------------------------- bias

/// The fp32 sum of column j of the row-major [rows, cols] matrix x, in row order from +0:
/// `((0 + x[0][j]) + x[1][j]) + ...` (so a column of -0 sums to +0). nn::Linear's bias gradient
/// (the batch sum of the unquantized output gradient) and any GPU kernel of it.
FP8EMU_HD float column_sum(const float* x, int rows, int cols, int j) {
  float s = 0.0f;
  for (int i = 0; i < rows; ++i) s += x[static_cast<long long>(i) * cols + j];
  return s;
}

/// y + b, one fp32 rounding: the bias of nn::Linear's output element.
FP8EMU_HD float bias_add(float y, float b) { return y + b; }

// ------------------------------------------------------------------------- delayed scaling

/// TE's fused amax-history and scale update (`fused_amax_and_scale_update_after_reduction`) of one
/// tensor slot: the body of DelayedScalingState::update under DelayedScaling::uses_fused_update().
/// history is row-major [history_len, num_slots] (row 0 is this step's amax, being recorded),
/// scale the num_slots scales; slot's column and scale[slot] are updated. With r = history[0][slot]:
///  - r != 0 (NaN included): the history rolls. m = max of rows 1 .. L-1, then of r, by fmax_f32
///    from +0 (NaNs ignored); rows 1 .. L-2 take rows 2 .. L-1, row L-1 takes r, row 0 becomes 0.
///    With L = 1, m = r and row 0 becomes 0.
///  - r == 0 (+0 or -0): the history stays as it is and m = 0.
///  - amax = r if most_recent, else m. If amax is finite and > 0 the scale becomes the fp32
///    quotient scaled_max / amax (one rounding), otherwise (0, negative, Inf, NaN) it keeps its
///    value; then a scale of +-Inf becomes FLT_MAX.
/// scaled_max = fp8_max * 2^-margin stays computed on the host by the caller, as TE's driver does.
/// Called by DelayedScalingState::update (one slot after the other) and any GPU kernel of it.
FP8EMU_HD void delayed_update_slot_fused(float* history, int num_slots, int history_len, int slot, float* scale,
                                         float scaled_max, bool most_recent) {
  const int L = history_len;
  auto h = [&](int row) -> float& { return history[static_cast<long long>(row) * num_slots + slot]; };
  const float r = h(0);
  float m = 0.0f;
  if (r != 0.0f) {
    if (L == 1) {
      m = r;
    } else {
      for (int i = 1; i < L; ++i) m = fmax_f32(m, h(i));
      m = fmax_f32(m, r);
      for (int i = 1; i + 1 < L; ++i) h(i) = h(i + 1);
      h(L - 1) = r;
    }
    h(0) = 0.0f;
  }
  const float amax = most_recent ? r : m;
  float s = scale[slot];
  if (f32_is_finite(amax) && amax > 0.0f) s = scaled_max / amax;
  if (f32_is_inf(s)) s = f32_max_finite();
  scale[slot] = s;
}

// ------------------------------------------------------------------------- LayerNorm / RMSNorm

/// The effective gamma of feature j: `1 + gamma[j]` (one fp32 rounding) with zero-centered gamma,
/// else gamma[j].
FP8EMU_HD float norm_gamma(const float* gamma, int j, bool zero_centered_gamma) {
  return zero_centered_gamma ? 1.0f + gamma[j] : gamma[j];
}

/// LayerNorm (layernorm true) or RMSNorm forward of one row x of n features (nn::Norm::forward, one
/// call per row) into y; returns rsigma. Statistics in binary64, in column order:
///  - LayerNorm: acc = ((0 + x_0) + x_1) + ... (binary64, exact widening), mu = RN32(acc / n);
///    var = RN32(acc2 / n) with acc2 = sum over j of d_j * d_j, d_j = x_j - mu (binary64 ops);
///  - RMSNorm: mu = 0, var = RN32(acc2 / n) with acc2 = sum over j of x_j * x_j (binary64 ops);
///  - rsigma = 1 / sqrt_rn(var + eps) (fp32: add, sqrt, divide);
///  - xhat_j = (x_j - mu) * rsigma and y_j = xhat_j * g_j + beta_j (LayerNorm) or xhat_j * g_j
///    (RMSNorm), g_j = norm_gamma(gamma, j, zero_centered_gamma), each step one fp32 rounding.
/// xhat (nullable) receives xhat_j for the backward pass; beta is not read for RMSNorm. y may be x
/// itself (x_j is read before y_j is written) but must not overlap it otherwise. Called by nn::Norm::forward (LayerNormLinear, LayerNormMLP and the final norm of
/// `train-lm`) and any GPU kernel of it.
FP8EMU_HD float norm_forward_row(const float* x, int n, bool layernorm, float eps, const float* gamma,
                                 const float* beta, bool zero_centered_gamma, float* y, float* xhat) {
  float mu = 0.0f;
  double acc = 0.0;
  if (layernorm) {
    for (int j = 0; j < n; ++j) acc += x[j];
    mu = math_detail::f64_to_f32_rn(acc / n);
    acc = 0.0;
    for (int j = 0; j < n; ++j) {
      const double d = double(x[j]) - double(mu);
      acc += d * d;
    }
  } else {
    for (int j = 0; j < n; ++j) acc += double(x[j]) * double(x[j]);
  }
  const float var = math_detail::f64_to_f32_rn(acc / n);
  const float rs = 1.0f / sqrt_rn(var + eps);
  for (int j = 0; j < n; ++j) {
    const float xh = (x[j] - mu) * rs;
    const float g = norm_gamma(gamma, j, zero_centered_gamma);
    y[j] = layernorm ? xh * g + beta[j] : xh * g;
    if (xhat) xhat[j] = xh;
  }
  return rs;
}

/// LayerNorm / RMSNorm backward of one row (nn::Norm::backward, one call per row): given the row's
/// output gradient dy, its saved xhat and rsigma rs, writes dx:
///   gdy_j = g_j * dy_j (fp32), s1 = sum gdy_j, s2 = sum gdy_j * xhat_j (binary64, column order,
///   from 0); m1 = RN32(s1 / n) for LayerNorm, 0 for RMSNorm; m2 = RN32(s2 / n);
///   dx_j = rs * (((g_j * dy_j) - m1) - xhat_j * m2), each step one fp32 rounding.
/// dx may not overlap dy or xhat. Called by nn::Norm::backward and any GPU kernel of it.
FP8EMU_HD void norm_backward_row(const float* dy, const float* xhat, float rs, int n, bool layernorm,
                                 const float* gamma, bool zero_centered_gamma, float* dx) {
  double s1 = 0.0, s2 = 0.0;
  for (int j = 0; j < n; ++j) {
    const float gdy = norm_gamma(gamma, j, zero_centered_gamma) * dy[j];
    s1 += gdy;
    s2 += double(gdy) * double(xhat[j]);
  }
  const float m1 = layernorm ? math_detail::f64_to_f32_rn(s1 / n) : 0.0f;
  const float m2 = math_detail::f64_to_f32_rn(s2 / n);
  for (int j = 0; j < n; ++j) {
    const float g = norm_gamma(gamma, j, zero_centered_gamma);
    dx[j] = rs * (g * dy[j] - m1 - xhat[j] * m2);
  }
}

/// The norm's parameter gradients of feature j over the row-major [rows, cols] dy and xhat, fp32 in
/// row order from +0: d_gamma = ((0 + dy_0j * xhat_0j) + dy_1j * xhat_1j) + ... (each product one
/// rounding) and d_beta = column_sum(dy, rows, cols, j). Called by nn::Norm::backward (d_beta used
/// for LayerNorm only) and any GPU kernel of it.
FP8EMU_HD void norm_param_grad_column(const float* dy, const float* xhat, int rows, int cols, int j, float& d_gamma,
                                      float& d_beta) {
  float sg = 0.0f, sb = 0.0f;
  for (int i = 0; i < rows; ++i) {
    const long long k = static_cast<long long>(i) * cols + j;
    sg += dy[k] * xhat[k];
    sb += dy[k];
  }
  d_gamma = sg;
  d_beta = sb;
}

}  // namespace fp8emu::core
