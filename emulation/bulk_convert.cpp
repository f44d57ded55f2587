// Bulk per-tensor FP8 cast and dequantization (see include/fp8emu/emulation/bulk_convert.hpp).
//
// The hot loop is a branch-free formulation of core::encode_f32_bits (SATFINITE) that GCC
// auto-vectorises (bulk_kernels.hpp); the kernels are compiled for AVX-512, AVX2 and the x86-64
// baseline and chosen at load time (GCC target clones). The tests prove every build equal to the
// scalar core. OpenMP splits large arrays into fixed blocks, statically.
#include "fp8emu/emulation/bulk_convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <vector>

#include "block_cast.hpp"
#include "bulk_kernels.hpp"
#include "fp8emu/util/error.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

// Compiled for AVX-512 (x86-64-v4), AVX2 and the x86-64 baseline, chosen at load time (GCC
// target clones). The clones compute the same bits: integer operations, and fp32 multiplies and
// adds that are exact or correctly rounded in every instruction set (no FMA: -ffp-contract=off).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FP8EMU_BULK_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define FP8EMU_BULK_CLONES
#endif

namespace fp8emu::emu {
namespace {

using namespace detail;  // the kernels of bulk_kernels.hpp

// One target-cloned entry point per (format, input type, counting): the clones must be plain
// functions; each inlines cast_span with constant field widths.
#define FP8EMU_BULK_KERNEL(NAME, SPEC, WIDEN, STATS)                                                          \
  FP8EMU_BULK_CLONES void NAME(const WIDEN::T* x, std::size_t n, float scale, std::uint8_t* q, u32* amax_bits, \
                                 Counts* counts) {                                                              \
    cast_span<SPEC, WIDEN, STATS>(x, n, scale, q, amax_bits, counts);                                           \
  }
#define FP8EMU_BULK_KERNELS(FMT, SPEC)                                 \
  FP8EMU_BULK_KERNEL(cast_f32_##FMT, SPEC, WidenF32, false)           \
  FP8EMU_BULK_KERNEL(cast_f32_##FMT##_stats, SPEC, WidenF32, true)    \
  FP8EMU_BULK_KERNEL(cast_bf16_##FMT, SPEC, WidenBF16, false)         \
  FP8EMU_BULK_KERNEL(cast_bf16_##FMT##_stats, SPEC, WidenBF16, true)  \
  FP8EMU_BULK_KERNEL(cast_f16_##FMT, SPEC, WidenF16, false)           \
  FP8EMU_BULK_KERNEL(cast_f16_##FMT##_stats, SPEC, WidenF16, true)
FP8EMU_BULK_KERNELS(e4m3, kSpecE4M3)
FP8EMU_BULK_KERNELS(e5m2, kSpecE5M2)
FP8EMU_BULK_KERNELS(e4m3fnuz, kSpecE4M3FNUZ)
FP8EMU_BULK_KERNELS(e5m2fnuz, kSpecE5M2FNUZ)
#undef FP8EMU_BULK_KERNELS
#undef FP8EMU_BULK_KERNEL

// The block-scaled casts: one multiplier per element, and the block amax passes.
#define FP8EMU_EACH_KERNEL(NAME, SPEC)                                                                          \
  FP8EMU_BULK_CLONES void NAME(const float* x, std::size_t n, const float* mult, std::uint8_t* q, Counts* counts) { \
    u32 amax = 0;                                                                                               \
    cast_span_with<SPEC, WidenF32, true>(x, n, ScaleEach{mult}, q, &amax, counts);                              \
  }
FP8EMU_EACH_KERNEL(cast_each_e4m3, kSpecE4M3)
FP8EMU_EACH_KERNEL(cast_each_e5m2, kSpecE5M2)
#undef FP8EMU_EACH_KERNEL
FP8EMU_BULK_CLONES void row_block_amax(const float* x, std::size_t n, std::size_t block, u32* out) {
  block_amax_bits(x, n, block, out);
}
FP8EMU_BULK_CLONES void columns_amax(const float* x, std::size_t rows, std::size_t cols, std::size_t ld, u32* out) {
  column_amax_bits(x, rows, cols, ld, out);
}

template <class T>
using SpanKernel = void (*)(const T*, std::size_t, float, std::uint8_t*, u32*, Counts*);
using EachKernel = void (*)(const float*, std::size_t, const float*, std::uint8_t*, Counts*);

// A kernel of each FP8 format, with and without counts (nullptr: none for that format).
template <class Kernel>
struct Kernels {
  Kernel e4m3, e4m3_stats, e5m2, e5m2_stats, e4m3fnuz = nullptr, e4m3fnuz_stats = nullptr, e5m2fnuz = nullptr,
                                                e5m2fnuz_stats = nullptr;
};

// The SIMD span kernels exist for the FP8 formats (OCP; FNUZ for the per-tensor casts); every other
// registry format is rejected by name (switches without default: a new Format enumerator is a
// compile-time warning here).
template <class Kernel>
Kernel pick(Format f, bool stats, const Kernels<Kernel>& k) {
  Kernel r = nullptr;
  switch (f) {
    case Format::kE4M3: r = stats ? k.e4m3_stats : k.e4m3; break;
    case Format::kE5M2: r = stats ? k.e5m2_stats : k.e5m2; break;
    case Format::kE4M3FNUZ: r = stats ? k.e4m3fnuz_stats : k.e4m3fnuz; break;
    case Format::kE5M2FNUZ: r = stats ? k.e5m2fnuz_stats : k.e5m2fnuz; break;
    case Format::kE2M3:
    case Format::kE3M2:
    case Format::kE2M1:
    case Format::kE8M0:
    case Format::kBinary16:
    case Format::kBFloat16:
      break;
  }
  require_fp8(f, "bulk cast");
  FP8EMU_CHECK(r != nullptr, "bulk cast: format ", format_name(f), " has no kernel of this kind (block casts take "
               "the OCP formats)");
  return r;
}

SpanKernel<float> span_kernel(WidenF32, Format f, bool stats) {
  return pick<SpanKernel<float>>(f, stats, {cast_f32_e4m3, cast_f32_e4m3_stats, cast_f32_e5m2, cast_f32_e5m2_stats,
                                            cast_f32_e4m3fnuz, cast_f32_e4m3fnuz_stats, cast_f32_e5m2fnuz,
                                            cast_f32_e5m2fnuz_stats});
}
SpanKernel<std::uint16_t> span_kernel(WidenBF16, Format f, bool stats) {
  return pick<SpanKernel<std::uint16_t>>(f, stats, {cast_bf16_e4m3, cast_bf16_e4m3_stats, cast_bf16_e5m2,
                                                    cast_bf16_e5m2_stats, cast_bf16_e4m3fnuz,
                                                    cast_bf16_e4m3fnuz_stats, cast_bf16_e5m2fnuz,
                                                    cast_bf16_e5m2fnuz_stats});
}
SpanKernel<std::uint16_t> span_kernel(WidenF16, Format f, bool stats) {
  return pick<SpanKernel<std::uint16_t>>(f, stats, {cast_f16_e4m3, cast_f16_e4m3_stats, cast_f16_e5m2,
                                                    cast_f16_e5m2_stats, cast_f16_e4m3fnuz, cast_f16_e4m3fnuz_stats,
                                                    cast_f16_e5m2fnuz, cast_f16_e5m2fnuz_stats});
}

EachKernel each_kernel(Format f) {
  return pick<EachKernel>(f, true, {cast_each_e4m3, cast_each_e4m3, cast_each_e5m2, cast_each_e5m2});
}

// Elements per kernel call in the 1-D cast; threads take whole blocks (static partition).
constexpr std::size_t kBlock = std::size_t(1) << 14;
// Tile of the 2-D cast with a column-wise output: each tile row is one kernel call, each tile
// column 64 contiguous bytes (one cache line) of the transposed output. (Measured on 8192 x 8192
// fp32, one thread: 64 x 64 beat 64 x 256, 32 x 512, 128 x 128 and 16 x 1024 tiles.)
constexpr std::size_t kTileRows = 64, kTileCols = 64;

// dst[j * ld_dst + r] = src[r * ld_src + j] for r < rows, j < cols: square blocks through
// transpose_block (bulk_kernels.hpp), the ragged edges byte by byte.
void transpose_bytes(const std::uint8_t* src, std::size_t ld_src, std::size_t rows, std::size_t cols,
                     std::uint8_t* dst, std::size_t ld_dst) {
  constexpr std::size_t B = kTransposeBlock;
  const std::size_t rb = rows - rows % B, cb = cols - cols % B;
  for (std::size_t r0 = 0; r0 < rb; r0 += B) {
    for (std::size_t c0 = 0; c0 < cb; c0 += B) transpose_block(src + r0 * ld_src + c0, ld_src, dst + c0 * ld_dst + r0, ld_dst);
    for (std::size_t j = cb; j < cols; ++j)
      for (std::size_t r = r0; r < r0 + B; ++r) dst[j * ld_dst + r] = src[r * ld_src + j];
  }
  for (std::size_t j = 0; j < cols; ++j)
    for (std::size_t r = rb; r < rows; ++r) dst[j * ld_dst + r] = src[r * ld_src + j];
}

// *amax = fmaxf(*amax, max |x|), the max over no elements being +0 (as emu::quantize).
void finish(u32 amax_bits, const Counts& c, std::size_t n, float* amax, QuantizeStats* stats) {
  if (amax) *amax = std::fmax(*amax, float_of(amax_bits));
  if (stats) {
    stats->count = n;
    stats->saturated = c.saturated;
    stats->underflow = c.underflow;
    stats->nan = c.nan;
  }
}

template <class W>
void quantize_1d(const typename W::T* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                 QuantizeStats* stats) {
  const SpanKernel<typename W::T> kernel = span_kernel(W{}, fmt, stats != nullptr);
  const std::ptrdiff_t blocks = std::ptrdiff_t((n + kBlock - 1) / kBlock);
  u32 amax_bits = 0;
  std::uint64_t sat = 0, under = 0, nans = 0;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n) >= detail::kParallelMinElements) \
    reduction(max : amax_bits) reduction(+ : sat, under, nans)
  for (std::ptrdiff_t b = 0; b < blocks; ++b) {
    const std::size_t i0 = std::size_t(b) * kBlock;
    Counts c;
    u32 a = 0;
    kernel(x + i0, std::min(kBlock, n - i0), scale, q + i0, &a, &c);
    amax_bits = std::max(amax_bits, a);
    sat += c.saturated;
    under += c.underflow;
    nans += c.nan;
  }
  Counts total;
  total.saturated = sat;
  total.underflow = under;
  total.nan = nans;
  finish(amax_bits, total, n, amax, stats);
}

template <class W>
void quantize_2d(const typename W::T* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                 std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax, QuantizeStats* stats) {
  FP8EMU_CHECK(q_rowwise || q_columnwise, "quantize 2-D: both the row-wise and the column-wise output are null");
  FP8EMU_CHECK(cols == 0 || rows <= std::numeric_limits<std::size_t>::max() / cols, "quantize 2-D: rows * cols (",
               rows, " * ", cols, ") overflows");
  const std::size_t n = rows * cols;
  // The row-wise copy has the layout of x: the 1-D cast.
  if (!q_columnwise) return quantize_1d<W>(x, n, scale, fmt, q_rowwise, amax, stats);
  const SpanKernel<typename W::T> kernel = span_kernel(W{}, fmt, stats != nullptr);
  const std::ptrdiff_t row_blocks = std::ptrdiff_t((rows + kTileRows - 1) / kTileRows);
  u32 amax_bits = 0;
  std::uint64_t sat = 0, under = 0, nans = 0;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n) >= detail::kParallelMinElements) \
    reduction(max : amax_bits) reduction(+ : sat, under, nans)
  for (std::ptrdiff_t rb = 0; rb < row_blocks; ++rb) {
    std::uint8_t tile[kTileRows * kTileCols];
    const std::size_t r0 = std::size_t(rb) * kTileRows, tr = std::min(kTileRows, rows - r0);
    Counts c;
    u32 a = 0;
    for (std::size_t c0 = 0; c0 < cols; c0 += kTileCols) {
      const std::size_t tc = std::min(kTileCols, cols - c0);
      // Codes of the tile, row by row, into the local buffer (transposing out of the row-wise
      // output instead would read 64 lines a power of two apart, which share an L1 set).
      for (std::size_t r = 0; r < tr; ++r) {
        kernel(x + (r0 + r) * cols + c0, tc, scale, tile + r * kTileCols, &a, &c);
        if (q_rowwise) std::memcpy(q_rowwise + (r0 + r) * cols + c0, tile + r * kTileCols, tc);
      }
      // Column c0+j of x is row c0+j of the column-wise output.
      transpose_bytes(tile, kTileCols, tr, tc, q_columnwise + c0 * rows + r0, rows);
    }
    amax_bits = std::max(amax_bits, a);
    sat += c.saturated;
    under += c.underflow;
    nans += c.nan;
  }
  Counts total;
  total.saturated = sat;
  total.underflow = under;
  total.nan = nans;
  finish(amax_bits, total, n, amax, stats);
}

// FP8 -> fp32 / bf16 bodies (table gather, one multiply; bf16 rounding branch-free).
FP8EMU_BULK_CLONES void dequantize_f32_span(const std::uint8_t* __restrict q, std::size_t n, float scale_inv,
                                             const float* __restrict table, float* __restrict y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = table[q[i]] * scale_inv;
}
FP8EMU_BULK_CLONES void dequantize_bf16_span(const std::uint8_t* __restrict q, std::size_t n, float scale_inv,
                                              const float* __restrict table, std::uint16_t* __restrict y) {
  for (std::size_t i = 0; i < n; ++i) {
    const u32 u = bits_of(table[q[i]] * scale_inv);
    const u32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // core::f32_bits_to_bf16_rne
    y[i] = std::uint16_t(select_bits((u & kAbsMask) > kInfBits, 0x7FFFu, rounded));
  }
}

template <class Out, class Span>
void dequantize_blocks(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, Out* y, Span span) {
  const float* table = decode_table(fmt);
  const std::ptrdiff_t blocks = std::ptrdiff_t((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n) >= detail::kParallelMinElements)
  for (std::ptrdiff_t b = 0; b < blocks; ++b) {
    const std::size_t i0 = std::size_t(b) * kBlock;
    span(q + i0, std::min(kBlock, n - i0), scale_inv, table, y + i0);
  }
}

}  // namespace

void quantize_f32(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                  QuantizeStats* stats) {
  quantize_1d<WidenF32>(x, n, scale, fmt, q, amax, stats);
}
void quantize_bf16(const std::uint16_t* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                   QuantizeStats* stats) {
  quantize_1d<WidenBF16>(x, n, scale, fmt, q, amax, stats);
}
void quantize_f16(const std::uint16_t* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
                  QuantizeStats* stats) {
  quantize_1d<WidenF16>(x, n, scale, fmt, q, amax, stats);
}

void quantize_f32_2d(const float* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                     std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax, QuantizeStats* stats) {
  quantize_2d<WidenF32>(x, rows, cols, scale, fmt, q_rowwise, q_columnwise, amax, stats);
}
void quantize_bf16_2d(const std::uint16_t* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                      std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax, QuantizeStats* stats) {
  quantize_2d<WidenBF16>(x, rows, cols, scale, fmt, q_rowwise, q_columnwise, amax, stats);
}
void quantize_f16_2d(const std::uint16_t* x, std::size_t rows, std::size_t cols, float scale, Format fmt,
                     std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax, QuantizeStats* stats) {
  quantize_2d<WidenF16>(x, rows, cols, scale, fmt, q_rowwise, q_columnwise, amax, stats);
}

void dequantize_to_f32(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) {
  dequantize_blocks(q, n, scale_inv, fmt, y, dequantize_f32_span);
}
void dequantize_to_bf16(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, std::uint16_t* y) {
  dequantize_blocks(q, n, scale_inv, fmt, y, dequantize_bf16_span);
}

namespace detail {
namespace {

QuantizeStats stats_of(std::size_t count, std::uint64_t sat, std::uint64_t under, std::uint64_t nans) {
  QuantizeStats st;
  st.count = count;
  st.saturated = sat;
  st.underflow = under;
  st.nan = nans;
  return st;
}

// Per-thread scratch of the block casts (rewritten in full before every use).
struct BlockScratch {
  std::vector<u32> amax;
  std::vector<float> mult;
  std::vector<std::uint8_t> codes;
};

}  // namespace

QuantizeStats cast_view_blocks(const float* x, int rows, int cols, bool rowwise, const core::BlockRule& rule,
                               BlockQuantized& q) {
  const FormatSpec f = spec_of(q.format);
  const EachKernel cast = each_kernel(q.format);
  const int nb = q.blocks(), K = q.k, block = q.block;
  std::uint8_t* const e8m0 = rule.is_mxfp8() ? q.e8m0.data() : nullptr;
  float* const scale_inv = q.scale_inv.data();
  std::uint64_t sat = 0, under = 0, nans = 0;
  const bool parallel = std::ptrdiff_t(q.codes.size()) >= kParallelMinElements;
  if (rowwise) {
    // View row r is x's row r: its blocks are contiguous.
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) if (parallel)
    for (int r = 0; r < rows; ++r) {
      thread_local BlockScratch s;
      u32* const amax = grow(s.amax, std::size_t(nb));
      float* const mult = grow(s.mult, std::size_t(K));
      const float* xr = x + std::size_t(r) * std::size_t(cols);
      row_block_amax(xr, std::size_t(K), std::size_t(block), amax);
      for (int b = 0; b < nb; ++b) {
        const std::size_t si = std::size_t(r) * std::size_t(nb) + std::size_t(b);
        const float m = core::block_rule_scale(float_of(amax[b]), f, rule, scale_inv + si, e8m0 ? e8m0 + si : nullptr);
        std::fill(mult + std::size_t(b) * std::size_t(block), mult + std::min<std::size_t>(K, std::size_t(b + 1) * block), m);
      }
      Counts c;
      cast(xr, std::size_t(K), mult, q.codes.data() + std::size_t(r) * std::size_t(K), &c);
      sat += c.saturated;
      under += c.underflow;
      nans += c.nan;
    }
  } else {
    // View row r is x's column r; block b of every column is x's rows [b * block, ...): one pass
    // over those rows gives every column's amax, then each row is cast with the per-column
    // multipliers and the block of codes is transposed into the view.
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) if (parallel)
    for (int b = 0; b < nb; ++b) {
      thread_local BlockScratch s;
      const int k0 = b * block, len = std::min(block, K - k0);
      u32* const amax = grow(s.amax, std::size_t(cols));
      float* const mult = grow(s.mult, std::size_t(cols));
      std::uint8_t* const tile = grow(s.codes, std::size_t(len) * std::size_t(cols));
      std::fill(amax, amax + cols, 0u);
      const float* xb = x + std::size_t(k0) * std::size_t(cols);
      columns_amax(xb, std::size_t(len), std::size_t(cols), std::size_t(cols), amax);
      for (int c = 0; c < cols; ++c) {
        const std::size_t si = std::size_t(c) * std::size_t(nb) + std::size_t(b);
        mult[c] = core::block_rule_scale(float_of(amax[c]), f, rule, scale_inv + si, e8m0 ? e8m0 + si : nullptr);
      }
      Counts cnt;
      for (int kk = 0; kk < len; ++kk)
        cast(xb + std::size_t(kk) * std::size_t(cols), std::size_t(cols), mult, tile + std::size_t(kk) * std::size_t(cols),
             &cnt);
      transpose_bytes(tile, std::size_t(cols), std::size_t(len), std::size_t(cols), q.codes.data() + k0, std::size_t(K));
      sat += cnt.saturated;
      under += cnt.underflow;
      nans += cnt.nan;
    }
  }
  return stats_of(q.codes.size(), sat, under, nans);
}

QuantizeStats cast_tiles(const float* x, int rows, int cols, int tile, Format fmt, bool pow2, float epsilon,
                         float* tile_scale_inv, std::uint8_t* codes) {
  const FormatSpec f = spec_of(fmt);
  const EachKernel cast = each_kernel(fmt);
  const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
  std::uint64_t sat = 0, under = 0, nans = 0;
  const bool parallel = std::ptrdiff_t(rows) * cols >= kParallelMinElements;
#pragma omp parallel for schedule(static) reduction(+ : sat, under, nans) if (parallel)
  for (int bi = 0; bi < tr; ++bi) {
    thread_local BlockScratch s;
    const int r0 = bi * tile, len = std::min(tile, rows - r0);
    u32* const amax = grow(s.amax, std::size_t(cols));
    float* const mult = grow(s.mult, std::size_t(cols));
    // 1. The tiles of this tile row: the per-column amax over its rows, then the max over each
    //    tile's columns (the same max of amax bits as core::tile_amax), and the tile's scale.
    std::fill(amax, amax + cols, 0u);
    columns_amax(x + std::size_t(r0) * std::size_t(cols), std::size_t(len), std::size_t(cols), std::size_t(cols), amax);
    for (int bj = 0; bj < tc; ++bj) {
      u32 m = 0;
      for (int c = bj * tile; c < std::min(cols, (bj + 1) * tile); ++c) m = std::max(m, amax[c]);
      const core::BlockScale bs = core::block_scale(float_of(m), float(f.max_finite()), pow2, epsilon);
      tile_scale_inv[std::size_t(bi) * std::size_t(tc) + std::size_t(bj)] = bs.scale_inv;
      std::fill(mult + std::size_t(bj) * std::size_t(tile), mult + std::min<std::size_t>(cols, std::size_t(bj + 1) * tile),
                bs.scale);
    }
    // 2. Its rows, each element by its tile's scale.
    Counts c;
    for (int r = r0; r < r0 + len; ++r)
      cast(x + std::size_t(r) * std::size_t(cols), std::size_t(cols), mult, codes + std::size_t(r) * std::size_t(cols), &c);
    sat += c.saturated;
    under += c.underflow;
    nans += c.nan;
  }
  return stats_of(std::size_t(rows) * std::size_t(cols), sat, under, nans);
}

}  // namespace detail

}  // namespace fp8emu::emu
