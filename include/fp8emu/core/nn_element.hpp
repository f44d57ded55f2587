// PROVISIONAL (replaced by the nn-core branch at merge).
#pragma once
#include <cstdint>
#include "fp8emu/config.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include <cmath>
#include <cfloat>
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
inline float softmax_xent_row(const float* z, int c, int y, float divisor, float* d) {
  float mx = z[0];
  for (int j = 1; j < c; ++j) mx = std::fmax(mx, z[j]);
  float sum = 0.0f;
  for (int j = 0; j < c; ++j) { const float p = exp_rn(z[j] - mx); if (d) d[j] = p; sum += p; }
  const float t = log_rn(sum) - (z[y] - mx);
  if (d) for (int j = 0; j < c; ++j) d[j] = (d[j] / sum - (j == y ? 1.0f : 0.0f)) / divisor;
  return t;
}
inline void adam_element(float& w, float g, float& m, float& v, float b1, float b2, float step, float sqrt_bc2, float eps) {
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  w -= step * m / (std::sqrt(v) / sqrt_bc2 + eps);
}
inline void sgd_momentum_element(float& w, float g, float& m, float momentum, float lr) { m = momentum * m + g; w -= lr * m; }
inline float column_sum(const float* x, int rows, int cols, int j) {
  float s = 0.0f;
  for (int i = 0; i < rows; ++i) s += x[std::size_t(i) * std::size_t(cols) + std::size_t(j)];
  return s;
}
inline void delayed_update_slot_fused(float* h, int n, int L, int j, float* scale, float scaled_max, bool most_recent) {
  auto H = [&](int row) -> float& { return h[std::size_t(row) * std::size_t(n) + std::size_t(j)]; };
  const float r = H(0);
  float m = 0.0f;
  if (r != 0.0f) {
    if (L == 1) m = r;
    else {
      for (int i = 1; i < L; ++i) m = std::fmax(m, H(i));
      m = std::fmax(m, r);
      for (int i = 1; i + 1 < L; ++i) H(i) = H(i + 1);
      H(L - 1) = r;
    }
    H(0) = 0.0f;
  }
  const float amax = most_recent ? r : m;
  float s = scale[j];
  if (std::isfinite(amax) && amax > 0.0f) s = scaled_max / amax;
  if (std::isinf(s)) s = FLT_MAX;
  scale[j] = s;
}
}  // namespace fp8emu::core
