/// \file quantizer.hpp
/// \brief A recipe's casts as one object: the Quantizer interface that every FP8 recipe implements,
/// the quantized operand it returns, the factory, and the FP8 GEMM that consumes two operands.
///
/// Mirrors Transformer Engine's quantizer split (TE `pytorch/tensor/float8_tensor.py`
/// Float8Quantizer / Float8CurrentScalingQuantizer, `mxfp8_tensor.py` MXFP8Quantizer,
/// `float8_blockwise_tensor.py` Float8BlockQuantizer, and `pytorch/quantization.py` RecipeState,
/// which makes one quantizer per tensor of the forward or the backward pass). One quantizer file per
/// recipe, as TE keeps one quantizer and one cast kernel per recipe:
///   - delayed_quantizer.hpp  (TE delayed_scaling.cu, cast with a stored scale, amax_history),
///   - current_quantizer.hpp  (TE Float8CurrentScalingQuantizer, recipe_common.cuh compute_scale_from_amax),
///   - mxfp8_quantizer.hpp    (TE quantize_mxfp8.cuh, 1x32 E8M0 blocks),
///   - block_quantizer.hpp    (TE quantize_transpose_square_blockwise.cu / _vector_blockwise.cu,
///                             1x128 blocks and 128x128 weight tiles).
///
/// Adding a recipe: its configuration record in recipe.hpp (kName, kScalingMode, validate,
/// make_quantizer, visit_parameters, and its place in the Recipe variant), one quantizer file pair
/// here and in src/scaling/ (which defines the record's make_quantizer), and its source line in
/// CMakeLists.txt. nn::Linear, RecipeSet, `--recipe` and the experiments need no edit. A recipe with a new ScalingMode (NVFP4) also adds its GEMM case to
/// gemm_tn.
///
/// Determinism: every quantizer and gemm_tn give the same bits for any OpenMP thread count and for
/// either backend::Kernels implementation (emulated or cuda).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/delayed_scaling.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::scaling {

/// Which pass a quantizer serves (TE RecipeState.create(forward=...)): the forward quantizer casts
/// input and weight in the recipe's forward format, the backward one casts grad_output in its
/// backward format (E5M2 under HYBRID).
enum class Direction : std::uint8_t { kForward, kBackward };

/// The tensor a cast is for. Its TE FP8 meta slot (fp8_meta index) within its direction's buffer:
/// forward {input 0, weight 1, output 2}, backward {grad_output 0, grad_input 1}. output and
/// grad_input are never cast by Linear; their slots exist so delayed-scaling state keeps TE's shape.
enum class TensorRole : std::uint8_t { kInput, kWeight, kOutput, kGradOutput, kGradInput };

/// TE fp8_meta slot of a role (see TensorRole).
int slot_of(TensorRole role);
/// The direction whose buffer holds a role's slot.
Direction direction_of(TensorRole role);
/// Slots in a direction's buffer: 3 forward, 2 backward.
int num_slots(Direction d);

/// Which copies a cast produces (TE Quantizer.set_usage(rowwise=, columnwise=)). Bit flags.
enum class Usage : std::uint8_t {
  kRowwise = 1,     ///< The [rows, cols] copy, K = cols (fprop operands, dgrad's grad_output).
  kColumnwise = 2,  ///< The [cols, rows] copy, K = rows (wgrad operands, dgrad's weight).
  kBoth = 3,
};
/// True when `usage` includes every flag of `part`.
inline bool has_usage(Usage usage, Usage part) {
  return (static_cast<unsigned>(usage) & static_cast<unsigned>(part)) == static_cast<unsigned>(part);
}

/// One FP8 operand as the GEMM reads it (TE Float8Tensor / MXFP8Tensor / Float8BlockwiseQTensor).
/// The source is an fp32 row-major matrix of Shape [rows, cols].
struct QuantizedTensor {
  ScalingMode mode = ScalingMode::kPerTensor;
  Format format = Format::kE4M3;
  int rows = 0, cols = 0;  ///< Shape of the fp32 source.
  Usage usage = Usage::kRowwise;  ///< Which copies below are present.

  /// kPerTensor: codes of the row-wise copy, Shape [rows, cols] row-major (empty without kRowwise).
  std::vector<std::uint8_t> rowwise_data;
  /// kPerTensor: codes of the column-wise copy, Shape [cols, rows] row-major: the transpose of the
  /// row-wise codes (TE's FP8 transpose, cast_transpose, since Hopper/Ada FP8 GEMMs take only TN).
  std::vector<std::uint8_t> columnwise_data;
  /// kPerTensor: the scale the cast multiplied by (fp32, unitless). NaN for block modes.
  float scale = std::numeric_limits<float>::quiet_NaN();
  /// kPerTensor: RN(1/scale), the dequantization multiplier the GEMM applies. NaN for block modes.
  float scale_inv = std::numeric_limits<float>::quiet_NaN();

  /// kBlock: row-wise copy, view [rows, cols] with K = cols, one scale_inv per block of K.
  emu::BlockQuantized rowwise_blocks;
  /// kBlock: column-wise copy, view [cols, rows] with K = rows, quantized independently from the
  /// fp32 source (MXFP8, 1x128) or the transposed tiles (128x128 weights).
  emu::BlockQuantized columnwise_blocks;

  bool has(Usage u) const { return has_usage(usage, u); }
};

/// The casts of one recipe for one direction (forward or backward), with whatever state the
/// recipe keeps (delayed scaling: scale and amax_history of every slot of that direction).
/// Rounding: round-to-nearest-even; overflow: CUDA __NV_SATFINITE (clip to the format's max finite
/// value, NaN stays NaN), as TE's cast kernels. Not thread-safe; deterministic.
class Quantizer {
 public:
  Quantizer(Direction direction, Format format) : direction_(direction), format_(format) {}
  virtual ~Quantizer() = default;
  Quantizer(const Quantizer&) = default;
  Quantizer& operator=(const Quantizer&) = default;

  /// Independent copy, state included.
  virtual std::unique_ptr<Quantizer> clone() const = 0;
  /// The recipe's name, as recipe_name() ("delayed", "current", "mxfp8", "block").
  virtual const char* recipe_name() const = 0;
  /// How the operands this quantizer makes carry their scales.
  virtual ScalingMode scaling_mode() const = 0;

  /// Cast an fp32 tensor.
  /// \param kernels Where the cast runs (emulated or cuda; same bits).
  /// \param x       Shape: [rows, cols], row-major fp32.
  /// \param role    The tensor's role; must belong to this quantizer's direction. Delayed scaling
  ///                records the amax of x in the role's slot (history row 0, max-accumulated);
  ///                128-block scaling casts kWeight in 128x128 tiles, every other role in 1x128.
  /// \param usage   Copies to produce (see Usage).
  /// \param stats   If non-null, accumulates the counts of one cast: the row-wise one when
  ///                kRowwise is asked for (a column-wise cast of a block mode is not counted; a
  ///                per-tensor column-wise copy is a transpose, not a cast), else the column-wise one.
  /// \throws fp8emu::Error for non-positive sizes or a role of the other direction.
  virtual QuantizedTensor quantize(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                   TensorRole role, Usage usage, emu::QuantizeStats* stats) = 0;

  /// TE's scale update point of this direction (after its pass): the delayed-scaling amax/scale
  /// update of every slot (see DelayedScalingState::update). No-op for recipes without amax_history.
  virtual void update_scales() {}
  /// The scale / amax_history state of this direction, or null when the recipe keeps none
  /// (current, MXFP8, 128-block scaling compute their scales at cast time).
  virtual DelayedScalingState* amax_history_state() { return nullptr; }
  const DelayedScalingState* amax_history_state() const {
    return const_cast<Quantizer*>(this)->amax_history_state();
  }

  /// True when the GEMMs of these operands take any emu::GemmAccumulation model (per-tensor scales);
  /// false when they accumulate in fp32 only (the block-scaled GEMM).
  bool supports_accumulation_models() const { return scaling_mode() == ScalingMode::kPerTensor; }
  /// True when this cast reads a LayerNorm/RMSNorm output rounded to bf16: TE cannot fuse the cast
  /// into the norm kernel when the scale needs the tensor's own amax first (current scaling), so
  /// the norm writes bf16 and the quantizer reads it. False when the norm's fp32 result is cast
  /// directly (delayed scaling: the norm kernel casts with the stored scale; MXFP8 and 128-block
  /// casts are modelled the same way).
  virtual bool reads_bf16_norm_output() const { return false; }

  Direction direction() const { return direction_; }
  /// Element format of every cast: the recipe's forward or backward format.
  Format format() const { return format_; }

 protected:
  /// \throws fp8emu::Error unless rows, cols >= 1 and role belongs to direction().
  void check_cast(int rows, int cols, TensorRole role) const;

 private:
  Direction direction_;
  Format format_;
};

/// Element format of a recipe's casts in a direction: forward_format / backward_format of its
/// fp8_format (HYBRID: E4M3 forward, E5M2 backward), after validating the recipe.
/// \throws fp8emu::Error for invalid recipe parameters.
template <class RecipeRecord>
Format cast_format(const RecipeRecord& recipe, Direction direction) {
  recipe.validate();
  return direction == Direction::kForward ? forward_format(recipe.fp8_format) : backward_format(recipe.fp8_format);
}

/// A block-mode operand with its shape and usage set and no copies yet (block quantizers fill
/// rowwise_blocks / columnwise_blocks).
QuantizedTensor block_operand(Format format, int rows, int cols, Usage usage);

/// The quantizer of a recipe for one direction: the record's own make_quantizer (each recipe
/// defines it in src/scaling/<name>_quantizer.cpp).
/// \throws fp8emu::Error for invalid recipe parameters (Recipe validate()).
std::unique_ptr<Quantizer> make_quantizer(const Recipe& recipe, Direction direction);

/// The per-tensor cast delayed and current scaling share (TE cast / cast_transpose): codes =
/// Q(RN(x * scale)) with __NV_SATFINITE, scale_inv = RN(1/scale); with kColumnwise also the
/// transpose of the codes. \param amax If non-null, max-accumulated with |x| (NaN ignored).
/// \throws fp8emu::Error for non-positive sizes.
QuantizedTensor quantize_per_tensor(const backend::Kernels& kernels, const float* x, int rows, int cols,
                                    Usage usage, float scale, Format format, float* amax,
                                    emu::QuantizeStats* stats);

/// FP8 GEMM of two quantized operands in the TN layout, D[M, N] = A[M, K] . B[N, K]^T, fp32 out
/// (TE general_gemm, cublaslt_gemm.cu, which dispatches on the operands' scaling mode).
/// A is `a` read as `a_usage` (kRowwise: [a.rows, a.cols]; kColumnwise: [a.cols, a.rows]); B likewise.
///  - kPerTensor: emu::gemm_fp8_tn with `acc`: D = RN(acc_sum * RN(a.scale_inv * b.scale_inv)).
///  - kBlock: emu::gemm_fp8_block_tn (per-block scale_inv, fp32 accumulation); `acc` must be fp32.
/// Used as: fprop y = x W^T (x row, W row), dgrad dx = dy W (dy row, W column), wgrad dW = dy^T x
/// (dy column, x column).
/// \param d Shape: [M, N] row-major fp32, overwritten.
/// \throws fp8emu::Error when the operands' modes differ, a copy is missing, K differs, or a block
///         GEMM is given a non-fp32 accumulation model.
void gemm_tn(const backend::Kernels& kernels, const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d);

}  // namespace fp8emu::scaling
