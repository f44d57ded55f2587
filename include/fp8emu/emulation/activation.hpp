/// \file activation.hpp
/// \brief Vectorised CPU kernels of the tanh-form GELU and of the correctly rounded tanh and exp: the bits
/// of the element layer (core::gelu_tanh_forward, core::gelu_tanh_grad, core::tanh_rn, core::exp_rn in
/// include/fp8emu/core), eight elements at a time.
///
/// Each kernel evaluates, per element, the same IEEE binary32 and binary64 operations in the same
/// order as the element function (no FMA contraction: fp8emu builds with -ffp-contract=off), so its
/// results are bit-identical to calling the element function per element, on every instruction-set
/// path (AVX-512, AVX2, x86-64 baseline; FP8EMU_GEMM_ISA chooses, as for the GEMMs) and any thread
/// count. tanh_rn's two branches (|x| < 1/8: odd polynomial; else (e^2|x| - 1) / (e^2|x| + 1) in
/// double-double) are both computed and one selected per lane; the lanes the vector path does not
/// cover (NaN, |x| < 2^-12, |x| > 9.1, and a binary64 sum that lands exactly on an fp32 rounding
/// midpoint, where the sign of the tail decides) call core::tanh_rn. The tests compare every
/// path with the element function on all 2^32 inputs (label `exhaustive`) and on a sample.
#pragma once

#include <cstddef>

namespace fp8emu::emu {

/// y[i] = core::exp_rn(x[i]) for i < n (the attention softmax's exponential, eight lanes at a
/// time: lanes with NaN, |x| < 2^-25, x > 88, x < -87 or an exact fp32 midpoint call
/// core::exp_rn). x and y may be the same array. OpenMP over chunks for large n; deterministic.
void exp_rn(const float* x, std::size_t n, float* y);

/// y[i] = core::tanh_rn(x[i]) for i < n. x and y may be the same array. Threads: OpenMP over
/// chunks for large n; deterministic.
void tanh_rn(const float* x, std::size_t n, float* y);

/// y[i] = core::gelu_tanh_forward(x[i]) for i < n (TE's tanh-form GELU). x and y may alias.
void gelu_tanh_forward(const float* x, std::size_t n, float* y);

/// dx[i] = dy[i] * core::gelu_tanh_grad(x[i]) for i < n (one fp32 product after the element
/// function). dx may alias dy.
void gelu_tanh_backward(const float* x, const float* dy, std::size_t n, float* dx);

}  // namespace fp8emu::emu
