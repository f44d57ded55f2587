// The vectorised tensor-core GEMM (see gemm_tensor_core.hpp): packed operands, cache blocking over
// M x N tiles and K chunks, OpenMP over tiles, and one kernel per instruction-set path
// (gemm_isa.hpp). All paths give the bits of core::gemm_tn_element; the tests force each path.
//
// The arithmetic of one block FMA (docs/tensor-core-model.md §Block FMA; hopper: 32 products, ada:
// 16; F = 13 fraction bits, 14 significant bits kept), and why every step below is exact:
//
//  * A finite FP8 code is |x| = m * 2^(e - f): m its integer significand (hidden bit included, none
//    for subnormals; m <= 15 for E4M3, <= 7 for E5M2), e its exponent clamped at emin, f its mantissa
//    bits (3 or 2). A product's alignment exponent is ea + eb (not normalised) and its value is
//    ma * mb * 2^(ea + eb - fa - fb).
//  * E = the largest alignment exponent of the block's non-zero products and of the running sum c
//    (the previous block's result; +0 at the start of a chain). With d = E - (ea + eb) >= 0, the
//    product scaled by 2^(13 - E) is P / 2^d with P = ma * mb * 2^(13 - fa - fb) an integer
//    (13 - fa - fb >= 7) below 2^15 (E4M3 x E4M3: 225 * 2^7; E4M3 x E5M2: 105 * 2^8). The model
//    truncates each term's magnitude to a multiple of 2^(E - 13): term = sign * floor(P / 2^d), which
//    is P >> d, a logical shift of the magnitude, with the sign applied afterwards.
//  * c joins the alignment the same way: c has at most 14 significant bits and exponent ec <= E, so
//    c * 2^(13 - E) is exact in fp32 and the truncating float -> int conversion is its magnitude
//    truncation (|c * 2^(13 - E)| < 2^14).
//  * The block sum S of at most 33 terms, each below 2^15 in magnitude, is below 2^21: exact in
//    int32 and exactly an fp32. The 14-bit cut truncates |S| to 14 significant bits: S as an fp32 has
//    24 significant bits, so clearing the low 10 mantissa bits (sign-magnitude) is that truncation.
//    Scaling back by 2^(E - 13) is exact: E - 13 >= -46 (products are at least 2^-25, so a non-zero
//    c or product has E >= -33) and the result stays far below 2^128 (|sum| < K * 2^26).
//  * S = 0 (no term, or terms that cancel) gives +0, the model's exact-zero result.
// Along K the blocks chain (the result is the next block's c); TE's promotion adds each run's
// chain to an fp32 total with one RN add, and split-K ranges each start from zero and are summed
// in fp32 in K order (core::dot_split_k), all with the same IEEE additions as the scalar model.
//
// Zero codes (and the zero padding of ragged M, N and K) have no alignment exponent and add 0: a
// final short block is the same as padding it with zero codes. Rows of A or B that hold a NaN or Inf
// code are packed as zeros and their elements recomputed by the scalar element model afterwards.
#include "gemm_tensor_core.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h initialises its "undefined" vectors from themselves, which -Wall reports
// once those intrinsics are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define FP8EMU_HAVE_X86_KERNELS 1
#endif

#include <omp.h>

#include "fp8emu/core/dot.hpp"
#include "gemm_isa.hpp"
#include "gemm_tc_chain.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

namespace fp8emu::emu::detail {

bool tensor_core_fast_path(const AccumulationModel& model) {
  return model.datapath == Datapath::kTensorCore && model.accumulator == core::MmaAccumulator::kFp32 &&
         model.fraction_bits == core::kMmaFractionBits && model.significant_bits == core::kMmaSignificantBits &&
         model.steps == 1 && model.operands == core::MmaOperands::kFp8 && model.c_joins_first_block &&
         model.block % 4 == 0 && core::kSplitKTile % model.block == 0;
}

namespace {


// ------------------------------------------------------------------------------------------------
// AVX-512 path: int16 significands and exponents, 16 columns x 2 k per 512-bit register.
//
// Packed A, per row (structure of arrays, K padded to whole blocks): the exponents as int8 (for the
// max pass) and m, e, sign as int16; the kernel broadcasts four int8 exponents, or two k of each
// int16 field (the layout of VPDPWSSD), at a time. Packed B, per 16 columns and quad (four
// consecutive k), the same fields laid out [column][k] in 512-bit rows.
// A zero code has m = 0 and the int8 exponent kZeroExp8, below every real alignment exponent (real
// ones lie in [-28, 30], a running sum's in [-33, 127]; kZeroExp8 + e <= -49, and two zeros give
// -128, still an int8).
constexpr std::int8_t kZeroExp8 = -64;

struct APackRows {
  const std::int8_t* e8;
  const std::int16_t* m;
  const std::int16_t* e;
  const std::int16_t* s;
  std::size_t stride;  // elements per row: 4 * Kq
  APackRows rows_from(std::size_t i) const {
    const std::size_t o = i * stride;
    return APackRows{e8 + o, m + o, e + o, s + o, stride};
  }
};

struct alignas(64) BPackQ {
  std::int8_t e8[64];      // [column][k % 4]
  std::int16_t m[2][32];   // [k / 2 % 2][column][k % 2]: m << (13 - fa - fb)
  std::int16_t e[2][32];
  std::int16_t s[2][32];
};
static_assert(sizeof(BPackQ) == 64 + 3 * 2 * 32 * sizeof(std::int16_t), "BPackQ layout");

constexpr int kR = 4;                 // rows of the register tile
constexpr int kC = 2;                 // 16-column vectors of the register tile
constexpr int kTileCols = 16 * kC;    // 32
constexpr int kMc = 64;               // rows per cache tile (multiple of kR)
constexpr int kNc = 256;              // columns per cache tile (multiple of kTileCols)
constexpr int kKcQuads = 64;          // K chunk: 256 k (a multiple of every block)

#ifdef FP8EMU_HAVE_X86_KERNELS
#define FP8EMU_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")))

// One register tile (kR rows x kC 16-column vectors) over quads [q_begin, q_end) of K, whole blocks
// of BQ quads. ch, tot, sum: the tile's state [kR][kC][16] (the chain, the promotion total and the
// split-K sum), kept across K chunks.
template <int BQ>
FP8EMU_AVX512 void tc_tile_avx512(const APackRows& a, const BPackQ* b, std::size_t b_stride,
                                  int q_begin, int q_end, Chain cp, float* ch, float* tot, float* sum) {
  const __m512i rep_idx = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i cut_mask = _mm512_set1_epi32(static_cast<int>(0xFFFFFC00u));
  const __m512i one16 = _mm512_set1_epi16(1);
  for (int q0 = q_begin; q0 < q_end; q0 += BQ) {
    const int k0 = 4 * q0;
    chain_boundaries(cp, k0, kR * kC * 16, ch, tot, sum);  // the chain's RN adds, on the state in memory
    // Pass 1: E = max(exponent of c, ea + eb over the block's non-zero products), in int8 lanes.
    __m512i E8[kR][kC];
    for (int r = 0; r < kR; ++r)
      for (int c = 0; c < kC; ++c) {
        const __m512i cb = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(ch + 16 * (r * kC + c))), abs_mask);
        // c is +0 or a normal number (|c| >= 2^-33): its exponent, or -128 (no term) for zero.
        const __m512i ec = _mm512_sub_epi32(_mm512_srli_epi32(cb, 23), _mm512_set1_epi32(127));
        const __m512i e = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(cb, _mm512_setzero_si512()), ec,
                                                  _mm512_set1_epi32(-128));
        E8[r][c] = _mm512_shuffle_epi8(e, rep_idx);  // the int8 exponent in all four k lanes
      }
    for (int q = q0; q < q0 + BQ; ++q) {
      __m512i be[kC];
      for (int c = 0; c < kC; ++c) be[c] = _mm512_load_si512(b[c * b_stride + q].e8);
      for (int r = 0; r < kR; ++r) {
        std::int32_t ae_bits;
        std::memcpy(&ae_bits, a.e8 + r * a.stride + 4 * std::size_t(q), 4);
        const __m512i ae = _mm512_set1_epi32(ae_bits);
        for (int c = 0; c < kC; ++c) E8[r][c] = _mm512_max_epi8(E8[r][c], _mm512_add_epi8(ae, be[c]));
      }
    }
    // The column maximum over the four k lanes, then as int16 in both halves of each 32-bit lane.
    __m512i E16[kR][kC], S[kR][kC];
    for (int r = 0; r < kR; ++r)
      for (int c = 0; c < kC; ++c) {
        __m512i m = _mm512_max_epi8(E8[r][c], _mm512_rol_epi32(E8[r][c], 8));
        m = _mm512_max_epi8(m, _mm512_rol_epi32(m, 16));
        E16[r][c] = _mm512_srai_epi16(m, 8);
        // Clamped at -60 only so that the scale factors stay finite when there is no term (then c
        // and every product are 0, and S = 0 whatever the scale).
        const __m512i E = _mm512_max_epi32(_mm512_srai_epi32(m, 24), _mm512_set1_epi32(-60));
        const __m512 sc = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127 + 13), E), 23));
        // c joins the alignment: c * 2^(13 - E), exact, truncated toward zero by the conversion.
        S[r][c] = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_loadu_ps(ch + 16 * (r * kC + c)), sc));
      }
    // Pass 2: S += sign * ((ma * mb << (13 - fa - fb)) >> d), d = E - ea - eb, two k per 32-bit lane.
    for (int q = q0; q < q0 + BQ; ++q)
      for (int h = 0; h < 2; ++h) {
        __m512i bm[kC], be[kC], bs[kC];
        for (int c = 0; c < kC; ++c) {
          const BPackQ& bq = b[c * b_stride + q];
          bm[c] = _mm512_load_si512(bq.m[h]);
          be[c] = _mm512_load_si512(bq.e[h]);
          bs[c] = _mm512_load_si512(bq.s[h]);
        }
        for (int r = 0; r < kR; ++r) {
          const std::size_t ak = r * a.stride + 4 * std::size_t(q) + 2 * std::size_t(h);
          std::int32_t am_bits, ae_bits, as_bits;
          std::memcpy(&am_bits, a.m + ak, 4);
          std::memcpy(&ae_bits, a.e + ak, 4);
          std::memcpy(&as_bits, a.s + ak, 4);
          const __m512i am = _mm512_set1_epi32(am_bits), ae = _mm512_set1_epi32(ae_bits),
                        as = _mm512_set1_epi32(as_bits);
          for (int c = 0; c < kC; ++c) {
            const __m512i P = _mm512_mullo_epi16(am, bm[c]);  // < 2^15: exact in int16
            const __m512i d = _mm512_sub_epi16(_mm512_sub_epi16(E16[r][c], ae), be[c]);
            const __m512i t = _mm512_srlv_epi16(P, d);  // counts >= 16 give 0 (zero products: P = 0)
            // sign(a) * sign(b) for signs stored as +1 (0x0001) and -1 (0xFFFF): (sa ^ sb) | 1, one
            // ternary-logic op (truth table 0xBE = (A ^ B) | C) instead of a multiply.
            const __m512i sg = _mm512_ternarylogic_epi32(as, bs[c], one16, 0xBE);
            S[r][c] = _mm512_dpwssd_epi32(S[r][c], t, sg);
          }
        }
      }
    // The 14-bit cut and the scale back to 2^(E - 13).
    for (int r = 0; r < kR; ++r)
      for (int c = 0; c < kC; ++c) {
        const __m512i E = _mm512_max_epi32(_mm512_srai_epi32(E16[r][c], 16), _mm512_set1_epi32(-60));
        const __m512 inv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_set1_epi32(127 - 13), E), 23));
        const __m512 f = _mm512_cvtepi32_ps(S[r][c]);  // exact: |S| < 2^21
        const __m512 cut = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(f), cut_mask));
        _mm512_storeu_ps(ch + 16 * (r * kC + c), _mm512_mul_ps(cut, inv));
      }
  }
}

// Per-code packed fields of one operand, from CodeFields: zero codes and NaN/Inf codes (which are
// packed as zeros; their rows are recomputed by the element model) have m = 0, e = 0 and the int8
// exponent kZeroExp8; `m` holds m << shift (B's significands carry the product's alignment shift).
// Code 0 (+0) is also what the zero padding of ragged M, N and K holds.
struct PackTable {
  std::int8_t e8[256];
  std::int16_t m[256], e[256], s[256];
  bool special[256];
  bool sign_free;  // no field but s depends on the sign bit (the VBMI packing's 128-entry tables)
};

void pack_table(const CodeFields* t, int shift, PackTable& p) {
  for (int c = 0; c < 256; ++c) {
    const CodeFields& f = t[c];
    const bool zero = f.m == 0 || f.special;
    p.e8[c] = zero ? kZeroExp8 : std::int8_t(f.e);
    p.m[c] = zero ? std::int16_t(0) : std::int16_t(f.m << shift);
    p.e[c] = zero ? std::int16_t(0) : f.e;
    p.s[c] = f.s;
    p.special[c] = f.special;
  }
  // FNUZ formats: 0x80 is NaN while 0x00 is zero, so their codes need the 256-entry tables.
  p.sign_free = true;
  for (int c = 0; c < 128; ++c)
    p.sign_free = p.sign_free && p.special[c] == p.special[c | 0x80] && p.e8[c] == p.e8[c | 0x80] &&
                  p.m[c] == p.m[c | 0x80] && p.e[c] == p.e[c | 0x80];
}

// Packed A: the arrays of APackRows, Mp rows of 4 * Kq elements.
struct APackBuffers {
  std::vector<std::int8_t> e8;
  std::vector<std::int16_t> m, e, s;
};

// Row i of A (zero codes beyond K and for i >= M) with the per-code tables; returns whether the row
// holds a NaN or Inf code.
bool pack_a_row_table(const std::uint8_t* src, bool real, int K, int Kp, const PackTable& t, std::int8_t* e8,
                      std::int16_t* m, std::int16_t* e, std::int16_t* s) {
  bool special = false;
  for (int k = 0; k < Kp; ++k) {
    const std::uint8_t c = (real && k < K) ? src[k] : std::uint8_t(0);
    special |= t.special[c];
    e8[k] = t.e8[c];
    m[k] = t.m[c];
    e[k] = t.e[c];
    s[k] = t.s[c];
  }
  return special;
}

// Column group v of B (16 rows of B; zero codes beyond K and for rows >= N) with the per-code
// tables; sets bad[j] for its rows j < N.
void pack_b_group_table(const std::uint8_t* B, int N, int K, int Kq, int v, const PackTable& t, BPackQ* col,
                        char* bad) {
  for (int jj = 0; jj < 16; ++jj) {
    const int j = 16 * v + jj;
    const std::uint8_t* src = B + std::size_t(j) * std::size_t(K);
    bool special = false;
    for (int q = 0; q < Kq; ++q)
      for (int l = 0; l < 4; ++l) {
        const int k = 4 * q + l;
        const std::uint8_t c = (j < N && k < K) ? src[k] : std::uint8_t(0);
        special |= t.special[c];
        col[q].e8[4 * jj + l] = t.e8[c];
        col[q].m[l / 2][2 * jj + l % 2] = t.m[c];
        col[q].e[l / 2][2 * jj + l % 2] = t.e[c];
        col[q].s[l / 2][2 * jj + l % 2] = t.s[c];
      }
    if (j < N) bad[j] = special;
  }
}

// The same packing, 64 codes at a time with AVX-512 VBMI: each per-code table is 128 bytes indexed by
// the code without its sign (no field but the sign depends on the sign bit), looked up with one
// two-register byte permute; the sign is +1 or -1 from the sign bit; int16 fields are the widened
// bytes (m shifted left by the operand's alignment shift).
#define FP8EMU_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

// The 128-byte tables e8, m (unshifted), e and special (0/1), as plain bytes: the functions compiled
// without AVX-512 that hold them never touch a 512-bit type (a 64-byte aligned vector member would
// be laid out by a caller built for the baseline ISA, which need not align it at -O0).
struct VbmiTables {
  std::int8_t e8[128], m[128], e[128], sp[128];
  int shift;
};

VbmiTables vbmi_tables(const PackTable& t, int shift) {
  VbmiTables v{};
  for (int c = 0; c < 128; ++c) {
    v.e8[c] = t.e8[c];
    v.m[c] = std::int8_t(t.m[c] >> shift);  // m < 16: one byte
    v.e[c] = std::int8_t(t.e[c]);           // |e| < 128
    v.sp[c] = t.special[c] ? 1 : 0;
  }
  v.shift = shift;
  return v;
}

// A table in two registers, loaded inside the AVX-512 functions.
struct Table128 {
  __m512i lo, hi;
};

FP8EMU_AVX512_VBMI inline Table128 load_table(const std::int8_t* t) {
  return Table128{_mm512_loadu_si512(t), _mm512_loadu_si512(t + 64)};
}

FP8EMU_AVX512_VBMI inline __m512i lookup(const Table128& table, __m512i idx) {
  return _mm512_permutex2var_epi8(table.lo, idx, table.hi);
}

// Widens 32 bytes to int16 lanes: m (zero-extended, shifted), e (sign-extended), s = +1 / -1 from
// the code's sign bit.
FP8EMU_AVX512_VBMI inline void widen_fields(__m256i m8, __m256i e8, __m256i c8, int shift, __m512i& m, __m512i& e,
                                            __m512i& s) {
  m = _mm512_sll_epi16(_mm512_cvtepu8_epi16(m8), _mm_cvtsi32_si128(shift));
  e = _mm512_cvtepi8_epi16(e8);
  s = _mm512_or_si512(_mm512_srai_epi16(_mm512_cvtepi8_epi16(c8), 15), _mm512_set1_epi16(1));
}

FP8EMU_AVX512_VBMI bool pack_a_row_vbmi(const std::uint8_t* src, bool real, int K, int Kp, const VbmiTables& tables,
                                        std::int8_t* e8, std::int16_t* m, std::int16_t* e, std::int16_t* s) {
  const __m512i low7 = _mm512_set1_epi8(0x7F);
  const struct {
    Table128 e8, m, e, sp;
    int shift;
  } t{load_table(tables.e8), load_table(tables.m), load_table(tables.e), load_table(tables.sp), tables.shift};
  __mmask64 special = 0;
  for (int k0 = 0; k0 < Kp; k0 += 64) {
    const int n = std::min(64, Kp - k0);  // Kp is a multiple of 4; the last chunk may be short
    const int valid = real ? std::max(0, std::min(n, K - k0)) : 0;
    const __mmask64 load = valid == 64 ? ~__mmask64(0) : (__mmask64(1) << valid) - 1;
    const __mmask64 store = n == 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1;
    const __m512i c = _mm512_maskz_loadu_epi8(load, src + k0);  // beyond K: code 0, the zero padding
    const __m512i idx = _mm512_and_si512(c, low7);
    const __m512i sp = lookup(t.sp, idx);
    special |= _mm512_test_epi8_mask(sp, sp);
    _mm512_mask_storeu_epi8(e8 + k0, store, lookup(t.e8, idx));
    const __m512i mb = lookup(t.m, idx), eb = lookup(t.e, idx);
    for (int h = 0; h < 2 && 32 * h < n; ++h) {
      __m512i mv, ev, sv;
      widen_fields(h ? _mm512_extracti64x4_epi64(mb, 1) : _mm512_castsi512_si256(mb),
                   h ? _mm512_extracti64x4_epi64(eb, 1) : _mm512_castsi512_si256(eb),
                   h ? _mm512_extracti64x4_epi64(c, 1) : _mm512_castsi512_si256(c), t.shift, mv, ev, sv);
      const int nh = std::min(32, n - 32 * h);
      const __mmask32 st = nh == 32 ? ~__mmask32(0) : (__mmask32(1) << nh) - 1;
      _mm512_mask_storeu_epi16(m + k0 + 32 * h, st, mv);
      _mm512_mask_storeu_epi16(e + k0 + 32 * h, st, ev);
      _mm512_mask_storeu_epi16(s + k0 + 32 * h, st, sv);
    }
  }
  return special != 0;
}

// Column group v of B: per quad, the 64 codes [column][k] by one 32-bit gather (16 rows of B at
// the quad's four k); quads that reach past K are assembled element by element with zero padding.
FP8EMU_AVX512_VBMI void pack_b_group_vbmi(const std::uint8_t* B, int N, int K, int Kq, int v,
                                          const VbmiTables& tables, BPackQ* col, char* bad) {
  const __m512i low7 = _mm512_set1_epi8(0x7F);
  const struct {
    Table128 e8, m, e, sp;
    int shift;
  } t{load_table(tables.e8), load_table(tables.m), load_table(tables.e), load_table(tables.sp), tables.shift};
  // Bytes (column jj, k = 2h and 2h + 1) of a [column][k] vector, in int16-lane order 2 jj + k % 2.
  alignas(64) std::uint8_t sel[2][64];
  for (int h = 0; h < 2; ++h)
    for (int x = 0; x < 64; ++x) sel[h][x] = std::uint8_t(4 * ((x % 32) / 2) + 2 * h + x % 2);
  const __m512i sel0 = _mm512_load_si512(sel[0]), sel1 = _mm512_load_si512(sel[1]);
  const int j0 = 16 * v;
  const int rows = std::max(0, std::min(16, N - j0));
  const __mmask16 row_mask = rows == 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1u);
  const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(K));
  const int full_quads = K / 4;
  __mmask64 special = 0;
  for (int q = 0; q < Kq; ++q) {
    __m512i c;
    if (q < full_quads && rows > 0) {
      c = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), row_mask, offsets,
                                      B + std::size_t(j0) * std::size_t(K) + 4 * std::size_t(q), 1);
    } else if (4 * q < K && rows > 0) {
      alignas(64) std::uint8_t buf[64] = {};
      for (int jj = 0; jj < rows; ++jj)
        for (int l = 0; 4 * q + l < K; ++l) buf[4 * jj + l] = B[std::size_t(j0 + jj) * std::size_t(K) + 4 * q + l];
      c = _mm512_load_si512(buf);
    } else {
      c = _mm512_setzero_si512();
    }
    const __m512i idx = _mm512_and_si512(c, low7);
    const __m512i sp = lookup(t.sp, idx);
    special |= _mm512_test_epi8_mask(sp, sp);
    BPackQ& out = col[q];
    _mm512_store_si512(out.e8, lookup(t.e8, idx));
    const __m512i mb = lookup(t.m, idx), eb = lookup(t.e, idx);
    for (int h = 0; h < 2; ++h) {
      const __m512i sl = h ? sel1 : sel0;
      __m512i mv, ev, sv;
      widen_fields(_mm512_castsi512_si256(_mm512_permutexvar_epi8(sl, mb)),
                   _mm512_castsi512_si256(_mm512_permutexvar_epi8(sl, eb)),
                   _mm512_castsi512_si256(_mm512_permutexvar_epi8(sl, c)), t.shift, mv, ev, sv);
      _mm512_store_si512(out.m[h], mv);
      _mm512_store_si512(out.e[h], ev);
      _mm512_store_si512(out.s[h], sv);
    }
  }
  for (int jj = 0; jj < rows; ++jj) bad[j0 + jj] = ((special >> (4 * jj)) & 0xF) != 0;
}

// Packs A [M, K] into Mp rows of 4 * Kq elements and B [N, K] into Np / 16 column groups of Kq
// quads (zero padded), and flags the rows of A and of B that hold a NaN or Inf code.
void pack_avx512(int M, int N, int K, int Mp, int Np, int Kq, const std::uint8_t* A, const PackTable& ta,
                 const std::uint8_t* B, const PackTable& tb, int b_shift, APackBuffers& ap, BPackQ* bp, char* bad_a,
                 char* bad_b) {
  const double work = double(Mp + Np) * double(Kq) * 4.0;
  const int Kp = 4 * Kq;
  const bool vbmi = gemm_pack_vbmi() && ta.sign_free && tb.sign_free;
  VbmiTables va{}, vb{};
  if (vbmi) {
    va = vbmi_tables(ta, 0);
    vb = vbmi_tables(tb, b_shift);
  }
#pragma omp parallel if (work >= double(kParallelMinElements))
  {
#pragma omp for schedule(static)
    for (int i = 0; i < Mp; ++i) {
      const std::size_t o = std::size_t(i) * std::size_t(Kp);
      const std::uint8_t* src = A + std::size_t(std::min(i, M - 1)) * std::size_t(K);
      const bool special =
          vbmi ? pack_a_row_vbmi(src, i < M, K, Kp, va, ap.e8.data() + o, ap.m.data() + o, ap.e.data() + o,
                                 ap.s.data() + o)
               : pack_a_row_table(src, i < M, K, Kp, ta, ap.e8.data() + o, ap.m.data() + o, ap.e.data() + o,
                                  ap.s.data() + o);
      if (i < M) bad_a[i] = special;
    }
#pragma omp for schedule(static)
    for (int v = 0; v < Np / 16; ++v) {
      BPackQ* col = bp + std::size_t(v) * std::size_t(Kq);
      if (vbmi)
        pack_b_group_vbmi(B, N, K, Kq, v, vb, col, bad_b);
      else
        pack_b_group_table(B, N, K, Kq, v, tb, col, bad_b);
    }
  }
}

// D for one register tile's [kR][kC][16] state: chain_result per lane, vectorised (the same IEEE
// adds and multiply), stored with a mask at the ragged right edge.
FP8EMU_AVX512 void store_tile_avx512(const float* ch, const float* tot, const float* sum, Chain cp, int K, float s,
                                     int i0, int j0, int M, int N, float* D) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int rr = 0; rr < kR; ++rr) {
    const int i = i0 + rr;
    if (i >= M) break;
    for (int cc = 0; cc < kC; ++cc) {
      const int j = j0 + cc * 16;
      if (j >= N) break;
      const std::size_t x = std::size_t((rr * kC + cc) * 16);
      __m512 v = _mm512_loadu_ps(ch + x);
      if (cp.promotion > 0) v = _mm512_add_ps(_mm512_loadu_ps(tot + x), v);
      if (K > cp.range) v = _mm512_add_ps(_mm512_loadu_ps(sum + x), v);
      v = _mm512_mul_ps(v, sv);
      const __mmask16 mask = N - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (N - j)) - 1u);
      _mm512_mask_storeu_ps(D + std::size_t(i) * std::size_t(N) + std::size_t(j), mask, v);
    }
  }
}

struct Avx512Scratch {
  APackBuffers ap;
  std::vector<BPackQ> bp;
};

void gemm_avx512(int M, int N, int K, const std::uint8_t* A, const CodeFields* ta, const std::uint8_t* B,
                 const CodeFields* tb, int b_shift, int block, Chain cp, float s, float* D, char* bad_a, char* bad_b) {
  const int Kq = ((K + block - 1) / block * block) / 4;  // K padded to whole blocks, in quads
  const int Mp = (M + kR - 1) / kR * kR, Np = (N + kTileCols - 1) / kTileCols * kTileCols;
  PackTable pta, ptb;
  pack_table(ta, 0, pta);
  pack_table(tb, b_shift, ptb);
  thread_local Avx512Scratch scratch;
  const std::size_t a_elems = std::size_t(Mp) * std::size_t(Kq) * 4;
  grow(scratch.ap.e8, a_elems);
  grow(scratch.ap.m, a_elems);
  grow(scratch.ap.e, a_elems);
  grow(scratch.ap.s, a_elems);
  BPackQ* bp = grow(scratch.bp, std::size_t(Np / 16) * std::size_t(Kq));
  pack_avx512(M, N, K, Mp, Np, Kq, A, pta, B, ptb, b_shift, scratch.ap, bp, bad_a, bad_b);
  const APackRows ap{scratch.ap.e8.data(), scratch.ap.m.data(), scratch.ap.e.data(), scratch.ap.s.data(),
                     std::size_t(Kq) * 4};
  const int bq = block / 4;
  const double work = double(M) * N * K;
  const bool parallel = work >= kParallelMinMacs;
  const CacheTile ct = cache_tile(Mp, Np, kMc, kNc, kR, kTileCols, parallel ? omp_get_max_threads() : 1);
  const int mc = ct.rows, nc = ct.cols;
  const int tiles_m = (Mp + mc - 1) / mc, tiles_n = (Np + nc - 1) / nc;
  const int tiles = tiles_m * tiles_n;
#pragma omp parallel if (parallel)
  {
    // The state of one cache tile: per register tile, [kR][kC][16] chains, totals and sums, per
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
      for (int q0 = 0; q0 < Kq; q0 += kKcQuads) {
        const int q1 = std::min(Kq, q0 + kKcQuads);
        for (int r = 0; r < rg; ++r) {
          const APackRows a = ap.rows_from(std::size_t(i0 + r * kR));
          for (int c = 0; c < cg; ++c) {
            const BPackQ* b = bp + std::size_t((j0 + c * kTileCols) / 16) * std::size_t(Kq);
            const std::size_t off = std::size_t(r * cg + c) * kR * kTileCols;
            if (bq == 8)
              tc_tile_avx512<8>(a, b, std::size_t(Kq), q0, q1, cp, ch + off, tot + off, sum + off);
            else
              tc_tile_avx512<4>(a, b, std::size_t(Kq), q0, q1, cp, ch + off, tot + off, sum + off);
          }
        }
      }
      for (int r = 0; r < rg; ++r)
        for (int c = 0; c < cg; ++c) {
          const std::size_t off = std::size_t(r * cg + c) * kR * kTileCols;
          store_tile_avx512(ch + off, tot + off, sum + off, cp, K, s, i0 + r * kR, j0 + c * kTileCols, M, N, D);
        }
    }
    trim(state_buf);
  }
  trim(scratch.ap.e8);
  trim(scratch.ap.m);
  trim(scratch.ap.e);
  trim(scratch.ap.s);
  trim(scratch.bp);
}
#endif  // FP8EMU_HAVE_X86_KERNELS

// ------------------------------------------------------------------------------------------------
// Baseline path (the x86-64 baseline, AVX2 without FMA, other targets; AVX2 with FMA runs
// gemm_tc_fma.cpp): fp32 values and int32 exponents, 8 columns per vector (GCC vector extensions;
// two SSE halves). For each K-block the alignment exponent E of
// every output column is the max of ea + eb over the block's non-zero products and the running
// sum's exponent; each exact product a*b (at most 8 significant bits, at least 2^-25: an fp32) is
// scaled by 2^(13-E) (exact, or below 1 and then truncated to 0 anyway) and truncated toward zero by
// the float -> int conversion, which is the model's per-term magnitude truncation; the integer sum
// is cut to 14 significant bits by masking the low 10 mantissa bits of its (exact) fp32 value, then
// scaled back by 2^(E-13). Register tile: kRowsV rows x 8 columns, so each B vector loaded in the
// k loops serves kRowsV rows. B is stored in 8-column panels, zero padded (value 0, exponent
// kNoExponentInt), which never change a result.
#pragma GCC diagnostic ignored "-Wpsabi"  // the 32-byte vectors never cross a non-inlined call
typedef float v8f __attribute__((vector_size(32)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
constexpr int kLanes = 8;
constexpr int kRowsV = 4;
constexpr std::int32_t kNoExponentInt = -100000;  // never the maximum
constexpr int kColumnChunk = 128;

// Decoded operands: exact values (0 for zero and special codes) and unnormalised exponents
// (kNoExponentInt for them), in scratch reused across calls.
struct Decoded {
  const float* value;
  const std::int32_t* exponent;
};

struct DecodeTable {
  float value[256];
  std::int32_t exponent[256];
  bool special[256];
};

void decode_table_for_model(const FormatSpec& f, const CodeFields* t, DecodeTable& d) {
  for (int c = 0; c < 256; ++c) {
    const bool zero = t[c].m == 0 || t[c].special;
    d.value[c] = zero ? 0.0f : core::fp8_to_f32(std::uint8_t(c), f);
    d.exponent[c] = zero ? kNoExponentInt : t[c].e;
    d.special[c] = t[c].special;
  }
}

struct GenericScratch {
  std::vector<float> av, bv;
  std::vector<std::int32_t> ae, be;
};

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline v8i load8i(const std::int32_t* p) {
  v8i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// Rows i0 .. i0 + R - 1 (R <= kRowsV) of D.
template <int R>
__attribute__((always_inline)) inline void tc_rows_generic(int i0, int N, int Npad, int K, const Decoded& a,
                                                           const Decoded& bt, int block, Chain cp, float s, float* D) {
  alignas(32) float chain[R][kColumnChunk], total[R][kColumnChunk], sum[R][kColumnChunk];
  const v8i no_exp = {kNoExponentInt, kNoExponentInt, kNoExponentInt, kNoExponentInt,
                      kNoExponentInt, kNoExponentInt, kNoExponentInt, kNoExponentInt};
  const v8i exp_mask = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  for (int j0 = 0; j0 < Npad; j0 += kColumnChunk) {
    const int nv = std::min(kColumnChunk, Npad - j0) / kLanes;
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < kColumnChunk; ++j) chain[r][j] = total[r][j] = sum[r][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += block) {
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < kColumnChunk; ++j) chain_boundary(cp, k0, chain[r][j], total[r][j], sum[r][j]);
      const int k1 = std::min(K, k0 + block);
      const float* av[R];
      const std::int32_t* ae[R];
      for (int r = 0; r < R; ++r) {
        av[r] = a.value + std::size_t(i0 + r) * std::size_t(K);
        ae[r] = a.exponent + std::size_t(i0 + r) * std::size_t(K);
      }
      for (int v = 0; v < nv; ++v) {
        const std::size_t panel = std::size_t((j0 + v * kLanes) / kLanes) * std::size_t(K);
        v8i E[R];
        v8f c[R];
        for (int r = 0; r < R; ++r) {
          c[r] = load8(&chain[r][v * kLanes]);
          // Exponent of the running sum (a normal number or +0), or kNoExponentInt when it is zero.
          const v8i cb = (v8i)(c[r]) & 0x7FFFFFFF;
          const v8i ce = (cb >> 23) & exp_mask;
          E[r] = cb == 0 ? no_exp : ce - 127;
        }
        for (int k = k0; k < k1; ++k) {
          const v8i eb = load8i(bt.exponent + (panel + std::size_t(k)) * kLanes);
          for (int r = 0; r < R; ++r) {
            const v8i t = ae[r][k] + eb;
            E[r] = t > E[r] ? t : E[r];
          }
        }
        v8i S[R], inv_bits[R];
        v8f sc[R];
        for (int r = 0; r < R; ++r) {
          const v8i any = E[r] > kNoExponentInt / 2;
          const v8i Ei = any ? E[r] : E[r] * 0;
          sc[r] = (v8f)((127 + 13 - Ei) << 23);  // 2^(13 - E)
          inv_bits[r] = (127 - 13 + Ei) << 23;   // 2^(E - 13)
          S[r] = __builtin_convertvector(c[r] * sc[r], v8i);  // the running sum joins the alignment, truncated
        }
        for (int k = k0; k < k1; ++k) {
          const v8f vb = load8(bt.value + (panel + std::size_t(k)) * kLanes);
          for (int r = 0; r < R; ++r) S[r] += __builtin_convertvector((av[r][k] * vb) * sc[r], v8i);
        }
        for (int r = 0; r < R; ++r) {
          const v8f f = __builtin_convertvector(S[r], v8f);  // exact: |S| < 2^21
          const v8i cut_bits = (v8i)(f) & static_cast<std::int32_t>(0xFFFFFC00u);
          store8(&chain[r][v * kLanes], (v8f)(cut_bits) * (v8f)(inv_bits[r]));  // S = 0 gives +0
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float* d = D + std::size_t(i0 + r) * std::size_t(N);
      for (int j = j0; j < std::min(N, j0 + kColumnChunk); ++j) {
        const int jj = j - j0;
        d[j] = chain_result(cp, K, chain[r][jj], total[r][jj], sum[r][jj], s);
      }
    }
  }
}

void tc_rows_baseline(int i0, int rows, int N, int Npad, int K, const Decoded& a, const Decoded& bt, int block,
                      Chain cp, float s, float* D) {
  if (rows == kRowsV) return tc_rows_generic<kRowsV>(i0, N, Npad, K, a, bt, block, cp, s, D);
  for (int i = i0; i < i0 + rows; ++i) tc_rows_generic<1>(i, N, Npad, K, a, bt, block, cp, s, D);
}

void gemm_generic(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const CodeFields* ta,
                  const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp, float s,
                  float* D, char* bad_a, char* bad_b) {
  DecodeTable da, db;
  decode_table_for_model(fa, ta, da);
  decode_table_for_model(fb, tb, db);
  const int Npad = (N + kLanes - 1) / kLanes * kLanes;
  thread_local GenericScratch scratch;
  float* const av = grow(scratch.av, std::size_t(M) * std::size_t(K));
  std::int32_t* const ae = grow(scratch.ae, std::size_t(M) * std::size_t(K));
  // B in 8-column panels, [Npad / 8][K][8]: for one panel the K-loop reads consecutive vectors.
  float* const bv = grow(scratch.bv, std::size_t(Npad) * std::size_t(K));
  std::int32_t* const be = grow(scratch.be, std::size_t(Npad) * std::size_t(K));
  const bool par_decode = double(M + Npad) * K >= double(kParallelMinElements);
#pragma omp parallel if (par_decode)
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < M; ++i) {
      bool special = false;
      for (int k = 0; k < K; ++k) {
        const std::size_t x = std::size_t(i) * std::size_t(K) + std::size_t(k);
        const std::uint8_t c = A[x];
        av[x] = da.value[c];
        ae[x] = da.exponent[c];
        special |= da.special[c];
      }
      bad_a[i] = special;
    }
#pragma omp for schedule(static)
    for (int j = 0; j < Npad; ++j) {
      bool special = false;
      const std::size_t panel = std::size_t(j / kLanes) * std::size_t(K);
      for (int k = 0; k < K; ++k) {
        const std::uint8_t c = j < N ? B[std::size_t(j) * std::size_t(K) + std::size_t(k)] : std::uint8_t(0);
        const std::size_t x = (panel + std::size_t(k)) * kLanes + std::size_t(j % kLanes);
        bv[x] = db.value[c];
        be[x] = db.exponent[c];
        special |= db.special[c];
      }
      if (j < N) bad_b[j] = special;
    }
  }
  const Decoded a{av, ae}, bt{bv, be};
  const double work = double(M) * N * K;
  const int groups = (M + kRowsV - 1) / kRowsV;
#pragma omp parallel for schedule(dynamic, 1) if (work >= kParallelMinMacs)
  for (int g = 0; g < groups; ++g) {
    const int i0 = kRowsV * g, rows = std::min(kRowsV, M - i0);
    tc_rows_baseline(i0, rows, N, Npad, K, a, bt, block, cp, s, D);
  }
  trim(scratch.av);
  trim(scratch.ae);
  trim(scratch.bv);
  trim(scratch.be);
}

}  // namespace

void gemm_tensor_core(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const std::uint8_t* B,
                      const FormatSpec& fb, const AccumulationModel& model, int promotion_interval, int split_k,
                      float s, float* D) {
  if (M == 0 || N == 0) return;
  CodeFields ta[256], tb[256];
  decode_table(fa, ta);
  decode_table(fb, tb);
  const int range = std::max(core::split_k_range(K, split_k), 1);  // K itself without split-K
  const Chain cp{promotion_interval >= std::min(K, range) ? 0 : promotion_interval, range};
  const GemmIsa isa = gemm_isa();
  // Rows of A and of B with NaN or Inf codes are packed as zeros: their elements take the element
  // model afterwards, which applies the model's special-value rule. Every path flags them while
  // packing.
  std::vector<char> bad_a(static_cast<std::size_t>(M)), bad_b(static_cast<std::size_t>(N));
#ifdef FP8EMU_HAVE_X86_KERNELS
  if (isa == GemmIsa::kAvx512 && gemm_tc_fma512() &&
      gemm_tc_fma_avx512(M, N, K, A, fa, ta, B, fb, tb, model.block, cp, s, D, bad_a.data(), bad_b.data())) {
    // ran (the FMA kernel declines formats outside its packing rule: the int16 kernel takes them)
  } else if (isa == GemmIsa::kAvx512) {
    gemm_avx512(M, N, K, A, ta, B, tb, core::kMmaFractionBits - fa.mantissa_bits - fb.mantissa_bits, model.block, cp,
                s, D, bad_a.data(), bad_b.data());
  } else if (isa == GemmIsa::kAvx2 && gemm_tc_fma_avx2_supported() &&
             gemm_tc_fma_avx2(M, N, K, A, fa, ta, B, fb, tb, model.block, cp, s, D, bad_a.data(), bad_b.data())) {
    // ran (declined formats, outside the packing rule, take the baseline kernel)
  } else
#endif
  {
    gemm_generic(M, N, K, A, fa, ta, B, fb, tb, model.block, cp, s, D, bad_a.data(), bad_b.data());
  }
  bool any_bad = false;
  for (int i = 0; i < M; ++i) any_bad = any_bad || bad_a[std::size_t(i)];
  for (int j = 0; j < N; ++j) any_bad = any_bad || bad_b[std::size_t(j)];
  if (!any_bad) return;
  const double work = double(M) * N * K;
#pragma omp parallel for schedule(dynamic, 4) if (work >= kParallelMinMacs)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      if (bad_a[std::size_t(i)] || bad_b[std::size_t(j)])
        D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
            core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), fa, B + std::size_t(j) * std::size_t(K), fb, K,
                                  model, promotion_interval, split_k, s);
}

}  // namespace fp8emu::emu::detail
