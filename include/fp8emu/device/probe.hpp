/// \file probe.hpp
/// \brief What the machine offers for the `cuda` backend: the record the CUDA library's probe fills
/// (fp8emu::cuda::probe) and backend::cuda_status() caches. Part of the device interface, below
/// cuda/ and the backend selection (backend/select.hpp), so the CUDA library includes no header of
/// the layers above it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fp8emu::backend {

/// What the machine offers for the `cuda` backend (never throws; probed once, then cached).
struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  ///< Compute capability.
  std::size_t memory_bytes = 0;
  bool fp8_mma() const { return cc_major * 10 + cc_minor >= 89; }  ///< FP8 mma.sync (sm_89+).
  bool wgmma() const { return cc_major == 9 && cc_minor == 0; }    ///< wgmma (sm_90a).
  bool mxfp8() const { return cc_major >= 10; }                    ///< block-scaled MMA (sm_100+).
};
struct CudaStatus {
  bool built = false;            ///< This fp8emu was compiled with CUDA (nvcc found at configure).
  int runtime_version = 0;       ///< cudaRuntimeGetVersion (e.g. 13000), 0 if not built.
  int driver_version = 0;        ///< cudaDriverGetVersion, 0 without a driver.
  std::size_t cublaslt_version = 0;  ///< cublasLtGetVersion, 0 if not built.
  std::vector<GpuInfo> gpus;
  std::string error;             ///< The CUDA error met while probing, if any.
  /// True when the `cuda` backend can run: built, and some GPU has compute capability >= 8.9.
  bool usable() const;
  /// Why `cuda` cannot run, and how to fix it (one sentence each); empty when usable().
  std::string why_not() const;
};

}  // namespace fp8emu::backend
