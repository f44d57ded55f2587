// The CUDA entry points of a build without CUDA (see src/backend/detail.hpp).
#include "detail.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend::detail {

CudaStatus probe_cuda() { return CudaStatus{}; }  // built = false: why_not() explains

const Kernels& gpu_kernels() { FP8EMU_FAIL("this fp8emu was built without CUDA"); }

}  // namespace fp8emu::backend::detail
