// 128-block scaling's quantizer (see include/fp8emu/scaling/block_quantizer.hpp).
#include "fp8emu/scaling/block_quantizer.hpp"

namespace fp8emu::scaling {

BlockQuantizer::BlockQuantizer(const Float8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

void BlockQuantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                          DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  // 128 x 128 tiles for the weights, 1 x 128 blocks for every other role; fp32 scales.
  const backend::BlockCast c = backend::BlockCast::fp32_blocks(format(), kFloat8Block, role == TensorRole::kWeight,
                                                               !recipe_.use_f32_scales, recipe_.amax_epsilon);
  cast_blocks(device, c, x, rows, cols, out, counters);
}

std::unique_ptr<Quantizer> Float8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<BlockQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
