/// \file device.hpp
/// \brief The GPU twins of the emulator's casts and GEMM on device memory: the public device-pointer
/// API of the CUDA library (fp8emu::cuda, built when nvcc is found; FP8EMU_HAVE_CUDA).
///
/// Each function runs the same kernels as the `cuda` backend's device (cuda/kernels.cu, cuda/gemm.cu), which
/// map threads onto the per-element bodies of include/fp8emu/core, the functions the CPU emulator
/// calls: the results are the emulator's bits (FP8 codes, fp32 values, counts and amax; an fp32 NaN
/// produced by an fp32 operation is the GPU's 0x7FFFFFFF, see docs/gpu.md §Exactness). What
/// differs from backend::cuda_device(): the caller's memory and stream, and scales passed as host
/// values.
///
/// Contract of every function:
///   - Pointers: device memory (cudaMalloc, a framework's allocator, or managed memory) of the
///     calling thread's current device (cudaSetDevice), row-major and densely packed as stated per
///     function. Inputs are read only; outputs must not overlap inputs.
///   - Device: the current one; it must have compute capability 8.9 or newer with a kernel image of
///     this build (sm_89 and sm_90 by default, with PTX for newer GPUs). use_device() checks that and
///     makes a device current.
///   - Streams: `stream` is a cudaStream_t passed as void* (this header includes no CUDA header);
///     nullptr is the legacy default stream. The work is enqueued on it and the function returns
///     without waiting (asynchronous): inputs must stay valid and unmodified, and outputs must not
///     be read, until the stream has reached that point (cudaStreamSynchronize, an event, or
///     later work on the same stream). Exceptions: use_device() and read_stats() are synchronous;
///     zero-size calls enqueue nothing.
///   - Errors: argument errors are detected on the host before anything is enqueued and thrown as
///     fp8emu::Error with the emulator's messages (emu::require_ocp_fp8, emu::check_gemm_tn); a failed
///     CUDA call or kernel launch throws fp8emu::Error "CUDA call <call> failed: <name>: <text>".
///     Errors of the kernels' execution (a bad pointer) are reported by CUDA at the next
///     synchronising call, as for any asynchronous CUDA work.
///   - Thread safety: the functions keep no state; concurrent calls on different streams are fine.
///
/// Host-pointer equivalents (same bits): emu::quantize, emu::dequantize, emu::quantize_f32_2d,
/// emu::transpose, emu::compute_amax, emu::gemm_fp8_tn (include/fp8emu/emulation/).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cuda {

/// A cudaStream_t as an opaque pointer; nullptr is the legacy default stream.
using Stream = void*;

/// The totals of one or more casts, in device memory (what the kernels accumulate atomically):
/// the counts of emu::QuantizeStats (saturated, underflow, NaN) and the amax as the largest
/// core::amax_bits of the inputs (the bits of |x|; NaN ignored; 0 for no element). Zero it before
/// the first cast (zero_stats); each cast adds to it, so several casts can share one.
struct DeviceCastStats {
  unsigned long long saturated, underflow, nan;
  unsigned int amax_bits, reserved;
};

/// DeviceCastStats read back to the host.
struct CastStats {
  std::uint64_t saturated = 0, underflow = 0, nan = 0;
  float amax = 0.0f;  ///< max |x| over the inputs, NaN ignored (as emu::compute_amax).
};

/// Makes `device` the calling thread's current device. \throws fp8emu::Error when it does not exist
/// or its compute capability is below 8.9 (naming it), or on a CUDA error.
void use_device(int device);

/// Enqueues setting *stats to zero (cudaMemsetAsync).
void zero_stats(DeviceCastStats* stats, Stream stream);

/// Waits for `stream`, then copies *stats to the host (blocking).
CastStats read_stats(const DeviceCastStats* stats, Stream stream);

/// emu::quantize on the GPU: q[i] = code of RN(x[i] * scale) in `fmt` (E4M3 or E5M2) with CUDA's
/// __NV_SATFINITE rule (finite overflow and +-Inf to +-max, NaN to the NaN code), round to nearest
/// even, the multiply in fp32 without FMA. x: n floats; q: n bytes. Counts and amax of x are added
/// to *stats when it is non-null (otherwise a stream-ordered scratch is used and dropped).
/// \throws fp8emu::Error for another format (emu::require_ocp_fp8), or a CUDA error.
void quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, DeviceCastStats* stats,
              Stream stream);

/// emu::dequantize on the GPU: y[i] = RN(value(q[i]) * scale_inv) in fp32; q: n codes of `fmt`
/// (E4M3 or E5M2), y: n floats.
void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y, Stream stream);

/// The cast of quantize() over x Shape [rows, cols] (row-major), in one read of x (TE's
/// cast_transpose): the row-wise codes q_rowwise Shape [rows, cols] and/or the column-wise codes
/// q_columnwise Shape [cols, rows] (the transpose); either may be null (not both). Counts and amax
/// of x are added to *stats when non-null (the counts of one cast, whichever copies are written).
/// \throws fp8emu::Error for negative sizes, both outputs null, another format, or a CUDA error.
void cast_transpose(const float* x, int rows, int cols, float scale, Format fmt, std::uint8_t* q_rowwise,
                    std::uint8_t* q_columnwise, DeviceCastStats* stats, Stream stream);

/// emu::transpose of codes: out Shape [cols, rows] = in Shape [rows, cols]^T.
void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out, Stream stream);

/// emu::compute_amax on the GPU: the largest core::amax_bits(x[i]) over n floats, max-accumulated
/// into *amax_bits (device memory; zero it first, or pass DeviceCastStats::amax_bits). Convert with
/// core::bits_to_f32.
void amax(const float* x, std::size_t n, unsigned int* amax_bits, Stream stream);

/// emu::gemm_fp8_tn on the GPU, one thread per element of D:
///   D[i, j] = RN(acc(A[i, :], B[j, :]) * RN(scale_inv_a * scale_inv_b))
/// A Shape [M, K] and B Shape [N, K] row-major FP8 codes (K-contiguous, Hopper's TN layout), D Shape
/// [M, N] row-major fp32; acc is acc.model with acc.promotion_interval and acc.split_k
/// (core::gemm_tn_element; docs/tensor-core-model.md). The scale product is rounded on the host.
/// \throws fp8emu::Error as emu::check_gemm_tn (E5M2 x E5M2, negative sizes, a promotion interval
///         or split_k the model does not take), or on a CUDA error.
void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D, Stream stream);

/// emu::gemm_fp8_tn with a GemmEpilogue on the GPU, the emulator's bits: the scaled product of
/// gemm_fp8_tn above, then per element core::gemm_epilogue_element (alpha, beta * C, bias; one fp32
/// rounding each) and the output conversion of ep.output: fp32; bf16 or fp16 bits, round to
/// nearest even (bf16 NaN: quiet, sign kept); or the FP8 code of RN(t * ep.d_scale) in
/// ep.output_format with __NV_SATFINITE. D holds M * N elements of that type (float, uint16 bits,
/// uint8 codes).
///   - ep.C (Shape [M, N] fp32, read only when ep.beta != 0) and ep.bias (Shape [N] fp32, nullable)
///     are device pointers.
///   - ep.amax_d must be null: the amax of the epilogue's values before d_scale (NaN ignored, as
///     CUBLASLT_MATMUL_DESC_AMAX_D_POINTER) is max-accumulated as core::amax_bits into *amax_bits
///     (device memory, nullable; zero it first; convert with core::bits_to_f32).
///   - C may overlap D (D itself: an in-place accumulate): C is read as it was before the call, as
///     the emulator reads it (an overlapping C is first copied to a stream-ordered scratch). A
///     non-fp32 output takes a stream-ordered scratch of M * N floats for the scaled product.
/// \throws fp8emu::Error as gemm_fp8_tn, when beta != 0 without C, ep.amax_d is set, or a kFp8
///         output's format is not an OCP FP8 format; or on a CUDA error.
void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, const emu::GemmEpilogue& ep,
                 void* D, unsigned int* amax_bits, Stream stream);

}  // namespace fp8emu::cuda
