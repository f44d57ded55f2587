// The Quantizer interface's shared parts: roles, the factory, the per-tensor cast and the FP8 GEMM
// of quantized operands (see include/fp8emu/scaling/quantizer.hpp).
#include "fp8emu/scaling/quantizer.hpp"

#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

int slot_of(TensorRole role) {
  switch (role) {
    case TensorRole::kInput: return 0;
    case TensorRole::kWeight: return 1;
    case TensorRole::kOutput: return 2;
    case TensorRole::kGradOutput: return 0;
    case TensorRole::kGradInput: return 1;
  }
  FP8EMU_FAIL("invalid TensorRole ", int(role));
}

Direction direction_of(TensorRole role) {
  switch (role) {
    case TensorRole::kInput:
    case TensorRole::kWeight:
    case TensorRole::kOutput: return Direction::kForward;
    case TensorRole::kGradOutput:
    case TensorRole::kGradInput: return Direction::kBackward;
  }
  FP8EMU_FAIL("invalid TensorRole ", int(role));
}

int num_slots(Direction d) { return d == Direction::kForward ? 3 : 2; }

void Quantizer::check_cast(int rows, int cols, TensorRole role) const {
  FP8EMU_CHECK(rows >= 1 && cols >= 1, recipe_name(), " quantizer: sizes must be positive, got [", rows, ", ",
               cols, "]");
  FP8EMU_CHECK(direction_of(role) == direction_, recipe_name(), " quantizer: the ",
               direction_ == Direction::kForward ? "forward" : "backward",
               " quantizer casts only ", direction_ == Direction::kForward ? "input and weight" : "grad_output",
               " tensors");
}

// Each recipe record makes its own quantizer (defined beside it, in src/scaling/<name>_quantizer.cpp).
std::unique_ptr<Quantizer> make_quantizer(const Recipe& recipe, Direction direction) {
  return std::visit([direction](const auto& r) { return r.make_quantizer(direction); }, recipe);
}

QuantizedTensor block_operand(Format format, int rows, int cols, Usage usage) {
  QuantizedTensor q;
  q.mode = ScalingMode::kBlock;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.usage = usage;
  return q;
}

QuantizedTensor quantize_per_tensor(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                    Usage usage, float scale, Format format, float* amax,
                                    emu::QuantizeStats* stats) {
  FP8EMU_CHECK(rows >= 1 && cols >= 1, "per-tensor cast: sizes must be positive, got [", rows, ", ", cols, "]");
  QuantizedTensor q;
  q.mode = ScalingMode::kPerTensor;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.usage = usage;
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  // TE's cast_transpose: one pass over x writes the copies the usage asks for (the column-wise one
  // [cols, rows]); the codes, counts and amax are those of one cast of x.
  if (q.has(Usage::kRowwise)) q.rowwise_data.resize(n);
  if (q.has(Usage::kColumnwise)) q.columnwise_data.resize(n);
  const emu::QuantizeStats st = kernels.cast_transpose(
      x, rows, cols, scale, format, q.has(Usage::kRowwise) ? q.rowwise_data.data() : nullptr,
      q.has(Usage::kColumnwise) ? q.columnwise_data.data() : nullptr, amax);
  if (stats) *stats += st;
  q.scale = scale;
  q.scale_inv = emu::scale_inv_of(scale);
  return q;
}

namespace {
const char* usage_name(Usage u) { return u == Usage::kRowwise ? "row-wise" : "column-wise"; }

void check_operand(const QuantizedTensor& t, Usage u, const char* which) {
  FP8EMU_CHECK(u == Usage::kRowwise || u == Usage::kColumnwise, "gemm_tn: operand ", which,
               " must be read row-wise or column-wise");
  FP8EMU_CHECK(t.has(u), "gemm_tn: operand ", which, " has no ", usage_name(u), " copy (quantize it with that usage)");
}
}  // namespace

void gemm_tn(const backend::Kernels& kernels, const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d) {
  check_operand(a, a_usage, "A");
  check_operand(b, b_usage, "B");
  FP8EMU_CHECK(a.mode == b.mode, "gemm_tn: the operands have different scaling modes");
  const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
  switch (a.mode) {
    case ScalingMode::kPerTensor: {
      const int M = a_row ? a.rows : a.cols, K = a_row ? a.cols : a.rows;
      const int N = b_row ? b.rows : b.cols, KB = b_row ? b.cols : b.rows;
      FP8EMU_CHECK(K == KB, "gemm_tn: K differs, ", K, " for A and ", KB, " for B");
      kernels.gemm_fp8_tn(M, N, K, a_row ? a.rowwise_data.data() : a.columnwise_data.data(), a.format, a.scale_inv,
                          b_row ? b.rowwise_data.data() : b.columnwise_data.data(), b.format, b.scale_inv, acc, d);
      return;
    }
    case ScalingMode::kBlock:
      FP8EMU_CHECK(acc.model == emu::Accumulation::kFp32,
                   "gemm_tn: block-scaled GEMMs accumulate in fp32 only (tensor-core models are per-tensor only)");
      kernels.gemm_fp8_block_tn(a_row ? a.rowwise_blocks : a.columnwise_blocks,
                                b_row ? b.rowwise_blocks : b.columnwise_blocks, d);
      return;
  }
  FP8EMU_FAIL("gemm_tn: invalid scaling mode");
}

}  // namespace fp8emu::scaling
