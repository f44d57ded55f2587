// The GPU path of the array functions: fp8emu.cast, fp8emu.decode and fp8emu.gemm on CUDA DLPack
// arrays (python/fp8emu/_cuda.py calls these), through the device-pointer API of the CUDA library
// (include/fp8emu/cuda/device.hpp): the kernels run on the arrays' own memory, no host copies; and
// bind_cuda, which registers every GPU entry point (cuda_support.hpp says what they share).
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
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/emulation/cast_policy.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8emu::python {
using namespace gpu;

// fp8emu.cast on a CUDA array: the twin of emu::quantize (float32 in, E4M3/E5M2 codes out, CUDA's
// satfinite cast). Returns (codes, stats).
nb::tuple cuda_cast(const Array& x, const std::string& format, float scale, const std::string& policy,
                    const std::string& rounding, std::uintptr_t stream, const std::string& framework,
                    std::optional<OutArray> out) {
  const char* fn = "fp8emu.cast";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(x, fn, "x");
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    type_error(fn, "x is a CUDA array of dtype " + dtype_text(x.dtype()) +
                       "; the GPU path casts float32 only (the CUDA twin of emu::quantize): convert it to float32 on "
                       "the GPU first, or copy it to the host for the other source types");
  const Format f = gpu_fp8_format(fn, format, "casts to", "x");
  emu::CastPolicy p;
  try {
    p = emu::resolve_cast_policy(f, policy, rounding, "policy", "rounding");
  } catch (const fp8emu::Error& e) {
    value_error(fn, e.what());
  }
  if (!p.is_cuda_satfinite_fp8())
    value_error(fn, "policy '" + policy + "'" + (rounding.empty() ? "" : " with rounding '" + rounding + "'") +
                        " on a CUDA array: the GPU path is CUDA's __NV_SATFINITE round-to-nearest cast (policy "
                        "'cuda', rounding 'nearest'); copy x to the host for the other policies and roundings");
  const std::vector<std::int64_t> shape = shape_of(x);
  DeviceScope scope(fn, device);
  Output o = output_for(fn, out, device, shape, nb::dtype<std::uint8_t>(), true, framework);
  const float* px = static_cast<const float*>(x.data());
  auto* q = static_cast<std::uint8_t*>(o.data);
  const std::size_t n = x.size();
  cuda::CastStats st;
  run_released(fn, [&] {
    const cudaStream_t s = stream_of(stream);
    StatsScratch t(s);
    cuda::quantize(px, n, scale, f, q, t.get(), s);
    st = cuda::read_stats(t.get(), s);  // waits for the stream
  });
  return nb::make_tuple(o.result, stats_dict(st, n));
#else
  (void)x, (void)format, (void)scale, (void)policy, (void)rounding, (void)stream, (void)framework, (void)out;
  return {};
#endif
}

// Recipes' per-tensor cast on a CUDA array: the twin of Device::cast_transpose (x float32 [rows,
// cols]; row-wise codes [rows, cols] and/or column-wise codes [cols, rows]). Returns (rowwise or
// None, columnwise or None, stats).
nb::tuple cuda_cast_transpose(const Array& x, const std::string& format, float scale, bool rowwise, bool columnwise,
                              std::uintptr_t stream, const std::string& framework) {
  const char* fn = "fp8emu.Quantizer.quantize";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(x, fn, "x");
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    type_error(fn, "x is a CUDA array of dtype " + dtype_text(x.dtype()) + "; quantizers take float32");
  if (x.ndim() != 2)
    value_error(fn, "x has " + std::to_string(x.ndim()) + " dimensions; quantizers take 2-D (rows, cols) tensors");
  if (x.shape(0) > 0x7FFFFFFF || x.shape(1) > 0x7FFFFFFF) value_error(fn, "x: a dimension exceeds 2^31 - 1");
  if (!rowwise && !columnwise) value_error(fn, "neither the row-wise nor the column-wise copy was asked for");
  const Format f = format_of(format, "format");
  const std::int64_t rows = std::int64_t(x.shape(0)), cols = std::int64_t(x.shape(1));
  DeviceScope scope(fn, device);
  std::optional<OutArray> none;
  nb::object r = nb::none(), c = nb::none();
  void* pr = nullptr;
  void* pc = nullptr;
  if (rowwise) {
    Output o = output_for(fn, none, device, {rows, cols}, nb::dtype<std::uint8_t>(), true, framework);
    pr = o.data, r = o.result;
  }
  if (columnwise) {
    Output o = output_for(fn, none, device, {cols, rows}, nb::dtype<std::uint8_t>(), true, framework);
    pc = o.data, c = o.result;
  }
  const float* px = static_cast<const float*>(x.data());
  cuda::CastStats st;
  run_released(fn, [&] {
    const cudaStream_t s = stream_of(stream);
    StatsScratch t(s);
    cuda::cast_transpose(px, int(rows), int(cols), scale, f, static_cast<std::uint8_t*>(pr),
                         static_cast<std::uint8_t*>(pc), t.get(), s);
    st = cuda::read_stats(t.get(), s);
  });
  return nb::make_tuple(r, c, stats_dict(st, std::size_t(rows) * std::size_t(cols)));
#else
  (void)x, (void)format, (void)scale, (void)rowwise, (void)columnwise, (void)stream, (void)framework;
  return {};
#endif
}

// The amax of a float32 CUDA array (emu::compute_amax's twin): current scaling's first pass.
float cuda_amax(const Array& x, std::uintptr_t stream) {
  const char* fn = "fp8emu.Quantizer.quantize";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(x, fn, "x");
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    type_error(fn, "x is a CUDA array of dtype " + dtype_text(x.dtype()) + "; quantizers take float32");
  DeviceScope scope(fn, device);
  const float* px = static_cast<const float*>(x.data());
  const std::size_t n = x.size();
  cuda::CastStats st;
  run_released(fn, [&] {
    const cudaStream_t s = stream_of(stream);
    StatsScratch t(s);
    cuda::amax(px, n, &t.get()->amax_bits, s);
    st = cuda::read_stats(t.get(), s);
  });
  return st.amax;
#else
  (void)x, (void)stream;
  return 0.0f;
#endif
}

// fp8emu.decode on a CUDA array: the twin of emu::dequantize (E4M3/E5M2 codes in, float32 out).
nb::object cuda_decode(const Array& codes, const std::string& format, float scale_inv, std::uintptr_t stream,
                       const std::string& framework, std::optional<OutArray> out) {
  const char* fn = "fp8emu.decode";
  require_gpu(fn, "codes");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(codes, fn, "codes");
  if (!is_code_dtype(codes.dtype()))
    type_error(fn, "codes is a CUDA array of dtype " + dtype_text(codes.dtype()) +
                       "; decode takes 8-bit codes (uint8 or a float8 dtype)");
  const Format f = gpu_fp8_format(fn, format, "decodes", "the codes");
  const std::vector<std::int64_t> shape = shape_of(codes);
  DeviceScope scope(fn, device);
  Output o = output_for(fn, out, device, shape, nb::dtype<float>(), false, framework);
  const auto* q = static_cast<const std::uint8_t*>(codes.data());
  auto* y = static_cast<float*>(o.data);
  const std::size_t n = codes.size();
  run_released(fn, [&] {
    const cudaStream_t s = stream_of(stream);
    cuda::dequantize(q, n, scale_inv, f, y, s);
    sync(s);
  });
  return o.result;
#else
  (void)codes, (void)format, (void)scale_inv, (void)stream, (void)framework, (void)out;
  return nb::none();
#endif
}

// fp8emu.gemm on CUDA arrays: the twin of emu::gemm_fp8_tn with its GemmEpilogue (alpha, beta * c,
// bias, the output type and d_scale). layout "nn" transposes b on the GPU first. Returns (D, amax of
// the epilogue's values or None).
nb::tuple cuda_gemm(const Array& a, const Array& b, const std::string& format_a, const std::string& format_b,
                    float scale_inv_a, float scale_inv_b, const std::string& accumulation, int promotion, int split_k,
                    const std::string& layout, const std::string& out_kind, float d_scale, float alpha, float beta,
                    std::optional<Array> c, std::optional<Array> bias, bool return_amax, std::uintptr_t stream,
                    const std::string& framework, std::optional<OutArray> out) {
  const char* fn = "fp8emu.gemm";
  require_gpu(fn, "a");
#ifdef FP8EMU_HAVE_CUDA
  const int device = check_cuda_array(a, fn, "a");
  same_device(fn, device, check_cuda_array(b, fn, "b"), "b");
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&a, "a"}, {&b, "b"}}) {
    if (!is_code_dtype(arr->dtype()))
      type_error(fn, std::string(name) + " is a CUDA array of dtype " + dtype_text(arr->dtype()) +
                         "; gemm takes FP8 codes (uint8 with format_" + name +
                         ", or a float8_e4m3fn / float8_e5m2 array): quantize it first, e.g. fp8emu.cast(x, 'e4m3fn')");
    if (arr->ndim() != 2)
      value_error(fn, std::string(name) + " has " + std::to_string(arr->ndim()) + " dimensions; gemm takes 2-D operands");
  }
  const Format fa = format_of(format_a, "format_a"), fb = format_of(format_b, "format_b");
  if (!is_fp8(fa) || !is_fp8(fb))
    value_error(fn, "gemm takes OCP FP8 operands (e4m3fn, e5m2); got format_a " + std::string(format_name(fa)) +
                        ", format_b " + format_name(fb));
  bool tn = true;
  try {
    tn = emu::parse_gemm_layout(layout, "layout") == emu::GemmLayout::kTn;
  } catch (const fp8emu::Error& e) {
    value_error(fn, e.what());
  }
  const std::int64_t M = std::int64_t(a.shape(0)), K = std::int64_t(a.shape(1));
  const std::int64_t b0 = std::int64_t(b.shape(0)), b1 = std::int64_t(b.shape(1));
  if ((tn ? b1 : b0) != K)
    value_error(fn, "shape mismatch: a is " + shape_text(shape_of(a)) + ", b is " + shape_text(shape_of(b)) +
                        "; layout '" + layout + "' needs b as " +
                        (tn ? "(N, " + std::to_string(K) + ")" : "(" + std::to_string(K) + ", N)"));
  const std::int64_t N = tn ? b0 : b1;
  const std::int64_t kMax = 0x7FFFFFFF;
  if (M > kMax || N > kMax || K > kMax) value_error(fn, "a dimension exceeds 2^31 - 1");
  emu::GemmAccumulation acc;
  try {
    acc = emu::GemmAccumulation{emu::parse_accumulation(accumulation), promotion, split_k};
    emu::check_gemm_tn(int(M), int(N), int(K), fa, fb, acc);
  } catch (const fp8emu::Error& e) {
    value_error(fn, e.what());
  }
  // The epilogue: its output type, and c / bias as float32 CUDA arrays on the operands' device.
  emu::GemmEpilogue ep;
  ep.alpha = alpha;
  ep.beta = beta;
  ep.d_scale = d_scale;
  nb::dlpack::dtype dt = nb::dtype<float>();
  bool code_out = false;
  if (out_kind == "float32") {
    ep.output = emu::GemmOutput::kFp32;
  } else if (out_kind == "bfloat16") {
    ep.output = emu::GemmOutput::kBf16;
    // CuPy (before v14) cannot import a DLPack bfloat16 array: it gets the uint16 bits, as NumPy
    // without ml_dtypes would.
    dt = framework == "cupy" ? nb::dtype<std::uint16_t>()
                             : nb::dlpack::dtype{std::uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1};
  } else if (out_kind == "float16") {
    ep.output = emu::GemmOutput::kFp16;
    dt = nb::dlpack::dtype{std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
  } else {
    ep.output = emu::GemmOutput::kFp8;
    ep.output_format = gpu_fp8_format(fn, out_kind, "writes D as float32, bfloat16, float16,", "the operands");
    dt = nb::dtype<std::uint8_t>();
    code_out = true;
  }
  const auto f32_operand = [&](const std::optional<Array>& arr, const char* name,
                               const std::vector<std::int64_t>& shape) -> const float* {
    if (!arr) return nullptr;
    same_device(fn, device, check_cuda_array(*arr, fn, name), name);
    if (!is(arr->dtype(), dl::dtype_code::Float, 32))
      type_error(fn, std::string(name) + " is a CUDA array of dtype " + dtype_text(arr->dtype()) + "; it must be float32");
    if (shape_of(*arr) != shape)
      value_error(fn, std::string(name) + " has shape " + shape_text(shape_of(*arr)) + "; expected " + shape_text(shape));
    return static_cast<const float*>(arr->data());
  };
  ep.C = f32_operand(c, "c", {M, N});
  ep.bias = f32_operand(bias, "bias", {N});
  if (ep.beta != 0.0f && !ep.C) value_error(fn, "beta = " + std::to_string(beta) + " needs c, an (M, N) float32 array");
  DeviceScope scope(fn, device);
  Output o = output_for(fn, out, device, {M, N}, dt, code_out, framework);
  const auto* pa = static_cast<const std::uint8_t*>(a.data());
  const auto* pb = static_cast<const std::uint8_t*>(b.data());
  // layout "nn": b (K, N) transposed into (N, K) scratch on the GPU.
  void* bt = nullptr;
  nb::object bt_owner;
  if (!tn) {
    auto [p, owner] = allocate(fn, std::size_t(K) * std::size_t(N), device);
    bt = p, bt_owner = owner;
  }
  cuda::CastStats st;
  run_released(fn, [&] {
    const cudaStream_t s = stream_of(stream);
    const std::uint8_t* pbt = pb;
    if (!tn) {
      cuda::transpose(int(K), int(N), pb, static_cast<std::uint8_t*>(bt), s);
      pbt = static_cast<const std::uint8_t*>(bt);
    }
    if (return_amax) {
      StatsScratch t(s);
      cuda::gemm_fp8_tn(int(M), int(N), int(K), pa, fa, scale_inv_a, pbt, fb, scale_inv_b, acc, ep, o.data,
                        &t.get()->amax_bits, s);
      st = cuda::read_stats(t.get(), s);  // waits for the stream
    } else {
      cuda::gemm_fp8_tn(int(M), int(N), int(K), pa, fa, scale_inv_a, pbt, fb, scale_inv_b, acc, ep, o.data, nullptr,
                        s);
      sync(s);
    }
  });
  return nb::make_tuple(o.result, return_amax ? nb::object(nb::float_(st.amax)) : nb::none());
#else
  (void)a, (void)b, (void)format_a, (void)format_b, (void)scale_inv_a, (void)scale_inv_b, (void)accumulation,
      (void)promotion, (void)split_k, (void)layout, (void)out_kind, (void)d_scale, (void)alpha, (void)beta, (void)c,
      (void)bias, (void)return_amax, (void)stream, (void)framework, (void)out;
  return {};
#endif
}

// One copy's NVFP4 tensor amax as a one-element CUDA array (a view of the operand's [2] buffer);
// None for one-level scales.
nb::object cuda_tensor_amax(const CudaQuantized& t, int copy) {
  if (t.amax.is_none()) return nb::none();
  return t.amax[nb::slice(nb::int_(copy), nb::int_(copy + 1), nb::int_(1))];
}

void bind_cuda(nb::module_& m) {
#ifdef FP8EMU_HAVE_CUDA
  m.attr("cuda") = true;
#else
  m.attr("cuda") = false;
#endif
  nb::class_<CudaQuantized>(m, "CudaQuantizedTensor",
                            "A recipe's FP8 operand on the GPU; see fp8emu.recipe.QuantizedTensor.")
      .def_prop_ro("mode", [](const CudaQuantized& t) {
        return t.op.mode == scaling::ScalingMode::kPerTensor ? "per_tensor" : "block";
      })
      .def_prop_ro("format", [](const CudaQuantized& t) { return std::string(format_name(t.op.format)); })
      .def_prop_ro("rows", [](const CudaQuantized& t) { return t.op.rows; })
      .def_prop_ro("cols", [](const CudaQuantized& t) { return t.op.cols; })
      .def_prop_ro("usage", [](const CudaQuantized& t) {
        return t.op.usage == scaling::Usage::kRowwise ? "rowwise"
               : t.op.usage == scaling::Usage::kColumnwise ? "columnwise" : "both";
      })
      .def_prop_ro("scale", [](const CudaQuantized& t) { return t.op.host_scale; })
      .def_prop_ro("scale_inv", [](const CudaQuantized& t) { return t.op.host_scale_inv; })
      .def_prop_ro("block", [](const CudaQuantized& t) { return t.op.block; })
      .def_prop_ro("device", [](const CudaQuantized& t) { return t.device; })
      .def_prop_ro("framework", [](const CudaQuantized& t) { return t.framework; })
      .def_ro("rowwise_data", &CudaQuantized::rowwise_data)
      .def_ro("columnwise_data", &CudaQuantized::columnwise_data)
      .def_ro("rowwise_scale_inv", &CudaQuantized::rowwise_scale_inv)
      .def_ro("columnwise_scale_inv", &CudaQuantized::columnwise_scale_inv)
      .def_prop_ro("rowwise_e8m0", [](const CudaQuantized&) { return nb::none(); })
      .def_prop_ro("columnwise_e8m0", [](const CudaQuantized&) { return nb::none(); })
      .def_prop_ro("amax_rowwise", [](const CudaQuantized& t) { return cuda_tensor_amax(t, 0); })
      .def_prop_ro("amax_columnwise", [](const CudaQuantized& t) { return cuda_tensor_amax(t, 1); });
  m.def("cuda_available", [] { return backend::cuda_status().usable(); },
        "True when this build has CUDA and a GPU of compute capability >= 8.9 can run its kernels.");
  m.def("cuda_device_index",
        []() -> int {
#ifdef FP8EMU_HAVE_CUDA
          if (backend::cuda_status().usable()) return device_gpu_index();
#endif
          return -1;
        },
        "The CUDA device number of fp8emu's GPU (where quantized tensors live), or -1 when the GPU path "
        "cannot run.");
  m.def("cuda_why_not", [] { return backend::cuda_status().why_not(); },
        "Why the GPU path cannot run here (empty when cuda_available()).");
  m.def("cuda_cast_transpose", &cuda_cast_transpose, "x"_a, "format"_a, "scale"_a, "rowwise"_a, "columnwise"_a,
        "stream"_a, "framework"_a, "A per-tensor recipe cast on a CUDA array: (rowwise, columnwise, stats).");
  m.def("cuda_amax", &cuda_amax, "x"_a, "stream"_a, "The amax of a float32 CUDA array (NaN ignored).");
}

}  // namespace fp8emu::python
