// LayerNorm / RMSNorm (see include/fp8emu/nn/norm.hpp).
#include "fp8emu/nn/norm.hpp"

#include <cmath>

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

Norm::Norm(NormKind kind, int features, float eps, bool zero_centered_gamma)
    : kind_(kind), eps_(eps), zero_centered_(zero_centered_gamma) {
  FP8EMU_CHECK(features > 0, "Norm: features must be positive, got ", features);
  FP8EMU_CHECK(std::isfinite(eps) && eps >= 0.0f, "Norm: eps must be finite and >= 0, got ", eps);
  gamma = Matrix(1, features);
  beta = Matrix(1, features);
  grad_gamma = Matrix(1, features);
  grad_beta = Matrix(1, features);
  for (float& g : gamma.data) g = zero_centered_ ? 0.0f : 1.0f;
}

void Norm::forward(const Matrix& x, Matrix& y, bool training) {
  const int n = features();
  FP8EMU_CHECK(x.cols == n, "Norm: input has ", x.cols, " features, layer expects ", n);
  y.resize(x.rows, n);
  if (training) {
    xhat_.resize(x.rows, n);
    rsigma_.assign(std::size_t(x.rows), 0.0f);
  }
#pragma omp parallel for schedule(static) if (x.rows >= 64)
  for (int i = 0; i < x.rows; ++i) {
    const float* xr = x.row(i);
    float mu = 0.0f;
    double acc = 0.0;
    if (kind_ == NormKind::kLayerNorm) {
      for (int j = 0; j < n; ++j) acc += xr[j];
      mu = float(acc / n);
      acc = 0.0;
      for (int j = 0; j < n; ++j) {
        const double d = double(xr[j]) - double(mu);
        acc += d * d;
      }
    } else {
      for (int j = 0; j < n; ++j) acc += double(xr[j]) * double(xr[j]);
    }
    const float var = float(acc / n);
    const float rs = 1.0f / std::sqrt(var + eps_);
    float* yr = y.row(i);
    for (int j = 0; j < n; ++j) {
      const float xh = (xr[j] - mu) * rs;
      const float g = zero_centered_ ? 1.0f + gamma.data[std::size_t(j)] : gamma.data[std::size_t(j)];
      yr[j] = kind_ == NormKind::kLayerNorm ? xh * g + beta.data[std::size_t(j)] : xh * g;
      if (training) xhat_(i, j) = xh;
    }
    if (training) rsigma_[std::size_t(i)] = rs;
  }
  have_saved_ = training;
}

void Norm::backward(const Matrix& dy, Matrix& dx) {
  FP8EMU_CHECK(have_saved_, "Norm: backward called without a preceding training forward");
  const int n = features();
  FP8EMU_CHECK(dy.rows == xhat_.rows && dy.cols == n, "Norm: grad_output shape [", dy.rows, ", ", dy.cols,
               "] does not match the forward output [", xhat_.rows, ", ", n, "]");
  dx.resize(dy.rows, n);
  // Parameter gradients: sums over rows in row order (deterministic).
  for (int j = 0; j < n; ++j) {
    float sg = 0.0f, sb = 0.0f;
    for (int i = 0; i < dy.rows; ++i) {
      sg += dy(i, j) * xhat_(i, j);
      sb += dy(i, j);
    }
    grad_gamma.data[std::size_t(j)] = sg;
    grad_beta.data[std::size_t(j)] = kind_ == NormKind::kLayerNorm ? sb : 0.0f;
  }
#pragma omp parallel for schedule(static) if (dy.rows >= 64)
  for (int i = 0; i < dy.rows; ++i) {
    // dx = rsigma * (g*dy - mean(g*dy) - xhat * mean(g*dy * xhat)); RMSNorm has no mean(g*dy) term.
    double s1 = 0.0, s2 = 0.0;
    for (int j = 0; j < n; ++j) {
      const float g = zero_centered_ ? 1.0f + gamma.data[std::size_t(j)] : gamma.data[std::size_t(j)];
      const float gdy = g * dy(i, j);
      s1 += gdy;
      s2 += double(gdy) * double(xhat_(i, j));
    }
    const float m1 = kind_ == NormKind::kLayerNorm ? float(s1 / n) : 0.0f;
    const float m2 = float(s2 / n);
    const float rs = rsigma_[std::size_t(i)];
    for (int j = 0; j < n; ++j) {
      const float g = zero_centered_ ? 1.0f + gamma.data[std::size_t(j)] : gamma.data[std::size_t(j)];
      dx(i, j) = rs * (g * dy(i, j) - m1 - xhat_(i, j) * m2);
    }
  }
  have_saved_ = false;
}

}  // namespace fp8emu::nn
