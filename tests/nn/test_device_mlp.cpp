// A device-resident Mlp (Mlp::to_device with Optimizer::to_device, Mlp::train_step) against the
// host loop (Mlp::forward, softmax_cross_entropy_sum, backward, update points, Optimizer::step) bit
// for bit: the resident step must give the host loop's weights, gradients, scales, amax histories,
// counts, last scales, optimizer moments and losses after every step, for every recipe and option it
// takes, on cpu_device() and on a stand-in device of its own memory. The oracle is the host layer
// stack, which the recipe and layer tests check against TE's arithmetic.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "support/forward_device.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using namespace fp8emu::nn;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every piece of state the two paths must agree on; returns the first difference, or "".
std::string first_difference(const Mlp& a, const Optimizer& oa, const Mlp& b, const Optimizer& ob) {
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const Linear& x = a.layers[l];
    const Linear& y = b.layers[l];
    const std::string at = " of fc" + std::to_string(l + 1);
    if (!same_bits(x.weight.data, y.weight.data)) return "weight" + at;
    if (!same_bits(x.bias.data, y.bias.data)) return "bias" + at;
    if (!same_bits(x.grad_weight.data, y.grad_weight.data)) return "grad_weight" + at;
    if (!same_bits(x.grad_bias.data, y.grad_bias.data)) return "grad_bias" + at;
    if (!same_bits(x.forward_state().scales(), y.forward_state().scales())) return "forward scales" + at;
    if (!same_bits(x.forward_state().history_values(), y.forward_state().history_values()))
      return "forward amax_history" + at;
    if (!same_bits(x.backward_state().scales(), y.backward_state().scales())) return "backward scales" + at;
    if (!same_bits(x.backward_state().history_values(), y.backward_state().history_values()))
      return "backward amax_history" + at;
    if (!same_bits(x.last_scale_input(), y.last_scale_input()) ||
        !same_bits(x.last_scale_weight(), y.last_scale_weight()) ||
        !same_bits(x.last_scale_grad_output(), y.last_scale_grad_output()))
      return "last scales" + at;
    const emu::QuantizeStats* sx[3] = {&x.stats.input, &x.stats.weight, &x.stats.grad_output};
    const emu::QuantizeStats* sy[3] = {&y.stats.input, &y.stats.weight, &y.stats.grad_output};
    for (int r = 0; r < 3; ++r)
      if (sx[r]->count != sy[r]->count || sx[r]->saturated != sy[r]->saturated ||
          sx[r]->underflow != sy[r]->underflow || sx[r]->nan != sy[r]->nan)
        return "cast counts (role " + std::to_string(r) + ")" + at;
  }
  if (oa.steps() != ob.steps()) return "optimizer steps";
  if (oa.first_moments().size() != ob.first_moments().size()) return "optimizer moment count";
  for (std::size_t p = 0; p < oa.first_moments().size(); ++p) {
    if (!same_bits(oa.first_moments()[p], ob.first_moments()[p])) return "first moment " + std::to_string(p);
    if (!same_bits(oa.second_moments()[p], ob.second_moments()[p])) return "second moment " + std::to_string(p);
  }
  return "";
}

struct Case {
  std::string name;
  Precision precision;
  scaling::Recipe recipe;
  Activation act;
  Optimizer::Kind opt;
  bool fp32_accumulation = false;
};

// A batch whose inputs reach the formats' extremes now and then: most rows small, some large, so
// delayed scaling saturates before its scales adapt and current scaling meets wide ranges.
void make_batch(Rng& rng, int rows, int in, int classes, Matrix& x, std::vector<std::uint8_t>& y) {
  x = testing::random_matrix(rows, in, rng, 1.0f);
  for (int i = 0; i < rows; i += 5)
    for (int j = 0; j < in; j += 3) x(i, j) *= 3000.0f;
  y.resize(std::size_t(rows));
  for (auto& v : y) v = std::uint8_t(rng.below(std::uint64_t(classes)));
}

void run_case(const Case& c, const backend::Device& dev = backend::cpu_device()) {
  INFO(c.name << " on " << dev.name() << (dev.host_memory() ? "" : " (own memory)"));
  // Widths that are not multiples of the blocks (32, 128), and one above 128: partial blocks and tiles.
  const std::vector<int> sizes = {40, 150, 33, 10};
  Mlp host(sizes, c.act, c.precision, c.recipe, 7);
  if (c.fp32_accumulation && c.precision == Precision::kFp8)
    for (Linear& l : host.layers) l.set_accumulation({}, {}, {});
  Mlp copy = host;  // the device path starts from the same state
  Optimizer host_opt(c.opt, 2e-3f), copy_opt(c.opt, 2e-3f);
  REQUIRE(host.device_unsupported().empty());
  Mlp dm = copy;  // the resident model, its optimizer copy_opt
  dm.to_device(dev);
  copy_opt.to_device(dev, dm.params());
  Rng data(11);
  const int batches[] = {16, 16, 9, 16, 1, 16};  // a short last batch, a single row, growth after
  Matrix x, logits, dlogits;
  std::vector<std::uint8_t> y;
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    const int rows = batches[step], divisor = rows + (step == 2 ? 3 : 0);  // a shard of a larger batch
    make_batch(data, rows, sizes.front(), sizes.back(), x, y);
    if (step == 4) {  // an epoch boundary: counters restart on both sides
      for (Linear& l : host.layers) l.stats = {};
      dm.reset_stats();
    }
    // The host loop of `fp8emu train` with one shard.
    host.forward(x, logits, true);
    const double want = softmax_cross_entropy_sum(logits, y, &dlogits, divisor);
    host.backward(dlogits);
    host.update_forward_scales();
    host.update_backward_scales();
    host_opt.step(host);
    const double got = dm.train_step(x, y, divisor, copy_opt);
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    copy = dm;  // copies come to the host
    Optimizer snapshot = copy_opt;
    CHECK(first_difference(host, host_opt, copy, snapshot) == "");
    if (step == 3) {  // move back and forth: a new resident copy continues the same run
      dm.to_host();
      copy_opt.to_host();
      dm = copy;
      dm.to_device(dev);
      copy_opt.to_device(dev, dm.params());
    }
  }
}

}  // namespace

TEST_CASE("A resident Mlp on the CPU device equals the host loop bit for bit", "[nn][device]") {
  scaling::DelayedScaling delayed;
  delayed.amax_history_len = 4;
  scaling::DelayedScaling delayed_margin = delayed;
  delayed_margin.margin = 1.0f;
  delayed_margin.amax_history_len = 1;
  scaling::DelayedScaling most_recent = delayed;
  most_recent.amax_compute_algo = scaling::AmaxComputeAlgo::kMostRecent;
  scaling::MXFP8BlockScaling mxfp8_ocp;
  mxfp8_ocp.rule = E8M0Rule::kOcp;
  scaling::Float8BlockScaling block_f32;
  block_f32.use_f32_scales = true;
  block_f32.amax_epsilon = 1e-3f;
  scaling::CurrentScaling current;
  scaling::CurrentScaling current_pow2;
  current_pow2.use_power_2_scales = true;
  current_pow2.amax_epsilon = 1e-3f;
  const std::vector<Case> cases = {
      {"fp32 relu adam", Precision::kFp32, delayed, Activation::kReLU, Optimizer::Kind::kAdam},
      {"fp32 gelu sgd", Precision::kFp32, delayed, Activation::kGELU, Optimizer::Kind::kSgd},
      {"bf16 relu adam", Precision::kBf16, delayed, Activation::kReLU, Optimizer::Kind::kAdam},
      {"bf16 gelu sgd", Precision::kBf16, delayed, Activation::kGELU, Optimizer::Kind::kSgd},
      {"delayed relu adam", Precision::kFp8, delayed, Activation::kReLU, Optimizer::Kind::kAdam},
      {"delayed gelu sgd", Precision::kFp8, delayed, Activation::kGELU, Optimizer::Kind::kSgd},
      {"delayed margin 1, history 1", Precision::kFp8, delayed_margin, Activation::kReLU, Optimizer::Kind::kAdam},
      {"delayed most_recent, fp32 accumulation", Precision::kFp8, most_recent, Activation::kReLU,
       Optimizer::Kind::kAdam, true},
      {"current relu adam", Precision::kFp8, current, Activation::kReLU, Optimizer::Kind::kAdam},
      {"current pow2 epsilon gelu", Precision::kFp8, current_pow2, Activation::kGELU, Optimizer::Kind::kAdam},
      {"mxfp8 relu adam", Precision::kFp8, scaling::MXFP8BlockScaling{}, Activation::kReLU, Optimizer::Kind::kAdam},
      {"mxfp8 ocp rule gelu sgd", Precision::kFp8, mxfp8_ocp, Activation::kGELU, Optimizer::Kind::kSgd},
      {"block relu adam", Precision::kFp8, scaling::Float8BlockScaling{}, Activation::kReLU, Optimizer::Kind::kAdam},
      {"block fp32 scales epsilon gelu", Precision::kFp8, block_f32, Activation::kGELU, Optimizer::Kind::kAdam},
  };
  for (const Case& c : cases) run_case(c);
}

TEST_CASE("A resident Mlp on a device of its own memory equals the host loop bit for bit", "[nn][device]") {
  // The layers' parameters, gradients and delayed-scaling state move into the device's allocations
  // (Linear::to_device, Quantizer::to_device) and the update runs as Device::delayed_update: the path
  // a GPU takes, on a stand-in whose operations are cpu_device()'s.
  const testing::ForwardDevice own_memory(false);
  scaling::DelayedScaling delayed;
  delayed.amax_history_len = 4;
  const std::vector<Case> cases = {
      {"fp32 relu adam", Precision::kFp32, delayed, Activation::kReLU, Optimizer::Kind::kAdam},
      {"bf16 gelu sgd", Precision::kBf16, delayed, Activation::kGELU, Optimizer::Kind::kSgd},
      {"delayed relu adam", Precision::kFp8, delayed, Activation::kReLU, Optimizer::Kind::kAdam},
      {"current gelu adam", Precision::kFp8, scaling::CurrentScaling{}, Activation::kGELU, Optimizer::Kind::kAdam},
      {"mxfp8 relu sgd", Precision::kFp8, scaling::MXFP8BlockScaling{}, Activation::kReLU, Optimizer::Kind::kSgd},
      {"block relu adam", Precision::kFp8, scaling::Float8BlockScaling{}, Activation::kReLU, Optimizer::Kind::kAdam},
  };
  for (const Case& c : cases) run_case(c, own_memory);
}

TEST_CASE("A resident Mlp with mixed FP32 and FP8 layers", "[nn][device]") {
  Mlp host({24, 32, 10}, Activation::kReLU, Precision::kFp8, scaling::DelayedScaling{}, 3);
  host.layers[1].set_precision(Precision::kFp32);
  Mlp copy = host;
  Optimizer ho(Optimizer::Kind::kAdam, 1e-3f), co(Optimizer::Kind::kAdam, 1e-3f);
  Mlp dm = copy;
  dm.to_device(backend::cpu_device());
  co.to_device(backend::cpu_device(), dm.params());
  Rng data(5);
  Matrix x, logits, dlogits;
  std::vector<std::uint8_t> y;
  for (int step = 0; step < 3; ++step) {
    make_batch(data, 12, 24, 10, x, y);
    host.forward(x, logits, true);
    const double want = softmax_cross_entropy_sum(logits, y, &dlogits, 12);
    host.backward(dlogits);
    host.update_forward_scales();
    host.update_backward_scales();
    ho.step(host);
    const double got = dm.train_step(x, y, 12, co);
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
  }
  dm.to_host();
  co.to_host();
  CHECK(first_difference(host, ho, dm, co) == "");
}

TEST_CASE("A resident Mlp names what it does not take", "[nn][device]") {
  Optimizer opt(Optimizer::Kind::kAdam, 1e-3f);
  scaling::DelayedScaling hooked;
  hooked.reduce_amax = [](float*, int) {};
  Mlp hk({8, 8, 4}, Activation::kReLU, Precision::kFp8, hooked, 1);
  CHECK_THAT(hk.device_unsupported(), Catch::Contains("fc1") && Catch::Contains("amax-reduction hook"));
  CHECK_THROWS_WITH(hk.to_device(backend::cpu_device()), Catch::Contains("device-resident MLP") &&
                                                            Catch::Contains("amax-reduction hook"));
  scaling::DelayedScaling unfused;
  unfused.fused_update = false;
  Mlp un({8, 8, 4}, Activation::kReLU, Precision::kFp8, unfused, 1);
  un.layers[0].set_precision(Precision::kFp32);
  CHECK_THAT(un.device_unsupported(), Catch::Contains("fc2") && Catch::Contains("unfused"));
  Mlp ok({8, 8, 4}, Activation::kReLU, Precision::kFp8, scaling::CurrentScaling{}, 1);
  ok.to_device(backend::cpu_device());
  Matrix x(3, 8);
  CHECK_THROWS_WITH(ok.train_step(x, {0, 1, 4}, 3, opt), Catch::Contains("label 4 out of range for 4 classes"));
  CHECK_THROWS_WITH(ok.train_step(x, {0, 1, 2}, 2, opt), Catch::Contains("divisor 2"));
  Matrix wide(3, 9);
  CHECK_THROWS_WITH(ok.train_step(wide, {0, 1, 2}, 3, opt), Catch::Contains("9 features"));
}

TEST_CASE("Host state refuses to be used as a device's", "[nn][device]") {
  // Host moments, parameters or a missing forward never reach a device of its own memory: each use
  // is one clear error before anything is written there.
  const testing::ForwardDevice own_memory(false);
  Mlp model({8, 6, 4}, Activation::kReLU, Precision::kFp8, scaling::DelayedScaling{}, 2);
  Optimizer opt(Optimizer::Kind::kAdam, 1e-3f);
  model.to_device(own_memory);
  CHECK_THROWS_WITH(opt.step(own_memory, model.params()), Catch::Contains("Optimizer::to_device first"));
  model.to_host();
  Linear staged(8, 6, Precision::kFp8);
  staged.set_device(own_memory);
  std::vector<DeviceParam> p;
  CHECK_THROWS_WITH(staged.params(p), Catch::Contains("its parameters are the Matrix fields"));
  std::vector<float> dy(6 * 3, 0.0f), dx(8 * 3);
  CHECK_THROWS_WITH(staged.backward(dy.data(), 3, dx.data()), Catch::Contains("without a preceding training forward"));
  Linear resident = staged;
  resident.to_device();
  CHECK_THROWS_WITH(staged.copy_to(resident), Catch::Contains("copy_to into a device-resident layer"));
}
