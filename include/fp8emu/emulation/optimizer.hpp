/// \file optimizer.hpp
/// \brief Vectorised CPU kernel of the Adam step: the bits of the element layer's
/// core::adam_element (include/fp8emu/core/nn_element.hpp), eight weights at a time.
#pragma once

#include <cstddef>

namespace fp8emu::emu {

/// One Adam step of n fp32 weights: for each i < n, core::adam_element(w[i], g[i], m[i], v[i], b1,
/// b2, step, sqrt_bc2, eps), i.e. m = b1 m + (1 - b1) g; v = b2 v + ((1 - b2) g) g;
/// w = w - (step m) / (sqrt(v) / sqrt_bc2 + eps), every operation one IEEE binary32 rounding to
/// nearest in that order (no FMA contraction; sqrt correctly rounded), updated in place. step =
/// lr / (1 - b1^t) and sqrt_bc2 = sqrt(1 - b2^t) come from the caller (nn::Optimizer). The arrays
/// must not overlap. Bits: those of the element function for every finite and infinite result, on
/// every instruction-set path (AVX-512, AVX2, x86-64 baseline; FP8EMU_GEMM_ISA chooses, as for the
/// GEMMs) and thread count; a NaN result is a NaN whose payload may differ from the scalar code's
/// (which of two NaN operands an x86 operation returns depends on the compiler's operand order).
/// OpenMP over chunks for large n; deterministic.
void adam_step(float* w, const float* g, float* m, float* v, std::size_t n, float b1, float b2, float step,
               float sqrt_bc2, float eps);

}  // namespace fp8emu::emu
