/// \file device_probe.hpp
/// \brief Small GPU experiments that settle questions the host mirror of CUDA cannot: what the
/// hardware conversion `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` returns (NaN sign and payload, Inf,
/// the overflow midpoints), whether it equals fp8emu's mirror (fp8emu/nv.hpp) for every fp32 input,
/// and how the device's fmaxf treats NaNs (the amax rule). Used by `fp8emu validate`.
///
/// Available only when fp8emu is built with CUDA; needs compute capability >= 8.9 (on sm_89+,
/// cuda_fp8.h's device path of __nv_cvt_float_to_fp8 with __NV_SATFINITE is that PTX instruction).
/// \throws fp8emu::Error on a CUDA error or without such a GPU. No CUDA header is included here.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cuda {

/// __nv_cvt_float_to_fp8(x[i], sat, fmt) run in a kernel.
std::vector<std::uint8_t> device_cvt_float_to_fp8(const std::vector<float>& x, Saturation sat, Format fmt);

/// Inline PTX `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b` run in a kernel: the 16-bit d of each
/// pair (the PTX ISA puts a's code in bits 15:8 and b's in bits 7:0).
std::vector<std::uint16_t> device_cvt_x2_ptx(const std::vector<float>& a, const std::vector<float>& b, Format fmt);

/// fmaxf(a[i], b[i]) run in a kernel.
std::vector<float> device_fmaxf(const std::vector<float>& a, const std::vector<float>& b);

/// Result of a sweep over all 2^32 fp32 bit patterns.
struct CvtSweep {
  std::uint64_t inputs = 0;             ///< 2^32.
  std::uint64_t mismatches = 0;         ///< Inputs where the two conversions differ.
  std::vector<std::uint32_t> examples;  ///< Up to 16 differing inputs (bits) ...
  std::vector<std::uint8_t> device;     ///< ... the GPU's codes for them ...
  std::vector<std::uint8_t> mirror;     ///< ... and fp8emu's.
};

/// Every fp32 bit pattern through __nv_cvt_float_to_fp8 on the GPU and through
/// fp8emu::nv::cvt_float_to_fp8 compiled for the GPU, compared on the device.
CvtSweep sweep_cvt_float_to_fp8(Saturation sat, Format fmt);

}  // namespace fp8emu::cuda
