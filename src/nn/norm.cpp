// LayerNorm / RMSNorm (see include/fp8emu/nn/norm.hpp).
#include "fp8emu/nn/norm.hpp"

#include <cmath>

#include "fp8emu/core/nn_element.hpp"
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
    const float rs = core::norm_forward_row(x.row(i), n, kind_ == NormKind::kLayerNorm, eps_, gamma.data.data(),
                                            beta.data.data(), zero_centered_, y.row(i),
                                            training ? xhat_.row(i) : nullptr);
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
    float sg, sb;
    core::norm_param_grad_column(dy.data.data(), xhat_.data.data(), dy.rows, n, j, sg, sb);
    grad_gamma.data[std::size_t(j)] = sg;
    grad_beta.data[std::size_t(j)] = kind_ == NormKind::kLayerNorm ? sb : 0.0f;
  }
#pragma omp parallel for schedule(static) if (dy.rows >= 64)
  for (int i = 0; i < dy.rows; ++i) {
    // dx = rsigma * (g*dy - mean(g*dy) - xhat * mean(g*dy * xhat)); RMSNorm has no mean(g*dy) term.
    core::norm_backward_row(dy.row(i), xhat_.row(i), rsigma_[std::size_t(i)], n, kind_ == NormKind::kLayerNorm,
                            gamma.data.data(), zero_centered_, dx.row(i));
  }
  have_saved_ = false;
}

}  // namespace fp8emu::nn
