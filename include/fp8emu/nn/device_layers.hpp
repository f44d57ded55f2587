/// \file device_layers.hpp
/// \brief What device-resident models share besides nn::Linear (which is device-resident itself,
/// Linear::to_device): DeviceOptimizer (Adam, SGD on a device's memory) and the sum of per-row loss
/// terms. Bit-identical to the host optimizer on every device (tests/nn/test_device_mlp.cpp,
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

/// The sum of `rows` per-row loss terms in device memory (Device::softmax_xent's), downloaded and
/// added in double in row order, as softmax_cross_entropy_sum adds them.
double sum_loss_terms(const backend::Device& device, const float* terms, int rows);

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
