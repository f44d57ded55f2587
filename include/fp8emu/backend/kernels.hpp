/// \file kernels.hpp
/// \brief The FP8 kernel sets behind the devices' casts and GEMMs, on host pointers: the CPU
/// emulator's (`emulated_kernels()`, SIMD and OpenMP; cpu_device() runs it), the per-element
/// reference (`element_kernels()`; element_device() runs it) and the GPU's (`cuda_kernels()`,
/// copying every operand to the GPU and back), compared with each other by the kernel check
/// (`fp8emu validate`, tests/emulation/test_simd_vs_element.cpp). Layers and quantizers do not
/// use this interface: they run on a backend::Device (device.hpp); the backend selection of
/// `--backend` is in select.hpp.
///
/// All pointers are host pointers; shapes and layouts are those of the emu:: function each method
/// mirrors (named in its comment). Methods throw fp8emu::Error on bad shapes (as emu::) and, for
/// `cuda`, on CUDA errors, naming the CUDA call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/backend/select.hpp"

namespace fp8emu::backend {

/// The FP8 kernels a layer calls. Implementations must agree bit for bit.
class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual const char* name() const = 0;
  /// emu::compute_amax.
  virtual float compute_amax(const float* x, std::size_t n) const = 0;
  /// emu::quantize (per-tensor scale, satfinite; amax max-accumulated if non-null).
  virtual emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                                      float* amax) const = 0;
  /// emu::dequantize.
  virtual void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) const = 0;
  /// emu::transpose (codes).
  virtual void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const = 0;
  /// emu::quantize_f32_2d, TE's cast_transpose (common/transpose/cast_transpose.cu): one pass over
  /// x (Shape [rows, cols], row-major) casts every element once with the per-tensor scale
  /// (satfinite, round-to-nearest-even) and writes the row-wise codes (Shape [rows, cols]) and/or
  /// the column-wise codes (Shape [cols, rows], the transpose); either output may be null, not
  /// both. amax max-accumulated with max |x| if non-null (NaN ignored). The codes equal quantize's,
  /// the column-wise ones transposed, and the counts are of rows*cols elements.
  /// \throws fp8emu::Error for a non-FP8 format, a negative shape or two null outputs.
  virtual emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt,
                                            std::uint8_t* q_rowwise, std::uint8_t* q_columnwise,
                                            float* amax) const = 0;
  /// emu::gemm_fp8_tn (any accumulation model).
  virtual void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                           const std::uint8_t* B, Format fb, float scale_inv_b, const emu::GemmAccumulation& acc,
                           float* D) const = 0;
  /// emu::quantize_mxfp8.
  virtual emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                             E8M0Rule rule, emu::QuantizeStats* stats) const = 0;
  /// emu::quantize_block_1d.
  virtual emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis,
                                                Format fmt, int block, bool pow2, float epsilon,
                                                emu::QuantizeStats* stats) const = 0;
  /// TE's MXFP8 quantize with both usages (common/cast/mxfp8/quantize_mxfp8.cuh, its kernel with
  /// row-wise and column-wise scaling): one read of x (Shape [rows, cols],
  /// row-major fp32) writes the row-wise operand (view [rows, cols], K = cols: 1 x 32 blocks along
  /// each row) and the column-wise operand (view [cols, rows], K = rows: 32 x 1 blocks along each
  /// column, codes stored transposed), each exactly as quantize_mxfp8 with that axis writes it:
  /// codes Shape [n, k] row-major, scale_inv and e8m0 Shape [n, ceil(k / 32)], each block scaled
  /// by the E8M0 code of its own amax (a max over core::amax_bits, NaN ignored; a final partial
  /// block by its own amax) under `rule`, elements RN(x * 2^(127-e)) under __NV_SATFINITE. The two
  /// copies are quantized independently from x, never from each other. Either output may be null
  /// (that copy is not made), not both; a non-null output is overwritten. `rowwise_stats` /
  /// `columnwise_stats` (each may be null) accumulate the counts of that copy's cast. The result
  /// is bit for bit that of quantize_mxfp8(kRowwise) and quantize_mxfp8(kColumnwise) (checked by
  /// the kernel check and tests/scaling/test_fused_block_casts.cpp).
  /// The default (the emulated and element sets) is those two calls; the cuda set overrides it with
  /// one fused kernel.
  /// \throws fp8emu::Error when both outputs are null, then as quantize_mxfp8 (negative shape,
  ///         non-FP8 format).
  virtual void quantize_mxfp8_both(const float* x, int rows, int cols, Format fmt, E8M0Rule rule,
                                   emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                   emu::QuantizeStats* rowwise_stats, emu::QuantizeStats* columnwise_stats) const;
  /// Float8BlockScaling's 1D cast with both usages (TE
  /// common/transpose/quantize_transpose_vector_blockwise.cu, rowwise and columnwise output): one
  /// read of x (Shape [rows, cols], row-major fp32) writes the row-wise operand (1 x `block`
  /// blocks, view [rows, cols]) and the column-wise operand (`block` x 1 blocks, view [cols, rows],
  /// codes transposed), each exactly as quantize_block_1d with that axis: fp32 scale per block
  /// s = compute_scale_from_amax(block amax, fp8_max, pow2, epsilon, FLT_MAX), scale_inv = RN(1/s)
  /// Shape [n, ceil(k / block)], elements RN(x * s) under __NV_SATFINITE. Outputs and stats as
  /// quantize_mxfp8_both; the result is bit for bit that of the two quantize_block_1d calls, which
  /// is the default.
  /// \throws fp8emu::Error when both outputs are null, then as quantize_block_1d (block < 1,
  ///         negative shape, non-FP8 format).
  virtual void quantize_block_1d_both(const float* x, int rows, int cols, Format fmt, int block, bool pow2,
                                      float epsilon, emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                      emu::QuantizeStats* rowwise_stats,
                                      emu::QuantizeStats* columnwise_stats) const;
  /// emu::quantize_block_2d: one call already returns both views (the same tile-scaled codes, the
  /// column-wise view transposed), so it has no two-axis form.
  virtual emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile,
                                                  bool pow2, float epsilon, emu::QuantizeStats* stats) const = 0;
  /// emu::gemm_fp8_block_tn.
  virtual void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const = 0;
};

/// The argument checks of Kernels::cast_transpose that every backend shares (messages as emu::).
void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise);

/// The argument check of Kernels::quantize_mxfp8_both / quantize_block_1d_both that every backend
/// runs first: at least one output. `what` names the cast ("MXFP8 quantize", "block quantize").
void check_block_both(const char* what, const emu::BlockQuantized* rowwise, const emu::BlockQuantized* columnwise);

/// The CPU emulator's kernels (always available): SIMD and OpenMP paths where it has them, the
/// element layer (include/fp8emu/core) elsewhere.
const Kernels& emulated_kernels();

/// The per-element kernel set: every method runs the element layer of include/fp8emu/core on one
/// thread, in the decomposition the CUDA kernels use (per element, per block, per tile; amax as a
/// max of bits; counts as sums), with the argument checks every backend shares. The reference
/// against which the emulator's SIMD paths (tests) and the GPU (`fp8emu validate`) are compared.
/// Slow: for checks, not for training.
const Kernels& element_kernels();

/// The GPU kernels. \throws fp8emu::Error (with why_not()) when !cuda_status().usable().
const Kernels& cuda_kernels();

}  // namespace fp8emu::backend
