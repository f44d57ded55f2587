// Delayed scaling's quantizer (see include/fp8emu/scaling/delayed_quantizer.hpp).
#include "fp8emu/scaling/delayed_quantizer.hpp"

namespace fp8emu::scaling {

DelayedQuantizer::DelayedQuantizer(const DelayedScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)),
      recipe_(recipe),
      state_(num_slots(direction), recipe.amax_history_len) {}

void DelayedQuantizer::quantize_device(const backend::Device& device, const float* x, int rows, int cols,
                                       TensorRole role, DeviceOperand& out, emu::QuantizeStats* stats) {
  check_device_cast(out, rows, cols, role);
  const int slot = slot_of(role);
  const float scale = state_.scale(slot);
  device.upload(out.scale, &scale, sizeof(float));
  quantize_per_tensor_device(device, x, rows, cols, out, state_.amax_ptr(slot), stats);
}

std::unique_ptr<Quantizer> DelayedScaling::make_quantizer(Direction direction) const {
  return std::make_unique<DelayedQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
