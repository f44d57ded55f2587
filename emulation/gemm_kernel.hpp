// Private: the fp32-sequential row kernel (used by the block-scaled GEMM) and the target-clones
// macro of the CPU GEMMs (see gemm.hpp for the accumulation order).
#pragma once

#include <algorithm>
#include <cstddef>

#include "parallel.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/format/format_spec.hpp"

#include <cstdint>

namespace fp8emu::emu::detail {


// Rows of C processed together so that each row of B is loaded once per group. The order of the
// additions into each C element is k = 0..K-1 regardless of grouping.
constexpr int kRowGroup = 4;

// Compiled for AVX2 and for the x86-64 baseline, chosen at load time (GCC target_clones). Both
// clones compute the same bits: separate IEEE multiplies and adds (-ffp-contract=off, and the AVX2
// clone has no FMA), in the same order.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FP8EMU_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FP8EMU_TARGET_CLONES
#endif

// Rows [i0, i0+rows) of A times B, written to `out` (Shape [rows, N], row-major), where a(i, k)
// yields the fp32 value of A[i,k]. Inlined into the callers' target clones.
template <class AValue>
__attribute__((always_inline)) inline void gemm_rows(int i0, int rows, int N, int K, AValue a, const float* B, float* out) {
  float* c[kRowGroup];
  for (int r = 0; r < kRowGroup; ++r) c[r] = out + std::size_t(std::min(r, rows - 1)) * N;
  for (int r = 0; r < rows; ++r) std::fill(c[r], c[r] + N, 0.0f);
  if (rows == kRowGroup) {
    for (int k = 0; k < K; ++k) {
      const float a0 = a(i0, k), a1 = a(i0 + 1, k), a2 = a(i0 + 2, k), a3 = a(i0 + 3, k);
      const float* b = B + std::size_t(k) * N;
      float* __restrict c0 = c[0];
      float* __restrict c1 = c[1];
      float* __restrict c2 = c[2];
      float* __restrict c3 = c[3];
      for (int j = 0; j < N; ++j) {
        const float bj = b[j];
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
  } else {
    for (int r = 0; r < rows; ++r) {
      float* __restrict cr = c[r];
      for (int k = 0; k < K; ++k) {
        const float ak = a(i0 + r, k);
        const float* b = B + std::size_t(k) * N;
        for (int j = 0; j < N; ++j) cr[j] += ak * b[j];
      }
    }
  }
}

/// Replaces every NaN of D [n] by 0x7FFFFFFF (CUDA's canonical NaN). The FP8 GEMMs' kernels make
/// different NaN payloads (an FMA returns the accumulator's NaN where a multiply then an add returns
/// the product's default NaN); their outputs carry this one NaN on every path.
void canonical_nans(float* D, std::size_t n);

/// True when the product of every finite value of table ta [256] with every finite value of tb
/// [256] is an fp32 (at most 24 significant bits, in fp32's range; a sufficient test on each table's
/// widest significand, lowest bit and largest magnitude): then RN(c + RN(a*b)) = RN(c + a*b) and
/// the GEMM kernels sum with FMAs.
bool products_exact_fp32(const float* ta, const float* tb);
/// products_exact_fp32 on the formats' decode tables (checked as decode_table does). True for every
/// pair of the FP8, FP6 and FP4 formats.
bool products_exact_fp32(Format fa, Format fb);

/// D [M, N] = RN(acc * RN(scale_inv_a * scale_inv_b)), acc the fp32 model's sum over k of the exact
/// products of row i of A [M, K] and row j of B [N, K] (TN layout) with promotion every `promotion`
/// K-elements (0: none) and split-K ranges of `range` (core::split_k_range; >= K: no split), as
/// core::dot_split_k. Returns false, with D untouched, where the path gemm_isa() names has no kernel
/// for it (promotion or split-K on the baseline path).
bool gemm_fp8_tn_fp32(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                      const std::uint8_t* B, Format fb, float scale_inv_b, int promotion, int range, float* D);

/// emu::gemm_fp8_block_tn (arguments checked by the caller) on the register-tiled fp32 kernels: each
/// K-block's fp32 partial (k ascending from +0), times RN(sa * sb), added to the element's fp32 total
/// in block order from +0. Returns false, with D untouched, on the baseline path (no kernel).
bool gemm_fp8_block_tn_wide(const BlockQuantized& A, const BlockQuantized& B, float* D);

}  // namespace fp8emu::emu::detail
