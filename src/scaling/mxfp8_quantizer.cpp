// MXFP8 block scaling's quantizer (see include/fp8emu/scaling/mxfp8_quantizer.hpp).
#include "fp8emu/scaling/mxfp8_quantizer.hpp"

namespace fp8emu::scaling {

Mxfp8Quantizer::Mxfp8Quantizer(const MXFP8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

QuantizedTensor Mxfp8Quantizer::quantize(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                         TensorRole role, Usage usage, emu::QuantizeStats* stats) {
  check_cast(rows, cols, role);
  QuantizedTensor q = block_operand(format(), rows, cols, usage);
  // TE's quantize_mxfp8 with the usages asked for: one read of x writes both copies; the counts
  // are the row-wise cast's when it is made, else the column-wise one's.
  const bool row = q.has(Usage::kRowwise), col = q.has(Usage::kColumnwise);
  if (!row && !col) return q;  // no copy asked for (the fused call needs one)
  kernels.quantize_mxfp8_both(x, rows, cols, format(), recipe_.rule, row ? &q.rowwise_blocks : nullptr,
                              col ? &q.columnwise_blocks : nullptr, stats, row ? nullptr : stats);
  return q;
}

void Mxfp8Quantizer::quantize_device(const backend::Device& device, const float* x, int rows, int cols,
                                     TensorRole role, DeviceOperand& out, emu::QuantizeStats* stats) {
  check_device_cast(out, rows, cols, role);
  backend::BlockCast c;
  c.kind = backend::BlockCast::kMxfp8;
  c.fmt = format();
  c.rule = recipe_.rule;
  c.block = kMxfp8Block;
  block_cast_device(device, c, x, rows, cols, out, stats);
}

std::unique_ptr<Quantizer> MXFP8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<Mxfp8Quantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
