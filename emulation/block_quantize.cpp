// Block-scaled FP8 quantization and GEMM (see include/fp8emu/emulation/block_quantize.hpp).
#include "fp8emu/emulation/block_quantize.hpp"

#include <cfloat>
#include <cmath>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/util/error.hpp"
#include "amax.hpp"
#include "gemm_kernel.hpp"

namespace fp8emu::emu {
namespace {

constexpr int kMxBlock = 32;  // OCP MX v1.0: 32 elements share one E8M0 scale.

// Element (r, kk) of the K-major view of a row-major [rows, cols] input.
struct View {
  const float* x;
  int rows, cols;
  BlockAxis axis;
  int n() const { return axis == BlockAxis::kRowwise ? rows : cols; }
  int k() const { return axis == BlockAxis::kRowwise ? cols : rows; }
  float at(int r, int kk) const {
    return axis == BlockAxis::kRowwise ? x[std::size_t(r) * std::size_t(cols) + std::size_t(kk)]
                                       : x[std::size_t(kk) * std::size_t(cols) + std::size_t(r)];
  }
};

BlockQuantized make_output(const View& v, int block, Format fmt) {
  BlockQuantized q;
  q.n = v.n();
  q.k = v.k();
  q.block = block;
  q.format = fmt;
  q.codes.resize(std::size_t(q.n) * std::size_t(q.k));
  q.scale_inv.resize(std::size_t(q.n) * std::size_t(q.blocks()));
  return q;
}

// Casts every block of the view: scale_of(row, block, block amax, &scale_inv, e8m0 slot or null)
// returns the multiplier applied before the cast.
template <class ScaleOf>
QuantizeStats cast_blocks(const View& v, BlockQuantized& q, ScaleOf scale_of) {
  const FormatSpec& f = spec_of(q.format);
  const int nb = q.blocks();
  std::uint64_t sat = 0, under = 0, nans = 0;
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) \
    if (std::ptrdiff_t(q.codes.size()) >= detail::kParallelMinElements)
  for (int r = 0; r < q.n; ++r) {
    for (int b = 0; b < nb; ++b) {
      const int k0 = b * q.block, k1 = std::min(q.k, k0 + q.block);
      float amax = 0.0f;
      for (int kk = k0; kk < k1; ++kk) amax = detail::amax_step(amax, v.at(r, kk));
      const std::size_t si = std::size_t(r) * std::size_t(nb) + std::size_t(b);
      const float mult = scale_of(r, b, amax, q.scale_inv[si], q.e8m0.empty() ? nullptr : &q.e8m0[si]);
      for (int kk = k0; kk < k1; ++kk) {
        const float x = v.at(r, kk);
        const float s = x * mult;
        const std::uint8_t c = core::f32_to_fp8(s, f, Saturation::kSatFinite);
        q.codes[std::size_t(r) * std::size_t(q.k) + std::size_t(kk)] = c;
        const bool is_nan = std::isnan(x);
        nans += is_nan;
        sat += f.overflows(std::fabs(s));
        under += (!is_nan && x != 0.0f && std::isfinite(x) && (c & f.top_code()) == 0);
      }
    }
  }
  QuantizeStats st;
  st.count = q.codes.size();
  st.saturated = sat;
  st.underflow = under;
  st.nan = nans;
  return st;
}

}  // namespace

std::uint8_t mxfp8_scale_code(float amax, Format fmt, scaling::E8M0Rule rule) {
  const FormatSpec& f = spec_of(fmt);
  if (rule == scaling::E8M0Rule::kTransformerEngine) {
    // fl32(1/fp8_max) as TE's Quantized_Limits::max_norm_rcp (1.0 / max_norm, rounded to float).
    const float rcp = float(1.0 / f.max_finite());
    return core::e8m0_round_up_from_f32_bits(core::f32_to_bits(amax * rcp));
  }
  // OCP MX v1.0 §6.3: shared exponent floor(log2(amax)) - emax of the element format.
  if (std::isnan(amax)) return core::kE8M0NaN;
  if (std::isinf(amax)) return core::kE8M0MaxCode;
  if (amax == 0.0f) return 0;
  int e2 = 0;
  std::frexp(amax, &e2);  // amax = m * 2^e2, m in [0.5, 1): floor(log2 amax) = e2 - 1
  const int shared = (e2 - 1) - f.emax();
  const int code = std::clamp(shared + core::kE8M0Bias, 0, int(core::kE8M0MaxCode));
  return std::uint8_t(code);
}

BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, BlockAxis axis, Format fmt,
                              scaling::E8M0Rule rule, QuantizeStats* stats) {
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "MXFP8 quantize: negative shape");
  const View v{x, rows, cols, axis};
  BlockQuantized q = make_output(v, kMxBlock, fmt);
  q.e8m0.resize(q.scale_inv.size());
  const QuantizeStats st = cast_blocks(v, q, [fmt, rule](int, int, float amax, float& scale_inv, std::uint8_t* e) {
    const std::uint8_t code = mxfp8_scale_code(amax, fmt, rule);
    *e = code;
    scale_inv = core::bits_to_f32(core::e8m0_to_f32_bits(code));
    return core::bits_to_f32(core::e8m0_reciprocal_f32_bits(code));
  });
  if (stats) *stats += st;
  return q;
}

BlockQuantized quantize_block_1d(const float* x, int rows, int cols, BlockAxis axis, Format fmt, int block,
                                 bool pow2, float epsilon, QuantizeStats* stats) {
  FP8EMU_CHECK(block >= 1, "block quantize: block size must be >= 1, got ", block);
  const View v{x, rows, cols, axis};
  BlockQuantized q = make_output(v, block, fmt);
  const float fp8_max = max_finite_f32(fmt);
  const QuantizeStats st = cast_blocks(v, q, [=](int, int, float amax, float& scale_inv, std::uint8_t*) {
    const float s = core::compute_scale_from_amax(amax, fp8_max, pow2, epsilon, FLT_MAX);
    scale_inv = 1.0f / s;
    return s;
  });
  if (stats) *stats += st;
  return q;
}

BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                   float epsilon, QuantizeStats* stats) {
  FP8EMU_CHECK(tile >= 1, "block quantize: tile size must be >= 1, got ", tile);
  const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
  const float fp8_max = max_finite_f32(fmt);
  std::vector<float> scale(std::size_t(tr) * std::size_t(tc)), scale_inv(scale.size());
  for (int bi = 0; bi < tr; ++bi)
    for (int bj = 0; bj < tc; ++bj) {
      float amax = 0.0f;
      for (int r = bi * tile; r < std::min(rows, (bi + 1) * tile); ++r)
        for (int c = bj * tile; c < std::min(cols, (bj + 1) * tile); ++c)
          amax = detail::amax_step(amax, x[std::size_t(r) * std::size_t(cols) + std::size_t(c)]);
      const float s = core::compute_scale_from_amax(amax, fp8_max, pow2, epsilon, FLT_MAX);
      scale[std::size_t(bi) * std::size_t(tc) + std::size_t(bj)] = s;
      scale_inv[std::size_t(bi) * std::size_t(tc) + std::size_t(bj)] = 1.0f / s;
    }
  // Row-wise view: every row carries its tile's scale for each 128-column block.
  const View v{x, rows, cols, BlockAxis::kRowwise};
  BlockQuantized2D out;
  out.rowwise = make_output(v, tile, fmt);
  BlockQuantized& rw = out.rowwise;
  const QuantizeStats st = cast_blocks(v, rw, [&](int r, int b, float, float& si, std::uint8_t*) {
    const std::size_t t = std::size_t(r / tile) * std::size_t(tc) + std::size_t(b);
    si = scale_inv[t];
    return scale[t];
  });
  if (stats) *stats += st;
  // Column-wise view: the same codes transposed, with the transposed tile scales.
  BlockQuantized& cw = out.columnwise;
  cw.n = cols;
  cw.k = rows;
  cw.block = tile;
  cw.format = fmt;
  cw.codes.resize(rw.codes.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      cw.codes[std::size_t(c) * std::size_t(rows) + std::size_t(r)] =
          rw.codes[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
  cw.scale_inv.resize(std::size_t(cols) * std::size_t(cw.blocks()));
  for (int c = 0; c < cols; ++c)
    for (int b = 0; b < cw.blocks(); ++b)
      cw.scale_inv[std::size_t(c) * std::size_t(cw.blocks()) + std::size_t(b)] =
          scale_inv[std::size_t(b) * std::size_t(tc) + std::size_t(c / tile)];
  return out;
}

void gemm_fp8_block_tn(const BlockQuantized& A, const BlockQuantized& B, float* D) {
  FP8EMU_CHECK(A.k == B.k, "block-scaled GEMM: K mismatch, A has K = ", A.k, ", B has K = ", B.k);
  FP8EMU_CHECK(A.block == B.block, "block-scaled GEMM: block sizes differ (", A.block, " vs ", B.block, ")");
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
