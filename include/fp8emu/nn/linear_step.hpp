/// \file linear_step.hpp
/// \brief The FP8 step of TE's Linear (fprop; dgrad, wgrad and the bias grad) on one backend::Device,
///        written once: nn::Linear and the Python module (fp8emu.layers, fp8emu.torch) both run it.
///
/// Mirrors TE `pytorch/module/linear.py` (_Linear.forward / backward) with the recipe's quantizers
/// (scaling/quantizer.hpp) and general_gemm in the TN layout (scaling::gemm_tn):
///  - fprop  y = x W^T + b: x cast with the `input` role (row-wise; also column-wise when training,
///    for wgrad), GEMM of x's and W's row-wise copies, then b added to the fp32 result (one fp32 add
///    per element, core::bias_add).
///  - backward: db = the column sum of the unquantized fp32 dy in row order from +0 (TE's bias grad);
///    dy cast with the `grad_output` role (both copies); wgrad dW = dy^T x from the column-wise copies
///    of dy and x; dgrad dx = dy W from dy's row-wise and W's column-wise copy.
/// The weight's cast (the `weight` role, both copies) is the caller's: it is cached across calls
/// (TE's is_first_microbatch) and its amax is recorded only when it runs.
///
/// Every pointer is in `device`'s memory; operations are enqueued in the device's order (a device of
/// host memory runs them at once). Rounding RN-even, overflow __NV_SATFINITE (the quantizers' casts);
/// bit-identical on every device and for any thread count.
#pragma once

#include "fp8emu/backend/device.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::nn {

/// fprop of an FP8 Linear: casts x [rows, in] (fp32) into `x_op` with `fwd`, then y [rows, out] =
/// x W^T (+ bias when non-null, [out]). The bias is rounded to bf16 first and added in fp32,
/// RN(y + bf16(b)), as TE's modules cast it ("cuBLAS does not support FP8 GEMM with FP32 bias",
/// pytorch/module/linear.py) and cuBLASLt's epilogue adds it (docs/gpu.md measures that epilogue).
/// \param x_op  device_operand(fwd, rows, in, kInput, usage) with its buffers set: usage kRowwise
///              for inference, kBoth for training (wgrad reads the column-wise copy).
/// \param w_op  the weight [out, in] cast by `fwd` with the kWeight role (its row-wise copy is read).
/// \param acc   the fprop GEMM's accumulation (TE on Hopper: the tensor-core model, fast
///              accumulation; block-scaled operands: a model for each scale block's partial).
/// \param x_counts  nullable device memory: adds the input cast's counts.
/// \throws fp8emu::Error for shapes that do not match (x_op's columns and W's) or a model the
///         operands' scaling mode does not take; nothing is cast then.
void fp8_linear_fprop(const backend::Device& device, scaling::Quantizer& fwd, const float* x, int rows,
                      scaling::DeviceOperand& x_op, const scaling::DeviceOperand& w_op, const float* bias,
                      const emu::GemmAccumulation& acc, float* y, backend::CastCounters* x_counts);

/// The checks fp8_linear_fprop makes before its cast, on their own (a caller that casts the weight
/// first makes them before that cast): x_op [rows, in] matches the weight's input features, w_op is
/// a cast of `fwd` (its scaling mode and format) with a row-wise copy, and the fprop GEMM takes the
/// operands and `acc` (scaling::check_gemm_tn). \throws fp8emu::Error naming the problem.
void check_fp8_linear_fprop(const scaling::Quantizer& fwd, const scaling::DeviceOperand& x_op, int rows,
                            const scaling::DeviceOperand& w_op, const emu::GemmAccumulation& acc);

/// backward of an FP8 Linear: db [out] (nullable: not wanted), dy [rows, out] cast into `dy_op` with
/// `bwd`, dW [out, in] = dy^T x (nullable: not wanted) and dx [rows, in] = dy W (nullable).
/// \param dy_op  device_operand(bwd, rows, out, kGradOutput, kBoth) with its buffers set.
/// \param x_op   the forward's input operand (column-wise copy read by wgrad).
/// \param w_op   the forward's weight operand (column-wise copy read by dgrad).
/// \param dy_counts  nullable device memory: adds dy's cast counts.
/// \throws fp8emu::Error when dy's shape does not match the forward's (x_op rows, w_op rows) or an
///         operand lacks the copy a GEMM reads; nothing is cast then.
void fp8_linear_backward(const backend::Device& device, scaling::Quantizer& bwd, const float* dy, int rows,
                         scaling::DeviceOperand& dy_op, const scaling::DeviceOperand& x_op,
                         const scaling::DeviceOperand& w_op, const emu::GemmAccumulation& dgrad,
                         const emu::GemmAccumulation& wgrad, float* dx, float* dw, float* db,
                         backend::CastCounters* dy_counts);

}  // namespace fp8emu::nn
