/// \file mxfp8_quantizer.hpp
/// \brief MXFP8 block scaling's quantizer: 32-element blocks along the GEMM's K axis, one E8M0
/// scale each.
///
/// Mirrors TE `pytorch/tensor/mxfp8_tensor.py` MXFP8Quantizer and its cast kernel
/// `transformer_engine/common/util/cast_kernels.cuh` / `quantize_mxfp8.cuh` (ptx float_to_e8m0),
/// through emu::quantize_mxfp8.
#pragma once

#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::scaling {

/// Elements per E8M0 scale of an MXFP8 block (OCP MX v1.0; TE quantize_mxfp8.cuh).
inline constexpr int kMxfp8Block = 32;

/// A cast of an fp32 [rows, cols] tensor: kRowwise gives the view [rows, cols] with 1x32 blocks
/// along cols; kColumnwise gives the view [cols, rows] with 32x1 blocks along rows, quantized
/// independently from the fp32 source (not a transpose of the row-wise codes), as TE. Every role
/// (input, weight, grad_output) is cast the same way. Each block: E8M0 scale from the block amax
/// under recipe.rule (kTransformerEngine: no value saturates; kOcp: values above fp8_max * X clip),
/// codes = Q(RN(x / 2^e)) with __NV_SATFINITE. Partial trailing blocks are allowed. No state.
class Mxfp8Quantizer final : public Quantizer {
 public:
  /// \throws fp8emu::Error for invalid recipe parameters.
  Mxfp8Quantizer(const MXFP8BlockScaling& recipe, Direction direction);

  std::unique_ptr<Quantizer> clone() const override { return std::make_unique<Mxfp8Quantizer>(*this); }
  const char* recipe_name() const override { return MXFP8BlockScaling::kName; }
  ScalingMode scaling_mode() const override { return MXFP8BlockScaling::kScalingMode; }
  void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role, DeviceOperand& out,
            backend::CastCounters* counters) override;
  int block_length(TensorRole) const override { return kMxfp8Block; }
  const MXFP8BlockScaling& recipe() const { return recipe_; }

 private:
  MXFP8BlockScaling recipe_;
};

}  // namespace fp8emu::scaling
