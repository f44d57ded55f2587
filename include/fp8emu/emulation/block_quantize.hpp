/// \file block_quantize.hpp
/// \brief Block-scaled quantization (MXFP8, 128-block scaling, NVFP4) and the block-scaled GEMM.
///
/// Every operand is stored K-major for the GEMM (the TN layout Hopper's FP8 GEMM needs): codes
/// Shape [n, k] row-major with one scale per `block` consecutive K elements. Blocks are taken
/// from the high-precision input in either direction (TE quantizes row-wise and column-wise copies
/// independently from the input, never from each other).
///   MXFP8 (TE quantize_mxfp8.cuh; docs/transformer-engine.md §MXFP8): block 32,
///     E8M0 scale, q = Q(RN(v * 2^(127-e))), dequantization scale 2^(e-127).
///   Float8BlockScaling (TE quantize_transpose_vector_blockwise.cu / _square_blockwise.cu;
///     docs/transformer-engine.md §Block scaling):
///     1x128 blocks or 128x128 tiles, s = compute_scale_from_amax(block amax, fp8_max, pow2, eps,
///     FLT_MAX), q = Q(RN(v * s)), scale_inv = RN(1/s).
///   NVFP4 (TE cast/nvfp4/core_nvfp4.cuh; docs/nvfp4.md): E2M1 elements, blocks of 16 (or 16x16
///     tiles), an E4M3 scale per block under an fp32 tensor scale from the tensor's amax
///     (core::block_rule_scale's kNvfp4): scale_inv holds each block's E4M3 scale, `amax` the tensor
///     amax; a code dequantizes to RN(decode(q) * core::nvfp4_dequant_scale(scale_inv, amax)).
/// Elements may be any OCP MX element format (FP8, FP6, FP4: one code per byte, low bits).
/// Casts use CUDA __NV_SATFINITE. Block amax ignores NaN (a NaN element becomes the NaN code and does
/// not poison its block). Deviation from TE, documented: TE requires dims divisible by the block;
/// here a final partial block (fewer than `block` elements) is allowed and scaled by its own amax.
/// Determinism: identical results for any thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/emulation/gemm_models.hpp"

namespace fp8emu::emu {

/// Which direction of a row-major [rows, cols] input the blocks follow (= the GEMM's K axis).
enum class BlockAxis : std::uint8_t {
  kRowwise,     ///< Blocks of consecutive elements of a row (1 x B); K = cols; view Shape [rows, cols].
  kColumnwise,  ///< Blocks of consecutive rows of a column (B x 1); K = rows; view Shape [cols, rows].
};

/// A block-scaled operand in K-major form.
struct BlockQuantized {
  int n = 0;      ///< Rows of the view (M or N of the GEMM).
  int k = 0;      ///< Length of the K axis.
  int block = 0;  ///< K elements per scale (16, 32 or 128).
  Format format = Format::kE4M3;
  std::vector<std::uint8_t> codes;  ///< Shape [n, k], row-major.
  /// Shape [n, blocks()]: one-level scales: the dequantization multiplier per block; NVFP4 (amax
  /// set): each block's E4M3 scale S_dec_b (exact), under the tensor scale.
  std::vector<float> scale_inv;
  std::vector<std::uint8_t> e8m0;  ///< MXFP8 only: Shape [n, blocks()], scale_inv = 2^(e - 127).
  /// NVFP4 only: the tensor's amax the block scales sit under (TE's amax_rowwise /
  /// amax_columnwise); unset for one-level scales.
  std::optional<float> amax;
  int blocks() const { return (k + block - 1) / block; }
};

/// MXFP8 cast of a row-major [rows, cols] fp32 matrix with 32-element blocks along `axis`.
/// \param rule  kTransformerEngine (round-up of amax * fl32(1/fp8_max)) or kOcp
///              (2^(floor(log2 amax) - emax_elem), clamped to the E8M0 range; may saturate).
/// \param stats If non-null, accumulates what the cast did.
BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, BlockAxis axis, Format fmt,
                              E8M0Rule rule, QuantizeStats* stats);

/// E8M0 code of a block amax under a rule (the scale of one MXFP8 block).
std::uint8_t mxfp8_scale_code(float amax, Format fmt, E8M0Rule rule);

/// 1 x `block` cast along `axis` with any scale rule of the element layer (core::BlockRule: E8M0
/// as MXFP8's, or fp32 as Float8BlockScaling's): each block's amax, its scale by
/// core::block_rule_scale, its elements by core::cast_element (core::cast_view_block's bits,
/// vectorised); e8m0 written for the E8M0 rules. quantize_mxfp8 is this with block 32,
/// quantize_block_1d with an fp32 rule.
/// With an NVFP4 rule (core::BlockRule::has_tensor_scale) the tensor's amax is computed first
/// (NaN ignored) and stored in `amax`; the rule's tensor_amax pointer is not read.
/// \throws fp8emu::Error for block < 1, a negative shape or a format that is not an MX element
///         format ("MXFP8 quantize", "NVFP4 quantize" or "block quantize" by the rule).
BlockQuantized quantize_blocks(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                               const core::BlockRule& rule, QuantizeStats* stats);

/// 1 x `block` cast (Float8BlockScaling 1D) along `axis`, fp32 scales from compute_scale_from_amax.
BlockQuantized quantize_block_1d(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                                 bool pow2, float epsilon, QuantizeStats* stats);

/// `tile` x `tile` cast (Float8BlockScaling 2D, weights): one scale per tile; returns the row-wise
/// view (K = cols) and the column-wise view (K = rows), the same codes transposed and the same scales.
struct BlockQuantized2D {
  BlockQuantized rowwise, columnwise;
};
BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                   float epsilon, QuantizeStats* stats);
/// `tile` x `tile` cast with any fp32 or NVFP4 rule (NVFP4's 16 x 16 weights: each tile's amax
/// scaled by core::block_rule_scale; the tensor amax first, stored in both views' `amax`).
/// quantize_block_2d is this with an fp32 rule. \throws fp8emu::Error as quantize_block_2d, and
/// for an MXFP8 rule (E8M0 tiles are no recipe's).
BlockQuantized2D quantize_tiles(const float* x, int rows, int cols, Format fmt, int tile, const core::BlockRule& rule,
                                QuantizeStats* stats);

/// Dequantizes a block-scaled view into y [n, k] (row-major): RN(decode(q) * scale_inv[block]),
/// for NVFP4 RN(decode(q) * core::nvfp4_dequant_scale(scale_inv[block], amax)) (TE
/// dequantize_nvfp4.cuh).
void dequantize_blocks(const BlockQuantized& q, float* y);

/// An operand record for the K-major view of a row-major [rows, cols] input, sized (codes, scale_inv
/// and, with_e8m0, e8m0) and zero-filled: what every backend's block cast writes into.
BlockQuantized make_block_record(int rows, int cols, BlockAxis axis, int block, Format fmt, bool with_e8m0);

/// quantize_block_2d's scale_inv of both views from the per-tile scale_inv, Shape [ceil(rows/tile),
/// ceil(cols/tile)] row-major: every row (column) carries its tile's value for each block.
void spread_tile_scales(int rows, int cols, int tile, const float* tile_scale_inv, BlockQuantized2D& q);

/// The element layer's scale rule of quantize_mxfp8 for a format and E8M0 rule.
core::BlockRule mxfp8_rule(Format fmt, E8M0Rule rule);

/// The argument checks of gemm_fp8_block_tn, shared by every backend (same messages).
/// \throws fp8emu::Error if the K lengths or block sizes differ, the block size is < 1, a format
///         is not an MX element format, or one operand has an NVFP4 tensor scale and the other none.
void check_gemm_block_tn(const BlockQuantized& A, const BlockQuantized& B);

/// The accumulation check of the block-scaled GEMMs, shared by every backend: any model of the
/// table; each scale block's partial is promoted to the fp32 total, so the promotion interval must
/// be 0 and split_k at most 1. \throws fp8emu::Error naming both otherwise.
void check_block_accumulation(const GemmAccumulation& acc);

/// Block-scaled GEMM, D = A B^T with both operands K-major (TN):
///   D[i,j] = sum over K-blocks b, in increasing b, of RN(P_b[i,j] * RN(sa[i,b] * sb[j,b])),
///   accumulated in fp32 from +0, where P_b[i,j] is the block's products summed from zero under
///   acc.model (core::gemm_block_element): for kFp32 (the default) the fp32-sequential sum of the
///   exact products (as emu::gemm_fp8_nn), for a tensor-core row its chain of MMA steps. Promotion
///   of each block's partial sum to the fp32 accumulator is the "split accumulator" that TE forces
///   for block scaling. kFp32 runs register-tiled SIMD kernels; other models the element layer on
///   OpenMP threads (one output element per thread: the same bits for any thread count).
///   NVFP4 operands (both with `amax`): the same sums over the E4M3 block scales, then each
///   element RN(alpha * D) with alpha = core::nvfp4_gemm_alpha (TE's); applying alpha once to the
///   fp32 total is a model choice (how cuBLAS applies alpha to block-scaled sums is unpublished).
/// \param A Shape: [M, K]. \param B Shape: [N, K]. \param D Shape: [M, N] row-major, overwritten.
/// \throws fp8emu::Error as check_gemm_block_tn and check_block_accumulation.
void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, const GemmAccumulation& acc, float* D);
/// The kFp32 model: gemm_fp8_block_tn(A, B, {Accumulation::kFp32, 0, 1}, D).
void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, float* D);

}  // namespace fp8emu::emu
