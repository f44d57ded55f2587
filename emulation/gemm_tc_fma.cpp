// The AVX2 and AVX-512 tensor-core GEMMs (Hopper wgmma and Ada models, fp32 accumulator; see
// gemm_tensor_core.hpp) as fp32 FMAs rounded toward zero, bit-identical to core::gemm_tn_element.
//
// One block FMA (docs/tensor-core-model.md §Block FMA: F = 13 fraction bits, 14 significant bits
// kept) and why each step here is exact, on both kernels:
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
//    negative products). The accumulator stays within the binade: the block's terms and c, each
//    with its missing g, are below 32 * (2^(E + 2) + g) + 2^(E + 1) + g < 2^(E + 9) in magnitude.
//  * The count n of negative non-zero products (a popcount of the block's masks) and 1 for c < 0
//    are added to acc's bits, not as n * g: acc and acc + n g both lie in the binade
//    [2^(E + 10), 2^(E + 11)), whose ulp is g, so the integer add is that exact sum. The block sum
//    S = (acc + n g) - M is then exact in any rounding mode (a multiple of g below 2^(E + 9): 22
//    bits); the 14-bit cut clears its low 10 mantissa bits (sign-magnitude: truncation), and S is
//    already at its scale. S = 0 is +0 (x - x rounded toward zero), so c is never -0.
//  * Exponent bytes are biased fp32 exponent fields. A's non-zero code stores e + 63, B's e + 64,
//    so a product's byte sum is ea + eb + 127, the field of 2^(ea + eb): the FP8 formats' exponents
//    lie in [-16, 15] (a test checks every operand format), so real sums lie in [95, 157] and the
//    block maximum is an unsigned byte maximum with no wrap. Zeros, NaN and Inf store 0, and so
//    does the zero padding of ragged M, N and K: a sum with one of them is at most 79, below every
//    real product, and below the field of every chain value c != 0: by induction along K, a
//    non-zero c is a block result whose block had a real product (or c itself, carried unchanged),
//    so it is a non-zero multiple of that block's grid 2^(E - 13) with E >= -32, |c| >= 2^-45
//    (field >= 82). So they never set E, and add 0.
//  * E's field is max(the block maximum, c's field c & 0x7F800000), compared as integers in place
//    (both below 2^31); c = +0 has field 0 and never wins over a real product. M is that field plus
//    10 << 23, with the significand bit 0x400000: normal, since the field is at least 0 and at most
//    182 (|c| < K 2^25 <= 2^56). A block with no real product and c = 0 has a field of at most 79
//    (sums with a zero): its terms are all 0, its accumulators stay at M and S = +0. With a real product or c != 0, E >= -45 and g is normal.
// Along K the blocks chain (the result is the next block's c); promotion and split-K are the
// scalar model's RN adds (gemm_tc_chain.hpp), per lane. Rows of A or B that hold a NaN or Inf code
// are packed as zeros and flagged for the caller's element model.
//
// Rounding toward zero is MXCSR's mode (AVX2 has no per-instruction rounding): the tiles switch to
// it for their FMAs and back to round-to-nearest for the chain's RN adds (promotion and split-K)
// and on return; every value crosses a switch through memory, behind a compiler barrier.
//
// The AVX-512 kernel (gemm_tc_fma512.cpp) runs the same arithmetic on 16 lanes in another layout,
// explained there. AVX2 register tiles: 6 rows x 16 columns (12 ymm accumulators; per k 2 vector
// loads and 6 broadcasts for 12 FMAs); the exponent bytes [k / 4][column][k % 4], so a block's
// maximum is a byte maximum per register of 4 k (a pass before the FMAs) and a reduction of each
// 32-bit group. Cache tiles of up to 72 rows x 256 columns run by OpenMP, K in chunks of 256
// (gemm_tc_fma_run.hpp).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "gemm_tc_chain.hpp"
#include "gemm_tc_fma_run.hpp"

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

using tc_fma::set_csr;

// Register tiles: 6 rows x 2 8-column vectors.
constexpr int kR2 = 6, kCols2 = 16;
using tc_fma::VecRule;

// Packed A, per panel of R rows: values [Kp][kR] and exponent bytes [Kp / 4][kR][4] (K padded
// to Kp, a multiple of the block), and per row and block the masks of negative and of non-zero
// elements (bit i: the block's element i). Packed B, per panel of kTileCols columns: values
// [Kp][kTileCols], exponents [Kp / 4][kTileCols][4] and per block the masks [kTileCols]. A register tile reads one A panel and one B panel, at constant offsets from two pointers.
struct Packed {
  std::vector<float> av, bv;
  std::vector<std::uint8_t> ae, be;
  std::vector<std::uint32_t> aneg, anz, bneg, bnz;
};

template <int R, int Cols>
struct View {
  static constexpr int kR = R, kTileCols = Cols;
  int Kp, blocks;
  const float* av;
  const std::uint8_t* ae;
  const std::uint32_t *aneg, *anz;
  const float* bv;
  const std::uint8_t* be;
  const std::uint32_t *bneg, *bnz;
  // Panel p of A (rows kR p ..), panel p of B (columns kTileCols p ..).
  const float* a_values(int p) const { return av + std::size_t(p) * std::size_t(Kp) * kR; }
  const std::uint8_t* a_exps(int p) const { return ae + std::size_t(p) * std::size_t(Kp) * kR; }
  const float* b_values(int p) const { return bv + std::size_t(p) * std::size_t(Kp) * kTileCols; }
  const std::uint8_t* b_exps(int p) const { return be + std::size_t(p) * std::size_t(Kp) * kTileCols; }
};

#define FP8EMU_TC_FMA __attribute__((target("avx2,fma")))

// One panel of kLanes rows (A: kR, B: kTileCols) of the source X (rows [first, first + kLanes),
// `rows` real; past them zeros), for formats that follow the packing rule (tc_fma::vec_rule), into
// values v [Kp][kLanes], exponent bytes e [Kp / 4][kLanes][4], masks at negs/nzs[mask_at(lane,
// block)], and `bad` per real row: per source row and 64 K-elements, the special, non-zero and
// negative masks by byte compares, the exponent bytes gathered 8 at a time from the rule's words (their low
// byte) and packed 32 to a vector, in groups of 4 k; then the codes interleaved [k][lane] and the
// values gathered 8 at a time.
template <int kLanes, class MaskAt>
FP8EMU_TC_FMA void panel_avx2(int first, int rows, int K, int Kp, int block, const std::uint8_t* X, const VecRule& t,
                              float* v, std::uint8_t* e, std::uint32_t* negs, std::uint32_t* nzs, MaskAt mask_at,
                              char* bad) {
  alignas(32) std::uint8_t buf[kLanes][64];
  alignas(32) std::uint8_t inter[64 * kLanes];
  alignas(32) std::uint32_t groups[8];
  bool special[kLanes] = {};
  const __m256i mag_mask = _mm256_set1_epi8(0x7F), smin = _mm256_set1_epi8(char(t.smin & 0x7F));
  const __m256i x80 = _mm256_set1_epi8(char(0x80)), low_byte = _mm256_set1_epi32(0xFF);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // the dwords of the packs in k order
  for (int k0 = 0; k0 < Kp; k0 += 64) {
    const int n = std::max(0, std::min(64, K - k0)), k1 = std::min(Kp, k0 + 64);
    for (int r = 0; r < kLanes; ++r) {
      const std::uint8_t* src = first + r < rows && n > 0 ? X + std::size_t(first + r) * std::size_t(K) + k0 : nullptr;
      if (src && n == 64) {
        std::memcpy(buf[r], src, 64);
      } else {
        std::memset(buf[r], 0, 64);
        if (src) std::memcpy(buf[r], src, std::size_t(n));
      }
      std::uint64_t sp = 0, nz = 0, ng = 0;
      for (int h = 0; h < 2; ++h) {
        const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf[r] + 32 * h));
        const __m256i mag = _mm256_and_si256(x, mag_mask);
        __m256i s = t.smin < 128 ? _mm256_cmpeq_epi8(_mm256_max_epu8(mag, smin), mag) : _mm256_setzero_si256();
        if (t.special80) s = _mm256_or_si256(s, _mm256_cmpeq_epi8(x, x80));
        const std::uint32_t ms = std::uint32_t(_mm256_movemask_epi8(s));
        const std::uint32_t mnz = ~std::uint32_t(
            _mm256_movemask_epi8(_mm256_or_si256(s, _mm256_cmpeq_epi8(mag, _mm256_setzero_si256()))));
        sp |= std::uint64_t(ms) << (32 * h);
        nz |= std::uint64_t(mnz) << (32 * h);
        ng |= std::uint64_t(std::uint32_t(_mm256_movemask_epi8(x)) & mnz) << (32 * h);
      }
      special[r] = special[r] || sp != 0;
      for (int kb = k0; kb < k1; kb += block) {
        negs[mask_at(r, kb / block)] = tc_fma::block_bits(ng, kb - k0, block);
        nzs[mask_at(r, kb / block)] = tc_fma::block_bits(nz, kb - k0, block);
      }
      for (int h = 0; h < 2 && k0 + 32 * h < k1; ++h) {
        __m256i w[4];
        for (int g = 0; g < 4; ++g) {
          const __m256i idx =
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(buf[r] + 32 * h + 8 * g)));
          w[g] = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(t.e32), idx, 4), low_byte);
        }
        const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(w[0], w[1]), _mm256_packus_epi32(w[2], w[3]));
        _mm256_store_si256(reinterpret_cast<__m256i*>(groups), _mm256_permutevar8x32_epi32(bytes, order));
        for (int q = 0; q < 8 && k0 + 32 * h + 4 * q < k1; ++q)
          std::memcpy(e + std::size_t((k0 + 32 * h) / 4 + q) * (4 * kLanes) + 4 * std::size_t(r), &groups[q], 4);
      }
    }
    for (int kk = 0; kk < k1 - k0; ++kk)
      for (int r = 0; r < kLanes; ++r) inter[kk * kLanes + r] = buf[r][kk];
    for (int q = 0; q < (k1 - k0) * kLanes; q += 8) {
      const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(inter + q)));
      _mm256_storeu_ps(v + std::size_t(k0) * kLanes + std::size_t(q), _mm256_i32gather_ps(t.value, idx, 4));
    }
  }
  for (int r = 0; r < kLanes && first + r < rows; ++r) bad[first + r] = special[r];
}

// Rows of A and columns of B (NaN/Inf rows packed as zeros and flagged) by panel_avx2, panel by
// panel with K outermost through a buffer of each panel's next 64 K-elements: the source rows (K
// bytes apart, for K a multiple of 2 KiB all in a few L1 sets) are read 64 bytes at a time.
template <int kR, int kTileCols>
void pack(int M, int N, int K, int Mp, int Np, int Kp, int block, const std::uint8_t* A, const VecRule& va,
          const std::uint8_t* B, const VecRule& vb, Packed& p, char* bad_a, char* bad_b) {
  const int blocks = Kp / block;
  grow(p.av, std::size_t(Mp) * std::size_t(Kp));
  grow(p.ae, std::size_t(Mp) * std::size_t(Kp));
  grow(p.aneg, std::size_t(Mp) * std::size_t(blocks));
  grow(p.anz, std::size_t(Mp) * std::size_t(blocks));
  grow(p.bv, std::size_t(Np) * std::size_t(Kp));
  grow(p.be, std::size_t(Np) * std::size_t(Kp));
  grow(p.bneg, std::size_t(Np) * std::size_t(blocks));
  grow(p.bnz, std::size_t(Np) * std::size_t(blocks));
  const int pas = Mp / kR, pbs = Np / kTileCols;
#pragma omp parallel for schedule(dynamic, 1) if (double(Mp + Np) * double(Kp) >= double(kParallelMinElements))
  for (int x = 0; x < pas + pbs; ++x) {
    if (x < pas) {
      const std::size_t off = std::size_t(x) * std::size_t(Kp) * kR;
      const auto at = [&](int r, int b) { return std::size_t(x * kR + r) * std::size_t(blocks) + std::size_t(b); };
      panel_avx2<kR>(x * kR, M, K, Kp, block, A, va, p.av.data() + off, p.ae.data() + off, p.aneg.data(),
                     p.anz.data(), at, bad_a);
    } else {
      const int pb = x - pas;
      const std::size_t off = std::size_t(pb) * std::size_t(Kp) * kTileCols;
      const auto at = [&](int c, int b) {
        return (std::size_t(pb) * std::size_t(blocks) + std::size_t(b)) * kTileCols + std::size_t(c);
      };
      panel_avx2<kTileCols>(pb * kTileCols, N, K, Kp, block, B, vb, p.bv.data() + off, p.be.data() + off,
                            p.bneg.data(), p.bnz.data(), at, bad_b);
    }
  }
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

// The maximum of the four byte lanes [column][k % 4] of each column, at bits 23-30 of its 32-bit
// lane (an fp32 exponent field).
FP8EMU_TC_FMA __attribute__((always_inline)) inline __m256i exponent_field(__m256i e8) {
  __m256i m = _mm256_max_epu8(e8, _mm256_srli_epi32(e8, 8));  // byte 0: max(b0, b1); byte 2: max(b2, b3)
  m = _mm256_max_epu8(m, _mm256_srli_epi32(m, 16));           // byte 0: max(b0 .. b3)
  return _mm256_srli_epi32(_mm256_slli_epi32(m, 24), 1);
}

// One k of one row of a register tile: y0, y1 = RZ(y0, y1 + a b0, b1).
FP8EMU_TC_FMA __attribute__((always_inline)) inline void fma_row(const float* a, __m256 b0, __m256 b1, __m256& y0,
                                                                 __m256& y1) {
  const __m256 ar = _mm256_broadcast_ss(a);
  y0 = _mm256_fmadd_ps(ar, b0, y0);
  y1 = _mm256_fmadd_ps(ar, b1, y1);
}

// One block's FMAs: acc[r][c] = RZ(acc[r][c] + a'[k][r] b[k][c]) for k < kBlock, with the 6 x 2
// accumulators in named variables: written as loops over an array, GCC 12 kept the array in memory
// and stored all 12 vectors after every k (the Hopper model ran at 55 instead of 77 GFLOP/s in
// `FP8EMU_GEMM_ISA=avx2 fp8emu bench gemm --sizes 2048`).
template <int kBlock>
FP8EMU_TC_FMA __attribute__((always_inline)) inline void fma_block(const float* avp, const float* bvp,
                                                                   __m256 (*acc)[2]) {
  static_assert(kR2 == 6 && kCols2 == 16, "fma_block is written for 6 x 16 register tiles");
  __m256 x00 = acc[0][0], x01 = acc[0][1], x10 = acc[1][0], x11 = acc[1][1], x20 = acc[2][0], x21 = acc[2][1];
  __m256 x30 = acc[3][0], x31 = acc[3][1], x40 = acc[4][0], x41 = acc[4][1], x50 = acc[5][0], x51 = acc[5][1];
  for (int k = 0; k < kBlock; ++k) {
    const float* const a = avp + 6 * k;
    const __m256 b0 = _mm256_loadu_ps(bvp + 16 * k), b1 = _mm256_loadu_ps(bvp + 16 * k + 8);
    fma_row(a + 0, b0, b1, x00, x01);
    fma_row(a + 1, b0, b1, x10, x11);
    fma_row(a + 2, b0, b1, x20, x21);
    fma_row(a + 3, b0, b1, x30, x31);
    fma_row(a + 4, b0, b1, x40, x41);
    fma_row(a + 5, b0, b1, x50, x51);
  }
  acc[0][0] = x00, acc[0][1] = x01, acc[1][0] = x10, acc[1][1] = x11, acc[2][0] = x20, acc[2][1] = x21;
  acc[3][0] = x30, acc[3][1] = x31, acc[4][0] = x40, acc[4][1] = x41, acc[5][0] = x50, acc[5][1] = x51;
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
  const __m256i field_mask = _mm256_set1_epi32(0x7F800000);
  const __m256i m_offset = _mm256_set1_epi32((10 << 23) | 0x00400000);
  const __m256 widen = _mm256_set1_ps(1.0f + 1.0f / 65536.0f);
  const float* const avp = w.a_values(pa);
  const std::uint8_t* const aep = w.a_exps(pa);
  const float* const bvp = w.b_values(pb);
  const std::uint8_t* const bep = w.b_exps(pb);
  const int i0 = pa * kR;
  alignas(32) float Ms[kV * 8];
  set_csr(rz);
  for (int q0 = q_begin; q0 < q_end; q0 += BQ) {
    const int k0 = 4 * q0, blk = k0 / kBlock;
    if (cp.range_ends(k0) || cp.run_ends(k0)) {  // the chain's RN adds, on the state in memory
      set_csr(rn);
      chain_boundaries(cp, k0, kR * kTileCols, ch, tot, sum);
      set_csr(rz);
    }
    // Pass 1: the block's largest exponent byte sum per column, in byte lanes [column][k % 4]; E's
    // field = max(that, c's field); M = 1.5 * 2^(E + 10); the accumulators start at
    // RZ(M + c (1 + 2^-16)) = M + trunc_g(c), less g when c < 0, added back on acc's bits.
    __m256 acc[kR][kC];
    {
      __m256i E8[kR][kC];
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) E8[r][c] = _mm256_setzero_si256();
      for (int q = q0; q < q0 + BQ; ++q) {
        const std::uint8_t* b = bep + std::size_t(q) * (4 * kTileCols);
        __m256i eb[kC];
        for (int c = 0; c < kC; ++c) eb[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * c));
        for (int r = 0; r < kR; ++r) {
          std::int32_t bits;
          std::memcpy(&bits, aep + std::size_t(q) * (4 * kR) + 4 * std::size_t(r), 4);
          const __m256i ea = _mm256_set1_epi32(bits);
          for (int c = 0; c < kC; ++c) E8[r][c] = _mm256_max_epu8(E8[r][c], _mm256_add_epi8(ea, eb[c]));
        }
      }
      for (int r = 0; r < kR; ++r)
        for (int c = 0; c < kC; ++c) {
          const int x = 8 * (r * kC + c);
          const __m256 cv = _mm256_loadu_ps(ch + x);
          const __m256i cb = _mm256_castps_si256(cv);
          const __m256i field = _mm256_max_epu32(exponent_field(E8[r][c]), _mm256_and_si256(cb, field_mask));
          const __m256 M = _mm256_castsi256_ps(_mm256_add_epi32(field, m_offset));
          acc[r][c] = _mm256_castsi256_ps(
              _mm256_add_epi32(_mm256_castps_si256(_mm256_fmadd_ps(cv, widen, M)), _mm256_srli_epi32(cb, 31)));
          _mm256_store_ps(Ms + x, M);
        }
    }
    // Pass 2: acc = RZ(acc + a' b), one FMA per 8 products.
    fma_block<kBlock>(avp + std::size_t(k0) * kR, bvp + std::size_t(k0) * kTileCols, acc);
    // S = acc - M + n g, n = popcount((neg_a ^ neg_b) & nz_a & nz_b), added to acc's bits; the
    // 14-bit cut.
    const std::size_t bm = (std::size_t(pb) * std::size_t(w.blocks) + std::size_t(blk)) * kTileCols;
    __m256i bz[kC], bn[kC];
    for (int c = 0; c < kC; ++c) {
      bz[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.bnz + bm + 8 * c));
      bn[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.bneg + bm + 8 * c));
    }
    for (int r = 0; r < kR; ++r) {
      const std::size_t a = std::size_t(i0 + r) * std::size_t(w.blocks) + std::size_t(blk);
      const __m256i an = _mm256_set1_epi32(int(w.aneg[a])), az = _mm256_set1_epi32(int(w.anz[a]));
      for (int c = 0; c < kC; ++c) {
        const int x = 8 * (r * kC + c);
        const __m256i neg = _mm256_and_si256(_mm256_xor_si256(an, bn[c]), _mm256_and_si256(az, bz[c]));
        const __m256 S = _mm256_sub_ps(
            _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(acc[r][c]), popcount32(neg))),
            _mm256_load_ps(Ms + x));
        _mm256_storeu_ps(ch + x, _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(S), cut_mask)));
      }
    }
  }
  set_csr(rn);
}

// The AVX2 kernel for tc_fma::run.
struct Avx2 {
  static constexpr int kR = kR2, kTileCols = kCols2;
  using View = fp8emu::emu::detail::View<kR2, kCols2>;
  using Packed = fp8emu::emu::detail::Packed;
  struct Context {
    const VecRule *va, *vb;
  };
  static View pack(const Context& x, int M, int N, int K, int Mp, int Np, int Kp, int block, const std::uint8_t* A,
                   const FormatSpec&, const CodeFields*, const std::uint8_t* B, const FormatSpec&, const CodeFields*,
                   Packed& p, char* bad_a, char* bad_b) {
    fp8emu::emu::detail::pack<kR2, kCols2>(M, N, K, Mp, Np, Kp, block, A, *x.va, B, *x.vb, p, bad_a, bad_b);
    return View{Kp,          Kp / block,      p.av.data(), p.ae.data(),  p.aneg.data(),
                p.anz.data(), p.bv.data(), p.be.data(), p.bneg.data(), p.bnz.data()};
  }
  template <int BQ>
  static void tile(const View& w, int pa, int pb, int q0, int q1, Chain cp, float* ch, float* tot, float* sum) {
    tile_avx2<BQ>(w, pa, pb, q0, q1, cp, ch, tot, sum);
  }
};

}  // namespace

bool gemm_tc_fma_avx2(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                      const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                      float* D, char* bad_a, char* bad_b) {
  VecRule va, vb;
  tc_fma::vec_rule(ta, true, va);
  tc_fma::vec_rule(tb, false, vb);
  if (!va.ok || !vb.ok) return false;
  tc_fma::vec_values(fa, ta, true, va);
  tc_fma::vec_values(fb, tb, false, vb);
  tc_fma::run<Avx2>(Avx2::Context{&va, &vb}, M, N, K, A, fa, ta, B, fb, tb, block, cp, s, D, bad_a, bad_b);
  return true;
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
bool gemm_tc_fma_avx2(int, int, int, const std::uint8_t*, const FormatSpec&, const CodeFields*, const std::uint8_t*,
                      const FormatSpec&, const CodeFields*, int, Chain, float, float*, char*, char*) {
  return false;
}
#endif  // FP8EMU_TC_FMA_X86

}  // namespace fp8emu::emu::detail
