// 128-block scaling's quantizer (see include/fp8emu/scaling/block_quantizer.hpp).
#include "fp8emu/scaling/block_quantizer.hpp"

namespace fp8emu::scaling {

BlockQuantizer::BlockQuantizer(const Float8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

void BlockQuantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                          DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  backend::BlockCast c;
  c.kind = role == TensorRole::kWeight ? backend::BlockCast::kTile2d : backend::BlockCast::kBlock1d;
  c.fmt = format();
  c.block = kFloat8Block;
  c.pow2 = !recipe_.use_f32_scales;
  c.epsilon = recipe_.amax_epsilon;
  cast_blocks(device, c, x, rows, cols, out, counters);
}

std::unique_ptr<Quantizer> Float8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<BlockQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
