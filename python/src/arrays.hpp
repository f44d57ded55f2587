// Argument checks shared by the extension's sources (python/src/): DLPack dtypes and devices as
// text, the layout check of every array argument, format names. Private to the extension.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::python {

namespace nb = nanobind;

using Array = nb::ndarray<nb::ro>;  // any dtype, device and layout; checked below
using OutArray = nb::ndarray<>;     // writable

namespace dl = nb::dlpack;

inline std::string dtype_text(const dl::dtype& t) {
  std::string code;
  switch (dl::dtype_code(t.code)) {
    case dl::dtype_code::Int: code = "int"; break;
    case dl::dtype_code::UInt: code = "uint"; break;
    case dl::dtype_code::Float: code = "float"; break;
    case dl::dtype_code::Bfloat: code = "bfloat"; break;
    case dl::dtype_code::Complex: code = "complex"; break;
    case dl::dtype_code::Bool: code = "bool"; break;
    default: return "DLPack type code " + std::to_string(int(t.code)) + " (" + std::to_string(int(t.bits)) + " bits)";
  }
  return code + std::to_string(int(t.bits));
}

inline const char* device_text(int device_type) {
  switch (device_type) {
    case 2: return "CUDA";
    case 3: return "CUDA host (pinned)";
    case 4: return "OpenCL";
    case 7: return "Vulkan";
    case 8: return "Metal";
    case 10: return "ROCm";
    case 13: return "CUDA managed";
    case 14: return "oneAPI";
    default: return "non-CPU";
  }
}

// What a host-only entry point says of an array on another device.
inline std::string not_on_cpu_text(const char* what, int device_type) {
  std::string m = std::string(what) + " is a " + device_text(device_type) + " array (DLPack device type " +
                  std::to_string(device_type) + "); ";
#ifdef FP8EMU_HAVE_CUDA
  m += "this function runs on the CPU only (fp8emu's GPU path covers fp8emu.cast, fp8emu.decode and fp8emu.gemm "
       "on CUDA arrays, docs/python.md): copy it to the host first";
#else
  m += "this build of fp8emu runs on the CPU only (built without CUDA): copy it to the host first";
#endif
  return m + " (e.g. .cpu(), cupy.asnumpy, jax.device_get)";
}

// Layout checks of an array argument on any device: scalar elements, C-contiguous. Returns the
// element count.
template <class A>
std::size_t check_layout(const A& a, const char* what) {
  if (a.dtype().lanes != 1)
    throw nb::type_error((std::string(what) + " has vector lanes (" + std::to_string(a.dtype().lanes) +
                          "); fp8emu takes scalar element types")
                             .c_str());
  if (a.size() == 0) return 0;  // no element is read: any strides (PyTorch's empty tensors have odd ones)
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) {  // size-1 dimensions may have any stride
      std::string strides;
      for (std::size_t j = 0; j < a.ndim(); ++j) strides += (j ? ", " : "") + std::to_string(a.stride(j));
      throw nb::value_error((std::string(what) + " is not C-contiguous (strides in elements: (" + strides +
                             ")); pass a contiguous copy, e.g. numpy.ascontiguousarray(" + what + ")")
                                .c_str());
    }
    expect *= std::int64_t(a.shape(i));
  }
  return a.size();
}

// Device and layout checks of every array argument of a host entry point. Returns the element count.
template <class A>
std::size_t check_array(const A& a, const char* what) {
  if (a.device_type() != nb::device::cpu::value) throw nb::type_error(not_on_cpu_text(what, a.device_type()).c_str());
  return check_layout(a, what);
}

template <class A>
std::vector<std::int64_t> shape_of(const A& a) {
  std::vector<std::int64_t> s(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) s[i] = std::int64_t(a.shape(i));
  return s;
}

inline std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}


inline bool is(const dl::dtype& t, dl::dtype_code code, int bits) { return t.code == std::uint8_t(code) && t.bits == bits; }

// An 8-bit code array: uint8, or one of DLPack 1.1's small-float codes (PyTorch float8 tensors).
inline bool is_code_dtype(const dl::dtype& t) {
  if (t.bits != 8) return false;
  if (t.code == std::uint8_t(dl::dtype_code::UInt)) return true;
  return t.code >= std::uint8_t(dl::dtype_code::Float8_E3M4) && t.code <= std::uint8_t(dl::dtype_code::Float4_E2M1FN);
}

inline Format format_of(const std::string& name, const char* what) {
  Format f = Format::kE4M3;
  if (!find_format(name.data(), name.size(), &f)) {
    std::string names;
    for (const FormatRecord& r : kFormats) {
      names += (names.empty() ? "" : ", ") + std::string(r.spec->name);
      for (const char* a : r.aliases)
        if (a) names += std::string(" (") + a + ")";
    }
    throw nb::value_error(("unknown " + std::string(what) + " '" + name + "' (accepted: " + names + ")").c_str());
  }
  return f;
}


/// fp8emu.Quantizer's extension object: one direction's scaling::Quantizer of a recipe, and the
/// Python callables its recipe's hooks hold (TE's amax_compute_algo and scaling_factor_compute_algo),
/// which the garbage collector sees through the type's traverse and clear slots.
struct PyQuantizer {
  std::unique_ptr<scaling::Quantizer> q;
  std::vector<std::shared_ptr<nb::object>> callables;
};

/// The Python callables a recipe record's hooks hold (python/src/recipe_records.cpp): the shared
/// references its quantizers' copies of the hooks call.
std::vector<std::shared_ptr<nb::object>> recipe_callables(const scaling::Recipe& recipe);

/// A cast's counts as Python sees them (QuantizedTensor.stats): count, saturated, underflow, nan.
inline nb::dict counts_dict(const emu::QuantizeStats& st) {
  nb::dict d;
  d["count"] = st.count;
  d["saturated"] = st.saturated;
  d["underflow"] = st.underflow;
  d["nan"] = st.nan;
  return d;
}

/// fp8emu.layers' FP8 Linear step (python/src/layer_steps.cpp): linear_fprop and linear_backward,
/// nn::fp8_linear_fprop / fp8_linear_backward on the device of the arrays given.
void bind_layer_steps(nb::module_& m);
/// Their GPU halves (python/src/cuda_recipes.cpp): the same step on backend::cuda_device() for CUDA
/// arrays; `fn` names the Python function in errors. Without CUDA or a usable GPU: TypeError.
nb::tuple cuda_linear_fprop(const Array& x, std::optional<Array> weight, nb::handle weight_q, std::optional<Array> bias,
                            scaling::Quantizer& fwd, bool training, const emu::GemmAccumulation& acc,
                            std::uintptr_t stream, const std::string& framework);
nb::tuple cuda_linear_backward(const Array& dy, nb::handle x_q, nb::handle weight_q, scaling::Quantizer& bwd,
                               bool need_dgrad, bool need_wgrad, const emu::GemmAccumulation& acc,
                               std::uintptr_t stream, const std::string& framework);

/// fp8emu.layers' norm on CUDA arrays (python/src/cuda_layers.cpp): Device::norm_forward / norm_backward on
/// backend::cuda_device(); norm_forward / norm_backward (layer_steps.cpp) dispatch to them.
nb::tuple cuda_norm_forward(const Array& x, const Array& gamma, std::optional<Array> beta,
                            const std::string& normalization, float eps, bool zero_centered_gamma, bool round_bf16,
                            std::uintptr_t stream, const std::string& framework);
nb::tuple cuda_norm_backward(const Array& dy, std::optional<Array> grad_ln_out, const Array& xhat, const Array& rsigma,
                             const Array& gamma, const std::string& normalization, bool zero_centered_gamma,
                             std::uintptr_t stream, const std::string& framework);
/// fp8emu.cast, decode and gemm on CUDA arrays (python/src/cuda_arrays.cpp); the module's cast, decode
/// and gemm entries dispatch to them.
nb::tuple cuda_cast(const Array& x, const std::string& format, float scale, const std::string& policy,
                    const std::string& rounding, std::uintptr_t stream, const std::string& framework,
                    std::optional<OutArray> out);
nb::object cuda_decode(const Array& codes, const std::string& format, float scale_inv, std::uintptr_t stream,
                       const std::string& framework, std::optional<OutArray> out);
nb::tuple cuda_gemm(const Array& a, const Array& b, const std::string& format_a, const std::string& format_b,
                    float scale_inv_a, float scale_inv_b, const std::string& accumulation, int promotion, int split_k,
                    const std::string& layout, const std::string& out_kind, float d_scale, float alpha, float beta,
                    std::optional<Array> c, std::optional<Array> bias, bool return_amax, std::uintptr_t stream,
                    const std::string& framework, std::optional<OutArray> out);
/// Registers the GPU path's entry points (python/src/cuda_arrays.cpp; cuda_recipes.cpp, cuda_layers.cpp): cuda_available, cuda_cast, cuda_decode,
/// cuda_gemm, ...; in a build without CUDA they raise TypeError naming the function and the device.
void bind_cuda(nb::module_& m);
/// The C++ recipe records as classes, and recipe_record(name) (python/src/recipe_records.cpp).
void bind_recipe_records(nb::module_& m);
/// nv_convert: fp8emu.nv's conversions (python/src/nv_binding.cpp).
void bind_nv(nb::module_& m);
/// fp8emu.mma and fp8emu.compare (python/src/mma_compare.cpp).
void bind_mma_compare(nb::module_& m);
/// fp8emu.Quantizer.quantize on a CUDA array x (float32, 2-D, C-contiguous) of the GPU of
/// backend::cuda_device(): the quantizer's device cast (scaling::Quantizer::quantize_device), after
/// `stream` (a cudaStream_t as an integer) has reached the call. Returns (a CudaQuantizedTensor whose
/// codes and scale_inv are new CUDA arrays of `framework` on x's device, the counts as a dict); the
/// quantizer's state is updated as the host cast updates it. Without CUDA or a usable GPU: TypeError
/// naming the function and the device; other checks as the CPU path's.
nb::tuple cuda_quantize(scaling::Quantizer& q, const Array& x, scaling::TensorRole role, scaling::Usage usage,
                        std::uintptr_t stream, const std::string& framework);
/// fp8emu.recipe.gemm of two CudaQuantizedTensor (scaling::gemm_tn on backend::cuda_device()):
/// D (M, N) float32, a new CUDA array of a's framework, complete when it returns.
nb::object cuda_gemm_tn(nb::handle a, scaling::Usage a_usage, nb::handle b, scaling::Usage b_usage,
                        const emu::GemmAccumulation& acc);
/// fp8emu.layers.bias_grad's column sum of a CUDA array (python/src/cuda_layers.cpp).
nb::object cuda_column_sum(const Array& dy, std::uintptr_t stream, const std::string& framework);

}  // namespace fp8emu::python
