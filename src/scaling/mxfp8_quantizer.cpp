// MXFP8 block scaling's quantizer (see include/fp8emu/scaling/mxfp8_quantizer.hpp).
#include "fp8emu/scaling/mxfp8_quantizer.hpp"

namespace fp8emu::scaling {

Mxfp8Quantizer::Mxfp8Quantizer(const MXFP8BlockScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)), recipe_(recipe) {}

QuantizedTensor Mxfp8Quantizer::quantize(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                         TensorRole role, Usage usage, emu::QuantizeStats* stats) {
  check_cast(rows, cols, role);
  QuantizedTensor q = block_operand(format(), rows, cols, usage);
  const bool row = q.has(Usage::kRowwise);
  if (row) q.rowwise_blocks = kernels.quantize_mxfp8(x, rows, cols, emu::BlockAxis::kRowwise, format(), recipe_.rule, stats);
  if (q.has(Usage::kColumnwise))
    q.columnwise_blocks = kernels.quantize_mxfp8(x, rows, cols, emu::BlockAxis::kColumnwise, format(), recipe_.rule,
                                                 row ? nullptr : stats);
  return q;
}

std::unique_ptr<Quantizer> MXFP8BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<Mxfp8Quantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
