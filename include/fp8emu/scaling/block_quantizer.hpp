/// \file block_quantizer.hpp
/// \brief 128-block scaling's quantizer (TE Float8BlockScaling, DeepSeek-V3 style): 1x128 blocks
/// for activations and gradients, 128x128 tiles for weights, fp32 scales.
///
/// Mirrors TE `pytorch/tensor/float8_blockwise_tensor.py` Float8BlockQuantizer (block_scaling_dim
/// 1 for input and grad_output, 2 for weight) and its cast kernels
/// `transformer_engine/common/transpose/quantize_transpose_vector_blockwise.cu` (1x128) and
/// `quantize_transpose_square_blockwise.cu` (128x128), through emu::quantize_block_1d / _2d.
#pragma once

#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::scaling {

/// Block length (1D) and tile side (2D) of TE Float8BlockScaling.
inline constexpr int kFloat8Block = 128;
/// The GEMM block of Float8BlockScaling with mxfp8_gemms (Blackwell's MXFP8 GEMM).
inline constexpr int kMxfp8GemmBlock = 32;

/// A cast of an fp32 [rows, cols] tensor. input / grad_output (1D): kRowwise gives the view
/// [rows, cols] with 1x128 blocks along cols, kColumnwise the view [cols, rows] with 128x1 blocks
/// along rows, each quantized independently from the fp32 source. weight (2D): one scale per
/// 128x128 tile, shared by the row-wise view and the column-wise view (the transposed codes).
/// Scales: core::compute_scale_from_amax(block amax, fp8_max, pow2 = !use_f32_scales,
/// amax_epsilon); scale_inv = 1/scale per block; codes = Q(RN(x * scale)) with __NV_SATFINITE.
/// With the recipe's mxfp8_gemms (TE on Blackwell) the operand is an MXFP8 one: the same codes, its
/// scale_inv per 1 x 32 block (Device::block_scales_to_mxfp8 of the 128-block scales), so every GEMM
/// of it runs with 32-element blocks. No state.
class BlockQuantizer final : public Quantizer {
 public:
  /// \throws fp8emu::Error for invalid recipe parameters.
  BlockQuantizer(const Float8BlockScaling& recipe, Direction direction);

  std::unique_ptr<Quantizer> clone() const override { return std::make_unique<BlockQuantizer>(*this); }
  const char* recipe_name() const override { return Float8BlockScaling::kName; }
  ScalingMode scaling_mode() const override { return Float8BlockScaling::kScalingMode; }
  void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role, DeviceOperand& out,
            backend::CastCounters* counters) override;
  int block_length(TensorRole) const override { return recipe_.mxfp8_gemms ? kMxfp8GemmBlock : kFloat8Block; }
  const Float8BlockScaling& recipe() const { return recipe_; }

 private:
  Float8BlockScaling recipe_;
};

}  // namespace fp8emu::scaling
