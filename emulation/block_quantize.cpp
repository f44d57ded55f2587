// Block-scaled quantization and GEMM (see include/fp8emu/emulation/block_quantize.hpp).
#include "fp8emu/emulation/block_quantize.hpp"

#include <algorithm>
#include <vector>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

#include "block_cast.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

constexpr int kMxBlock = 32;  // OCP MX v1.0: 32 elements share one E8M0 scale.

const char* what_of(const core::BlockRule& rule) {
  return rule.is_mxfp8() ? "MXFP8 quantize" : rule.has_tensor_scale() ? "NVFP4 quantize" : "block quantize";
}

// The element layer's 1 x block cast, one view row per iteration: the formats the vectorised cast
// has no kernel for (FP6, FP4). The counts are sums, so any thread split gives the same totals.
QuantizeStats cast_view_blocks_element(const float* x, int cols, bool rowwise, const core::BlockRule& rule,
                                       BlockQuantized& q) {
  if (!rowwise && q.n > 1) {
    // The column-wise view reads x down its columns: transpose x once and read rows (the view's
    // elements, and so the bits, are the same; a stream's element map is the rule's, not memory's).
    std::vector<float> xt(std::size_t(q.n) * std::size_t(q.k));
    transpose(q.k, q.n, x, xt.data());
    return cast_view_blocks_element(xt.data(), q.k, true, rule, q);
  }
  const FormatSpec f = spec_of(q.format);
  const int nb = q.blocks();
  // Row-wise here (the column-wise view was transposed above); MXFP8 rules and stochastic rounding
  // keep the element layer's loop.
  const bool e2m1_rn = core::is_e2m1(f) && !rule.stochastic && !rule.is_mxfp8();
  std::uint64_t sat = 0, under = 0, nans = 0;
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) \
    if (std::ptrdiff_t(q.codes.size()) >= detail::kParallelMinElements)
  for (int r = 0; r < q.n; ++r) {
    core::CastCounts c;
    for (int b = 0; b < nb; ++b) {
      if (e2m1_rn) {  // core::cast_view_block's steps, the elements by cast_e2m1_span
        const int k0 = b * q.block, k1 = std::min(q.k, k0 + q.block);
        const float* xr = x + std::size_t(r) * std::size_t(cols);
        const std::size_t si = std::size_t(r) * std::size_t(nb) + std::size_t(b);
        const float mult = core::block_rule_scale(core::view_block_amax(x, true, cols, r, k0, k1), f, rule,
                                                  q.scale_inv.data() + si, nullptr);
        detail::cast_e2m1_span(xr + k0, std::size_t(k1 - k0), mult,
                               q.codes.data() + std::size_t(r) * std::size_t(q.k) + std::size_t(k0), c);
        continue;
      }
      core::cast_view_block(x, rowwise, cols, r, b, q.block, q.k, nb, f, rule, q.codes.data(), q.scale_inv.data(),
                            rule.is_mxfp8() ? q.e8m0.data() : nullptr, c);
    }
    sat += c.saturated;
    under += c.underflow;
    nans += c.nan;
  }
  QuantizeStats st;
  st.count = q.codes.size();
  st.saturated = sat;
  st.underflow = under;
  st.nan = nans;
  return st;
}

// The block GEMM's sums (the per-block scale_inv products, no alpha): the fp32 model register-tiled,
// other models by the element layer.
void gemm_block_sums(const BlockQuantized& A, const BlockQuantized& B, float* D);
void gemm_block_element_sums(const BlockQuantized& A, const BlockQuantized& B, const GemmAccumulation& acc, float* D);

// NVFP4 operands: D = RN(alpha * D) with TE's alpha from the two tensor amaxes.
void apply_alpha(const BlockQuantized& A, const BlockQuantized& B, float* D) {
  if (!A.amax) return;
  const float alpha = core::nvfp4_gemm_alpha(*A.amax, core::nvfp4_numerator(spec_of(A.format)), *B.amax,
                                             core::nvfp4_numerator(spec_of(B.format)));
  const std::size_t n = std::size_t(A.n) * std::size_t(B.n);
  for (std::size_t i = 0; i < n; ++i) D[i] = core::mul_rn(alpha, D[i]);
}

}  // namespace

BlockQuantized make_block_record(int rows, int cols, BlockAxis axis, int block, Format fmt, bool with_e8m0) {
  require_block_element(fmt, "block quantize");
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
  require_block_element(A.format, "block-scaled GEMM operand A");
  require_block_element(B.format, "block-scaled GEMM operand B");
  FP8EMU_CHECK(A.amax.has_value() == B.amax.has_value(), "block-scaled GEMM: operand ", A.amax ? "A" : "B",
               " has an NVFP4 tensor scale (amax) and operand ", A.amax ? "B" : "A", " has none");
  FP8EMU_CHECK(A.k == B.k, "block-scaled GEMM: K mismatch, A has K = ", A.k, ", B has K = ", B.k);
  FP8EMU_CHECK(A.block == B.block, "block-scaled GEMM: block sizes differ (", A.block, " vs ", B.block, ")");
  FP8EMU_CHECK(A.block >= 1, "block-scaled GEMM: block size must be >= 1, got ", A.block);
}

core::BlockRule mxfp8_rule(Format fmt, E8M0Rule rule) {
  return core::BlockRule::mxfp8(spec_of(fmt), rule);
}

std::uint8_t mxfp8_scale_code(float amax, Format fmt, E8M0Rule rule) {
  const core::BlockRule r = mxfp8_rule(fmt, rule);
  return core::mxfp8_scale_code(amax, spec_of(fmt), rule, r.rcp_max);
}

BlockQuantized quantize_blocks(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                               const core::BlockRule& rule, QuantizeStats* stats) {
  const char* what = what_of(rule);
  FP8EMU_CHECK(block >= 1, what, ": block size must be >= 1, got ", block);
  FP8EMU_CHECK(rows >= 0 && cols >= 0, what, ": negative shape");
  BlockQuantized q = make_block_record(rows, cols, axis, block, fmt, rule.is_mxfp8());
  core::BlockRule r = rule;
  if (rule.has_tensor_scale()) {  // the tensor's amax first: every block's scale sits under it
    q.amax = compute_amax(x, std::size_t(rows) * std::size_t(cols));
    r.tensor_amax = &*q.amax;
  }
  // FP8: the vectorised block cast (block_cast.hpp), the bits of core::cast_view_block; other
  // element formats: core::cast_view_block itself.
  const bool rowwise = axis == BlockAxis::kRowwise;
  const QuantizeStats st = is_fp8(fmt) ? detail::cast_view_blocks(x, rows, cols, rowwise, r, q)
                                       : cast_view_blocks_element(x, cols, rowwise, r, q);
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
  if (!is_fp8(fmt))  // no vectorised kernel: the element layer's tiles
    return quantize_tiles(x, rows, cols, fmt, tile, core::BlockRule::fp32_scale(spec_of(fmt), pow2, epsilon), stats);
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

BlockQuantized2D quantize_tiles(const float* x, int rows, int cols, Format fmt, int tile, const core::BlockRule& rule,
                                QuantizeStats* stats) {
  const char* what = what_of(rule);
  FP8EMU_CHECK(!rule.is_mxfp8(), what, ": ", tile, " x ", tile, " tiles take fp32 or NVFP4 scales (E8M0 tiles are no recipe's)");
  FP8EMU_CHECK(tile >= 1, what, ": tile size must be >= 1, got ", tile);
  FP8EMU_CHECK(rows >= 0 && cols >= 0, what, ": negative shape");
  if (rule.kind == core::BlockRule::kFloat && is_fp8(fmt))  // the vectorised tiles
    return quantize_block_2d(x, rows, cols, fmt, tile, rule.pow2, rule.epsilon, stats);
  BlockQuantized2D out;
  out.rowwise = make_block_record(rows, cols, BlockAxis::kRowwise, tile, fmt, false);  // checks the format
  out.columnwise = make_block_record(rows, cols, BlockAxis::kColumnwise, tile, fmt, false);
  core::BlockRule r = rule;
  if (rule.has_tensor_scale()) {
    out.rowwise.amax = compute_amax(x, std::size_t(rows) * std::size_t(cols));
    out.columnwise.amax = out.rowwise.amax;
    r.tensor_amax = &*out.rowwise.amax;
  }
  // 1. Each tile's amax and scale (core::tile_amax, core::block_rule_scale).
  const FormatSpec f = spec_of(fmt);
  const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
  std::vector<float> scale_inv(std::size_t(tr) * std::size_t(tc)), mult(scale_inv.size());
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows) * cols >= detail::kParallelMinElements)
  for (int bi = 0; bi < tr; ++bi)
    for (int bj = 0; bj < tc; ++bj) {
      const std::size_t t = std::size_t(bi) * std::size_t(tc) + std::size_t(bj);
      mult[t] = core::block_rule_scale(core::tile_amax(x, rows, cols, tile, bi, bj), f, r, &scale_inv[t], nullptr);
    }
  // 2. The row-wise codes, each element by its tile's multiplier (core::cast_element; for E2M1 its
  //    vectorised form, cast_e2m1_span).
  const bool e2m1 = core::is_e2m1(f);
  std::uint64_t sat = 0, under = 0, nans = 0;
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) \
    if (std::ptrdiff_t(rows) * cols >= detail::kParallelMinElements)
  for (int i = 0; i < rows; ++i) {
    core::CastCounts c;
    const float* xi = x + std::size_t(i) * std::size_t(cols);
    std::uint8_t* qi = out.rowwise.codes.data() + std::size_t(i) * std::size_t(cols);
    for (int bj = 0; bj < tc; ++bj) {  // the tiles along the row: core::tile_index(i, j, tile, tc) for their j
      const float m = mult[core::tile_index(i, bj * tile, tile, tc)];
      const int j1 = std::min(cols, (bj + 1) * tile);
      if (e2m1)
        detail::cast_e2m1_span(xi + bj * tile, std::size_t(j1 - bj * tile), m, qi + bj * tile, c);
      else
        for (int j = bj * tile; j < j1; ++j) qi[j] = core::cast_element(xi[j], m, f, c);
    }
    sat += c.saturated;
    under += c.underflow;
    nans += c.nan;
  }
  // 3. The column-wise view: the same codes transposed, with the transposed tile scales.
  transpose(rows, cols, out.rowwise.codes.data(), out.columnwise.codes.data());
  spread_tile_scales(rows, cols, tile, scale_inv.data(), out);
  if (stats) {
    QuantizeStats st;
    st.count = out.rowwise.codes.size();
    st.saturated = sat;
    st.underflow = under;
    st.nan = nans;
    *stats += st;
  }
  return out;
}

void dequantize_blocks(const BlockQuantized& q, float* y) {
  const float* t = decode_table(q.format);
  const int nb = q.blocks();
  const float num = core::nvfp4_numerator(spec_of(q.format));
  for (int r = 0; r < q.n; ++r)
    for (int b = 0; b < nb; ++b) {
      const float s = q.scale_inv[std::size_t(r) * std::size_t(nb) + std::size_t(b)];
      const float m = q.amax ? core::nvfp4_dequant_scale(s, *q.amax, num) : s;
      for (int kk = b * q.block; kk < std::min(q.k, (b + 1) * q.block); ++kk) {
        const std::size_t at = std::size_t(r) * std::size_t(q.k) + std::size_t(kk);
        y[at] = core::mul_rn(t[q.codes[at]], m);
      }
    }
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
  gemm_block_element_sums(A, B, acc, D);
  apply_alpha(A, B, D);
}

namespace {
void gemm_block_element_sums(const BlockQuantized& A, const BlockQuantized& B, const GemmAccumulation& acc, float* D) {
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

}  // namespace

void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, float* D) {
  check_gemm_block_tn(A, B);
  gemm_block_sums(A, B, D);
  apply_alpha(A, B, D);
  detail::canonical_nans(D, std::size_t(A.n) * std::size_t(B.n));  // one NaN on every path
}

namespace {
void gemm_block_sums(const BlockQuantized& A, const BlockQuantized& B, float* D) {
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

}  // namespace

}  // namespace fp8emu::emu
