// CPU GEMMs in a fixed accumulation order (see include/fp8emu/emulation/gemm.hpp).
#include "fp8emu/emulation/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "gemm_isa.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

namespace fp8emu::emu {
namespace {

// Register-blocked fp32 kernels. Each element is c = RN(c + RN(a*b)) in k = 0..K-1 order from
// c = +0, so every path gives the results of the documented order, whatever the tiling, cache
// blocking or thread count: tiling changes only which elements are computed together, and a K chunk
// ends by storing c (an fp32, exactly) and the next one resumes from it. The fp32 GEMM computes
// RN(a*b) and the add as two instructions (-ffp-contract=off). Where every product of the two
// operands' values is an fp32 (products_exact_fp32: the FP8, FP6 and FP4 formats), RN(a*b) = a*b
// and the sum is one FMA, RN(c + a*b): the same bits in half the instructions.
//
// AVX-512 and AVX2 paths (gemm_wide): B packed in W-column panels [ceil(N/W)][K][W] and A in R-row
// panels [ceil(M/R)][K][R] (zero padded; the operands are decoded straight into them), register
// tiles of R rows x W columns: AVX-512 6 x 64 (24 zmm accumulators; per k 4 vector loads and 6
// broadcasts for 24 multiplies and 24 adds: measured 15 % faster than 12 x 32, whose 12 broadcasts
// compete with the arithmetic), AVX2 6 x 16 (12 ymm); cache tiles of kMcF rows x kNcF columns run
// by OpenMP, K in chunks of kKcF so a tile's B chunk stays in L2 and each row's A chunk in L1.
// Baseline path: 8-column panels [ceil(N/8)][K][8], 8 rows x 8 columns kept in registers for the
// whole K.
#pragma GCC diagnostic ignored "-Wpsabi"  // the vectors never cross a non-inlined call
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
constexpr int kLanes = 8, kRows = 8;
constexpr int kMcF = 72, kNcF = 256, kKcF = 256;

template <int W>
std::vector<float> pack_panels(int K, int N, const float* B /*[K, N]*/) {
  const int panels = (N + W - 1) / W;
  std::vector<float> p(std::size_t(panels) * std::size_t(K) * W, 0.0f);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(N) * K >= detail::kParallelMinElements)
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j)
      p[(std::size_t(j / W) * std::size_t(K) + std::size_t(k)) * W + std::size_t(j % W)] =
          B[std::size_t(k) * std::size_t(N) + std::size_t(j)];
  return p;
}

template <int R>
__attribute__((always_inline)) inline void panel_rows(int i0, int N, int K, const float* A, const float* panels,
                                                      float* C) {
  const int np = (N + kLanes - 1) / kLanes;
  for (int p = 0; p < np; ++p) {
    v8f c[R];
    for (int r = 0; r < R; ++r) c[r] = v8f{} * 0.0f;
    const float* bp = panels + std::size_t(p) * std::size_t(K) * kLanes;
    for (int k = 0; k < K; ++k) {
      v8f b;
      std::memcpy(&b, bp + std::size_t(k) * kLanes, sizeof b);
      for (int r = 0; r < R; ++r) c[r] += A[std::size_t(i0 + r) * std::size_t(K) + std::size_t(k)] * b;
    }
    const int j0 = p * kLanes, nj = std::min(kLanes, N - j0);
    for (int r = 0; r < R; ++r) {
      float out[kLanes];
      std::memcpy(out, &c[r], sizeof out);
      std::copy(out, out + nj, C + std::size_t(i0 + r) * std::size_t(N) + std::size_t(j0));
    }
  }
}

void panel_rows_baseline(int i0, int rows, int N, int K, const float* A, const float* panels, float* C) {
  if (rows == kRows) return panel_rows<kRows>(i0, N, K, A, panels, C);
  for (int i = i0; i < i0 + rows; ++i) panel_rows<1>(i, N, K, A, panels, C);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FP8EMU_GEMM_X86 1

// The register tiles' multiply-add c = RN(c + RN(a * b)) on a vector b and a broadcast a. MulAdd:
// a vector multiply and a vector add. Fma512 / Fma256: one FMA, RN(c + a * b), equal to MulAdd's
// only where a * b is an fp32 (the callers check products_exact_fp32). The FMA is one instruction
// in inline assembly: an intrinsic would need the tile's target on every always_inline level, and
// a call with a vector argument between functions of different targets breaks the ABI where it is
// not inlined (-O0).
struct MulAdd {
  template <class Vec>
  __attribute__((always_inline)) static inline Vec apply(Vec c, const float* a, Vec b) {
    return c + *a * b;  // two roundings: -ffp-contract=off
  }
};
// Register operands only: an asm that reads memory keeps the accumulators from staying in registers.
struct Fma512 {  // vfmadd231ps: c = RN(c + b * a)
  __attribute__((always_inline)) static inline v16f apply(v16f c, const float* a, v16f b) {
    const v16f av = *a - v16f{};  // the broadcast (x - +0 = x for every x)
    asm("vfmadd231ps %2, %1, %0" : "+v"(c) : "v"(b), "v"(av));
    return c;
  }
};
struct Fma256 {
  __attribute__((always_inline)) static inline v8f apply(v8f c, const float* a, v8f b) {
    const v8f av = *a - v8f{};
    asm("vfmadd231ps %2, %1, %0" : "+x"(c) : "x"(b), "x"(av));
    return c;
  }
};

// One register tile: R rows of A, packed [K][R] (ap), times a W-column panel (bp, [K][W]) over
// k0..k1, added in k order to the tile's accumulators acc (row stride ldc); Vec is the vector type
// (v16f: one zmm on the AVX-512 path; v8f: one ymm on the AVX2 path); Mac the multiply-add.
template <class Vec, int R, int W, class Mac>
__attribute__((always_inline)) inline void wide_tile(const float* ap, const float* bp, int k0, int k1, float* acc,
                                                     std::size_t ldc) {
  constexpr int L = int(sizeof(Vec) / sizeof(float)), V = W / L;
  // The accumulators are loaded and stored through copies: c never has its address taken, so it
  // stays in registers around the FMAs' inline assembly.
  Vec c[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      Vec t;
      std::memcpy(&t, acc + r * ldc + L * v, sizeof(Vec));
      c[r][v] = t;
    }
  for (int k = k0; k < k1; ++k) {
    Vec b[V];
    for (int v = 0; v < V; ++v) std::memcpy(&b[v], bp + std::size_t(k) * W + L * v, sizeof(Vec));
    const float* a = ap + std::size_t(k) * R;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) c[r][v] = Mac::apply(c[r][v], a + r, b[v]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const Vec t = c[r][v];
      std::memcpy(acc + r * ldc + L * v, &t, sizeof(Vec));
    }
}

// The block-scaled form of wide_tile (gemm_fp8_block_tn): k0..k1 holds whole blocks of `block`
// K-elements (the last may end at K); each block's partial is summed in registers from +0 in k
// order, then joins the tile's totals tot (row stride ldc) as tot = RN(tot + RN(P * RN(sa * sb))),
// with sa the row's block scale (sa + r * nb + b) and sb the panel's ([nb][W], packed).
template <class Vec, int R, int W, class Mac>
__attribute__((always_inline)) inline void wide_tile_scaled(const float* ap, const float* bp, int k0, int k1,
                                                            int block, const float* sa, std::size_t nb,
                                                            const float* sb, float* tot, std::size_t ldc) {
  constexpr int L = int(sizeof(Vec) / sizeof(float)), V = W / L;
  for (int kb = k0; kb < k1; kb += block) {
    const int ke = std::min(k1, kb + block);
    Vec c[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) c[r][v] = Vec{};
    for (int k = kb; k < ke; ++k) {
      Vec b[V];
      for (int v = 0; v < V; ++v) std::memcpy(&b[v], bp + std::size_t(k) * W + L * v, sizeof(Vec));
      const float* a = ap + std::size_t(k) * R;
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) c[r][v] = Mac::apply(c[r][v], a + r, b[v]);
    }
    const std::size_t blk = std::size_t(kb / block);
    Vec s[V];
    for (int v = 0; v < V; ++v) std::memcpy(&s[v], sb + blk * W + L * v, sizeof(Vec));
    for (int r = 0; r < R; ++r) {
      const float sr = sa[std::size_t(r) * nb + blk];
      for (int v = 0; v < V; ++v) {
        Vec t;
        std::memcpy(&t, tot + r * ldc + L * v, sizeof(Vec));
        t += c[r][v] * (sr * s[v]);  // three roundings (-ffp-contract=off)
        std::memcpy(tot + r * ldc + L * v, &t, sizeof(Vec));
      }
    }
  }
}

// The AVX-512 tile: 6 x 64 (24 zmm accumulators). The AVX2 tile: 6 x 16 (12 of the 16 ymm).
// Fused: the multiply-adds are FMAs (only for operands whose products are exact, see MulAdd).
template <bool Fused>
struct WideAvx512 {
  static constexpr int kR = 6, kW = 64;
  using Mac = std::conditional_t<Fused, Fma512, MulAdd>;
  __attribute__((target("avx512f,avx512vl,avx512dq"))) static void tile(const float* ap, const float* bp,
                                                                                 int k0, int k1, float* acc,
                                                                                 std::size_t ldc) {
    wide_tile<v16f, kR, kW, Mac>(ap, bp, k0, k1, acc, ldc);
  }
  __attribute__((target("avx512f,avx512vl,avx512dq"))) static void tile_scaled(
      const float* ap, const float* bp, int k0, int k1, int block, const float* sa, std::size_t nb, const float* sb,
      float* tot, std::size_t ldc) {
    wide_tile_scaled<v16f, kR, kW, Mac>(ap, bp, k0, k1, block, sa, nb, sb, tot, ldc);
  }
};
template <bool Fused>
struct WideAvx2 {
  static constexpr int kR = 6, kW = 16;
  using Mac = std::conditional_t<Fused, Fma256, MulAdd>;
  __attribute__((target("avx2,fma"))) static void tile(const float* ap, const float* bp, int k0, int k1,
                                                                float* acc, std::size_t ldc) {
    wide_tile<v8f, kR, kW, Mac>(ap, bp, k0, k1, acc, ldc);
  }
  __attribute__((target("avx2,fma"))) static void tile_scaled(const float* ap, const float* bp, int k0,
                                                                       int k1, int block, const float* sa,
                                                                       std::size_t nb, const float* sb, float* tot,
                                                                       std::size_t ldc) {
    wide_tile_scaled<v8f, kR, kW, Mac>(ap, bp, k0, k1, block, sa, nb, sb, tot, ldc);
  }
};

// C [M, N] = RN(s * (A B)) (s == 1: no scaling) on the AVX-512 path, where a_at(i, k) and b_at(k, j)
// give the (exact) fp32 operands; they are packed once into the panels the register tiles read. A's
// row panels put the values a register tile broadcasts for one k in one cache line (rows K floats
// apart would fall into the same L1 sets).
//
// Promotion and split-K (the fp32 model of gemm_fp8_tn, core::dot_split_k): with `promotion` P > 0
// each run of P K-elements is summed from +0 and added to the run total with one RN add, and with a
// split-K range L < K each range's value (its total plus its open run, or its one run) is added to
// the range sum; K chunks end at these boundaries, and the bookkeeping between chunks is the
// scalar model's, element by element. promotion 0 / range >= K: one plain sum.
struct WideChain {
  int promotion = 0;  // 0, or a run length shorter than min(K, range)
  int range = 1 << 30;
  // Block scaling (gemm_fp8_block_tn): with sa set, `promotion` is the block, each block's partial
  // is added to the total times its scale, tot = RN(tot + RN(acc * RN(sa[i, b] * sb[j, b]))), and
  // the result is that total (no split-K; wide_tile_scaled). sa [M, nb], sb [N, nb].
  const float* sa = nullptr;
  const float* sb = nullptr;
  int nb = 0;
  bool range_ends(int k0) const { return k0 > 0 && k0 % range == 0; }
  bool run_ends(int k0) const { return promotion > 0 && k0 % range > 0 && (k0 % range) % promotion == 0; }
  int next_boundary(int k0) const {  // the first boundary after k0
    int next = (k0 / range + 1) * range;
    if (promotion > 0) next = std::min(next, k0 / range * range + ((k0 % range) / promotion + 1) * promotion);
    return next;
  }
};

template <class Tile, class AAt, class BAt>
void gemm_wide(int M, int N, int K, AAt a_at, BAt b_at, float s, float* C, WideChain ch = WideChain{}) {
  constexpr int kWideRows = Tile::kR, kWideCols = Tile::kW;
  const bool chained = ch.promotion > 0 || ch.range < K;
  const int Mp = (M + kWideRows - 1) / kWideRows * kWideRows, Np = (N + kWideCols - 1) / kWideCols * kWideCols;
  // Packed operands and tile states outlive the call, per calling thread (every entry, padding
  // included, is rewritten by each call): no allocation, zero fill or fresh pages per GEMM.
  thread_local std::vector<float> ap_buf, bp_buf;
  float* const ap = detail::grow(ap_buf, std::size_t(Mp) * std::size_t(K));
  float* const bp = detail::grow(bp_buf, std::size_t(Np) * std::size_t(K));
  const bool par_pack = std::ptrdiff_t(M + N) * K >= detail::kParallelMinElements;
#pragma omp parallel if (par_pack)
  {
    // Thread-local copies of the accessors: their captures then cannot alias the panels, so the
    // loops keep them in registers (and vectorise plain copies).
    const AAt a_local = a_at;
    const BAt b_local = b_at;
#pragma omp for schedule(static) nowait
    for (int g = 0; g < Mp / kWideRows; ++g)
      for (int k = 0; k < K; ++k)
        for (int r = 0; r < kWideRows; ++r) {
          const int i = g * kWideRows + r;
          ap[(std::size_t(g) * std::size_t(K) + std::size_t(k)) * kWideRows + std::size_t(r)] = i < M ? a_local(i, k) : 0.0f;
        }
#pragma omp for schedule(static)
    for (int p = 0; p < Np / kWideCols; ++p) {
      const int j0 = p * kWideCols, n = std::min(kWideCols, N - j0);
      for (int k = 0; k < K; ++k) {
        float* dst = bp + (std::size_t(p) * std::size_t(K) + std::size_t(k)) * kWideCols;
        for (int c = 0; c < n; ++c) dst[c] = b_local(k, j0 + c);
        for (int c = n; c < kWideCols; ++c) dst[c] = 0.0f;
      }
    }
  }
  // Block scaling: the scales packed as the tiles read them, sa [Mp][nb] and sb [Np / W][nb][W]
  // (zero padded), and K chunks of whole blocks.
  thread_local std::vector<float> sa_buf, sb_buf;
  float* sap = nullptr;
  float* sbp = nullptr;
  const std::size_t nb = std::size_t(ch.nb);
  if (ch.sa) {
    sap = detail::grow(sa_buf, std::size_t(Mp) * nb);
    sbp = detail::grow(sb_buf, std::size_t(Np) * nb);
    for (int i = 0; i < Mp; ++i)
      for (std::size_t b = 0; b < nb; ++b) sap[std::size_t(i) * nb + b] = i < M ? ch.sa[std::size_t(i) * nb + b] : 0.0f;
    for (int j = 0; j < Np; ++j)
      for (std::size_t b = 0; b < nb; ++b)
        sbp[(std::size_t(j / kWideCols) * nb + b) * kWideCols + std::size_t(j % kWideCols)] =
            j < N ? ch.sb[std::size_t(j) * nb + b] : 0.0f;
  }
  const int scaled_chunk = ch.sa ? std::max(ch.promotion, kKcF / ch.promotion * ch.promotion) : 0;
  const bool parallel = double(M) * N * K >= detail::kParallelMinMacs;
  const detail::CacheTile ct =
      detail::cache_tile(Mp, N, kMcF, kNcF, kWideRows, kWideCols, parallel ? omp_get_max_threads() : 1);
  const int mc = ct.rows, nc = ct.cols;
  const int tiles_m = (Mp + mc - 1) / mc, tiles_n = (N + nc - 1) / nc, tiles = tiles_m * tiles_n;
#pragma omp parallel if (parallel)
  {
    thread_local std::vector<float> acc_buf, tot_buf, sum_buf;
    float* const acc = detail::grow(acc_buf, std::size_t(kMcF) * kNcF);
    float* const tot = chained ? detail::grow(tot_buf, std::size_t(kMcF) * kNcF) : nullptr;
    float* const sum = chained ? detail::grow(sum_buf, std::size_t(kMcF) * kNcF) : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tiles; ++t) {
      const int i0 = (t / tiles_n) * mc, j0 = (t % tiles_n) * nc;
      const int rows = std::min(mc, Mp - i0), cols = std::min(nc, N - j0);
      const int panels_here = (cols + kWideCols - 1) / kWideCols;
      const std::size_t tile_size = std::size_t(rows) * kNcF;  // the rows of acc this tile uses
      std::fill(acc, acc + tile_size, 0.0f);
      if (ch.sa) {  // acc holds the totals; each block's partial stays in registers
        for (int k0 = 0; k0 < K; k0 += scaled_chunk)
          for (int r0 = 0; r0 < rows; r0 += kWideRows)
            for (int p = 0; p < panels_here; ++p)
              Tile::tile_scaled(ap + std::size_t((i0 + r0) / kWideRows) * std::size_t(K) * kWideRows,
                                bp + std::size_t(j0 / kWideCols + p) * std::size_t(K) * kWideCols, k0,
                                std::min(K, k0 + scaled_chunk), ch.promotion, sap + std::size_t(i0 + r0) * nb, nb,
                                sbp + std::size_t(j0 / kWideCols + p) * nb * kWideCols,
                                acc + std::size_t(r0) * kNcF + std::size_t(p) * kWideCols, kNcF);
      }
      if (chained && !ch.sa) std::fill(tot, tot + tile_size, 0.0f);
      for (int k0 = 0; k0 < K && !ch.sa;) {
        const int k1 = std::min({K, k0 + kKcF, chained ? ch.next_boundary(k0) : K});
        if (chained && ch.range_ends(k0))
          for (std::size_t x = 0; x < tile_size; ++x) {  // a split-K range ends: its value joins the sum
            const float v = ch.promotion > 0 ? tot[x] + acc[x] : acc[x];
            sum[x] = k0 == ch.range ? v : sum[x] + v;
            acc[x] = tot[x] = 0.0f;
          }
        if (chained && ch.run_ends(k0))
          for (std::size_t x = 0; x < tile_size; ++x) {  // a promotion run ends: one RN add to the total
            tot[x] += acc[x];
            acc[x] = 0.0f;
          }
        for (int r0 = 0; r0 < rows; r0 += kWideRows)
          for (int p = 0; p < panels_here; ++p)
            Tile::tile(ap + std::size_t((i0 + r0) / kWideRows) * std::size_t(K) * kWideRows,
                       bp + std::size_t(j0 / kWideCols + p) * std::size_t(K) * kWideCols, k0, k1,
                       acc + std::size_t(r0) * kNcF + std::size_t(p) * kWideCols, kNcF);
        k0 = k1;
      }
      if (chained && !ch.sa) {
        for (std::size_t x = 0; x < tile_size; ++x) {
          const float v = ch.promotion > 0 ? tot[x] + acc[x] : acc[x];
          acc[x] = K > ch.range ? sum[x] + v : v;
        }
      }
      for (int r = 0; r < std::min(rows, M - i0); ++r) {
        const float* src = acc + std::size_t(r) * kNcF;
        float* dst = C + std::size_t(i0 + r) * std::size_t(N) + std::size_t(j0);
        if (s == 1.0f) std::copy(src, src + cols, dst);
        else
          for (int c = 0; c < cols; ++c) dst[c] = src[c] * s;  // RN(acc * s)
      }
    }
  }
  detail::trim(ap_buf);
  detail::trim(bp_buf);
  detail::trim(sa_buf);
  detail::trim(sb_buf);
}

// gemm_wide on the tiles of the path gemm_isa() names (AVX-512 or AVX2), FMAs where `fused`.
template <class AAt, class BAt>
void gemm_wide_isa(bool fused, int M, int N, int K, AAt a_at, BAt b_at, float s, float* C, WideChain ch = WideChain{}) {
  if (detail::gemm_isa() == detail::GemmIsa::kAvx512) {
    if (fused) return gemm_wide<WideAvx512<true>>(M, N, K, a_at, b_at, s, C, ch);
    return gemm_wide<WideAvx512<false>>(M, N, K, a_at, b_at, s, C, ch);
  }
  if (fused) return gemm_wide<WideAvx2<true>>(M, N, K, a_at, b_at, s, C, ch);
  gemm_wide<WideAvx2<false>>(M, N, K, a_at, b_at, s, C, ch);
}
#endif

// C [M, N] = A [M, K] B on the baseline path (B as 8-column panels).
void gemm_panels(int M, int N, int K, const float* A, const float* panels, float* C) {
  const int groups = (M + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (double(M) * N * K >= detail::kParallelMinMacs)
  for (int g = 0; g < groups; ++g) {
    const int i0 = g * kRows, rows = std::min(kRows, M - i0);
    panel_rows_baseline(i0, rows, N, K, A, panels, C);
  }
}

// C [M, N] = A [M, K] B [K, N] (fp32, B row-major) on the path gemm_isa() names.
void gemm_f32_dispatch(int M, int N, int K, const float* A, const float* B, float* C) {
  const detail::GemmIsa isa = detail::gemm_isa();
#ifdef FP8EMU_GEMM_X86
  const auto a_at = [=](int i, int k) { return A[std::size_t(i) * std::size_t(K) + std::size_t(k)]; };
  const auto b_at = [=](int k, int j) { return B[std::size_t(k) * std::size_t(N) + std::size_t(j)]; };
  if (isa != detail::GemmIsa::kBaseline) return gemm_wide_isa(false, M, N, K, a_at, b_at, 1.0f, C);
#endif
  const std::vector<float> panels = pack_panels<kLanes>(K, N, B);
  gemm_panels(M, N, K, A, panels.data(), C);
}

}  // namespace

void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* C) {
  if (M == 0 || N == 0) return;
  gemm_f32_dispatch(M, N, K, A, B, C);
}

void gemm_fp8_nn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                 const std::uint8_t* B, Format fb, float scale_inv_b, float* D) {
  if (M == 0 || N == 0) return;
  const float* ta = decode_table(fa);
  const float* tb = decode_table(fb);
  const float s = scale_inv_a * scale_inv_b;
#ifdef FP8EMU_GEMM_X86
  {  // decoded straight into the panels
    const auto a_at = [=](int i, int k) { return ta[A[std::size_t(i) * std::size_t(K) + std::size_t(k)]]; };
    const auto b_at = [=](int k, int j) { return tb[B[std::size_t(k) * std::size_t(N) + std::size_t(j)]]; };
    if (detail::gemm_isa() != detail::GemmIsa::kBaseline) {
      gemm_wide_isa(detail::products_exact_fp32(fa, fb), M, N, K, a_at, b_at, s, D);
      detail::canonical_nans(D, std::size_t(M) * std::size_t(N));
      return;
    }
  }
#endif
  // Both operands decoded once (exact).
  std::vector<float> a(std::size_t(M) * std::size_t(K)), b(std::size_t(K) * std::size_t(N));
  const std::ptrdiff_t na = std::ptrdiff_t(a.size()), nb = std::ptrdiff_t(b.size());
#pragma omp parallel for schedule(static) if (na >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < na; ++i) a[std::size_t(i)] = ta[A[i]];
#pragma omp parallel for schedule(static) if (nb >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < nb; ++i) b[std::size_t(i)] = tb[B[i]];
  gemm_f32_dispatch(M, N, K, a.data(), b.data(), D);
  const std::ptrdiff_t n = std::ptrdiff_t(M) * N;
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < n; ++i) D[i] *= s;
  detail::canonical_nans(D, std::size_t(n));
}

namespace detail {

namespace {

// The widest significand (odd integer part, in bits), the lowest set bit's exponent and the largest
// magnitude over a 256-entry value table's finite non-zero values.
struct ValueRange {
  int bits = 0;
  int low = 1 << 20;
  double max = 0.0;
};

ValueRange value_range(const float* table) {
  ValueRange r;
  for (int c = 0; c < 256; ++c) {
    const float v = table[c];
    if (!std::isfinite(v) || v == 0.0f) continue;
    int e = 0;
    // |v| = m * 2^(e - 24) with m an integer below 2^24 (frexp and the scaling are exact).
    std::uint32_t m = std::uint32_t(std::ldexp(std::fabs(double(std::frexp(v, &e))), 24));
    int low = e - 24;
    while ((m & 1u) == 0) {
      m >>= 1;
      ++low;
    }
    int bits = 0;
    while (m >> bits) ++bits;
    r.bits = std::max(r.bits, bits);
    r.low = std::min(r.low, low);
    r.max = std::max(r.max, std::fabs(double(v)));
  }
  return r;
}

bool products_exact(const ValueRange& a, const ValueRange& b) {
  if (a.bits == 0 || b.bits == 0) return true;  // no finite non-zero value: every product is 0, Inf or NaN
  // a*b = ma*mb * 2^(la+lb): at most a.bits + b.bits significant bits, the lowest at 2^(la+lb). It
  // is an fp32 when they fit 24 bits, the lowest is at or above 2^-149 (fp32's subnormal step) and
  // the magnitude is at most FLT_MAX (the double product of two fp32 values is exact).
  return a.bits + b.bits <= 24 && a.low + b.low >= -149 && a.max * b.max <= double(FLT_MAX);
}

}  // namespace

void canonical_nans(float* D, std::size_t n) {
  constexpr std::uint32_t kCanonical = 0x7FFFFFFFu;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n) >= kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(n); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &D[i], 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) std::memcpy(&D[i], &kCanonical, 4);
  }
}

bool products_exact_fp32(const float* ta, const float* tb) { return products_exact(value_range(ta), value_range(tb)); }

bool products_exact_fp32(Format fa, Format fb) {
  static const std::array<ValueRange, kFormatCount> ranges = [] {  // once: GEMMs may be small
    std::array<ValueRange, kFormatCount> r{};
    for (const FormatRecord& f : kFormats)
      if (is_mx_element(f.id) || is_fp8_or_fnuz(f.id)) r[std::size_t(f.id)] = value_range(decode_table(f.id));
    return r;
  }();
  (void)decode_table(fa);  // its check: an element format of the FP8 casts
  (void)decode_table(fb);
  return products_exact(ranges[std::size_t(fa)], ranges[std::size_t(fb)]);
}

bool gemm_fp8_tn_fp32(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                      const std::uint8_t* B, Format fb, float scale_inv_b, int promotion, int range, float* D) {
  // One run per range when the interval covers it (core::dot_promoted); range >= K: no split.
  WideChain ch;
  ch.range = std::max(range, 1);
  ch.promotion = promotion >= std::min(K, ch.range) ? 0 : promotion;
  const bool chained = ch.promotion > 0 || ch.range < K;
  if (M == 0 || N == 0) return true;
#ifdef FP8EMU_GEMM_X86
  if (gemm_isa() != GemmIsa::kBaseline) {  // B [N, K] decoded straight into the panels: no transpose
    const float* ta = decode_table(fa);
    const float* tb = decode_table(fb);
    const auto a_at = [=](int i, int k) { return ta[A[std::size_t(i) * std::size_t(K) + std::size_t(k)]]; };
    const auto b_at = [=](int k, int j) { return tb[B[std::size_t(j) * std::size_t(K) + std::size_t(k)]]; };
    gemm_wide_isa(products_exact_fp32(fa, fb), M, N, K, a_at, b_at, scale_inv_a * scale_inv_b, D, ch);
    canonical_nans(D, std::size_t(M) * std::size_t(N));
    return true;
  }
#endif
  if (chained) return false;  // the baseline kernel sums one run
  std::vector<std::uint8_t> b_kn(std::size_t(N) * std::size_t(K));
  transpose(N, K, B, b_kn.data());
  gemm_fp8_nn(M, N, K, A, fa, scale_inv_a, b_kn.data(), fb, scale_inv_b, D);
  return true;
}

bool gemm_fp8_block_tn_wide(const BlockQuantized& A, const BlockQuantized& B, float* D) {
  const int M = A.n, N = B.n, K = A.k;
  if (M == 0 || N == 0) return true;
  if (K == 0) {  // no block: every total stays +0
    std::fill(D, D + std::size_t(M) * std::size_t(N), 0.0f);
    return true;
  }
#ifdef FP8EMU_GEMM_X86
  if (gemm_isa() != GemmIsa::kBaseline) {
    const float* ta = decode_table(A.format);
    const float* tb = decode_table(B.format);
    const std::uint8_t* a = A.codes.data();
    const std::uint8_t* b = B.codes.data();
    const auto a_at = [=](int i, int k) { return ta[a[std::size_t(i) * std::size_t(K) + std::size_t(k)]]; };
    const auto b_at = [=](int k, int j) { return tb[b[std::size_t(j) * std::size_t(K) + std::size_t(k)]]; };
    WideChain ch;
    ch.promotion = A.block;
    ch.sa = A.scale_inv.data();
    ch.sb = B.scale_inv.data();
    ch.nb = A.blocks();
    gemm_wide_isa(products_exact_fp32(A.format, B.format), M, N, K, a_at, b_at, 1.0f, D, ch);
    return true;
  }
#endif
  return false;
}

}  // namespace detail

}  // namespace fp8emu::emu
