// 128-block scaling's quantizer (see include/fp8emu/scaling/block_quantizer.hpp).
#include "fp8emu/scaling/block_quantizer.hpp"

namespace fp8emu::scaling {

BlockQuantizer::BlockQuantizer(const Float8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

QuantizedTensor BlockQuantizer::quantize(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                         TensorRole role, Usage usage, emu::QuantizeStats* stats) {
  check_cast(rows, cols, role);
  QuantizedTensor q = block_operand(format(), rows, cols, usage);
  const bool pow2 = !recipe_.use_f32_scales;
  if (role == TensorRole::kWeight) {  // 128x128 tiles: one cast gives both views
    emu::BlockQuantized2D w =
        kernels.quantize_block_2d(x, rows, cols, format(), kFloat8Block, pow2, recipe_.amax_epsilon, stats);
    if (q.has(Usage::kRowwise)) q.rowwise_blocks = std::move(w.rowwise);
    if (q.has(Usage::kColumnwise)) q.columnwise_blocks = std::move(w.columnwise);
    return q;
  }
  const bool row = q.has(Usage::kRowwise);
  if (row)
    q.rowwise_blocks = kernels.quantize_block_1d(x, rows, cols, emu::BlockAxis::kRowwise, format(), kFloat8Block, pow2,
                                                 recipe_.amax_epsilon, stats);
  if (q.has(Usage::kColumnwise))
    q.columnwise_blocks = kernels.quantize_block_1d(x, rows, cols, emu::BlockAxis::kColumnwise, format(),
                                                    kFloat8Block, pow2, recipe_.amax_epsilon, row ? nullptr : stats);
  return q;
}

std::unique_ptr<Quantizer> Float8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<BlockQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
