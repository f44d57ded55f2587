// Quantizer::quantize_device and gemm_tn on a backend::Device, run on backend::cpu_device(): the
// device program of every recipe against the host quantizers (tests/support/device_quantize_check.hpp;
// tests/gpu/test_device_ops.cpp runs the same checks on the GPU), and its argument errors.
#include <catch2/catch.hpp>

#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "support/device_quantize_check.hpp"

using namespace fp8emu;
using namespace fp8emu::scaling;

TEST_CASE("device casts of every recipe equal the host quantizers (cpu device)", "[scaling][device]") {
  testing::check_device_quantizers(backend::cpu_device());
}

TEST_CASE("GEMMs of device operands equal the host gemm_tn (cpu device)", "[scaling][device]") {
  testing::check_device_operand_gemms(backend::cpu_device());
}

TEST_CASE("device operands describe their cast and reject another", "[scaling][device]") {
  const backend::Device& dev = backend::cpu_device();
  auto delayed = make_quantizer(DelayedScaling{}, Direction::kForward);
  auto mx = make_quantizer(MXFP8BlockScaling{}, Direction::kForward);
  auto block = make_quantizer(Float8BlockScaling{}, Direction::kBackward);

  const DeviceOperand d = device_operand(*delayed, 5, 7, TensorRole::kInput, Usage::kBoth);
  CHECK(d.mode == ScalingMode::kPerTensor);
  CHECK(d.block == 0);
  CHECK(d.codes() == 35);
  CHECK(d.rowwise_scales() == 0);
  const DeviceOperand m = device_operand(*mx, 5, 70, TensorRole::kWeight, Usage::kBoth);
  CHECK(m.block == 32);
  CHECK(m.rowwise_scales() == 5 * 3);     // ceil(70 / 32) blocks per row
  CHECK(m.columnwise_scales() == 70 * 1);  // ceil(5 / 32) per column
  const DeviceOperand b = device_operand(*block, 129, 2, TensorRole::kGradOutput, Usage::kColumnwise);
  CHECK(b.block == 128);
  CHECK(b.rowwise_scales() == 0);
  CHECK(b.columnwise_scales() == 2 * 2);
  CHECK_THROWS_WITH(device_operand(*delayed, 0, 7, TensorRole::kInput, Usage::kBoth),
                    Catch::Contains("sizes must be positive"));

  const std::vector<float> x(35, 1.0f);
  const backend::DeviceTensor<float> xd = testing::to_device(dev, x, 5, 7);
  DeviceQuantizedTensor wrong_shape(dev, device_operand(*delayed, 7, 5, TensorRole::kInput, Usage::kBoth));
  CHECK_THROWS_WITH(delayed->quantize_device(dev, xd.get(), 5, 7, TensorRole::kInput, wrong_shape.operand(), nullptr),
                    Catch::Contains("does not describe this cast"));
  DeviceQuantizedTensor no_buffer(dev, device_operand(*delayed, 5, 7, TensorRole::kInput, Usage::kRowwise));
  DeviceOperand asks_more = no_buffer.operand();
  asks_more.usage = Usage::kBoth;  // the column-wise buffer was never allocated
  CHECK_THROWS_WITH(delayed->quantize_device(dev, xd.get(), 5, 7, TensorRole::kInput, asks_more, nullptr),
                    Catch::Contains("no buffer for the column-wise codes"));
  DeviceQuantizedTensor ok(dev, device_operand(*delayed, 5, 7, TensorRole::kInput, Usage::kBoth));
  CHECK_THROWS_WITH(delayed->quantize_device(dev, xd.get(), 5, 7, TensorRole::kGradOutput, ok.operand(), nullptr),
                    Catch::Contains("casts only input and weight"));
  DeviceQuantizedTensor mx_op(dev, device_operand(*mx, 5, 7, TensorRole::kInput, Usage::kRowwise));
  CHECK_THROWS_WITH(delayed->quantize_device(dev, xd.get(), 5, 7, TensorRole::kInput, mx_op.operand(), nullptr),
                    Catch::Contains("does not describe this cast"));

  // GEMM argument errors, named as the host gemm_tn names them.
  delayed->quantize_device(dev, xd.get(), 5, 7, TensorRole::kInput, ok.operand(), nullptr);
  mx->quantize_device(dev, xd.get(), 5, 7, TensorRole::kInput, mx_op.operand(), nullptr);
  backend::DeviceTensor<float> out(dev, 5, 5);
  const emu::GemmAccumulation fp32{emu::Accumulation::kFp32, 0, 1};
  CHECK_THROWS_WITH(gemm_tn(dev, ok.operand(), Usage::kRowwise, mx_op.operand(), Usage::kRowwise, fp32, out.get()),
                    Catch::Contains("different scaling modes"));
  CHECK_THROWS_WITH(gemm_tn(dev, mx_op.operand(), Usage::kRowwise, mx_op.operand(), Usage::kColumnwise, fp32, out.get()),
                    Catch::Contains("has no column-wise copy"));
  CHECK_THROWS_WITH(gemm_tn(dev, mx_op.operand(), Usage::kRowwise, mx_op.operand(), Usage::kRowwise,
                            emu::te_fprop(emu::Accumulation::kHopper), out.get()),
                    Catch::Contains("accumulate in fp32 only"));
  CHECK_THROWS_WITH(gemm_tn(dev, ok.operand(), Usage::kRowwise, ok.operand(), Usage::kColumnwise, fp32, out.get()),
                    Catch::Contains("K differs"));
}
