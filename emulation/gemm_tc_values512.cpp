// The AVX-512 fp64-FMA kernel of the fp16, bf16 and tf32 tensor-core rows (see gemm_tc_values.hpp):
// the FP8 kernels' block FMA (gemm_tc_fma.cpp: FMAs rounded toward zero onto an accumulator whose
// ulp is the block's alignment grid, A widened so that every negative product falls one grid step
// short, the shortfalls counted from sign masks) on 8 fp64 lanes, because a block of these rows
// needs 1 + F + 7 > 24 bits of accumulator. Bit-identical to core::mma_dot on every element the
// caller gives it (tc_values_fast_path rows with exponents in [tc_values_min_exponent, 50]).
//
// One block of n <= 16 products of an output, F fraction bits, `keep` significant bits, and why
// each step is exact (s <= 11 is the operand format's significant bits, F in [23, 28]):
//
//  * E = max(exponent of c, ea + eb over the block's non-zero products, F - 126). The caller's
//    range gives every non-zero product's ea + eb >= 2 F - 126 and every non-zero c an exponent
//    >= F - 126 (gemm_tc_values.cpp's range argument), so the third term never changes E where a
//    term exists; it only keeps E in range for a block without any (whose result is +0 whatever E).
//    E is computed on 16-bit words holding the fp64 exponent field of 2^E shifted left by 4: A's
//    word (ea + 512) << 4, B's (eb + 511) << 4, 0 for a zero; the maximum starts at the floor's
//    word (F - 126 + 1023) << 4 >= 920 << 4. A word sum with one zero is at most (50 + 512) << 4,
//    so it never wins; every sum is at most (100 + 1023) << 4 < 2^15.
//  * M = 1.5 * 2^(E - F + 52): the binade [2^(E - F + 52), 2^(E - F + 53)) has ulp g = 2^(E - F),
//    the model's truncation grid. |c| + 17 * 2^(E + 2) < 2^(E + 7) <= 2^(E - F + 51) (F <= 44)
//    keeps every partial sum in it.
//  * acc = RZ(M + c (1 + 2^-(F + 3))), then acc = RZ(acc + a' b) per product, a' = a (1 + 2^-(F+3))
//    (exact in fp64: s + F + 3 <= 42 bits; the FMA's product is exact inside it). acc stays
//    positive, so RZ rounds down. For a positive term t (p = a b, or c) of lsb(t) >= 2^(e_t + 1 - q)
//    (q = 2 s for products, 24 for c), t 2^-(F+3) < 2^(e_t + 1 - F - 3) <= lsb(t) and < g / 2: the
//    widened t lies strictly between t and the next multiple of lsb(t) (or of g, when t is on the
//    grid), so floor adds exactly trunc(t / g) g. A negative non-zero t widened lies strictly
//    between t and the grid point below it: floor adds trunc(t / g) g - g. So acc = M + S g - n g,
//    S the model's exact integer sum of truncated terms, n the count of negative non-zero terms.
//  * n = popcount((neg_a ^ neg_b) & nz_a & nz_b) over the block, + 1 when c < 0; added to acc's
//    bits (M + S g - n g stays in the binade, so adding n to the bits adds n g).
//  * acc - M = S g exactly (Sterbenz); clearing its low 53 - keep fraction bits is the model's cut
//    (sign-magnitude truncation to `keep` significant bits); S = 0 gives +0 (x - x is +0 in RZ:
//    every FP operation here rounds toward zero by its embedded rounding, whatever MXCSR holds).
//    The result is an fp32 value (the range argument: normal, at most 24 bits), the next block's c.
// Register tiles: 4 rows x 32 columns (16 zmm accumulators of 8 doubles; per k 4 loads, 4
// broadcasts and 16 FMAs, and for the next block's E 1 load, 4 broadcasts, 4 word adds and 4 word
// maxima). B's exponent words are stored so that VPUNPCK{L,H}WD and VPUNPCK{L,H}DQ with zero put
// column 8 t + l's word at bits 48-63 of lane l of the t-th vector: the fp64 field of M.
// Only on x86-64 with AVX512F/BW/VL/DQ, AVX512_VPOPCNTDQ and FMA (gemm_tc_fma_avx512_supported).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "fp8emu/util/error.hpp"
#include "gemm_isa.hpp"
#include "gemm_tc_chain.hpp"
#include "gemm_tc_values.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define FP8EMU_TC_VALUES512_X86 1
#endif

namespace fp8emu::emu::detail {

#ifdef FP8EMU_TC_VALUES512_X86
namespace {

constexpr int kR = 4, kC = 4, kTileCols = 8 * kC;
constexpr int kMc = 72, kNc = 128, kKc = 256;

// Word position of column col in a k's 32 exponent words (see the file comment).
constexpr int word_position(int col) { return 8 * ((col % 8) / 2) + 2 * (col / 8) + col % 2; }

// Packed A: values a' [Mp][Kp], exponent dwords [Mp][Kp] (the word twice), and per row and block
// the masks of negative and of non-zero elements. Packed B, per panel of 32 columns: values
// [Kp][32], exponent words [Kp][32] (word_position order), and per block the masks [32].
struct Packed {
  std::vector<double> av, bv;
  std::vector<std::uint32_t> ae;
  std::vector<std::uint16_t> be;
  std::vector<std::uint64_t> am, bm;
};

struct View {
  int Kp, blocks;
  const Packed* p;
  const double* a_values(int i) const { return p->av.data() + std::size_t(i) * std::size_t(Kp); }
  const std::uint32_t* a_exps(int i) const { return p->ae.data() + std::size_t(i) * std::size_t(Kp); }
  const double* b_values(int pb) const { return p->bv.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols; }
  const std::uint16_t* b_exps(int pb) const { return p->be.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols; }
};

// The exponent words' biases (see the file comment): A's word (ea + kBiasA) << 4, B's
// (eb + kBiasB) << 4, so that a sum is the fp64 field of 2^(ea + eb), shifted left by 4.
constexpr int kBiasA = 512, kBiasB = 511;

// The datapath's constants.
struct Consts {
  int block, F, keep, emin;
  std::uint16_t floor_word;
  double widen;
};

#define FP8EMU_TC_V512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vpopcntdq,fma")))
#define FP8EMU_TC_INLINE __attribute__((always_inline)) inline
constexpr int kRz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;  // the FMAs' embedded rounding

// The exponent words of 16 values x with non-zero mask nz: (e + bias) << 4 in each dword, e the
// fp32 exponent clamped at the format's emin (core::decode_value's exponent), 0 for a zero.
FP8EMU_TC_V512 FP8EMU_TC_INLINE __m512i exp_words(__m512 x, __mmask16 nz, int emin, int bias) {
  const __m512i field = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 23), _mm512_set1_epi32(0xFF));
  const __m512i e = _mm512_max_epi32(_mm512_sub_epi32(field, _mm512_set1_epi32(127)), _mm512_set1_epi32(emin));
  return _mm512_maskz_slli_epi32(nz, _mm512_add_epi32(e, _mm512_set1_epi32(bias)), 4);
}

// The 16 floats of x as two vectors of 8 doubles (exact).
FP8EMU_TC_V512 FP8EMU_TC_INLINE void widen_halves(__m512 x, __m512d* lo, __m512d* hi) {
  *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

// Elements [k0, k0 + 16) of a contiguous source row x (zeros past K, and for x null): the values,
// the exponent words and the masks of non-zero and of negative elements.
struct Sixteen {
  __m512 v;
  __m512i w;
  __mmask16 nz, neg;
};
FP8EMU_TC_V512 FP8EMU_TC_INLINE Sixteen load16(const float* x, int k0, int K, int emin, int bias) {
  const int n = x ? std::max(0, std::min(16, K - k0)) : 0;
  const __mmask16 in = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
  Sixteen s;
  s.v = _mm512_maskz_loadu_ps(in, x ? x + k0 : nullptr);
  s.nz = _mm512_cmp_ps_mask(s.v, _mm512_setzero_ps(), _CMP_NEQ_UQ) & in;
  s.neg = _mm512_cmp_ps_mask(s.v, _mm512_setzero_ps(), _CMP_LT_OQ) & in;
  s.w = exp_words(s.v, s.nz, emin, bias);
  return s;
}

// Stores the sign words of 16 elements' blocks (16 / block of them) at m[0], m[stride], ...: per
// block lo | hi << 16 (A: lo = positive, hi = negative elements; B: the other way round), so that
// popcount(A's word & B's word) counts the block's negative products.
inline void store_masks(std::uint64_t* m, std::size_t stride, unsigned lo, unsigned hi, int block, int count) {
  const unsigned field = (1u << block) - 1u;
  for (int q = 0; q < count; ++q)
    m[std::size_t(q) * stride] = ((lo >> (q * block)) & field) | (((hi >> (q * block)) & field) << 16);
}

// Row r of a source, or null for a row read as zeros.
inline const float* source_row(const TcValuesSource& x, int r, int rows) {
  return r < rows && (!x.rows_ok || x.rows_ok[r]) ? x.x + std::size_t(r) * x.rs : nullptr;
}

// Row i of A (contiguous: ts = 1).
FP8EMU_TC_V512 void pack_a_row(int i, int M, int K, int Kp, const TcValuesSource& a, const Consts& cs, Packed& p) {
  const int blocks = Kp / cs.block;
  double* v = p.av.data() + std::size_t(i) * std::size_t(Kp);
  std::uint32_t* e = p.ae.data() + std::size_t(i) * std::size_t(Kp);
  std::uint64_t* m = p.am.data() + std::size_t(i) * std::size_t(blocks);
  const float* x = source_row(a, i, M);
  const __m512d widen = _mm512_set1_pd(cs.widen);
  for (int k0 = 0; k0 < Kp; k0 += 16) {
    const Sixteen s = load16(x, k0, K, cs.emin, kBiasA);
    const int n = std::min(16, Kp - k0);
    const __mmask16 out = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
    __m512d lo, hi;
    widen_halves(s.v, &lo, &hi);
    _mm512_mask_storeu_pd(v + k0, __mmask8(out), _mm512_mul_pd(lo, widen));
    _mm512_mask_storeu_pd(v + k0 + 8, __mmask8(out >> 8), _mm512_mul_pd(hi, widen));
    _mm512_mask_storeu_epi32(e + k0, out, _mm512_or_si512(s.w, _mm512_slli_epi32(s.w, 16)));
    store_masks(m + k0 / cs.block, 1, s.nz & ~s.neg, s.neg, cs.block, n / cs.block);
  }
}

// One k of a B panel: 32 values (two vectors of 16 columns) and their exponent words, stored in the
// panel's layout (words in word_position order).
FP8EMU_TC_V512 FP8EMU_TC_INLINE void store_k(const __m512* col, const __m512i* wc, const __m512i& perm, double* v,
                                               std::uint16_t* e) {
  for (int h = 0; h < 2; ++h) {
    __m512d lo, hi;
    widen_halves(col[h], &lo, &hi);
    _mm512_storeu_pd(v + 16 * h, lo);
    _mm512_storeu_pd(v + 16 * h + 8, hi);
  }
  const __m512i words =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(wc[0])), _mm512_cvtepi32_epi16(wc[1]), 1);
  _mm512_storeu_si512(e, _mm512_permutexvar_epi16(perm, words));
}

// The vpermw index of store_k: word position -> source column (the inverse of word_position).
FP8EMU_TC_V512 FP8EMU_TC_INLINE __m512i word_permutation() {
  alignas(64) std::uint16_t inv[kTileCols];
  for (int c = 0; c < kTileCols; ++c) inv[word_position(c)] = std::uint16_t(c);
  return _mm512_load_si512(inv);
}

// Panel pb of B from a source of contiguous rows (ts = 1): per column 16 elements at a time, their
// masks, and values and words moved to the panel through a 32 x 16 buffer per 16 k.
FP8EMU_TC_V512 void pack_b_rows(int pb, int N, int K, int Kp, const TcValuesSource& b, const Consts& cs, Packed& p) {
  const int blocks = Kp / cs.block;
  double* v = p.bv.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols;
  std::uint16_t* e = p.be.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols;
  std::uint64_t* m = p.bm.data() + std::size_t(pb) * std::size_t(blocks) * kTileCols;
  alignas(64) float vt[kTileCols][16];
  alignas(64) std::uint32_t wt[kTileCols][16];
  const __m512i perm = word_permutation();
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(16));
  for (int k0 = 0; k0 < Kp; k0 += 16) {
    const int n = std::min(16, Kp - k0);
    for (int c = 0; c < kTileCols; ++c) {
      const Sixteen s = load16(source_row(b, pb * kTileCols + c, N), k0, K, cs.emin, kBiasB);
      _mm512_store_ps(vt[c], s.v);
      _mm512_store_si512(wt[c], s.w);
      store_masks(m + std::size_t(k0 / cs.block) * kTileCols + std::size_t(c), kTileCols, s.neg, s.nz & ~s.neg, cs.block,
                  n / cs.block);
    }
    for (int kk = 0; kk < n; ++kk) {
      __m512 col[2];
      __m512i wc[2];
      for (int h = 0; h < 2; ++h) {
        col[h] = _mm512_i32gather_ps(idx, &vt[16 * h][kk], 4);
        wc[h] = _mm512_i32gather_epi32(idx, &wt[16 * h][kk], 4);
      }
      const std::size_t k = std::size_t(k0 + kk);
      store_k(col, wc, perm, v + k * kTileCols, e + k * kTileCols);
    }
  }
}

// Panel pb of B from a source of contiguous columns (rs = 1: the [K, N] B of an NN GEMM): per k
// its 32 columns in two loads, the sign words gathered per block in qword lanes.
FP8EMU_TC_V512 void pack_b_columns(int pb, int N, int K, int Kp, const TcValuesSource& b, const Consts& cs,
                                   Packed& p) {
  const int blocks = Kp / cs.block;
  double* v = p.bv.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols;
  std::uint16_t* e = p.be.data() + std::size_t(pb) * std::size_t(Kp) * kTileCols;
  std::uint64_t* m = p.bm.data() + std::size_t(pb) * std::size_t(blocks) * kTileCols;
  const __m512i perm = word_permutation();
  __mmask16 in[2] = {0, 0};  // the panel's columns read (j < N and taken)
  for (int c = 0; c < kTileCols; ++c)
    if (source_row(b, pb * kTileCols + c, N)) in[c / 16] = __mmask16(in[c / 16] | (1u << (c % 16)));
  const float* x = b.x + std::size_t(pb) * kTileCols;
  __m512i word[kC];
  for (int k = 0; k < Kp; ++k) {
    const int kk = k % cs.block;
    if (kk == 0)
      for (int g = 0; g < kC; ++g) word[g] = _mm512_setzero_si512();
    __m512 col[2];
    __m512i wc[2];
    __mmask16 nz[2], neg[2];
    for (int h = 0; h < 2; ++h) {
      const __mmask16 ld = k < K ? in[h] : __mmask16(0);
      col[h] = _mm512_maskz_loadu_ps(ld, ld ? x + std::size_t(k) * b.ts + 16 * h : nullptr);
      nz[h] = _mm512_cmp_ps_mask(col[h], _mm512_setzero_ps(), _CMP_NEQ_UQ) & ld;
      neg[h] = _mm512_cmp_ps_mask(col[h], _mm512_setzero_ps(), _CMP_LT_OQ) & ld;
      wc[h] = exp_words(col[h], nz[h], cs.emin, kBiasB);
    }
    store_k(col, wc, perm, v + std::size_t(k) * kTileCols, e + std::size_t(k) * kTileCols);
    // B's sign word per column: negative elements at bit kk, positive ones at bit 16 + kk.
    const __m512i nbit = _mm512_set1_epi64(std::int64_t(1) << kk), pbit = _mm512_set1_epi64(std::int64_t(1) << (16 + kk));
    for (int g = 0; g < kC; ++g) {
      const __mmask8 ng = __mmask8(neg[g / 2] >> (8 * (g % 2))), pg = __mmask8((nz[g / 2] & ~neg[g / 2]) >> (8 * (g % 2)));
      word[g] = _mm512_mask_or_epi64(word[g], ng, word[g], nbit);
      word[g] = _mm512_mask_or_epi64(word[g], pg, word[g], pbit);
    }
    if (kk == cs.block - 1)
      for (int g = 0; g < kC; ++g) _mm512_storeu_si512(m + std::size_t(k / cs.block) * kTileCols + 8 * g, word[g]);
  }
}

// One k of a block's exponent maximum: E16[r] = max(E16[r], ea[k][r] + eb[k]) per word (column).
FP8EMU_TC_V512 FP8EMU_TC_INLINE void exponent_step(const std::uint32_t* const* aep, const std::uint16_t* bep, int k,
                                                     __m512i* E16) {
  const __m512i eb = _mm512_loadu_si512(bep + std::size_t(k) * kTileCols);
  for (int r = 0; r < kR; ++r) E16[r] = _mm512_max_epu16(E16[r], _mm512_add_epi16(_mm512_set1_epi32(int(aep[r][k])), eb));
}

// One k of the block FMA: acc[r][c] = RZ(acc[r][c] + a'[k][r] b[k][c]).
FP8EMU_TC_V512 FP8EMU_TC_INLINE void fma_step(const double* const* avp, const double* bvp, int k,
                                                __m512d (*acc)[kC]) {
  __m512d b[kC];
  for (int c = 0; c < kC; ++c) b[c] = _mm512_loadu_pd(bvp + std::size_t(k) * kTileCols + 8 * c);
  for (int r = 0; r < kR; ++r) {
    const __m512d a = _mm512_set1_pd(avp[r][k]);
    for (int c = 0; c < kC; ++c) acc[r][c] = _mm512_fmadd_round_pd(a, b[c], acc[r][c], kRz);
  }
}

// One register tile (A panel pa, B panel pb) over [k_begin, k_end) (whole blocks of BLOCK),
// continuing the chains in ch ([4][32] doubles, each an fp32 value).
template <int BLOCK>
FP8EMU_TC_V512 void tile(const View& w, const Consts& cs, int pa, int pb, int k_begin, int k_end, double* ch) {
  const double* avp[kR];
  const std::uint32_t* aep[kR];
  for (int r = 0; r < kR; ++r) {
    avp[r] = w.a_values(pa * kR + r);
    aep[r] = w.a_exps(pa * kR + r);
  }
  const double* const bvp = w.b_values(pb);
  const std::uint16_t* const bep = w.b_exps(pb);
  const __m512i field_mask = _mm512_set1_epi64(std::int64_t(0x7FF0000000000000ull));
  const __m512i m_offset = _mm512_set1_epi64((std::int64_t(52 - cs.F) << 52) | (std::int64_t(1) << 51));
  const __m512i cut_mask = _mm512_set1_epi64(std::int64_t(~((std::uint64_t(1) << (53 - cs.keep)) - 1u)));
  const __m512i floor16 = _mm512_set1_epi16(short(cs.floor_word));
  const __m512d widen = _mm512_set1_pd(cs.widen);
  const __m512i zero = _mm512_setzero_si512();
  alignas(64) double Ms[kR * kTileCols];
  __m512i E16[kR];
  for (int r = 0; r < kR; ++r) E16[r] = floor16;
  for (int k = k_begin; k < k_begin + BLOCK; ++k) exponent_step(aep, bep, k, E16);
  for (int k0 = k_begin; k0 < k_end; k0 += BLOCK) {
    const int blk = k0 / BLOCK;
    // M = 1.5 * 2^(E - F + 52), E's field that of max(2^(the words' E), |c|); acc = RZ(M + c (1 +
    // 2^-(F + 3))), plus 1 on its bits when c < 0.
    __m512d acc[kR][kC];
    for (int r = 0; r < kR; ++r) {
      const __m512i lo = _mm512_unpacklo_epi16(zero, E16[r]), hi = _mm512_unpackhi_epi16(zero, E16[r]);
      const __m512i field[kC] = {_mm512_unpacklo_epi32(zero, lo), _mm512_unpackhi_epi32(zero, lo),
                                 _mm512_unpacklo_epi32(zero, hi), _mm512_unpackhi_epi32(zero, hi)};
      for (int c = 0; c < kC; ++c) {
        const int x = 8 * (r * kC + c);
        const __m512d cv = _mm512_loadu_pd(ch + x);
        // max(|c|, 2^E) (VRANGEPD: the larger magnitude, sign cleared) has E's field.
        const __m512i e = _mm512_castpd_si512(_mm512_range_pd(cv, _mm512_castsi512_pd(field[c]), 0x0B));
        const __m512d M = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_and_si512(e, field_mask), m_offset));
        acc[r][c] = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(_mm512_fmadd_round_pd(cv, widen, M, kRz)),
                                                         _mm512_srli_epi64(_mm512_castpd_si512(cv), 63)));
        _mm512_store_pd(Ms + x, M);
      }
    }
    // The block's FMAs; beside them the next block's exponent maximum (after the last block, this
    // block's again, unused).
    const int next = k0 + BLOCK < k_end ? BLOCK : 0;
    for (int r = 0; r < kR; ++r) E16[r] = floor16;
    for (int k = k0; k < k0 + BLOCK; ++k) {
      fma_step(avp, bvp, k, acc);
      exponent_step(aep, bep, k + next, E16);
    }
    // S g = acc + n - M; the cut.
    const std::uint64_t* const bmp = w.p->bm.data() + (std::size_t(pb) * std::size_t(w.blocks) + std::size_t(blk)) * kTileCols;
    __m512i bw[kC];
    for (int c = 0; c < kC; ++c) bw[c] = _mm512_loadu_si512(bmp + 8 * c);
    for (int r = 0; r < kR; ++r) {
      const __m512i aw = _mm512_set1_epi64(std::int64_t(w.p->am[std::size_t(pa * kR + r) * std::size_t(w.blocks) + std::size_t(blk)]));
      for (int c = 0; c < kC; ++c) {
        const int x = 8 * (r * kC + c);
        // Rounded toward zero as every FP operation here (embedded), whatever MXCSR holds: exact,
        // and an exact zero is +0 (in the caller's round-down mode it would be -0).
        const __m512d S = _mm512_sub_round_pd(
            _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(acc[r][c]), _mm512_popcnt_epi64(_mm512_and_si512(aw, bw[c])))),
            _mm512_load_pd(Ms + x), kRz);
        _mm512_storeu_pd(ch + x, _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(S), cut_mask)));
      }
    }
  }
}

// D's elements of one register tile's chains (fp32 values held as doubles: converted exactly).
FP8EMU_TC_V512 void store_tile(const double* st, int i0, int j0, int M, int N, float* D) {
  for (int rr = 0; rr < kR && i0 + rr < M; ++rr)
    for (int c = 0; c < kC; ++c) {
      const int j = j0 + 8 * c, n = std::max(0, std::min(8, N - j));
      if (n == 0) break;
      _mm256_mask_storeu_ps(D + std::size_t(i0 + rr) * std::size_t(N) + std::size_t(j), __mmask8((1u << n) - 1u),
                            _mm512_cvtpd_ps(_mm512_loadu_pd(st + rr * kTileCols + 8 * c)));
    }
}

void pack(int M, int N, int K, int Mp, int Np, int Kp, const TcValuesSource& a, const TcValuesSource& b,
          const Consts& cs, Packed& p) {
  const int blocks = Kp / cs.block;
  grow(p.av, std::size_t(Mp) * std::size_t(Kp));
  grow(p.ae, std::size_t(Mp) * std::size_t(Kp));
  grow(p.am, std::size_t(Mp) * std::size_t(blocks));
  grow(p.bv, std::size_t(Np) * std::size_t(Kp));
  grow(p.be, std::size_t(Np) * std::size_t(Kp));
  grow(p.bm, std::size_t(Np) * std::size_t(blocks));
  const int pas = Mp / kR, pbs = Np / kTileCols;
#pragma omp parallel for schedule(dynamic, 1) if (double(Mp + Np) * double(Kp) >= double(kParallelMinElements))
  for (int t = 0; t < pas + pbs; ++t) {
    if (t < pas)
      for (int r = 0; r < kR; ++r) pack_a_row(t * kR + r, M, K, Kp, a, cs, p);
    else if (b.ts == 1)
      pack_b_rows(t - pas, N, K, Kp, b, cs, p);
    else
      pack_b_columns(t - pas, N, K, Kp, b, cs, p);
  }
}

}  // namespace

bool gemm_tc_values_avx512_takes(const core::MmaDatapath& p) {
  // tc_values_fast_path gives F in [23, 28] and at most 24 bits kept; the proof also needs operands
  // of at most 11 significant bits (every fp16, bf16 and tf32 row).
  return gemm_isa() == GemmIsa::kAvx512 && gemm_tc_fma512() && gemm_tc_fma_avx512_supported() &&
         tc_values_fast_path(p) && (p.block == 4 || p.block == 8 || p.block == 16) &&
         core::operand_fraction_bits(p.operands) + 1 <= 11;
}

void gemm_tc_values_avx512(int M, int N, int K, const TcValuesSource& a, const TcValuesSource& b,
                           const core::MmaDatapath& p, float* D) {
  FP8EMU_CHECK(gemm_tc_values_avx512_takes(p) && a.ts == 1 && (b.ts == 1 || b.rs == 1),
               "gemm_tc_values_avx512: a datapath or layout it does not take");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(D, D + std::size_t(M) * std::size_t(N), 0.0f);
    return;
  }
  const int F = p.fraction_bits;
  const int floor_e = std::max(p.exponent_floor, F - 126);
  const Consts cs{p.block,
                  F,
                  p.significant_bits,
                  core::operand_emin(p.operands),
                  std::uint16_t((floor_e + 1023) << 4),
                  1.0 + 1.0 / double(std::uint64_t(1) << (F + 3))};
  const int Kp = (K + p.block - 1) / p.block * p.block;
  const int Mp = (M + kR - 1) / kR * kR, Np = (N + kTileCols - 1) / kTileCols * kTileCols;
  thread_local Packed packed;
  pack(M, N, K, Mp, Np, Kp, a, b, cs, packed);
  const View w{Kp, Kp / p.block, &packed};
  const bool parallel = double(M) * N * K >= kParallelMinMacs;
  const CacheTile ct = cache_tile(Mp, Np, kMc / kR * kR, kNc, kR, kTileCols, parallel ? omp_get_max_threads() : 1);
  const int mc = ct.rows, nc = ct.cols;
  const int tiles_m = (Mp + mc - 1) / mc, tiles_n = (Np + nc - 1) / nc;
  const int tiles = tiles_m * tiles_n;
#pragma omp parallel if (parallel)
  {
    thread_local std::vector<double> state_buf;
    double* ch = grow(state_buf, std::size_t(kMc) * kNc);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tiles; ++t) {
      const int i0 = (t / tiles_n) * mc, j0 = (t % tiles_n) * nc;
      const int rg = std::min(mc, Mp - i0) / kR, cg = std::min(nc, Np - j0) / kTileCols;
      std::fill(ch, ch + std::size_t(rg) * std::size_t(cg) * kR * kTileCols, 0.0);
      for (int k0 = 0; k0 < Kp; k0 += kKc) {
        const int k1 = std::min(Kp, k0 + kKc);
        for (int r = 0; r < rg; ++r)
          for (int c = 0; c < cg; ++c) {
            double* st = ch + std::size_t(r * cg + c) * kR * kTileCols;
            const int pa = i0 / kR + r, pb = j0 / kTileCols + c;
            if (p.block == 16) tile<16>(w, cs, pa, pb, k0, k1, st);
            else if (p.block == 8) tile<8>(w, cs, pa, pb, k0, k1, st);
            else tile<4>(w, cs, pa, pb, k0, k1, st);
          }
      }
      for (int r = 0; r < rg; ++r)
        for (int c = 0; c < cg; ++c)
          store_tile(ch + std::size_t(r * cg + c) * kR * kTileCols, i0 + r * kR, j0 + c * kTileCols, M, N, D);
    }
    trim(state_buf);
  }
  trim(packed.av);
  trim(packed.bv);
  trim(packed.ae);
  trim(packed.be);
}
#else
bool gemm_tc_values_avx512_takes(const core::MmaDatapath&) { return false; }
void gemm_tc_values_avx512(int, int, int, const TcValuesSource&, const TcValuesSource&, const core::MmaDatapath&,
                           float*) {
  FP8EMU_CHECK(false, "gemm_tc_values_avx512: not built for this target");
}
#endif  // FP8EMU_TC_VALUES512_X86

}  // namespace fp8emu::emu::detail
