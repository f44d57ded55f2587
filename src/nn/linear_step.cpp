// The FP8 step of TE's Linear on one Device (see include/fp8emu/nn/linear_step.hpp).
#include "fp8emu/nn/linear_step.hpp"

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

using scaling::TensorRole;
using scaling::Usage;

namespace {
// The weight operand is the forward quantizer's cast of a weight: its scaling mode and format.
void check_weight(const scaling::Quantizer& fwd, const scaling::DeviceOperand& w_op) {
  FP8EMU_CHECK(w_op.mode == fwd.scaling_mode() && w_op.format == fwd.format(), "Linear: the weight operand (",
               w_op.mode == scaling::ScalingMode::kPerTensor ? "per-tensor" : "block-scaled", ", ",
               format_name(w_op.format), ") is not a cast of the ", fwd.recipe_name(), " forward quantizer (",
               fwd.scaling_mode() == scaling::ScalingMode::kPerTensor ? "per-tensor" : "block-scaled", ", ",
               format_name(fwd.format()), ")");
}
}  // namespace

void check_fp8_linear_fprop(const scaling::Quantizer& fwd, const scaling::DeviceOperand& x_op, int rows,
                            const scaling::DeviceOperand& w_op, const emu::GemmAccumulation& acc) {
  FP8EMU_CHECK(x_op.rows == rows && x_op.cols == w_op.cols, "Linear: the input [", rows, ", ", x_op.cols,
               "] does not match the weight's ", w_op.cols, " input features");
  FP8EMU_CHECK(w_op.has(Usage::kRowwise), "Linear: the weight operand has no row-wise copy (fprop reads it)");
  check_weight(fwd, w_op);
  scaling::check_gemm_tn(x_op, Usage::kRowwise, w_op, Usage::kRowwise, acc);
}

void fp8_linear_fprop(const backend::Device& device, scaling::Quantizer& fwd, const float* x, int rows,
                      scaling::DeviceOperand& x_op, const scaling::DeviceOperand& w_op, const float* bias,
                      const emu::GemmAccumulation& acc, float* y, backend::CastCounters* x_counts) {
  check_fp8_linear_fprop(fwd, x_op, rows, w_op, acc);  // before the cast records an amax
  fwd.cast(device, x, rows, x_op.cols, TensorRole::kInput, x_op, x_counts);
  // fprop: x [rows, K=in] . W [out, K=in]^T
  scaling::gemm_tn(device, x_op, Usage::kRowwise, w_op, Usage::kRowwise, acc, y);
  if (bias) {  // TE casts an fp32 bias to bf16 for the FP8 GEMM's epilogue
    backend::DeviceTensor<float> b16(device, 1, w_op.rows);
    device.copy(b16.get(), bias, std::size_t(w_op.rows) * sizeof(float));
    device.round_bf16(b16.get(), std::size_t(w_op.rows));
    device.bias_add(y, b16.get(), rows, w_op.rows);
  }
}

void fp8_linear_backward(const backend::Device& device, scaling::Quantizer& bwd, const float* dy, int rows,
                         scaling::DeviceOperand& dy_op, const scaling::DeviceOperand& x_op,
                         const scaling::DeviceOperand& w_op, const emu::GemmAccumulation& dgrad,
                         const emu::GemmAccumulation& wgrad, float* dx, float* dw, float* db,
                         backend::CastCounters* dy_counts) {
  const int out = w_op.rows;
  FP8EMU_CHECK(rows == x_op.rows && dy_op.rows == rows && dy_op.cols == out, "Linear: grad_output [", dy_op.rows,
               ", ", dy_op.cols, "] does not match the forward output [", x_op.rows, ", ", out, "]");
  FP8EMU_CHECK(x_op.cols == w_op.cols, "Linear: the saved input has ", x_op.cols, " features, the saved weight ",
               w_op.cols, " (operands of different layers)");
  FP8EMU_CHECK(!dw || x_op.has(Usage::kColumnwise),
               "Linear: the forward's input has no column-wise copy (wgrad needs a training forward)");
  FP8EMU_CHECK(!dx || w_op.has(Usage::kColumnwise), "Linear: the weight operand has no column-wise copy (dgrad reads it)");
  // Every GEMM's checks before the cast records dy's amax.
  if (dw) scaling::check_gemm_tn(dy_op, Usage::kColumnwise, x_op, Usage::kColumnwise, wgrad);
  if (dx) scaling::check_gemm_tn(dy_op, Usage::kRowwise, w_op, Usage::kColumnwise, dgrad);
  if (db) device.column_sum(dy, rows, out, db);  // from the unquantized gradient
  bwd.cast(device, dy, rows, out, TensorRole::kGradOutput, dy_op, dy_counts);
  // wgrad: dy^T [out, K=rows] . x^T [in, K=rows]^T
  if (dw) scaling::gemm_tn(device, dy_op, Usage::kColumnwise, x_op, Usage::kColumnwise, wgrad, dw);
  // dgrad: dy [rows, K=out] . W^T [in, K=out]^T
  if (dx) scaling::gemm_tn(device, dy_op, Usage::kRowwise, w_op, Usage::kColumnwise, dgrad, dx);
}

}  // namespace fp8emu::nn
