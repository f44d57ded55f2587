// The vectorised tensor-core GEMM of fp16, bf16 and tf32 values (see gemm_tc_values.hpp).
//
// One block FMA of the rows it implements (core::mma_step with one step, C in the alignment, F
// fraction bits, `significant_bits` kept by truncation, the fp32 accumulator), per output element,
// with the arithmetic done in fp32 and fp64 lanes, and why each step is exact:
//
//  * An operand x is given as its exact value and its exponent e (clamped at the format's emin, so
//    an fp16 subnormal has e = -14); |x| = sig * 2^(e - frac) with sig < 2^(frac + 1). A product's
//    alignment exponent is ea + eb; its value a * b has at most 22 significant bits and, for
//    qualifying rows (ea, eb in [lo, 50]), lies in [2^(2 lo), 2^102): an exact fp32 product.
//  * E = max(exponent of c, ea + eb over the block's non-zero products), raised to the row's floor.
//    The model truncates each term to a multiple of 2^(E - F): term = trunc(a * b * 2^(F - E)), the
//    fp32 product times the power of two 2^(F - E) (exact; a result below 1 may be rounded as a
//    subnormal but is then truncated to 0 all the same) converted to int32 with truncation. c joins
//    the same way (it has 24 significant bits and exponent <= E: c * 2^(F - E) < 2^(F + 1)).
//  * |term| <= (2^(frac + 1) - 1)^2 * 2^(F - 2 frac), and tc_values_fast_path requires `block` of
//    them to sum below 2^31: the products' sum is an exact int32; with c's term it is summed exactly
//    in fp64 (below 2^32).
//  * The cut keeps `significant_bits` bits of |S| by clearing the low 53 - bits fraction bits of
//    the fp64 S (sign-magnitude: truncation toward zero), and S * 2^(E - F) is formed exactly in
//    fp64, then converted to fp32 exactly: it has at most 24 significant bits and is a normal fp32.
//    (fast_path: F in [23, 28], so a term and c's term fit an int32.)
//    S = 0 gives +0, the model's exact-zero result.
//  * Range: every block result r != 0 satisfies |r| >= 2^(E - F), and E >= 2 lo - F by induction
//    along K (a block with a non-zero product has E >= 2 lo; one with none returns c unchanged, as
//    c has at most 24 <= F significant bits). With lo = F - 63 (tc_values_min_exponent), E >= F - 126:
//    2^(F - E) <= 2^126 is a normal fp32 and no result is below 2^-126 (none is subnormal); with
//    exponents <= 50 and K <= 2^22 no result reaches 2^128. The exponent floor never binds there.
// Zero operands have value 0 and exponent kTcValuesNoExponent: they add 0 and never set E, like
// the zero padding of ragged N, so a short last block is the same as zero padding.
#include "gemm_tc_values.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include <omp.h>

#include "gemm_isa.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

namespace fp8emu::emu::detail {
namespace {
constexpr int kRows = 4;         // rows of a register tile
constexpr int kChunkCols = 128;  // columns of a cache tile
constexpr int kTileRows = 64;    // rows of a cache tile (a multiple of kRows)
constexpr int kChunkK = 256;     // K per chunk (a multiple of every block length)
}  // namespace

bool tc_values_fast_path(const core::MmaDatapath& p) {
  if (p.steps != 1 || !p.c_joins_first_step || p.accumulator != core::MmaAccumulator::kFp32 ||
      p.operands == core::MmaOperands::kFp8 || p.significant_bits < 1 || p.significant_bits > 24 ||
      p.fraction_bits < 23 || p.fraction_bits > 28 || p.block < 1 || kChunkK % p.block != 0)
    return false;
  const int frac = core::operand_fraction_bits(p.operands);
  const double sig = double((std::int64_t(1) << (frac + 1)) - 1);
  const double term = sig * sig * double(std::int64_t(1) << p.fraction_bits) / double(std::int64_t(1) << (2 * frac));
  return double(p.block) * term < 2147483648.0;
}

int tc_values_min_exponent(const core::MmaDatapath& p) {
  // E >= 2 lo - F must keep 2^(F - E) <= 2^127 and 2^(E - F) >= 2^-126 (a normal result):
  // 2 lo - F >= F - 127 and 2 lo - 2 F >= -126, so lo >= F - 63.
  return p.fraction_bits - 63;
}

namespace {

#pragma GCC diagnostic ignored "-Wpsabi"  // the vectors never cross a non-inlined call

template <int L>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef std::int32_t I __attribute__((vector_size(4 * L)));
  typedef double D __attribute__((vector_size(8 * L)));
  typedef std::int64_t Q __attribute__((vector_size(8 * L)));
};

template <class V>
__attribute__((always_inline)) inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
__attribute__((always_inline)) inline void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

struct Datapath {
  int block, F, floor;
  std::int64_t cut_mask;  // clears the fp64 fraction bits below the kept significant bits
};

// Register tile: rows a_rows[0..kRows) (pointers to their K values and exponents) times one
// L-column panel (bp, bep: [K][L]), over K-elements [k0, k1) (whole blocks), continuing the chains
// c (fp32 bits in `state`, row stride kChunkCols).
template <int L>
__attribute__((always_inline)) inline void tile(const float* const* av, const std::int32_t* const* ae, const float* bp,
                                                const std::int32_t* bep, int k0, int k1, const Datapath& p,
                                                float* state) {
  using VF = typename Lanes<L>::F;
  using VI = typename Lanes<L>::I;
  using VD = typename Lanes<L>::D;
  using VQ = typename Lanes<L>::Q;
  VF c[kRows];
  for (int r = 0; r < kRows; ++r) c[r] = load<VF>(state + r * kChunkCols);
  for (int b0 = k0; b0 < k1; b0 += p.block) {
    const int b1 = std::min(k1, b0 + p.block);
    VI E[kRows];
    for (int r = 0; r < kRows; ++r) {
      const VI cb = (VI)c[r] & 0x7FFFFFFF;
      E[r] = cb == 0 ? VI{} + kTcValuesNoExponent : ((cb >> 23) & 0xFF) - 127;  // c: +0 or a normal fp32
    }
    for (int k = b0; k < b1; ++k) {
      const VI eb = load<VI>(bep + std::size_t(k) * L);
      for (int r = 0; r < kRows; ++r) {
        const VI t = ae[r][k] + eb;
        E[r] = t > E[r] ? t : E[r];
      }
    }
    VF sc[kRows];
    VI S[kRows], ct[kRows];
    for (int r = 0; r < kRows; ++r) {
      // No term at all (c = 0, every product 0): any E gives S = 0; F keeps the scales at 1.
      E[r] = E[r] > kTcValuesNoExponent / 2 ? (E[r] > p.floor ? E[r] : VI{} + p.floor) : VI{} + p.F;
      sc[r] = (VF)((127 + p.F - E[r]) << 23);  // 2^(F - E)
      ct[r] = __builtin_convertvector(c[r] * sc[r], VI);
      S[r] = VI{};
    }
    for (int k = b0; k < b1; ++k) {
      const VF vb = load<VF>(bp + std::size_t(k) * L);
      for (int r = 0; r < kRows; ++r) S[r] += __builtin_convertvector((av[r][k] * vb) * sc[r], VI);
    }
    for (int r = 0; r < kRows; ++r) {
      const VD s = __builtin_convertvector(S[r], VD) + __builtin_convertvector(ct[r], VD);  // exact: |s| < 2^32
      // Under a caller's round-down mode an exact zero sum (S = -ct) is -0 here: harmless as the
      // next block's c (no exponent, a zero term), and written as +0 by cache_tile's store.
      const VD cut = (VD)((VQ)s & p.cut_mask);
      const VD scale = (VD)((__builtin_convertvector(E[r], VQ) + (1023 - p.F)) << 52);  // 2^(E - F)
      c[r] = __builtin_convertvector(cut * scale, VF);
    }
  }
  for (int r = 0; r < kRows; ++r) store(state + r * kChunkCols, c[r]);
}

// One cache tile of kTileRows x kChunkCols outputs at (i0, j0) on L-lane vectors, K in chunks of
// kChunkK; B packed into L-column panels [Np / L][K][L] (zero padded). `state` holds the tile's
// chains between K chunks.
struct Operands {
  int M, N, K, Np;
  const float* a;
  const std::int32_t* ea;
  const float* bp;
  const std::int32_t* bep;
  float* D;
};

template <int L>
__attribute__((always_inline)) inline void cache_tile(const Operands& o, int i0, int j0, const Datapath& p,
                                                      float* state) {
  const int rows = std::min(kTileRows, o.M - i0), cols = std::min(kChunkCols, o.Np - j0);
  std::fill(state, state + kTileRows * kChunkCols, 0.0f);
  for (int k0 = 0; k0 < o.K; k0 += kChunkK) {
    const int k1 = std::min(o.K, k0 + kChunkK);
    for (int g = 0; g < rows; g += kRows) {
      const float* av[kRows];
      const std::int32_t* ae[kRows];
      for (int r = 0; r < kRows; ++r) {
        const std::size_t i = std::size_t(std::min(i0 + g + r, o.M - 1));  // rows past M: computed, not stored
        av[r] = o.a + i * std::size_t(o.K);
        ae[r] = o.ea + i * std::size_t(o.K);
      }
      for (int v = 0; v < cols / L; ++v) {
        const std::size_t panel = std::size_t((j0 + v * L) / L) * std::size_t(o.K) * L;
        tile<L>(av, ae, o.bp + panel, o.bep + panel, k0, k1, p, state + g * kChunkCols + v * L);
      }
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < std::min(cols, o.N - j0); ++j)
      o.D[std::size_t(i0 + r) * std::size_t(o.N) + std::size_t(j0 + j)] =
          state[r * kChunkCols + j] == 0.0f ? 0.0f : state[r * kChunkCols + j];  // +0 for -0 (see tile)
}

// One function per instruction-set path (the OpenMP region that calls them is compiled for the
// baseline ISA, so the vector code lives in these).
void cache_tile_baseline(const Operands& o, int i0, int j0, const Datapath& p, float* state) {
  cache_tile<8>(o, i0, j0, p, state);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void cache_tile_avx2(const Operands& o, int i0, int j0, const Datapath& p,
                                                     float* state) {
  cache_tile<8>(o, i0, j0, p, state);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw"))) void cache_tile_avx512(const Operands& o, int i0,
                                                                                     int j0, const Datapath& p,
                                                                                     float* state) {
  cache_tile<16>(o, i0, j0, p, state);
}
#define FP8EMU_TC_VALUES_X86 1
#endif

}  // namespace

void gemm_tc_values(int M, int N, int K, const float* a, const std::int32_t* ea, const float* b,
                    const std::int32_t* eb, const core::MmaDatapath& p, float* D) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(D, D + std::size_t(M) * std::size_t(N), 0.0f);
    return;
  }
  const GemmIsa isa = gemm_isa();
  if (gemm_tc_values_avx512_takes(p)) {  // the same exponents, from the values' bits
    gemm_tc_values_avx512(M, N, K, TcValuesSource{a, std::size_t(K), 1, nullptr},
                          TcValuesSource{b, std::size_t(K), 1, nullptr}, p, D);
    return;
  }
  const int L = isa == GemmIsa::kAvx512 ? 16 : 8;
  const int Np = (N + L - 1) / L * L;
  thread_local std::vector<float> bp_buf;
  thread_local std::vector<std::int32_t> bep_buf;
  float* bp = grow(bp_buf, std::size_t(Np) * std::size_t(K));
  std::int32_t* bep = grow(bep_buf, std::size_t(Np) * std::size_t(K));
#pragma omp parallel for schedule(static) if (double(Np) * K >= double(kParallelMinElements))
  for (int j = 0; j < Np; ++j) {
    const std::size_t panel = std::size_t(j / L) * std::size_t(K) * std::size_t(L), lane = std::size_t(j % L);
    for (int k = 0; k < K; ++k) {
      const std::size_t src = std::size_t(j) * std::size_t(K) + std::size_t(k);
      bp[panel + std::size_t(k) * std::size_t(L) + lane] = j < N ? b[src] : 0.0f;
      bep[panel + std::size_t(k) * std::size_t(L) + lane] = j < N ? eb[src] : kTcValuesNoExponent;
    }
  }
  const int keep = p.significant_bits;
  const Datapath dp{p.block, p.fraction_bits, p.exponent_floor,
                    std::int64_t(~((std::uint64_t(1) << (53 - keep)) - 1u))};
  void (*tile_fn)(const Operands&, int, int, const Datapath&, float*) = cache_tile_baseline;
#ifdef FP8EMU_TC_VALUES_X86
  if (isa == GemmIsa::kAvx512) tile_fn = cache_tile_avx512;
  else if (isa == GemmIsa::kAvx2) tile_fn = cache_tile_avx2;
#endif
  const Operands o{M, N, K, Np, a, ea, bp, bep, D};
  const int tiles_m = (M + kTileRows - 1) / kTileRows, tiles_n = (Np + kChunkCols - 1) / kChunkCols;
  const int tiles = tiles_m * tiles_n;
#pragma omp parallel if (double(M) * N * K >= kParallelMinMacs)
  {
    thread_local std::vector<float> state_buf;
    float* state = grow(state_buf, std::size_t(kTileRows) * kChunkCols);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tiles; ++t) tile_fn(o, (t / tiles_n) * kTileRows, (t % tiles_n) * kChunkCols, dp, state);
  }
  trim(bp_buf);
  trim(bep_buf);
}

}  // namespace fp8emu::emu::detail
