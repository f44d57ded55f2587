// GPU experiments on conversions and fmaxf (see src/internal/fp8emu_internal/device_probe.hpp).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "device_buffer.hpp"
#include "fp8emu/cuda/format_types.hpp"
#include "fp8emu_internal/device_probe.hpp"
#include "fp8emu/nv.hpp"
#include "launch.hpp"

namespace fp8emu::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kExamples = 16;

__host__ __device__ __nv_fp8_interpretation_t cuda_interp(Format f) { return cuda_format(f).interpretation; }
__host__ __device__ __nv_saturation_t cuda_sat(Saturation s) { return s == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT; }
__host__ __device__ nv::Saturation mirror_sat(Saturation s) {
  return s == Saturation::kSatFinite ? nv::Saturation::kSatFinite : nv::Saturation::kNoSat;
}
// The CUDA mirror's name of an FP8 format (the probes run E4M3 and E5M2 only).
__host__ __device__ nv::Fp8Interpretation mirror_interp(Format f) {
  return cuda_format(f).interpretation == __NV_E5M2 ? nv::Fp8Interpretation::kE5M2 : nv::Fp8Interpretation::kE4M3;
}

__global__ void cvt_kernel(const float* x, int n, __nv_saturation_t sat, __nv_fp8_interpretation_t interp,
                           std::uint8_t* out) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = __nv_cvt_float_to_fp8(x[i], sat, interp);
}

__global__ void cvt_x2_ptx_kernel(const float* a, const float* b, int n, bool e4m3, std::uint16_t* out) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  std::uint16_t d = 0;
  if (e4m3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(a[i]), "f"(b[i]));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(a[i]), "f"(b[i]));
  }
  out[i] = d;
#else
  (void)a, (void)b, (void)e4m3;
  out[i] = 0xFFFFu;
#endif
}

__global__ void fmaxf_kernel(const float* a, const float* b, int n, float* out) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = fmaxf(a[i], b[i]);
}

struct SweepState {
  unsigned long long mismatches;
  unsigned int count;
  unsigned int inputs[kExamples];
  std::uint8_t device[kExamples], mirror[kExamples];
};

__global__ void sweep_kernel(Saturation sat, Format fmt, SweepState* st) {
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (std::uint64_t u = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (std::uint64_t(1) << 32);
       u += stride) {
    const float x = __uint_as_float(unsigned(u));
    const std::uint8_t hw = __nv_cvt_float_to_fp8(x, cuda_sat(sat), cuda_interp(fmt));
    const std::uint8_t mi = nv::cvt_float_to_fp8(x, mirror_sat(sat), mirror_interp(fmt));
    if (hw != mi) {
      ++local;
      const unsigned int slot = atomicAdd(&st->count, 1u);
      if (slot < kExamples) {
        st->inputs[slot] = unsigned(u);
        st->device[slot] = hw;
        st->mirror[slot] = mi;
      }
    }
  }
  if (local) atomicAdd(&st->mismatches, local);
}

unsigned int blocks(int n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

std::vector<std::uint8_t> device_cvt_float_to_fp8(const std::vector<float>& x, Saturation sat, Format fmt) {
  std::vector<std::uint8_t> out(x.size());
  if (x.empty()) return out;
  detail::use_fp8_device();
  detail::DeviceBuffer<float> dx(x.data(), x.size());
  detail::DeviceBuffer<std::uint8_t> dout(x.size());
  cvt_kernel<<<blocks(int(x.size())), kThreads>>>(dx.get(), int(x.size()), cuda_sat(sat), cuda_interp(fmt), dout.get());
  FP8EMU_CUDA_CHECK_LAUNCH("cvt_kernel");
  dout.download(out.data(), out.size());
  return out;
}

std::vector<std::uint16_t> device_cvt_x2_ptx(const std::vector<float>& a, const std::vector<float>& b, Format fmt) {
  FP8EMU_CHECK(a.size() == b.size(), "device_cvt_x2_ptx: a and b differ in length");
  std::vector<std::uint16_t> out(a.size());
  if (a.empty()) return out;
  detail::use_fp8_device();
  detail::DeviceBuffer<float> da(a.data(), a.size()), db(b.data(), b.size());
  detail::DeviceBuffer<std::uint16_t> dout(a.size());
  cvt_x2_ptx_kernel<<<blocks(int(a.size())), kThreads>>>(da.get(), db.get(), int(a.size()), cuda_format(fmt).interpretation == __NV_E4M3,
                                                          dout.get());
  FP8EMU_CUDA_CHECK_LAUNCH("cvt_x2_ptx_kernel");
  dout.download(out.data(), out.size());
  return out;
}

std::vector<float> device_fmaxf(const std::vector<float>& a, const std::vector<float>& b) {
  FP8EMU_CHECK(a.size() == b.size(), "device_fmaxf: a and b differ in length");
  std::vector<float> out(a.size());
  if (a.empty()) return out;
  detail::use_fp8_device();
  detail::DeviceBuffer<float> da(a.data(), a.size()), db(b.data(), b.size()), dout(a.size());
  fmaxf_kernel<<<blocks(int(a.size())), kThreads>>>(da.get(), db.get(), int(a.size()), dout.get());
  FP8EMU_CUDA_CHECK_LAUNCH("fmaxf_kernel");
  dout.download(out.data(), out.size());
  return out;
}

CvtSweep sweep_cvt_float_to_fp8(Saturation sat, Format fmt) {
  detail::use_fp8_device();
  detail::DeviceBuffer<SweepState> st(1);
  st.zero();
  sweep_kernel<<<4096, kThreads>>>(sat, fmt, st.get());
  FP8EMU_CUDA_CHECK_LAUNCH("sweep_kernel");
  SweepState h{};
  st.download(&h, 1);
  CvtSweep r;
  r.inputs = 1ull << 32;
  r.mismatches = h.mismatches;
  for (unsigned int i = 0; i < h.count && i < unsigned(kExamples); ++i) {
    r.examples.push_back(h.inputs[i]);
    r.device.push_back(h.device[i]);
    r.mirror.push_back(h.mirror[i]);
  }
  return r;
}

}  // namespace fp8emu::cuda
