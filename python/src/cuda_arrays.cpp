// The GPU path of the extension: fp8emu.cast, fp8emu.decode and fp8emu.gemm on CUDA DLPack arrays
// (python/fp8emu/_cuda.py calls these), through the device-pointer API of the CUDA library
// (include/fp8emu/cuda/device.hpp): the kernels run on the arrays' own memory, no host copies.
//
// Every entry point: checks its arguments (TypeError for a dtype or device the GPU twin does not
// take, ValueError for shapes, layouts, names and combinations, each naming the fp8emu function),
// makes the arrays' device current for the call (restored after), enqueues the kernels on `stream`
// (a cudaStream_t as an integer; 0 is the legacy default stream) with the GIL released, and waits
// for that stream before returning, so the results are complete whatever stream reads them next.
// Results are new device allocations (cudaMalloc, freed by cudaFree when the last array viewing
// them is collected) wrapped as the caller's framework (PyTorch, CuPy, JAX) or as nanobind's
// DLPack-capable ndarray, or the caller's `out` array, written in place.
//
// Built without CUDA, the entry points exist and raise TypeError naming the function and the device.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/emulation/cast_policy.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/nn/linear_step.hpp"
#include "fp8emu/util/error.hpp"

#ifdef FP8EMU_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "fp8emu/cuda/backend.hpp"
#include "fp8emu/cuda/device.hpp"
#include "fp8emu/backend/device.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8emu::python {
namespace {

constexpr int kCudaDevice = nb::device::cuda::value;  // DLPack kDLCUDA

std::string fn_text(const char* fn, const std::string& what) { return std::string(fn) + ": " + what; }

[[noreturn]] void type_error(const char* fn, const std::string& what) {
  throw nb::type_error(fn_text(fn, what).c_str());
}
// The GPU of every entry point: usable, or a TypeError naming the function, the device and why.
void require_gpu(const char* fn, const char* what) {
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

[[noreturn]] void value_error(const char* fn, const std::string& what) {
  throw nb::value_error(fn_text(fn, what).c_str());
}

// The format of a GPU cast or decode: e4m3fn or e5m2 (the formats the CUDA twins take); another is a
// ValueError saying what the GPU path `does` and to copy `what` to the host.
Format gpu_fp8_format(const char* fn, const std::string& format, const char* does, const char* what) {
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

void same_device(const char* fn, int expect, int got, const char* what) {
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

nb::capsule owner_of(DeviceBlock* b) {
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
std::pair<void*, nb::capsule> allocate(const char* fn, std::size_t bytes, int device) {
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
nb::object wrap(void* p, const std::vector<std::size_t>& shape, nb::dlpack::dtype dt, int device, nb::handle owner,
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

std::vector<std::size_t> size_shape(const std::vector<std::int64_t>& s) {
  return std::vector<std::size_t>(s.begin(), s.end());
}

cudaStream_t stream_of(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

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

void sync(cudaStream_t s) {
  const cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    FP8EMU_FAIL("CUDA call cudaStreamSynchronize(stream) failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

nb::dict stats_dict(const cuda::CastStats& st, std::size_t count) {
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

Output output_for(const char* fn, std::optional<OutArray>& out, int device,
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

#endif  // FP8EMU_HAVE_CUDA

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
  if (layout != "tn" && layout != "nn") value_error(fn, "unknown layout '" + layout + "' (accepted: tn, nn)");
  const std::int64_t M = std::int64_t(a.shape(0)), K = std::int64_t(a.shape(1));
  const std::int64_t b0 = std::int64_t(b.shape(0)), b1 = std::int64_t(b.shape(1));
  const bool tn = layout == "tn";
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

}  // namespace

namespace {

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
};

#ifdef FP8EMU_HAVE_CUDA
// cuda::device_index() with the calling thread's current device left as it was (the device's first
// use makes its GPU current).
int device_gpu_index() {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  const int index = cuda::device_index();
  if (prev >= 0) cudaSetDevice(prev);
  return index;
}

// The GPU of backend::cuda_device(), where the device-resident quantizers and GEMMs run; an array on
// another GPU is a ValueError saying where to move it. Call it before DeviceScope, so that an array
// on another GPU gets this error rather than DeviceScope's.
void require_device_gpu(const char* fn, const char* what, int device) {
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
CudaQuantized new_operand(const char* fn, const scaling::Quantizer& q, int rows, int cols, scaling::TensorRole role,
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
  }
  return t;
}

// The operand of a quantized tensor argument on the GPU (a CudaQuantizedTensor), or TypeError.
const CudaQuantized& cuda_operand(nb::handle h, const char* fn, const char* what) {
  if (!nb::isinstance<CudaQuantized>(h))
    type_error(fn, std::string(what) + " is not a quantized tensor on the GPU (the arrays are CUDA arrays: quantize "
                                       "it from a CUDA array)");
  return nb::cast<const CudaQuantized&>(h);
}
#endif

}  // namespace

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
  nb::dict d;
  d["count"] = st.count;
  d["saturated"] = st.saturated;
  d["underflow"] = st.underflow;
  d["nan"] = st.nan;
  return nb::make_tuple(nb::cast(std::move(t)), d);
#else
  (void)q, (void)x, (void)role, (void)usage, (void)stream, (void)framework;
  return {};
#endif
}

nb::object cuda_gemm_tn(nb::handle a, scaling::Usage a_usage, nb::handle b, scaling::Usage b_usage,
                        const emu::GemmAccumulation& acc, const std::string& framework) {
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
  Output o = output_for(fn, none, ta.device, {M, N}, nb::dtype<float>(), false, framework);
  auto* d = static_cast<float*>(o.data);
  // The operands are complete (Quantizer.quantize returned); D's first element read back waits for
  // the GEMM (M, N >= 1).
  on_device(fn, 0, d, [&](const backend::Device& dev) { scaling::gemm_tn(dev, ta.op, a_usage, tb.op, b_usage, acc, d); });
  return o.result;
#else
  (void)a, (void)a_usage, (void)b, (void)b_usage, (void)acc, (void)framework;
  return nb::none();
#endif
}

// fp8emu.layers' FP8 Linear step on CUDA arrays: nn::fp8_linear_fprop / fp8_linear_backward on
// backend::cuda_device(), the program nn::Linear runs, with new CUDA arrays of `framework` for the
// results and the input's (dy's) quantized tensor.
nb::tuple cuda_linear_fprop(const Array& x, nb::handle weight_q, std::optional<Array> bias, scaling::Quantizer& fwd,
                            bool training, const emu::GemmAccumulation& acc, std::uintptr_t stream,
                            const std::string& framework) {
  const char* fn = "fp8emu.layers.linear_forward";
  require_gpu(fn, "x");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, x, "x", 2);
  const CudaQuantized& w = cuda_operand(weight_q, fn, "weight_q");
  same_device(fn, device, w.device, "weight_q");
  const int rows = int(x.shape(0)), in = int(x.shape(1)), out = w.op.rows;
  if (in != w.op.cols)
    value_error(fn, "x has " + std::to_string(in) + " features; the weight takes " + std::to_string(w.op.cols));
  const float* pb = nullptr;
  if (bias) {
    same_device(fn, device, device_f32(fn, *bias, "bias", 1), "bias");
    if (std::int64_t(bias->shape(0)) != out)
      value_error(fn, "bias has shape " + shape_text(shape_of(*bias)) + "; expected (" + std::to_string(out) + ",)");
    pb = static_cast<const float*>(bias->data());
  }
  require_device_gpu(fn, "x", device);
  DeviceScope scope(fn, device);
  CudaQuantized xq = new_operand(fn, fwd, rows, in, scaling::TensorRole::kInput,
                                 training ? scaling::Usage::kBoth : scaling::Usage::kRowwise, device, framework);
  std::optional<OutArray> none;
  Output y = output_for(fn, none, device, {rows, out}, nb::dtype<float>(), false, framework);
  const float* px = static_cast<const float*>(x.data());
  backend::CastCounters c{};
  on_device(fn, stream, nullptr, [&](const backend::Device& dev) {
    backend::DeviceTensor<backend::CastCounters> counters(dev, 1, 1);
    nn::fp8_linear_fprop(dev, fwd, px, rows, xq.op, w.op, pb, acc, static_cast<float*>(y.data), counters.get());
    counters.download(&c);  // waits for the step
    if (xq.op.mode == scaling::ScalingMode::kPerTensor) {
      float sc = 0.0f;
      dev.download(&sc, xq.op.scale, sizeof(float));
      xq.op.host_scale = sc;
      xq.op.host_scale_inv = emu::scale_inv_of(sc);
    }
  });
  const emu::QuantizeStats st = backend::stats_of(c);
  nb::dict d;
  d["count"] = st.count;
  d["saturated"] = st.saturated;
  d["underflow"] = st.underflow;
  d["nan"] = st.nan;
  return nb::make_tuple(y.result, nb::cast(std::move(xq)), d);
#else
  (void)x, (void)weight_q, (void)bias, (void)fwd, (void)training, (void)acc, (void)stream, (void)framework;
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
  const emu::QuantizeStats st = backend::stats_of(c);
  nb::dict d;
  d["count"] = st.count;
  d["saturated"] = st.saturated;
  d["underflow"] = st.underflow;
  d["nan"] = st.nan;
  return nb::make_tuple(need_dgrad ? dx.result : nb::none(), need_wgrad ? dw.result : nb::none(), db.result, d);
#else
  (void)dy, (void)x_q, (void)weight_q, (void)bwd, (void)need_dgrad, (void)need_wgrad, (void)acc, (void)stream,
      (void)framework;
  return {};
#endif
}

// fp8emu.layers' bias add and bias grad on CUDA arrays (backend::Device::bias_add / column_sum on
// backend::cuda_device(): core::nn_element's fp32 add and the column sum in row order from +0).
void cuda_bias_add(OutArray y, const Array& bias, std::uintptr_t stream) {
  const char* fn = "fp8emu.layers.linear_forward";
  require_gpu(fn, "y");
#ifdef FP8EMU_HAVE_CUDA
  const int device = device_f32(fn, y, "y", 2);
  same_device(fn, device, device_f32(fn, bias, "bias", 1), "bias");
  const int rows = int(y.shape(0)), cols = int(y.shape(1));
  if (bias.shape(0) != y.shape(1))
    value_error(fn, "bias has shape " + shape_text(shape_of(bias)) + "; expected (" + std::to_string(cols) + ",)");
  require_device_gpu(fn, "y", device);
  DeviceScope scope(fn, device);
  auto* py = static_cast<float*>(y.data());
  const auto* pb = static_cast<const float*>(bias.data());
  on_device(fn, stream, rows > 0 && cols > 0 ? py : nullptr,
            [&](const backend::Device& dev) { dev.bias_add(py, pb, rows, cols); });
#else
  (void)y, (void)bias, (void)stream;
#endif
}

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
      .def_prop_ro("columnwise_e8m0", [](const CudaQuantized&) { return nb::none(); });
  m.def("cuda_bias_add", &cuda_bias_add, "y"_a, "bias"_a, "stream"_a,
        "y[i, j] += bias[j] (fp32) on CUDA arrays, in place (backend::Device::bias_add).");
  m.def("cuda_column_sum", &cuda_column_sum, "dy"_a, "stream"_a, "framework"_a,
        "out[j] = sum over rows of dy[i, j] in row order from +0, fp32, on CUDA arrays (Device::column_sum).");
  m.def("cuda_norm_forward", &cuda_norm_forward, "x"_a, "gamma"_a, "beta"_a.none(), "normalization"_a, "eps"_a,
        "zero_centered_gamma"_a, "round_bf16"_a, "stream"_a, "framework"_a,
        "LayerNorm/RMSNorm forward on CUDA arrays (Device::norm_forward): (y, xhat, rsigma, gamma copy).");
  m.def("cuda_norm_backward", &cuda_norm_backward, "dy"_a, "grad_ln_out"_a.none(), "xhat"_a, "rsigma"_a, "gamma"_a,
        "normalization"_a, "zero_centered_gamma"_a, "stream"_a, "framework"_a,
        "LayerNorm/RMSNorm backward on CUDA arrays (Device::add of grad_ln_out, Device::norm_backward): "
        "(dx, grad_gamma, grad_beta).");
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
  m.def("cuda_cast", &cuda_cast, "x"_a, "format"_a, "scale"_a, "policy"_a, "rounding"_a, "stream"_a, "framework"_a,
        "out"_a.none(), "fp8emu.cast on a CUDA array: (codes, stats).");
  m.def("cuda_cast_transpose", &cuda_cast_transpose, "x"_a, "format"_a, "scale"_a, "rowwise"_a, "columnwise"_a,
        "stream"_a, "framework"_a, "A per-tensor recipe cast on a CUDA array: (rowwise, columnwise, stats).");
  m.def("cuda_amax", &cuda_amax, "x"_a, "stream"_a, "The amax of a float32 CUDA array (NaN ignored).");
  m.def("cuda_decode", &cuda_decode, "codes"_a, "format"_a, "scale_inv"_a, "stream"_a, "framework"_a, "out"_a.none(),
        "fp8emu.decode on a CUDA array.");
  m.def("cuda_gemm", &cuda_gemm, "a"_a, "b"_a, "format_a"_a, "format_b"_a, "scale_inv_a"_a, "scale_inv_b"_a,
        "accumulation"_a, "promotion"_a, "split_k"_a, "layout"_a, "out_kind"_a, "d_scale"_a, "alpha"_a, "beta"_a,
        "c"_a.none(), "bias"_a.none(), "return_amax"_a, "stream"_a, "framework"_a, "out"_a.none(),
        "fp8emu.gemm on CUDA arrays, with its epilogue: (D, amax or None).");
}

}  // namespace fp8emu::python
