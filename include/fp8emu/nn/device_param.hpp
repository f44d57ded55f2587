/// \file device_param.hpp
/// \brief One parameter tensor and its gradient in a backend::Device's memory: what a layer hands
/// the optimizer (Optimizer::step on a device) and what device-resident models collect in order.
#pragma once

#include <cstddef>

namespace fp8emu::nn {

/// A parameter and its gradient, n floats each, in a device's memory.
struct DeviceParam {
  float* value = nullptr;
  float* grad = nullptr;
  std::size_t n = 0;
};

}  // namespace fp8emu::nn
