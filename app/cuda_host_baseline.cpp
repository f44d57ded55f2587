// See cuda_host_baseline.hpp. Only this file includes cuda_fp8.h.
#include "cuda_host_baseline.hpp"

#ifdef FP8EMU_HAVE_CUDA_FP8_H
#include <cuda_fp8.h>

#include <cmath>

#include "fp8emu/cuda/format_types.hpp"
#include "fp8emu/emulation/quantize.hpp"
#endif

namespace fp8emu::cli {

#ifdef FP8EMU_HAVE_CUDA_FP8_H
bool cuda_host_baseline_available() { return true; }

bool cuda_host_cast(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax) {
  emu::require_fp8(fmt, "bench convert (CUDA host baseline)");
  const __nv_fp8_interpretation_t nv_fmt = cuda::cuda_format(fmt).interpretation;
  float m = *amax;
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = __nv_cvt_float_to_fp8(x[i] * scale, __NV_SATFINITE, nv_fmt);
    m = fmaxf(m, fabsf(x[i]));
  }
  *amax = m;
  return true;
}
#else
bool cuda_host_baseline_available() { return false; }

bool cuda_host_cast(const float*, std::size_t, float, Format, std::uint8_t*, float*) { return false; }
#endif

}  // namespace fp8emu::cli
