// backend::cuda_device() (see include/fp8emu/backend/device.hpp): the GPU device of the CUDA library
// where the cuda backend can run, otherwise fp8emu::Error with the reason; the shared argument checks.
// cpu_device() is defined in device_cpu.cpp, element_device() in device_element.cpp.
#include "fp8emu/backend/device.hpp"

#include <atomic>

#include "fp8emu/backend/select.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise) {
  emu::require_fp8(fmt, "cast_transpose");
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "cast_transpose: negative shape [", rows, ", ", cols, "]");
  FP8EMU_CHECK(q_rowwise || q_columnwise, "cast_transpose: both the row-wise and the column-wise output are null");
}

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
