// The CUDA probe (see include/fp8emu/cuda/backend.hpp): runtime, driver, GPUs and cuBLASLt versions.
// Plain C++ against the CUDA runtime API; never throws, so `fp8emu doctor` and the fallback work on
// machines without a driver or GPU (the usual case in CI).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "fp8emu/cuda/backend.hpp"

namespace fp8emu::cuda {

using backend::CudaStatus;
using backend::GpuInfo;

CudaStatus probe() {
  CudaStatus s;
  s.built = true;
  cudaRuntimeGetVersion(&s.runtime_version);
  s.cublaslt_version = cublasLtGetVersion();
  const cudaError_t de = cudaDriverGetVersion(&s.driver_version);
  if (de != cudaSuccess) {
    s.error = std::string("cudaDriverGetVersion: ") + cudaGetErrorString(de);
    return s;
  }
  int n = 0;
  const cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess) {
    s.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(ce) + ": " + cudaGetErrorString(ce);
    return s;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.memory_bytes = p.totalGlobalMem;
    s.gpus.push_back(g);
  }
  return s;
}

}  // namespace fp8emu::cuda
