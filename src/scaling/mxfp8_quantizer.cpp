// MXFP8 block scaling's quantizer (see include/fp8emu/scaling/mxfp8_quantizer.hpp).
#include "fp8emu/scaling/mxfp8_quantizer.hpp"

namespace fp8emu::scaling {

Mxfp8Quantizer::Mxfp8Quantizer(const MXFP8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

void Mxfp8Quantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                          DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  backend::BlockCast c = backend::BlockCast::mxfp8(format(), recipe_.rule);
  c.block = kMxfp8Block;
  cast_blocks(device, c, x, rows, cols, out, counters);
}

std::unique_ptr<Quantizer> MXFP8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<Mxfp8Quantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
