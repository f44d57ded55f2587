// Current scaling's quantizer (see include/fp8emu/scaling/current_quantizer.hpp).
#include "fp8emu/scaling/current_quantizer.hpp"

#include <cfloat>

#include "fp8emu/core/scale.hpp"

namespace fp8emu::scaling {

CurrentQuantizer::CurrentQuantizer(const CurrentScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

void CurrentQuantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                            DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  // The amax kernel, then compute_scale_from_amax, on the device (backend::Device::current_scale).
  device.current_scale(x, std::size_t(rows) * std::size_t(cols), format(), recipe_.use_power_2_scales,
                       recipe_.amax_epsilon, out.scale);
  cast_per_tensor(device, x, rows, cols, out, nullptr, counters);  // TE casts with a null amax
}

std::unique_ptr<Quantizer> CurrentScaling::make_quantizer(Direction direction) const {
  return std::make_unique<CurrentQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
