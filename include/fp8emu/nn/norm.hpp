/// \file norm.hpp
/// \brief LayerNorm and RMSNorm over the last dimension, forward and backward, fp32 (as TE's
/// `LayerNorm` / `RMSNorm` modules, transformer_engine/pytorch/module/{layernorm,rmsnorm}.py).
///
///   LayerNorm: y = (x - mu) * rsigma * g + beta,  mu = mean(x), rsigma = 1 / sqrt(var(x) + eps)
///   RMSNorm:   y = x * rsigma * g,                rsigma = 1 / sqrt(mean(x^2) + eps)
/// with g = gamma, or g = 1 + gamma when `zero_centered_gamma` (TE's option; gamma starts at 0).
/// Statistics: mu and the variance (biased, over the row) are summed in double in column order and
/// rounded once to fp32; rsigma = RN(1 / sqrtf(RN(var) + eps)) in fp32. Outputs, gradients and
/// parameters are fp32. Determinism: bit-identical for any OpenMP thread count (rows independent;
/// parameter gradients summed over rows in row order).
#pragma once

#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/device_param.hpp"
#include "fp8emu/nn/matrix.hpp"

namespace fp8emu::nn {

/// Which normalisation.
enum class NormKind { kLayerNorm, kRMSNorm };

class Norm {
 public:
  /// \param features  Size of the last dimension (> 0).
  /// \param eps       Added to the variance (TE default 1e-5).
  /// \param zero_centered_gamma  Scale by (1 + gamma); gamma is then initialised to 0, else to 1.
  /// \throws fp8emu::Error for features <= 0 or eps < 0 / non-finite.
  Norm(NormKind kind, int features, float eps = 1e-5f, bool zero_centered_gamma = false);

  /// y = norm(x). \param x Shape [rows, features]. \param y Shape [rows, features] (resized).
  /// \param training Save what backward needs (x-hat and rsigma per row).
  /// \throws fp8emu::Error on a feature-count mismatch.
  void forward(const Matrix& x, Matrix& y, bool training);
  /// dx from dy (Shape [rows, features]); fills grad_gamma and grad_beta (LayerNorm).
  /// \throws fp8emu::Error without a preceding training forward or on a shape mismatch.
  void backward(const Matrix& dy, Matrix& dx);

  NormKind kind() const { return kind_; }
  int features() const { return gamma.cols; }
  float eps() const { return eps_; }
  bool zero_centered_gamma() const { return zero_centered_; }

  // ---- device residency and the step on device pointers (as nn::Linear) ----------------------------
  /// Moves gamma, beta and their gradients into `device`'s memory (a device of host memory keeps them
  /// in place); the Matrix fields are stale until to_host().
  void to_device(const backend::Device& device);
  /// Brings them back into the Matrix fields (waits); the norm runs on the host again.
  void to_host();
  /// The device the step runs on: cpu_device() on the host, else the one of to_device().
  const backend::Device& device() const { return *device_; }
  /// The forward on device()'s memory: y [rows, features] (may be x) = norm(x); a training call
  /// keeps what backward needs.
  void forward(const float* x, int rows, float* y, bool training = true);
  /// dx [rows, features] and the parameter gradients from dy, after forward().
  void backward(const float* dy, int rows, float* dx);
  /// gamma (and beta for LayerNorm) with their gradients, in device()'s memory.
  void params(std::vector<DeviceParam>& out);
  /// Copies gamma, beta and the gradients into `dst` (the same width; waits).
  void copy_to(Norm& dst) const;

  Matrix gamma;       ///< Shape [1, features].
  Matrix beta;        ///< Shape [1, features] (LayerNorm only; zero for RMSNorm and never used).
  Matrix grad_gamma;  ///< Shape [1, features].
  Matrix grad_beta;   ///< Shape [1, features].

  Norm(const Norm& o);
  Norm& operator=(const Norm& o);
  Norm(Norm&&) noexcept = default;
  Norm& operator=(Norm&&) noexcept = default;

 private:
  void step_forward(const float* x, int rows, float* y, bool training);
  bool off_host() const { return !device_->host_memory(); }
  float* p(Matrix& m, backend::DeviceTensor<float>& t) { return off_host() ? t.get() : m.data.data(); }

  NormKind kind_;
  float eps_;
  bool zero_centered_;
  const backend::Device* device_ = &backend::cpu_device();
  backend::DeviceTensor<float> gamma_, beta_, grad_gamma_, grad_beta_;  // off the host: the parameters
  int capacity_ = 0, saved_rows_ = -1;     // saved_rows_: rows of the last training forward, -1: none
  backend::DeviceTensor<float> xhat_, rsigma_;  // saved (x - mu) * rsigma, or x * rsigma; rsigma per row
};

}  // namespace fp8emu::nn
