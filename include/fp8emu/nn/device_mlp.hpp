/// \file device_mlp.hpp
/// \brief An Mlp and its Optimizer kept in one backend::Device's memory between training steps.
///
/// nn::Mlp with the `cuda` backend sends every FP8 operand to the GPU and back per call. DeviceMlp
/// keeps weights, biases, gradients, activations, the quantizers' scales and amax histories, the
/// cast counters and the optimizer's moments in the device's memory; a step uploads one batch
/// (x and labels) and downloads one fp32 loss term per row. Its step program is the one of
/// nn::Mlp + softmax_cross_entropy_sum + Optimizer::step with TE's update points, written once on
/// backend::Device's operations, so it gives the host layers' bits on every device:
/// `backend::cpu_device()` runs it on the CPU (tests/nn/test_device_mlp.cpp checks it against
/// nn::Mlp bit for bit, every recipe it takes) and `backend::cuda_device()` on the GPU.
///
/// What it takes (unsupported() says why not): FP32 layers and FP8 layers of every recipe (delayed
/// scaling with the fused update and no amax-reduction hook, current scaling, MXFP8, 128-block),
/// with any accumulation models; Adam or SGD. A layer with twin_error set is not taken.
///
/// Determinism: the same bits as nn::Mlp for any thread count and device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/device_layers.hpp"
#include "fp8emu/nn/mlp.hpp"

namespace fp8emu::nn {

class DeviceMlp {
 public:
  /// Why `model` cannot be device-resident (one sentence naming the layer and what it uses), or
  /// empty when it can.
  static std::string unsupported(const Mlp& model);

  /// Copies the model (weights, biases, precision, recipe state, accumulation models, activation)
  /// and the optimizer (kind, learning rate, step count, moments) into `device`'s memory.
  /// \throws fp8emu::Error with unsupported()'s sentence, or when the device cannot allocate.
  DeviceMlp(const backend::Device& device, const Mlp& model, const Optimizer& opt);
  DeviceMlp(const DeviceMlp&) = delete;
  DeviceMlp& operator=(const DeviceMlp&) = delete;

  /// One training step on a shard of `divisor` rows, as the host loop does it: forward (training),
  /// softmax cross-entropy with dlogits = (softmax - onehot) / divisor, backward, TE's update points
  /// (every layer's forward then backward scales), the optimizer step.
  /// \param x Shape [rows, in] (host). \param labels rows labels, each < the output width (host).
  /// \returns the sum of the rows' loss terms, in double in row order (softmax_cross_entropy_sum).
  /// \throws fp8emu::Error on a shape mismatch, a label out of range or a divisor below rows.
  double train_step(const Matrix& x, const std::vector<std::uint8_t>& labels, int divisor);

  /// Zeroes the cast counters (the host loop's `stats = {}` at an epoch's start).
  void reset_stats();

  /// Copies everything back: weights, biases, gradients, the scale and amax_history state, the cast
  /// counters (into Linear::stats), the scales of the last casts, the optimizer's step and moments.
  /// \throws fp8emu::Error when `model` or `opt` is not shaped as the one this was made from.
  void download(Mlp& model, Optimizer& opt) const;

  const backend::Device& device() const { return *dev_; }

 private:
  template <class T>
  using Tensor = backend::DeviceTensor<T>;
  void ensure_rows(int rows);
  std::vector<DeviceParam> all_params();

  const backend::Device* dev_;
  backend::ActivationOp act_;
  std::vector<Linear> layers_;  // copies of the model's layers, resident on the device
  DeviceOptimizer opt_;
  int capacity_ = 0;                // rows the activation buffers hold
  std::vector<Tensor<float>> in_;   // input of each layer [capacity, in_l]
  std::vector<Tensor<float>> pre_;  // output of each layer [capacity, out_l] (the last: logits)
  Tensor<float> grad_a_, grad_b_;   // gradient ping-pong [capacity, max width]
  Tensor<float> loss_;              // [capacity]
  Tensor<std::uint8_t> labels_;     // [capacity]
};

}  // namespace fp8emu::nn
