// Private to cuda/: CUDA error checks that throw fp8emu::Error naming the call, and an RAII device
// buffer. Host code only (the CUDA runtime API); included by the .cu and .cpp files of cuda/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "fp8emu/util/error.hpp"

namespace fp8emu::cuda::detail {

/// Throws fp8emu::Error "CUDA call <what> failed: <name>: <description>" unless e is cudaSuccess.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    FP8EMU_FAIL("CUDA call ", what, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace fp8emu::cuda::detail

/// Checks a CUDA runtime call; the message names the call as written.
#define FP8EMU_CUDA_CHECK(call) ::fp8emu::cuda::detail::check_cuda((call), #call)
/// Checks the launch of a kernel (configuration errors are reported by cudaGetLastError).
#define FP8EMU_CUDA_CHECK_LAUNCH(kernel_name) \
  ::fp8emu::cuda::detail::check_cuda(cudaGetLastError(), "launch of " kernel_name)

namespace fp8emu::cuda::detail {

/// `n` elements of T in device memory, freed on destruction; move-only. A zero-length buffer holds
/// no allocation (get() is null). Transfers are synchronous (cudaMemcpy) and checked.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n_ > 0) FP8EMU_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
  }
  /// Allocates n elements and copies them from host memory.
  DeviceBuffer(const T* host, std::size_t n) : DeviceBuffer(n) { upload(host, n); }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);  // cannot throw from a destructor; a failed free leaks at worst
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  T* get() const { return p_; }
  std::size_t size() const { return n_; }

  /// Copies n <= size() elements from host memory to the start of the buffer.
  void upload(const T* host, std::size_t n) {
    FP8EMU_CHECK(n <= n_, "device buffer: upload of ", n, " elements into ", n_);
    if (n > 0) FP8EMU_CUDA_CHECK(cudaMemcpy(p_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  /// Copies n <= size() elements from the start of the buffer to host memory.
  void download(T* host, std::size_t n) const {
    FP8EMU_CHECK(n <= n_, "device buffer: download of ", n, " elements from ", n_);
    if (n > 0) FP8EMU_CUDA_CHECK(cudaMemcpy(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
  /// Sets every byte to zero.
  void zero() {
    if (n_ > 0) FP8EMU_CUDA_CHECK(cudaMemset(p_, 0, n_ * sizeof(T)));
  }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace fp8emu::cuda::detail
