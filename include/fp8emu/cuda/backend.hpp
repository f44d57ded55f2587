/// \file backend.hpp
/// \brief The two entry points of the CUDA library (fp8emu::cuda, built when nvcc is found) that the
/// backend selection of fp8emu/backend/kernels.hpp calls: the probe and the GPU kernel set. Use
/// backend::cuda_status() and backend::cuda_kernels() instead: they cache the probe and fall back
/// with a reason where no GPU can run.
#pragma once

#include "fp8emu/backend/kernels.hpp"

namespace fp8emu::cuda {

/// Probes the CUDA runtime, driver, GPUs and cuBLASLt versions. Never throws (a CUDA error is
/// recorded in CudaStatus::error), so it runs on machines without a driver or GPU.
backend::CudaStatus probe();

/// The GPU kernel set (cuda/kernels.cu, cuda/gemm.cu): every method copies its host inputs to the
/// first GPU with compute capability >= 8.9, runs the element layer there and copies back.
/// Only call it when probe().usable().
const backend::Kernels& kernels();

/// Before the first kernel: use the (slot mod count)-th GPU of compute capability >= 8.9 (see
/// backend::set_cuda_device_slot).
void set_device_slot(int slot);

}  // namespace fp8emu::cuda
