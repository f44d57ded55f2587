/// \file delayed_quantizer.hpp
/// \brief Delayed scaling's quantizer: per-tensor casts with the scale stored from earlier steps.
///
/// Mirrors TE `pytorch/tensor/float8_tensor.py` Float8Quantizer (the cast reads the slot's stored
/// scale and max-accumulates the tensor's amax into amax_history row 0) and TE
/// `transformer_engine/common/recipe/delayed_scaling.cu` (the amax/scale update, see
/// DelayedScalingState::update).
#pragma once

#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::scaling {

/// One direction's delayed-scaling casts and state: scale and amax_history of its num_slots()
/// slots (forward 3, backward 2), history length recipe.amax_history_len.
/// A cast of role r: codes = Q(RN(x * scale[slot_of(r)])) (__NV_SATFINITE, RNE),
/// amax_history[0][slot] = fmaxf(amax_history[0][slot], amax(x)); scale_inv = RN(1/scale).
/// Scales change only in update_scales(), with the recipe's margin, amax_compute_algo and fused or
/// unfused path, against the max finite value of format().
class DelayedQuantizer final : public Quantizer {
 public:
  /// \throws fp8emu::Error for invalid recipe parameters.
  DelayedQuantizer(const DelayedScaling& recipe, Direction direction);

  std::unique_ptr<Quantizer> clone() const override { return std::make_unique<DelayedQuantizer>(*this); }
  const char* recipe_name() const override { return DelayedScaling::kName; }
  ScalingMode scaling_mode() const override { return DelayedScaling::kScalingMode; }
  void quantize_device(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                       DeviceOperand& out, emu::QuantizeStats* stats) override;
  void update_scales() override { state_.update(recipe_, format()); }
  DelayedScalingState* amax_history_state() override { return &state_; }
  const DelayedScaling& recipe() const { return recipe_; }

 private:
  DelayedScaling recipe_;
  DelayedScalingState state_;
};

}  // namespace fp8emu::scaling
