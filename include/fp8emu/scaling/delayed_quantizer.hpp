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
  void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role, DeviceOperand& out,
            backend::CastCounters* counters) override;
  /// The update of every slot: on the host (DelayedScalingState::update), or, while the state is on
  /// a device, that device's fused update (backend::Device::delayed_update, the same bits).
  void update_scales() override;
  DelayedScalingState* amax_history_state() override { return &state_; }
  void to_device(const backend::Device& device) override;
  void to_host() override;
  std::vector<float> save_state() const override;
  void load_state(const std::vector<float>& state) override;
  std::string device_unsupported() const override;
  const DelayedScaling& recipe() const { return recipe_; }

  /// Copies the host state and, when the state is on a device, a new copy there.
  DelayedQuantizer(const DelayedQuantizer& o);
  DelayedQuantizer& operator=(const DelayedQuantizer&) = delete;

 private:
  DelayedScaling recipe_;
  DelayedScalingState state_;
  // While the state is on a device of its own memory: its scales [num_slots] and history
  // [history_len, num_slots] there (state_ is then stale until to_host()).
  const backend::Device* home_ = nullptr;
  backend::DeviceTensor<float> scale_, history_;
};

}  // namespace fp8emu::scaling
