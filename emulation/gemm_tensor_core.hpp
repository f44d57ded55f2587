// Private: the vectorised tensor-core GEMM of gemm_models.cpp (Hopper wgmma and Ada models with an
// fp32 accumulator), bit-identical to core::gemm_tn_element for every element.
#pragma once

#include <cstdint>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu::detail {

/// Whether the vectorised tensor-core GEMM implements this model: one step per block, FP8 fields,
/// F = 13 and 14 bits kept with truncation (fp32 accumulator), C in the block's alignment, and a
/// block that divides cuBLASLt's split-K tile (so split-K ranges hold whole blocks).
bool tensor_core_fast_path(const AccumulationModel& model);

/// D [M, N] = RN(acc * s) with acc = core::dot_split_k over row i of A [M, K] and row j of B [N, K]
/// (both FP8 codes, K contiguous), for a model tensor_core_fast_path accepts. Elements whose row of
/// A or row of B holds a NaN or Inf code take the scalar element model; all others the packed
/// kernel of the path gemm_isa() names. The arguments are checked by the caller.
void gemm_tensor_core(int M, int N, int K, const std::uint8_t* A, const FormatSpec& fa, const std::uint8_t* B,
                      const FormatSpec& fb, const AccumulationModel& model, int promotion_interval, int split_k,
                      float s, float* D);

}  // namespace fp8emu::emu::detail
