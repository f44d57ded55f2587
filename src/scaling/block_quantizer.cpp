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
  // 1x128 blocks (TE quantize_transpose_vector_blockwise): one read of x writes the copies asked
  // for; the counts are the row-wise cast's when it is made, else the column-wise one's.
  const bool row = q.has(Usage::kRowwise), col = q.has(Usage::kColumnwise);
  if (!row && !col) return q;  // no copy asked for (the fused call needs one)
  kernels.quantize_block_1d_both(x, rows, cols, format(), kFloat8Block, pow2, recipe_.amax_epsilon,
                                 row ? &q.rowwise_blocks : nullptr, col ? &q.columnwise_blocks : nullptr, stats,
                                 row ? nullptr : stats);
  return q;
}

void BlockQuantizer::quantize_device(const backend::Device& device, const float* x, int rows, int cols,
                                     TensorRole role, DeviceOperand& out, emu::QuantizeStats* stats) {
  check_device_cast(out, rows, cols, role);
  backend::BlockCast c;
  c.kind = role == TensorRole::kWeight ? backend::BlockCast::kTile2d : backend::BlockCast::kBlock1d;
  c.fmt = format();
  c.block = kFloat8Block;
  c.pow2 = !recipe_.use_f32_scales;
  c.epsilon = recipe_.amax_epsilon;
  block_cast_device(device, c, x, rows, cols, out, stats);
}

std::unique_ptr<Quantizer> Float8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<BlockQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
