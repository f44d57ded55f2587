// CPU GEMMs in a fixed accumulation order (see include/fp8emu/emulation/gemm.hpp).
#include "fp8emu/emulation/gemm.hpp"

#include <algorithm>
#include <cstring>
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

// Register-blocked fp32 kernel: 8 rows of C times one 8-column panel of B, the 8 accumulators
// (one vector each) kept in registers for the whole K. Each element is still c = RN(c + RN(a*b))
// in k = 0..K-1 order, with no FMA (-ffp-contract=off; the AVX2 clone has no FMA), so the results
// are those of the documented order. B is packed in panels [ceil(N/8)][K][8], zero padded.
#pragma GCC diagnostic ignored "-Wpsabi"  // the 32-byte vectors never cross a non-inlined call
typedef float v8f __attribute__((vector_size(32)));
constexpr int kLanes = 8, kRows = 8;

std::vector<float> pack_panels(int K, int N, const float* B /*[K, N]*/) {
  const int panels = (N + kLanes - 1) / kLanes;
  std::vector<float> p(std::size_t(panels) * std::size_t(K) * kLanes, 0.0f);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j)
      p[(std::size_t(j / kLanes) * std::size_t(K) + std::size_t(k)) * kLanes + std::size_t(j % kLanes)] =
          B[std::size_t(k) * std::size_t(N) + std::size_t(j)];
  return p;
}

template <int R>
__attribute__((always_inline)) inline void panel_rows(int i0, int N, int K, const float* A, const float* panels,
                                                      float* C) {
  const int np = (N + kLanes - 1) / kLanes;
  for (int p = 0; p < np; ++p) {
    v8f c[R];
    for (int r = 0; r < R; ++r) c[r] = v8f{} * 0.0f;
    const float* bp = panels + std::size_t(p) * std::size_t(K) * kLanes;
    for (int k = 0; k < K; ++k) {
      v8f b;
      std::memcpy(&b, bp + std::size_t(k) * kLanes, sizeof b);
      for (int r = 0; r < R; ++r) c[r] += A[std::size_t(i0 + r) * std::size_t(K) + std::size_t(k)] * b;
    }
    const int j0 = p * kLanes, nj = std::min(kLanes, N - j0);
    for (int r = 0; r < R; ++r) {
      float out[kLanes];
      std::memcpy(out, &c[r], sizeof out);
      std::copy(out, out + nj, C + std::size_t(i0 + r) * std::size_t(N) + std::size_t(j0));
    }
  }
}

FP8EMU_TARGET_CLONES void panel_rows8(int i0, int N, int K, const float* A, const float* panels, float* C) {
  panel_rows<kRows>(i0, N, K, A, panels, C);
}
FP8EMU_TARGET_CLONES void panel_rows1(int i0, int N, int K, const float* A, const float* panels, float* C) {
  panel_rows<1>(i0, N, K, A, panels, C);
}

// C [M, N] = A [M, K] B, with B given as panels.
void gemm_panels(int M, int N, int K, const float* A, const float* panels, float* C) {
  const int groups = (M + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (double(M) * N * K >= detail::kParallelMinMacs)
  for (int g = 0; g < groups; ++g) {
    const int i0 = g * kRows;
    if (i0 + kRows <= M) {
      panel_rows8(i0, N, K, A, panels, C);
    } else {
      for (int i = i0; i < M; ++i) panel_rows1(i, N, K, A, panels, C);
    }
  }
}

}  // namespace

void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* C) {
  if (M == 0 || N == 0) return;
  const std::vector<float> panels = pack_panels(K, N, B);
  gemm_panels(M, N, K, A, panels.data(), C);
}

void transpose(int rows, int cols, const float* in, float* out) {
  transpose_impl(rows, cols, in, out);
}

void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) {
  transpose_impl(rows, cols, in, out);
}

void gemm_fp8_nn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                 const std::uint8_t* B, Format fb, float scale_inv_b, float* D) {
  // Both operands decoded once (exact), B straight into panels.
  if (M == 0 || N == 0) return;
  const float* ta = decode_table(fa);
  const float* tb = decode_table(fb);
  std::vector<float> a(std::size_t(M) * std::size_t(K));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = ta[A[i]];
  const int panels_n = (N + kLanes - 1) / kLanes;
  std::vector<float> panels(std::size_t(panels_n) * std::size_t(K) * kLanes, 0.0f);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j)
      panels[(std::size_t(j / kLanes) * std::size_t(K) + std::size_t(k)) * kLanes + std::size_t(j % kLanes)] =
          tb[B[std::size_t(k) * std::size_t(N) + std::size_t(j)]];
  gemm_panels(M, N, K, a.data(), panels.data(), D);
  const float s = scale_inv_a * scale_inv_b;
  const std::ptrdiff_t n = std::ptrdiff_t(M) * N;
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements)
  for (std::ptrdiff_t i = 0; i < n; ++i) D[i] *= s;
}

}  // namespace fp8emu::emu
