// The baseline of `fp8emu bench convert`: TE's per-tensor cast as CUDA's own host code computes it
// (cuda_fp8.h, compiled with g++), when the CUDA toolkit's headers were found at build time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cli {

/// Whether cuda_fp8.h was found at build time (CMake defines FP8EMU_HAVE_CUDA_FP8_H for this file).
bool cuda_host_baseline_available();

/// One element at a time on the calling thread, CUDA's host code:
///   q[i] = __nv_cvt_float_to_fp8(x[i] * scale, __NV_SATFINITE, fmt), amax = fmaxf(amax, fabsf(x[i])).
/// \param x Shape: [n]. \param q Shape: [n], FP8 codes. \param amax In/out, max-accumulated.
/// \return false, doing nothing, when the baseline is unavailable.
bool cuda_host_cast(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax);

}  // namespace fp8emu::cli
