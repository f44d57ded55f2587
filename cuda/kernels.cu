// GPU twins of the emulation kernels (see include/fp8emu/backend/kernels.hpp). Being written.
#include "../src/backend/detail.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend::detail {

const Kernels& gpu_kernels() { FP8EMU_FAIL("the GPU kernels are not built yet"); }

}  // namespace fp8emu::backend::detail
