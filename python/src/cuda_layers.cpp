// The GPU path of fp8emu.layers' element operations: the bias grad and the LayerNorm/RMSNorm
// forward and backward on CUDA arrays, as backend::Device operations on backend::cuda_device()
// (cuda_support.hpp says what the entry points share).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda_support.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8emu::python {
using namespace gpu;

// fp8emu.layers.bias_grad on a CUDA array: backend::Device::column_sum on backend::cuda_device()
// (core::nn_element's column sum in row order from +0, as the host's).
nb::object cuda_column_sum(const Array& x, std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.layers.bias_grad";
  require_gpu(fn, "dy");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, x, "dy", 2);
  const int rows = int(x.shape(0)), cols = int(x.shape(1));
  require_device_gpu(fn, "dy", device);
  DeviceScope scope(fn, device);
  std::optional<OutArray> none;
  Output o = output_for(fn, none, device, {std::int64_t(cols)}, nb::dtype<float>(), false, framework);
  const auto* px = static_cast<const float*>(x.data());
  auto* out = static_cast<float*>(o.data);
  on_device(fn, stream, cols > 0 ? out : nullptr,
            [&](const backend::Device& dev) { dev.column_sum(px, rows, cols, out); });
  return o.result;
#else
  (void)x, (void)stream, (void)framework;
  return nb::none();
#endif
}

namespace {
backend::NormOp norm_op_of(const char* fn, const std::string& s) {
  if (s == "LayerNorm") return backend::NormOp::kLayerNorm;
  if (s == "RMSNorm") return backend::NormOp::kRMSNorm;
  throw nb::value_error(fn_text(fn, "unknown normalization '" + s + "' (accepted: LayerNorm, RMSNorm)").c_str());
}
}  // namespace

// fp8emu.layers.layernorm_linear_forward's norm on CUDA arrays: backend::Device::norm_forward on
// backend::cuda_device() (nn::Norm::forward's arithmetic, core::norm_forward_row), then, with
// round_bf16, Device::round_bf16 of its output (current scaling reads the norm's bf16 output).
// Returns (y, xhat, rsigma, gamma): xhat (rows, cols), rsigma (rows,) and a copy of gamma (cols,)
// are what the backward reads. All of it is complete when it returns: reading gamma's copy back
// waits for every operation enqueued before (Device::download).
nb::tuple cuda_norm_forward(const Array& x, const Array& gamma, std::optional<Array> beta,
                            const std::string& normalization, float eps, bool zero_centered_gamma, bool round_bf16,
                            std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.layers.layernorm_linear_forward";
  const backend::NormOp op = norm_op_of(fn, normalization);
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, x, "x", 2);
  same_device(fn, device, device_f32(fn, gamma, "ln_weight", 1), "ln_weight");
  if (beta) same_device(fn, device, device_f32(fn, *beta, "ln_bias", 1), "ln_bias");
  const std::int64_t rows = std::int64_t(x.shape(0)), cols = std::int64_t(x.shape(1));
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&gamma, "ln_weight"},
                                  {beta ? &*beta : nullptr, "ln_bias"}})
    if (arr && std::int64_t(arr->shape(0)) != cols)
      value_error(fn, std::string(name) + " has shape " + shape_text(shape_of(*arr)) + "; expected (" +
                          std::to_string(cols) + ",)");
  // nn::Norm's own checks, with its messages.
  if (cols <= 0) value_error(fn, "Norm: features must be positive, got " + std::to_string(cols));
  if (!std::isfinite(eps) || eps < 0.0f) value_error(fn, "Norm: eps must be finite and >= 0, got " + std::to_string(eps));
  require_device_gpu(fn, "x", device);
  DeviceScope scope(fn, device);
  std::optional<OutArray> none;
  Output y = output_for(fn, none, device, {rows, cols}, nb::dtype<float>(), false, framework);
  Output xhat = output_for(fn, none, device, {rows, cols}, nb::dtype<float>(), false, framework);
  Output rsigma = output_for(fn, none, device, {rows}, nb::dtype<float>(), false, framework);
  // The backward's gamma is the forward's (nn::Norm keeps a copy): a snapshot, so that the caller
  // may change its parameter in place before the backward.
  Output gamma_copy = output_for(fn, none, device, {cols}, nb::dtype<float>(), false, framework);
  const auto* px = static_cast<const float*>(x.data());
  const auto* pg = static_cast<const float*>(gamma.data());
  const float* pb = beta ? static_cast<const float*>(beta->data()) : nullptr;
  auto* py = static_cast<float*>(y.data);
  auto* pgc = static_cast<float*>(gamma_copy.data);
  on_device(fn, stream, pgc, [&](const backend::Device& dev) {
    dev.copy(pgc, pg, std::size_t(cols) * sizeof(float));
    // nn::Norm's beta is zeros until set: a LayerNorm without ln_bias reads zeros.
    backend::DeviceTensor<float> zeros;
    if (!pb && op == backend::NormOp::kLayerNorm) {
      zeros = backend::DeviceTensor<float>(dev, 1, int(cols));
      pb = zeros.get();
    }
    dev.norm_forward(op, px, int(rows), int(cols), pg, pb, eps, zero_centered_gamma, py,
                     static_cast<float*>(xhat.data), static_cast<float*>(rsigma.data));
    if (round_bf16) dev.round_bf16(py, std::size_t(rows) * std::size_t(cols));
  });
  return nb::make_tuple(y.result, xhat.result, rsigma.result, gamma_copy.result);
#else
  (void)x, (void)gamma, (void)beta, (void)eps, (void)zero_centered_gamma, (void)round_bf16, (void)stream,
      (void)framework, (void)op;
  return {};
#endif
}

// fp8emu.layers.layernorm_linear_backward's norm on CUDA arrays: Device::norm_backward (nn::Norm::
// backward's arithmetic). Returns (dx, grad_gamma, grad_beta); grad_beta is zeros for RMSNorm.
nb::tuple cuda_norm_backward(const Array& dy, std::optional<Array> grad_ln_out, const Array& xhat, const Array& rsigma,
                             const Array& gamma, const std::string& normalization, bool zero_centered_gamma,
                             std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.layers.layernorm_linear_backward";
  const backend::NormOp op = norm_op_of(fn, normalization);
  require_gpu(fn, "dy");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, dy, "dy", 2);
  same_device(fn, device, device_f32(fn, xhat, "xhat", 2), "xhat");
  same_device(fn, device, device_f32(fn, rsigma, "rsigma", 1), "rsigma");
  same_device(fn, device, device_f32(fn, gamma, "ln_weight", 1), "ln_weight");
  const std::int64_t rows = std::int64_t(dy.shape(0)), cols = std::int64_t(dy.shape(1));
  if (shape_of(xhat) != shape_of(dy) || std::int64_t(rsigma.shape(0)) != rows || std::int64_t(gamma.shape(0)) != cols)
    value_error(fn, "dy " + shape_text(shape_of(dy)) + ", xhat " + shape_text(shape_of(xhat)) + ", rsigma " +
                        shape_text(shape_of(rsigma)) + " and ln_weight " + shape_text(shape_of(gamma)) +
                        " do not match (the forward's rows and features)");
  if (grad_ln_out) {
    same_device(fn, device, device_f32(fn, *grad_ln_out, "grad_ln_out", 2), "grad_ln_out");
    if (shape_of(*grad_ln_out) != shape_of(dy))
      value_error(fn, "grad_ln_out has shape " + shape_text(shape_of(*grad_ln_out)) + "; expected " +
                          shape_text(shape_of(dy)) + " (the norm output's)");
  }
  require_device_gpu(fn, "dy", device);
  DeviceScope scope(fn, device);
  std::optional<OutArray> none;
  Output dx = output_for(fn, none, device, {rows, cols}, nb::dtype<float>(), false, framework);
  Output dg = output_for(fn, none, device, {cols}, nb::dtype<float>(), false, framework);
  Output db = output_for(fn, none, device, {cols}, nb::dtype<float>(), false, framework);
  auto* pdg = static_cast<float*>(dg.data);
  const float* pgl = grad_ln_out ? static_cast<const float*>(grad_ln_out->data()) : nullptr;
  on_device(fn, stream, cols > 0 ? pdg : nullptr, [&](const backend::Device& dev) {
    // The norm output's gradient: the Linear's dgrad plus grad_ln_out, one fp32 add per element
    // (Device::add, core::add_rn), as the host adds them.
    const float* pdy = static_cast<const float*>(dy.data());
    backend::DeviceTensor<float> sum;
    if (pgl && rows > 0) {
      sum = backend::DeviceTensor<float>(dev, int(rows), int(cols));
      dev.add(pdy, pgl, sum.get(), std::size_t(rows) * std::size_t(cols));
      pdy = sum.get();
    }
    dev.norm_backward(op, pdy, static_cast<const float*>(xhat.data()),
                      static_cast<const float*>(rsigma.data()), int(rows), int(cols),
                      static_cast<const float*>(gamma.data()), zero_centered_gamma, static_cast<float*>(dx.data), pdg,
                      static_cast<float*>(db.data));
  });
  return nb::make_tuple(dx.result, dg.result, db.result);
#else
  (void)dy, (void)grad_ln_out, (void)xhat, (void)rsigma, (void)gamma, (void)zero_centered_gamma, (void)stream,
      (void)framework, (void)op;
  return {};
#endif
}

}  // namespace fp8emu::python
