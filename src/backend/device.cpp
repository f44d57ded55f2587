// backend::cuda_device() (see include/fp8emu/backend/device.hpp): the GPU device of the CUDA library
// where the cuda backend can run, otherwise fp8emu::Error with the reason. cpu_device() is defined in
// device_cpu.cpp.
#include "fp8emu/backend/device.hpp"

#include <atomic>

#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

#if defined(FP8EMU_HAVE_CUDA)
void set_library_gemms(bool on) { cuda::set_library_gemms(on); }
bool library_gemms() { return cuda::library_gemms(); }
unsigned long long library_gemm_fallbacks() { return cuda::library_gemm_fallbacks(); }
#else
namespace {
std::atomic<bool> library_flag{false};  // without CUDA: remembered, nothing reads it
}  // namespace
void set_library_gemms(bool on) { library_flag.store(on); }
bool library_gemms() { return library_flag.load(); }
unsigned long long library_gemm_fallbacks() { return 0; }
#endif

const Device& cuda_device() {
  const CudaStatus& s = cuda_status();
  FP8EMU_CHECK(s.usable(), "the cuda backend cannot run: ", s.why_not());
#if defined(FP8EMU_HAVE_CUDA)
  return cuda::device();
#else
  FP8EMU_FAIL("this fp8emu was built without CUDA");  // unreachable: usable() is false
#endif
}

}  // namespace fp8emu::backend
