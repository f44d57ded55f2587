// Delayed scaling sequences worked by hand from TE's fused update
// (TE transformer_engine/common/recipe/delayed_scaling.cu, kernel_bulk; docs/transformer-engine.md
// §Delayed scaling):
//   r = h[0]; if r != 0 { m = max(h[1..L-1], r); roll; h[L-1] = r; h[0] = 0 } else m = 0
//   amax = MAX ? m : r;  scale = finite(amax) && amax > 0 ? (fp8_max * 2^-margin) / amax : old
//   inf scale -> FLT_MAX
// fp8_max values from OCP OFP8 r1.0: E4M3 448 = 0x1.cp8, E5M2 57344 = 0x1.cp15.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <vector>

#include "fp8emu/scaling/delayed_scaling.hpp"

using namespace fp8emu;
using namespace fp8emu::scaling;

namespace {
constexpr float kE4M3Max = 0x1.cp8f;   // 448
constexpr float kE5M2Max = 0x1.cp15f;  // 57344

// Feeds one amax per step into slot 0 and returns the scale after each update.
std::vector<float> trace(DelayedScaling recipe, Format fmt, const std::vector<float>& amaxes,
                         DelayedScalingState* out = nullptr) {
  DelayedScalingState st(1, recipe.amax_history_len);
  std::vector<float> s;
  for (float a : amaxes) {
    st.record_amax(0, a);
    st.update(recipe, fmt);
    s.push_back(st.scale(0));
  }
  if (out) *out = st;
  return s;
}
}  // namespace

TEST_CASE("initial state: scale 1, zero history", "[scaling][delayed]") {
  DelayedScalingState st(3, 4);
  for (int j = 0; j < 3; ++j) {
    CHECK(st.scale(j) == 1.0f);
    CHECK(st.scale_inv(j) == 1.0f);
    for (int i = 0; i < 4; ++i) CHECK(st.history(i, j) == 0.0f);
  }
}

TEST_CASE("L = 4, max: window of the L most recent non-zero amaxes", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 4;
  // step 0: r=2 -> m=2, h=[0,0,0,2], s=448/2=224
  // step 1: r=0 -> no roll, old scale kept: 224
  // step 2: r=8 -> m=max(0,0,2,8)=8, h=[0,0,2,8], s=56
  // steps 3-5: r=1 -> the 8 stays in the window (h=[0,2,8,1], [0,8,1,1], [0,1,1,1]; m=8): 56
  // step 6: r=1 -> m=max(1,1,1,1)=1: 448
  const std::vector<float> want{kE4M3Max / 2, kE4M3Max / 2, kE4M3Max / 8, kE4M3Max / 8,
                                kE4M3Max / 8, kE4M3Max / 8, kE4M3Max};
  DelayedScalingState st(1, 1);
  CHECK(trace(r, Format::kE4M3, {2, 0, 8, 1, 1, 1, 1}, &st) == want);
  CHECK(want[0] == 224.0f);
  CHECK(st.history(0, 0) == 0.0f);
  CHECK(st.history(1, 0) == 1.0f);
  CHECK(st.history(3, 0) == 1.0f);
}

TEST_CASE("most_recent uses this step's amax, amax 0 keeps the old scale", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 4;
  r.amax_compute_algo = AmaxComputeAlgo::kMostRecent;
  CHECK(trace(r, Format::kE4M3, {2, 0, 8, 1}) ==
        std::vector<float>{224.0f, 224.0f, 56.0f, kE4M3Max});
}

TEST_CASE("margin divides the target by 2^margin", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 1;
  r.margin = 1.0f;
  CHECK(trace(r, Format::kE4M3, {2}) == std::vector<float>{112.0f});  // (448 / 2) / 2
  r.margin = 3.0f;
  CHECK(trace(r, Format::kE4M3, {7}) == std::vector<float>{8.0f});   // 56 / 7
  r.margin = 0.5f;  // powf(2, -0.5) rounded to fp32, times 448, then / 1
  CHECK(trace(r, Format::kE4M3, {1}) == std::vector<float>{kE4M3Max * powf(2.0f, -0.5f)});
}

TEST_CASE("E5M2 (HYBRID backward) targets 57344", "[scaling][delayed][e5m2]") {
  DelayedScaling r;
  r.amax_history_len = 2;
  CHECK(trace(r, Format::kE5M2, {7}) == std::vector<float>{8192.0f});  // 57344 / 7 = 8192 exactly
  CHECK(kE5M2Max / 7 == 8192.0f);
  CHECK(backward_format(r.fp8_format) == Format::kE5M2);
  r.fp8_format = RecipeFormat::kE4M3;
  CHECK(backward_format(r.fp8_format) == Format::kE4M3);
}

TEST_CASE("an inf amax freezes the scale until it leaves the window", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 2;
  // step 0: r=4 -> m=4, h=[0,4], s=112
  // step 1: r=inf -> m=max(4,inf)=inf, h=[0,inf]: not finite -> keep 112
  // step 2: r=2 -> m=max(inf,2)=inf, h=[0,2]: keep 112
  // step 3: r=2 -> m=max(2,2)=2: 224
  CHECK(trace(r, Format::kE4M3, {4, INFINITY, 2, 2}) ==
        std::vector<float>{112.0f, 112.0f, 112.0f, 224.0f});
}

TEST_CASE("a tiny amax gives an infinite scale, stored as FLT_MAX", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 1;
  // 448 / 2^-140 = 1.75 * 2^148 > FLT_MAX (about 2^128): inf -> FLT_MAX.
  CHECK(trace(r, Format::kE4M3, {0x1p-140f}) == std::vector<float>{FLT_MAX});
  // Subnormal amax, same story.
  CHECK(trace(r, Format::kE4M3, {0x1p-149f}) == std::vector<float>{FLT_MAX});
}

TEST_CASE("NaN is ignored when recorded, L = 1 resets the staging slot", "[scaling][delayed]") {
  DelayedScaling r;
  r.amax_history_len = 1;
  DelayedScalingState st(2, 1);
  st.record_amax(0, NAN);  // fmaxf(0, NaN) = 0: no amax, no update
  st.record_amax(1, 2.0f);
  st.record_amax(1, 1.0f);  // max-accumulates: stays 2
  st.update(r, Format::kE4M3);
  CHECK(st.scale(0) == 1.0f);
  CHECK(st.scale(1) == 224.0f);
  CHECK(st.history(0, 1) == 0.0f);
  st.update(r, Format::kE4M3);  // nothing recorded: r = 0, scale kept
  CHECK(st.scale(1) == 224.0f);
}

TEST_CASE("bad state sizes are rejected", "[scaling][delayed]") {
  CHECK_THROWS_WITH(DelayedScalingState(0, 4), Catch::Contains("slots"));
  CHECK_THROWS_WITH(DelayedScalingState(1, 0), Catch::Contains("amax_history_len"));
}
