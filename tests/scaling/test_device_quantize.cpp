// Quantizer::quantize_device and gemm_tn on a backend::Device, run on backend::cpu_device(): the
// device program of every recipe against the host quantizers (tests/support/device_quantize_check.hpp;
// tests/gpu/test_device_ops.cpp runs the same checks on the GPU), and its argument errors.
#include <catch2/catch.hpp>

#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "support/device_quantize_check.hpp"
#include "support/forward_device.hpp"

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
                            emu::GemmAccumulation{emu::Accumulation::kHopper, 0, 2}, out.get()),
                    Catch::Contains("promotion interval must be 0 and split_k 1, got 0 and 2"));
  CHECK_THROWS_WITH(gemm_tn(dev, ok.operand(), Usage::kRowwise, ok.operand(), Usage::kColumnwise, fp32, out.get()),
                    Catch::Contains("K differs"));
}

TEST_CASE("host casts and GEMMs staged through a device of its own memory equal the reference", "[scaling][device]") {
  // A device that is not host memory (as the GPU): Quantizer::quantize uploads x and downloads the
  // operand, gemm_tn of host operands uploads them and downloads D. The oracle is the same call on
  // element_device(), which reads and writes the host buffers in place.
  const testing::ForwardDevice staged(false);
  const backend::Device& ref = backend::element_device();
  const int M = 33, N = 40, K = 130;  // ragged against 32 and 128 blocks
  for (const auto& [name, recipe] : testing::device_check_recipes()) {
    INFO(name);
    auto fwd_s = make_quantizer(recipe, Direction::kForward), fwd_r = make_quantizer(recipe, Direction::kForward);
    auto bwd_s = make_quantizer(recipe, Direction::kBackward), bwd_r = make_quantizer(recipe, Direction::kBackward);
    nn::Rng rng(11);
    const std::vector<float> x = testing::device_cast_input(M, K, 3, 4.0f, true);
    const std::vector<float> w = testing::random_matrix(N, K, rng, 0.5f).data;
    const std::vector<float> dy = testing::random_matrix(M, N, rng, 0.01f).data;
    for (int step = 0; step < 2; ++step) {  // the second step casts with the updated state
      emu::QuantizeStats ss, rs;
      const QuantizedTensor xs = fwd_s->quantize(staged, x.data(), M, K, TensorRole::kInput, Usage::kBoth, &ss);
      const QuantizedTensor xr = fwd_r->quantize(ref, x.data(), M, K, TensorRole::kInput, Usage::kBoth, &rs);
      const QuantizedTensor ws = fwd_s->quantize(staged, w.data(), N, K, TensorRole::kWeight, Usage::kBoth, &ss);
      const QuantizedTensor wr = fwd_r->quantize(ref, w.data(), N, K, TensorRole::kWeight, Usage::kBoth, &rs);
      const QuantizedTensor ds =
          bwd_s->quantize(staged, dy.data(), M, N, TensorRole::kGradOutput, Usage::kBoth, &ss);
      const QuantizedTensor dr = bwd_r->quantize(ref, dy.data(), M, N, TensorRole::kGradOutput, Usage::kBoth, &rs);
      testing::check_same_operand(xs, xr);
      testing::check_same_operand(ws, wr);
      testing::check_same_operand(ds, dr);
      CHECK(ss.count == rs.count);
      CHECK(ss.saturated == rs.saturated);
      CHECK(ss.underflow == rs.underflow);
      CHECK(ss.nan == rs.nan);
      const emu::GemmAccumulation acc = fwd_s->supports_accumulation_models()
                                            ? emu::te_dgrad(emu::Accumulation::kHopper)
                                            : emu::GemmAccumulation{emu::Accumulation::kFp32, 0, 1};
      std::vector<float> got(std::size_t(M) * K, -1.0f), want(got.size(), -2.0f);
      gemm_tn(staged, ds, Usage::kRowwise, ws, Usage::kColumnwise, acc, got.data());  // dgrad
      gemm_tn(ref, dr, Usage::kRowwise, wr, Usage::kColumnwise, acc, want.data());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) differ += testing::bits(got[i]) != testing::bits(want[i]);
      CHECK(differ == 0);
      fwd_s->update_scales();
      fwd_r->update_scales();
      bwd_s->update_scales();
      bwd_r->update_scales();
    }
  }
}

TEST_CASE("host casts name a missing copy", "[scaling][device]") {
  auto q = make_quantizer(MXFP8BlockScaling{}, Direction::kForward);
  const std::vector<float> x(6, 1.0f);
  CHECK_THROWS_WITH(q->quantize(backend::cpu_device(), x.data(), 2, 3, TensorRole::kInput, Usage(0), nullptr),
                    Catch::Contains("asks for no copy"));
}

TEST_CASE("save_state/load_state: TE's scale and amax_history, from wherever the state lives", "[scaling][device]") {
  // Delayed scaling with history 3 after two steps: the saved values are the state's scales, then
  // its amax_history row-major (DelayedScalingState's accessors, which the scale update tests pin
  // to TE's arithmetic); a quantizer loaded from them casts as the original does. The same from a
  // state resident on a device of its own memory (downloaded / uploaded).
  DelayedScaling recipe;
  recipe.amax_history_len = 3;
  const testing::ForwardDevice own(false);
  const std::vector<float> x = testing::device_cast_input(9, 20, 3, 4.0f, false);
  for (const bool resident : {false, true}) {
    INFO((resident ? "resident" : "host"));
    // q (resident: from its second step on) and a host twin h take the same three steps.
    auto q = make_quantizer(recipe, Direction::kForward), h = make_quantizer(recipe, Direction::kForward);
    for (int step = 0; step < 3; ++step) {
      if (resident && step == 1) q->to_device(own);
      const backend::Device& d = resident && step >= 1 ? static_cast<const backend::Device&>(own)
                                                        : backend::cpu_device();
      q->quantize(d, x.data(), 9, 20 - step, TensorRole::kInput, Usage::kRowwise, nullptr);
      h->quantize(backend::cpu_device(), x.data(), 9, 20 - step, TensorRole::kInput, Usage::kRowwise, nullptr);
      q->update_scales();
      h->update_scales();
    }
    const DelayedScalingState want = *h->amax_history_state();
    const std::vector<float> saved = q->save_state();
    REQUIRE(saved.size() == 3 + 3 * 3);
    std::vector<float> expected = want.scales();
    expected.insert(expected.end(), want.history_values().begin(), want.history_values().end());
    CHECK(saved == expected);
    CHECK(saved[0] != 1.0f);  // the input slot's scale moved off its start value
    auto r = make_quantizer(recipe, Direction::kForward);
    if (resident) r->to_device(own);
    r->load_state(saved);
    CHECK(r->save_state() == saved);
    r->to_host();
    q->to_host();
    const QuantizedTensor a =
        q->quantize(backend::cpu_device(), x.data(), 9, 20, TensorRole::kInput, Usage::kRowwise, nullptr);
    const QuantizedTensor b =
        r->quantize(backend::cpu_device(), x.data(), 9, 20, TensorRole::kInput, Usage::kRowwise, nullptr);
    testing::check_same_operand(a, b);
  }
  // A state of another length or direction is refused, naming both sizes, and changes nothing.
  auto q = make_quantizer(recipe, Direction::kBackward);
  const std::vector<float> before = q->save_state();
  CHECK(before.size() == 2 + 3 * 2);
  CHECK_THROWS_WITH(q->load_state(std::vector<float>(12, 2.0f)),
                    Catch::Contains("has 12 values, this quantizer keeps 8"));
  CHECK(q->save_state() == before);
  // Recipes that compute their scales at cast time keep none.
  for (const auto& [name, r] : testing::device_check_recipes()) {
    auto k = make_quantizer(r, Direction::kForward);
    if (k->amax_history_state()) continue;
    INFO(name);
    CHECK(k->save_state().empty());
    k->load_state({});
    CHECK_THROWS_WITH(k->load_state({1.0f}), Catch::Contains("this recipe keeps none"));
  }
}
