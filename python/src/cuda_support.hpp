// The GPU path's shared support (private to the extension): argument checks that name the Python
// function, the arrays' device made current for a call, new device arrays of the caller's framework,
// the waits, and the recipe operand on the GPU (CudaQuantized). The entry points built on it are
// in cuda_arrays.cpp (casts, decode, GEMM), cuda_recipes.cpp (quantizers, recipe GEMMs, the Linear
// step) and cuda_layers.cpp (bias grad, norms); each raises TypeError naming the function and the
// device in a build without CUDA or on a machine whose GPU cannot run the kernels.
//
// Every entry point: checks its arguments (TypeError for a dtype or device the GPU path does not
// take, ValueError for shapes, layouts, names and combinations, each naming the fp8emu function),
// makes the arrays' device current for the call (restored after), enqueues the kernels on `stream`
// (a cudaStream_t as an integer; 0 is the legacy default stream) with the GIL released, and waits
// for that stream before returning, so the results are complete whatever stream reads them next.
// Results are new device allocations (cudaMalloc, freed by cudaFree when the last array viewing
// them is collected) wrapped as the caller's framework (PyTorch, CuPy, JAX) or as nanobind's
// DLPack-capable ndarray, or the caller's `out` array, written in place.
#pragma once

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

#include "arrays.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/util/error.hpp"

#ifdef FP8EMU_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "fp8emu/cuda/backend.hpp"
#include "fp8emu/cuda/device.hpp"
#endif

namespace fp8emu::python {

// A recipe's operand on the GPU (fp8emu.recipe.QuantizedTensor of a CUDA array): the device operand
// the quantizer wrote and the CUDA arrays that own its buffers.
struct CudaQuantized {
  scaling::DeviceOperand op;
  int device = 0;
  std::string framework;
  // None where absent (a copy the usage did not ask for; scale_inv of a per-tensor operand).
  nb::object rowwise_data = nb::none(), columnwise_data = nb::none();
  nb::object rowwise_scale_inv = nb::none(), columnwise_scale_inv = nb::none();
  nb::object scale_owner = nb::none();  // the one-float device buffer of a per-tensor scale
  nb::object amax = nb::none();  // NVFP4 (op.tensor_amax): [2], the row-wise and column-wise tensor amax
};

namespace gpu {

inline constexpr int kCudaDevice = nb::device::cuda::value;  // DLPack kDLCUDA

inline std::string fn_text(const char* fn, const std::string& what) { return std::string(fn) + ": " + what; }

[[noreturn]] inline void type_error(const char* fn, const std::string& what) {
  throw nb::type_error(fn_text(fn, what).c_str());
}
// The GPU of every entry point: usable, or a TypeError naming the function, the device and why.
inline void require_gpu(const char* fn, const char* what) {
#ifdef FP8EMU_HAVE_CUDA
  const backend::CudaStatus& st = backend::cuda_status();
  if (!st.usable())
  {
    std::string why = st.why_not();
    if (!why.empty() && why.back() != '.') why += '.';
    type_error(fn, std::string(what) + " is a CUDA array, but this machine cannot run fp8emu's GPU kernels: " + why +
                       " Copy it to the host first (e.g. .cpu(), cupy.asnumpy, jax.device_get)");
  }
#else
  type_error(fn, std::string(what) + " is a CUDA array (DLPack device type 2); this build of fp8emu runs on the CPU "
                                     "only (built without CUDA): copy it to the host first (e.g. .cpu(), "
                                     "cupy.asnumpy, jax.device_get), or build the module with CUDA (docs/python.md)");
#endif
}

#ifdef FP8EMU_HAVE_CUDA

[[noreturn]] inline void value_error(const char* fn, const std::string& what) {
  throw nb::value_error(fn_text(fn, what).c_str());
}

// The format of a GPU cast or decode: e4m3fn or e5m2 (the formats the CUDA twins take); another is a
// ValueError saying what the GPU path `does` and to copy `what` to the host.
inline Format gpu_fp8_format(const char* fn, const std::string& format, const char* does, const char* what) {
  const Format f = format_of(format, "format");
  if (!is_fp8(f))
    value_error(fn, "format " + std::string(format_name(f)) + " on a CUDA array: the GPU path " + does +
                        " e4m3fn and e5m2 only; copy " + what + " to the host for the other formats");
  return f;
}

// A CUDA array argument: on a CUDA device, scalar elements, C-contiguous. Returns its device id.
template <class A>
int check_cuda_array(const A& a, const char* fn, const char* what) {
  if (a.device_type() != kCudaDevice)
    type_error(fn, std::string(what) + " is a " +
                       (a.device_type() == nb::device::cpu::value ? std::string("CPU")
                                                                  : std::string(device_text(a.device_type()))) +
                       " array (DLPack device type " + std::to_string(a.device_type()) +
                       ") but another argument is on a CUDA device: pass all arrays on one CUDA device");
  check_layout(a, what);
  return a.device_id();
}

inline void same_device(const char* fn, int expect, int got, const char* what) {
  if (got != expect)
    value_error(fn, std::string(what) + " is on CUDA device " + std::to_string(got) + ", the other arrays on device " +
                        std::to_string(expect) + ": pass all arrays on one CUDA device");
}

// Runs `f` with the GIL released, turning the library's CUDA errors into RuntimeError and its
// argument errors into ValueError, both naming the function.
template <class F>
void run_released(const char* fn, F&& f) {
  std::string error;
  bool cuda_error = false;
  {
    nb::gil_scoped_release release;
    try {
      f();
    } catch (const fp8emu::Error& e) {
      error = e.what();
      cuda_error = error.find("CUDA call") != std::string::npos;
    }
  }
  if (error.empty()) return;
  if (cuda_error) throw std::runtime_error(fn_text(fn, error));
  value_error(fn, error);
}

// The arrays' device made current for one call; the caller's current device is restored after.
class DeviceScope {
 public:
  DeviceScope(const char* fn, int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    try {
      cuda::use_device(device);
    } catch (const fp8emu::Error& e) {
      type_error(fn, std::string("cannot run on the arrays' CUDA device: ") + e.what());
    }
  }
  ~DeviceScope() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = -1;
};

// One cudaMalloc'd block, owned by the capsule that is the base of the arrays viewing it.
struct DeviceBlock {
  void* p = nullptr;
  int device = 0;
};

inline nb::capsule owner_of(DeviceBlock* b) {
  return nb::capsule(b, [](void* q) noexcept {
    auto* blk = static_cast<DeviceBlock*>(q);
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != blk->device) cudaSetDevice(blk->device);
    cudaFree(blk->p);  // cannot throw here; a failed free leaks at worst
    if (prev >= 0 && prev != blk->device) cudaSetDevice(prev);
    delete blk;
  });
}

// A new device array of `bytes` bytes on the current device (at least one byte, so the data
// pointer is never null), and its owner.
inline std::pair<void*, nb::capsule> allocate(const char* fn, std::size_t bytes, int device) {
  auto* b = new DeviceBlock{nullptr, device};
  const cudaError_t e = cudaMalloc(&b->p, bytes > 0 ? bytes : 1);
  if (e != cudaSuccess) {
    delete b;
    throw std::runtime_error(fn_text(fn, std::string("CUDA call cudaMalloc(") + std::to_string(bytes) +
                                             " bytes) failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)));
  }
  return {b->p, owner_of(b)};
}

// A device array of the caller's framework ("torch", "cupy", "jax"; anything else: nanobind's
// ndarray, which any DLPack consumer reads) viewing p, kept alive by owner.
inline nb::object wrap(void* p, const std::vector<std::size_t>& shape, nb::dlpack::dtype dt, int device, nb::handle owner,
                const std::string& framework) {
  const std::size_t nd = shape.size();
  const std::size_t* sh = shape.data();
  const auto ref = nb::rv_policy::reference;
  if (framework == "torch")
    return nb::cast(nb::ndarray<nb::pytorch>(p, nd, sh, owner, nullptr, dt, kCudaDevice, device), ref);
  if (framework == "cupy")
    return nb::cast(nb::ndarray<nb::cupy>(p, nd, sh, owner, nullptr, dt, kCudaDevice, device), ref);
  if (framework == "jax")
    return nb::cast(nb::ndarray<nb::jax>(p, nd, sh, owner, nullptr, dt, kCudaDevice, device), ref);
  return nb::cast(nb::ndarray<>(p, nd, sh, owner, nullptr, dt, kCudaDevice, device), ref);
}

inline std::vector<std::size_t> size_shape(const std::vector<std::int64_t>& s) {
  return std::vector<std::size_t>(s.begin(), s.end());
}

inline cudaStream_t stream_of(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// Device totals of one call: stream-ordered, zeroed, freed when done.
class StatsScratch {
 public:
  explicit StatsScratch(cudaStream_t s) : s_(s) {
    FP8EMU_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), sizeof(cuda::DeviceCastStats), s_) == cudaSuccess,
                 "CUDA call cudaMallocAsync(stats) failed");
    cuda::zero_stats(p_, s_);
  }
  ~StatsScratch() { cudaFreeAsync(p_, s_); }
  StatsScratch(const StatsScratch&) = delete;
  StatsScratch& operator=(const StatsScratch&) = delete;
  cuda::DeviceCastStats* get() const { return p_; }

 private:
  cuda::DeviceCastStats* p_ = nullptr;
  cudaStream_t s_;
};

inline void sync(cudaStream_t s) {
  const cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    FP8EMU_FAIL("CUDA call cudaStreamSynchronize(stream) failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

inline nb::dict stats_dict(const cuda::CastStats& st, std::size_t count) {
  nb::dict d;
  d["count"] = count;
  d["saturated"] = st.saturated;
  d["underflow"] = st.underflow;
  d["nan"] = st.nan;
  d["amax"] = st.amax;
  return d;
}

// The output of a call: the caller's `out` (checked: CUDA, same device, dtype, shape, contiguous)
// or a new device array.
struct Output {
  void* data = nullptr;
  nb::object result;  // the new array, or None when writing into out
};

inline Output output_for(const char* fn, std::optional<OutArray>& out, int device,
                  const std::vector<std::int64_t>& shape, nb::dlpack::dtype dt, bool code_dtype,
                  const std::string& framework) {
  Output o;
  if (out) {
    same_device(fn, device, check_cuda_array(*out, fn, "out"), "out");
    const bool ok = code_dtype ? is_code_dtype(out->dtype()) : (out->dtype() == dt);
    if (!ok)
      type_error(fn, "out has dtype " + dtype_text(out->dtype()) + "; expected " +
                         (code_dtype ? std::string("8-bit codes (uint8 or a float8 dtype)") : dtype_text(dt)));
    if (shape_of(*out) != shape)
      value_error(fn, "out has shape " + shape_text(shape_of(*out)) + "; expected " + shape_text(shape));
    o.data = out->data();
    o.result = nb::none();  // the caller returns its own out
    return o;
  }
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= std::size_t(d);
  auto [p, owner] = allocate(fn, n * (dt.bits / 8), device);
  o.data = p;
  o.result = wrap(p, size_shape(shape), dt, device, owner, framework);
  return o;
}

// cuda::device_index() with the calling thread's current device left as it was (the device's first
// use makes its GPU current).
inline int device_gpu_index() {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  const int index = cuda::device_index();
  if (prev >= 0) cudaSetDevice(prev);
  return index;
}

// The GPU of backend::cuda_device(), where the device-resident quantizers and GEMMs run; an array on
// another GPU is a ValueError saying where to move it. Call it before DeviceScope, so that an array
// on another GPU gets this error rather than DeviceScope's.
inline void require_device_gpu(const char* fn, const char* what, int device) {
  int index = 0;
  try {
    index = device_gpu_index();
  } catch (const fp8emu::Error& e) {
    throw std::runtime_error(fn_text(fn, e.what()));
  }
  if (device != index)
    value_error(fn, std::string(what) + " is on CUDA device " + std::to_string(device) +
                        "; fp8emu's quantized tensors live on CUDA device " + std::to_string(index) +
                        " (the GPU of backend::cuda_device(), the first of compute capability 8.9 or newer unless "
                        "backend::set_cuda_device_slot chose another): move it there first (e.g. x.to('cuda:" +
                        std::to_string(index) + "'))");
}

// A float32 CUDA array of `ndim` dimensions; returns its device.
template <class A>
int device_f32(const char* fn, const A& a, const char* what, std::size_t ndim) {
  const int device = check_cuda_array(a, fn, what);
  if (!is(a.dtype(), dl::dtype_code::Float, 32))
    type_error(fn, std::string(what) + " is a CUDA array of dtype " + dtype_text(a.dtype()) + "; it must be float32");
  if (a.ndim() != ndim)
    value_error(fn, std::string(what) + " has " + std::to_string(a.ndim()) + " dimensions; expected " +
                        std::to_string(ndim));
  for (std::size_t i = 0; i < ndim; ++i)
    if (a.shape(i) > 0x7FFFFFFF) value_error(fn, std::string(what) + ": a dimension exceeds 2^31 - 1");
  return device;
}

// Waits for the caller's stream, runs f on the device (its own stream), then waits for the device
// by reading back the float at `written` (one of f's outputs; null when f wrote nothing or waits
// itself), with the GIL released.
template <class F>
void on_device(const char* fn, std::uintptr_t stream, const float* written, F&& f) {
  run_released(fn, [&] {
    const cudaError_t e = cudaStreamSynchronize(stream_of(stream));
    if (e != cudaSuccess)
      FP8EMU_FAIL("CUDA call cudaStreamSynchronize(stream) failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    const backend::Device& dev = backend::cuda_device();
    f(dev);
    float probe = 0.0f;
    if (written) dev.download(&probe, written, sizeof(float));  // Device::download waits for the operations
  });
}

// A CudaQuantized with new CUDA arrays of `framework` on `device` for every buffer of the cast
// device_operand(q, rows, cols, role, usage) describes (cudaMalloc, freed with their last view).
// Call inside DeviceScope.
inline CudaQuantized new_operand(const char* fn, const scaling::Quantizer& q, int rows, int cols, scaling::TensorRole role,
                          scaling::Usage usage, int device, const std::string& framework) {
  CudaQuantized t;
  try {
    t.op = scaling::device_operand(q, rows, cols, role, usage);
  } catch (const fp8emu::Error& e) {
    value_error(fn, e.what());
  }
  t.device = device;
  t.framework = framework;
  scaling::DeviceOperand& op = t.op;
  const std::vector<std::size_t> row_shape{std::size_t(rows), std::size_t(cols)};
  const std::vector<std::size_t> col_shape{std::size_t(cols), std::size_t(rows)};
  const auto codes = [&](const std::vector<std::size_t>& shape, std::uint8_t*& p) {
    auto [mem, owner] = allocate(fn, op.codes(), device);
    p = static_cast<std::uint8_t*>(mem);
    return wrap(mem, shape, nb::dtype<std::uint8_t>(), device, owner, framework);
  };
  const auto scales = [&](std::size_t n, std::size_t count, float*& p) {
    auto [mem, owner] = allocate(fn, n * count * sizeof(float), device);
    p = static_cast<float*>(mem);
    return wrap(mem, {n, count}, nb::dtype<float>(), device, owner, framework);
  };
  if (op.has(scaling::Usage::kRowwise)) t.rowwise_data = codes(row_shape, op.rowwise_data);
  if (op.has(scaling::Usage::kColumnwise)) t.columnwise_data = codes(col_shape, op.columnwise_data);
  if (op.mode == scaling::ScalingMode::kPerTensor) {
    auto [mem, owner] = allocate(fn, sizeof(float), device);
    op.scale = static_cast<float*>(mem);
    t.scale_owner = owner;
  } else {
    if (op.rowwise_scales() > 0)
      t.rowwise_scale_inv = scales(std::size_t(rows), op.rowwise_scales() / std::size_t(rows), op.rowwise_scale_inv);
    if (op.columnwise_scales() > 0)
      t.columnwise_scale_inv =
          scales(std::size_t(cols), op.columnwise_scales() / std::size_t(cols), op.columnwise_scale_inv);
    if (op.tensor_amax) {
      t.amax = scales(1, 2, op.rowwise_amax);
      op.columnwise_amax = op.rowwise_amax + 1;
    }
  }
  return t;
}

// The operand of a quantized tensor argument on the GPU (a CudaQuantizedTensor), or TypeError.
inline const CudaQuantized& cuda_operand(nb::handle h, const char* fn, const char* what) {
  if (!nb::isinstance<CudaQuantized>(h))
    type_error(fn, std::string(what) + " is not a quantized tensor on the GPU (the arrays are CUDA arrays: quantize "
                                       "it from a CUDA array)");
  return nb::cast<const CudaQuantized&>(h);
}

#endif  // FP8EMU_HAVE_CUDA

}  // namespace gpu

}  // namespace fp8emu::python
