// The GPU path of the recipes: fp8emu.Quantizer.quantize, fp8emu.recipe.gemm and fp8emu.layers'
// Linear step on CUDA arrays, through the quantizers' device cast, scaling::gemm_tn and the step
// program nn::fp8_linear_fprop / fp8_linear_backward on backend::cuda_device() (cuda_support.hpp
// says what the entry points share).
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
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/nn/linear_step.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8emu::python {
using namespace gpu;

nb::tuple cuda_quantize(scaling::Quantizer& q, const Array& x, scaling::TensorRole role, scaling::Usage usage,
                        std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.Quantizer.quantize";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(x, fn, "x");
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    type_error(fn, "x is a CUDA array of dtype " + dtype_text(x.dtype()) + "; quantizers take float32 (TE casts fp32 "
                   "master values)");
  if (x.ndim() != 2)
    value_error(fn, "x has " + std::to_string(x.ndim()) + " dimensions; quantizers take 2-D (rows, cols) tensors");
  if (x.shape(0) > 0x7FFFFFFF || x.shape(1) > 0x7FFFFFFF) value_error(fn, "x: a dimension exceeds 2^31 - 1");
  const int rows = int(x.shape(0)), cols = int(x.shape(1));
  require_device_gpu(fn, "x", device);
  DeviceScope scope(fn, device);
  CudaQuantized t = new_operand(fn, q, rows, cols, role, usage, device, framework);
  scaling::DeviceOperand& op = t.op;
  const float* px = static_cast<const float*>(x.data());
  emu::QuantizeStats st;
  // quantize_device returns when its results are complete: nothing more to wait for.
  on_device(fn, stream, nullptr,
            [&](const backend::Device& dev) { q.quantize_device(dev, px, rows, cols, role, op, &st); });
  return nb::make_tuple(nb::cast(std::move(t)), counts_dict(st));
#else
  (void)q, (void)x, (void)role, (void)usage, (void)stream, (void)framework;
  return {};
#endif
}

nb::object cuda_gemm_tn(nb::handle a, scaling::Usage a_usage, nb::handle b, scaling::Usage b_usage,
                        const emu::GemmAccumulation& acc) {
  const char* fn = "fp8emu.recipe.gemm";
  require_gpu(fn, "a");
#ifdef FP8EMU_HAVE_CUDA
  for (const auto& [h, name] : {std::pair<nb::handle, const char*>{a, "a"}, {b, "b"}})
    if (!nb::isinstance<CudaQuantized>(h))
      type_error(fn, std::string(name) + " is not a quantized tensor on the GPU (from Quantizer.quantize of a CUDA "
                                         "array)");
  const CudaQuantized& ta = nb::cast<const CudaQuantized&>(a);
  const CudaQuantized& tb = nb::cast<const CudaQuantized&>(b);
  same_device(fn, ta.device, tb.device, "b");
  const bool arow = a_usage == scaling::Usage::kRowwise, brow = b_usage == scaling::Usage::kRowwise;
  const std::int64_t M = arow ? ta.op.rows : ta.op.cols, N = brow ? tb.op.rows : tb.op.cols;
  DeviceScope scope(fn, ta.device);
  std::optional<OutArray> none;
  Output o = output_for(fn, none, ta.device, {M, N}, nb::dtype<float>(), false, ta.framework);
  auto* d = static_cast<float*>(o.data);
  // The operands are complete (Quantizer.quantize returned); D's first element read back waits for
  // the GEMM (M, N >= 1).
  on_device(fn, 0, d, [&](const backend::Device& dev) { scaling::gemm_tn(dev, ta.op, a_usage, tb.op, b_usage, acc, d); });
  return o.result;
#else
  (void)a, (void)a_usage, (void)b, (void)b_usage, (void)acc;
  return nb::none();
#endif
}

// fp8emu.layers' FP8 Linear step on CUDA arrays: nn::fp8_linear_fprop / fp8_linear_backward on
// backend::cuda_device(), the program nn::Linear runs, with new CUDA arrays of `framework` for the
// results and the input's (dy's) quantized tensor.
nb::tuple cuda_linear_fprop(const Array& x, std::optional<Array> weight, nb::handle weight_q, std::optional<Array> bias,
                            scaling::Quantizer& fwd, bool training, const emu::GemmAccumulation& acc,
                            std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.layers.linear_forward";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, x, "x", 2);
  const int rows = int(x.shape(0)), in = int(x.shape(1));
  if (rows < 1 || in < 1) value_error(fn, "x has shape " + shape_text(shape_of(x)) + "; it needs rows and features");
  if (weight_q.is_none() && !weight) value_error(fn, "give weight or weight_q");
  if (weight_q.is_none()) same_device(fn, device, device_f32(fn, *weight, "weight", 2), "weight");
  const CudaQuantized* given = weight_q.is_none() ? nullptr : &cuda_operand(weight_q, fn, "weight_q");
  if (given) same_device(fn, device, given->device, "weight_q");
  const int out = given ? given->op.rows : int(weight->shape(0));
  const int w_in = given ? given->op.cols : int(weight->shape(1));
  if (in != w_in) value_error(fn, "x has " + std::to_string(in) + " features; the weight takes " + std::to_string(w_in));
  const float* pb = nullptr;
  if (bias) {
    same_device(fn, device, device_f32(fn, *bias, "bias", 1), "bias");
    if (std::int64_t(bias->shape(0)) != out)
      value_error(fn, "bias has shape " + shape_text(shape_of(*bias)) + "; expected (" + std::to_string(out) + ",)");
    pb = static_cast<const float*>(bias->data());
  }
  require_device_gpu(fn, "x", device);
  DeviceScope scope(fn, device);
  std::optional<CudaQuantized> wq_new;
  if (!given)
    wq_new = new_operand(fn, fwd, out, in, scaling::TensorRole::kWeight, scaling::Usage::kBoth, device, framework);
  CudaQuantized xq = new_operand(fn, fwd, rows, in, scaling::TensorRole::kInput,
                                 training ? scaling::Usage::kBoth : scaling::Usage::kRowwise, device, framework);
  const scaling::DeviceOperand& w_op = wq_new ? wq_new->op : given->op;
  try {
    nn::check_fp8_linear_fprop(fwd, xq.op, rows, w_op, acc);  // every check before the first cast
  } catch (const fp8emu::Error& e) {
    value_error(fn, e.what());
  }
  std::optional<OutArray> none;
  Output y = output_for(fn, none, device, {rows, out}, nb::dtype<float>(), false, framework);
  const float* px = static_cast<const float*>(x.data());
  const float* pw = wq_new ? static_cast<const float*>(weight->data()) : nullptr;
  backend::CastCounters c[2]{};
  on_device(fn, stream, nullptr, [&](const backend::Device& dev) {
    backend::DeviceTensor<backend::CastCounters> counters(dev, 1, 2);
    if (wq_new) fwd.cast(dev, pw, out, in, scaling::TensorRole::kWeight, wq_new->op, counters.get() + 1);
    nn::fp8_linear_fprop(dev, fwd, px, rows, xq.op, w_op, pb, acc, static_cast<float*>(y.data), counters.get());
    counters.download(c);  // waits for the step
    scaling::download_host_scale(dev, xq.op);
    if (wq_new) scaling::download_host_scale(dev, wq_new->op);
  });
  nb::object w_out = nb::none();
  if (wq_new) w_out = nb::make_tuple(nb::cast(std::move(*wq_new)), counts_dict(backend::stats_of(c[1])));
  return nb::make_tuple(y.result, nb::cast(std::move(xq)), counts_dict(backend::stats_of(c[0])), w_out);
#else
  (void)x, (void)weight, (void)weight_q, (void)bias, (void)fwd, (void)training, (void)acc, (void)stream,
      (void)framework;
  return {};
#endif
}

nb::tuple cuda_linear_backward(const Array& dy, nb::handle x_q, nb::handle weight_q, scaling::Quantizer& bwd,
                               bool need_dgrad, bool need_wgrad, const emu::GemmAccumulation& acc,
                               std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.layers.linear_backward";
  require_gpu(fn, "dy");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, dy, "dy", 2);
  const CudaQuantized& xq = cuda_operand(x_q, fn, "the saved input");
  const CudaQuantized& w = cuda_operand(weight_q, fn, "the saved weight");
  same_device(fn, device, xq.device, "the saved input");
  same_device(fn, device, w.device, "the saved weight");
  const int rows = xq.op.rows, in = xq.op.cols, out = w.op.rows;
  if (std::int64_t(dy.shape(0)) != rows || std::int64_t(dy.shape(1)) != out)
    value_error(fn, "dy has shape " + shape_text(shape_of(dy)) + "; the forward output was (" + std::to_string(rows) +
                        ", " + std::to_string(out) + ")");
  require_device_gpu(fn, "dy", device);
  DeviceScope scope(fn, device);
  CudaQuantized dyq =
      new_operand(fn, bwd, rows, out, scaling::TensorRole::kGradOutput, scaling::Usage::kBoth, device, framework);
  std::optional<OutArray> none;
  Output db = output_for(fn, none, device, {out}, nb::dtype<float>(), false, framework);
  Output dx, dw;
  if (need_dgrad) dx = output_for(fn, none, device, {rows, in}, nb::dtype<float>(), false, framework);
  if (need_wgrad) dw = output_for(fn, none, device, {out, in}, nb::dtype<float>(), false, framework);
  const float* pdy = static_cast<const float*>(dy.data());
  backend::CastCounters c{};
  on_device(fn, stream, nullptr, [&](const backend::Device& dev) {
    backend::DeviceTensor<backend::CastCounters> counters(dev, 1, 1);
    nn::fp8_linear_backward(dev, bwd, pdy, rows, dyq.op, xq.op, w.op, acc, acc, static_cast<float*>(dx.data),
                            static_cast<float*>(dw.data), static_cast<float*>(db.data), counters.get());
    counters.download(&c);  // waits for the step
  });
  return nb::make_tuple(need_dgrad ? dx.result : nb::none(), need_wgrad ? dw.result : nb::none(), db.result,
                        counts_dict(backend::stats_of(c)));
#else
  (void)dy, (void)x_q, (void)weight_q, (void)bwd, (void)need_dgrad, (void)need_wgrad, (void)acc, (void)stream,
      (void)framework;
  return {};
#endif
}

}  // namespace fp8emu::python
