/// \file bulk_convert.hpp
/// \brief Bulk CPU kernels (SIMD + OpenMP) of TE's per-tensor FP8 cast and its inverse: fp32,
/// bfloat16 and fp16 arrays -> FP8 codes with the amax computed in the same pass, 2-D row-wise and
/// column-wise (transposed) outputs, and FP8 -> fp32 / bfloat16 dequantization.
///
/// Mirrors Transformer Engine's per-tensor cast (TE common/cast/fp8/quantize_fp8.cuh with
/// common/util/vectorized_pointwise.h, and the cast-transpose of common/transpose/cast_transpose.cu;
/// docs/transformer-engine.md §Per-tensor cast), elementwise:
///
///     xf   = widen(x[i])                      exact: fp32 as is, bf16/fp16 widened exactly to fp32
///     q[i] = encode(RN(xf * scale))           one fp32 multiply (no FMA), then CUDA's
///                                             __nv_cvt_float_to_fp8(., __NV_SATFINITE, fmt)
///     amax = max(amax, |xf|)                  CUDA fmaxf semantics: every NaN ignored (signalling ones
///                                             too), +Inf kept; the result is max-accumulated into the
///                                             value already at *amax with fmaxf
///
/// Exactness contract: q[i] is bit-identical to
/// `core::encode_f32_bits(core::f32_to_bits(xf * scale), spec_of(fmt), Saturation::kSatFinite)` for
/// every input and scale (tests/emulation/test_bulk_convert.cpp sweeps structured sets of all fp32
/// patterns, all 2^16 bf16 and fp16 inputs, and checks CUDA's host code directly when cuda_fp8.h is
/// available), and the amax and counts equal emu::quantize's (which runs on these kernels). Overflow policy: __NV_SATFINITE only
/// (finite overflow and +-Inf go to +-max finite, every NaN to the positive NaN code 0x7F).
/// Rounding: round to nearest, ties to even, once (the fp32 product is itself RN). Assumes the
/// default floating-point environment (round to nearest, no FTZ/DAZ), as TE's fp32 product does: the
/// kernel also rounds the FP8 subnormal range with an (exact-in-that-mode) fp32 addition.
///
/// Determinism: every output (codes, amax, counts) is independent of the OpenMP thread count and of
/// the instruction set chosen at load time (the work is elementwise, the amax an exact max, the
/// counts integer sums; arrays of at least detail::kParallelMinElements elements are split over
/// threads with static partitioning).
///
/// Aliasing: outputs must not overlap inputs or each other. Pointers need no particular alignment.
/// An empty array (n == 0, or rows or cols == 0) is allowed: nothing is written, and *amax becomes
/// fmaxf(*amax, 0) as in emu::quantize (the max over no elements is +0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// Cast `n` fp32 values to FP8 codes with a per-tensor scale, amax in the same pass.
/// \param[in]     x      Shape: [n], any layout (elementwise).
/// \param[in]     n      Number of elements.
/// \param[in]     scale  Multiplies x before the cast; any fp32 value (Inf/NaN scales propagate
///                       through the product: Inf -> +-max finite, NaN -> 0x7F).
/// \param[in]     fmt    Target format (__NV_SATFINITE).
/// \param[out]    q      Shape: [n], FP8 codes in the layout of x.
/// \param[in,out] amax   If non-null, max-accumulated with max |x| (NaN ignored); not reset first.
/// \param[out]    stats  If non-null, overwritten with this call's counts (as emu::quantize returns
///                       them); counting costs a little time, so pass nullptr when not needed.
void quantize_f32(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                  QuantizeStats* stats = nullptr);

/// As quantize_f32 for bfloat16 input given as raw bits (`__nv_bfloat16_raw`), widened exactly to
/// fp32 (the 16 bits become the top half) before the scale multiply.
/// \param[in] x  Shape: [n], bfloat16 bit patterns.
void quantize_bf16(const std::uint16_t* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                   QuantizeStats* stats = nullptr);

/// As quantize_f32 for IEEE binary16 input given as raw bits (`__half_raw`), widened exactly to
/// fp32 (core::half_to_f32_bits) before the scale multiply.
/// \param[in] x  Shape: [n], fp16 bit patterns.
void quantize_f16(const std::uint16_t* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                  QuantizeStats* stats = nullptr);

/// 2-D per-tensor cast of a row-major [rows, cols] matrix into a row-wise copy, a column-wise
/// (transposed) copy, or both in one cache-blocked pass over x (TE's cast-transpose: the transposed
/// copy is what the wgrad/dgrad GEMMs read). Elementwise semantics and amax as quantize_f32; the
/// column-wise codes are exactly the transpose of the row-wise codes.
/// \param[in]     x            Shape: [rows, cols], row-major.
/// \param[in]     rows, cols   Matrix dimensions (either may be 0).
/// \param[in]     scale        Multiplies x before the cast.
/// \param[in]     fmt          Target format (__NV_SATFINITE).
/// \param[out]    q_rowwise    If non-null: Shape [rows, cols], row-major, q_rowwise[r*cols + c].
/// \param[out]    q_columnwise If non-null: Shape [cols, rows], row-major, q_columnwise[c*rows + r]
///                             = code of x[r*cols + c].
/// \param[in,out] amax         If non-null, max-accumulated with max |x| (NaN ignored).
/// \param[out]    stats        If non-null, overwritten with the counts over the rows*cols elements
///                             (each element counted once, whichever outputs are written).
/// \throws fp8emu::Error if both outputs are null or rows * cols overflows std::size_t.
void quantize_f32_2d(const float* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                     std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax,
                     QuantizeStats* stats = nullptr);

/// quantize_f32_2d for bfloat16 bit patterns (Shape: [rows, cols], row-major).
void quantize_bf16_2d(const std::uint16_t* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                      std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax,
                      QuantizeStats* stats = nullptr);

/// quantize_f32_2d for fp16 bit patterns (Shape: [rows, cols], row-major).
void quantize_f16_2d(const std::uint16_t* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                     std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax,
                     QuantizeStats* stats = nullptr);

/// Dequantize `n` FP8 codes to fp32: y[i] = RN(decode(q[i]) * scale_inv) (one fp32 multiply of the
/// exact code value). NaN codes give NaN; E5M2 +-Inf gives +-Inf times scale_inv.
/// \param[in]  q  Shape: [n] codes.  \param[out] y  Shape: [n], same layout.
void dequantize_to_f32(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y);

/// Dequantize `n` FP8 codes to bfloat16 bits: y[i] = core::f32_bits_to_bf16_rne(bits of
/// RN(decode(q[i]) * scale_inv)): two roundings, to fp32 then to bf16 with round-to-nearest-even
/// (CUDA `__float2bfloat16_rn`; overflow to +-Inf, every NaN to 0x7FFF).
/// \param[in]  q  Shape: [n] codes.  \param[out] y  Shape: [n], bfloat16 bit patterns.
void dequantize_to_bf16(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, std::uint16_t* y);

}  // namespace fp8emu::emu
