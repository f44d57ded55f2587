// Matrix transposes of fp32 values and of 8-bit codes (emu::transpose, include/fp8emu/emulation/gemm.hpp).
//
// Pure data movement: out[c * rows + r] = in[r * cols + c], every path the same bytes. The matrix is
// cut into 64 x 64 cache tiles (16 KiB of fp32 in and out, held in L1 and L2 while the tile is
// moved), run by OpenMP over tile rows; inside a tile, fp32 moves in 8 x 8 register blocks (AVX:
// unpack, shuffle and 128-bit lane permutes, when the CPU has AVX2 and FP8EMU_GEMM_ISA allows it)
// or 4 x 4 blocks (SSE, the x86-64 baseline), codes in 16 x 16 blocks (SSE2 byte interleaves,
// bulk_kernels.hpp); a tile's ragged edge moves one element at a time.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "bulk_kernels.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "gemm_isa.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {
namespace {

constexpr int kTile = 64;

template <class T>
void transpose_scalar(const T* in, std::size_t ld_in, T* out, std::size_t ld_out, int r0, int r1, int c0, int c1) {
  for (int r = r0; r < r1; ++r)
    for (int c = c0; c < c1; ++c) out[std::size_t(c) * ld_out + std::size_t(r)] = in[std::size_t(r) * ld_in + std::size_t(c)];
}

#if defined(__x86_64__) || defined(_M_X64)
inline void block4_sse(const float* in, std::size_t ld_in, float* out, std::size_t ld_out) {
  __m128 r0 = _mm_loadu_ps(in), r1 = _mm_loadu_ps(in + ld_in), r2 = _mm_loadu_ps(in + 2 * ld_in),
         r3 = _mm_loadu_ps(in + 3 * ld_in);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(out, r0);
  _mm_storeu_ps(out + ld_out, r1);
  _mm_storeu_ps(out + 2 * ld_out, r2);
  _mm_storeu_ps(out + 3 * ld_out, r3);
}

__attribute__((target("avx"))) inline void block8_avx(const float* in, std::size_t ld_in, float* out,
                                                       std::size_t ld_out) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + std::size_t(i) * ld_in);
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved: (a0 b0 a1 b1 | a4 b4 a5 b5), ...
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // quads of rows: (a0 b0 c0 d0 | a4 b4 c4 d4), ...
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {  // the 128-bit halves of rows 0-3 and 4-7 joined: columns i and i + 4
    _mm256_storeu_ps(out + std::size_t(i) * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + std::size_t(i + 4) * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

template <int B, void (*Block)(const float*, std::size_t, float*, std::size_t)>
void tile_f32(const float* in, std::size_t ld_in, float* out, std::size_t ld_out, int r0, int r1, int c0, int c1) {
  const int rb = r0 + (r1 - r0) / B * B, cb = c0 + (c1 - c0) / B * B;
  for (int r = r0; r < rb; r += B)
    for (int c = c0; c < cb; c += B)
      Block(in + std::size_t(r) * ld_in + std::size_t(c), ld_in, out + std::size_t(c) * ld_out + std::size_t(r), ld_out);
  transpose_scalar(in, ld_in, out, ld_out, r0, r1, cb, c1);
  transpose_scalar(in, ld_in, out, ld_out, rb, r1, c0, cb);
}

__attribute__((target("avx"))) void tile_f32_avx(const float* in, std::size_t ld_in, float* out, std::size_t ld_out,
                                                  int r0, int r1, int c0, int c1) {
  tile_f32<8, block8_avx>(in, ld_in, out, ld_out, r0, r1, c0, c1);
}
#endif

template <class T, class Tile>
void transpose_tiled(int rows, int cols, const T* in, T* out, Tile tile) {
  const int row_tiles = (rows + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows) * cols >= detail::kParallelMinElements)
  for (int t = 0; t < row_tiles; ++t) {
    const int r0 = t * kTile, r1 = std::min(rows, r0 + kTile);
    for (int c0 = 0; c0 < cols; c0 += kTile) tile(in, std::size_t(cols), out, std::size_t(rows), r0, r1, c0, std::min(cols, c0 + kTile));
  }
}

}  // namespace

void transpose(int rows, int cols, const float* in, float* out) {
#if defined(__x86_64__) || defined(_M_X64)
  if (detail::gemm_isa() != detail::GemmIsa::kBaseline)
    return transpose_tiled(rows, cols, in, out, tile_f32_avx);
  transpose_tiled(rows, cols, in, out, tile_f32<4, block4_sse>);
#else
  transpose_tiled(rows, cols, in, out, transpose_scalar<float>);
#endif
}

void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) {
  transpose_tiled(rows, cols, in, out,
                  [](const std::uint8_t* src, std::size_t ld_in, std::uint8_t* dst, std::size_t ld_out, int r0, int r1,
                     int c0, int c1) {
                    constexpr int B = int(detail::kTransposeBlock);
                    const int rb = r0 + (r1 - r0) / B * B, cb = c0 + (c1 - c0) / B * B;
                    for (int r = r0; r < rb; r += B)
                      for (int c = c0; c < cb; c += B)
                        detail::transpose_block(src + std::size_t(r) * ld_in + std::size_t(c), ld_in,
                                                dst + std::size_t(c) * ld_out + std::size_t(r), ld_out);
                    transpose_scalar(src, ld_in, dst, ld_out, r0, r1, cb, c1);
                    transpose_scalar(src, ld_in, dst, ld_out, rb, r1, c0, cb);
                  });
}

}  // namespace fp8emu::emu
