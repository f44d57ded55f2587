/// \file mma.hpp
/// \brief Tensor-core MMA tiles with an addend C, and the bitwise comparison of two fp32 arrays
/// (what `fp8emu mma-check` and `fp8emu compare` run, for library and Python callers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// D = A B^T + C as chained tensor-core MMA instructions compute it (core::mma_dot_with_c per
/// element): for each D[i][j], the K products of A's row i and B's row j in blocks of the model's
/// block size in increasing K, the first block's C being C[i][j], which joins the first step's
/// alignment or is added last with one RN fp32 add, as the model's row says (`hopper` wgmma,
/// `ada` and `hopper-mma-sync` mma.sync m16n8k32; docs/tensor-core-model.md). One
/// m16n8k32 instruction is M = 16, N = 8, K = 32. No scales, promotion or split-K.
/// \param A  Shape [M, K], row-major FP8 codes of `fa`.
/// \param B  Shape [N, K], row-major FP8 codes of `fb` (the K-contiguous operand, "TN").
/// \param C  Shape [M, N], row-major fp32, or null for +0 everywhere.
/// \param D  Shape [M, N], row-major fp32 (may alias C). NaN results are 0x7FFFFFFF for models whose
///           C is added last, as the GPU writes them.
/// Deterministic; parallel over rows with OpenMP.
/// All four FP8 operand pairs (mma.sync takes E5M2 x E5M2, which cuBLASLt's GEMM rejects).
/// \throws fp8emu::Error for a negative shape, a non-FP8 format, or a model that is not a
///         tensor-core model (exact, fp32).
void mma_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb,
            Accumulation model, const float* C, float* D);

/// D = A B^T + C on the tensor cores of fp16, bf16 or tf32 inputs, as chained MMA instructions compute
/// it: mma_tn for the rows whose input is not FP8 (`volta-fp16`, `ampere-bf16`, `hopper-tf32`, ...:
/// core/accumulation.hpp). Each D[i][j]: the K products of A's row i and B's row j in blocks of the
/// row's block size in increasing K, the first block's C being C[i][j] (core::mma_dot on
/// core::MmaValues). One `wmma` m16n16k16 bf16 instruction on Hopper is M = N = 16, K = 16.
/// \param A  Shape [M, K], row-major fp32 storage; every element exactly a value of the row's operand
///           format (fp16, bf16 or tf32; NaN and Inf allowed).
/// \param B  Shape [N, K], row-major, likewise (the K-contiguous operand, "TN").
/// \param C  Shape [M, N], row-major fp32, or null for +0 everywhere.
/// \param D  Shape [M, N], row-major fp32 (may alias C). Round toward zero to 24 bits after each block
///           (RNE to fp16 with the fp16 accumulator, which this fp32 entry does not use).
/// Deterministic; parallel over rows with OpenMP.
/// \throws fp8emu::Error for a negative shape, a row that is not a tensor-core row of fp16, bf16 or
///         tf32 input, or an element that is not a value of its format (naming the operand and index).
void mma_tn_values(int M, int N, int K, const float* A, const float* B, Accumulation model, const float* C, float* D);

/// The GEMM of a layer on a tensor-core row of fp16, bf16 or tf32 input: D [M, N] = A [M, K] * B [K, N]
/// (all row-major, "NN", gemm_f32_nn's layout), every element the row's chain of blocks along K from
/// C = +0 (as mma_tn_values; the operands are decoded once). What a bf16 layer computes on the GPU's
/// bf16 tensor cores, where gemm_f32_nn sums in fp32 sequentially.
/// \throws fp8emu::Error as mma_tn_values.
void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D);

/// Bitwise comparison of two fp32 arrays (`fp8emu compare`).
struct CompareStats {
  std::size_t elements = 0;
  std::size_t mismatches = 0;      ///< Elements whose 32 bits differ (two NaNs of different payload count).
  std::size_t nan_in_one = 0;      ///< Of those, elements that are NaN in one array only.
  std::size_t nan_payload = 0;     ///< Of those, elements that are NaN in both (payload or sign differs).
  std::int64_t max_ulp = 0;        ///< Largest distance in units in the last place over the other mismatches
                                   ///< (+0 and -0 are 0 apart; across zero the ulps of both sides add).
  double max_abs_error = 0.0;      ///< max |x - y| over those, in double.
  double max_rel_error = 0.0;      ///< max |x - y| / |y| over those with y != 0 (y: the second array).
  bool identical() const { return mismatches == 0; }
};
/// Distance between two non-NaN floats in units in the last place: the difference of their
/// positions in the ordered sequence of fp32 values (+0 and -0 share one position; across zero the
/// ulps of both sides add; an infinity is one past FLT_MAX).
std::uint64_t ulp_distance(float a, float b);

/// Compares x and y element by element (n elements each).
CompareStats compare_f32(const float* x, const float* y, std::size_t n);

}  // namespace fp8emu::emu
