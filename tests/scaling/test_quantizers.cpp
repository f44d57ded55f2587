// The recipe quantizers through the Quantizer interface against the emu:: functions each wraps,
// the FP8 GEMM of quantized operands, the recipe questions and parse_recipe. Expected values come
// from direct emu:: calls or are written out by hand, never from the quantizers themselves.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/scaling/nvfp4_quantizer.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "support/bits.hpp"
#include "support/device_quantize_check.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using namespace fp8emu::scaling;
using testing::bits;

namespace {
const backend::Device& K = backend::cpu_device();

std::vector<float> random_values(int n, std::uint64_t seed, float bound) {
  nn::Rng rng(seed);
  return testing::random_matrix(1, n, rng, bound).data;
}

// Largest |x| by a plain loop (the test's own amax).
float max_abs(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) return false;
  return true;
}
}  // namespace

TEST_CASE("every recipe's quantizers answer as their recipe", "[scaling][quantizer]") {
  for (const std::string& n : recipe_names()) {
    INFO(n);
    const Recipe r = parse_recipe(n);
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      const auto q = make_quantizer(r, d);
      CHECK(std::string(q->recipe_name()) == n);
      CHECK(q->scaling_mode() == scaling_mode(r));
      CHECK(q->supports_accumulation_models() == supports_accumulation_models(r));
      CHECK(q->direction() == d);
      CHECK(q->reads_bf16_norm_output() == (n == "current"));
      CHECK((q->amax_history_state() != nullptr) == (n == "delayed"));
    }
  }
}

TEST_CASE("roles, slots and formats of the quantizers", "[scaling][quantizer]") {
  CHECK(slot_of(TensorRole::kInput) == 0);
  CHECK(slot_of(TensorRole::kWeight) == 1);
  CHECK(slot_of(TensorRole::kOutput) == 2);
  CHECK(slot_of(TensorRole::kGradOutput) == 0);
  CHECK(slot_of(TensorRole::kGradInput) == 1);
  CHECK(num_slots(Direction::kForward) == 3);
  CHECK(num_slots(Direction::kBackward) == 2);
  // HYBRID: E4M3 forward, E5M2 backward; E4M3: E4M3 both ways.
  CHECK(make_quantizer(DelayedScaling{}, Direction::kForward)->format() == Format::kE4M3);
  CHECK(make_quantizer(DelayedScaling{}, Direction::kBackward)->format() == Format::kE5M2);
  CHECK(make_quantizer(MXFP8BlockScaling{}, Direction::kBackward)->format() == Format::kE4M3);
  CurrentScaling c;
  c.fp8_format = RecipeFormat::kE5M2;
  CHECK_THROWS_WITH(make_quantizer(c, Direction::kForward), Catch::Contains("E5M2"));
  DelayedScaling bad;
  bad.amax_history_len = 0;
  CHECK_THROWS_WITH(make_quantizer(bad, Direction::kForward), Catch::Contains("amax_history_len"));

  const std::vector<float> x = random_values(6, 1, 1.0f);
  auto fwd = make_quantizer(CurrentScaling{}, Direction::kForward);
  auto bwd = make_quantizer(CurrentScaling{}, Direction::kBackward);
  CHECK_THROWS_WITH(fwd->quantize(K, x.data(), 2, 3, TensorRole::kGradOutput, Usage::kRowwise, nullptr),
                    Catch::Contains("forward quantizer casts only input and weight"));
  CHECK_THROWS_WITH(bwd->quantize(K, x.data(), 2, 3, TensorRole::kInput, Usage::kRowwise, nullptr),
                    Catch::Contains("backward quantizer casts only grad_output"));
  CHECK_THROWS_WITH(fwd->quantize(K, x.data(), 0, 3, TensorRole::kInput, Usage::kRowwise, nullptr),
                    Catch::Contains("sizes must be positive"));
}

TEST_CASE("delayed quantizer: stored scale, amax into history row 0, update", "[scaling][quantizer][delayed]") {
  const int R = 5, C = 7;
  const std::vector<float> x = random_values(R * C, 11, 3.0f);
  DelayedScaling recipe;
  recipe.amax_history_len = 4;
  auto q = make_quantizer(recipe, Direction::kForward);
  DelayedScalingState* st = q->amax_history_state();
  REQUIRE(st != nullptr);
  CHECK(st->num_slots() == 3);
  CHECK(st->history_len() == 4);
  st->restore({2.0f, 0.5f, 1.0f}, std::vector<float>(12, 0.0f));

  emu::QuantizeStats stats;
  const QuantizedTensor t = q->quantize(K, x.data(), R, C, TensorRole::kWeight, Usage::kBoth, &stats);
  std::vector<std::uint8_t> want(x.size()), want_t(x.size());
  const emu::QuantizeStats want_stats = emu::quantize(x.data(), x.size(), 0.5f, Format::kE4M3, want.data(), nullptr);
  emu::transpose(R, C, want.data(), want_t.data());
  CHECK(t.mode() == ScalingMode::kPerTensor);
  CHECK(t.format == Format::kE4M3);
  CHECK(t.rows == R);
  CHECK(t.cols == C);
  CHECK(t.per_tensor().rowwise_data == want);
  CHECK(t.per_tensor().columnwise_data == want_t);
  CHECK(t.per_tensor().scale == 0.5f);
  CHECK(t.per_tensor().scale_inv == 2.0f);
  CHECK(stats.count == want_stats.count);
  CHECK(stats.saturated == want_stats.saturated);
  // The weight's slot (1) got the amax; the input's slot did not.
  CHECK(st->history(0, 1) == max_abs(x));
  CHECK(st->history(0, 0) == 0.0f);
  CHECK(st->scale(1) == 0.5f);  // scales change only in the update

  q->update_scales();  // fused max over the window: scale = 448 / amax
  CHECK(st->scale(1) == 0x1.cp8f / max_abs(x));
  CHECK(st->scale(0) == 2.0f);  // amax 0: scale kept
  CHECK(st->history(0, 1) == 0.0f);

  // Row-wise only: no column-wise copy, and the GEMM refuses to read one.
  const QuantizedTensor r = q->quantize(K, x.data(), R, C, TensorRole::kInput, Usage::kRowwise, nullptr);
  CHECK(r.per_tensor().columnwise_data.empty());
  CHECK_FALSE(r.has(Usage::kColumnwise));
  std::vector<float> d(std::size_t(R) * R);
  CHECK_THROWS_WITH(gemm_tn(K, r, Usage::kColumnwise, r, Usage::kColumnwise, {}, d.data()),
                    Catch::Contains("no column-wise copy"));
}

TEST_CASE("current quantizer: scale from the tensor's own amax", "[scaling][quantizer][current]") {
  const int R = 9, C = 4;
  std::vector<float> x = random_values(R * C, 12, 0.01f);
  x[5] = NAN;  // ignored by the amax, cast to the NaN code
  CurrentScaling recipe;
  recipe.use_power_2_scales = true;
  for (Direction dir : {Direction::kForward, Direction::kBackward}) {
    const Format f = dir == Direction::kForward ? Format::kE4M3 : Format::kE5M2;
    const TensorRole role = dir == Direction::kForward ? TensorRole::kInput : TensorRole::kGradOutput;
    auto q = make_quantizer(recipe, dir);
    emu::QuantizeStats stats;
    const QuantizedTensor t = q->quantize(K, x.data(), R, C, role, Usage::kRowwise, &stats);
    float amax = 0.0f;
    for (float v : x)
      if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
    const float scale = core::compute_scale_from_amax(amax, f == Format::kE4M3 ? 0x1.cp8f : 0x1.cp15f, true, 0.0f, FLT_MAX);
    std::vector<std::uint8_t> want(x.size());
    emu::quantize(x.data(), x.size(), scale, f, want.data(), nullptr);
    CHECK(t.format == f);
    CHECK(t.per_tensor().rowwise_data == want);
    CHECK(t.per_tensor().scale == scale);
    CHECK(bits(t.per_tensor().scale_inv) == bits(1.0f / scale));
    CHECK(stats.nan == 1);
    CHECK(stats.count == std::uint64_t(R * C));
  }
}

TEST_CASE("MXFP8 quantizer: independent row- and column-wise E8M0 casts", "[scaling][quantizer][mxfp8]") {
  const int R = 40, C = 70;  // partial blocks both ways
  const std::vector<float> x = random_values(R * C, 13, 5.0f);
  MXFP8BlockScaling recipe;
  recipe.rule = E8M0Rule::kOcp;
  auto q = make_quantizer(recipe, Direction::kForward);
  emu::QuantizeStats stats;
  const QuantizedTensor t = q->quantize(K, x.data(), R, C, TensorRole::kWeight, Usage::kBoth, &stats);
  emu::QuantizeStats want_stats;
  const emu::BlockQuantized row =
      emu::quantize_mxfp8(x.data(), R, C, emu::BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kOcp, &want_stats);
  const emu::BlockQuantized col =
      emu::quantize_mxfp8(x.data(), R, C, emu::BlockAxis::kColumnwise, Format::kE4M3, E8M0Rule::kOcp, nullptr);
  CHECK(t.mode() == ScalingMode::kBlock);
  CHECK_THROWS_WITH(t.per_tensor(), Catch::Contains("block-scaled, not per-tensor"));
  testing::check_same_blocks(t.blocks().rowwise, row);
  testing::check_same_blocks(t.blocks().columnwise, col);
  CHECK(stats.count == want_stats.count);  // the row-wise cast only
  CHECK(stats.saturated == want_stats.saturated);
  // Column-wise only: its cast is the one counted.
  emu::QuantizeStats col_stats;
  const QuantizedTensor c = q->quantize(K, x.data(), R, C, TensorRole::kInput, Usage::kColumnwise, &col_stats);
  testing::check_same_blocks(c.blocks().columnwise, col);
  CHECK(c.blocks().rowwise.codes.empty());
  CHECK(col_stats.count == std::uint64_t(R * C));
}

TEST_CASE("128-block quantizer: 1x128 activations, 128x128 weight tiles", "[scaling][quantizer][block]") {
  const int R = 150, C = 260;
  const std::vector<float> x = random_values(R * C, 14, 2.0f);
  Float8BlockScaling recipe;
  recipe.amax_epsilon = 1e-3f;
  auto fwd = make_quantizer(recipe, Direction::kForward);
  auto bwd = make_quantizer(recipe, Direction::kBackward);
  const QuantizedTensor xi = fwd->quantize(K, x.data(), R, C, TensorRole::kInput, Usage::kBoth, nullptr);
  testing::check_same_blocks(xi.blocks().rowwise, emu::quantize_block_1d(x.data(), R, C, emu::BlockAxis::kRowwise, Format::kE4M3, 128,
                                                       true, 1e-3f, nullptr));
  testing::check_same_blocks(xi.blocks().columnwise, emu::quantize_block_1d(x.data(), R, C, emu::BlockAxis::kColumnwise, Format::kE4M3,
                                                          128, true, 1e-3f, nullptr));
  const QuantizedTensor w = fwd->quantize(K, x.data(), R, C, TensorRole::kWeight, Usage::kBoth, nullptr);
  const emu::BlockQuantized2D tiles = emu::quantize_block_2d(x.data(), R, C, Format::kE4M3, 128, true, 1e-3f, nullptr);
  testing::check_same_blocks(w.blocks().rowwise, tiles.rowwise);
  testing::check_same_blocks(w.blocks().columnwise, tiles.columnwise);
  const QuantizedTensor g = bwd->quantize(K, x.data(), R, C, TensorRole::kGradOutput, Usage::kRowwise, nullptr);
  testing::check_same_blocks(g.blocks().rowwise, emu::quantize_block_1d(x.data(), R, C, emu::BlockAxis::kRowwise, Format::kE4M3, 128,
                                                      true, 1e-3f, nullptr));
  CHECK(g.blocks().columnwise.codes.empty());
}

TEST_CASE("gemm_tn of quantized operands against the emu:: GEMMs", "[scaling][quantizer][gemm]") {
  const int M = 12, N = 9, Kd = 64;
  const std::vector<float> a = random_values(M * Kd, 21, 2.0f), b = random_values(N * Kd, 22, 1.0f);
  SECTION("per-tensor, row-wise operands, Hopper fast accumulation") {
    auto q = make_quantizer(CurrentScaling{}, Direction::kForward);
    const QuantizedTensor qa = q->quantize(K, a.data(), M, Kd, TensorRole::kInput, Usage::kRowwise, nullptr);
    const QuantizedTensor qb = q->quantize(K, b.data(), N, Kd, TensorRole::kWeight, Usage::kRowwise, nullptr);
    const emu::GemmAccumulation acc = emu::te_fprop(emu::Accumulation::kHopper);
    std::vector<float> got(std::size_t(M) * N), want(got.size());
    gemm_tn(K, qa, Usage::kRowwise, qb, Usage::kRowwise, acc, got.data());
    const scaling::PerTensorStorage &pa = qa.per_tensor(), &pb = qb.per_tensor();
    emu::gemm_fp8_tn(M, N, Kd, pa.rowwise_data.data(), Format::kE4M3, pa.scale_inv, pb.rowwise_data.data(),
                     Format::kE4M3, pb.scale_inv, acc, want.data());
    CHECK(same_bits(got, want));
  }
  SECTION("per-tensor, column-wise operands read the transposes") {
    // a as [Kd, M] and b as [Kd, N]: their column-wise copies are [M, Kd] and [N, Kd].
    auto q = make_quantizer(DelayedScaling{}, Direction::kForward);
    const QuantizedTensor qa = q->quantize(K, a.data(), Kd, M, TensorRole::kInput, Usage::kBoth, nullptr);
    const QuantizedTensor qb = q->quantize(K, b.data(), Kd, N, TensorRole::kWeight, Usage::kBoth, nullptr);
    std::vector<std::uint8_t> ca(a.size()), cb(b.size()), ta(a.size()), tb(b.size());
    emu::quantize(a.data(), a.size(), 1.0f, Format::kE4M3, ca.data(), nullptr);
    emu::quantize(b.data(), b.size(), 1.0f, Format::kE4M3, cb.data(), nullptr);
    emu::transpose(Kd, M, ca.data(), ta.data());
    emu::transpose(Kd, N, cb.data(), tb.data());
    const emu::GemmAccumulation acc = emu::te_wgrad(emu::Accumulation::kHopper);
    std::vector<float> got(std::size_t(M) * N), want(got.size());
    gemm_tn(K, qa, Usage::kColumnwise, qb, Usage::kColumnwise, acc, got.data());
    emu::gemm_fp8_tn(M, N, Kd, ta.data(), Format::kE4M3, 1.0f, tb.data(), Format::kE4M3, 1.0f, acc, want.data());
    CHECK(same_bits(got, want));
    std::vector<float> d(std::size_t(M) * M);
    CHECK_THROWS_WITH(gemm_tn(K, qa, Usage::kColumnwise, qb, Usage::kRowwise, acc, d.data()),
                      Catch::Contains("K differs"));
  }
  SECTION("block-scaled operands; a model per scale block, no promotion interval; one scaling mode") {
    auto q = make_quantizer(MXFP8BlockScaling{}, Direction::kForward);
    const QuantizedTensor qa = q->quantize(K, a.data(), M, Kd, TensorRole::kInput, Usage::kRowwise, nullptr);
    const QuantizedTensor qb = q->quantize(K, b.data(), N, Kd, TensorRole::kWeight, Usage::kRowwise, nullptr);
    std::vector<float> got(std::size_t(M) * N), want(got.size());
    gemm_tn(K, qa, Usage::kRowwise, qb, Usage::kRowwise, {}, got.data());
    emu::gemm_fp8_block_tn(
        emu::quantize_mxfp8(a.data(), M, Kd, emu::BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr),
        emu::quantize_mxfp8(b.data(), N, Kd, emu::BlockAxis::kRowwise, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr),
        want.data());
    CHECK(same_bits(got, want));
    CHECK_THROWS_WITH(gemm_tn(K, qa, Usage::kRowwise, qb, Usage::kRowwise, emu::te_dgrad(emu::Accumulation::kHopper),
                              got.data()),
                      Catch::Contains("promotion interval must be 0 and split_k 1, got 128 and 1"));
    auto p = make_quantizer(CurrentScaling{}, Direction::kForward);
    const QuantizedTensor pb = p->quantize(K, b.data(), N, Kd, TensorRole::kWeight, Usage::kRowwise, nullptr);
    CHECK_THROWS_WITH(gemm_tn(K, qa, Usage::kRowwise, pb, Usage::kRowwise, {}, got.data()),
                      Catch::Contains("different scaling modes"));
  }
}

// NVFP4's rounding stream as a quantizer state: TE draws one rng state per gradient cast (offset +
// 1024) and a second for the transformed column-wise copy; the stream is the recipe's seed combined
// with the layer's (seed_rounding); save_state / load_state continue it exactly.
TEST_CASE("NVFP4 quantizer: the rounding stream is its state", "[scaling][nvfp4]") {
  const int rows = 64, cols = 48;
  std::vector<float> dy(std::size_t(rows) * cols);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(float(i) * 0.37f) * (1.0f + float(i % 7));
  NVFP4BlockScaling r;
  r.seed = 5;
  auto cast = [&](Quantizer& q) {
    return q.quantize(backend::cpu_device(), dy.data(), rows, cols, TensorRole::kGradOutput, Usage::kBoth, nullptr);
  };
  auto q = make_quantizer(r, Direction::kBackward);
  auto* n = dynamic_cast<Nvfp4Quantizer*>(q.get());
  REQUIRE(n);
  CHECK(n->rounding_seed() == 5);
  const std::vector<float> saved = q->save_state();
  const QuantizedTensor a = cast(*q);
  CHECK(n->rounding_offset() == 2048);  // row-wise draw, then the transformed column-wise copy's
  const QuantizedTensor b = cast(*q);
  CHECK(a.blocks().rowwise.codes != b.blocks().rowwise.codes);  // the next draw rounds otherwise
  CHECK(a.blocks().rowwise.scale_inv == b.blocks().rowwise.scale_inv);  // scales do not depend on it
  q->load_state(saved);  // back to the first draw: the same codes
  CHECK(cast(*q).blocks().rowwise.codes == a.blocks().rowwise.codes);
  auto other = make_quantizer(r, Direction::kBackward);
  other->seed_rounding(0x1234);  // another layer's stream
  CHECK(cast(*other).blocks().rowwise.codes != a.blocks().rowwise.codes);
  // Round to nearest: no draw.
  r.disable_stochastic_rounding = true;
  auto rn = make_quantizer(r, Direction::kBackward);
  cast(*rn);
  CHECK(dynamic_cast<Nvfp4Quantizer&>(*rn).rounding_offset() == 0);
  CHECK_THROWS_WITH(rn->load_state({1.0f}), Catch::Contains("keeps 8 (its rounding seed and offset)"));
}
