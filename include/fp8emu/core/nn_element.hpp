/// \file nn_element.hpp
/// \brief PROVISIONAL (branch cuda-device): the element functions of an MLP step, host and device,
/// with the arithmetic of src/nn/mlp.cpp, src/nn/linear.cpp and src/scaling/delayed_scaling.cpp.
/// Written only so that cuda/device_ops.cu compiles; the nn-core branch's version of this header
/// replaces it at merge (same signatures).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/fp32_ops.hpp"

namespace fp8emu::core {

FP8EMU_HD float relu_forward(float x) { return x > 0.0f ? x : 0.0f; }

FP8EMU_HD float relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

FP8EMU_HD float gelu_tanh_forward(float x) {
  const float t = tanh_rn(0.7978845608028654f * (x + 0.044715f * x * x * x));
  return 0.5f * x * (1.0f + t);
}

FP8EMU_HD float gelu_tanh_grad(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float t = tanh_rn(u);
  const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

FP8EMU_HD float softmax_xent_row(const float* z, int classes, int label, float divisor, float* d) {
  float mx = z[0];
  for (int j = 1; j < classes; ++j) {
#if defined(__CUDA_ARCH__)
    mx = fmaxf(mx, z[j]);
#else
    mx = std::fmax(mx, z[j]);
#endif
  }
  float sum = 0.0f;
  for (int j = 0; j < classes; ++j) {
    const float p = exp_rn(z[j] - mx);
    if (d) d[j] = p;
    sum += p;
  }
  const float loss = log_rn(sum) - (z[label] - mx);
  if (d)
    for (int j = 0; j < classes; ++j) d[j] = (d[j] / sum - (j == label ? 1.0f : 0.0f)) / divisor;
  return loss;
}

FP8EMU_HD void adam_element(float& w, float g, float& m, float& v, float b1, float b2, float step, float sqrt_bc2,
                            float eps) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
#if defined(__CUDA_ARCH__)
  const float r = __fsqrt_rn(v);
#else
  const float r = std::sqrt(v);
#endif
  w -= step * m / (r / sqrt_bc2 + eps);
}

FP8EMU_HD void sgd_momentum_element(float& w, float g, float& m, float momentum, float lr) {
  m = momentum * m + g;
  w -= lr * m;
}

FP8EMU_HD float column_sum(const float* x, int rows, int cols, int j) {
  float s = 0.0f;
  for (int i = 0; i < rows; ++i) s += x[std::size_t(i) * std::size_t(cols) + std::size_t(j)];
  return s;
}

FP8EMU_HD void delayed_update_slot_fused(float* history, int num_slots, int history_len, int slot, float* scale,
                                         float scaled_max, bool most_recent) {
  const std::size_t n = std::size_t(num_slots), j = std::size_t(slot);
  float* h = history + j;  // h[row * n] is row `row` of this slot's column
  const float r = h[0];
  float m = 0.0f;
  if (r != 0.0f) {
    if (history_len == 1) {
      m = r;
    } else {
      for (int i = 1; i < history_len; ++i) {
#if defined(__CUDA_ARCH__)
        m = fmaxf(m, h[std::size_t(i) * n]);
#else
        m = std::fmax(m, h[std::size_t(i) * n]);
#endif
      }
#if defined(__CUDA_ARCH__)
      m = fmaxf(m, r);
#else
      m = std::fmax(m, r);
#endif
      for (int i = 1; i + 1 < history_len; ++i) h[std::size_t(i) * n] = h[std::size_t(i + 1) * n];
      h[std::size_t(history_len - 1) * n] = r;
    }
    h[0] = 0.0f;
  }
  const float amax = most_recent ? r : m;
  float s = scale[j];
  if (f32_is_finite(amax) && amax > 0.0f) s = scaled_max / amax;
  if ((f32_to_bits(s) & 0x7FFFFFFFu) == 0x7F800000u) s = FLT_MAX;
  scale[j] = s;
}

}  // namespace fp8emu::core
