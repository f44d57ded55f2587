// Block-scaled FP8 quantization and GEMM (see include/fp8emu/emulation/block_quantize.hpp).
#include "fp8emu/emulation/block_quantize.hpp"

#include <algorithm>
#include <vector>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

#include "block_cast.hpp"
#include "gemm_kernel.hpp"

namespace fp8emu::emu {
namespace {

constexpr int kMxBlock = 32;  // OCP MX v1.0: 32 elements share one E8M0 scale.

}  // namespace

BlockQuantized make_block_record(int rows, int cols, BlockAxis axis, int block, Format fmt, bool with_e8m0) {
  require_fp8(fmt, "block quantize");
  const bool rowwise = axis == BlockAxis::kRowwise;
  BlockQuantized q;
  q.n = rowwise ? rows : cols;
  q.k = rowwise ? cols : rows;
  q.block = block;
  q.format = fmt;
  q.codes.resize(std::size_t(q.n) * std::size_t(q.k));
  q.scale_inv.resize(std::size_t(q.n) * std::size_t(q.blocks()));
  if (with_e8m0) q.e8m0.resize(q.scale_inv.size());
  return q;
}

void spread_tile_scales(int rows, int cols, int tile, const float* tile_scale_inv, BlockQuantized2D& q) {
  const int tc = (cols + tile - 1) / tile;
  BlockQuantized& rw = q.rowwise;
  BlockQuantized& cw = q.columnwise;
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < rw.blocks(); ++b)
      rw.scale_inv[std::size_t(r) * std::size_t(rw.blocks()) + std::size_t(b)] =
          tile_scale_inv[std::size_t(r / tile) * std::size_t(tc) + std::size_t(b)];
  for (int c = 0; c < cols; ++c)
    for (int b = 0; b < cw.blocks(); ++b)
      cw.scale_inv[std::size_t(c) * std::size_t(cw.blocks()) + std::size_t(b)] =
          tile_scale_inv[std::size_t(b) * std::size_t(tc) + std::size_t(c / tile)];
}

void check_gemm_block_tn(const BlockQuantized& A, const BlockQuantized& B) {
  require_fp8(A.format, "block-scaled GEMM operand A");
  require_fp8(B.format, "block-scaled GEMM operand B");
  FP8EMU_CHECK(A.k == B.k, "block-scaled GEMM: K mismatch, A has K = ", A.k, ", B has K = ", B.k);
  FP8EMU_CHECK(A.block == B.block, "block-scaled GEMM: block sizes differ (", A.block, " vs ", B.block, ")");
  FP8EMU_CHECK(A.block >= 1, "block-scaled GEMM: block size must be >= 1, got ", A.block);
}

core::BlockRule mxfp8_rule(Format fmt, E8M0Rule rule) {
  return core::BlockRule::mxfp8(spec_of(fmt), rule == E8M0Rule::kTransformerEngine);
}

std::uint8_t mxfp8_scale_code(float amax, Format fmt, E8M0Rule rule) {
  const core::BlockRule r = mxfp8_rule(fmt, rule);
  return core::mxfp8_scale_code(amax, spec_of(fmt), r.kind == core::BlockRule::kMxfp8Te, r.rcp_max);
}

BlockQuantized quantize_blocks(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                               const core::BlockRule& rule, QuantizeStats* stats) {
  const char* what = rule.is_mxfp8() ? "MXFP8 quantize" : "block quantize";
  FP8EMU_CHECK(block >= 1, what, ": block size must be >= 1, got ", block);
  FP8EMU_CHECK(rows >= 0 && cols >= 0, what, ": negative shape");
  BlockQuantized q = make_block_record(rows, cols, axis, block, fmt, rule.is_mxfp8());
  // The vectorised block cast (block_cast.hpp): the bits of core::cast_view_block.
  const QuantizeStats st = detail::cast_view_blocks(x, rows, cols, axis == BlockAxis::kRowwise, rule, q);
  if (stats) *stats += st;
  return q;
}

BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, BlockAxis axis, Format fmt,
                              E8M0Rule rule, QuantizeStats* stats) {
  return quantize_blocks(x, rows, cols, axis, fmt, kMxBlock, mxfp8_rule(fmt, rule), stats);
}

BlockQuantized quantize_block_1d(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                                 bool pow2, float epsilon, QuantizeStats* stats) {
  return quantize_blocks(x, rows, cols, axis, fmt, block, core::BlockRule::fp32_scale(spec_of(fmt), pow2, epsilon),
                         stats);
}

BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                   float epsilon, QuantizeStats* stats) {
  FP8EMU_CHECK(tile >= 1, "block quantize: tile size must be >= 1, got ", tile);
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "block quantize: negative shape");
  const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
  // 1-2. Each tile's amax and scale, then the row-wise codes, each element by its tile's scale
  //      (vectorised; the bits of core::tile_amax, core::block_scale and core::cast_element).
  BlockQuantized2D out;
  out.rowwise = make_block_record(rows, cols, BlockAxis::kRowwise, tile, fmt, false);  // checks the format
  out.columnwise = make_block_record(rows, cols, BlockAxis::kColumnwise, tile, fmt, false);
  std::vector<float> scale_inv(std::size_t(tr) * std::size_t(tc));
  const QuantizeStats st =
      detail::cast_tiles(x, rows, cols, tile, fmt, pow2, epsilon, scale_inv.data(), out.rowwise.codes.data());
  // 3. The column-wise view: the same codes transposed, with the transposed tile scales.
  transpose(rows, cols, out.rowwise.codes.data(), out.columnwise.codes.data());
  spread_tile_scales(rows, cols, tile, scale_inv.data(), out);
  if (stats) *stats += st;
  return out;
}

void check_block_accumulation(const GemmAccumulation& acc) {
  FP8EMU_CHECK(acc.promotion_interval == 0 && acc.split_k <= 1,
               "block-scaled GEMM: every scale block's partial is promoted to the fp32 total, so the promotion "
               "interval must be 0 and split_k 1, got ", acc.promotion_interval, " and ", acc.split_k);
}

void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, const GemmAccumulation& acc, float* D) {
  check_gemm_block_tn(A, B);
  check_block_accumulation(acc);
  if (acc.model == Accumulation::kFp32) {
    gemm_fp8_block_tn(A, B, D);
    return;
  }
  // Another model: the element layer, one output element per iteration.
  const AccumulationModel& m = model_of(acc.model);
  const int M = A.n, N = B.n, K = A.k, nb = A.blocks();
  const FormatSpec fa = spec_of(A.format), fb = spec_of(B.format);
#pragma omp parallel for schedule(static) if (double(M) * N * K >= detail::kParallelMinMacs)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] = core::gemm_block_element(
          A.codes.data() + std::size_t(i) * std::size_t(K), fa, A.scale_inv.data() + std::size_t(i) * std::size_t(nb),
          B.codes.data() + std::size_t(j) * std::size_t(K), fb, B.scale_inv.data() + std::size_t(j) * std::size_t(nb),
          K, A.block, m);
}

void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, float* D) {
  check_gemm_block_tn(A, B);
  if (detail::gemm_fp8_block_tn_wide(A, B, D)) return;  // the same sums, register-tiled
  const int M = A.n, N = B.n, K = A.k, nb = A.blocks();
  // B^T decoded once (exact), Shape [K, N]; A decoded on the fly.
  std::vector<float> bt(std::size_t(K) * std::size_t(N));
  const float* tb = decode_table(B.format);
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) bt[std::size_t(k) * std::size_t(N) + std::size_t(j)] = tb[B.codes[std::size_t(j) * std::size_t(K) + std::size_t(k)]];
  const float* ta = decode_table(A.format);
  const std::uint8_t* a = A.codes.data();
  const int groups = (M + detail::kRowGroup - 1) / detail::kRowGroup;
  // One parallel region over groups of rows of D; each group walks the K-blocks in order.
#pragma omp parallel if (double(M) * N * K >= detail::kParallelMinMacs)
  {
    std::vector<float> partial(std::size_t(detail::kRowGroup) * std::size_t(N));
#pragma omp for schedule(static)
    for (int g = 0; g < groups; ++g) {
      const int i0 = g * detail::kRowGroup, rows = std::min(detail::kRowGroup, M - i0);
      float* d = D + std::size_t(i0) * std::size_t(N);
      std::fill(d, d + std::size_t(rows) * std::size_t(N), 0.0f);
      for (int b = 0; b < nb; ++b) {
        const int k0 = b * A.block, len = std::min(K, k0 + A.block) - k0;
        detail::gemm_rows(
            i0, rows, N, len,
            [a, ta, K, k0](int i, int k) { return ta[a[std::size_t(i) * std::size_t(K) + std::size_t(k0 + k)]]; },
            bt.data() + std::size_t(k0) * std::size_t(N), partial.data());
        for (int r = 0; r < rows; ++r) {
          const float sa = A.scale_inv[std::size_t(i0 + r) * std::size_t(nb) + std::size_t(b)];
          const float* p = partial.data() + std::size_t(r) * std::size_t(N);
          float* dr = d + std::size_t(r) * std::size_t(N);
          for (int j = 0; j < N; ++j) {
            const float s = sa * B.scale_inv[std::size_t(j) * std::size_t(nb) + std::size_t(b)];
            dr[j] += p[j] * s;
          }
        }
      }
    }
  }
}

}  // namespace fp8emu::emu
