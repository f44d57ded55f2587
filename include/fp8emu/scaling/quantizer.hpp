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
///                             1x128 blocks and 128x128 weight tiles),
///   - nvfp4_quantizer.hpp    (TE cast/nvfp4/, hadamard_transform/: E2M1 in 1x16 blocks under
///                             E4M3 scales and a tensor scale, 16x16 weight tiles, RHT, SR).
///
/// Adding a recipe: its configuration record in recipe.hpp (kName, kScalingMode, validate,
/// make_quantizer, visit_parameters, and its place in the Recipe variant), one quantizer file pair
/// here and in src/scaling/ (which defines the record's make_quantizer), and its source line in
/// CMakeLists.txt. nn::Linear, RecipeSet, `--recipe` and the experiments need no edit.
///
/// Determinism: every quantizer and gemm_tn give the same bits for any OpenMP thread count and on
/// every backend::Device (cpu, element or cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fp8emu/backend/device.hpp"
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

/// Per-tensor scaling's storage (TE Float8Tensor): codes and one fp32 scale for the whole tensor.
struct PerTensorStorage {
  /// Codes of the row-wise copy, Shape [rows, cols] row-major (empty without kRowwise).
  std::vector<std::uint8_t> rowwise_data;
  /// Codes of the column-wise copy, Shape [cols, rows] row-major: the transpose of the row-wise
  /// codes (TE's FP8 transpose, cast_transpose, since Hopper/Ada FP8 GEMMs take only TN).
  std::vector<std::uint8_t> columnwise_data;
  /// The scale the cast multiplied by (fp32, unitless).
  float scale = std::numeric_limits<float>::quiet_NaN();
  /// RN(1/scale), the dequantization multiplier the GEMM applies.
  float scale_inv = std::numeric_limits<float>::quiet_NaN();
};

/// Block scaling's storage (TE MXFP8Tensor, Float8BlockwiseQTensor): codes and one scale per block
/// of K, for each copy.
struct BlockStorage {
  /// Row-wise copy, view [rows, cols] with K = cols, one scale_inv per block of K.
  emu::BlockQuantized rowwise;
  /// Column-wise copy, view [cols, rows] with K = rows, quantized independently from the fp32
  /// source (MXFP8, 1x128) or the transposed tiles (128x128 weights).
  emu::BlockQuantized columnwise;
};

/// One FP8 operand as the GEMM reads it: a variant of one storage per scaling mode, as TE keeps one
/// tensor class per mode (Float8Tensor, MXFP8Tensor / Float8BlockwiseQTensor). The source is an
/// fp32 row-major matrix of Shape [rows, cols].
struct QuantizedTensor {
  Format format = Format::kE4M3;
  int rows = 0, cols = 0;  ///< Shape of the fp32 source.
  Usage usage = Usage::kRowwise;  ///< Which copies the storage holds.
  std::variant<PerTensorStorage, BlockStorage> storage;

  /// The scaling mode of the storage held.
  ScalingMode mode() const {
    return std::holds_alternative<PerTensorStorage>(storage) ? ScalingMode::kPerTensor : ScalingMode::kBlock;
  }
  /// The per-tensor storage. 	hrows fp8emu::Error for a block-scaled tensor.
  const PerTensorStorage& per_tensor() const;
  PerTensorStorage& per_tensor();
  /// The block storage. 	hrows fp8emu::Error for a per-tensor tensor.
  const BlockStorage& blocks() const;
  BlockStorage& blocks();
  bool has(Usage u) const { return has_usage(usage, u); }
};

/// One FP8 operand in a backend::Device's memory: the device-resident QuantizedTensor, as TE keeps
/// its Float8Tensor / MXFP8Tensor / Float8BlockwiseQTensor on the GPU. The buffers belong to the
/// caller (allocate them with the sizes of device_operand(); any memory of that device); the
/// quantizer's device cast (Quantizer::quantize_device) writes them, and gemm_tn(Device, ...) reads
/// them. Contents are those of the QuantizedTensor the host cast gives, bit for bit:
///   - kPerTensor: rowwise_data [rows, cols] and/or columnwise_data [cols, rows] codes; *scale (one
///     fp32 in device memory) the cast's scale; host_scale / host_scale_inv its host copies
///     (host_scale_inv = RN(1/scale), emu::scale_inv_of).
///   - kBlock: the row-wise view (codes [rows, cols], rowwise_scale_inv [rows, ceil(cols / block)])
///     and/or the column-wise view (codes [cols, rows], columnwise_scale_inv [cols, ceil(rows / block)]),
///     as emu::BlockQuantized lays them out (MXFP8's scale_inv are the E8M0 scales' values).
struct DeviceOperand {
  ScalingMode mode = ScalingMode::kPerTensor;
  Format format = Format::kE4M3;
  int rows = 0, cols = 0;         ///< Shape of the fp32 source.
  Usage usage = Usage::kRowwise;  ///< Which copies are present.
  int block = 0;                  ///< kBlock: elements of K per scale (MXFP8 32, 128-block 128); 0 otherwise.
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* columnwise_data = nullptr;
  float* scale = nullptr;  ///< kPerTensor: one fp32.
  float* rowwise_scale_inv = nullptr;
  float* columnwise_scale_inv = nullptr;
  /// kBlock with E4M3 block scales under a tensor scale (NVFP4): each copy carries the tensor amax
  /// its blocks sit under (TE's amax_rowwise / amax_columnwise; one float each).
  bool tensor_amax = false;
  float* rowwise_amax = nullptr;
  float* columnwise_amax = nullptr;
  float host_scale = std::numeric_limits<float>::quiet_NaN();      ///< kPerTensor, set by the cast.
  float host_scale_inv = std::numeric_limits<float>::quiet_NaN();  ///< kPerTensor, set by the cast.

  bool has(Usage u) const { return has_usage(usage, u); }
  /// Elements of each buffer: codes of one copy (rows * cols), and the scale_inv of the row-wise
  /// and column-wise block views (0 for kPerTensor or a copy not present).
  std::size_t codes() const { return std::size_t(rows) * std::size_t(cols); }
  std::size_t rowwise_scales() const;
  std::size_t columnwise_scales() const;
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

  /// Cast an fp32 tensor in host memory into a host operand: the recipe's device cast
  /// (quantize_device) run on `device`. A device of host memory (cpu_device(), element_device())
  /// writes straight into the returned operand; another (cuda_device()) gets x uploaded and the
  /// operand downloaded. Same bits on every device.
  /// \param device  Where the cast runs.
  /// \param x       Shape: [rows, cols], row-major fp32, host memory.
  /// \param role    The tensor's role; must belong to this quantizer's direction. Delayed scaling
  ///                records the amax of x in the role's slot (history row 0, max-accumulated);
  ///                128-block scaling casts kWeight in 128x128 tiles, every other role in 1x128.
  /// \param usage   Copies to produce (see Usage; at least one).
  /// \param stats   If non-null, accumulates the counts of one cast: the row-wise one when
  ///                kRowwise is asked for (a column-wise cast of a block mode is not counted; a
  ///                per-tensor column-wise copy is a transpose, not a cast), else the column-wise one.
  /// \throws fp8emu::Error for non-positive sizes, a role of the other direction or no copy asked for.
  QuantizedTensor quantize(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                           Usage usage, emu::QuantizeStats* stats);

  /// The recipe's cast (each recipe writes it once, here), enqueued on a backend::Device without
  /// waiting for it: reads x, writes `out` in that device's memory (per-tensor modes: *out.scale
  /// receives the scale the cast multiplied by), max-accumulates the recipe's amax into its state
  /// and adds the cast's counts to *counters (device memory, nullable; the row-wise cast's when
  /// kRowwise is made, else the column-wise one's). The state (delayed scaling's scales and
  /// amax_history) is read and written where it lives (see to_device): a cast on that device, or on
  /// a device of host memory while the state is on the host, stays asynchronous; a cast on a device
  /// of its own memory while the state is on the host uploads the scale and waits for the amax.
  /// \param x    Shape: [rows, cols] row-major fp32, device memory.
  /// \param out  Shape, mode, format, usage and block as device_operand(*this, rows, cols, role,
  ///             usage) gives them, with the buffers of its usage set.
  /// \throws fp8emu::Error as quantize(), when `out` does not match the cast (a null buffer, a
  ///         different shape, mode, format or block), or when the state is on another device.
  virtual void cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                    DeviceOperand& out, backend::CastCounters* counters) = 0;
  /// cast(), then waits for it: *stats adds its counts and out.host_scale / host_scale_inv are set
  /// (per-tensor modes), so `out` is complete for any later operation of that device.
  /// \throws fp8emu::Error as cast().
  void quantize_device(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                       DeviceOperand& out, emu::QuantizeStats* stats);

  /// Moves the state (delayed scaling's scales and amax_history) into `device`'s memory: casts and
  /// update_scales() on that device then run there without waiting, as TE keeps its scaling tensors
  /// on the GPU. A device of host memory keeps it where it is. No-op for recipes without state.
  /// \throws fp8emu::Error with device_unsupported()'s phrase.
  virtual void to_device(const backend::Device& device) { (void)device; }
  /// Copies the state back to the host and makes the host its home again (waits). No-op when it is
  /// there already. amax_history_state() is current only while the state is on the host.
  virtual void to_host() {}
  /// Why this quantizer's state cannot live on a device (a phrase), or empty: delayed scaling with a
  /// callable or the unfused update, or an amax-reduction hook, whose code runs on the host.
  virtual std::string device_unsupported() const { return {}; }

  /// The state a checkpoint keeps, as TE's get_extra_state keeps a recipe state's scale and
  /// amax_history: delayed scaling's scales (Shape [num_slots]) followed by its amax_history (Shape
  /// [history_len, num_slots], row-major), fp32, current wherever the state lives (downloaded from
  /// a device, waiting for its casts); empty for recipes that compute their scales at cast time.
  virtual std::vector<float> save_state() const { return {}; }
  /// Restores save_state()'s values where the state lives (uploaded to its device).
  /// \throws fp8emu::Error naming both sizes when `state` is not a state of this quantizer's recipe,
  ///         length and direction; nothing changes then.
  virtual void load_state(const std::vector<float>& state);

  /// Gives this quantizer its own stochastic-rounding stream: the recipe's seed combined with
  /// `stream` (nn::Linear passes one per layer). No-op for recipes that round to nearest only.
  virtual void seed_rounding(std::uint64_t stream) { (void)stream; }

  /// The block length of a role's cast: 0 for per-tensor recipes, 32 for MXFP8, 128 for 128-block,
  /// 16 for NVFP4.
  virtual int block_length(TensorRole role) const {
    (void)role;
    return 0;
  }
  /// Whether a role's block scales sit under a tensor amax (NVFP4's two-level scales): its device
  /// operands then carry one amax per copy (DeviceOperand::tensor_amax).
  virtual bool has_tensor_amax(TensorRole role) const {
    (void)role;
    return false;
  }

  /// TE's scale update point of this direction (after its pass): the delayed-scaling amax/scale
  /// update of every slot (see DelayedScalingState::update). No-op for recipes without amax_history.
  virtual void update_scales() {}
  /// The scale / amax_history state of this direction, or null when the recipe keeps none
  /// (current, MXFP8, 128-block scaling compute their scales at cast time).
  virtual DelayedScalingState* amax_history_state() { return nullptr; }
  const DelayedScalingState* amax_history_state() const {
    return const_cast<Quantizer*>(this)->amax_history_state();
  }

  /// True when the GEMMs of these operands take the whole emu::GemmAccumulation (per-tensor scales);
  /// false for block-scaled operands, whose GEMM takes a model for each scale block's partial only
  /// (emu::check_block_accumulation).
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
  /// check_cast, and \throws fp8emu::Error unless `out` is device_operand(*this, rows, cols, role,
  /// out.usage) with the buffers of its usage set.
  void check_device_cast(const DeviceOperand& out, int rows, int cols, TensorRole role) const;

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
  bool fnuz = false;  // the per-tensor records' ROCm switch
  if constexpr (std::is_same_v<RecipeRecord, DelayedScaling> || std::is_same_v<RecipeRecord, CurrentScaling>)
    fnuz = recipe.fnuz;
  return direction == Direction::kForward ? forward_format(recipe.fp8_format, fnuz)
                                          : backward_format(recipe.fp8_format, fnuz);
}

/// The quantizer of a recipe for one direction: the record's own make_quantizer (each recipe
/// defines it in src/scaling/<name>_quantizer.cpp).
/// \throws fp8emu::Error for invalid recipe parameters (Recipe validate()).
std::unique_ptr<Quantizer> make_quantizer(const Recipe& recipe, Direction direction);

/// A DeviceOperand describing the cast of [rows, cols] by `q` for `role` and `usage`, with no
/// buffers yet: the caller allocates codes() bytes per copy, rowwise_scales() / columnwise_scales()
/// floats for a block mode, one float for `scale` of a per-tensor mode, and sets the pointers.
/// \throws fp8emu::Error for non-positive sizes.
DeviceOperand device_operand(const Quantizer& q, int rows, int cols, TensorRole role, Usage usage);

/// After a per-tensor cast into `op` on `device`: op.host_scale from *op.scale (downloaded: waits for
/// the cast) and op.host_scale_inv = RN(1 / scale), as quantize_device sets them. No-op for block
/// operands.
void download_host_scale(const backend::Device& device, DeviceOperand& op);

/// A host QuantizedTensor with the buffers of the cast `desc` describes (device_operand(...)),
/// zero-filled: per-tensor codes of each copy, or the block views with their scale_inv.
QuantizedTensor host_quantized_tensor(const DeviceOperand& desc);
/// `t`'s buffers seen as a DeviceOperand of a device of host memory (cpu_device(), element_device()):
/// a cast there writes them in place (per-tensor: `scale` points at t.scale), a GEMM reads them.
/// The pointers alias t's vectors: valid while t lives and is not resized.
DeviceOperand host_view(const QuantizedTensor& t);
/// Completes `t` once a cast into host_view(t) has run: a per-tensor scale_inv = RN(1 / scale)
/// (emu::scale_inv_of), and the E8M0 codes of MXFP8 block views (exactly their power-of-two scales).
void finish_host_cast(QuantizedTensor& t);

/// A DeviceOperand that owns its buffers (backend::DeviceTensor, zero-filled, freed on destruction;
/// move-only): the device-resident QuantizedTensor for C++ callers.
///
///     scaling::DeviceQuantizedTensor xq(dev, scaling::device_operand(q, rows, cols, role, usage));
///     q.quantize_device(dev, x, rows, cols, role, xq.operand(), &stats);
class DeviceQuantizedTensor {
 public:
  DeviceQuantizedTensor() = default;
  /// Allocates the buffers `description` (from device_operand) needs on `device`.
  /// \throws fp8emu::Error when the device cannot allocate them.
  DeviceQuantizedTensor(const backend::Device& device, const DeviceOperand& description);
  DeviceOperand& operand() { return op_; }
  const DeviceOperand& operand() const { return op_; }
  /// The operand copied to the host, as the host cast returns it (waits for the device): per-tensor
  /// codes, scale and scale_inv; block views with their scale_inv, and MXFP8's E8M0 codes (exactly
  /// the codes of those power-of-two scales).
  QuantizedTensor download() const;

 private:
  const backend::Device* device_ = nullptr;
  DeviceOperand op_;
  backend::DeviceTensor<std::uint8_t> rowwise_, columnwise_;
  backend::DeviceTensor<float> scale_, rowwise_scale_inv_, columnwise_scale_inv_;
  backend::DeviceTensor<float> amax_;  ///< tensor_amax: [row-wise, column-wise]
};

/// The per-tensor cast, enqueued: codes of RN(x * *out.scale) (the scale already in out.scale,
/// device memory; __NV_SATFINITE, RNE), the copies out.usage asks for; *amax (device memory,
/// nullable) max-accumulated with max |x| (NaN ignored); *counters (nullable) adds the counts.
/// \throws fp8emu::Error for non-positive sizes, a block-mode or unbuffered `out`.
void cast_per_tensor(const backend::Device& device, const float* x, int rows, int cols, DeviceOperand& out,
                     float* amax, backend::CastCounters* counters);

/// A block-scaled cast, enqueued (backend::Device::block_cast), into the views out.usage asks for;
/// *counters (nullable) adds its counts (the row-wise cast's when made, else the column-wise one's).
/// The caller checks `out` (Quantizer::check_device_cast).
void cast_blocks(const backend::Device& device, const backend::BlockCast& cast, const float* x, int rows, int cols,
                 DeviceOperand& out, backend::CastCounters* counters);

/// The checks of gemm_tn(device, a, a_usage, b, b_usage, acc, d) without the GEMM: the copies read
/// exist, the scaling modes, K and block lengths agree, the formats and the accumulation are ones
/// the GEMM takes (emu::check_gemm_tn; block operands: emu::check_block_accumulation). What a step
/// calls before its casts, so a GEMM that cannot run changes no quantizer state.
/// \throws fp8emu::Error naming the problem.
void check_gemm_tn(const DeviceOperand& a, Usage a_usage, const DeviceOperand& b, Usage b_usage,
                   const emu::GemmAccumulation& acc);

/// gemm_tn of two device operands on their device: the same D bit for bit, D [M, N] row-major fp32
/// in that device's memory, enqueued in the device's order (download D, or read it with later
/// operations). Per-tensor operands take any accumulation model (the GEMM reads each scale_inv as
/// RN(1 / *scale), as the host's scale_inv); block operands take a model for each scale block's
/// partial, without a promotion interval or split-K (emu::check_block_accumulation).
/// \throws fp8emu::Error as gemm_tn.
void gemm_tn(const backend::Device& device, const DeviceOperand& a, Usage a_usage, const DeviceOperand& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d);

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
/// \param device Where the GEMM runs: a device of host memory reads the operands in place; another
///        gets them uploaded and D downloaded. Same bits on every device.
void gemm_tn(const backend::Device& device, const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d);

}  // namespace fp8emu::scaling
