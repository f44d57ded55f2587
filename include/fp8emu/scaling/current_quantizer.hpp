/// \file current_quantizer.hpp
/// \brief Current scaling's quantizer: per-tensor casts scaled by the tensor's own amax.
///
/// Mirrors TE `pytorch/tensor/float8_tensor.py` Float8CurrentScalingQuantizer: an amax kernel over
/// the tensor, then `compute_scale_from_amax` (TE `transformer_engine/common/recipe/recipe_common.cuh`),
/// then the cast with that scale and a null amax pointer.
#pragma once

#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::scaling {

/// A cast: amax = max|x| (NaN ignored; emu::compute_amax), scale =
/// core::compute_scale_from_amax(amax, max_finite(format()), use_power_2_scales, amax_epsilon,
/// FLT_MAX) (amax 0, inf or NaN give scale 1), codes = Q(RN(x * scale)) (__NV_SATFINITE, RNE),
/// scale_inv = RN(1/scale). No state.
class CurrentQuantizer final : public Quantizer {
 public:
  /// \throws fp8emu::Error for invalid recipe parameters.
  CurrentQuantizer(const CurrentScaling& recipe, Direction direction);

  std::unique_ptr<Quantizer> clone() const override { return std::make_unique<CurrentQuantizer>(*this); }
  const char* recipe_name() const override { return CurrentScaling::kName; }
  ScalingMode scaling_mode() const override { return CurrentScaling::kScalingMode; }
  void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role, DeviceOperand& out,
            backend::CastCounters* counters) override;
  /// TE cannot fuse a current-scaling cast into the norm kernel (the amax comes first): the norm
  /// writes bf16 and this cast reads it.
  bool reads_bf16_norm_output() const override { return true; }
  const CurrentScaling& recipe() const { return recipe_; }

 private:
  CurrentScaling recipe_;
};

}  // namespace fp8emu::scaling
