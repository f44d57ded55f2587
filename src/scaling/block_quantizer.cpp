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
  if (!recipe_.mxfp8_gemms) {
    cast_blocks(device, c, x, rows, cols, out, counters);
    return;
  }
  // Blackwell: the 128-block cast with its scales in temporaries, then TE's conversion of each view's
  // scales to E8M0 broadcast to 1 x 32 blocks along the view's K (rows of the column-wise view).
  static_assert(kFloat8Block % kMxfp8GemmBlock == 0, "a 128-block holds whole 32-blocks");
  constexpr int repeat = kFloat8Block / kMxfp8GemmBlock;
  auto blocks = [](int k, int b) { return (k + b - 1) / b; };
  backend::DeviceTensor<float> row_s, col_s;
  backend::BlockView row{}, col{};
  if (out.has(Usage::kRowwise)) {
    row_s = backend::DeviceTensor<float>(device, rows, blocks(cols, kFloat8Block));
    row = backend::BlockView{out.rowwise_data, row_s.get(), nullptr};
  }
  if (out.has(Usage::kColumnwise)) {
    col_s = backend::DeviceTensor<float>(device, cols, blocks(rows, kFloat8Block));
    col = backend::BlockView{out.columnwise_data, col_s.get(), nullptr};
  }
  device.block_cast(c, x, rows, cols, row, col, counters);
  if (row.codes) device.block_scales_to_mxfp8(row_s.get(), rows, blocks(cols, kMxfp8GemmBlock), repeat, out.rowwise_scale_inv);
  if (col.codes)
    device.block_scales_to_mxfp8(col_s.get(), cols, blocks(rows, kMxfp8GemmBlock), repeat, out.columnwise_scale_inv);
}

std::unique_ptr<Quantizer> Float8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<BlockQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
