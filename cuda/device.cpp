// The public device-pointer API (include/fp8emu/cuda/device.hpp): host-side checks, then the
// launchers of cuda/launch.hpp on the caller's stream. No kernel lives here.
#include "fp8emu/cuda/device.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "device_buffer.hpp"
#include "fp8emu/device/device.hpp"
#include "fp8emu/core/fp32_ops.hpp"  // bits_to_f32
#include "fp8emu/emulation/quantize.hpp"
#include "launch.hpp"

namespace fp8emu::cuda {

using detail::CastTotals;

// DeviceCastStats is the public name of the kernels' CastTotals: same members, same layout.
static_assert(sizeof(DeviceCastStats) == sizeof(CastTotals), "DeviceCastStats must match CastTotals");
static_assert(offsetof(DeviceCastStats, saturated) == offsetof(CastTotals, saturated) &&
                  offsetof(DeviceCastStats, underflow) == offsetof(CastTotals, underflow) &&
                  offsetof(DeviceCastStats, nan) == offsetof(CastTotals, nan) &&
                  offsetof(DeviceCastStats, amax_bits) == offsetof(CastTotals, amax_bits),
              "DeviceCastStats must match CastTotals");

namespace {

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

CastTotals* totals_of(DeviceCastStats* s) { return reinterpret_cast<CastTotals*>(s); }

// Totals for a cast whose caller wants none: stream-ordered scratch, zeroed, freed after the cast.
class ScratchTotals {
 public:
  ScratchTotals(DeviceCastStats* given, cudaStream_t stream) : stream_(stream) {
    if (given) {
      p_ = totals_of(given);
      return;
    }
    FP8EMU_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), sizeof(CastTotals), stream_));
    owned_ = true;
    FP8EMU_CUDA_CHECK(cudaMemsetAsync(p_, 0, sizeof(CastTotals), stream_));
  }
  ~ScratchTotals() {
    if (owned_) cudaFreeAsync(p_, stream_);  // cannot throw from a destructor; a failure leaks at worst
  }
  ScratchTotals(const ScratchTotals&) = delete;
  ScratchTotals& operator=(const ScratchTotals&) = delete;
  CastTotals* get() const { return p_; }

 private:
  CastTotals* p_ = nullptr;
  cudaStream_t stream_;
  bool owned_ = false;
};

}  // namespace

void use_device(int device) {
  int count = 0;
  FP8EMU_CUDA_CHECK(cudaGetDeviceCount(&count));
  FP8EMU_CHECK(device >= 0 && device < count, "CUDA device ", device, " does not exist (", count,
               " device(s) visible)");
  cudaDeviceProp p{};
  FP8EMU_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  FP8EMU_CHECK(p.major * 10 + p.minor >= 89, "CUDA device ", device, " (", p.name, ") has compute capability ",
               p.major, ".", p.minor, "; fp8emu's GPU kernels need 8.9 or newer (FP8)");
  FP8EMU_CUDA_CHECK(cudaSetDevice(device));
}

void zero_stats(DeviceCastStats* stats, Stream stream) {
  FP8EMU_CHECK(stats != nullptr, "zero_stats: null stats pointer");
  FP8EMU_CUDA_CHECK(cudaMemsetAsync(stats, 0, sizeof(DeviceCastStats), stream_of(stream)));
}

CastStats read_stats(const DeviceCastStats* stats, Stream stream) {
  FP8EMU_CHECK(stats != nullptr, "read_stats: null stats pointer");
  FP8EMU_CUDA_CHECK(cudaStreamSynchronize(stream_of(stream)));
  DeviceCastStats h{};
  FP8EMU_CUDA_CHECK(cudaMemcpy(&h, stats, sizeof h, cudaMemcpyDeviceToHost));
  CastStats r;
  r.saturated = h.saturated;
  r.underflow = h.underflow;
  r.nan = h.nan;
  r.amax = core::bits_to_f32(h.amax_bits);
  return r;
}

void quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, DeviceCastStats* stats,
              Stream stream) {
  emu::require_ocp_fp8(fmt, "quantize");
  if (n == 0) return;
  ScratchTotals t(stats, stream_of(stream));
  detail::launch_quantize(x, n, scale, fmt, q, t.get(), stream_of(stream));
}

void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y, Stream stream) {
  emu::require_ocp_fp8(fmt, "dequantize");
  if (n == 0) return;
  detail::launch_dequantize(q, n, scale_inv, fmt, y, stream_of(stream));
}

void cast_transpose(const float* x, int rows, int cols, float scale, Format fmt, std::uint8_t* q_rowwise,
                    std::uint8_t* q_columnwise, DeviceCastStats* stats, Stream stream) {
  backend::check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
  if (rows == 0 || cols == 0) return;
  ScratchTotals t(stats, stream_of(stream));
  detail::launch_cast_transpose(x, rows, cols, scale, fmt, q_rowwise, q_columnwise, t.get(), stream_of(stream));
}

void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out, Stream stream) {
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "transpose: negative shape [", rows, ", ", cols, "]");
  detail::launch_transpose(rows, cols, in, out, stream_of(stream));
}

void amax(const float* x, std::size_t n, unsigned int* amax_bits, Stream stream) {
  FP8EMU_CHECK(amax_bits != nullptr, "amax: null amax_bits pointer");
  detail::launch_amax(x, n, amax_bits, stream_of(stream));
}

void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D, Stream stream) {
  emu::check_gemm_tn(M, N, K, fa, fb, acc);
  emu::require_ocp_fp8(fa, "GEMM operand A");
  emu::require_ocp_fp8(fb, "GEMM operand B");
  if (M == 0 || N == 0) return;
  const float s = scale_inv_a * scale_inv_b;  // RN on the host, as the emulator (emu::gemm_fp8_tn)
  detail::launch_gemm_tn(M, N, K, A, fa, B, fb, acc.model, acc.promotion_interval, acc.split_k, s, D,
                         stream_of(stream));
}

void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, const emu::GemmEpilogue& ep,
                 void* D, unsigned int* amax_bits, Stream stream) {
  emu::check_gemm_tn(M, N, K, fa, fb, acc);
  emu::require_ocp_fp8(fa, "GEMM operand A");
  emu::require_ocp_fp8(fb, "GEMM operand B");
  FP8EMU_CHECK(ep.beta == 0.0f || ep.C != nullptr, "GEMM: beta = ", ep.beta, " needs a C matrix");
  FP8EMU_CHECK(ep.amax_d == nullptr, "gemm_fp8_tn on the GPU: GemmEpilogue::amax_d is a host pointer; pass "
                                     "amax_bits (device memory) for the amax of D");
  if (ep.output == emu::GemmOutput::kFp8) emu::require_ocp_fp8(ep.output_format, "GEMM output");
  if (M == 0 || N == 0) return;
  const cudaStream_t s = stream_of(stream);
  const std::size_t n = std::size_t(M) * std::size_t(N);
  // C overlapping D's bytes (an in-place accumulate, D = alpha t + beta D, or any partial overlap):
  // C is first copied to a stream-ordered scratch, so that every element of C is read as it was
  // before the call, as the emulator reads it. The scaled product goes in D itself for an fp32
  // output (the epilogue rewrites each element in place), else in a scratch. Scratches are freed,
  // stream-ordered, after the epilogue.
  struct Scratch {
    float* p = nullptr;
    cudaStream_t s;
    ~Scratch() {
      if (p) (void)cudaFreeAsync(p, s);
    }
  } t_scratch{nullptr, s}, c_scratch{nullptr, s};
  const std::size_t d_bytes = n * (ep.output == emu::GemmOutput::kFp32   ? 4
                                   : ep.output == emu::GemmOutput::kFp8 ? 1
                                                                         : 2);
  const auto* d0 = static_cast<const unsigned char*>(D);
  const auto* c0 = reinterpret_cast<const unsigned char*>(ep.C);
  emu::GemmEpilogue e = ep;
  if (ep.beta != 0.0f && ep.C != nullptr && c0 < d0 + d_bytes && d0 < c0 + n * sizeof(float)) {
    detail::check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&c_scratch.p), n * sizeof(float), s),
                       "cudaMallocAsync(gemm epilogue C copy)");
    detail::check_cuda(cudaMemcpyAsync(c_scratch.p, ep.C, n * sizeof(float), cudaMemcpyDeviceToDevice, s),
                       "cudaMemcpyAsync(gemm epilogue C copy)");
    e.C = c_scratch.p;
  }
  float* t = static_cast<float*>(D);
  if (ep.output != emu::GemmOutput::kFp32) {
    detail::check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&t_scratch.p), n * sizeof(float), s),
                       "cudaMallocAsync(gemm epilogue scratch)");
    t = t_scratch.p;
  }
  const float sc = scale_inv_a * scale_inv_b;  // RN on the host, as the emulator
  detail::launch_gemm_tn(M, N, K, A, fa, B, fb, acc.model, acc.promotion_interval, acc.split_k, sc, t, s);
  detail::launch_gemm_epilogue(M, N, t, e, D, amax_bits, s);
}

}  // namespace fp8emu::cuda
