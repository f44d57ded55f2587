// Private: the two entry points that the CUDA build (cuda/) provides, and src/backend/no_cuda.cpp
// when CUDA is not built.
#pragma once

#include "fp8emu/backend/kernels.hpp"

namespace fp8emu::backend::detail {

/// Probes the CUDA runtime, driver, GPUs and cuBLASLt; never throws.
CudaStatus probe_cuda();
/// The GPU kernel set; only called when probe_cuda().usable().
const Kernels& gpu_kernels();

}  // namespace fp8emu::backend::detail
