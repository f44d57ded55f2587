// The one table from fp8emu's format registry (include/fp8emu/format/format_spec.hpp)
// to CUDA's names for the same formats: the cuBLASLt / library data type (`CUDA_R_8F_E4M3`) and the
// cuda_fp8.h interpretation (`__NV_E4M3`). A format CUDA's FP8 code does not take has `fp8 = false`,
// and the callers reject it by name (emu::require_ocp_fp8) before any launch.
#pragma once

#include <cuda_fp8.h>
#include <library_types.h>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cuda {

struct CudaFormat {
  bool fp8;                               ///< An OCP FP8 format of cuda_fp8.h and cuBLASLt.
  cudaDataType_t data_type;               ///< cuBLASLt A/B/D type (when fp8).
  __nv_fp8_interpretation_t interpretation;  ///< cuda_fp8.h conversions (when fp8).
};

/// CUDA's names of a registry format (switch without default: a new Format is flagged here).
__host__ __device__ constexpr CudaFormat cuda_format(Format f) {
  switch (f) {
    case Format::kE4M3: return {true, CUDA_R_8F_E4M3, __NV_E4M3};
    case Format::kE5M2: return {true, CUDA_R_8F_E5M2, __NV_E5M2};
    case Format::kE4M3FNUZ:
    case Format::kE5M2FNUZ:
    case Format::kE2M3:
    case Format::kE3M2:
    case Format::kE2M1:
    case Format::kE8M0:
    case Format::kBinary16:
    case Format::kBFloat16:
      break;
  }
  return {false, CUDA_R_8F_E4M3, __NV_E4M3};
}

}  // namespace fp8emu::cuda
