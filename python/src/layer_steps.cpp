// fp8emu.layers' FP8 Linear step: the C++ step program (nn::fp8_linear_fprop, fp8_linear_backward,
// include/fp8emu/nn/linear_step.hpp) on the device of the arrays given, so Python runs the same
// program as nn::Linear instead of composing casts and GEMMs itself. Host arrays run on
// backend::cpu_device() with host QuantizedTensors; CUDA arrays on backend::cuda_device()
// (cuda_linear_fprop / cuda_linear_backward in cuda_arrays.cpp) with CudaQuantizedTensors.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/linear_step.hpp"
#include "fp8emu/scaling/quantizer.hpp"

#include "arrays.hpp"

namespace fp8emu::python {
namespace {

using namespace nb::literals;
using scaling::QuantizedTensor;
using scaling::TensorRole;
using scaling::Usage;

bool on_cuda(const Array& a) { return a.device_type() == nb::device::cuda::value; }

// A float32 host array of `ndim` dimensions (each below 2^31).
const float* host_f32(const Array& a, const char* fn, const char* what, std::size_t ndim) {
  check_array(a, what);
  if (!is(a.dtype(), dl::dtype_code::Float, 32))
    throw nb::type_error((std::string(fn) + ": " + what + " has dtype " + dtype_text(a.dtype()) + "; it must be float32")
                             .c_str());
  if (a.ndim() != ndim)
    throw nb::value_error((std::string(fn) + ": " + what + " has " + std::to_string(a.ndim()) + " dimensions; expected " +
                           std::to_string(ndim))
                              .c_str());
  for (std::size_t i = 0; i < ndim; ++i)
    if (a.shape(i) > 0x7FFFFFFF) throw nb::value_error((std::string(fn) + ": " + what + ": a dimension exceeds 2^31 - 1").c_str());
  return static_cast<const float*>(a.data());
}

const QuantizedTensor& host_operand(nb::handle h, const char* fn, const char* what) {
  if (!nb::isinstance<QuantizedTensor>(h))
    throw nb::type_error((std::string(fn) + ": " + what + " is not a quantized tensor in host memory (the arrays are "
                          "host arrays: quantize it from a host array)")
                             .c_str());
  return nb::cast<const QuantizedTensor&>(h);
}

// A new float32 NumPy array of `shape` owning `v`.
nb::object numpy_owning(std::vector<float>* v, std::initializer_list<std::size_t> shape) {
  nb::capsule own(v, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, float>(v->data(), shape.size(), shape.begin(), own));
}

nb::tuple linear_fprop(const Array& x, std::optional<Array> weight, nb::handle weight_q, std::optional<Array> bias,
                       PyQuantizer& fwd, bool training, const std::string& accumulation, int promotion,
                       std::uintptr_t stream, const std::string& framework) {
  const emu::GemmAccumulation acc{emu::parse_accumulation(accumulation), promotion};
  if (on_cuda(x)) return cuda_linear_fprop(x, weight, weight_q, bias, *fwd.q, training, acc, stream, framework);
  const char* fn = "fp8emu.layers.linear_forward";
  const float* px = host_f32(x, fn, "x", 2);
  const int rows = int(x.shape(0)), in = int(x.shape(1));
  if (rows < 1 || in < 1)
    throw nb::value_error((std::string(fn) + ": x has shape " + shape_text(shape_of(x)) + "; it needs rows and features")
                              .c_str());
  // The weight: cast here (after every check) from `weight`, or the caller's cast `weight_q`.
  std::optional<QuantizedTensor> wq_new;
  const float* pw = nullptr;
  if (weight_q.is_none()) {
    if (!weight) throw nb::value_error((std::string(fn) + ": give weight or weight_q").c_str());
    pw = host_f32(*weight, fn, "weight", 2);
    wq_new = scaling::host_quantized_tensor(scaling::device_operand(*fwd.q, int(weight->shape(0)),
                                                                    int(weight->shape(1)), TensorRole::kWeight,
                                                                    Usage::kBoth));
  }
  const QuantizedTensor& w = wq_new ? *wq_new : host_operand(weight_q, fn, "weight_q");
  const int out = w.rows;
  if (in != w.cols)
    throw nb::value_error((std::string(fn) + ": x has " + std::to_string(in) + " features; the weight takes " +
                           std::to_string(w.cols))
                              .c_str());
  const float* pb = nullptr;
  if (bias) {
    pb = host_f32(*bias, fn, "bias", 1);
    if (std::int64_t(bias->shape(0)) != out)
      throw nb::value_error((std::string(fn) + ": bias has shape " + shape_text(shape_of(*bias)) + "; expected (" +
                             std::to_string(out) + ",)")
                                .c_str());
  }
  QuantizedTensor xq = scaling::host_quantized_tensor(
      scaling::device_operand(*fwd.q, rows, in, TensorRole::kInput, training ? Usage::kBoth : Usage::kRowwise));
  scaling::DeviceOperand x_op = scaling::host_view(xq), w_op = scaling::host_view(w);
  nn::check_fp8_linear_fprop(*fwd.q, x_op, rows, w_op, acc);  // every check before the first cast
  auto* y = new std::vector<float>(std::size_t(rows) * std::size_t(out));
  nb::object y_arr = numpy_owning(y, {std::size_t(rows), std::size_t(out)});
  backend::CastCounters counts{}, w_counts{};
  {
    nb::gil_scoped_release release;
    const backend::Device& d = backend::cpu_device();
    if (wq_new) {
      fwd.q->cast(d, pw, out, in, TensorRole::kWeight, w_op, &w_counts);
      scaling::finish_host_cast(*wq_new);
    }
    nn::fp8_linear_fprop(d, *fwd.q, px, rows, x_op, w_op, pb, acc, y->data(), &counts);
    scaling::finish_host_cast(xq);
  }
  nb::object w_out = nb::none();
  if (wq_new) w_out = nb::make_tuple(nb::cast(std::move(*wq_new)), counts_dict(backend::stats_of(w_counts)));
  return nb::make_tuple(y_arr, nb::cast(std::move(xq)), counts_dict(backend::stats_of(counts)), w_out);
}

nb::tuple linear_backward(const Array& dy, nb::handle x_q, nb::handle weight_q, PyQuantizer& bwd, bool need_dgrad,
                          bool need_wgrad, const std::string& accumulation, int promotion, std::uintptr_t stream,
                          const std::string& framework) {
  const emu::GemmAccumulation acc{emu::parse_accumulation(accumulation), promotion};
  if (on_cuda(dy)) return cuda_linear_backward(dy, x_q, weight_q, *bwd.q, need_dgrad, need_wgrad, acc, stream, framework);
  const char* fn = "fp8emu.layers.linear_backward";
  const float* pdy = host_f32(dy, fn, "dy", 2);
  const QuantizedTensor& xq = host_operand(x_q, fn, "the saved input");
  const QuantizedTensor& w = host_operand(weight_q, fn, "the saved weight");
  const int rows = xq.rows, in = xq.cols, out = w.rows;
  if (std::int64_t(dy.shape(0)) != rows || std::int64_t(dy.shape(1)) != out)
    throw nb::value_error((std::string(fn) + ": dy has shape " + shape_text(shape_of(dy)) + "; the forward output was (" +
                           std::to_string(rows) + ", " + std::to_string(out) + ")")
                              .c_str());
  QuantizedTensor dyq =
      scaling::host_quantized_tensor(scaling::device_operand(*bwd.q, rows, out, TensorRole::kGradOutput, Usage::kBoth));
  auto* db = new std::vector<float>(std::size_t(out));
  nb::object db_arr = numpy_owning(db, {std::size_t(out)});
  std::vector<float>* dx = need_dgrad ? new std::vector<float>(std::size_t(rows) * std::size_t(in)) : nullptr;
  nb::object dx_arr = dx ? numpy_owning(dx, {std::size_t(rows), std::size_t(in)}) : nb::none();
  std::vector<float>* dw = need_wgrad ? new std::vector<float>(std::size_t(out) * std::size_t(in)) : nullptr;
  nb::object dw_arr = dw ? numpy_owning(dw, {std::size_t(out), std::size_t(in)}) : nb::none();
  backend::CastCounters counts{};
  {
    nb::gil_scoped_release release;
    scaling::DeviceOperand dy_op = scaling::host_view(dyq);
    nn::fp8_linear_backward(backend::cpu_device(), *bwd.q, pdy, rows, dy_op, scaling::host_view(xq),
                            scaling::host_view(w), acc, acc, dx ? dx->data() : nullptr, dw ? dw->data() : nullptr,
                            db->data(), &counts);
  }
  return nb::make_tuple(dx_arr, dw_arr, db_arr, counts_dict(backend::stats_of(counts)));
}

backend::NormOp norm_op_of(const char* fn, const std::string& s) {
  if (s == "LayerNorm") return backend::NormOp::kLayerNorm;
  if (s == "RMSNorm") return backend::NormOp::kRMSNorm;
  throw nb::value_error((std::string(fn) + ": unknown normalization '" + s + "' (accepted: LayerNorm, RMSNorm)").c_str());
}

// The norm of layernorm_linear_forward: Device::norm_forward (nn::Norm's arithmetic) then, with
// round_bf16, Device::round_bf16 of its output; (y, xhat, rsigma, a copy of gamma) on x's device.
nb::tuple norm_forward(const Array& x, const Array& gamma, std::optional<Array> beta, const std::string& normalization,
                       float eps, bool zero_centered_gamma, bool round_bf16, std::uintptr_t stream,
                       const std::string& framework) {
  if (on_cuda(x))
    return cuda_norm_forward(x, gamma, beta, normalization, eps, zero_centered_gamma, round_bf16, stream, framework);
  const char* fn = "fp8emu.layers.layernorm_linear_forward";
  const backend::NormOp op = norm_op_of(fn, normalization);
  const float* px = host_f32(x, fn, "x", 2);
  const float* pg = host_f32(gamma, fn, "ln_weight", 1);
  const float* pb = beta ? host_f32(*beta, fn, "ln_bias", 1) : nullptr;
  const std::size_t rows = x.shape(0), cols = x.shape(1);
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&gamma, "ln_weight"},
                                  {beta ? &*beta : nullptr, "ln_bias"}})
    if (arr && arr->shape(0) != cols)
      throw nb::value_error((std::string(fn) + ": " + name + " has shape " + shape_text(shape_of(*arr)) +
                             "; expected (" + std::to_string(cols) + ",)")
                                .c_str());
  // nn::Norm's own checks, with its messages.
  if (cols == 0) throw nb::value_error((std::string(fn) + ": Norm: features must be positive, got 0").c_str());
  if (!std::isfinite(eps) || eps < 0.0f)
    throw nb::value_error((std::string(fn) + ": Norm: eps must be finite and >= 0, got " + std::to_string(eps)).c_str());
  auto* y = new std::vector<float>(rows * cols);
  auto* xhat = new std::vector<float>(rows * cols);
  auto* rsigma = new std::vector<float>(rows);
  auto* g = new std::vector<float>(pg, pg + cols);  // the backward's gamma is the forward's (nn::Norm keeps a copy)
  nb::object ys = numpy_owning(y, {rows, cols}), xs = numpy_owning(xhat, {rows, cols}),
             rs = numpy_owning(rsigma, {rows}), gs = numpy_owning(g, {cols});
  {
    nb::gil_scoped_release release;
    const backend::Device& d = backend::cpu_device();
    const std::vector<float> zeros(pb || op != backend::NormOp::kLayerNorm ? 0 : cols, 0.0f);  // nn::Norm's beta
    d.norm_forward(op, px, int(rows), int(cols), g->data(), pb ? pb : zeros.data(), eps, zero_centered_gamma,
                   y->data(), xhat->data(), rsigma->data());
    if (round_bf16) d.round_bf16(y->data(), rows * cols);
  }
  return nb::make_tuple(ys, xs, rs, gs);
}

// Its backward: Device::add of grad_ln_out (when given) to dy, then Device::norm_backward;
// (dx, grad_gamma, grad_beta) on dy's device, grad_beta zeros for RMSNorm.
nb::tuple norm_backward(const Array& dy, std::optional<Array> grad_ln_out, const Array& xhat, const Array& rsigma,
                        const Array& gamma, const std::string& normalization, bool zero_centered_gamma,
                        std::uintptr_t stream, const std::string& framework) {
  if (on_cuda(dy))
    return cuda_norm_backward(dy, grad_ln_out, xhat, rsigma, gamma, normalization, zero_centered_gamma, stream,
                              framework);
  const char* fn = "fp8emu.layers.layernorm_linear_backward";
  const backend::NormOp op = norm_op_of(fn, normalization);
  const float* pdy = host_f32(dy, fn, "dy", 2);
  const float* pxh = host_f32(xhat, fn, "xhat", 2);
  const float* prs = host_f32(rsigma, fn, "rsigma", 1);
  const float* pg = host_f32(gamma, fn, "ln_weight", 1);
  const std::size_t rows = dy.shape(0), cols = dy.shape(1);
  if (shape_of(xhat) != shape_of(dy) || rsigma.shape(0) != rows || gamma.shape(0) != cols)
    throw nb::value_error((std::string(fn) + ": dy " + shape_text(shape_of(dy)) + ", xhat " + shape_text(shape_of(xhat)) +
                           ", rsigma " + shape_text(shape_of(rsigma)) + " and ln_weight " + shape_text(shape_of(gamma)) +
                           " do not match (the forward's rows and features)")
                              .c_str());
  const float* pgl = nullptr;
  if (grad_ln_out) {
    pgl = host_f32(*grad_ln_out, fn, "grad_ln_out", 2);
    if (shape_of(*grad_ln_out) != shape_of(dy))
      throw nb::value_error((std::string(fn) + ": grad_ln_out has shape " + shape_text(shape_of(*grad_ln_out)) +
                             "; expected " + shape_text(shape_of(dy)) + " (the norm output's)")
                                .c_str());
  }
  auto* dx = new std::vector<float>(rows * cols);
  auto* dg = new std::vector<float>(cols);
  auto* db = new std::vector<float>(cols);
  nb::object dxs = numpy_owning(dx, {rows, cols}), dgs = numpy_owning(dg, {cols}), dbs = numpy_owning(db, {cols});
  {
    nb::gil_scoped_release release;
    const backend::Device& d = backend::cpu_device();
    std::vector<float> sum;
    if (pgl) {  // the norm output's gradient: the Linear's dgrad plus grad_ln_out, one fp32 add each
      sum.resize(rows * cols);
      d.add(pdy, pgl, sum.data(), rows * cols);
      pdy = sum.data();
    }
    d.norm_backward(op, pdy, pxh, prs, int(rows), int(cols), pg, zero_centered_gamma, dx->data(), dg->data(),
                    db->data());
  }
  return nb::make_tuple(dxs, dgs, dbs);
}

}  // namespace

void bind_layer_steps(nb::module_& m) {
  m.def("norm_forward", &norm_forward, "x"_a, "gamma"_a, "beta"_a.none(), "normalization"_a, "eps"_a,
        "zero_centered_gamma"_a, "round_bf16"_a, "stream"_a, "framework"_a,
        "LayerNorm/RMSNorm forward (Device::norm_forward, nn::Norm's arithmetic) on x's device: (y, xhat, rsigma, "
        "gamma copy); see fp8emu.layers.layernorm_linear_forward.");
  m.def("norm_backward", &norm_backward, "dy"_a, "grad_ln_out"_a.none(), "xhat"_a, "rsigma"_a, "gamma"_a,
        "normalization"_a, "zero_centered_gamma"_a, "stream"_a, "framework"_a,
        "LayerNorm/RMSNorm backward (Device::add of grad_ln_out, Device::norm_backward) on dy's device: (dx, "
        "grad_gamma, grad_beta).");
  m.def("linear_fprop", &linear_fprop, "x"_a, "weight"_a.none(), "weight_q"_a.none(), "bias"_a.none(), "fwd"_a,
        "training"_a, "accumulation"_a, "promotion"_a, "stream"_a, "framework"_a,
        "fprop of an FP8 Linear on x's device, every check before the first cast: the weight's cast when "
        "weight_q is None, then nn::fp8_linear_fprop: (y, x_q, x counts, (w_q, w counts) or None); see "
        "fp8emu.layers.linear_forward.");
  m.def("linear_backward", &linear_backward, "dy"_a, "x_q"_a.none(), "weight_q"_a.none(), "bwd"_a, "need_dgrad"_a, "need_wgrad"_a,
        "accumulation"_a, "promotion"_a, "stream"_a, "framework"_a,
        "dgrad, wgrad and bias grad of an FP8 Linear (nn::fp8_linear_backward) on dy's device: (dx, dw, db, "
        "counts); see fp8emu.layers.linear_backward.");
}

}  // namespace fp8emu::python
