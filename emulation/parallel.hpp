// Private: when the CPU kernels fork OpenMP threads. Small loops run on the calling thread: a
// fork/join costs microseconds unloaded and far more when other processes compete for the cores
// (waiting threads spin), while splitting never changes results (every kernel is thread-count
// invariant).
#pragma once

#include <algorithm>
#include <cstddef>

namespace fp8emu::emu::detail {

/// Elementwise loops with fewer elements than this run single-threaded.
inline constexpr std::ptrdiff_t kParallelMinElements = std::ptrdiff_t(1) << 15;
/// GEMMs with fewer multiply-adds than this run single-threaded.
inline constexpr double kParallelMinMacs = double(1 << 18);

/// A GEMM's cache tile, rows x cols of the output.
struct CacheTile {
  int rows, cols;
};

/// The cache tile of an M x N output run by `threads` threads: rows0 x cols0, unless that gives
/// fewer than four tiles per thread (a training layer's 64 x 256 product is one tile); then
/// narrower, then shorter tiles, halved and kept multiples of the register tile (reg_rows x
/// reg_cols), so that every thread has work. The tiling never changes a result: each element is
/// summed over K in the same order on any tile.
inline CacheTile cache_tile(int M, int N, int rows0, int cols0, int reg_rows, int reg_cols, int threads) {
  const auto count = [&](int r, int c) { return ((M + r - 1) / r) * ((N + c - 1) / c); };
  CacheTile t{rows0, cols0};
  while (count(t.rows, t.cols) < 4 * threads && t.cols > reg_cols && t.cols / 2 < N)
    t.cols = std::max(reg_cols, t.cols / 2 / reg_cols * reg_cols);
  while (count(t.rows, t.cols) < 4 * threads && t.rows > reg_rows && t.rows / 2 < M)
    t.rows = std::max(reg_rows, t.rows / 2 / reg_rows * reg_rows);
  return t;
}

/// Runs body(offset, count of 8-blocks) over n elements in chunks of 4096 (OpenMP for large n),
/// then tail(i) for the last n % 8.
template <class Body, class Tail>
void for_blocks(std::size_t n, Body body, Tail tail) {
  constexpr std::size_t kChunk = 4096;
  const std::size_t blocks = n / 8;
  const std::ptrdiff_t chunks = std::ptrdiff_t((blocks * 8 + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= std::size_t(kParallelMinElements) / 4)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t lo = std::size_t(c) * kChunk;
    const std::size_t hi = std::min(lo + kChunk, blocks * 8);
    body(lo, (hi - lo) / 8);
  }
  for (std::size_t i = blocks * 8; i < n; ++i) tail(i);
}

}  // namespace fp8emu::emu::detail
