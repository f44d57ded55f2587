// backend::cuda_device() (see include/fp8emu/backend/device.hpp). Interim: the GPU implementation
// (cuda/device_ops.cu) is being written; until it lands, the cuda device is refused with the reason
// the cuda backend gives, or, with a usable GPU, with "not implemented yet".
#include "fp8emu/backend/device.hpp"
#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend {

const Device& cuda_device() {
  const CudaStatus& s = cuda_status();
  FP8EMU_CHECK(s.usable(), "the cuda device is not available: ", s.why_not());
  FP8EMU_FAIL("the device-resident cuda backend is not implemented in this build yet (use --resident off)");
}

}  // namespace fp8emu::backend
