/// \file hadamard.hpp
/// \brief The random Hadamard transform (RHT) of TE's NVFP4 recipe, one output element at a time.
/// Host and device (FP8EMU_HD): the CPU devices and the CUDA kernel call exactly this function.
///
/// TE applies it to the column-wise copy of inputs and gradients before their NVFP4 cast, so that
/// the wgrad GEMM (which reads both column-wise copies, K = tokens) sees both operands multiplied by
/// the same orthogonal matrix, which cancels in the product. Mirrored from TE
/// `transformer_engine/pytorch/tensor/nvfp4_tensor.py` (`get_wgrad_sign_vector`, `get_rht_matrix`)
/// and `transformer_engine/common/hadamard_transform/` (docs/nvfp4.md §The Hadamard transform):
///   - the matrix is M = diag(s) * H16 / 4, H16 the Sylvester Hadamard matrix
///     (H[i][j] = (-1)^popcount(i & j)), s TE's fixed sign vector;
///   - it multiplies 16 consecutive elements along the view's K axis from the right: for a group
///     v[0..15], y[j] = sum_i v[i] * s[i] * H[i][j] / 4;
///   - its input is bf16 (TE: "RHT is only supported for bfloat16 input"): v[i] = bf16(x[i]), RN;
///   - its output is bf16 (TE rounds the tensor core's fp32 result with cvt.rn.bf16x2.f32).
///
/// Tail rule (a model choice; TE requires a multiple of 16): rows past the last whole group of 16
/// are not transformed, so the transform stays orthogonal and still cancels in the wgrad GEMM.
///
/// Model choice (named `rht_sum_binary64`, not measured): the 16 products are exact; they are
/// summed in binary64 in increasing i, the sum rounded once to fp32 (RN), then to bf16 (RN). This
/// is the exact sum rounded to fp32 whenever the 16 terms span fewer than 45 binades (every sum of
/// terms with 8-bit significands and that spread is exact in binary64), which is what any tensor
/// core returns when its fp32 result is exact; how TE's wmma / UMMA accumulation rounds wider
/// spreads is unpublished.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"

namespace fp8emu::core {

/// Elements per Hadamard group (TE's H16).
inline constexpr int kRhtSize = 16;

/// TE's sign vector of the wgrad RHT as a mask, bit i set where s[i] = -1:
/// s = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1] (nvfp4_tensor.py
/// get_wgrad_sign_vector; the same vector in TE's JAX hadamard.py).
inline constexpr std::uint16_t kTeRhtSignMask = 0xD7E8u;

/// Entry (i, j) of the Sylvester Hadamard matrix H16: +1 or -1.
FP8EMU_HD constexpr int hadamard16_entry(int i, int j) {
  int b = i & j, parity = 0;
  while (b) {
    parity ^= b & 1;
    b >>= 1;
  }
  return parity ? -1 : 1;
}

/// An fp32 input read as bf16 (RN), widened to binary64 (exact).
FP8EMU_HD double rht16_input(float x) {
  return double(bits_to_f32(bf16_to_f32_bits(f32_bits_to_bf16_rne(f32_to_bits(x)))));
}

/// Output j of the RHT of one group whose inputs are already rht16_input values v[0..15]: the sum
/// in increasing i, rounded to fp32, then to bf16 (returned as fp32).
FP8EMU_HD float rht16_output(const double* v, int j, std::uint16_t sign_mask) {
  double sum = 0.0;
  for (int i = 0; i < kRhtSize; ++i) {
    const bool negative = (hadamard16_entry(i, j) < 0) != (((sign_mask >> i) & 1u) != 0);
    sum += negative ? -v[i] : v[i];
  }
#if defined(__CUDA_ARCH__)
  const float s = __double2float_rn(sum * 0.25);
#else
  const float s = float(sum * 0.25);
#endif
  return bits_to_f32(bf16_to_f32_bits(f32_bits_to_bf16_rne(f32_to_bits(s))));
}

/// Output j (0..15) of the RHT of one group of 16 elements at x[0], x[stride], ..., x[15 * stride]
/// (fp32 inputs, read as bf16), with the signs of `sign_mask`: a bf16 value returned as fp32 (see
/// the file comment for the rounding). NaN inputs give a NaN (CUDA's bf16 NaN, 0x7FFF), Inf inputs
/// the Inf or NaN of the sum.
FP8EMU_HD float rht16_element(const float* x, std::size_t stride, int j, std::uint16_t sign_mask) {
  double v[kRhtSize];
  for (int i = 0; i < kRhtSize; ++i) v[i] = rht16_input(x[std::size_t(i) * stride]);
  return rht16_output(v, j, sign_mask);
}

}  // namespace fp8emu::core
