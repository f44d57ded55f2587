/// \file gemm.hpp
/// \brief CPU GEMMs with a documented, fixed accumulation order (fp32) and the FP8 GEMM built on it.
///
/// Accumulation order ("fp32 sequential"): every output element is
///     c = +0; for k = 0 .. K-1: c = RN(c + RN(a[i,k] * b[k,j]))
/// i.e. products rounded to fp32, added in increasing k: the fp32 GEMM runs a multiply and an add
/// (the build uses -ffp-contract=off). For FP8 operands every product is exact in fp32 (at most 4+4
/// significant bits, exponents within fp32's normal range), so there the order is the only rounding
/// choice, and the kernels add each product with one FMA (the same bits). The tensor-core
/// accumulation models (Hopper/Ada) and cuBLASLt's epilogue are in gemm_models.hpp.
///
/// Determinism: work is split over blocks of rows and columns of C, never over k, so results are
/// bit-identical for any thread count (and for the AVX2 and baseline builds of the kernels).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// C = A * B in fp32, sequential order (see file comment).
/// \param[in]  A  Shape: [M, K], row-major.
/// \param[in]  B  Shape: [K, N], row-major.
/// \param[out] C  Shape: [M, N], row-major; overwritten.
void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* C);

/// out = in^T. \param in Shape: [rows, cols], row-major. \param out Shape: [cols, rows], row-major.
void transpose(int rows, int cols, const float* in, float* out);
/// out = in^T for FP8 codes (exact: codes are moved, not converted).
void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out);

/// Scaled FP8 GEMM as cuBLASLt's FP8 matmul with per-tensor scales (alpha = 1, beta = 0):
///     D[i,j] = RN( acc[i,j] * RN(scale_inv_a * scale_inv_b) )
/// where acc is the fp32-sequential sum of the exact products decode(A[i,k]) * decode(B[k,j]).
/// \param[in]  A   Shape: [M, K], row-major FP8 codes in format fa, dequantised by scale_inv_a.
/// \param[in]  B   Shape: [K, N], row-major FP8 codes in format fb, dequantised by scale_inv_b.
/// \param[out] D   Shape: [M, N], row-major fp32; overwritten.
/// NaN codes propagate as NaN; E5M2 Inf codes as Inf.
void gemm_fp8_nn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                 const std::uint8_t* B, Format fb, float scale_inv_b, float* D);

}  // namespace fp8emu::emu
