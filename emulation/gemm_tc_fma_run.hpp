// Private: what the AVX2 and AVX-512 tensor-core FMA kernels share (gemm_tc_fma.cpp,
// gemm_tc_fma512.cpp): MXCSR's rounding switch, the store of a register tile's chain results, and
// the driver that packs A and B and runs the cache tiles with OpenMP over chunks of K. The arithmetic and its exactness argument are in gemm_tc_fma.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "gemm_tc_chain.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>

namespace fp8emu::emu::detail::tc_fma {

// Exponent bytes: e + kBiasA (A) or e + kBiasB (B) for a non-zero code, 0 for zeros, NaN and Inf.
constexpr int kBiasA = 63, kBiasB = 64;

// What the vector packing needs of a format, checked against its per-code fields: the special codes
// are exactly those with |code| >= smin (none when smin = 128), and 0x80 when special80; a code is
// non-zero exactly when |code| != 0 and it is not special (the table's m != 0), negative exactly
// when it is non-zero with the sign bit set. Every FP8 operand format follows the rule (a test
// checks it); both FMA kernels decline a format that does not, and the caller runs another kernel. The per-code tables for the gathers:
// the value (A's times 1 + 2^-16, exact: at most 20 significant bits; 0 for zeros, NaN and Inf)
// and the exponent as a 32-bit word (B: the byte e + 64; A: the byte e + 63 in every byte of the
// word; 0 for zeros, NaN and Inf; gemm_tc_fma.cpp has why).
struct VecRule {
  bool ok = false;
  int smin = 128;
  bool special80 = false;
  alignas(64) float value[256];
  alignas(64) std::uint32_t e32[256];
};

inline void vec_rule(const CodeFields* t, bool a_side, VecRule& v) {
  v.smin = 128;
  for (int c = 0; c < 128; ++c)
    if (t[c].special || (c != 0 && t[c | 0x80].special)) {  // 0x80 apart: special80
      v.smin = c;
      break;
    }
  v.special80 = t[0x80].special;
  v.ok = true;
  for (int c = 0; c < 256; ++c) {
    const int mag = c & 0x7F;
    const bool special = mag >= v.smin || (c == 0x80 && v.special80);
    const bool nonzero = mag != 0 && !special;
    const bool table_nonzero = t[c].m != 0 && !t[c].special;
    v.ok = v.ok && t[c].special == special && table_nonzero == nonzero &&
           (table_nonzero && t[c].s < 0) == (nonzero && (c & 0x80) != 0);
    const std::uint32_t byte = nonzero ? std::uint32_t(t[c].e + (a_side ? kBiasA : kBiasB)) : 0u;
    v.e32[c] = a_side ? byte * 0x01010101u : byte;
  }
}

// The value table of vec_rule (only for formats it accepts: the values need the FormatSpec).
inline void vec_values(const FormatSpec& f, const CodeFields* t, bool a_side, VecRule& v) {
  for (int c = 0; c < 256; ++c) {
    const float x = t[c].m == 0 || t[c].special ? 0.0f : core::fp8_to_f32(std::uint8_t(c), f);
    v.value[c] = a_side ? x * (1.0f + 1.0f / 65536.0f) : x;
  }
}

// One block's bits (block 16 or 32) at offset sh of 64-bit masks of 64 codes.
inline std::uint32_t block_bits(std::uint64_t m, int sh, int block) {
  return std::uint32_t((m >> sh) & ((std::uint64_t(1) << block) - 1));
}

constexpr int kMc = 72;   // rows per cache tile (rounded down to a multiple of the register tile's rows)
constexpr int kNc = 256;  // columns per cache tile (a multiple of every register tile's columns)
constexpr int kKc = 256;  // K per chunk (a multiple of every block)

// MXCSR's rounding control: round toward zero (RC = 11) or the caller's mode, with a compiler
// barrier on each side. The barrier orders memory accesses only (there is no -frounding-math): the
// kernels are written so that every rounding operation depends on a load made after the switch
// that sets its mode, and its result reaches a store before the next switch.
inline void set_csr(unsigned csr) {
  __asm__ volatile("" ::: "memory");
  _mm_setcsr(csr);
  __asm__ volatile("" ::: "memory");
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

// The packing, cache tiles and OpenMP of both paths. Kernel provides kR x kTileCols register
// tiles, a Packed scratch type (whose value and exponent panels av, bv, ae, be are released after
// the call when large), a Context (what its packing needs beyond the operands), View
// pack(context, M, N, K, Mp, Np, Kp, block, A, fa, ta, B, fb, tb, Packed&, bad_a, bad_b) and
// tile<BQ>(view, pa, pb, q_begin, q_end, cp, ch, tot, sum) running one register tile over quads
// [q_begin, q_end) of K with blocks of BQ quads (8: Hopper's 32 products, 4: Ada's 16).
template <class Kernel>
void run(const typename Kernel::Context& context, int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa,
         const CodeFields* ta, const std::uint8_t* B, const FormatSpec& fb, const CodeFields* tb, int block, Chain cp,
         float s, float* D, char* bad_a, char* bad_b) {
  constexpr int kR = Kernel::kR, kTileCols = Kernel::kTileCols;
  const int Kp = std::max(1, (K + block - 1) / block) * block;  // whole blocks
  const int Kq = Kp / 4;
  const int Mp = (M + kR - 1) / kR * kR, Np = (N + kTileCols - 1) / kTileCols * kTileCols;
  thread_local typename Kernel::Packed packed;
  const typename Kernel::View w =
      Kernel::pack(context, M, N, K, Mp, Np, Kp, block, A, fa, ta, B, fb, tb, packed, bad_a, bad_b);
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
              Kernel::template tile<8>(w, pa, pb, q0, q1, cp, ch + off, tot + off, sum + off);
            else
              Kernel::template tile<4>(w, pa, pb, q0, q1, cp, ch + off, tot + off, sum + off);
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

}  // namespace fp8emu::emu::detail::tc_fma

#endif
