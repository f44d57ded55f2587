// GPU twins of the emulation kernels: the elementwise and block-scaled casts, amax, dequantize and
// transpose kernels and their launchers (cuda/launch.hpp), which the GPU device (device_ops.cu),
// the device-pointer API (device.cpp, include/fp8emu/cuda/device.hpp) and `fp8emu bench gpu` run.
// The per-element arithmetic is the element layer of include/fp8emu/core (cast.hpp, fp32_ops.hpp), the
// same functions the CPU emulator calls; this file only maps threads onto it.
//
// Reductions: counts are integer sums and the amax is a max over the bits of |x| (core::amax_bits),
// so both are exact and independent of the thread mapping and of the order of the atomics.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "device_buffer.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/util/error.hpp"
#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/epilogue.hpp"
#include "fp8emu/core/hadamard.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/cuda/backend.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "launch.hpp"

namespace fp8emu::cuda::detail {
namespace {

constexpr int kThreads = kThreads1d;  // threads per block of the 1-D kernels (launch.hpp)

unsigned int blocks_for(std::size_t work) { return blocks_1d(work); }

// The format record by value, for a format known at compile time.
template <Format F>
__device__ __forceinline__ FormatSpec spec_value() {
  static_assert(F == Format::kE4M3 || F == Format::kE5M2, "the FP8 cast kernels are instantiated for OCP FP8");
  if constexpr (F == Format::kE4M3) {
    return kSpecE4M3;
  } else {
    return kSpecE5M2;
  }
}

// Warp-level sums and maxima, then one atomic per warp. Every lane of the warp must call them.
__device__ __forceinline__ void warp_add_to(unsigned long long v, unsigned long long* dst) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  if ((threadIdx.x & 31u) == 0 && v != 0) atomicAdd(dst, v);
}
__device__ __forceinline__ void warp_max_to(unsigned int v, unsigned int* dst) {
  for (int o = 16; o > 0; o >>= 1) v = core::max_u32(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  if ((threadIdx.x & 31u) == 0 && v != 0) atomicMax(dst, v);
}
__device__ __forceinline__ void commit_counts(const core::CastCounts& c, CastTotals* t) {
  warp_add_to(c.saturated, &t->saturated);
  warp_add_to(c.underflow, &t->underflow);
  warp_add_to(c.nan, &t->nan);
}

__global__ void amax_kernel(const float* __restrict__ x, std::size_t n, unsigned int* amax_bits) {
  unsigned int m = 0;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    m = core::max_u32(m, core::amax_bits(x[i]));
  warp_max_to(m, amax_bits);
}

// TE NVFP4's random Hadamard transform along rows (launch.hpp, launch_rht_rows): one output element
// per thread per iteration, each core::rht16_element of its 16-row group.
__global__ void rht_rows_kernel(const float* __restrict__ x, int rows, int cols, std::uint16_t sign_mask,
                                float* __restrict__ out) {
  const std::size_t n = std::size_t(rows) * std::size_t(cols), stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::size_t r = i / std::size_t(cols), c = i % std::size_t(cols);
    const std::size_t r0 = r - r % core::kRhtSize;
    out[i] = r0 + core::kRhtSize <= std::size_t(rows)
                 ? core::rht16_element(x + r0 * std::size_t(cols) + c, std::size_t(cols), int(r - r0), sign_mask)
                 : x[i];  // the tail past the last whole group is not transformed
  }
}

// The GEMM epilogue (launch.hpp, launch_gemm_epilogue): one element per thread per iteration; t and D
// may alias (fp32 output in place), so neither is __restrict__; C never overlaps D here (the caller
// copies an overlapping C first), but is left unrestricted too.
__global__ void gemm_epilogue_kernel(int M, int N, const float* t, float alpha, float beta,
                                     const float* C, const float* __restrict__ bias,
                                     emu::GemmOutput output, FormatSpec fo, float d_scale, void* D,
                                     unsigned int* amax_bits) {
  const std::size_t n = std::size_t(M) * std::size_t(N);
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  unsigned int m = 0;
  core::CastCounts counts;  // not reported: emu::gemm_fp8_tn's FP8 output keeps no counts
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::size_t j = i % std::size_t(N);
    const float v = core::gemm_epilogue_element(t[i], alpha, beta, beta != 0.0f ? C[i] : 0.0f, bias != nullptr,
                                                bias != nullptr ? bias[j] : 0.0f);
    m = core::max_u32(m, core::amax_bits(v));
    switch (output) {
      case emu::GemmOutput::kFp32: static_cast<float*>(D)[i] = v; break;
      case emu::GemmOutput::kBf16:
        static_cast<std::uint16_t*>(D)[i] = core::f32_bits_to_bf16_rne(core::f32_to_bits(v), core::Bf16Nan::kQuietKeepSign);
        break;
      case emu::GemmOutput::kFp16: static_cast<std::uint16_t*>(D)[i] = core::f32_bits_to_half_rne(core::f32_to_bits(v)); break;
      case emu::GemmOutput::kFp8: static_cast<std::uint8_t*>(D)[i] = core::cast_element(v, d_scale, fo, counts); break;
    }
  }
  if (amax_bits) warp_max_to(m, amax_bits);  // the same pointer for every thread: no lane skips it alone
}

// emu::quantize. With `vec`, groups of 4 elements are read as float4 and written as one 32-bit word
// (x 16-byte and q 4-byte aligned); the remaining n % 4 elements (or all, without `vec`) one by one.
template <Format F>
__global__ void quantize_kernel(const float* __restrict__ x, std::size_t n, float scale, std::uint8_t* __restrict__ q,
                                bool vec, CastTotals* totals) {
  const FormatSpec f = spec_value<F>();
  core::CastCounts c;
  unsigned int m = 0;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t groups = vec ? n / 4 : 0;
  for (std::size_t g = tid; g < groups; g += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[g];
    const std::uint32_t c0 = core::cast_element(v.x, scale, f, c), c1 = core::cast_element(v.y, scale, f, c);
    const std::uint32_t c2 = core::cast_element(v.z, scale, f, c), c3 = core::cast_element(v.w, scale, f, c);
    reinterpret_cast<std::uint32_t*>(q)[g] = c0 | (c1 << 8) | (c2 << 16) | (c3 << 24);
    m = core::max_u32(core::max_u32(m, core::amax_bits(v.x)), core::amax_bits(v.y));
    m = core::max_u32(core::max_u32(m, core::amax_bits(v.z)), core::amax_bits(v.w));
  }
  for (std::size_t i = groups * 4 + tid; i < n; i += stride) {
    const float v = x[i];
    q[i] = core::cast_element(v, scale, f, c);
    m = core::max_u32(m, core::amax_bits(v));
  }
  commit_counts(c, totals);
  warp_max_to(m, &totals->amax_bits);
}

template <Format F>
__global__ void dequantize_kernel(const std::uint8_t* __restrict__ q, std::size_t n, float scale_inv,
                                  float* __restrict__ y) {
  const FormatSpec f = spec_value<F>();
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = core::dequantize_element(q[i], scale_inv, f);
}

// Device::cast_transpose (TE cast_transpose.cu): one read of x. A block of 32 x 8 threads owns
// 32-row x 128-column tiles: each thread casts 4 consecutive elements of a row (one float4 on the
// vectorised path), writes their codes as one 32-bit word of the row-wise copy and into a shared
// tile; after the barrier the tile leaves as the column-wise copy, 4 consecutive rows per 32-bit
// word. Full tiles take the vectorised path when x is 16-byte aligned, the outputs 4-byte aligned
// and rows and cols are multiples of 4; edges and other shapes go element by element. The codes
// are core::cast_element's, the amax a max of bits and the counts sums, so any order gives the
// same results.
// The input may also be bf16 (bits), widened exactly to fp32 before the cast, as TE casts a bf16
// tensor; the vectorised path then loads 4 of them as 8 bytes.
constexpr int kCtRows = 32, kCtCols = 128, kCtThreadRows = 8;
__device__ __forceinline__ float ct_load(const float* p, std::size_t i) { return p[i]; }
__device__ __forceinline__ float ct_load(const std::uint16_t* p, std::size_t i) {
  return core::bits_to_f32(core::bf16_to_f32_bits(p[i]));
}
__device__ __forceinline__ void ct_load4(const float* p, float (&v)[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
}
__device__ __forceinline__ void ct_load4(const std::uint16_t* p, float (&v)[4]) {
  const uint2 q = *reinterpret_cast<const uint2*>(p);  // little-endian: element 0 in the low half
  auto widen = [](std::uint32_t h) { return core::bits_to_f32(h << 16); };
  v[0] = widen(q.x & 0xFFFFu);
  v[1] = widen(q.x >> 16);
  v[2] = widen(q.y & 0xFFFFu);
  v[3] = widen(q.y >> 16);
}
// The codes of 4 consecutive elements as one 32-bit word (element 0 in the low byte, as the 4 bytes
// lie in memory), each core::cast_element(v[j], s[j]); the counts are sums, so any order.
__device__ __forceinline__ std::uint32_t cast4(const float (&v)[4], const float (&s)[4], FormatSpec f,
                                               core::CastCounts& k) {
  std::uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) w |= std::uint32_t(core::cast_element(v[j], s[j], f, k)) << (8 * j);
  return w;
}
// The same with one scale for the 4.
__device__ __forceinline__ std::uint32_t cast4(const float (&v)[4], float s, FormatSpec f, core::CastCounts& k) {
  const float ss[4] = {s, s, s, s};
  return cast4(v, ss, f, k);
}
// The column-wise copy of a tile of codes held in shared memory, tile[dr][c] for the R rows from r0
// and C columns from c0 of a [rows, cols] matrix, into qc [cols, rows] by the block's 32 x 8
// threads: 32-bit words of 4 consecutive rows on a full tile (rows and qc then 4-aligned), element
// by element inside the matrix otherwise.
template <int R, int C, int P>
__device__ __forceinline__ void store_transposed(const std::uint8_t (&tile)[R][P], bool full, int r0, int c0, int rows,
                                                 int cols, std::uint8_t* __restrict__ qc, int tid) {
  constexpr int kThreads = 32 * kCtThreadRows;
  if (full) {
    for (int i = tid; i < C * (R / 4); i += kThreads) {
      const int c = i / (R / 4), w4 = 4 * (i % (R / 4));
      const std::uint32_t w = std::uint32_t(tile[w4][c]) | std::uint32_t(tile[w4 + 1][c]) << 8 |
                              std::uint32_t(tile[w4 + 2][c]) << 16 | std::uint32_t(tile[w4 + 3][c]) << 24;
      *reinterpret_cast<std::uint32_t*>(qc + std::size_t(c0 + c) * std::size_t(rows) + std::size_t(r0 + w4)) = w;
    }
  } else {
    for (int i = tid; i < C * R; i += kThreads) {
      const int c = i / R, dr = i % R;
      if (c0 + c < cols && r0 + dr < rows)
        qc[std::size_t(c0 + c) * std::size_t(rows) + std::size_t(r0 + dr)] = tile[dr][c];
    }
  }
}

// 4 consecutive elements of a row into registers: one float4 on a full tile, else element by element
// with those outside the matrix (row_in false, or at or past `left` columns) read as +0, the identity
// of an amax.
__device__ __forceinline__ void load4(const float* __restrict__ x, std::size_t at, bool full, bool row_in, int left,
                                      float (&v)[4]) {
  if (full) {
    const float4 q = *reinterpret_cast<const float4*>(x + at);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = row_in && j < left ? x[at + std::size_t(j)] : 0.0f;
  }
}

template <Format F, class T>
__global__ void cast_transpose_kernel(const T* __restrict__ x, int rows, int cols, ScaleArg scale_arg,
                                      std::uint8_t* __restrict__ qr, std::uint8_t* __restrict__ qc, bool vec,
                                      CastTotals* totals) {
  __shared__ std::uint8_t tile[kCtRows][kCtCols + 4];
  const FormatSpec f = spec_value<F>();
  const float scale = scale_arg.device ? *scale_arg.device : scale_arg.value;  // a device scale: one load
  core::CastCounts counts;
  unsigned int m = 0;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y), tid = ty * 32 + tx;
  for (int by = int(blockIdx.y); by * kCtRows < rows; by += int(gridDim.y)) {
    for (int bx = int(blockIdx.x); bx * kCtCols < cols; bx += int(gridDim.x)) {
      const int r0 = by * kCtRows, c0 = bx * kCtCols;
      const bool full = vec && r0 + kCtRows <= rows && c0 + kCtCols <= cols;
      for (int dy = ty; dy < kCtRows; dy += kCtThreadRows) {
        const int r = r0 + dy, c = c0 + 4 * tx;
        const std::size_t at = std::size_t(r) * std::size_t(cols) + std::size_t(c);
        if (full) {
          float v[4];
          ct_load4(x + at, v);
          const std::uint32_t w = cast4(v, scale, f, counts);
          m = core::max_u32(core::max_u32(m, core::amax_bits(v[0])), core::amax_bits(v[1]));
          m = core::max_u32(core::max_u32(m, core::amax_bits(v[2])), core::amax_bits(v[3]));
          if (qr) *reinterpret_cast<std::uint32_t*>(qr + at) = w;
          *reinterpret_cast<std::uint32_t*>(&tile[dy][4 * tx]) = w;
        } else if (r < rows) {
          for (int j = 0; j < 4 && c + j < cols; ++j) {
            const float v = ct_load(x, at + std::size_t(j));
            const std::uint8_t code = core::cast_element(v, scale, f, counts);
            m = core::max_u32(m, core::amax_bits(v));
            if (qr) qr[at + std::size_t(j)] = code;
            tile[dy][4 * tx + j] = code;
          }
        }
      }
      __syncthreads();
      if (qc) store_transposed<kCtRows, kCtCols>(tile, full, r0, c0, rows, cols, qc, tid);
      __syncthreads();
    }
  }
  commit_counts(counts, totals);
  warp_max_to(m, &totals->amax_bits);
}

// 32 x 32 tiles through shared memory: reads and writes are coalesced along rows. T: codes or fp32
// values (moved, never converted).
constexpr int kTile = 32, kTileRows = 8;
template <class T>
__global__ void transpose_kernel(int rows, int cols, const T* __restrict__ in, T* __restrict__ out) {
  __shared__ T tile[kTile][kTile + 1];
  for (int by = blockIdx.y; by * kTile < rows; by += gridDim.y) {
    for (int bx = blockIdx.x; bx * kTile < cols; bx += gridDim.x) {
      const int c = bx * kTile + int(threadIdx.x);
      for (int dy = int(threadIdx.y); dy < kTile; dy += kTileRows) {
        const int r = by * kTile + dy;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = in[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
      }
      __syncthreads();
      const int r_out = by * kTile + int(threadIdx.x);  // a row of `in` is a column of `out`
      for (int dx = int(threadIdx.y); dx < kTile; dx += kTileRows) {
        const int c_out = bx * kTile + dx;
        if (r_out < rows && c_out < cols)
          out[std::size_t(c_out) * std::size_t(rows) + std::size_t(r_out)] = tile[threadIdx.x][dx];
      }
      __syncthreads();
    }
  }
}

// One thread per block of the view. Row-wise views put consecutive threads on consecutive blocks of
// a row, column-wise views on the same block of consecutive columns (coalesced reads either way).
__global__ void block_cast_kernel(const float* __restrict__ x, int cols, int n, int K, bool rowwise, int block,
                                  int nb, FormatSpec f, core::BlockRule rule, std::uint8_t* codes,
                                  float* scale_inv, std::uint8_t* e8m0, CastTotals* totals) {
  core::CastCounts c;
  const std::size_t total = std::size_t(n) * std::size_t(nb);
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int r = rowwise ? int(t / std::size_t(nb)) : int(t % std::size_t(n));
    const int blk = rowwise ? int(t % std::size_t(nb)) : int(t / std::size_t(n));
    core::cast_view_block(x, rowwise, cols, r, blk, block, K, nb, f, rule, codes, scale_inv, e8m0, c);
  }
  commit_counts(c, totals);
}

// Device::block_cast with both views (TE common/cast/mxfp8/quantize_mxfp8.cuh
// with row-wise and column-wise scaling, common/transpose/quantize_transpose_vector_blockwise.cu):
// one read of x. A block of 32 x 8 threads owns tiles of B rows x 128 columns (B = the block size,
// 32 or 128), so every row-wise block (1 x B, along a row) and every column-wise block (B x 1, along
// a column) of the tile lies inside it. Each thread holds 4 consecutive elements (one float4 on the
// vectorised path) of B/8 rows (ty, ty + 8, ...) in registers.
//   Row-wise: the B/4 lanes holding a block reduce its amax bits by shuffles; each derives the
//   block's scale (core::block_rule_scale, the function core::cast_view_block calls) and casts its 4
//   elements (core::cast_element) into one 32-bit word; the block's first lane stores scale_inv and
//   the E8M0 code.
//   Column-wise: each thread's maxima over its rows meet in shared memory as the column's amax;
//   each thread casts its elements by its columns' scales into a shared code tile, which leaves
//   transposed as 32-bit words of 4 rows (cast_transpose's store); the ty = 0 threads store the
//   columns' scale_inv and E8M0 codes.
// Out-of-range elements of an edge tile load as +0 (amax_bits 0, the identity of the max) and are
// never cast or stored, so a final partial block is scaled by its own amax as in cast_view_block.
// The amax is a max of bits and the counts are sums: the same bits as the element layer in any
// order. Full tiles take the vectorised loads and stores when x is 16-byte aligned, the codes
// 4-byte aligned and rows and cols are multiples of 4; other tiles go element by element.
constexpr int kBcCols = 128, kBcThreadRows = 8;
template <Format F, int B>
__global__ void __launch_bounds__(32 * kBcThreadRows)
    block_cast_both_kernel(const float* __restrict__ x, int rows, int cols, core::BlockRule rule, BlockCastOut rw,
                           BlockCastOut cw, bool vec) {
  static_assert(B == 32 || B == 128, "the fused block cast takes 32- and 128-element blocks");
  constexpr int kRowsPerThread = B / kBcThreadRows;  // 4 or 16
  constexpr int kLanesPerBlock = B / 4;              // lanes holding one row-wise block: 8 or 32
  __shared__ uint4 colpart[kBcThreadRows][kBcCols / 4];  // per-ty column maxima (amax bits), 4 columns each
  __shared__ std::uint8_t ctile[B][kBcCols + 4];         // the tile's column-wise codes, row-major
  const FormatSpec f = spec_value<F>();
  core::CastCounts rcounts, ccounts;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y), tid = ty * 32 + tx;
  const int nbr = (cols + B - 1) / B, nbc = (rows + B - 1) / B;
  for (int by = int(blockIdx.x); by * B < rows; by += int(gridDim.x)) {
    for (int bx = int(blockIdx.y); bx * kBcCols < cols; bx += int(gridDim.y)) {
      const int r0 = by * B, c0 = bx * kBcCols, c = c0 + 4 * tx;
      const bool full = vec && r0 + B <= rows && c0 + kBcCols <= cols;
      float v[kRowsPerThread][4];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = r0 + ty + kBcThreadRows * i;
        const std::size_t at = std::size_t(r) * std::size_t(cols) + std::size_t(c);
        load4(x, at, full, r < rows, cols - c, v[i]);
      }
      if (rw.codes) {
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const int r = r0 + ty + kBcThreadRows * i;  // the same for the whole warp
          unsigned int m = core::max_u32(core::max_u32(core::amax_bits(v[i][0]), core::amax_bits(v[i][1])),
                                         core::max_u32(core::amax_bits(v[i][2]), core::amax_bits(v[i][3])));
#pragma unroll
          for (int o = 1; o < kLanesPerBlock; o <<= 1) m = core::max_u32(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
          if (r >= rows) continue;
          float scale_inv = 0.0f;
          std::uint8_t e8m0 = 0;
          const float mult = core::block_rule_scale(core::bits_to_f32(m), f, rule, &scale_inv, &e8m0);
          const std::size_t at = std::size_t(r) * std::size_t(cols) + std::size_t(c);
          if (full) {
            const std::uint32_t w = cast4(v[i], mult, f, rcounts);
            *reinterpret_cast<std::uint32_t*>(rw.codes + at) = w;
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (c + j < cols) rw.codes[at + std::size_t(j)] = core::cast_element(v[i][j], mult, f, rcounts);
          }
          if (tx % kLanesPerBlock == 0 && c < cols) {
            const std::size_t si = std::size_t(r) * std::size_t(nbr) + std::size_t(c / B);
            rw.scale_inv[si] = scale_inv;
            if (rw.e8m0) rw.e8m0[si] = e8m0;
          }
        }
      }
      if (cw.codes) {
        unsigned int cm[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) cm[j] = core::max_u32(cm[j], core::amax_bits(v[i][j]));
        colpart[ty][tx] = make_uint4(cm[0], cm[1], cm[2], cm[3]);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kBcThreadRows; ++k) {
          const uint4 p = colpart[k][tx];
          cm[0] = core::max_u32(cm[0], p.x);
          cm[1] = core::max_u32(cm[1], p.y);
          cm[2] = core::max_u32(cm[2], p.z);
          cm[3] = core::max_u32(cm[3], p.w);
        }
        float mult[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float scale_inv = 0.0f;
          std::uint8_t e8m0 = 0;
          mult[j] = core::block_rule_scale(core::bits_to_f32(cm[j]), f, rule, &scale_inv, &e8m0);
          if (ty == 0 && c + j < cols) {
            const std::size_t si = std::size_t(c + j) * std::size_t(nbc) + std::size_t(by);
            cw.scale_inv[si] = scale_inv;
            if (cw.e8m0) cw.e8m0[si] = e8m0;
          }
        }
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const int dy = ty + kBcThreadRows * i;
          if (full) {
            const std::uint32_t w = cast4(v[i], mult, f, ccounts);
            *reinterpret_cast<std::uint32_t*>(&ctile[dy][4 * tx]) = w;
          } else if (r0 + dy < rows) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (c + j < cols) ctile[dy][4 * tx + j] = core::cast_element(v[i][j], mult[j], f, ccounts);
          }
        }
        __syncthreads();
        if (full) {
          for (int i = tid; i < kBcCols * (B / 4); i += 32 * kBcThreadRows) {
            const int cc = i / (B / 4), w4 = 4 * (i % (B / 4));
            const std::uint32_t w = std::uint32_t(ctile[w4][cc]) | std::uint32_t(ctile[w4 + 1][cc]) << 8 |
                                    std::uint32_t(ctile[w4 + 2][cc]) << 16 | std::uint32_t(ctile[w4 + 3][cc]) << 24;
            *reinterpret_cast<std::uint32_t*>(cw.codes + std::size_t(c0 + cc) * std::size_t(rows) +
                                              std::size_t(r0 + w4)) = w;
          }
        } else {
          for (int i = tid; i < kBcCols * B; i += 32 * kBcThreadRows) {
            const int cc = i / B, dr = i % B;
            if (c0 + cc < cols && r0 + dr < rows)
              cw.codes[std::size_t(c0 + cc) * std::size_t(rows) + std::size_t(r0 + dr)] = ctile[dr][cc];
          }
        }
        __syncthreads();
      }
    }
  }
  if (rw.codes) commit_counts(rcounts, rw.totals);
  if (cw.codes) commit_counts(ccounts, cw.totals);
}

// One block of threads per tile: the tile's amax (max of amax_bits), then its scale by the rule
// (core::block_rule_scale: fp32 or NVFP4 scales).
__global__ void tile_scale_kernel(const float* __restrict__ x, int rows, int cols, int tile, int tc, FormatSpec f,
                                  core::BlockRule rule, float* tile_scale, float* tile_scale_inv) {
  __shared__ unsigned int amax;
  if (threadIdx.x == 0) amax = 0;
  __syncthreads();
  const int bi = blockIdx.y, bj = blockIdx.x;
  const int r0 = bi * tile, c0 = bj * tile;
  const int nr = core::min_int(tile, rows - r0), ncol = core::min_int(tile, cols - c0);
  unsigned int m = 0;
  for (long long e = threadIdx.x; e < (long long)nr * ncol; e += blockDim.x) {
    const int r = r0 + int(e / ncol), c = c0 + int(e % ncol);
    m = core::max_u32(m, core::amax_bits(x[std::size_t(r) * std::size_t(cols) + std::size_t(c)]));
  }
  atomicMax(&amax, m);
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::size_t t = std::size_t(bi) * std::size_t(tc) + std::size_t(bj);
    tile_scale[t] = core::block_rule_scale(core::bits_to_f32(amax), f, rule, tile_scale_inv + t, nullptr);
  }
}

__global__ void tile_cast_kernel(const float* __restrict__ x, int rows, int cols, int tile, int tc, FormatSpec f,
                                 const float* __restrict__ tile_scale, std::uint8_t* __restrict__ codes,
                                 CastTotals* totals) {
  core::CastCounts c;
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int r = int(i / std::size_t(cols)), col = int(i % std::size_t(cols));
    const float mult = tile_scale[core::tile_index(r, col, tile, tc)];
    codes[i] = core::cast_element(x[i], mult, f, c);
  }
  commit_counts(c, totals);
}

// emu::quantize_block_2d with 128 x 128 tiles in one pass (TE's 2-D block cast, common/transpose/
// quantize_transpose_square_blockwise.cu): one block of 32 x 8 threads per tile, each thread holding
// 4 consecutive columns (one float4 on the vectorised path) of 16 rows (ty, ty + 8, ...) in
// registers. The tile's amax is a max of core::amax_bits (warp shuffles, then shared memory), its
// scale core::block_scale (tile_scale_kernel's); every element is cast once (core::cast_element)
// into the row-wise codes (32-bit stores) and a shared code tile that leaves transposed as the
// column-wise codes (cast_transpose's store). Elements outside the matrix (edge tiles) read as +0,
// the identity of the amax, and are neither cast nor stored. One read of x, one write of each copy.
constexpr int kSq = 128, kSqRows = kSq / kCtThreadRows;
__global__ void tile_cast_both_kernel(const float* __restrict__ x, int rows, int cols, int tc, FormatSpec f,
                                      core::BlockRule rule, bool vec, float* __restrict__ tile_scale,
                                      float* __restrict__ tile_scale_inv, std::uint8_t* __restrict__ qr,
                                      std::uint8_t* __restrict__ qc, CastTotals* totals) {
  __shared__ std::uint8_t tile[kSq][kSq + 4];
  __shared__ unsigned int warp_amax[kCtThreadRows];
  __shared__ float tile_mult;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y), tid = ty * 32 + tx;
  core::CastCounts counts;
  for (int bi = int(blockIdx.y); bi * kSq < rows; bi += int(gridDim.y)) {
    for (int bj = int(blockIdx.x); bj * kSq < cols; bj += int(gridDim.x)) {
      const int r0 = bi * kSq, c0 = bj * kSq, c = c0 + 4 * tx;
      const bool full = vec && r0 + kSq <= rows && c0 + kSq <= cols;
      float v[kSqRows][4];
      unsigned int m = 0;
#pragma unroll
      for (int i = 0; i < kSqRows; ++i) {
        const int r = r0 + ty + kCtThreadRows * i;
        const std::size_t at = std::size_t(r) * std::size_t(cols) + std::size_t(c);
        load4(x, at, full, r < rows, cols - c, v[i]);
#pragma unroll
        for (int j = 0; j < 4; ++j) m = core::max_u32(m, core::amax_bits(v[i][j]));
      }
      for (int o = 16; o > 0; o >>= 1) m = core::max_u32(m, __shfl_down_sync(0xFFFFFFFFu, m, o));
      if (tx == 0) warp_amax[ty] = m;
      __syncthreads();
      if (tid == 0) {
        unsigned int a = 0;
        for (int w = 0; w < kCtThreadRows; ++w) a = core::max_u32(a, warp_amax[w]);
        const std::size_t t = std::size_t(bi) * std::size_t(tc) + std::size_t(bj);
        const float mult = core::block_rule_scale(core::bits_to_f32(a), f, rule, tile_scale_inv + t, nullptr);
        tile_scale[t] = mult;
        tile_mult = mult;
      }
      __syncthreads();
      const float scale = tile_mult;
#pragma unroll
      for (int i = 0; i < kSqRows; ++i) {
        const int dr = ty + kCtThreadRows * i, r = r0 + dr;
        const std::size_t at = std::size_t(r) * std::size_t(cols) + std::size_t(c);
        if (full) {
          const std::uint32_t w = cast4(v[i], scale, f, counts);
          if (qr) *reinterpret_cast<std::uint32_t*>(qr + at) = w;
          *reinterpret_cast<std::uint32_t*>(&tile[dr][4 * tx]) = w;
        } else if (r < rows) {
          for (int j = 0; j < 4 && c + j < cols; ++j) {
            const std::uint8_t code = core::cast_element(v[i][j], scale, f, counts);
            if (qr) qr[at + std::size_t(j)] = code;
            tile[dr][4 * tx + j] = code;
          }
        }
      }
      __syncthreads();
      if (qc) store_transposed<kSq, kSq>(tile, full, r0, c0, rows, cols, qc, tid);
      __syncthreads();  // the code tile, the warp maxima and the scale are the next tile's
    }
  }
  commit_counts(counts, totals);
}

}  // namespace

namespace {
std::atomic<int> g_device_slot{0};  // set_device_slot
}  // namespace

int use_fp8_device() {
  static const int index = [] {
    int n = 0;
    FP8EMU_CUDA_CHECK(cudaGetDeviceCount(&n));
    std::vector<int> fp8;
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      FP8EMU_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
      if (p.major * 10 + p.minor >= 89) fp8.push_back(i);
    }
    FP8EMU_CHECK(!fp8.empty(), "no GPU with compute capability 8.9 or newer (FP8) was found");
    return fp8[std::size_t(g_device_slot.load()) % fp8.size()];
  }();
  FP8EMU_CUDA_CHECK(cudaSetDevice(index));
  return index;
}

void launch_amax(const float* x, std::size_t n, unsigned int* amax_bits, cudaStream_t stream) {
  if (n == 0) return;
  amax_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, amax_bits);
  FP8EMU_CUDA_CHECK_LAUNCH("amax_kernel");
}

void launch_rht_rows(const float* x, int rows, int cols, std::uint16_t sign_mask, float* out, cudaStream_t stream) {
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  if (n == 0) return;
  rht_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, rows, cols, sign_mask, out);
  FP8EMU_CUDA_CHECK_LAUNCH("rht_rows_kernel");
}

void launch_gemm_epilogue(int M, int N, const float* t, const emu::GemmEpilogue& ep, void* D,
                          unsigned int* amax_bits, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  const FormatSpec fo = spec_of(ep.output == emu::GemmOutput::kFp8 ? ep.output_format : Format::kE4M3);
  gemm_epilogue_kernel<<<blocks_for(std::size_t(M) * std::size_t(N)), kThreads, 0, stream>>>(
      M, N, t, ep.alpha, ep.beta, ep.C, ep.bias, ep.output, fo, ep.d_scale, D, amax_bits);
  FP8EMU_CUDA_CHECK_LAUNCH("gemm_epilogue_kernel");
}

void launch_quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q, CastTotals* totals,
                     cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(q) % 4 == 0;
  const unsigned int blocks = blocks_for(vec ? (n + 3) / 4 : n);
  emu::require_ocp_fp8(fmt, "quantize");
  switch (fmt) {  // no default: a new FP8 format needs its instance here
    case Format::kE4M3: quantize_kernel<Format::kE4M3><<<blocks, kThreads, 0, stream>>>(x, n, scale, q, vec, totals); break;
    case Format::kE5M2: quantize_kernel<Format::kE5M2><<<blocks, kThreads, 0, stream>>>(x, n, scale, q, vec, totals); break;
    case Format::kE4M3FNUZ: case Format::kE5M2FNUZ: case Format::kE8M0: case Format::kE2M3: case Format::kE3M2:
    case Format::kE2M1: case Format::kBinary16: case Format::kBFloat16: break;  // the unfused kernels
  }
  FP8EMU_CUDA_CHECK_LAUNCH("quantize_kernel");
}

void launch_dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y,
                       cudaStream_t stream) {
  if (n == 0) return;
  emu::require_ocp_fp8(fmt, "dequantize");
  switch (fmt) {  // no default: a new FP8 format needs its instance here
    case Format::kE4M3: dequantize_kernel<Format::kE4M3><<<blocks_for(n), kThreads, 0, stream>>>(q, n, scale_inv, y); break;
    case Format::kE5M2: dequantize_kernel<Format::kE5M2><<<blocks_for(n), kThreads, 0, stream>>>(q, n, scale_inv, y); break;
    case Format::kE4M3FNUZ: case Format::kE5M2FNUZ: case Format::kE8M0: case Format::kE2M3: case Format::kE3M2:
    case Format::kE2M1: case Format::kBinary16: case Format::kBFloat16: break;  // rejected by require_ocp_fp8
  }
  FP8EMU_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

namespace {
template <class T>
void launch_transpose_t(int rows, int cols, const T* in, T* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(unsigned(std::min((cols + kTile - 1) / kTile, 65535)),
                  unsigned(std::min((rows + kTile - 1) / kTile, 65535)));
  transpose_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(rows, cols, in, out);
  FP8EMU_CUDA_CHECK_LAUNCH("transpose_kernel");
}
}  // namespace

void launch_transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out, cudaStream_t stream) {
  launch_transpose_t(rows, cols, in, out, stream);
}

void launch_transpose(int rows, int cols, const float* in, float* out, cudaStream_t stream) {
  launch_transpose_t(rows, cols, in, out, stream);
}

namespace {
template <class T>
void launch_cast_transpose_t(const T* x, int rows, int cols, ScaleArg scale, Format fmt, std::uint8_t* q_rowwise,
                             std::uint8_t* q_columnwise, CastTotals* totals, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  emu::require_ocp_fp8(fmt, "cast_transpose");
  const bool vec = reinterpret_cast<std::uintptr_t>(x) % (4 * sizeof(T)) == 0 &&
                   reinterpret_cast<std::uintptr_t>(q_rowwise) % 4 == 0 &&
                   reinterpret_cast<std::uintptr_t>(q_columnwise) % 4 == 0 && rows % 4 == 0 && cols % 4 == 0;
  const dim3 grid(unsigned(std::min((cols + kCtCols - 1) / kCtCols, 65535)),
                  unsigned(std::min((rows + kCtRows - 1) / kCtRows, 65535)));
  const dim3 block(32, kCtThreadRows);
  switch (fmt) {  // no default: a new FP8 format needs its instance here
    case Format::kE4M3:
      cast_transpose_kernel<Format::kE4M3, T><<<grid, block, 0, stream>>>(x, rows, cols, scale, q_rowwise,
                                                                          q_columnwise, vec, totals);
      break;
    case Format::kE5M2:
      cast_transpose_kernel<Format::kE5M2, T><<<grid, block, 0, stream>>>(x, rows, cols, scale, q_rowwise,
                                                                          q_columnwise, vec, totals);
      break;
    case Format::kE4M3FNUZ: case Format::kE5M2FNUZ: case Format::kE8M0: case Format::kE2M3: case Format::kE3M2:
    case Format::kE2M1: case Format::kBinary16: case Format::kBFloat16: break;  // rejected by require_ocp_fp8
  }
  FP8EMU_CUDA_CHECK_LAUNCH("cast_transpose_kernel");
}
}  // namespace

void launch_cast_transpose(const float* x, int rows, int cols, ScaleArg scale, Format fmt, std::uint8_t* q_rowwise,
                           std::uint8_t* q_columnwise, CastTotals* totals, cudaStream_t stream) {
  launch_cast_transpose_t(x, rows, cols, scale, fmt, q_rowwise, q_columnwise, totals, stream);
}

void launch_cast_transpose(const std::uint16_t* x_bf16, int rows, int cols, ScaleArg scale, Format fmt,
                           std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, CastTotals* totals,
                           cudaStream_t stream) {
  launch_cast_transpose_t(x_bf16, rows, cols, scale, fmt, q_rowwise, q_columnwise, totals, stream);
}

void launch_block_cast(const float* x, int rows, int cols, bool rowwise, int block, Format fmt,
                       const core::BlockRule& rule, std::uint8_t* codes, float* scale_inv, std::uint8_t* e8m0,
                       CastTotals* totals, cudaStream_t stream) {
  const int n = rowwise ? rows : cols, K = rowwise ? cols : rows;
  const int nb = (K + block - 1) / block;
  const std::size_t work = std::size_t(n) * std::size_t(nb);
  if (work == 0) return;
  block_cast_kernel<<<blocks_for(work), kThreads, 0, stream>>>(x, cols, n, K, rowwise, block, nb, spec_of(fmt), rule,
                                                               codes, scale_inv, e8m0, totals);
  FP8EMU_CUDA_CHECK_LAUNCH("block_cast_kernel");
}

namespace {
template <int B>
void launch_block_cast_both_b(const float* x, int rows, int cols, Format fmt, const core::BlockRule& rule,
                              const BlockCastOut& rowwise, const BlockCastOut& columnwise, bool vec,
                              cudaStream_t stream) {
  // Row tiles along x (consecutive blocks cover vertically adjacent tiles, so the column-wise
  // scales of a column, [cols, ceil(rows / B)] row-major, are written close together in time).
  const dim3 grid(unsigned(std::min<long long>((rows + B - 1) / B, 0x7FFFFFFFll)),
                  unsigned(std::min((cols + kBcCols - 1) / kBcCols, 65535)));
  const dim3 block(32, kBcThreadRows);
  switch (fmt) {  // no default: a new FP8 format needs its instance here
    case Format::kE4M3:
      block_cast_both_kernel<Format::kE4M3, B><<<grid, block, 0, stream>>>(x, rows, cols, rule, rowwise, columnwise, vec);
      break;
    case Format::kE5M2:
      block_cast_both_kernel<Format::kE5M2, B><<<grid, block, 0, stream>>>(x, rows, cols, rule, rowwise, columnwise, vec);
      break;
    case Format::kE4M3FNUZ: case Format::kE5M2FNUZ: case Format::kE8M0: case Format::kE2M3: case Format::kE3M2:
    case Format::kE2M1: case Format::kBinary16: case Format::kBFloat16: break;  // rejected by require_ocp_fp8
  }
  FP8EMU_CUDA_CHECK_LAUNCH("block_cast_both_kernel");
}
}  // namespace

void launch_block_cast_both(const float* x, int rows, int cols, int block, Format fmt, const core::BlockRule& rule,
                            const BlockCastOut& rowwise, const BlockCastOut& columnwise, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || (!rowwise.codes && !columnwise.codes)) return;
  emu::require_block_element(fmt, "block quantize");
  if ((block != 32 && block != 128) || !is_fp8(fmt)) {  // no fused instance: one single-axis kernel per copy
    if (rowwise.codes)
      launch_block_cast(x, rows, cols, true, block, fmt, rule, rowwise.codes, rowwise.scale_inv, rowwise.e8m0,
                        rowwise.totals, stream);
    if (columnwise.codes)
      launch_block_cast(x, rows, cols, false, block, fmt, rule, columnwise.codes, columnwise.scale_inv,
                        columnwise.e8m0, columnwise.totals, stream);
    return;
  }
  auto aligned = [](const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; };
  const bool vec = aligned(x, 16) && aligned(rowwise.codes, 4) && aligned(columnwise.codes, 4) && rows % 4 == 0 &&
                   cols % 4 == 0;
  if (block == 32)
    launch_block_cast_both_b<32>(x, rows, cols, fmt, rule, rowwise, columnwise, vec, stream);
  else
    launch_block_cast_both_b<128>(x, rows, cols, fmt, rule, rowwise, columnwise, vec, stream);
}

void launch_tile_cast(const float* x, int rows, int cols, int tile, Format fmt, const core::BlockRule& rule,
                      float* tile_scale, float* tile_scale_inv, std::uint8_t* codes, CastTotals* totals,
                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
  FP8EMU_CHECK(tr <= 65535, "quantize_block_2d on the GPU: at most 65535 tile rows, got ", tr);
  tile_scale_kernel<<<dim3(unsigned(tc), unsigned(tr)), kThreads, 0, stream>>>(x, rows, cols, tile, tc, spec_of(fmt),
                                                                              rule, tile_scale, tile_scale_inv);
  FP8EMU_CUDA_CHECK_LAUNCH("tile_scale_kernel");
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  tile_cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, rows, cols, tile, tc, spec_of(fmt), tile_scale, codes,
                                                           totals);
  FP8EMU_CUDA_CHECK_LAUNCH("tile_cast_kernel");
}

void launch_tile_cast_both(const float* x, int rows, int cols, int tile, Format fmt, const core::BlockRule& rule,
                           float* tile_scale, float* tile_scale_inv, std::uint8_t* q_rowwise,
                           std::uint8_t* q_columnwise, CastTotals* totals, cudaStream_t stream) {
  FP8EMU_CHECK(tile == kSq || q_rowwise != nullptr, "launch_tile_cast_both: tiles of ", tile,
               " need the row-wise codes (only 128 x 128 tiles run in one pass)");
  if (rows <= 0 || cols <= 0) return;
  if (tile != kSq) {  // the two-step path, then the code transpose
    launch_tile_cast(x, rows, cols, tile, fmt, rule, tile_scale, tile_scale_inv, q_rowwise, totals, stream);
    if (q_columnwise) launch_transpose(rows, cols, q_rowwise, q_columnwise, stream);
    return;
  }
  const int tr = (rows + kSq - 1) / kSq, tc = (cols + kSq - 1) / kSq;
  const bool vec = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(q_rowwise) % 4 == 0 &&
                   reinterpret_cast<std::uintptr_t>(q_columnwise) % 4 == 0 && rows % 4 == 0 && cols % 4 == 0;
  const dim3 grid(unsigned(std::min(tc, 65535)), unsigned(std::min(tr, 65535)));
  tile_cast_both_kernel<<<grid, dim3(32, kCtThreadRows), 0, stream>>>(x, rows, cols, tc, spec_of(fmt), rule, vec,
                                                                      tile_scale, tile_scale_inv, q_rowwise,
                                                                      q_columnwise, totals);
  FP8EMU_CUDA_CHECK_LAUNCH("tile_cast_both_kernel");
}

}  // namespace fp8emu::cuda::detail

namespace fp8emu::cuda {

void set_device_slot(int slot) { detail::g_device_slot.store(slot < 0 ? 0 : slot); }

}  // namespace fp8emu::cuda
