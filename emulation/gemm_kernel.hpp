// Private: the fp32-sequential GEMM kernel shared by the CPU GEMMs (see gemm.hpp for the order).
#pragma once

#include <algorithm>
#include <cstddef>

#include "parallel.hpp"

namespace fp8emu::emu::detail {


// Rows of C processed together so that each row of B is loaded once per group. The order of the
// additions into each C element is k = 0..K-1 regardless of grouping.
constexpr int kRowGroup = 4;

// Rows [i0, i0+rows) of A times B, written to `out` (Shape [rows, N], row-major), where a(i, k)
// yields the fp32 value of A[i,k].
template <class AValue>
void gemm_rows(int i0, int rows, int N, int K, AValue a, const float* B, float* out) {
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

template <class AValue>
void gemm_nn(int M, int N, int K, AValue a, const float* B, float* C) {
  const int groups = (M + kRowGroup - 1) / kRowGroup;
#pragma omp parallel for schedule(static) if (double(M) * N * K >= kParallelMinMacs)
  for (int g = 0; g < groups; ++g) {
    const int i0 = g * kRowGroup;
    gemm_rows(i0, std::min(kRowGroup, M - i0), N, K, a, B, C + std::size_t(i0) * N);
  }
}

}  // namespace fp8emu::emu::detail
