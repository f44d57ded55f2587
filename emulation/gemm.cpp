// CPU GEMMs in a fixed accumulation order (see include/fp8emu/emulation/gemm.hpp).
#include "fp8emu/emulation/gemm.hpp"

#include <algorithm>
#include <vector>

#include "fp8emu/emulation/quantize.hpp"

namespace fp8emu::emu {
namespace {

// Rows of C processed together so that each row of B is loaded once per group. The order of the
// additions into each C element is k = 0..K-1 regardless of grouping.
constexpr int kRowGroup = 4;

// C rows [i0, i0+rows) = A rows * B, where a(i, k) yields the fp32 value of A[i,k].
template <class AValue>
void gemm_rows(int i0, int rows, int N, int K, AValue a, const float* B, float* C) {
  float* c[kRowGroup];
  for (int r = 0; r < kRowGroup; ++r) c[r] = C + std::size_t(i0 + std::min(r, rows - 1)) * N;
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
#pragma omp parallel for schedule(static)
  for (int g = 0; g < groups; ++g) {
    const int i0 = g * kRowGroup;
    gemm_rows(i0, std::min(kRowGroup, M - i0), N, K, a, B, C);
  }
}

template <class T>
void transpose_impl(int rows, int cols, const T* in, T* out) {
  constexpr int kTile = 32;
#pragma omp parallel for schedule(static)
  for (int r0 = 0; r0 < rows; r0 += kTile)
    for (int c0 = 0; c0 < cols; c0 += kTile)
      for (int r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int c = c0; c < std::min(cols, c0 + kTile); ++c)
          out[std::size_t(c) * rows + r] = in[std::size_t(r) * cols + c];
}

}  // namespace

void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* C) {
  gemm_nn(M, N, K, [A, K](int i, int k) { return A[std::size_t(i) * K + k]; }, B, C);
}

void transpose(int rows, int cols, const float* in, float* out) {
  transpose_impl(rows, cols, in, out);
}

void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) {
  transpose_impl(rows, cols, in, out);
}

void gemm_fp8_nn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                 const std::uint8_t* B, Format fb, float scale_inv_b, float* D) {
  // B is decoded once (exact); A is decoded on the fly through the 256-entry table.
  std::vector<float> b(std::size_t(K) * N);
  const float* tb = decode_table(fb);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = tb[B[i]];
  const float* ta = decode_table(fa);
  gemm_nn(M, N, K, [A, K, ta](int i, int k) { return ta[A[std::size_t(i) * K + k]]; }, b.data(), D);
  const float s = scale_inv_a * scale_inv_b;
  const std::ptrdiff_t n = std::ptrdiff_t(M) * N;
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < n; ++i) D[i] *= s;
}

}  // namespace fp8emu::emu
