// A transformer layer resident on a device of its own memory (TransformerLayer::to_device: its norms'
// and Linears' parameters, the recipe state and every activation off the host, the path a GPU takes,
// on a stand-in whose operations are cpu_device()'s) against the same layer on the host, bit for
// bit: outputs, input gradients, every parameter gradient and the FP8 layers' recipe state after a
// few forward/backward/update rounds, for both norms, both MLP activations, fp32 and bf16
// activations, FP32, BF16 and FP8 layers of every recipe family. The oracle is the host layer stack
// (checked against finite differences and TE's arithmetic by the other nn tests).
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/transformer.hpp"
#include "support/forward_device.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using namespace fp8emu::nn;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<float> fetch(const backend::DeviceTensor<float>& t, std::size_t n) {
  std::vector<float> v(n);
  static const testing::ForwardDevice own(false);
  own.download(v.data(), t.get(), n * sizeof(float));
  return v;
}

struct Config {
  std::string name;
  NormKind norm;
  MlpActivation act;
  ActivationDtype dtype;
  Precision precision;
  scaling::Recipe recipe;
};

void run_config(const Config& c) {
  INFO(c.name);
  const int hidden = 32, heads = 4, ffn = 48, T = 6, B = 3, rows = B * T;
  LinearSpec spec;
  spec.precision = c.precision;
  spec.recipe = c.recipe;
  TransformerLayer host(hidden, heads, ffn, c.norm, c.act, spec);
  host.act_dtype = c.dtype;
  Rng init(3);
  for (Linear* l : host.linears()) l->init(init);
  for (float& g : host.qkv.norm.gamma.data) g = 1.0f + init.uniform(0.2f);
  for (float& b : host.mlp.norm.beta.data) b = init.uniform(0.1f);
  TransformerLayer copy = host;
  const testing::ForwardDevice dev(false);
  TransformerLayer dl = copy;
  dl.to_device(dev);
  backend::DeviceTensor<float> x(dev, rows, hidden), y(dev, rows, hidden), dy(dev, rows, hidden),
      dx(dev, rows, hidden);
  Rng data(9);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    Matrix hx = testing::random_matrix(rows, hidden, data, round == 1 ? 40.0f : 1.0f);
    Matrix hdy = testing::random_matrix(rows, hidden, data, 1e-2f);
    Matrix hy, hdx;
    host.forward(hx, T, hy, true);
    host.backward(hdy, hdx);
    for (Linear* l : host.linears()) {
      l->update_forward_scales();
      l->update_backward_scales();
    }
    x.upload(hx.data.data());
    dy.upload(hdy.data.data());
    dl.forward(x.get(), rows, T, y.get());
    dl.backward(dy.get(), rows, dx.get());
    for (Linear* l : dl.linears()) l->update_scales();
    CHECK(same_bits(fetch(y, hy.size()), hy.data));
    CHECK(same_bits(fetch(dx, hdx.size()), hdx.data));
    dl.copy_to(copy);
    ParamList hp, cp;
    host.params(hp);
    copy.params(cp);
    REQUIRE(hp.size() == cp.size());
    for (std::size_t p = 0; p < hp.size(); ++p) {
      INFO("parameter " << p);
      CHECK(same_bits(hp[p].first->data, cp[p].first->data));
      CHECK(same_bits(hp[p].second->data, cp[p].second->data));
    }
    const std::vector<Linear*> hl = host.linears(), cl = copy.linears();
    for (std::size_t l = 0; l < hl.size(); ++l) {
      INFO("linear " << l);
      CHECK(same_bits(hl[l]->forward_state().history_values(), cl[l]->forward_state().history_values()));
      CHECK(same_bits(hl[l]->forward_state().scales(), cl[l]->forward_state().scales()));
      CHECK(same_bits(hl[l]->backward_state().history_values(), cl[l]->backward_state().history_values()));
      CHECK(same_bits(hl[l]->backward_state().scales(), cl[l]->backward_state().scales()));
      CHECK(hl[l]->stats.input.count == cl[l]->stats.input.count);
      CHECK(hl[l]->stats.grad_output.saturated == cl[l]->stats.grad_output.saturated);
    }
  }
}

}  // namespace

TEST_CASE("Transformer layers resident on a device of their own memory equal the host layers", "[nn][device]") {
  scaling::DelayedScaling delayed;
  delayed.amax_history_len = 3;
  const std::vector<Config> configs = {
      {"fp32 layernorm gelu", NormKind::kLayerNorm, MlpActivation::kGelu, ActivationDtype::kFp32, Precision::kFp32,
       delayed},
      {"fp32 rmsnorm swiglu bf16", NormKind::kRMSNorm, MlpActivation::kSwiGlu, ActivationDtype::kBf16,
       Precision::kFp32, delayed},
      {"delayed layernorm gelu", NormKind::kLayerNorm, MlpActivation::kGelu, ActivationDtype::kFp32, Precision::kFp8,
       delayed},
      {"delayed rmsnorm swiglu bf16", NormKind::kRMSNorm, MlpActivation::kSwiGlu, ActivationDtype::kBf16,
       Precision::kFp8, delayed},
      {"current layernorm gelu bf16 (the norm output read as bf16)", NormKind::kLayerNorm, MlpActivation::kGelu,
       ActivationDtype::kBf16, Precision::kFp8, scaling::CurrentScaling{}},
      {"mxfp8 layernorm gelu", NormKind::kLayerNorm, MlpActivation::kGelu, ActivationDtype::kFp32, Precision::kFp8,
       scaling::MXFP8BlockScaling{}},
      {"block rmsnorm swiglu bf16", NormKind::kRMSNorm, MlpActivation::kSwiGlu, ActivationDtype::kBf16,
       Precision::kFp8, scaling::Float8BlockScaling{}},
      {"bf16 layers layernorm gelu", NormKind::kLayerNorm, MlpActivation::kGelu, ActivationDtype::kFp32,
       Precision::kBf16, delayed},
      {"bf16 layers rmsnorm swiglu bf16", NormKind::kRMSNorm, MlpActivation::kSwiGlu, ActivationDtype::kBf16,
       Precision::kBf16, delayed},
  };
  for (const Config& c : configs) run_config(c);
}
