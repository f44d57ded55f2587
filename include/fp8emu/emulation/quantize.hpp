/// \file quantize.hpp
/// \brief CPU (OpenMP) quantize / dequantize kernels with TE's per-tensor cast semantics.
///
/// Mirrors Transformer Engine's per-tensor FP8 cast (TE common/cast/fp8/quantize_fp8.cuh,
/// common/util/vectorized_pointwise.h; docs/transformer-engine.md §Per-tensor cast):
///   q[i]      = Q(RN(x[i] * scale))           one fp32 multiply (no FMA), then fp32 -> FP8 with
///                                              round-to-nearest-even and CUDA __NV_SATFINITE
///   amax      = max(amax, |x[i]|)             CUDA fmaxf semantics: NaN elements (quiet or
///                                              signalling) are ignored, +Inf kept; max-accumulates
///                                              into the value already at *amax
///   scale_inv = RN(1 / scale)                 __frcp_rn
/// Dequantize: y[i] = RN(decode(q[i]) * scale_inv).
///
/// quantize and dequantize run on the vectorised kernels of bulk_convert.hpp (which also take bf16
/// and fp16 input, give bf16 output and cast row-wise and column-wise in one pass).
///
/// Determinism: every output is independent of the thread count (elementwise work; amax is an
/// exact max; counts are integer sums).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// What a cast did to its input, as counts of elements (returned as data, never thrown).
struct QuantizeStats {
  std::uint64_t count = 0;      ///< Elements cast.
  std::uint64_t saturated = 0;  ///< Elements whose |x*scale| overflows the format under RNE (incl.
                                ///< +-Inf): clipped to max finite by SATFINITE.
  std::uint64_t underflow = 0;  ///< Finite non-zero x whose code is +-0: flushed to zero.
  std::uint64_t nan = 0;        ///< NaN elements (they become the NaN code).
  QuantizeStats& operator+=(const QuantizeStats& o) {
    count += o.count;
    saturated += o.saturated;
    underflow += o.underflow;
    nan += o.nan;
    return *this;
  }
};

/// The check every CPU FP8 kernel entry point makes of its format arguments.
/// \throws fp8emu::Error naming `what` and the format when f is not an FP8 format of the CPU
///         kernels (is_fp8_or_fnuz: OCP or FNUZ).
void require_fp8(Format f, const char* what);
/// The check of the GPU's FP8 kernels and cuBLASLt, which take the OCP formats only.
/// \throws fp8emu::Error naming `what` and the format when f is not an OCP FP8 format (is_fp8);
///         for an FNUZ format the message says it runs on the CPU backends.
void require_ocp_fp8(Format f, const char* what);
/// The check of the block-scaled casts and GEMMs: f must be an OCP MX element format
/// (is_mx_element: FP8, FP6 or FP4). \throws fp8emu::Error naming `what` and the format.
void require_block_element(Format f, const char* what);

/// Cast `n` fp32 values to FP8 codes with a per-tensor scale (TE semantics, see file comment).
/// \param[in]     x      Shape: [n], any layout (elementwise).
/// \param[in]     n      Number of elements.
/// \param[in]     scale  Multiplies x before the cast; any fp32 value (inf/NaN scales propagate).
/// \param[in]     fmt    Target format, __NV_SATFINITE overflow policy.
/// \param[out]    q      Shape: [n], FP8 codes in the same layout as x.
/// \param[in,out] amax   If non-null, max-accumulated with |x| (NaN ignored); not reset first.
/// \return        Saturation / underflow / NaN counts of this call.
QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                       float* amax);

/// Dequantize `n` FP8 codes: y[i] = RN(decode(q[i]) * scale_inv). NaN codes give NaN.
void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y);

/// max(|x[i]|) over n values, NaN ignored, 0 for n == 0 (TE amax kernel semantics).
float compute_amax(const float* x, std::size_t n);

/// RN(1 / scale) as TE's reciprocal<float> (__frcp_rn).
inline float scale_inv_of(float scale) { return 1.0f / scale; }

/// The 256 exact fp32 values of an MX element format's codes (FP8, FP6, FP4; NaN codes as CUDA's
/// canonical NaN; storage bits above the format ignored). \throws fp8emu::Error for other formats.
const float* decode_table(Format fmt);

}  // namespace fp8emu::emu
