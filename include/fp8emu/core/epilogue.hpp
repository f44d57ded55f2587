/// \file epilogue.hpp
/// \brief The epilogue of a scaled FP8 GEMM, one element at a time (emu::GemmEpilogue, cuBLASLt's
/// alpha, beta * C and bias): the function the CPU emulator (emulation/gemm_models.cpp) and the GPU
/// kernel (cuda/kernels.cu, gemm_epilogue_kernel) both call, so the two give the same bits.
///
/// Each step is one correctly rounded fp32 operation (core/fp32_ops.hpp: never an FMA):
///   t = RN(acc * RN(scale_inv_a * scale_inv_b))         (the GEMM, before this function)
///   if alpha != 1:  t = RN(alpha * t)
///   if beta != 0:   t = RN(t + RN(beta * c))              (c is not read when beta == 0, as cuBLAS)
///   if has_bias:    t = RN(t + bias)
/// The order of these roundings inside cuBLASLt is not documented; this is fp8emu's choice
/// (docs/tensor-core-model.md). Unlike the integer-only cast functions, this is fp32 arithmetic: one
/// IEEE rounding per operation on both sides (core/fp32_ops.hpp).
#pragma once

#include "fp8emu/config.hpp"
#include "fp8emu/core/fp32_ops.hpp"

namespace fp8emu::core {

/// One element of D before its output conversion (see the file comment). `c` and `bias` are
/// ignored unless beta != 0 and has_bias.
FP8EMU_HD float gemm_epilogue_element(float t, float alpha, float beta, float c, bool has_bias, float bias) {
  if (alpha != 1.0f) t = mul_rn(alpha, t);
  if (beta != 0.0f) t = add_rn(t, mul_rn(beta, c));
  if (has_bias) t = add_rn(t, bias);
  return t;
}

}  // namespace fp8emu::core
