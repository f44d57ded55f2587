/// \file nvfp4_quantizer.hpp
/// \brief NVFP4 block scaling's quantizer (TE NVFP4BlockScaling): E2M1 codes in 1 x 16 blocks with
/// E4M3 block scales under an fp32 tensor scale, 16 x 16 tiles for weights, the random Hadamard
/// transform on the column-wise copy of inputs and gradients, stochastic rounding of gradients.
///
/// Mirrors TE `pytorch/tensor/nvfp4_tensor.py` NVFP4Quantizer as `pytorch/quantization.py`
/// NVFP4BlockScalingRecipeState makes it per tensor, and the cast kernels of
/// `transformer_engine/common/cast/nvfp4/` and `hadamard_transform/` (docs/nvfp4.md).
#pragma once

#include <cstdint>

#include "fp8emu/scaling/quantizer.hpp"

namespace fp8emu::scaling {

/// Elements per E4M3 scale of an NVFP4 block, and the side of a weight tile (TE's 1 x 16, 16 x 16).
inline constexpr int kNvfp4Block = 16;

/// A cast of an fp32 [rows, cols] tensor into E2M1 codes (one per byte here; TE packs two per byte,
/// element 2j in the low nibble), per role as TE's QParams:
///   - kInput: kRowwise view [rows, cols] in 1 x 16 blocks along cols (RN); kColumnwise view
///     [cols, rows] in 1 x 16 blocks along rows, cast from the Hadamard transform of x along its
///     rows (rows % 16 == 0) under the post-transform amax, unless disable_rht;
///   - kWeight: 16 x 16 tiles shared by both views (1 x 16 blocks with disable_2d_quantization); RN;
///   - kGradOutput: as kInput, with stochastic rounding of both views unless
///     disable_stochastic_rounding: TE's bits from (seed, offset), the column-wise copy after the
///     transform from (seed, offset + 1024), as TE draws a second rng state for that launch.
/// Every view carries its tensor amax (the GEMM's alpha reads it). State: the stochastic-rounding
/// stream's seed and offset (backward quantizer), saved by save_state.
class Nvfp4Quantizer final : public Quantizer {
 public:
  /// \throws fp8emu::Error for invalid recipe parameters.
  Nvfp4Quantizer(const NVFP4BlockScaling& recipe, Direction direction);

  std::unique_ptr<Quantizer> clone() const override { return std::make_unique<Nvfp4Quantizer>(*this); }
  const char* recipe_name() const override { return NVFP4BlockScaling::kName; }
  ScalingMode scaling_mode() const override { return NVFP4BlockScaling::kScalingMode; }
  void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role, DeviceOperand& out,
            backend::CastCounters* counters) override;
  int block_length(TensorRole) const override { return kNvfp4Block; }
  bool has_tensor_amax(TensorRole) const override { return true; }
  void seed_rounding(std::uint64_t stream) override;
  std::vector<float> save_state() const override;
  void load_state(const std::vector<float>& state) override;
  const NVFP4BlockScaling& recipe() const { return recipe_; }
  /// Sets TE's rng_state for the next cast: its Philox seed and offset (each cast with stochastic
  /// rounding advances the offset by 1024, or 2048 when a transformed column-wise copy draws its
  /// own state).
  void set_rounding_state(std::uint64_t seed, std::uint64_t offset);
  /// The Philox seed and the offset the next stochastic rounding draws.
  std::uint64_t rounding_seed() const { return seed_; }
  std::uint64_t rounding_offset() const { return offset_; }

 private:
  NVFP4BlockScaling recipe_;
  std::uint64_t seed_ = 0, offset_ = 0;
};

}  // namespace fp8emu::scaling
