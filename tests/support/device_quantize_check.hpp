// The device casts of every recipe (Quantizer::quantize_device) and the GEMM of device operands
// (scaling::gemm_tn on a backend::Device) against the same quantizers and gemm_tn run on
// backend::element_device() (the per-element reference of the casts and GEMMs) on the same inputs,
// bit for bit: codes, scales, scale_inv, E8M0 codes, counts, the delayed-scaling state after each
// update, and D of fprop, dgrad and wgrad. The quantizers themselves are checked against emu::
// functions and values worked from TE's formulas in tests/scaling/test_quantizers.cpp and
// test_delayed_scaling.cpp.
//
// Shared by tests/scaling/test_device_quantize.cpp (backend::cpu_device(), every CI run) and
// tests/gpu/test_device_ops.cpp (backend::cuda_device(), label gpu).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "support/bits.hpp"
#include "support/nn_helpers.hpp"

namespace fp8emu::testing {

/// Values in [-bound, bound]; with `specials` and rows * cols >= 8 also NaN, +-Inf, values past
/// E4M3's and E5M2's range and values that flush to zero at fixed places (so counts of every kind
/// are compared).
inline std::vector<float> device_cast_input(int rows, int cols, std::uint64_t seed, float bound, bool specials) {
  nn::Rng rng(seed);
  std::vector<float> x = random_matrix(rows, cols, rng, bound).data;
  const std::size_t n = x.size();
  if (specials && n >= 8) {
    x[n / 8] = std::numeric_limits<float>::quiet_NaN();
    x[n / 4] = std::numeric_limits<float>::infinity();
    x[n / 3] = -std::numeric_limits<float>::infinity();
    x[n / 2] = 1.0e30f;
    x[n - 2] = -3.0e-30f;
    x[n - 1] = 7.0e-39f;  // fp32 subnormal
  }
  return x;
}

inline void check_same_blocks(const emu::BlockQuantized& got, const emu::BlockQuantized& want) {
  CHECK(got.n == want.n);
  CHECK(got.k == want.k);
  CHECK(got.block == want.block);
  CHECK(got.format == want.format);
  CHECK(got.codes == want.codes);
  CHECK(got.e8m0 == want.e8m0);
  REQUIRE(got.scale_inv.size() == want.scale_inv.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.scale_inv.size(); ++i) differ += bits(got.scale_inv[i]) != bits(want.scale_inv[i]);
  CHECK(differ == 0);
}

inline void check_same_operand(const scaling::QuantizedTensor& got, const scaling::QuantizedTensor& want) {
  REQUIRE(got.mode() == want.mode());
  CHECK(got.format == want.format);
  CHECK(got.rows == want.rows);
  CHECK(got.cols == want.cols);
  CHECK(got.usage == want.usage);
  if (want.mode() == scaling::ScalingMode::kPerTensor) {
    CHECK(got.per_tensor().rowwise_data == want.per_tensor().rowwise_data);
    CHECK(got.per_tensor().columnwise_data == want.per_tensor().columnwise_data);
    CHECK(bits(got.per_tensor().scale) == bits(want.per_tensor().scale));
    CHECK(bits(got.per_tensor().scale_inv) == bits(want.per_tensor().scale_inv));
    return;
  }
  check_same_blocks(got.blocks().rowwise, want.blocks().rowwise);
  check_same_blocks(got.blocks().columnwise, want.blocks().columnwise);
}

/// The recipes the checks run: every recipe, with the parameters that change the arithmetic.
inline std::vector<std::pair<std::string, scaling::Recipe>> device_check_recipes() {
  std::vector<std::pair<std::string, scaling::Recipe>> r;
  scaling::DelayedScaling d;
  d.amax_history_len = 4;
  d.margin = 1;
  r.emplace_back("delayed max, margin 1", d);
  d.amax_compute_algo = scaling::AmaxComputeAlgo::kMostRecent;
  d.margin = 0;
  d.fp8_format = scaling::RecipeFormat::kE4M3;
  r.emplace_back("delayed most_recent, E4M3", d);
  r.emplace_back("current", scaling::CurrentScaling{});
  scaling::CurrentScaling c;
  c.use_power_2_scales = true;
  c.amax_epsilon = 1.0f / 1024;
  r.emplace_back("current pow2, epsilon", c);
  r.emplace_back("mxfp8 te", scaling::MXFP8BlockScaling{});
  scaling::MXFP8BlockScaling m;
  m.rule = E8M0Rule::kOcp;
  r.emplace_back("mxfp8 ocp", m);
  r.emplace_back("block", scaling::Float8BlockScaling{});
  scaling::Float8BlockScaling b;
  b.use_f32_scales = true;
  b.amax_epsilon = 1.0f / 4096;
  r.emplace_back("block f32 scales, epsilon", b);
  return r;
}

/// Host fp32 data in a device's memory.
inline backend::DeviceTensor<float> to_device(const backend::Device& dev, const std::vector<float>& x, int rows,
                                              int cols) {
  backend::DeviceTensor<float> t(dev, rows, cols);
  t.upload(x.data());
  return t;
}

/// Every recipe, direction, role and usage over three steps with updates between them, on shapes
/// with whole and ragged blocks: the device cast equals the host cast, and the state stays equal.
inline void check_device_quantizers(const backend::Device& dev) {
  using scaling::TensorRole;
  using scaling::Usage;
  const backend::Device& reference = backend::element_device();
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {3, 37}, {33, 70}, {130, 260}};
  const Usage usages[] = {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth};
  for (const auto& [name, recipe] : device_check_recipes()) {
    for (const scaling::Direction dir : {scaling::Direction::kForward, scaling::Direction::kBackward}) {
      auto host = scaling::make_quantizer(recipe, dir);
      auto device = scaling::make_quantizer(recipe, dir);
      const std::vector<TensorRole> roles = dir == scaling::Direction::kForward
                                                ? std::vector<TensorRole>{TensorRole::kInput, TensorRole::kWeight}
                                                : std::vector<TensorRole>{TensorRole::kGradOutput};
      std::uint64_t seed = 1;
      for (int step = 0; step < 3; ++step) {
        for (const TensorRole role : roles)
          for (const Usage usage : usages)
            for (const auto& [rows, cols] : shapes) {
              INFO(name << ", " << (dir == scaling::Direction::kForward ? "forward" : "backward") << ", step " << step
                        << ", role " << int(role) << ", usage " << int(usage) << ", [" << rows << ", " << cols << "]");
              // The bound changes per step, so delayed scaling's scales move; step 2's values are
              // below the recipes' amax_epsilon, and without specials, so the epsilon decides.
              const float bound = step == 0 ? 3.0f : step == 1 ? 900.0f : 1.0e-5f;
              const std::vector<float> x = device_cast_input(rows, cols, seed++, bound, step < 2);
              emu::QuantizeStats hs, ds;
              const scaling::QuantizedTensor want = host->quantize(reference, x.data(), rows, cols, role, usage, &hs);
              const backend::DeviceTensor<float> xd = to_device(dev, x, rows, cols);
              scaling::DeviceQuantizedTensor got(dev, scaling::device_operand(*device, rows, cols, role, usage));
              device->quantize_device(dev, xd.get(), rows, cols, role, got.operand(), &ds);
              check_same_operand(got.download(), want);
              CHECK(ds.count == hs.count);
              CHECK(ds.saturated == hs.saturated);
              CHECK(ds.underflow == hs.underflow);
              CHECK(ds.nan == hs.nan);
              if (want.mode() == scaling::ScalingMode::kPerTensor) {
                CHECK(bits(got.operand().host_scale) == bits(want.per_tensor().scale));
                CHECK(bits(got.operand().host_scale_inv) == bits(want.per_tensor().scale_inv));
              }
            }
        host->update_scales();
        device->update_scales();
        const scaling::DelayedScalingState* hst = host->amax_history_state();
        const scaling::DelayedScalingState* dst = device->amax_history_state();
        REQUIRE((hst == nullptr) == (dst == nullptr));
        if (hst) {
          INFO(name << ", state after step " << step);
          REQUIRE(hst->scales().size() == dst->scales().size());
          for (std::size_t i = 0; i < hst->scales().size(); ++i) CHECK(bits(dst->scales()[i]) == bits(hst->scales()[i]));
          REQUIRE(hst->history_values().size() == dst->history_values().size());
          for (std::size_t i = 0; i < hst->history_values().size(); ++i)
            CHECK(bits(dst->history_values()[i]) == bits(hst->history_values()[i]));
        }
      }
    }
  }
}

/// fprop, dgrad and wgrad of device operands (gemm_tn on `dev`) against the host gemm_tn of the
/// host operands, for every recipe and, for per-tensor recipes, the accumulation models TE uses.
inline void check_device_operand_gemms(const backend::Device& dev) {
  using scaling::TensorRole;
  using scaling::Usage;
  const backend::Device& reference = backend::element_device();
  const int M = 33, N = 40, K = 130;  // ragged against 32 and 128 blocks
  for (const auto& [name, recipe] : device_check_recipes()) {
    INFO(name);
    auto fwd_h = scaling::make_quantizer(recipe, scaling::Direction::kForward);
    auto bwd_h = scaling::make_quantizer(recipe, scaling::Direction::kBackward);
    auto fwd_d = scaling::make_quantizer(recipe, scaling::Direction::kForward);
    auto bwd_d = scaling::make_quantizer(recipe, scaling::Direction::kBackward);
    nn::Rng rng(7);
    const std::vector<float> x = random_matrix(M, K, rng, 2.0f).data;
    const std::vector<float> w = random_matrix(N, K, rng, 0.5f).data;
    const std::vector<float> dy = random_matrix(M, N, rng, 0.01f).data;
    const backend::DeviceTensor<float> xd = to_device(dev, x, M, K), wd = to_device(dev, w, N, K),
                                       dyd = to_device(dev, dy, M, N);
    const auto both = Usage::kBoth;
    const scaling::QuantizedTensor xh = fwd_h->quantize(reference, x.data(), M, K, TensorRole::kInput, both, nullptr);
    const scaling::QuantizedTensor wh = fwd_h->quantize(reference, w.data(), N, K, TensorRole::kWeight, both, nullptr);
    const scaling::QuantizedTensor dyh =
        bwd_h->quantize(reference, dy.data(), M, N, TensorRole::kGradOutput, both, nullptr);
    scaling::DeviceQuantizedTensor xq(dev, scaling::device_operand(*fwd_d, M, K, TensorRole::kInput, both));
    scaling::DeviceQuantizedTensor wq(dev, scaling::device_operand(*fwd_d, N, K, TensorRole::kWeight, both));
    scaling::DeviceQuantizedTensor dyq(dev, scaling::device_operand(*bwd_d, M, N, TensorRole::kGradOutput, both));
    fwd_d->quantize_device(dev, xd.get(), M, K, TensorRole::kInput, xq.operand(), nullptr);
    fwd_d->quantize_device(dev, wd.get(), N, K, TensorRole::kWeight, wq.operand(), nullptr);
    bwd_d->quantize_device(dev, dyd.get(), M, N, TensorRole::kGradOutput, dyq.operand(), nullptr);

    std::vector<emu::GemmAccumulation> accs = {{emu::Accumulation::kFp32, 0, 1}};
    if (fwd_h->supports_accumulation_models()) {
      accs.push_back(emu::te_fprop(emu::Accumulation::kHopper));
      accs.push_back(emu::te_dgrad(emu::Accumulation::kHopper));
      accs.push_back({emu::Accumulation::kAda, 32, 2});
    }
    struct Gemm {
      const char* what;
      const scaling::QuantizedTensor& ah;
      const scaling::DeviceQuantizedTensor& ad;
      Usage au;
      const scaling::QuantizedTensor& bh;
      const scaling::DeviceQuantizedTensor& bd;
      Usage bu;
      int m, n;
    };
    const Gemm gemms[] = {{"fprop y = x W^T", xh, xq, Usage::kRowwise, wh, wq, Usage::kRowwise, M, N},
                          {"dgrad dx = dy W", dyh, dyq, Usage::kRowwise, wh, wq, Usage::kColumnwise, M, K},
                          {"wgrad dW = dy^T x", dyh, dyq, Usage::kColumnwise, xh, xq, Usage::kColumnwise, N, K}};
    for (const emu::GemmAccumulation& acc : accs)
      for (const Gemm& g : gemms) {
        INFO(g.what << ", accumulation " << int(acc.model) << " promotion " << acc.promotion_interval << " split_k "
                    << acc.split_k);
        std::vector<float> want(std::size_t(g.m) * std::size_t(g.n)), got(want.size(), -1.0f);
        scaling::gemm_tn(reference, g.ah, g.au, g.bh, g.bu, acc, want.data());
        backend::DeviceTensor<float> d(dev, g.m, g.n);
        scaling::gemm_tn(dev, g.ad.operand(), g.au, g.bd.operand(), g.bu, acc, d.get());
        d.download(got.data());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < want.size(); ++i) differ += bits(got[i]) != bits(want[i]);
        CHECK(differ == 0);
      }
  }
}

}  // namespace fp8emu::testing
