/// \file delayed_scaling.hpp
/// \brief Transformer Engine's DelayedScaling recipe: amax history, margin, and the fused
/// amax/scale update kernel.
///
/// Mirrors TE `transformer_engine/common/recipe/delayed_scaling.cu` (kernel_bulk, reached through
/// `amax_and_scale_update_after_reduction`) and the recipe defaults of
/// `transformer_engine/common/recipe/__init__.py`; see docs/transformer-engine.md §Delayed scaling.
///
/// State layout (TE `DelayedScalingRecipeState`): `scale` Shape: [num_slots], fp32, starts at 1;
/// `amax_history` Shape: [history_len, num_slots], row-major fp32, starts at 0. Row 0 is the
/// staging slot that casts max-accumulate into; the update rolls it into the window.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::scaling {

/// Scales and amax histories of `num_slots` FP8 tensors that share one recipe and format
/// (one TE forward or backward buffer). Not thread-safe; updates are deterministic.
class DelayedScalingState {
 public:
  /// \throws fp8emu::Error if num_slots < 1 or history_len < 1.
  DelayedScalingState(int num_slots, int history_len);

  int num_slots() const { return num_slots_; }
  int history_len() const { return history_len_; }

  /// Current scale of a slot (the value a cast multiplies by).
  float scale(int slot) const { return scale_[std::size_t(slot)]; }
  /// RN(1/scale) of a slot, as every per-tensor cast writes it (__frcp_rn).
  float scale_inv(int slot) const { return 1.0f / scale_[std::size_t(slot)]; }

  /// Pointer to a slot's staging amax, history row 0 (TE quantizer amax pointer).
  float* amax_ptr(int slot) { return &history_[std::size_t(slot)]; }
  /// Max-accumulate an amax into the staging slot (fmaxf: NaN ignored), as a cast does.
  void record_amax(int slot, float amax);
  /// Overwrite the staging slot, as TE's amax all-reduce writes back the reduced value.
  void set_amax(int slot, float amax) { *amax_ptr(slot) = amax; }

  /// Checkpoint access: scales Shape [num_slots]; history Shape [history_len, num_slots].
  const std::vector<float>& scales() const { return scale_; }
  const std::vector<float>& history_values() const { return history_; }
  /// Restore from scales() and history_values(). \throws fp8emu::Error on a size mismatch.
  void restore(const std::vector<float>& scales, const std::vector<float>& history);

  /// History value: row `row` (0 = staging), column `slot`.
  float history(int row, int slot) const {
    return history_[std::size_t(row) * std::size_t(num_slots_) + std::size_t(slot)];
  }

  /// The amax/scale update of every slot, after recipe.reduce_amax (if set) reduced row 0.
  ///
  /// Fused path (TE delayed_scaling.cu kernel_bulk, the default), for each slot j:
  ///   r = h[0][j]; if r != 0: m = max(h[1..L-1][j], r) (fmaxf, NaN ignored) and the window rolls
  ///   (h[i] <- h[i+1] for 1 <= i <= L-2, h[L-1] <- r, h[0] <- 0; for L == 1, m = r and h[0] <- 0);
  ///   else m = 0 and the history is untouched.
  ///   amax = m (kMax) or r (kMostRecent);
  ///   if amax is finite and > 0: scale = RN(RN(fp8_max * powf(2, -margin)) / amax),
  ///   else the old scale is kept; an infinite scale becomes FLT_MAX.
  /// Unfused path (TE pytorch/quantization.py _amax_and_scale_update; chosen by
  /// fused_update = false or by a callable), for each slot j:
  ///   amax = max over all L rows (NaN propagates, as torch.max) | h[0] (most_recent) | callable;
  ///   the window always rolls (h[i] <- h[i+1], h[L-1] <- old h[0], then h[0] <- 0);
  ///   scale = callable(amax, old, fp8_max, recipe) (TE's callables are called once with every slot,
  ///   before anything changes), or RN(RN(fp8_max / amax) / RN(2^margin)) kept
  ///   only where amax > 0 and finite, and an infinite scale becomes FLT_MAX.
  /// \param fmt  Format whose max finite value the scale targets.
  /// \throws fp8emu::Error if the recipe is invalid.
  void update(const DelayedScaling& recipe, Format fmt);

 private:
  int num_slots_;
  int history_len_;
  std::vector<float> scale_;
  std::vector<float> history_;
};

/// The fused update's target, computed on the host as TE's driver does: RN(fp8_max * powf(2, -margin))
/// in fp32, fp8_max the largest finite value of `fmt` (DelayedScalingState::update's fused path and
/// the device-resident update, Mlp::to_device).
float fused_scaled_max(const DelayedScaling& recipe, Format fmt);

}  // namespace fp8emu::scaling
