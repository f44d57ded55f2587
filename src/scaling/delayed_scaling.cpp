// TE delayed scaling (see include/fp8emu/scaling/delayed_scaling.hpp).
#include "fp8emu/scaling/delayed_scaling.hpp"

#include <cfloat>
#include <cmath>

#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

DelayedScalingState::DelayedScalingState(int num_slots, int history_len)
    : num_slots_(num_slots), history_len_(history_len) {
  FP8EMU_CHECK(num_slots >= 1, "delayed scaling: number of tensor slots must be >= 1, got ", num_slots);
  FP8EMU_CHECK(history_len >= 1, "delayed scaling: amax_history_len must be >= 1, got ", history_len);
  scale_.assign(std::size_t(num_slots), 1.0f);
  history_.assign(std::size_t(num_slots) * std::size_t(history_len), 0.0f);
}

void DelayedScalingState::restore(const std::vector<float>& scales, const std::vector<float>& history) {
  FP8EMU_CHECK(scales.size() == scale_.size() && history.size() == history_.size(),
               "delayed scaling: checkpointed state has ", scales.size(), " scales and ", history.size(),
               " history values, this state has ", scale_.size(), " and ", history_.size());
  scale_ = scales;
  history_ = history;
}

void DelayedScalingState::record_amax(int slot, float amax) {
  float& a = *amax_ptr(slot);
  a = std::fmax(a, amax);
}

float fused_scaled_max(const DelayedScaling& recipe, Format fmt) {
  return max_finite_f32(fmt) * powf(2.0f, -recipe.margin);
}

void DelayedScalingState::update(const DelayedScaling& recipe, Format fmt) {
  recipe.validate();
  const std::size_t n = std::size_t(num_slots_);
  const int L = history_len_;
  if (recipe.reduce_amax) recipe.reduce_amax(history_.data(), num_slots_);  // row 0 = this step's amaxes
  const float fp8_max = max_finite_f32(fmt);
  auto h = [&](int row, std::size_t j) -> float& { return history_[std::size_t(row) * n + j]; };

  if (recipe.uses_fused_update()) {
    // Host-side constant as TE's driver: fp32 fp8_max times powf(2, -margin).
    const float scaled_max = fused_scaled_max(recipe, fmt);
    const bool most_recent = recipe.amax_compute_algo == AmaxComputeAlgo::kMostRecent;
    for (std::size_t j = 0; j < n; ++j)
      core::delayed_update_slot_fused(history_.data(), num_slots_, L, int(j), scale_.data(), scaled_max, most_recent);
    return;
  }

  // Unfused path (TE _amax_and_scale_update / _default_sf_compute): the amaxes and the new scales
  // first (a user callable may throw: nothing has changed then), then the roll and the stores.
  std::vector<float> amax(n), scale(n);
  if (recipe.amax_compute_fn) {
    recipe.amax_compute_fn(history_.data(), L, num_slots_, amax.data());
  } else {
    for (std::size_t j = 0; j < n; ++j) {
      float a = h(0, j);
      if (recipe.amax_compute_algo != AmaxComputeAlgo::kMostRecent)  // torch.max: NaN propagates
        for (int i = 1; i < L && !std::isnan(a); ++i) a = std::isnan(h(i, j)) ? h(i, j) : std::fmax(a, h(i, j));
      amax[j] = a;
    }
  }
  if (recipe.scaling_factor_compute_fn) {
    recipe.scaling_factor_compute_fn(amax.data(), scale_.data(), num_slots_, fp8_max, recipe, scale.data());
  } else {
    const float pow2_margin = powf(2.0f, recipe.margin);
    for (std::size_t j = 0; j < n; ++j) {
      float s = (fp8_max / amax[j]) / pow2_margin;
      if (!(amax[j] > 0.0f) || !std::isfinite(amax[j])) s = scale_[j];
      if (std::isinf(s)) s = FLT_MAX;
      scale[j] = s;
    }
  }
  // torch.roll(h, -1, 0); h[0] = 0
  for (std::size_t j = 0; j < n; ++j) {
    const float first = h(0, j);
    for (int i = 0; i + 1 < L; ++i) h(i, j) = h(i + 1, j);
    h(L - 1, j) = first;
    h(0, j) = 0.0f;
  }
  scale_ = scale;
}

}  // namespace fp8emu::scaling
