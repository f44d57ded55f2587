/// \file backend.hpp
/// \brief The entry points of the CUDA library (fp8emu::cuda, built when nvcc is found) that the
/// backend selection (fp8emu/backend/select.hpp, src/backend/) calls: the probe and the GPU
/// device. Use backend::cuda_status() and backend::cuda_device() instead: they cache the probe and
/// fall back with a reason where no GPU can run.
#pragma once

#include "fp8emu/device/device.hpp"
#include "fp8emu/device/probe.hpp"

namespace fp8emu::cuda {

/// Probes the CUDA runtime, driver, GPUs and cuBLASLt versions. Never throws (a CUDA error is
/// recorded in CudaStatus::error), so it runs on machines without a driver or GPU.
backend::CudaStatus probe();

/// The GPU device (cuda/device_ops.cu): memory on the first GPU with compute capability >= 8.9 (or
/// the set_device_slot choice) and every operation of backend::Device on one stream it owns. Only
/// call it when probe().usable().
const backend::Device& device();

/// The CUDA device number of device()'s GPU (the set_device_slot choice). Only call it when
/// probe().usable(). \throws fp8emu::Error on a CUDA error.
int device_index();

/// backend::set_library_gemms / library_gemms for device(): the first read takes
/// FP8EMU_DEVICE_GEMM=library from the environment.
void set_library_gemms(bool on);
bool library_gemms();
/// backend::library_gemm_fallbacks for device().
unsigned long long library_gemm_fallbacks();

/// Before the first kernel: use the (slot mod count)-th GPU of compute capability >= 8.9 (see
/// backend::set_cuda_device_slot).
void set_device_slot(int slot);

}  // namespace fp8emu::cuda
