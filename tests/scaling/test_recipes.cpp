// TE's recipes beyond the fused delayed update, with values worked by hand from TE's formulas.
// fp8 maxima from OCP OFP8 r1.0: E4M3 448 = 0x1.cp8, E5M2 57344 = 0x1.cp15.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "support/bits.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/scaling/delayed_scaling.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "fp8emu/scaling/scale_trace.hpp"

using namespace fp8emu;
using namespace fp8emu::scaling;

namespace {
constexpr float kE4M3Max = 0x1.cp8f;
constexpr float kE5M2Max = 0x1.cp15f;

using testing::bits;

std::vector<float> scales(const std::vector<ScaleTraceRow>& rows) {
  std::vector<float> s;
  for (const auto& r : rows) s.push_back(r.scale);
  return s;
}
}  // namespace

// TE transformer_engine/common/recipe/recipe_common.cuh compute_scale_from_amax.
TEST_CASE("compute_scale_from_amax special cases", "[scaling][current]") {
  CHECK(core::compute_scale_from_amax(2.0f, kE4M3Max, false, 0.0f, FLT_MAX) == 224.0f);
  CHECK(core::compute_scale_from_amax(0.0f, kE4M3Max, false, 0.0f, FLT_MAX) == 1.0f);  // not the old scale
  CHECK(core::compute_scale_from_amax(INFINITY, kE4M3Max, false, 0.0f, FLT_MAX) == 1.0f);
  CHECK(core::compute_scale_from_amax(NAN, kE4M3Max, false, 0.0f, FLT_MAX) == 1.0f);
  // NaN fails `amax < epsilon`, so epsilon does not rescue it.
  CHECK(core::compute_scale_from_amax(NAN, kE4M3Max, false, 1.0f, FLT_MAX) == 1.0f);
  // epsilon raises a small amax: max(0, 4) -> 448 / 4.
  CHECK(core::compute_scale_from_amax(0.0f, kE4M3Max, false, 4.0f, FLT_MAX) == 112.0f);
  CHECK(core::compute_scale_from_amax(1.0f, kE4M3Max, false, 4.0f, FLT_MAX) == 112.0f);
  // pow2 keeps sign and exponent: 448 / 3 = 149.33 -> 128; 57344 / 3 = 19114.67 -> 16384.
  CHECK(core::compute_scale_from_amax(3.0f, kE4M3Max, true, 0.0f, FLT_MAX) == 128.0f);
  CHECK(core::compute_scale_from_amax(3.0f, kE5M2Max, true, 0.0f, FLT_MAX) == 16384.0f);
  // A subnormal amax overflows the division: inf -> value_for_inf; with pow2, FLT_MAX -> 2^127.
  CHECK(core::compute_scale_from_amax(0x1p-140f, kE4M3Max, false, 0.0f, FLT_MAX) == FLT_MAX);
  CHECK(core::compute_scale_from_amax(0x1p-140f, kE4M3Max, true, 0.0f, FLT_MAX) == 0x1p127f);
  // Without pow2 the scale is the correctly rounded quotient: 448 / 3 = 0x1.2aaaaap7 (RN).
  CHECK(bits(core::compute_scale_from_amax(3.0f, kE4M3Max, false, 0.0f, FLT_MAX)) == bits(0x1.2aaaaap7f));
}

TEST_CASE("current-scaling trace, one scale per amax", "[scaling][current]") {
  CurrentScaling c;
  c.use_power_2_scales = true;
  CHECK(scales(trace_current(c, Format::kE4M3, {3.0f, 0.0f, 0.5f})) == std::vector<float>{128.0f, 1.0f, 512.0f});
  CurrentScaling bad;
  bad.amax_epsilon = -1.0f;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("amax_epsilon"));
}

// TE pytorch/quantization.py _amax_and_scale_update (unfused): the window always rolls.
TEST_CASE("unfused delayed update always rolls, fused keeps the window on amax 0", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 2;
  // fused:   s0 = 448/2 = 224, h=[0,2]; step 1 r=0: no roll, 224; step 2 r=1: m = max(2, 1) = 2: 224
  CHECK(scales(trace_delayed(r, Format::kE4M3, {2, 0, 1})) == std::vector<float>{224.0f, 224.0f, 224.0f});
  // unfused: step 0 amax = max(h) = 2 -> 224, roll -> h=[0,2]; step 1: amax = max(0,2) = 2 -> 224,
  //          roll -> h=[0,0] (the 2 left at row 0 is zeroed); step 2: amax = 1 -> 448
  r.fused_update = false;
  CHECK(scales(trace_delayed(r, Format::kE4M3, {2, 0, 1})) == std::vector<float>{224.0f, 224.0f, kE4M3Max});
  // unfused, margin 1: (448 / 2) / 2 = 112
  r.margin = 1.0f;
  CHECK(scales(trace_delayed(r, Format::kE4M3, {2})) == std::vector<float>{112.0f});
}

TEST_CASE("a delayed update whose callable throws changes nothing", "[scaling][delayed]") {
  // TE's callables run before the history rolls and the scales are stored; one that throws (a
  // Python error in fp8emu.DelayedScaling's callable) must leave the whole state as it was.
  DelayedScalingState st(3, 4);
  st.record_amax(0, 2.0f);
  st.record_amax(1, 5.0f);
  DelayedScaling fused;
  fused.amax_history_len = 4;
  st.update(fused, Format::kE4M3);  // a fused update first: new scales, a rolled window
  st.record_amax(2, 7.0f);
  const std::vector<float> scales = st.scales(), history = st.history_values();
  DelayedScaling amax_throws = fused;
  amax_throws.amax_compute_fn = [](const float*, int, int, float*) { throw std::runtime_error("user amax"); };
  CHECK_THROWS_WITH(st.update(amax_throws, Format::kE4M3), "user amax");
  CHECK(st.scales() == scales);
  CHECK(st.history_values() == history);
  DelayedScaling scale_throws = fused;
  scale_throws.scaling_factor_compute_fn = [](const float*, const float*, int, float, const DelayedScaling&, float*) {
    throw std::runtime_error("user scale");
  };
  CHECK_THROWS_WITH(st.update(scale_throws, Format::kE4M3), "user scale");
  CHECK(st.scales() == scales);
  CHECK(st.history_values() == history);
}

TEST_CASE("delayed update with user callables and an amax reduction hook", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 3;
  // amax_compute_algo callable: the sum of each slot's history column (rows oldest-first, row 0 =
  // staging), called once with the whole [L, slots] history, as TE calls it.
  int calls = 0;
  r.amax_compute_fn = [&calls](const float* h, int L, int slots, float* amax) {
    ++calls;
    for (int j = 0; j < slots; ++j) {
      float s = 0;
      for (int i = 0; i < L; ++i) s += h[i * slots + j];
      amax[j] = s;
    }
  };
  // step 0: column [2,0,0] -> 2 -> 224; roll -> [0,0,2]. step 1: [4,0,2] -> 6 -> 448/6.
  CHECK(scales(trace_delayed(r, Format::kE4M3, {2, 4})) == std::vector<float>{224.0f, kE4M3Max / 6.0f});
  CHECK(calls == 2);  // once per update, every slot at once
  // scaling_factor_compute_algo callable gets (amax, old scale, fp8_max).
  DelayedScaling f;
  f.amax_history_len = 1;
  f.scaling_factor_compute_fn = [](const float* amax, const float* old, int slots, float fp8_max,
                                    const DelayedScaling&, float* out) {
    for (int j = 0; j < slots; ++j) out[j] = old[j] + fp8_max / amax[j];
  };
  CHECK(scales(trace_delayed(f, Format::kE5M2, {7})) == std::vector<float>{1.0f + 8192.0f});
  // reduce hook: another rank saw amax 16 in slot 0 -> MAX gives 16 -> 448/16 = 28.
  DelayedScaling d;
  d.amax_history_len = 4;
  d.reduce_amax = [](float* a, int n) {
    for (int i = 0; i < n; ++i) a[i] = std::fmax(a[i], 16.0f);
  };
  DelayedScalingState st(1, 4);
  st.record_amax(0, 2.0f);
  st.update(d, Format::kE4M3);
  CHECK(st.scale(0) == 28.0f);
  CHECK(st.history(3, 0) == 16.0f);
}

TEST_CASE("bad recipe parameters are rejected as TE does", "[scaling]") {
  DelayedScaling d;
  d.amax_history_len = 0;
  CHECK_THROWS_WITH(d.validate(), Catch::Contains("amax_history_len"));
  d.amax_history_len = 4;
  d.fp8_format = RecipeFormat::kE5M2;
  CHECK_THROWS_WITH(d.validate(), Catch::Contains("E5M2-only"));
  CHECK_THROWS_WITH(parse_recipe_format("e3m4"), Catch::Contains("unknown FP8 format"));
  Float8BlockScaling b;
  b.amax_epsilon = NAN;
  CHECK_THROWS(b.validate());
  MXFP8BlockScaling m;
  m.fp8_format = RecipeFormat::kE5M2;
  CHECK_THROWS(m.validate());
  CHECK(backward_format(RecipeFormat::kHybrid) == Format::kE5M2);
  CHECK(forward_format(RecipeFormat::kHybrid) == Format::kE4M3);
}

TEST_CASE("amax lists parse decimals, inf, nan and hex floats", "[scaling][trace]") {
  const std::vector<float> v = parse_amax_list("1.5,inf,nan,0x1p-3,-0");
  REQUIRE(v.size() == 5);
  CHECK(v[0] == 1.5f);
  CHECK(std::isinf(v[1]));
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 0.125f);
  CHECK(parse_amax_list("0.1")[0] == 0.1f);  // rounded to fp32
  CHECK_THROWS_WITH(parse_amax_list("1,,2"), Catch::Contains("empty entry"));
  CHECK_THROWS_WITH(parse_amax_list("1,abc"), Catch::Contains("'abc' is not a number"));
}

// TE util/ptx.cuh float_to_e8m0 (software branch = cvt.rp.satfinite.ue8m0x2.f32).
TEST_CASE("E8M0 rounds up and saturates", "[scaling][mxfp8][e8m0]") {
  CHECK(core::e8m0_round_up_from_f32_bits(bits(1.0f)) == 127);
  CHECK(core::e8m0_round_up_from_f32_bits(bits(1.5f)) == 128);  // rounds up to 2
  CHECK(core::e8m0_round_up_from_f32_bits(bits(2.0f)) == 128);
  CHECK(core::e8m0_round_up_from_f32_bits(bits(0.0f)) == 0);
  CHECK(core::e8m0_round_up_from_f32_bits(0x00400000u) == 0);  // 2^-127 is code 0 itself
  CHECK(core::e8m0_round_up_from_f32_bits(0x00400001u) == 1);  // above it: 2^-126
  CHECK(core::e8m0_round_up_from_f32_bits(0x00800000u) == 1);  // 2^-126
  CHECK(core::e8m0_round_up_from_f32_bits(0x7F000000u) == 0xFE);  // 2^127
  CHECK(core::e8m0_round_up_from_f32_bits(0x7F000001u) == 0xFE);  // would be 2^128: saturates
  CHECK(core::e8m0_round_up_from_f32_bits(bits(INFINITY)) == 0xFE);
  CHECK(core::e8m0_round_up_from_f32_bits(bits(NAN)) == 0xFF);
  CHECK(core::e8m0_to_f32_bits(127) == bits(1.0f));
  CHECK(core::e8m0_to_f32_bits(0) == 0x00400000u);
  CHECK(core::e8m0_reciprocal_f32_bits(0) == bits(0x1p127f));
  CHECK(core::e8m0_reciprocal_f32_bits(0xFE) == 0x00400000u);
  CHECK(core::e8m0_reciprocal_f32_bits(119) == bits(256.0f));
}

// recipe_names / parse_recipe: one parser for the CLI and both experiments.
TEST_CASE("recipe_names, parse_recipe and its errors", "[scaling][recipe][parse]") {
  CHECK(recipe_names() == std::vector<std::string>{"delayed", "current", "mxfp8", "block", "nvfp4"});
  CHECK(std::string(recipe_name(parse_recipe("nvfp4"))) == "nvfp4");
  CHECK(std::string(recipe_name(parse_recipe("delayed"))) == "delayed");
  CHECK(std::string(recipe_name(parse_recipe("current"))) == "current");
  CHECK(std::string(recipe_name(parse_recipe("mxfp8"))) == "mxfp8");
  CHECK(std::string(recipe_name(parse_recipe("block"))) == "block");
  CHECK_THROWS_WITH(parse_recipe("fp4"),
                    Catch::Contains("unknown recipe 'fp4' (accepted: delayed, current, mxfp8, block, nvfp4)"));
  CHECK_THROWS_WITH(parse_recipe("Delayed"), Catch::Contains("accepted: delayed, current, mxfp8, block, nvfp4"));
  CHECK_THROWS_WITH(parse_recipe("all"), Catch::Contains("unknown recipe 'all'"));
  CHECK_THROWS_WITH(parse_recipe_selection("mxfp4"),
                    Catch::Contains("unknown recipe 'mxfp4' (accepted: delayed, current, mxfp8, block, nvfp4, all)"));
  CHECK_FALSE(find_recipe("").has_value());
  CHECK_FALSE(find_recipe("mxfp4").has_value());

  // The caller's parameters win over TE's defaults.
  DelayedScaling d;
  d.margin = 2.0f;
  d.amax_history_len = 16;
  Float8BlockScaling b;
  b.use_f32_scales = true;
  const Recipe got = parse_recipe("delayed", {CurrentScaling{}, d, b});
  REQUIRE(std::holds_alternative<DelayedScaling>(got));
  CHECK(std::get<DelayedScaling>(got).margin == 2.0f);
  CHECK(std::get<DelayedScaling>(got).amax_history_len == 16);
  CHECK(std::get<Float8BlockScaling>(parse_recipe("block", {d, b})).use_f32_scales);
  // Not configured: TE's defaults (MXFP8: E4M3 everywhere).
  CHECK(std::get<MXFP8BlockScaling>(parse_recipe("mxfp8", {d})).fp8_format == RecipeFormat::kE4M3);
  CHECK(std::get<DelayedScaling>(parse_recipe("delayed")).amax_history_len == 1024);

  const std::vector<Recipe> all = parse_recipe_selection("all", {b, d});
  REQUIRE(all.size() == 5);
  CHECK(std::string(recipe_name(all[0])) == "delayed");
  CHECK(std::get<DelayedScaling>(all[0]).margin == 2.0f);
  CHECK(std::string(recipe_name(all[1])) == "current");
  CHECK(std::string(recipe_name(all[2])) == "mxfp8");
  CHECK(std::get<Float8BlockScaling>(all[3]).use_f32_scales);
  CHECK(std::string(recipe_name(all[4])) == "nvfp4");
  REQUIRE(parse_recipe_selection("current").size() == 1);
}

TEST_CASE("recipe questions replace variant positions", "[scaling][recipe]") {
  CHECK(scaling_mode(DelayedScaling{}) == ScalingMode::kPerTensor);
  CHECK(scaling_mode(CurrentScaling{}) == ScalingMode::kPerTensor);
  CHECK(scaling_mode(MXFP8BlockScaling{}) == ScalingMode::kBlock);
  CHECK(scaling_mode(Float8BlockScaling{}) == ScalingMode::kBlock);
  CHECK(uses_per_tensor_scales(DelayedScaling{}));
  CHECK(uses_per_tensor_scales(CurrentScaling{}));
  CHECK_FALSE(uses_per_tensor_scales(MXFP8BlockScaling{}));
  CHECK_FALSE(uses_per_tensor_scales(Float8BlockScaling{}));
  CHECK(supports_accumulation_models(DelayedScaling{}));
  CHECK_FALSE(supports_accumulation_models(Float8BlockScaling{}));
}

TEST_CASE("RecipeSet: one configured record per recipe, from TE's defaults", "[scaling][recipe][set]") {
  RecipeSet set;
  // TE transformer_engine/common/recipe/__init__.py defaults: DelayedScaling(margin=0,
  // fp8_format=HYBRID, amax_history_len=1024, amax_compute_algo="max"), Float8CurrentScaling
  // (HYBRID), MXFP8BlockScaling (E4M3), Float8BlockScaling (E4M3).
  const std::vector<Recipe> all = set.all();
  REQUIRE(all.size() == recipe_names().size());
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(recipe_name(all[i]) == recipe_names()[i]);
  CHECK(set.get<DelayedScaling>().amax_history_len == 1024);
  CHECK(set.get<DelayedScaling>().margin == 0.0f);
  CHECK(set.get<DelayedScaling>().amax_compute_algo == AmaxComputeAlgo::kMax);
  CHECK(set.get<DelayedScaling>().fp8_format == RecipeFormat::kHybrid);
  CHECK(set.get<CurrentScaling>().fp8_format == RecipeFormat::kHybrid);
  CHECK(set.get<MXFP8BlockScaling>().fp8_format == RecipeFormat::kE4M3);
  CHECK(set.get<Float8BlockScaling>().fp8_format == RecipeFormat::kE4M3);
  // NVFP4BlockScaling: RHT, stochastic rounding and 2D weights on; E4M3 block scales.
  CHECK(set.get<NVFP4BlockScaling>().fp8_format == RecipeFormat::kE4M3);
  CHECK_FALSE(set.get<NVFP4BlockScaling>().disable_rht);
  CHECK_FALSE(set.get<NVFP4BlockScaling>().disable_stochastic_rounding);
  CHECK_FALSE(set.get<NVFP4BlockScaling>().disable_2d_quantization);
  // --format reaches every recipe but NVFP4, whose formats are TE's fixed ones.
  RecipeSet e4m3;
  e4m3.set_format(RecipeFormat::kE4M3);
  CHECK(e4m3.get<DelayedScaling>().fp8_format == RecipeFormat::kE4M3);
  e4m3.set_format(RecipeFormat::kHybrid);
  CHECK(e4m3.get<CurrentScaling>().fp8_format == RecipeFormat::kHybrid);
  CHECK(e4m3.get<NVFP4BlockScaling>().fp8_format == RecipeFormat::kE4M3);
  CHECK_NOTHROW(e4m3.validate());
  NVFP4BlockScaling hybrid;
  hybrid.fp8_format = RecipeFormat::kHybrid;
  CHECK_THROWS_WITH(hybrid.validate(), Catch::Contains("fp8_format (the block scales' format) must be E4M3"));

  // Configured parameters reach find, select and all; the reference stays the record's.
  int& len = set.get<DelayedScaling>().amax_history_len;
  len = 16;
  set.get<Float8BlockScaling>().use_f32_scales = true;
  CHECK(std::get<DelayedScaling>(set.find("delayed")).amax_history_len == 16);
  const std::vector<Recipe> sel = set.select("all");
  REQUIRE(sel.size() == all.size());
  CHECK(std::get<DelayedScaling>(sel[0]).amax_history_len == 16);
  CHECK(std::get<Float8BlockScaling>(sel[3]).use_f32_scales);
  REQUIRE(set.select("block").size() == 1);
  CHECK(std::get<Float8BlockScaling>(set.select("block")[0]).use_f32_scales);
  CHECK_THROWS_WITH(set.find("mxfp4"), Catch::Contains("unknown recipe 'mxfp4'"));

  // A copy is independent of its source.
  RecipeSet copy = set;
  copy.get<DelayedScaling>().amax_history_len = 3;
  CHECK(set.get<DelayedScaling>().amax_history_len == 16);

  // --format fans out to every record; validate checks every record, selected or not.
  set.set_format(RecipeFormat::kE4M3);
  for (const Recipe& r : set.all()) CHECK(recipe_format(r) == RecipeFormat::kE4M3);
  CHECK_NOTHROW(set.validate());
  set.get<CurrentScaling>().amax_epsilon = -1.0f;
  CHECK_THROWS_WITH(set.validate(), Catch::Contains("current scaling: amax_epsilon"));
}

TEST_CASE("recipe records list their parameters by name", "[scaling][recipe][set]") {
  std::vector<std::string> names;
  auto collect = [&](const char* n, const auto&) { names.push_back(n); };
  DelayedScaling{}.visit_parameters(collect);
  CHECK(names == std::vector<std::string>{"fp8_format", "amax_history_len", "amax_compute_algo", "margin",
                                          "fused_update", "fnuz"});
  names.clear();
  MXFP8BlockScaling mx;
  mx.rule = E8M0Rule::kOcp;
  std::string rule;
  mx.visit_parameters([&](const char* n, const auto& v) {
    if constexpr (std::is_convertible_v<decltype(v), std::string>)
      if (std::string(n) == "e8m0_rule") rule = v;
  });
  CHECK(rule == "ocp");
  CurrentScaling cur;
  cur.amax_epsilon = 0.5f;
  float eps = -1.0f;
  cur.visit_parameters([&](const char* n, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, float>)
      if (std::string(n) == "amax_epsilon") eps = v;
  });
  CHECK(eps == 0.5f);
}
