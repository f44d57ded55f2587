// LayerNorm / RMSNorm (see include/fp8emu/nn/norm.hpp): one step program on backend::Device
// operations (core::norm_forward_row, norm_backward_row, norm_param_grad_column per row or column).
#include "fp8emu/nn/norm.hpp"

#include <cmath>

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

namespace {
backend::NormOp op_of(NormKind k) {
  return k == NormKind::kLayerNorm ? backend::NormOp::kLayerNorm : backend::NormOp::kRMSNorm;
}
}  // namespace

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

// A copy lives on the host, with the source's current values and no saved forward.
Norm::Norm(const Norm& o)
    : gamma(o.gamma),
      beta(o.beta),
      grad_gamma(o.grad_gamma),
      grad_beta(o.grad_beta),
      kind_(o.kind_),
      eps_(o.eps_),
      zero_centered_(o.zero_centered_) {
  if (o.off_host()) o.copy_to(*this);
}

Norm& Norm::operator=(const Norm& o) {
  if (this != &o) {
    Norm copy(o);
    *this = std::move(copy);
  }
  return *this;
}

void Norm::step_forward(const float* x, int rows, float* y, bool training) {
  FP8EMU_CHECK(rows >= 0, "Norm: negative row count ", rows);
  const backend::Device& d = *device_;
  const int n = features();
  if (rows > capacity_) {
    xhat_ = backend::DeviceTensor<float>(d, rows, n);
    rsigma_ = backend::DeviceTensor<float>(d, 1, rows);
    capacity_ = rows;
  }
  d.norm_forward(op_of(kind_), x, rows, n, p(gamma, gamma_), p(beta, beta_), eps_, zero_centered_, y, xhat_.get(),
                 rsigma_.get());
  saved_rows_ = training ? rows : -1;
}

void Norm::forward(const Matrix& x, Matrix& y, bool training) {
  const int n = features();
  FP8EMU_CHECK(x.cols == n, "Norm: input has ", x.cols, " features, layer expects ", n);
  FP8EMU_CHECK(!off_host(), "Norm: the Matrix forward of a norm on the ", device_->name(),
               " device (call to_host() first)");
  y.resize(x.rows, n);
  step_forward(x.data.data(), x.rows, y.data.data(), training);
}

void Norm::backward(const Matrix& dy, Matrix& dx) {
  FP8EMU_CHECK(saved_rows_ >= 0, "Norm: backward called without a preceding training forward");
  const int n = features();
  FP8EMU_CHECK(dy.rows == saved_rows_ && dy.cols == n, "Norm: grad_output shape [", dy.rows, ", ", dy.cols,
               "] does not match the forward output [", saved_rows_, ", ", n, "]");
  FP8EMU_CHECK(!off_host(), "Norm: the Matrix backward of a norm on the ", device_->name(),
               " device (call to_host() first)");
  dx.resize(dy.rows, n);
  backward(dy.data.data(), dy.rows, dx.data.data());
}

void Norm::forward(const float* x, int rows, float* y, bool training) { step_forward(x, rows, y, training); }

// dx = rsigma * (g*dy - mean(g*dy) - xhat * mean(g*dy * xhat)) per row (RMSNorm has no mean(g*dy)
// term); grad_gamma and grad_beta summed over rows in row order (RMSNorm's grad_beta stays zero).
void Norm::backward(const float* dy, int rows, float* dx) {
  FP8EMU_CHECK(saved_rows_ >= 0, "Norm: backward called without a preceding training forward");
  FP8EMU_CHECK(rows == saved_rows_, "Norm: backward of ", rows, " rows after a forward of ", saved_rows_);
  device_->norm_backward(op_of(kind_), dy, xhat_.get(), rsigma_.get(), rows, features(), p(gamma, gamma_),
                         zero_centered_, dx, p(grad_gamma, grad_gamma_), p(grad_beta, grad_beta_));
  saved_rows_ = -1;
}

void Norm::to_device(const backend::Device& device) {
  if (device_ == &device) return;
  to_host();
  device_ = &device;
  capacity_ = 0;
  saved_rows_ = -1;
  if (!off_host()) return;
  const int n = features();
  backend::DeviceTensor<float>* t[4] = {&gamma_, &beta_, &grad_gamma_, &grad_beta_};
  const Matrix* m[4] = {&gamma, &beta, &grad_gamma, &grad_beta};
  for (int i = 0; i < 4; ++i) {
    *t[i] = backend::DeviceTensor<float>(device, 1, n);
    t[i]->upload(m[i]->data.data());
  }
}

void Norm::to_host() {
  if (device_ == &backend::cpu_device()) return;
  if (off_host()) {
    copy_to(*this);
    for (backend::DeviceTensor<float>* t : {&gamma_, &beta_, &grad_gamma_, &grad_beta_}) *t = {};
  }
  device_ = &backend::cpu_device();
  capacity_ = 0;
  saved_rows_ = -1;
  xhat_ = {};
  rsigma_ = {};
}

void Norm::params(std::vector<DeviceParam>& out) {
  const std::size_t n = std::size_t(features());
  out.push_back({p(gamma, gamma_), p(grad_gamma, grad_gamma_), n});
  if (kind_ == NormKind::kLayerNorm) out.push_back({p(beta, beta_), p(grad_beta, grad_beta_), n});
}

void Norm::copy_to(Norm& dst) const {
  FP8EMU_CHECK(dst.features() == features(), "device-resident Norm: download into a norm of another width");
  FP8EMU_CHECK(&dst == this || !dst.off_host(), "Norm: copy_to into a norm on a device (to_host() it first)");
  if (!off_host()) {
    if (&dst != this) {
      dst.gamma.data = gamma.data;
      dst.beta.data = beta.data;
      dst.grad_gamma.data = grad_gamma.data;
      dst.grad_beta.data = grad_beta.data;
    }
    return;
  }
  gamma_.download(dst.gamma.data.data());
  beta_.download(dst.beta.data.data());
  grad_gamma_.download(dst.grad_gamma.data.data());
  grad_beta_.download(dst.grad_beta.data.data());
}

}  // namespace fp8emu::nn
