/// \file mma_gemm.hpp
/// \brief fp8emu's own tensor-core GEMM: E4M3 x E4M3 -> fp32 on `mma.sync.aligned.m16n8k32.row.col
/// .f32.e4m3.e4m3.f32` (sm_89+), with a fixed accumulation order, so that its bits can be compared
/// with the emulator's mma.sync models with fast accumulation.
///
/// Each warp computes one 16 x 8 tile of D: C starts at +0, then one mma per 32 K-elements in
/// increasing K, the result of each mma being the C of the next (no promotion); a K tail is padded
/// with zero codes, which add nothing in the model. Then D = RN(acc * RN(scale_inv_a * scale_inv_b)),
/// as emu::gemm_fp8_tn. The same instruction is two datapaths: on Ada (sm_89) a native FP8 MMA, the
/// emulator's `ada` model (blocks of 16 chained, C inside the alignment, 14-bit truncation); on
/// Hopper (sm_90) ptxas unpacks FP8 to fp16 and runs two fp16 HMMA steps and an fp32 add of C, the
/// `hopper-mma-sync` model (docs/tensor-core-model.md §Hopper mma.sync). `fp8emu validate` expects
/// 0 mismatches against the model of the GPU it runs on.
///
/// Available only when fp8emu is built with CUDA; needs compute capability >= 8.9 and throws
/// fp8emu::Error otherwise or on a CUDA error. No CUDA header is included here.
#pragma once

#include <cstdint>

namespace fp8emu::cuda {

/// On device memory: A Shape [M, K] and B Shape [N, K] row-major E4M3 codes, D Shape [M, N]
/// row-major fp32, s the product of the scale_invs. Asynchronous (default stream).
void mma_gemm_e4m3_tn(int M, int N, int K, const std::uint8_t* A, const std::uint8_t* B, float s, float* D);

/// The same on host memory (copies in, runs, copies D back).
void mma_gemm_e4m3_tn_host(int M, int N, int K, const std::uint8_t* A, float scale_inv_a, const std::uint8_t* B,
                           float scale_inv_b, float* D);

}  // namespace fp8emu::cuda
