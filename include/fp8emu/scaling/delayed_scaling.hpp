/// \file delayed_scaling.hpp
/// \brief Transformer Engine's DelayedScaling recipe: amax history, margin, and the fused
/// amax/scale update kernel.
///
/// Mirrors TE `transformer_engine/common/recipe/delayed_scaling.cu` (kernel_bulk, reached through
/// `amax_and_scale_update_after_reduction`) and the recipe defaults of
/// `transformer_engine/common/recipe/__init__.py`; see ../shared/reference/transformer-engine-fp8.md §1.
///
/// State layout (TE `DelayedScalingRecipeState`): `scale` Shape: [num_slots], fp32, starts at 1;
/// `amax_history` Shape: [history_len, num_slots], row-major fp32, starts at 0. Row 0 is the
/// staging slot that casts max-accumulate into; the update rolls it into the window.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::scaling {

/// TE `Format`: which FP8 format the forward and backward tensors use.
enum class Fp8Recipe : std::uint8_t {
  kHybrid,  ///< E4M3 forward (input, weight, output), E5M2 backward (grad_output, grad_input). TE default.
  kE4M3,    ///< E4M3 everywhere.
};

/// TE `amax_compute_algo`.
enum class AmaxComputeAlgo : std::uint8_t {
  kMax,         ///< "max": the largest amax in the window.
  kMostRecent,  ///< "most_recent": this step's amax.
};

/// TE `DelayedScaling` recipe fields (defaults as TE).
struct DelayedScaling {
  float margin = 0.0f;             ///< scale = (fp8_max * 2^-margin) / amax.
  Fp8Recipe fp8_format = Fp8Recipe::kHybrid;
  int amax_history_len = 1024;     ///< L >= 1.
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;

  /// Format of forward tensors (input, weight, output): E4M3 for both recipes.
  Format forward_format() const { return Format::kE4M3; }
  /// Format of backward tensors (grad_output, grad_input): E5M2 under HYBRID, else E4M3.
  Format backward_format() const {
    return fp8_format == Fp8Recipe::kHybrid ? Format::kE5M2 : Format::kE4M3;
  }
};

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
  /// Max-accumulate an amax into the staging slot (fmaxf: NaN ignored).
  void record_amax(int slot, float amax);

  /// History value: row `row` (0 = staging), column `slot`.
  float history(int row, int slot) const {
    return history_[std::size_t(row) * std::size_t(num_slots_) + std::size_t(slot)];
  }

  /// TE's fused update after the (absent) amax reduction, for every slot j:
  ///   r = h[0][j]; if r != 0: m = max(h[1..L-1][j], r) and the window rolls
  ///   (h[i] <- h[i+1] for 1 <= i <= L-2, h[L-1] <- r, h[0] <- 0; for L == 1, m = r and h[0] <- 0);
  ///   else m = 0 and the history is untouched.
  ///   amax = m (kMax) or r (kMostRecent);
  ///   if amax is finite and > 0: scale = RN(RN(fp8_max * powf(2, -margin)) / amax),
  ///   else the old scale is kept; an infinite scale becomes FLT_MAX.
  /// \param fmt  Format whose max finite value the scale targets.
  void update(const DelayedScaling& recipe, Format fmt);

 private:
  int num_slots_;
  int history_len_;
  std::vector<float> scale_;
  std::vector<float> history_;
};

}  // namespace fp8emu::scaling
