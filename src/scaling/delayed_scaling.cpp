// TE delayed scaling (see include/fp8emu/scaling/delayed_scaling.hpp).
#include "fp8emu/scaling/delayed_scaling.hpp"

#include <cfloat>
#include <cmath>

#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

DelayedScalingState::DelayedScalingState(int num_slots, int history_len)
    : num_slots_(num_slots), history_len_(history_len) {
  FP8EMU_CHECK(num_slots >= 1, "delayed scaling: number of tensor slots must be >= 1, got ", num_slots);
  FP8EMU_CHECK(history_len >= 1, "delayed scaling: amax_history_len must be >= 1, got ", history_len);
  scale_.assign(std::size_t(num_slots), 1.0f);
  history_.assign(std::size_t(num_slots) * std::size_t(history_len), 0.0f);
}

void DelayedScalingState::record_amax(int slot, float amax) {
  float& a = *amax_ptr(slot);
  a = std::fmax(a, amax);
}

void DelayedScalingState::update(const DelayedScaling& recipe, Format fmt) {
  // Host-side constant as TE's driver: fp32 fp8_max times powf(2, -margin).
  const float scaled_max = max_finite_f32(fmt) * powf(2.0f, -recipe.margin);
  const std::size_t n = std::size_t(num_slots_);
  const int L = history_len_;
  for (std::size_t j = 0; j < n; ++j) {
    const float r = history_[j];
    float m = 0.0f;
    if (r != 0.0f) {
      if (L == 1) {
        m = r;
      } else {
        for (int i = 1; i < L; ++i) m = std::fmax(m, history_[std::size_t(i) * n + j]);
        m = std::fmax(m, r);
        for (int i = 1; i + 1 < L; ++i) history_[std::size_t(i) * n + j] = history_[std::size_t(i + 1) * n + j];
        history_[std::size_t(L - 1) * n + j] = r;
      }
      history_[j] = 0.0f;
    }
    const float amax = recipe.amax_compute_algo == AmaxComputeAlgo::kMax ? m : r;
    float s = scale_[j];
    if (std::isfinite(amax) && amax > 0.0f) s = scaled_max / amax;
    if (std::isinf(s)) s = FLT_MAX;
    scale_[j] = s;
  }
}

}  // namespace fp8emu::scaling
