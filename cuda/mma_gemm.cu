// fp8emu's tensor-core GEMM on mma.sync m16n8k32 E4M3 (see include/fp8emu/cuda/mma_gemm.hpp).
//
// Fragments (PTX ISA, mma.m16n8k32 with 8-bit types; groupID g = lane / 4, t = lane % 4; the byte
// of the lowest k is the low byte of each register):
//   A (16 x 32, row): a0 = row g, k 4t..4t+3; a1 = row g+8, same k; a2 = row g, k 16+4t..;
//                     a3 = row g+8, k 16+4t..
//   B (32 x 8, col):  b0 = column g, k 4t..4t+3; b1 = column g, k 16+4t..
//   C, D (16 x 8):    c0, c1 = row g, columns 2t, 2t+1; c2, c3 = row g+8, same columns.
// B's columns are rows of our B [N, K] (K-contiguous), so both operands load along K.
#include <cuda_runtime.h>

#include <algorithm>

#include "device_buffer.hpp"
#include "fp8emu/cuda/mma_gemm.hpp"
#include "launch.hpp"

// FP8 mma.sync is PTX ISA 8.4 (CUDA 12.4); older toolkits build the kernel empty and the launcher
// refuses to run it.
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define FP8EMU_HAVE_FP8_MMA 1
#else
#define FP8EMU_HAVE_FP8_MMA 0
#endif

namespace fp8emu::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block, each on its own 16 x 8 tile of D

// Bytes k .. k+3 of a row of K codes (zero past K or for a row outside the matrix).
__device__ __forceinline__ std::uint32_t load4(const std::uint8_t* row, bool row_ok, int K, int k) {
  std::uint32_t v = 0;
  if (row_ok)
    for (int i = 0; i < 4; ++i)
      if (k + i < K) v |= std::uint32_t(row[k + i]) << (8 * i);
  return v;
}

__global__ void mma_e4m3_kernel(int M, int N, int K, const std::uint8_t* __restrict__ A,
                                const std::uint8_t* __restrict__ B, float s, float* __restrict__ D) {
#if FP8EMU_HAVE_FP8_MMA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = int(blockIdx.y) * 16, n0 = (int(blockIdx.x) * kWarps + warp) * 8;
  if (n0 >= N) return;  // the whole warp leaves together
  const int r0 = m0 + g, r1 = m0 + g + 8, col = n0 + g;
  const std::uint8_t* a0 = A + std::size_t(r0 < M ? r0 : 0) * std::size_t(K);
  const std::uint8_t* a1 = A + std::size_t(r1 < M ? r1 : 0) * std::size_t(K);
  const std::uint8_t* b = B + std::size_t(col < N ? col : 0) * std::size_t(K);
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 32) {
    const std::uint32_t ra0 = load4(a0, r0 < M, K, k0 + 4 * t), ra1 = load4(a1, r1 < M, K, k0 + 4 * t);
    const std::uint32_t ra2 = load4(a0, r0 < M, K, k0 + 16 + 4 * t), ra3 = load4(a1, r1 < M, K, k0 + 16 + 4 * t);
    const std::uint32_t rb0 = load4(b, col < N, K, k0 + 4 * t), rb1 = load4(b, col < N, K, k0 + 16 + 4 * t);
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(ra0), "r"(ra1), "r"(ra2), "r"(ra3), "r"(rb0), "r"(rb1));
  }
  const int j0 = n0 + 2 * t;
  if (r0 < M) {
    if (j0 < N) D[std::size_t(r0) * std::size_t(N) + std::size_t(j0)] = __fmul_rn(c0, s);
    if (j0 + 1 < N) D[std::size_t(r0) * std::size_t(N) + std::size_t(j0 + 1)] = __fmul_rn(c1, s);
  }
  if (r1 < M) {
    if (j0 < N) D[std::size_t(r1) * std::size_t(N) + std::size_t(j0)] = __fmul_rn(c2, s);
    if (j0 + 1 < N) D[std::size_t(r1) * std::size_t(N) + std::size_t(j0 + 1)] = __fmul_rn(c3, s);
  }
#else
  // FP8 mma.sync needs sm_89+; the launcher never runs this kernel on an older GPU.
  (void)M, (void)N, (void)K, (void)A, (void)B, (void)s, (void)D;
#endif
}

}  // namespace

void mma_gemm_e4m3_tn(int M, int N, int K, const std::uint8_t* A, const std::uint8_t* B, float s, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma.sync GEMM: negative shape M=", M, " N=", N, " K=", K);
  FP8EMU_CHECK(FP8EMU_HAVE_FP8_MMA, "mma.sync GEMM: this fp8emu was built with a CUDA toolkit older than 12.4, "
               "whose PTX has no FP8 mma.sync");
  if (M == 0 || N == 0) return;
  detail::use_fp8_device();  // compute capability >= 8.9, or throws
  const unsigned gx = unsigned((N + 8 * kWarps - 1) / (8 * kWarps)), gy = unsigned((M + 15) / 16);
  FP8EMU_CHECK(gy <= 65535u, "mma.sync GEMM: M = ", M, " is too large (at most 1048560)");
  mma_e4m3_kernel<<<dim3(gx, gy), 32 * kWarps>>>(M, N, K, A, B, s, D);
  FP8EMU_CUDA_CHECK_LAUNCH("mma_e4m3_kernel");
}

void mma_gemm_e4m3_tn_host(int M, int N, int K, const std::uint8_t* A, float scale_inv_a, const std::uint8_t* B,
                           float scale_inv_b, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma.sync GEMM: negative shape M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return;
  detail::use_fp8_device();
  const float s = scale_inv_a * scale_inv_b;  // RN on the host, as emu::gemm_fp8_tn
  detail::DeviceBuffer<std::uint8_t> da(A, std::size_t(M) * std::size_t(K)), db(B, std::size_t(N) * std::size_t(K));
  detail::DeviceBuffer<float> dd(std::size_t(M) * std::size_t(N));
  mma_gemm_e4m3_tn(M, N, K, da.get(), db.get(), s, dd.get());
  dd.download(D, dd.size());
}

}  // namespace fp8emu::cuda
