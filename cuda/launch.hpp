// Private to cuda/: the launchers of the GPU twins, on device pointers. Each runs the kernel(s) of
// one emu:: function on `stream` (asynchronously; errors of the launch configuration are thrown as
// fp8emu::Error) and maps its threads onto the per-element bodies of include/fp8emu/core. The GPU
// device (device_ops.cu) and the device-pointer API (device.cpp) call them; `fp8emu bench gpu` times
// them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/cast.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cuda::detail {

/// Threads per block of the 1-D (grid-stride) kernels, and the number of blocks for `work` items:
/// one item per thread up to kMaxBlocks1d blocks, grid-stride beyond.
constexpr int kThreads1d = 256;
constexpr std::size_t kMaxBlocks1d = 8192;
inline unsigned int blocks_1d(std::size_t work) {
  const std::size_t b = (work + kThreads1d - 1) / kThreads1d;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks1d ? kMaxBlocks1d : b));
}

/// The scale of a per-tensor cast: a value from the host, or (device non-null) read by the kernel
/// from device memory, where a recipe's state keeps it (backend::Device). Converts from a float.
struct ScaleArg {
  float value = 1.0f;
  const float* device = nullptr;
  ScaleArg(float v) : value(v) {}  // NOLINT(google-explicit-constructor): a host scale
  static ScaleArg at(const float* p) {
    ScaleArg a(1.0f);
    a.device = p;
    return a;
  }
};

/// The dequantization factor s of an FP8 GEMM, D = RN(acc * s): a value RN(scale_inv_a * scale_inv_b)
/// from the host, or (scale_a non-null) computed by the kernel from the two casts' scales in device
/// memory as emu::gemm_fp8_tn with emu::scale_inv_of: s = RN(RN(1 / *scale_a) * RN(1 / *scale_b)).
/// Converts from a float.
struct GemmScaleArg {
  float s = 1.0f;
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  GemmScaleArg(float v) : s(v) {}  // NOLINT(google-explicit-constructor): a host factor
  static GemmScaleArg from_scales(const float* a, const float* b) {
    GemmScaleArg g(1.0f);
    g.scale_a = a;
    g.scale_b = b;
    return g;
  }
};

/// Device-side totals of a cast: the counts of emu::QuantizeStats (without count) and the amax as
/// the max of core::amax_bits. Zero it before a launch; launches add to it.
struct CastTotals {
  unsigned long long saturated, underflow, nan;
  unsigned int amax_bits, unused;
};

/// Index of the GPU the twins run on: of the GPUs with compute capability >= 8.9, the
/// (set_device_slot mod count)-th, the first by default (cached), made current for the calling thread. \throws fp8emu::Error when there is none.
int use_fp8_device();

/// max over i of core::amax_bits(x[i]) max-accumulated into *amax_bits (emu::compute_amax).
void launch_amax(const float* x, std::size_t n, unsigned int* amax_bits, cudaStream_t stream);
/// TE NVFP4's random Hadamard transform of x [rows, cols] along its rows: out[r, c] =
/// core::rht16_element of rows 16 * (r / 16) .. + 15 of column c, output r % 16; rows past the
/// last whole group of 16 are x's.
void launch_rht_rows(const float* x, int rows, int cols, std::uint16_t sign_mask, float* out, cudaStream_t stream);
/// emu::quantize: q[i] = code of RN(x[i] * scale), counts and amax added to *totals.
void launch_quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, CastTotals* totals,
                     cudaStream_t stream);
/// The epilogue of emu::gemm_fp8_tn's GemmEpilogue overload over t [M, N] (the scaled product):
/// per element core::gemm_epilogue_element, then the output conversion of ep.output into D (t and D
/// may be the same fp32 buffer); the amax of the epilogue's values is max-accumulated into
/// *amax_bits (nullable). ep.C and ep.bias are device pointers; ep.amax_d is not read.
void launch_gemm_epilogue(int M, int N, const float* t, const emu::GemmEpilogue& ep, void* D,
                          unsigned int* amax_bits, cudaStream_t stream);
/// emu::dequantize.
void launch_dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y,
                       cudaStream_t stream);
/// emu::transpose of codes: out [cols, rows] = in [rows, cols]^T.
void launch_transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out, cudaStream_t stream);
/// emu::transpose of fp32 values (the same kernel).
void launch_transpose(int rows, int cols, const float* in, float* out, cudaStream_t stream);

/// emu::quantize_f32_2d (TE's cast_transpose) on device pointers: the row-wise and/or column-wise codes (either may be
/// null) of one read of x [rows, cols]; counts and amax bits added to *totals. The scale is a host
/// value or read from device memory (ScaleArg::at).
void launch_cast_transpose(const float* x, int rows, int cols, ScaleArg scale, Format fmt, std::uint8_t* q_rowwise,
                           std::uint8_t* q_columnwise, CastTotals* totals, cudaStream_t stream);
/// The same from bf16 (bits): each element widened exactly to fp32, then cast as above (TE's cast
/// of a bf16 activation or gradient); amax of the widened values.
void launch_cast_transpose(const std::uint16_t* x_bf16, int rows, int cols, ScaleArg scale, Format fmt,
                           std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, CastTotals* totals,
                           cudaStream_t stream);
/// emu cast_blocks for quantize_mxfp8 / quantize_block_1d: x is row-major [rows, cols]; codes
/// [n, K], scale_inv [n, nb], e8m0 [n, nb] (MXFP8 rules only, else may be null).
void launch_block_cast(const float* x, int rows, int cols, bool rowwise, int block, Format fmt,
                       const core::BlockRule& rule, std::uint8_t* codes, float* scale_inv, std::uint8_t* e8m0,
                       CastTotals* totals, cudaStream_t stream);
/// One copy's outputs of a fused two-axis block cast (device pointers) for the K-major view of
/// x [rows, cols]: codes [n, K] row-major, scale_inv [n, ceil(K / block)], e8m0 of the same shape
/// for MXFP8 rules (null otherwise), the cast's counts added to *totals. codes null: no such copy.
struct BlockCastOut {
  std::uint8_t* codes = nullptr;
  float* scale_inv = nullptr;
  std::uint8_t* e8m0 = nullptr;
  CastTotals* totals = nullptr;
};
/// Device::block_cast of 1 x block blocks with both views, on device pointers: one read of x
/// [rows, cols] writes the row-wise view (K = cols) and/or the column-wise view (K = rows, codes
/// [cols, rows]) with their scales, each as launch_block_cast with that axis. One fused kernel for
/// block 32 (MXFP8) and 128 (1x128); other block sizes run launch_block_cast once per copy.
void launch_block_cast_both(const float* x, int rows, int cols, int block, Format fmt, const core::BlockRule& rule,
                            const BlockCastOut& rowwise, const BlockCastOut& columnwise, cudaStream_t stream);
/// emu::quantize_tiles, steps 1-2: per tile of x [rows, cols], its multiplier and scale_inv by
/// `rule` (core::block_rule_scale; an NVFP4 rule's tensor_amax in device memory), in
/// [ceil(rows/tile), ceil(cols/tile)], then the row-wise codes [rows, cols] with their counts.
void launch_tile_cast(const float* x, int rows, int cols, int tile, Format fmt, const core::BlockRule& rule,
                      float* tile_scale, float* tile_scale_inv, std::uint8_t* codes, CastTotals* totals,
                      cudaStream_t stream);
/// emu::quantize_block_2d's codes and tile scales, both copies: the row-wise codes [rows, cols]
/// and/or the column-wise codes [cols, rows] (either may be null), tile scale and scale_inv
/// ([ceil(rows/tile), ceil(cols/tile)]), the counts of the one cast. 128 x 128 tiles (TE's) run in
/// one pass (one read of x); other tiles run launch_tile_cast into q_rowwise (required: throws
/// fp8emu::Error when null) and the code transpose.
void launch_tile_cast_both(const float* x, int rows, int cols, int tile, Format fmt, const core::BlockRule& rule,
                           float* tile_scale, float* tile_scale_inv, std::uint8_t* q_rowwise,
                           std::uint8_t* q_columnwise, CastTotals* totals, cudaStream_t stream);
/// emu::gemm_fp8_tn (checks done by the caller): D [M, N] = RN(acc(A [M, K], B [N, K]) * s), acc
/// with the promotion interval and split_k of emu::GemmAccumulation (core::gemm_tn_element); s a host
/// value or computed from device-resident scales (GemmScaleArg::from_scales).
void launch_gemm_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb,
                    Accumulation model, int promotion, int split_k, GemmScaleArg s, float* D, cudaStream_t stream);
/// emu::gemm_fp8_block_tn: A [M, K] with sa [M, nb], B [N, K] with sb [N, nb], D [M, N], each
/// block's partial under `model` (core::gemm_block_element); NVFP4 operands (amax_a and amax_b in
/// device memory, else both null): D = RN(alpha * total), core::nvfp4_gemm_alpha.
void launch_gemm_block_tn(int M, int N, int K, int block, const std::uint8_t* A, Format fa, const float* sa,
                          const std::uint8_t* B, Format fb, const float* sb, const float* amax_a,
                          const float* amax_b, Accumulation model, float* D, cudaStream_t stream);

}  // namespace fp8emu::cuda::detail
