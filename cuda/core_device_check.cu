// Compiles the shared integer-only core (include/fp8emu/core) as device code, so every build with
// nvcc proves that the CPU emulator's arithmetic is also valid CUDA. The kernel converts a buffer
// with the same function the CPU kernels call; GPU-vs-emulator tests come with the CUDA backend.
#include <cstdint>

#include "fp8emu/core/convert.hpp"

namespace fp8emu::cuda {

__global__ void core_encode_decode_kernel(const float* x, std::uint8_t* q4, std::uint8_t* q5,
                                          float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  q4[i] = core::f32_to_fp8(x[i], kSpecE4M3, Saturation::kSatFinite);
  q5[i] = core::f32_to_fp8(x[i], kSpecE5M2, Saturation::kNoSat);
  back[i] = core::fp8_to_f32(q4[i], kSpecE4M3);
}

}  // namespace fp8emu::cuda
