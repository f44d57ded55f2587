// The AVX2 and AVX-512 tensor-core GEMMs (Hopper wgmma and Ada models, fp32 accumulator; see
// gemm_tensor_core.hpp) as fp32 FMAs rounded toward zero, bit-identical to core::gemm_tn_element.
//
// One block FMA (docs/tensor-core-model.md §Block FMA: F = 13 fraction bits, 14 significant bits
// kept) and why each step here is exact:
//
//  * Terms. With E the block's alignment exponent (the largest ea + eb over its non-zero products
//    and the exponent of the running sum c), the model truncates each product's magnitude
//    y = |a b| to the grid g = 2^(E - 13): term = sign * floor_g(y). An fp32 accumulator in the
//    binade [2^(E + 10), 2^(E + 11)) has ulp g, so an FMA rounded toward zero, acc = RZ(acc + x),
//    adds floor_g(x) for x >= 0, exactly the model's term (the FMA's product is exact and there is
//    one rounding). For x < 0 it adds -ceil_g(|x|) instead.
//  * Negative terms. A's values are packed times (1 + 2^-16) (exact: at most 4 + 16 significant
//    bits). Then y' = y (1 + 2^-16) lies strictly between floor_g(y) and floor_g(y) + g: y is a
//    multiple of its quantum q = 2^(ea + eb - fa - fb), y = n q with n <= 225 and y < 2^(E + 2);
//    if q >= g, y is on the grid and y 2^-16 < g; if q < g, the next grid point is at least q
//    away and y 2^-16 = n q 2^-16 < q. So a positive term still adds floor_g(y), and a negative one
//    adds -(floor_g(y) + g): each non-zero negative product adds exactly g too little, and the
//    block adds back g times their number (a popcount of the block's sign and non-zero masks).
//  * c joins the same way: the accumulator starts at RZ(M + c (1 + 2^-16)), one FMA, with
//    M = 1.5 * 2^(E + 10). c has at most 14 significant bits and |c| < 2^(E + 1), so c 2^-16 is
//    below g and below c's own quantum: that is M + trunc_g(c), less g when c < 0 (counted with the
//    negative products). The accumulator stays within the binade: the block's terms and c are below
//    33 * 2^(E + 2) + 2^(E + 1) < 2^(E + 9) in magnitude.
//  * The block sum S = (acc - M) + count * g is exact in any rounding mode (a multiple of g below
//    2^(E + 9): 22 bits); the 14-bit cut clears its low 10 mantissa bits (sign-magnitude:
//    truncation), and S is already at its scale. S = 0 gives +0. E is at least -60 (clamped only
//    for a block with no term, whose S is 0 whatever E) and at most about 50 (|c| < K * 2^25), so
//    M and g are normal.
// Along K the blocks chain (the result is the next block's c); promotion and split-K are the
// scalar model's RN adds (gemm_tc_chain.hpp), per lane. Zero codes, and the zero padding of ragged
// M, N and K, add 0 and have the exponent kZeroExp8, below every real one. Rows of A or B that hold
// a NaN or Inf code are packed as zeros and flagged for the caller's element model.
//
// Rounding toward zero is MXCSR's mode (AVX2 has no per-instruction rounding): the tiles switch to
// it for their FMAs and back to round-to-nearest for the chain's RN adds (promotion and split-K)
// and on return; every value crosses a switch through memory, behind a compiler barrier.
//
// AVX-512 (with AVX512_VPOPCNTDQ) runs the same arithmetic on 16 lanes, with three shortcuts that
// are exact for the same reasons: c's exponent is VGETEXPPS's floor(log2 |c|) (-Inf, hence
// INT32_MIN after the conversion, for c = +0); E needs no clamp (E >= -128, so M >= 1.5 * 2^-118 is
// normal); and the count n is added to acc's bits rather than as n * g: acc + n g stays in acc's
// binade [2^(E + 10), 2^(E + 11)), whose ulp is g, so the integer add is that exact sum.
//
// Register tiles: AVX2 6 rows x 16 columns (12 ymm accumulators; per k 2 vector loads and 6
// broadcasts for 12 FMAs); AVX-512 4 rows x 64 columns (16 zmm accumulators; per k 4 loads and 4
// broadcasts for 16 FMAs). Cache tiles of up to 72 rows x 256 columns run by OpenMP, K in chunks
// of 256.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include <omp.h>

#include "gemm_tc_chain.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h initialises its "undefined" vectors from themselves, which -Wall reports
// once those intrinsics are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define FP8EMU_TC_FMA_X86 1
#endif

namespace fp8emu::emu::detail {

#ifdef FP8EMU_TC_FMA_X86
namespace {

// Register tiles: AVX2 6 rows x 2 8-column vectors, AVX-512 4 rows x 4 16-column vectors.
constexpr int kR2 = 6, kCols2 = 16;
constexpr int kR5 = 4, kCols5 = 64;
constexpr int kMc = 72;            // rows per cache tile (rounded down to a multiple of the tile's rows)
constexpr int kNc = 256;           // columns per cache tile (a multiple of both tiles' columns)
constexpr int kKc = 256;           // K per chunk (a multiple of every block)
constexpr std::int8_t kZeroExp8 = -64;  // below every real exponent (products: [-28, 30]; c: >= -60)

// Per-code packed fields: the value (A's times 1 + 2^-16; 0 for zeros, NaN and Inf), the int8
// exponent (kZeroExp8 for those), whether the code is negative and non-zero, and special.
struct PackTable {
  float value[256];
  std::int8_t e8[256];
  std::uint8_t neg[256], nonzero[256], special[256];
};

void pack_table(const FormatSpec& f, const CodeFields* t, bool a_side, PackTable& p) {
  for (int c = 0; c < 256; ++c) {
    const bool zero = t[c].m == 0 || t[c].special;
    const float v = zero ? 0.0f : core::fp8_to_f32(std::uint8_t(c), f);
    p.value[c] = a_side ? v * (1.0f + 1.0f / 65536.0f) : v;  // exact: at most 20 significant bits
    p.e8[c] = zero ? kZeroExp8 : std::int8_t(t[c].e);
    p.neg[c] = !zero && t[c].s < 0;
    p.nonzero[c] = !zero;
    p.special[c] = t[c].special;
  }
}

// Packed A, per panel of R rows: values [Kp][kR] and int8 exponents [Kp / 4][kR][4] (K padded
// to Kp, a multiple of the block), and per row and block the masks of negative and of non-zero
// elements (bit i: the block's element i). Packed B, per panel of kTileCols columns: values
// [Kp][kTileCols], exponents [Kp / 4][kTileCols][4] and per block the masks [kTileCols]. A register tile reads one A panel and one B panel, at constant offsets from two pointers.
struct Packed {  // shared by both tile shapes
  std::vector<float> av, bv;
  std::vector<std::int8_t> ae, be;
  std::vector<std::uint32_t> aneg, anz, bneg, bnz;
};

template <int R, int Cols>
struct View {
  static constexpr int kR = R, kTileCols = Cols;
  int Kp, blocks;
  const float* av;
  const std::int8_t* ae;
  const std::uint32_t *aneg, *anz;
  const float* bv;
  const std::int8_t* be;
  const std::uint32_t *bneg, *bnz;
  // Panel p of A (rows kR p ..), panel p of B (columns kTileCols p ..).
  const float* a_values(int p) const { return av + std::size_t(p) * std::size_t(Kp) * kR; }
  const std::int8_t* a_exps(int p) const { return ae + std::size_t(p) * std::size_t(Kp) * kR; }
  const float* b_values(int p) const { return bv + std::size_t(p) * std::size_t(Kp) * kTileCols; }
  const std::int8_t* b_exps(int p) const { return be + std::size_t(p) * std::size_t(Kp) * kTileCols; }
};

// Rows of A and columns of B (NaN/Inf rows packed as zeros and flagged).
template <int kR, int kTileCols>
void pack(int M, int N, int K, int Mp, int Np, int Kp, int block, const std::uint8_t* A, const PackTable& ta,
          const std::uint8_t* B, const PackTable& tb, Packed& p, char* bad_a, char* bad_b) {
  const int blocks = Kp / block;
  grow(p.av, std::size_t(Mp) * std::size_t(Kp));
  grow(p.ae, std::size_t(Mp) * std::size_t(Kp));
  grow(p.aneg, std::size_t(Mp) * std::size_t(blocks));
  grow(p.anz, std::size_t(Mp) * std::size_t(blocks));
  grow(p.bv, std::size_t(Np) * std::size_t(Kp));
  grow(p.be, std::size_t(Np) * std::size_t(Kp));
  grow(p.bneg, std::size_t(Np) * std::size_t(blocks));
  grow(p.bnz, std::size_t(Np) * std::size_t(blocks));
  const double work = double(Mp + Np) * double(Kp);
#pragma omp parallel if (work >= double(kParallelMinElements))
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < Mp; ++i) {
      const std::uint8_t* src = A + std::size_t(std::min(i, M - 1)) * std::size_t(K);
      const std::size_t panel = std::size_t(i / kR) * std::size_t(Kp) * kR, lane = std::size_t(i % kR);
      float* v = p.av.data() + panel;
      std::int8_t* e = p.ae.data() + panel;
      bool special = false;
      for (int b = 0; b < blocks; ++b) {
        std::uint32_t neg = 0, nz = 0;
        for (int l = 0; l < block; ++l) {
          const int k = b * block + l;
          const std::uint8_t c = (i < M && k < K) ? src[k] : std::uint8_t(0);
          special |= ta.special[c] != 0;
          v[std::size_t(k) * kR + lane] = ta.value[c];
          e[std::size_t(k / 4) * (4 * kR) + lane * 4 + std::size_t(k % 4)] = ta.e8[c];
          neg |= std::uint32_t(ta.neg[c]) << l;
          nz |= std::uint32_t(ta.nonzero[c]) << l;
        }
        p.aneg[std::size_t(i) * std::size_t(blocks) + std::size_t(b)] = neg;
        p.anz[std::size_t(i) * std::size_t(blocks) + std::size_t(b)] = nz;
      }
      if (i < M) bad_a[i] = special;
    }
#pragma omp for schedule(static)
    for (int j = 0; j < Np; ++j) {
      const std::uint8_t* src = B + std::size_t(std::min(j, N - 1)) * std::size_t(K);
      const std::size_t panel = std::size_t(j / kTileCols) * std::size_t(Kp) * kTileCols,
                        lane = std::size_t(j % kTileCols);
      float* v = p.bv.data() + panel;
      std::int8_t* e = p.be.data() + panel;
      bool special = false;
      for (int b = 0; b < blocks; ++b) {
        std::uint32_t neg = 0, nz = 0;
        for (int l = 0; l < block; ++l) {
          const int k = b * block + l;
          const std::uint8_t c = (j < N && k < K) ? src[k] : std::uint8_t(0);
          special |= tb.special[c] != 0;
          v[std::size_t(k) * kTileCols + lane] = tb.value[c];
          e[std::size_t(k / 4) * (4 * kTileCols) + lane * 4 + std::size_t(k % 4)] = tb.e8[c];
          neg |= std::uint32_t(tb.neg[c]) << l;
          nz |= std::uint32_t(tb.nonzero[c]) << l;
        }
        const std::size_t at = (std::size_t(j / kTileCols) * std::size_t(blocks) + std::size_t(b)) * kTileCols +
                               std::size_t(j % kTileCols);
        p.bneg[at] = neg;
        p.bnz[at] = nz;
      }
      if (j < N) bad_b[j] = special;
    }
  }
}

#define FP8EMU_TC_FMA __attribute__((target("avx2,fma")))

// MXCSR's rounding control: round toward zero (RC = 11) or the caller's mode, with a compiler
// barrier on each side (values cross a switch through memory).
FP8EMU_TC_FMA inline void set_csr(unsigned csr) {
  __asm__ volatile("" ::: "memory");
  _mm_setcsr(csr);
  __asm__ volatile("" ::: "memory");
}

// The number of set bits of each 32-bit lane: byte counts by table (VPSHUFB) summed by
// VPMADDUBSW and VPMADDWD.
FP8EMU_TC_FMA __attribute__((always_inline)) inline __m256i popcount32(__m256i x) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2,
                                       3, 2, 3, 3, 4);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bytes = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(x, low4)),
                                        _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), low4)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(bytes, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
}

// The maximum of the four int8 lanes [column][k % 4] of each column, as int32 per column.
FP8EMU_TC_FMA __attribute__((always_inline)) inline __m256i exponent_max(__m256i e8) {
  __m256i m = _mm256_max_epi8(e8, _mm256_srli_epi32(e8, 8));  // byte 0: max(b0, b1); byte 2: max(b2, b3)
  m = _mm256_max_epi8(m, _mm256_srli_epi32(m, 16));           // byte 0: max(b0 .. b3)
  return _mm256_srai_epi32(_mm256_slli_epi32(m, 24), 24);
}

// One register tile (A panel pa, B panel pb) over quads [q_begin, q_end) of K, whole blocks of BQ
// quads, in MXCSR's round-toward-zero mode (the thread's own mode for the chain's RN adds).
// ch, tot, sum: the tile's state [kR][kTileCols] (the chain, the promotion total and the split-K
// sum), kept across K chunks.
template <int BQ>
FP8EMU_TC_FMA void tile_avx2(const View<kR2, kCols2>& w, int pa, int pb, int q_begin, int q_end, Chain cp, float* ch,
                             float* tot, float* sum) {
  constexpr int kR = kR2, kC = 2, kTileCols = kCols2;
  const unsigned rn = _mm_getcsr(), rz = rn | 0x6000u;  // RC = 11: toward zero
  constexpr int kBlock = 4 * BQ, kV = kR * kC;
  const __m256i cut_mask = _mm256_set1_epi32(static_cast<int>(0xFFFFFC00u));
  const __m256 widen = _mm256_set1_ps(1.0f + 1.0f / 65536.0f);
  const float* const avp = w.a_values(pa);
  const std::int8_t* const aep = w.a_exps(pa);
  const float* const bvp = w.b_values(pb);
  const std::int8_t* const bep = w.b_exps(pb);
  const int i0 = pa * kR;
  alignas(32) float Ms[kV * 8], gs[kV * 8];
  set_csr(rz);
  for (int q0 = q_begin; q0 < q_end; q0 += BQ) {
    const int k0 = 4 * q0, blk = k0 / kBlock;
    if (cp.range_ends(k0) || cp.run_ends(k0)) {  // the chain's RN adds, on the state in memory
      set_csr(rn);
      chain_boundaries(cp, k0, kR * kTileCols, ch, tot, sum);
      set_csr(rz);
    }
    // Pass 1: the largest ea + eb over the block's non-zero products, in int8 lanes [column][k % 4]
    // (-128: none); E = max(that, the exponent of c, -60); the accumulators start at
    // RZ(M + c (1 + 2^-16)) = M + trunc_g(c), less g when c < 0 (added back with the counts).
    __m256 acc[kR][kC];
    {
      __m256i E8[kR][kC];
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) E8[r][c] = _mm256_set1_epi8(-128);
      for (int q = q0; q < q0 + BQ; ++q) {
        const std::int8_t* b = bep + std::size_t(q) * (4 * kTileCols);
        __m256i eb[kC];
        for (int c = 0; c < kC; ++c) eb[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * c));
        for (int r = 0; r < kR; ++r) {
          std::int32_t bits;
          std::memcpy(&bits, aep + std::size_t(q) * (4 * kR) + 4 * std::size_t(r), 4);
          const __m256i ea = _mm256_set1_epi32(bits);
          for (int c = 0; c < kC; ++c) E8[r][c] = _mm256_max_epi8(E8[r][c], _mm256_add_epi8(ea, eb[c]));
        }
      }
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) {
          const int x = 8 * (r * kC + c);
          const __m256 cv = _mm256_loadu_ps(ch + x);
          // c is +0 (no exponent: INT_MIN) or a normal number.
          const __m256i cb = _mm256_and_si256(_mm256_castps_si256(cv), _mm256_set1_epi32(0x7FFFFFFF));
          const __m256i ec = _mm256_blendv_epi8(_mm256_sub_epi32(_mm256_srli_epi32(cb, 23), _mm256_set1_epi32(127)),
                                                _mm256_set1_epi32(INT32_MIN),
                                                _mm256_cmpeq_epi32(cb, _mm256_setzero_si256()));
          const __m256i E =
              _mm256_max_epi32(_mm256_max_epi32(exponent_max(E8[r][c]), ec), _mm256_set1_epi32(-60));
          const __m256i Eb = _mm256_slli_epi32(E, 23);
          const __m256 M = _mm256_castsi256_ps(_mm256_add_epi32(Eb, _mm256_set1_epi32(((127 + 10) << 23) | 0x00400000)));
          const __m256 g = _mm256_castsi256_ps(_mm256_add_epi32(Eb, _mm256_set1_epi32((127 - 13) << 23)));
          acc[r][c] = _mm256_fmadd_ps(cv, widen, M);  // rounded toward zero
          _mm256_store_ps(Ms + x, M);
          _mm256_store_ps(gs + x, g);
        }
    }
    // Pass 2: acc = RZ(acc + a' b), one FMA per 8 products.
    for (int k = k0; k < k0 + kBlock; ++k) {
      __m256 b[kC];
      for (int c = 0; c < kC; ++c) b[c] = _mm256_loadu_ps(bvp + std::size_t(k) * kTileCols + 8 * c);
      for (int r = 0; r < kR; ++r) {
        const __m256 a = _mm256_broadcast_ss(avp + std::size_t(k) * kR + r);
        for (int c = 0; c < kC; ++c) acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
      }
    }
    // S = acc - M + n g (exact in any rounding mode), n the negative non-zero products
    // (popcount((neg_a ^ neg_b) & nz_a & nz_b)) plus 1 for c < 0; cut to 14 significant bits.
    for (int r = 0; r < kR; ++r) {
      const std::size_t a = std::size_t(i0 + r) * std::size_t(w.blocks) + std::size_t(blk);
      const __m256i an = _mm256_set1_epi32(int(w.aneg[a])), az = _mm256_set1_epi32(int(w.anz[a]));
      for (int c = 0; c < kC; ++c) {
        const int x = 8 * (r * kC + c);
        const std::size_t b = (std::size_t(pb) * std::size_t(w.blocks) + std::size_t(blk)) * kTileCols + 8 * c;
        const __m256i nz =
            _mm256_and_si256(az, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.bnz + b)));
        const __m256i neg = _mm256_and_si256(
            _mm256_xor_si256(an, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.bneg + b))), nz);
        const __m256i c_neg = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(ch + x)), 31);
        const __m256 n = _mm256_cvtepi32_ps(_mm256_add_epi32(popcount32(neg), c_neg));
        const __m256 S = _mm256_fmadd_ps(n, _mm256_load_ps(gs + x), _mm256_sub_ps(acc[r][c], _mm256_load_ps(Ms + x)));
        _mm256_storeu_ps(ch + x, _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(S), cut_mask)));
      }
    }
  }
  set_csr(rn);
}

#define FP8EMU_TC_FMA512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vpopcntdq,fma")))

// The AVX-512 register tile: the same arithmetic as tile_avx2 on 16-lane vectors, 4 rows x 64
// columns (16 accumulators; per k 4 loads of B and 4 broadcasts for 16 FMAs), the negative products
// counted with VPOPCNTD on the block's masks, MXCSR's round-toward-zero mode as there.
template <int BQ>
FP8EMU_TC_FMA512 void tile_avx512(const View<kR5, kCols5>& w, int pa, int pb, int q_begin, int q_end, Chain cp,
                                  float* ch, float* tot, float* sum) {
  constexpr int kR = kR5, kC = kCols5 / 16, kTileCols = kCols5;
  constexpr int kBlock = 4 * BQ, kV = kR * kC;
  const unsigned rn = _mm_getcsr(), rz = rn | 0x6000u;  // RC = 11: toward zero
  const __m512i cut_mask = _mm512_set1_epi32(static_cast<int>(0xFFFFFC00u));
  const __m512 widen = _mm512_set1_ps(1.0f + 1.0f / 65536.0f);
  const float* const avp = w.a_values(pa);
  const std::int8_t* const aep = w.a_exps(pa);
  const float* const bvp = w.b_values(pb);
  const std::int8_t* const bep = w.b_exps(pb);
  const int i0 = pa * kR;
  alignas(64) float Ms[kV * 16];
  set_csr(rz);
  for (int q0 = q_begin; q0 < q_end; q0 += BQ) {
    const int k0 = 4 * q0, blk = k0 / kBlock;
    if (cp.range_ends(k0) || cp.run_ends(k0)) {  // the chain's RN adds, on the state in memory
      set_csr(rn);
      chain_boundaries(cp, k0, kR * kTileCols, ch, tot, sum);
      set_csr(rz);
    }
    // Pass 1, as tile_avx2: E, M = 1.5 * 2^(E + 10), acc = RZ(M + c (1 + 2^-16)).
    __m512 acc[kR][kC];
    {
      __m512i E8[kR][kC];
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) E8[r][c] = _mm512_set1_epi8(-128);
      for (int q = q0; q < q0 + BQ; ++q) {
        const std::int8_t* b = bep + std::size_t(q) * (4 * kTileCols);
        __m512i eb[kC];
        for (int c = 0; c < kC; ++c) eb[c] = _mm512_loadu_si512(b + 64 * c);
        for (int r = 0; r < kR; ++r) {
          std::int32_t bits;
          std::memcpy(&bits, aep + std::size_t(q) * (4 * kR) + 4 * std::size_t(r), 4);
          const __m512i ea = _mm512_set1_epi32(bits);
          for (int c = 0; c < kC; ++c) E8[r][c] = _mm512_max_epi8(E8[r][c], _mm512_add_epi8(ea, eb[c]));
        }
      }
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) {
          const int x = 16 * (r * kC + c);
          const __m512 cv = _mm512_loadu_ps(ch + x);
          // c's exponent: VGETEXPPS gives floor(log2 |c|) exactly (c is +0 or normal), and -Inf for
          // +0, which the conversion turns into INT32_MIN (no term). Both with exceptions suppressed
          // ({sae}): +0 would signal divide-by-zero and -Inf invalid, which a caller may unmask.
          const __m512i ec = _mm512_cvt_roundps_epi32(_mm512_getexp_round_ps(cv, _MM_FROUND_NO_EXC),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          // The column maximum over the four int8 lanes, in every byte, then sign-extended.
          __m512i m = _mm512_max_epi8(E8[r][c], _mm512_rol_epi32(E8[r][c], 8));
          m = _mm512_max_epi8(m, _mm512_rol_epi32(m, 16));
          // No clamp: E >= -128 (a block with no term), and M = 1.5 * 2^(E + 10) >= 1.5 * 2^-118 is
          // normal (g is never formed: the count is added to acc's bits below).
          const __m512i E = _mm512_max_epi32(_mm512_srai_epi32(m, 24), ec);
          const __m512 M = _mm512_castsi512_ps(
              _mm512_add_epi32(_mm512_slli_epi32(E, 23), _mm512_set1_epi32(((127 + 10) << 23) | 0x00400000)));
          // RZ(M + c (1 + 2^-16)) is one g short when c < 0: add it back now, on acc's bits (the
          // shift by a grid step commutes with the block's RZ adds inside the binade).
          acc[r][c] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(_mm512_fmadd_ps(cv, widen, M)),
                                                           _mm512_srli_epi32(_mm512_castps_si512(cv), 31)));
          _mm512_store_ps(Ms + x, M);
        }
    }
    // Pass 2: acc = RZ(acc + a' b), one FMA per 16 products.
    for (int k = k0; k < k0 + kBlock; ++k) {
      __m512 b[kC];
      for (int c = 0; c < kC; ++c) b[c] = _mm512_loadu_ps(bvp + std::size_t(k) * kTileCols + 16 * c);
      for (int r = 0; r < kR; ++r) {
        const __m512 a = _mm512_set1_ps(avp[std::size_t(k) * kR + r]);
        for (int c = 0; c < kC; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
      }
    }
    // S = acc - M + n g, n = popcount((neg_a ^ neg_b) & nz_a & nz_b) (c < 0 was added above); the
    // 14-bit cut. acc lies in the binade [2^(E + 10), 2^(E + 11)) whose ulp is g, and so does
    // acc + n g (n <= 33, far from either end), so adding n to acc's bits adds n g exactly.
    const std::uint32_t* const bnz = w.bnz + (std::size_t(pb) * std::size_t(w.blocks) + std::size_t(blk)) * kTileCols;
    const std::uint32_t* const bneg = w.bneg + (bnz - w.bnz);
    __m512i bz[kC], bn[kC];
    for (int c = 0; c < kC; ++c) {
      bz[c] = _mm512_loadu_si512(bnz + 16 * c);
      bn[c] = _mm512_loadu_si512(bneg + 16 * c);
    }
    for (int r = 0; r < kR; ++r) {
      const std::size_t a = std::size_t(i0 + r) * std::size_t(w.blocks) + std::size_t(blk);
      const __m512i an = _mm512_set1_epi32(int(w.aneg[a])), az = _mm512_set1_epi32(int(w.anz[a]));
      for (int c = 0; c < kC; ++c) {
        const int x = 16 * (r * kC + c);
        // (an ^ bneg) & (az & bnz): truth table 0x28 of VPTERNLOGD (A = an, B = bneg, C = nz).
        const __m512i neg = _mm512_ternarylogic_epi32(an, bn[c], _mm512_and_si512(az, bz[c]), 0x28);
        const __m512 S = _mm512_sub_ps(
            _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[r][c]), _mm512_popcnt_epi32(neg))),
            _mm512_load_ps(Ms + x));
        _mm512_storeu_ps(ch + x, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(S), cut_mask)));
      }
    }
  }
  set_csr(rn);
}

// D for one register tile's [kR][kTileCols] state: chain_result per lane (the same IEEE adds and
// multiply, in the caller's rounding mode), stored element by element at the ragged edges.
template <int kR, int kTileCols>
void store_tile(const float* ch, const float* tot, const float* sum, Chain cp, int K, float s, int i0, int j0, int M,
                int N, float* D) {
  for (int rr = 0; rr < kR && i0 + rr < M; ++rr)
    for (int cc = 0; cc < kTileCols && j0 + cc < N; ++cc) {
      const std::size_t x = std::size_t(rr * kTileCols + cc);
      D[std::size_t(i0 + rr) * std::size_t(N) + std::size_t(j0 + cc)] = chain_result(cp, K, ch[x], tot[x], sum[x], s);
    }
}

// The packing, cache tiles and OpenMP of both paths; Tile8/Tile4 run one register tile with blocks
// of 8 or 4 quads (Hopper's 32, Ada's 16).
template <int kR, int kTileCols, typename Tile8, typename Tile4>
void run(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta, const std::uint8_t* B,
         const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s, float* D, char* bad_a, char* bad_b,
         Tile8 tile8, Tile4 tile4) {
  const int Kp = std::max(1, (K + block - 1) / block) * block;  // whole blocks
  const int Kq = Kp / 4;
  const int Mp = (M + kR - 1) / kR * kR, Np = (N + kTileCols - 1) / kTileCols * kTileCols;
  PackTable pta, ptb;
  pack_table(fa, ta, true, pta);
  pack_table(fb, tb, false, ptb);
  thread_local Packed packed;
  pack<kR, kTileCols>(M, N, K, Mp, Np, Kp, block, A, pta, B, ptb, packed, bad_a, bad_b);
  const View<kR, kTileCols> w{Kp,
               Kp / block,
               packed.av.data(),
               packed.ae.data(),
               packed.aneg.data(),
               packed.anz.data(),
               packed.bv.data(),
               packed.be.data(),
               packed.bneg.data(),
               packed.bnz.data()};
  const int bq = block / 4;
  const bool parallel = double(M) * N * K >= kParallelMinMacs;
  const CacheTile ct = cache_tile(Mp, Np, kMc / kR * kR, kNc, kR, kTileCols, parallel ? omp_get_max_threads() : 1);
  const int mc = ct.rows, nc = ct.cols;
  const int tiles_m = (Mp + mc - 1) / mc, tiles_n = (Np + nc - 1) / nc;
  const int tiles = tiles_m * tiles_n;
  const int chunk_quads = std::max(bq, kKc / 4 / bq * bq);
#pragma omp parallel if (parallel)
  {
    // The state of one cache tile: per register tile, [kR][kTileCols] chains, totals and sums, per
    // OpenMP thread. Each tile zeroes the chains (and the totals when there is promotion) it uses;
    // the split-K sums are assigned at the first range end before they are read.
    thread_local std::vector<float> state_buf;
    float* ch = grow(state_buf, std::size_t(3) * kMc * kNc);
    float* tot = ch + kMc * kNc;
    float* sum = tot + kMc * kNc;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tiles; ++t) {
      const int i0 = (t / tiles_n) * mc, j0 = (t % tiles_n) * nc;
      const int rows = std::min(mc, Mp - i0), cols = std::min(nc, Np - j0);
      const int rg = rows / kR, cg = cols / kTileCols;
      const std::size_t used = std::size_t(rg) * std::size_t(cg) * kR * kTileCols;
      std::fill(ch, ch + used, 0.0f);
      if (cp.promotion > 0) std::fill(tot, tot + used, 0.0f);
      for (int q0 = 0; q0 < Kq; q0 += chunk_quads) {
        const int q1 = std::min(Kq, q0 + chunk_quads);
        for (int r = 0; r < rg; ++r)
          for (int c = 0; c < cg; ++c) {
            const std::size_t off = std::size_t(r * cg + c) * kR * kTileCols;
            const int pa = (i0 + r * kR) / kR, pb = (j0 + c * kTileCols) / kTileCols;
            if (bq == 8)
              tile8(w, pa, pb, q0, q1, cp, ch + off, tot + off, sum + off);
            else
              tile4(w, pa, pb, q0, q1, cp, ch + off, tot + off, sum + off);
          }
      }
      for (int r = 0; r < rg; ++r)
        for (int c = 0; c < cg; ++c) {
          const std::size_t off = std::size_t(r * cg + c) * kR * kTileCols;
          store_tile<kR, kTileCols>(ch + off, tot + off, sum + off, cp, K, s, i0 + r * kR, j0 + c * kTileCols, M, N, D);
        }
    }
    trim(state_buf);
  }
  trim(packed.av);
  trim(packed.bv);
  trim(packed.ae);
  trim(packed.be);
}

}  // namespace

void gemm_tc_fma_avx2(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                      const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                      float* D, char* bad_a, char* bad_b) {
  run<kR2, kCols2>(M, N, K, A, fa, ta, B, fb, tb, block, cp, s, D, bad_a, bad_b, tile_avx2<8>, tile_avx2<4>);
}

void gemm_tc_fma_avx512(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                        const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                        float* D, char* bad_a, char* bad_b) {
  run<kR5, kCols5>(M, N, K, A, fa, ta, B, fb, tb, block, cp, s, D, bad_a, bad_b, tile_avx512<8>, tile_avx512<4>);
}

bool gemm_tc_fma_avx512_supported() {
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("fma");
  }();
  return v;
}

bool gemm_tc_fma_avx2_supported() {
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return v;
}
#else
bool gemm_tc_fma_avx2_supported() { return false; }
bool gemm_tc_fma_avx512_supported() { return false; }
void gemm_tc_fma_avx2(int, int, int, const std::uint8_t*, const FormatSpec&, const CodeFields*, const std::uint8_t*,
                      const FormatSpec&, const CodeFields*, int, Chain, float, float*, char*, char*) {}
void gemm_tc_fma_avx512(int, int, int, const std::uint8_t*, const FormatSpec&, const CodeFields*, const std::uint8_t*,
                        const FormatSpec&, const CodeFields*, int, Chain, float, float*, char*, char*) {}
#endif  // FP8EMU_TC_FMA_X86

}  // namespace fp8emu::emu::detail
