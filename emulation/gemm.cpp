// CPU GEMMs in a fixed accumulation order (see include/fp8emu/emulation/gemm.hpp).
#include "fp8emu/emulation/gemm.hpp"

#include <algorithm>
#include <vector>

#include "fp8emu/emulation/quantize.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

template <class T>
void transpose_impl(int rows, int cols, const T* in, T* out) {
  constexpr int kTile = 32;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows) * cols >= detail::kParallelMinElements)
  for (int r0 = 0; r0 < rows; r0 += kTile)
    for (int c0 = 0; c0 < cols; c0 += kTile)
      for (int r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int c = c0; c < std::min(cols, c0 + kTile); ++c)
          out[std::size_t(c) * rows + r] = in[std::size_t(r) * cols + c];
}

void rows_f32(int i0, int rows, int N, int K, const float* A, const float* B, float* out) {
  detail::gemm_rows(i0, rows, N, K, [A, K](int i, int k) { return A[std::size_t(i) * K + k]; }, B, out);
}

void rows_fp8(int i0, int rows, int N, int K, const std::uint8_t* A, const float* table, const float* B,
              float* out) {
  detail::gemm_rows(i0, rows, N, K, [A, K, table](int i, int k) { return table[A[std::size_t(i) * K + k]]; }, B, out);
}

}  // namespace

void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* C) {
  detail::gemm_nn(M, N, K, [=](int i0, int rows, float* out) { rows_f32(i0, rows, N, K, A, B, out); }, C);
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
  const float* bp = b.data();
  detail::gemm_nn(M, N, K, [=](int i0, int rows, float* out) { rows_fp8(i0, rows, N, K, A, ta, bp, out); }, D);
  const float s = scale_inv_a * scale_inv_b;
  const std::ptrdiff_t n = std::ptrdiff_t(M) * N;
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < n; ++i) D[i] *= s;
}

}  // namespace fp8emu::emu
