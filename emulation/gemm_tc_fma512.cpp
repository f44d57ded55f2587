// The AVX-512 tensor-core GEMM (Hopper wgmma and Ada models, fp32 accumulator): the block FMA of
// gemm_tc_fma.cpp (fp32 FMAs rounded toward zero, A widened by 1 + 2^-16, the negative products
// counted on the accumulator's bits, biased exponent bytes; the proofs are there) on 16 lanes,
// bit-identical to core::gemm_tn_element. What differs from the AVX2 kernel is the layout, and the
// exponent maximum computed inside the FMA loop:
//
//  * Layouts: B's exponent bytes are [k][64 columns], one vector per k, and A's are one byte per
//    row and k, replicated into a 32-bit word (one broadcast per row). The block maximum is then 4
//    vectors of 64 bytes (a row each) instead of 16 vectors of 4-byte groups, which (a) frees the
//    registers to compute the next block's maximum inside this block's FMA loop (the integer adds
//    and maxima issue beside the FMAs) and (b) replaces the per-accumulator byte reduction by
//    VPUNPCK{L,H}BW and VPUNPCK{L,H}WD with zero, which put byte 16 L + 4 c + i of a row's vector
//    (L the 128-bit lane, i < 4) in 32-bit lane 4 L + i of accumulator c, at bit 24: B's columns
//    are stored in that order (column 16 c + 4 L + i at byte 16 L + 4 c + i).
// Register tiles: 4 rows x 64 columns (16 zmm accumulators; per k 4 loads and 4 broadcasts for 16
// FMAs, and for the next block's maximum 1 load, 4 broadcasts, 4 byte adds and 4 byte maxima).
// Only on x86-64 with AVX512F/BW/VL/DQ, AVX512_VPOPCNTDQ and FMA (gemm_tc_fma_avx512_supported).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "bulk_kernels.hpp"
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
#define FP8EMU_TC_FMA512_X86 1
#endif

namespace fp8emu::emu::detail {

#ifdef FP8EMU_TC_FMA512_X86
namespace {

constexpr int kR = 4, kC = 4, kTileCols = 64;
using tc_fma::VecRule;
using tc_fma::vec_rule;
using tc_fma::vec_values;
using tc_fma::block_bits;

// Column col of a 64-column B panel stores its exponent byte at this position (see above).
constexpr int exp_position(int col) { return 16 * ((col % 16) / 4) + 4 * (col / 16) + col % 4; }

// Packed A, per panel of 4 rows: values [Kp][4] and exponent words [Kp][4] (the byte times
// 0x01010101); per row and block the masks of negative and of non-zero elements (bit i: the block's
// element i). Packed B, per panel of 64 columns: values [Kp][64], exponent bytes [Kp][64] (in
// exp_position order) and per block the masks [64].
struct Packed {
  std::vector<float> av, bv;
  std::vector<std::uint32_t> ae;
  std::vector<std::uint8_t> be;
  std::vector<std::uint32_t> aneg, anz, bneg, bnz;
};

struct View {
  int Kp, blocks;
  const float* av;
  const std::uint32_t* ae;
  const std::uint32_t *aneg, *anz;
  const float* bv;
  const std::uint8_t* be;
  const std::uint32_t *bneg, *bnz;
  const float* a_values(int p) const { return av + std::size_t(p) * std::size_t(Kp) * kR; }
  const std::uint32_t* a_exps(int p) const { return ae + std::size_t(p) * std::size_t(Kp) * kR; }
  const float* b_values(int p) const { return bv + std::size_t(p) * std::size_t(Kp) * kTileCols; }
  const std::uint8_t* b_exps(int p) const { return be + std::size_t(p) * std::size_t(Kp) * kTileCols; }
};

#define FP8EMU_TC_FMA512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vpopcntdq,fma")))

// The masks of 64 codes (one source row's next 64 K-elements): special, non-zero, negative.
struct Masks64 {
  std::uint64_t special, nz, neg;
};
FP8EMU_TC_FMA512 inline Masks64 masks64(__m512i x, const VecRule& v) {
  const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi8(0x7F));
  std::uint64_t special = v.smin < 128 ? _mm512_cmpge_epu8_mask(mag, _mm512_set1_epi8(char(v.smin))) : 0;
  if (v.special80) special |= _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(char(0x80)));
  const std::uint64_t nz = _mm512_test_epi8_mask(mag, mag) & ~special;
  return Masks64{special, nz, _mm512_movepi8_mask(x) & nz};
}

// The next 64 codes of a source row from k0 (zeros past K, and for a padding row: src null).
// The line after it is prefetched: a panel reads 64 rows K bytes apart, more streams than the
// hardware prefetchers follow.
FP8EMU_TC_FMA512 inline __m512i load64(const std::uint8_t* src, int k0, int K) {
  const int n = std::max(0, std::min(64, K - k0));
  if (!src || n == 0) return _mm512_setzero_si512();
  if (K - k0 > 64) _mm_prefetch(reinterpret_cast<const char*>(src + k0 + 64), _MM_HINT_T0);
  return _mm512_maskz_loadu_epi8(n == 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1, src + k0);
}

// Panel pa of A (4 rows) by vectors: per 64 K-elements, the masks per row, the codes interleaved
// [k][row] and the values and exponent words gathered 16 at a time.
FP8EMU_TC_FMA512 void pack_a_panel(int pa, int M, int K, int Kp, int block, const std::uint8_t* A,
                                   const VecRule& va, Packed& p, char* bad_a) {
  const int blocks = Kp / block;
  const std::size_t panel = std::size_t(pa) * std::size_t(Kp) * kR;
  float* v = p.av.data() + panel;
  std::uint32_t* e = p.ae.data() + panel;
  const std::uint8_t* src[kR];
  bool special[kR] = {};
  for (int r = 0; r < kR; ++r) {
    const int i = pa * kR + r;
    src[r] = i < M ? A + std::size_t(i) * std::size_t(K) : nullptr;
  }
  alignas(64) std::uint8_t buf[kR][64], inter[64 * kR];
  for (int k0 = 0; k0 < Kp; k0 += 64) {
    const int k1 = std::min(Kp, k0 + 64);
    for (int r = 0; r < kR; ++r) {
      const __m512i x = load64(src[r], k0, K);
      _mm512_store_si512(buf[r], x);
      const Masks64 m = masks64(x, va);
      special[r] = special[r] || m.special != 0;
      for (int kb = k0; kb < k1; kb += block) {
        const std::size_t at = std::size_t(pa * kR + r) * std::size_t(blocks) + std::size_t(kb / block);
        p.aneg[at] = block_bits(m.neg, kb - k0, block);
        p.anz[at] = block_bits(m.nz, kb - k0, block);
      }
    }
    for (int kk = 0; kk < 64; ++kk)
      for (int r = 0; r < kR; ++r) inter[kk * kR + r] = buf[r][kk];
    for (int q = 0; q < (k1 - k0) * kR; q += 16) {
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(inter + q)));
      _mm512_storeu_ps(v + std::size_t(k0) * kR + std::size_t(q), _mm512_i32gather_ps(idx, va.value, 4));
      _mm512_storeu_si512(e + std::size_t(k0) * kR + std::size_t(q), _mm512_i32gather_epi32(idx, va.e32, 4));
    }
  }
  for (int r = 0; r < kR; ++r)
    if (src[r]) bad_a[pa * kR + r] = special[r];
}

// Panel pb of B (64 columns) by vectors: per 64 K-elements, the masks per column, the codes
// transposed to [k][column] (16 x 16 blocks), and per k the 64 values and exponent bytes gathered
// 16 at a time, the bytes moved to exp_position order by one dword permutation (column 16 c + 4 L
// + i is dword 4 c + L of the natural order and goes to dword 4 L + c).
FP8EMU_TC_FMA512 void pack_b_panel(int pb, int N, int K, int Kp, int block, const std::uint8_t* B,
                                   const VecRule& vb, Packed& p, char* bad_b) {
  const int blocks = Kp / block;
  const std::size_t panel = std::size_t(pb) * std::size_t(Kp) * kTileCols;
  float* v = p.bv.data() + panel;
  std::uint8_t* e = p.be.data() + panel;
  const std::uint8_t* src[kTileCols];
  bool special[kTileCols] = {};
  for (int c = 0; c < kTileCols; ++c) {
    const int j = pb * kTileCols + c;
    src[c] = j < N ? B + std::size_t(j) * std::size_t(K) : nullptr;
  }
  const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(64) std::uint8_t buf[kTileCols][64], tr[64][kTileCols];
  for (int k0 = 0; k0 < Kp; k0 += 64) {
    const int k1 = std::min(Kp, k0 + 64);
    for (int c = 0; c < kTileCols; ++c) {
      const __m512i x = load64(src[c], k0, K);
      _mm512_store_si512(buf[c], x);
      const Masks64 m = masks64(x, vb);
      special[c] = special[c] || m.special != 0;
      for (int kb = k0; kb < k1; kb += block) {
        const std::size_t at = (std::size_t(pb) * std::size_t(blocks) + std::size_t(kb / block)) * kTileCols;
        p.bneg[at + std::size_t(c)] = block_bits(m.neg, kb - k0, block);
        p.bnz[at + std::size_t(c)] = block_bits(m.nz, kb - k0, block);
      }
    }
    for (int c = 0; c < kTileCols; c += 16)
      for (int kk = 0; kk < 64; kk += 16) detail::transpose_block(&buf[c][kk], 64, &tr[kk][c], kTileCols);
    for (int k = k0; k < k1; ++k) {
      // The four 16-byte quarters are joined in registers: four 16-byte stores read back as one
      // 64-byte load cannot be store-forwarded, and that stall was 29 % of this function's samples.
      __m128i bytes[4];
      for (int q = 0; q < 4; ++q) {
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tr[k - k0] + 16 * q)));
        _mm512_storeu_ps(v + std::size_t(k) * kTileCols + 16 * std::size_t(q), _mm512_i32gather_ps(idx, vb.value, 4));
        bytes[q] = _mm512_cvtepi32_epi8(_mm512_i32gather_epi32(idx, vb.e32, 4));
      }
      const __m512i row = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(bytes[0]), bytes[1], 1)),
          _mm256_inserti128_si256(_mm256_castsi128_si256(bytes[2]), bytes[3], 1), 1);
      _mm512_storeu_si512(e + std::size_t(k) * kTileCols, _mm512_permutexvar_epi32(perm, row));
    }
  }
  for (int c = 0; c < kTileCols; ++c)
    if (src[c]) bad_b[pb * kTileCols + c] = special[c];
}

// Rows of A and columns of B (NaN/Inf rows packed as zeros and flagged), panel by panel.
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
  for (int t = 0; t < pas + pbs; ++t) {
    if (t < pas) pack_a_panel(t, M, K, Kp, block, A, va, p, bad_a);
    else pack_b_panel(t - pas, N, K, Kp, block, B, vb, p, bad_b);
  }
}

#define FP8EMU_TC_INLINE __attribute__((always_inline)) inline

// One k of a block's exponent maximum: E8[r] = max(E8[r], ea[k][r] + eb[k]) per byte (column).
FP8EMU_TC_FMA512 FP8EMU_TC_INLINE void exponent_step(const std::uint32_t* aep, const std::uint8_t* bep, int k,
                                                       __m512i* E8) {
  const __m512i eb = _mm512_loadu_si512(bep + std::size_t(k) * kTileCols);
  for (int r = 0; r < kR; ++r)
    E8[r] = _mm512_max_epu8(E8[r], _mm512_add_epi8(_mm512_set1_epi32(int(aep[std::size_t(k) * kR + r])), eb));
}

// One k of the block FMA: acc[r][c] = RZ(acc[r][c] + a'[k][r] b[k][c]).
FP8EMU_TC_FMA512 FP8EMU_TC_INLINE void fma_step(const float* avp, const float* bvp, int k, __m512 (*acc)[kC]) {
  __m512 b[kC];
  for (int c = 0; c < kC; ++c) b[c] = _mm512_loadu_ps(bvp + std::size_t(k) * kTileCols + 16 * c);
  for (int r = 0; r < kR; ++r) {
    const __m512 a = _mm512_set1_ps(avp[std::size_t(k) * kR + r]);
    for (int c = 0; c < kC; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
  }
}

// One register tile (A panel pa, B panel pb) over quads [q_begin, q_end) of K, whole blocks of BQ
// quads, in MXCSR's round-toward-zero mode (the thread's own mode for the chain's RN adds).
// ch, tot, sum: the tile's state [4][64] (the chain, the promotion total and the split-K sum), kept
// across K chunks.
template <int BQ>
FP8EMU_TC_FMA512 void tile(const View& w, int pa, int pb, int q_begin, int q_end, Chain cp, float* ch, float* tot,
                           float* sum) {
  constexpr int kBlock = 4 * BQ, kV = kR * kC;
  const unsigned rn = _mm_getcsr(), rz = rn | 0x6000u;  // RC = 11: toward zero
  const __m512i cut_mask = _mm512_set1_epi32(static_cast<int>(0xFFFFFC00u));
  const __m512i field_mask = _mm512_set1_epi32(0x7F800000);
  const __m512i m_offset = _mm512_set1_epi32((10 << 23) | 0x00400000);
  const __m512 widen = _mm512_set1_ps(1.0f + 1.0f / 65536.0f);
  const float* const avp = w.a_values(pa);
  const std::uint32_t* const aep = w.a_exps(pa);
  const float* const bvp = w.b_values(pb);
  const std::uint8_t* const bep = w.b_exps(pb);
  const int i0 = pa * kR;
  alignas(64) float Ms[kV * 16];
  // The first block's exponent maximum; each later one is computed in the FMA loop before it.
  __m512i E8[kR];
  for (int r = 0; r < kR; ++r) E8[r] = _mm512_setzero_si512();
  for (int k = 4 * q_begin; k < 4 * q_begin + kBlock; ++k) exponent_step(aep, bep, k, E8);
  tc_fma::set_csr(rz);
  for (int q0 = q_begin; q0 < q_end; q0 += BQ) {
    const int k0 = 4 * q0, blk = k0 / kBlock;
    if (cp.range_ends(k0) || cp.run_ends(k0)) {  // the chain's RN adds, on the state in memory
      tc_fma::set_csr(rn);
      chain_boundaries(cp, k0, kR * kTileCols, ch, tot, sum);
      tc_fma::set_csr(rz);
    }
    // E's field = max(the block's byte maximum, c's field); M = 1.5 * 2^(E + 10); the accumulators
    // start at RZ(M + c (1 + 2^-16)) = M + trunc_g(c), less g when c < 0, added back on acc's bits.
    __m512 acc[kR][kC];
    const __m512i zero = _mm512_setzero_si512();
    for (int r = 0; r < kR; ++r) {
      const __m512i lo = _mm512_unpacklo_epi8(zero, E8[r]), hi = _mm512_unpackhi_epi8(zero, E8[r]);
      const __m512i field24[kC] = {_mm512_unpacklo_epi16(zero, lo), _mm512_unpackhi_epi16(zero, lo),
                                   _mm512_unpacklo_epi16(zero, hi), _mm512_unpackhi_epi16(zero, hi)};
      for (int c = 0; c < kC; ++c) {
        const int x = 16 * (r * kC + c);
        const __m512 cv = _mm512_loadu_ps(ch + x);
        const __m512i cb = _mm512_castps_si512(cv);
        const __m512i field = _mm512_max_epu32(_mm512_srli_epi32(field24[c], 1), _mm512_and_si512(cb, field_mask));
        const __m512 M = _mm512_castsi512_ps(_mm512_add_epi32(field, m_offset));
        acc[r][c] = _mm512_castsi512_ps(
            _mm512_add_epi32(_mm512_castps_si512(_mm512_fmadd_ps(cv, widen, M)), _mm512_srli_epi32(cb, 31)));
        _mm512_store_ps(Ms + x, M);
      }
    }
    // acc = RZ(acc + a' b), one FMA per 16 products; beside it the next block's exponent maximum
    // (after the last block, a maximum of this block again, unused: one loop without a branch).
    const int next = q0 + BQ < q_end ? kBlock : 0;
    for (int r = 0; r < kR; ++r) E8[r] = _mm512_setzero_si512();
    for (int k = k0; k < k0 + kBlock; ++k) {
      fma_step(avp, bvp, k, acc);
      exponent_step(aep, bep, k + next, E8);
    }
    // S = acc - M + n g, n = popcount((neg_a ^ neg_b) & nz_a & nz_b), added to acc's bits; the
    // 14-bit cut.
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
  tc_fma::set_csr(rn);
}

// The AVX-512 kernel for tc_fma::run; its context is the two operands' packing rules.
struct Avx512 {
  static constexpr int kR = detail::kR, kTileCols = detail::kTileCols;
  using View = detail::View;
  using Packed = detail::Packed;
  struct Context {
    const VecRule *va, *vb;
  };
  static View pack(const Context& x, int M, int N, int K, int Mp, int Np, int Kp, int block, const std::uint8_t* A,
                   const FormatSpec&, const CodeFields*, const std::uint8_t* B, const FormatSpec&, const CodeFields*,
                   Packed& p, char* bad_a, char* bad_b) {
    detail::pack(M, N, K, Mp, Np, Kp, block, A, *x.va, B, *x.vb, p, bad_a, bad_b);
    return View{Kp,          Kp / block,  p.av.data(), p.ae.data(),   p.aneg.data(),
                p.anz.data(), p.bv.data(), p.be.data(), p.bneg.data(), p.bnz.data()};
  }
  template <int BQ>
  static void tile(const View& w, int pa, int pb, int q0, int q1, Chain cp, float* ch, float* tot, float* sum) {
    detail::tile<BQ>(w, pa, pb, q0, q1, cp, ch, tot, sum);
  }
};

}  // namespace

bool gemm_tc_fma_avx512(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                        const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                        float* D, char* bad_a, char* bad_b) {
  VecRule va, vb;
  vec_rule(ta, true, va);
  vec_rule(tb, false, vb);
  if (!va.ok || !vb.ok) return false;
  vec_values(fa, ta, true, va);
  vec_values(fb, tb, false, vb);
  tc_fma::run<Avx512>(Avx512::Context{&va, &vb}, M, N, K, A, fa, ta, B, fb, tb, block, cp, s, D, bad_a, bad_b);
  return true;
}

bool gemm_tc_fma_packs(const CodeFields* ta, const CodeFields* tb) {
  VecRule va, vb;
  vec_rule(ta, true, va);
  vec_rule(tb, false, vb);
  return va.ok && vb.ok;
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
#else
bool gemm_tc_fma_avx512_supported() { return false; }
bool gemm_tc_fma_avx512(int, int, int, const std::uint8_t*, const FormatSpec&, const CodeFields*, const std::uint8_t*,
                        const FormatSpec&, const CodeFields*, int, Chain, float, float*, char*, char*) {
  return false;
}
bool gemm_tc_fma_packs(const CodeFields*, const CodeFields*) { return false; }
#endif  // FP8EMU_TC_FMA512_X86

}  // namespace fp8emu::emu::detail
