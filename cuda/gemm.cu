// GPU twins of emu::gemm_fp8_tn (every accumulation model, with the promotion and split-K wrappers) and
// emu::gemm_fp8_block_tn: one thread per output element, running the per-element body of
// include/fp8emu/core/dot.hpp, the function the emulator's per-element path calls. Threads of a warp take consecutive columns of D, so the writes are
// coalesced and each warp shares its row of A.
#include <cuda_runtime.h>

#include <algorithm>

#include "device_buffer.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "launch.hpp"

namespace fp8emu::cuda::detail {
namespace {

constexpr int kBlockX = 32, kBlockY = 8;

__global__ void gemm_tn_kernel(int M, int N, int K, const std::uint8_t* __restrict__ A, FormatSpec fa,
                               const std::uint8_t* __restrict__ B, FormatSpec fb, AccumulationModel model,
                               int promotion, int split_k, GemmScaleArg sa, float* __restrict__ D) {
  // Device-resident scales: emu::scale_inv_of of each (IEEE division) and their product, one
  // rounding each, as the host computes s for emu::gemm_fp8_tn.
  const float s = sa.scale_a ? core::mul_rn(core::div_rn(1.0f, *sa.scale_a), core::div_rn(1.0f, *sa.scale_b)) : sa.s;
  for (int i = int(blockIdx.y * blockDim.y + threadIdx.y); i < M; i += int(gridDim.y * blockDim.y))
    for (int j = int(blockIdx.x * blockDim.x + threadIdx.x); j < N; j += int(gridDim.x * blockDim.x))
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
          core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), fa, B + std::size_t(j) * std::size_t(K), fb, K,
                                model, promotion, split_k, s);
}

__global__ void gemm_block_tn_kernel(int M, int N, int K, int block, int nb, const std::uint8_t* __restrict__ A,
                                     FormatSpec fa, const float* __restrict__ sa, const std::uint8_t* __restrict__ B,
                                     FormatSpec fb, const float* __restrict__ sb, const float* amax_a,
                                     const float* amax_b, AccumulationModel model, float* __restrict__ D) {
  const float alpha = amax_a ? core::nvfp4_gemm_alpha(*amax_a, core::nvfp4_numerator(fa), *amax_b,
                                                      core::nvfp4_numerator(fb))
                             : 1.0f;
  for (int i = int(blockIdx.y * blockDim.y + threadIdx.y); i < M; i += int(gridDim.y * blockDim.y))
    for (int j = int(blockIdx.x * blockDim.x + threadIdx.x); j < N; j += int(gridDim.x * blockDim.x)) {
      const float d = core::gemm_block_element(A + std::size_t(i) * std::size_t(K), fa,
                                               sa + std::size_t(i) * std::size_t(nb), B + std::size_t(j) * std::size_t(K),
                                               fb, sb + std::size_t(j) * std::size_t(nb), K, block, model);
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] = amax_a ? core::mul_rn(alpha, d) : d;
    }
}

dim3 grid_for(int M, int N) {
  return dim3(unsigned(std::min((N + kBlockX - 1) / kBlockX, 65535)),
              unsigned(std::min((M + kBlockY - 1) / kBlockY, 65535)));
}

}  // namespace

void launch_gemm_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb,
                    Accumulation model, int promotion, int split_k, GemmScaleArg s, float* D, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  gemm_tn_kernel<<<grid_for(M, N), dim3(kBlockX, kBlockY), 0, stream>>>(M, N, K, A, spec_of(fa), B, spec_of(fb),
                                                                       model_of(model), promotion, split_k, s, D);
  FP8EMU_CUDA_CHECK_LAUNCH("gemm_tn_kernel");
}

void launch_gemm_block_tn(int M, int N, int K, int block, const std::uint8_t* A, Format fa, const float* sa,
                          const std::uint8_t* B, Format fb, const float* sb, const float* amax_a,
                          const float* amax_b, Accumulation model, float* D, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  const int nb = (K + block - 1) / block;
  gemm_block_tn_kernel<<<grid_for(M, N), dim3(kBlockX, kBlockY), 0, stream>>>(M, N, K, block, nb, A, spec_of(fa), sa,
                                                                             B, spec_of(fb), sb, amax_a, amax_b,
                                                                             model_of(model), D);
  FP8EMU_CUDA_CHECK_LAUNCH("gemm_block_tn_kernel");
}

}  // namespace fp8emu::cuda::detail
