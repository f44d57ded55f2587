/// \file device_layers.hpp
/// \brief The layers of nn/ kept in a backend::Device's memory between calls: DeviceLinear (any
/// precision, per-tensor FP8 recipes) and DeviceOptimizer (Adam, SGD), the pieces device-resident
/// models are built from (nn::DeviceMlp; the transformer layers of device_transformer.hpp).
///
/// Each is made from its host layer (weights, recipe state and settings are copied to the device),
/// runs the host layer's arithmetic as backend::Device operations, and copies its state back with
/// download(). Bit-identical to the host layer on every device (tests/nn/test_device_mlp.cpp,
/// tests/nn/test_device_transformer.cpp run them on backend::cpu_device() against the host layers).
///
/// Pointers taken and returned are the device's memory, row-major. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/mlp.hpp"

namespace fp8emu::nn {

/// One parameter tensor and its gradient in a device's memory (n floats each).
struct DeviceParam {
  float* value = nullptr;
  float* grad = nullptr;
  std::size_t n = 0;
};

/// The sum of `rows` per-row loss terms in device memory (Device::softmax_xent's), downloaded and
/// added in double in row order, as softmax_cross_entropy_sum adds them.
double sum_loss_terms(const backend::Device& device, const float* terms, int rows);

/// nn::Linear on a device. Takes FP32 and BF16 layers and every FP8 recipe: per-tensor (delayed scaling with
/// the fused update and no amax-reduction hook; current scaling) and block-scaled (MXFP8, 128-block:
/// 1 x 128 blocks for inputs and gradients, 128 x 128 tiles for weights); unsupported() names what
/// else.
class DeviceLinear {
 public:
  /// Why `l` cannot run on a device (a phrase), or empty.
  static std::string unsupported(const Linear& l);
  /// Copies weight, bias, their gradients, precision, recipe state (scales, amax_history), the cast
  /// counts so far (Linear::stats), the last scales and the accumulation models. \throws fp8emu::Error with unsupported()'s phrase.
  DeviceLinear(const backend::Device& device, const Linear& src);

  /// Linear::forward with training = true and is_first_microbatch unset: y [rows, out] = x W^T + b
  /// (FP8: the weight and the input cast with both copies, their amaxes recorded). x [rows, in] must
  /// stay unchanged until backward() (an FP32 layer reads it there).
  void forward(const float* x, int rows, float* y);
  /// Linear::backward: grad_bias, grad_weight, and dx [rows, in] when non-null, from dy [rows, out].
  void backward(const float* dy, int rows, float* dx);
  /// Linear::update_forward_scales then update_backward_scales (delayed scaling; nothing
  /// otherwise). The scales the casts used are kept as the last scales first.
  void update_scales();
  /// Zeroes the cast counters.
  void reset_stats();
  /// weight then bias.
  void params(std::vector<DeviceParam>& out);
  /// Copies weight, bias, gradients, the recipe state, the cast counters (Linear::stats) and the
  /// last scales back. \throws fp8emu::Error when dst has another shape.
  void download(Linear& dst) const;

  int in() const { return in_; }
  int out() const { return out_; }

  /// Linear::twin_error on the device: when non-null, every FP8 or BF16 forward also runs the FP32
  /// twin on the device and adds the squared error and reference here, on the host, in Linear's
  /// order (each forward then waits for the device). Bit-identical to the host's sums unless the
  /// device's library GEMMs are on (backend::set_library_gemms).
  TwinError* twin_error = nullptr;

 private:
  void accumulate_twin(const float* x, int rows, const float* y);
  template <class T>
  using Tensor = backend::DeviceTensor<T>;
  void reserve(int rows);
  const float* scale(int role) const;
  float* amax(int role) const;

  const backend::Device* dev_;
  int in_ = 0, out_ = 0, capacity_ = 0, forward_rows_ = -1;  // forward_rows_: of the last forward
  bool fp8_ = false;
  bool bf16_ = false;         // Precision::kBf16 (else fp32 when !fp8_)
  bool blocks_ = false;       // a block-scaled recipe (MXFP8, 128-block), else per-tensor (fp8 only)
  backend::BlockCast cast_x_, cast_w_, cast_dy_;  // blocks: the casts of the input, weight, gradient
  bool delayed_ = false;      // else current scaling (per-tensor fp8 only)
  bool pow2_ = false;         // current scaling
  float epsilon_ = 0.0f;      // current scaling
  bool most_recent_ = false;  // delayed scaling
  int history_len_ = 1;       // delayed scaling
  float scaled_max_fwd_ = 0.0f, scaled_max_bwd_ = 0.0f;  // delayed: RN(fp8_max * 2^-margin)
  Format fmt_fwd_ = Format::kE4M3, fmt_bwd_ = Format::kE5M2;
  emu::GemmAccumulation acc_fprop_, acc_dgrad_, acc_wgrad_;
  const float* saved_x_ = nullptr;        // fp32: the input of the last forward; bf16: xb_
  Tensor<float> w_, b_, gw_, gb_;          // parameters and gradients
  Tensor<float> wt_;                       // fp32: W^T scratch [in, out]
  Tensor<float> dyt_;                      // fp32: dy^T scratch [out, capacity]
  Tensor<float> xb_, dyb_, wb_;            // bf16: x, dy [capacity, in / out] and W [out, in] rounded
  Tensor<float> twin_wt_, twin_y_;         // twin_error: W^T [in, out] and the twin's output
  Tensor<std::uint8_t> wq_row_, wq_col_;   // fp8: W codes [out, in] and [in, out]
  Tensor<std::uint8_t> xq_row_, xq_col_;   // fp8: x codes [capacity, in] and [in, capacity]
  Tensor<std::uint8_t> dyq_row_, dyq_col_; // fp8: dy codes [capacity, out] and [out, capacity]
  Tensor<float> w_si_row_, w_si_col_, x_si_row_, x_si_col_, dy_si_row_, dy_si_col_;  // blocks: scale_inv views
  Tensor<float> fwd_history_, fwd_scale_;  // delayed: [L, 3], [3]
  Tensor<float> bwd_history_, bwd_scale_;  // delayed: [L, 2], [2]
  Tensor<float> last_scale_;               // [3]: the scales of the last casts of x, W, dy
  Tensor<backend::CastCounters> counters_; // [3]: x, W, dy
};

/// nn::Optimizer on a device over a fixed list of parameters (the host optimizer's order).
class DeviceOptimizer {
 public:
  /// Copies kind, learning rate, momentum, step count and moments (matched to `params` in order).
  /// \throws fp8emu::Error when the optimizer's moments do not match the parameters.
  DeviceOptimizer(const backend::Device& device, const Optimizer& opt, std::vector<DeviceParam> params);
  /// Optimizer::step: every parameter in order.
  void step();
  /// Copies the step count and the moments back (Optimizer::restore).
  void download(Optimizer& opt) const;

 private:
  const backend::Device* dev_;
  Optimizer::Kind kind_;
  float lr_, momentum_;
  long steps_;
  std::vector<DeviceParam> params_;
  std::vector<backend::DeviceTensor<float>> m_, v_;
};

}  // namespace fp8emu::nn
