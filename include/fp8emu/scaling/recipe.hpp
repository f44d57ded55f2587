/// \file recipe.hpp
/// \brief Transformer Engine's FP8 recipes as plain configuration records, with TE's defaults and
/// TE's parameter checks. Mirrors `transformer_engine/common/recipe/__init__.py` (TE d0067d0);
/// see docs/transformer-engine.md §Delayed scaling, §Current scaling, §MXFP8, §Block scaling.
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::scaling {

class Quantizer;  // quantizer.hpp
/// Which pass a quantizer serves (defined in quantizer.hpp).
enum class Direction : std::uint8_t;

/// TE `Format`: which FP8 element format the forward and backward tensors use.
enum class RecipeFormat : std::uint8_t {
  kHybrid,  ///< E4M3 forward (input, weight, output), E5M2 backward (grad_output, grad_input).
  kE4M3,    ///< E4M3 everywhere.
  kE5M2,    ///< E5M2 everywhere: TE rejects it in every recipe ("Pure E5M2 training is not supported").
};

/// Parse "hybrid" / "e4m3" / "e5m2". \throws fp8emu::Error naming the accepted values.
RecipeFormat parse_recipe_format(const std::string& s);
const char* to_string(RecipeFormat f);
/// Element format of forward tensors: E4M3 for HYBRID and E4M3 (E4M3FNUZ with `fnuz`, ROCm's TE on
/// MI300). \throws fp8emu::Error for E5M2.
Format forward_format(RecipeFormat f, bool fnuz = false);
/// Element format of backward tensors: E5M2 for HYBRID, E4M3 for E4M3 (their FNUZ twins with
/// `fnuz`). \throws for E5M2.
Format backward_format(RecipeFormat f, bool fnuz = false);

/// How a recipe's quantized operands carry their scales (TE NVTEScalingMode).
enum class ScalingMode : std::uint8_t {
  /// One fp32 scale_inv per tensor (TE NVTE_DELAYED_TENSOR_SCALING, used by delayed and current
  /// scaling alike); the GEMM takes any accumulation model (emu::gemm_fp8_tn).
  kPerTensor,
  /// One scale_inv per block of K elements (TE NVTE_MXFP8_1D_SCALING, NVTE_BLOCK_SCALING_1D/2D);
  /// the block-scaled GEMM sums each block's partial under a model, fp32 by default
  /// (emu::gemm_fp8_block_tn).
  kBlock,
};

/// TE `amax_compute_algo`.
enum class AmaxComputeAlgo : std::uint8_t {
  kMax,         ///< "max": the largest amax in the window.
  kMostRecent,  ///< "most_recent": this step's amax.
};

/// "max" or "most_recent" (TE's strings).
const char* to_string(AmaxComputeAlgo a);
/// TE's amax_compute_algo string. \throws fp8emu::Error "unknown <what> '<s>' (accepted: max,
///         most_recent)"; `what` names the flag or argument.
AmaxComputeAlgo parse_amax_compute_algo(const std::string& s, const char* what);

struct DelayedScaling;

/// A user `amax_compute_algo` callable, as TE calls it (pytorch/quantization.py
/// _compute_amax_and_update_history): once per update with the whole amax history of the direction
/// as TE stores it, `history` [history_len, slots] row-major (row 0 this step's amaxes, rows
/// 1..L-1 the earlier steps, oldest first; before the roll); writes the amax to scale by of every
/// slot into `amax` [slots]. Using one selects TE's unfused update path. It may throw; nothing of
/// the state has changed then.
using AmaxComputeFn = std::function<void(const float* history, int history_len, int slots, float* amax)>;
/// A user `scaling_factor_compute_algo`, as TE calls it (_compute_scaling_factor): once per update
/// with the amaxes and the current scales of every slot ([slots] each), the format's max finite
/// value and the recipe; writes the new scales into `scale_out` [slots]. Using one selects TE's
/// unfused update path. It may throw; nothing of the state has changed then.
using ScalingFactorFn = std::function<void(const float* amax, const float* scale, int slots, float fp8_max,
                                           const DelayedScaling& recipe, float* scale_out)>;
/// Data-parallel amax reduction hook (TE all-reduce MAX over the amax reduction group): called on
/// the buffer of this step's amaxes (one per tensor slot) before the update; must replace each
/// value by its maximum over the ranks. Absent: single process.
using AmaxReduceFn = std::function<void(float* amaxes, int count)>;

/// Largest accepted amax_history_len (TE's default is 1024).
inline constexpr int kMaxAmaxHistoryLen = 1 << 20;

/// TE `DelayedScaling` (defaults as TE). See delayed_scaling.hpp for the update.
struct DelayedScaling {
  static constexpr const char* kName = "delayed";
  static constexpr ScalingMode kScalingMode = ScalingMode::kPerTensor;
  float margin = 0.0f;  ///< scale = (fp8_max * 2^-margin) / amax; any finite value (powf, as TE's C API).
  RecipeFormat fp8_format = RecipeFormat::kHybrid;
  int amax_history_len = 1024;  ///< L >= 1.
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
  AmaxComputeFn amax_compute_fn;          ///< If set, replaces amax_compute_algo (unfused path).
  ScalingFactorFn scaling_factor_compute_fn;  ///< If set, replaces the scale formula (unfused path).
  /// TE's fused kernel (default) or the Python path (NVTE_UNFUSED_FP8_UPDATE=1), which always rolls
  /// and computes (fp8_max / amax) / 2^margin. Callables force the unfused path, as in TE.
  bool fused_update = true;
  AmaxReduceFn reduce_amax;  ///< Optional amax all-reduce (MAX) hook.
  /// The FP8 types of ROCm's TE on MI300 (gfx942): E4M3FNUZ (max 240) forward, E5M2FNUZ (max
  /// 57344) backward under HYBRID, cast as ROCm casts (core::cast_code); TE's Format is the same,
  /// the GPU decides. CPU backends only.
  bool fnuz = false;

  /// \throws fp8emu::Error for a history length outside [1, kMaxAmaxHistoryLen], a non-finite
  ///         margin or the E5M2 format.
  void validate() const;
  bool uses_fused_update() const { return fused_update && !amax_compute_fn && !scaling_factor_compute_fn; }
  /// Its quantizer (delayed_quantizer.hpp). \throws fp8emu::Error as validate().
  std::unique_ptr<Quantizer> make_quantizer(Direction direction) const;
  /// Calls f(name, value) for each plain parameter (what summary.json records): strings for enums,
  /// int, float or bool otherwise. Callables and hooks are not parameters.
  template <class F>
  void visit_parameters(F&& f) const {
    f("fp8_format", to_string(fp8_format));
    f("amax_history_len", amax_history_len);
    f("amax_compute_algo", to_string(amax_compute_algo));
    f("margin", margin);
    f("fused_update", fused_update);
    f("fnuz", fnuz);
  }
  /// Calls f(name, field...) for each field of `r` (a const or mutable record) by the name of TE's
  /// Python recipe class (fp8emu.DelayedScaling): what the Python module's record binding reads and
  /// writes, field by field, with no per-recipe code of its own. TE's `amax_compute_algo` (a name or
  /// a callable) is two C++ fields, passed together; the callables are TE's.
  template <class Self, class F>
  static void visit_fields(Self& r, F&& f) {
    f("margin", r.margin);
    f("fp8_format", r.fp8_format);
    f("amax_history_len", r.amax_history_len);
    f("amax_compute_algo", r.amax_compute_algo, r.amax_compute_fn);  // TE's one field: a name or a callable
    f("scaling_factor_compute_algo", r.scaling_factor_compute_fn);
    f("fused_update", r.fused_update);
    f("fnuz", r.fnuz);
  }
};

/// TE `Float8CurrentScaling`: each tensor is scaled by its own amax at cast time.
struct CurrentScaling {
  static constexpr const char* kName = "current";
  static constexpr ScalingMode kScalingMode = ScalingMode::kPerTensor;
  RecipeFormat fp8_format = RecipeFormat::kHybrid;
  bool use_power_2_scales = false;  ///< TE env NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES=1.
  float amax_epsilon = 0.0f;        ///< amax is raised to at least this (>= 0).
  bool fnuz = false;                ///< As DelayedScaling::fnuz (ROCm's TE on MI300).
  /// \throws fp8emu::Error for a negative or non-finite epsilon or the E5M2 format.
  void validate() const;
  /// Its quantizer (current_quantizer.hpp). \throws fp8emu::Error as validate().
  std::unique_ptr<Quantizer> make_quantizer(Direction direction) const;
  /// As DelayedScaling::visit_parameters.
  template <class F>
  void visit_parameters(F&& f) const {
    f("fp8_format", to_string(fp8_format));
    f("use_power_2_scales", use_power_2_scales);
    f("amax_epsilon", amax_epsilon);
    f("fnuz", fnuz);
  }
  /// As DelayedScaling::visit_fields (fp8emu.Float8CurrentScaling).
  template <class Self, class F>
  static void visit_fields(Self& r, F&& f) {
    f("fp8_format", r.fp8_format);
    f("use_power_2_scales", r.use_power_2_scales);
    f("amax_epsilon", r.amax_epsilon);
    f("fnuz", r.fnuz);
  }
};

/// How the E8M0 block scale is chosen from the block amax (defined with the element layer).
using ::fp8emu::E8M0Rule;
/// "te" (TE's rounding up) or "ocp" (the OCP MX floor). \throws fp8emu::Error "unknown <what> '<s>'
///         (accepted: te, ocp, even)".
E8M0Rule parse_e8m0_rule(const std::string& s, const char* what);
/// "te", "ocp" or "even".
const char* to_string(E8M0Rule r);

/// TE `MXFP8BlockScaling`: 32-element blocks along the GEMM's K dim with an E8M0 scale each.
struct MXFP8BlockScaling {
  static constexpr const char* kName = "mxfp8";
  static constexpr ScalingMode kScalingMode = ScalingMode::kBlock;
  RecipeFormat fp8_format = RecipeFormat::kE4M3;
  E8M0Rule rule = E8M0Rule::kTransformerEngine;
  /// \throws fp8emu::Error for the E5M2 format.
  void validate() const;
  /// Its quantizer (mxfp8_quantizer.hpp). \throws fp8emu::Error as validate().
  std::unique_ptr<Quantizer> make_quantizer(Direction direction) const;
  /// As DelayedScaling::visit_parameters; the E8M0 rule as "te", "ocp" or "even".
  template <class F>
  void visit_parameters(F&& f) const {
    f("fp8_format", to_string(fp8_format));
    f("e8m0_rule", to_string(rule));
  }
  /// As DelayedScaling::visit_fields (fp8emu.MXFP8BlockScaling, whose rule is `scale_rule`).
  template <class Self, class F>
  static void visit_fields(Self& r, F&& f) {
    f("fp8_format", r.fp8_format);
    f("scale_rule", r.rule);
  }
};

/// TE `Float8BlockScaling` (DeepSeek-V3 style): 1x128 blocks for activations and gradients, 128x128
/// tiles for weights, fp32 scales (power of two unless use_f32_scales).
struct Float8BlockScaling {
  static constexpr const char* kName = "block";
  static constexpr ScalingMode kScalingMode = ScalingMode::kBlock;
  RecipeFormat fp8_format = RecipeFormat::kE4M3;
  bool use_f32_scales = false;  ///< TE env NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1; default pow2 scales.
  float amax_epsilon = 0.0f;
  /// The GEMMs as TE runs this recipe on Blackwell (sm_100 and newer, where cuBLASLt has no 128-block
  /// mode; pytorch/csrc/extensions/gemm.cpp): the same FP8 codes, each power-of-two scale_inv turned
  /// into the E8M0 code of its exponent field and broadcast to four 1 x 32 blocks, and the GEMM an
  /// MXFP8 one (every 32-block's partial promoted). Off: Hopper's 128-block GEMMs. Needs
  /// power-of-two scales, as TE asserts on Blackwell.
  bool mxfp8_gemms = false;
  /// \throws fp8emu::Error for a negative or non-finite epsilon, the E5M2 format, or mxfp8_gemms
  ///         with use_f32_scales.
  void validate() const;
  /// Its quantizer (block_quantizer.hpp). \throws fp8emu::Error as validate().
  std::unique_ptr<Quantizer> make_quantizer(Direction direction) const;
  /// As DelayedScaling::visit_parameters.
  template <class F>
  void visit_parameters(F&& f) const {
    f("fp8_format", to_string(fp8_format));
    f("use_f32_scales", use_f32_scales);
    f("amax_epsilon", amax_epsilon);
    f("mxfp8_gemms", mxfp8_gemms);
  }
  /// As DelayedScaling::visit_fields (fp8emu.Float8BlockScaling).
  template <class Self, class F>
  static void visit_fields(Self& r, F&& f) {
    f("fp8_format", r.fp8_format);
    f("use_f32_scales", r.use_f32_scales);
    f("amax_epsilon", r.amax_epsilon);
    f("mxfp8_gemms", r.mxfp8_gemms);
  }
};

/// TE `NVFP4BlockScaling` (TE 2.x, Blackwell): E2M1 elements in 1 x 16 blocks along the GEMM's K
/// with E4M3 block scales under an fp32 tensor scale (docs/nvfp4.md), per tensor as TE's QParams:
///   - input: 1 x 16; its column-wise copy (the wgrad operand) after the random Hadamard transform;
///   - weight: 16 x 16 tiles (both copies share the tile scales); no transform;
///   - grad_output: 1 x 16, stochastic rounding; its column-wise copy after the transform.
/// The switches turn each off for every tensor, as TE's fields (and env vars NVTE_NVFP4_DISABLE_*).
struct NVFP4BlockScaling {
  static constexpr const char* kName = "nvfp4";
  static constexpr ScalingMode kScalingMode = ScalingMode::kBlock;
  /// The format of the block scales, E4M3 (TE asserts fp8_format == E4M3); the elements are E2M1
  /// (TE's fp4_format). The experiments' --format does not apply to this recipe.
  RecipeFormat fp8_format = RecipeFormat::kE4M3;
  static constexpr bool kTakesFormatFlag = false;
  bool disable_rht = false;                  ///< TE NVTE_NVFP4_DISABLE_RHT
  bool disable_stochastic_rounding = false;  ///< TE NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING
  bool disable_2d_quantization = false;      ///< TE NVTE_NVFP4_DISABLE_2D_QUANTIZATION: weights in 1 x 16
  /// The Philox seed of stochastic rounding (TE: PyTorch's CUDA generator's seed); each quantizer
  /// adds its own stream (Quantizer::seed_rounding) and advances its offset per cast.
  std::uint64_t seed = 0;
  /// \throws fp8emu::Error unless fp8_format is E4M3.
  void validate() const;
  /// Its quantizer (nvfp4_quantizer.hpp). \throws fp8emu::Error as validate().
  std::unique_ptr<Quantizer> make_quantizer(Direction direction) const;
  /// As DelayedScaling::visit_parameters.
  template <class F>
  void visit_parameters(F&& f) const {
    f("disable_rht", disable_rht);
    f("disable_stochastic_rounding", disable_stochastic_rounding);
    f("disable_2d_quantization", disable_2d_quantization);
  }
  /// As DelayedScaling::visit_fields (fp8emu.NVFP4BlockScaling).
  template <class Self, class F>
  static void visit_fields(Self& r, F&& f) {
    f("fp8_format", r.fp8_format);
    f("disable_rht", r.disable_rht);
    f("disable_stochastic_rounding", r.disable_stochastic_rounding);
    f("disable_2d_quantization", r.disable_2d_quantization);
  }
};

/// Whether a recipe record takes the experiments' --format (RecipeSet::set_format): every record
/// but those that declare kTakesFormatFlag = false (NVFP4, whose formats are fixed).
template <class R, class = void>
struct takes_format_flag : std::true_type {};
template <class R>
struct takes_format_flag<R, std::void_t<decltype(R::kTakesFormatFlag)>> : std::bool_constant<R::kTakesFormatFlag> {};

/// One recipe of the five. Behaviour is asked of the recipe (scaling_mode, recipe_name) or of its
/// quantizer (quantizer.hpp), never read from the alternative's position.
using Recipe = std::variant<DelayedScaling, CurrentScaling, MXFP8BlockScaling, Float8BlockScaling, NVFP4BlockScaling>;

/// The recipe's name: "delayed", "current", "mxfp8", "block" or "nvfp4" (its record's kName; the
/// names of `fp8emu train --recipe`).
const char* recipe_name(const Recipe& r);
/// Every recipe name, in the order of the Recipe alternatives: {"delayed", "current", "mxfp8",
/// "block", "nvfp4"}.
const std::vector<std::string>& recipe_names();
/// The recipe's format field.
RecipeFormat recipe_format(const Recipe& r);
/// Validate whichever recipe it holds.
void validate(const Recipe& r);
/// How the recipe's operands carry their scales (its record's kScalingMode).
ScalingMode scaling_mode(const Recipe& r);
/// True for recipes with one scale per tensor (delayed, current).
bool uses_per_tensor_scales(const Recipe& r);
/// True when the recipe's GEMMs take the whole emu::GemmAccumulation (a model of the table, a
/// promotion interval and split-K) and TE's per-GEMM choices (te_fprop/dgrad/wgrad) apply: the
/// per-tensor recipes. False for the block-scaled recipes, whose GEMMs take a model for each scale
/// block's partial only (promoted at every block; default fp32).
bool supports_accumulation_models(const Recipe& r);

/// The recipe named `name` (exact, lower case): the element of `configured` with that name if
/// there is one (the caller's parameters), else that recipe's record with TE's defaults; nullopt
/// for an unknown name. Never throws.
std::optional<Recipe> find_recipe(const std::string& name, const std::vector<Recipe>& configured = {});
/// As find_recipe. \throws fp8emu::Error "unknown recipe '<name>' (accepted: delayed, current,
///         mxfp8, block, nvfp4)" for an unknown name (the list is recipe_names()).
Recipe parse_recipe(const std::string& name, const std::vector<Recipe>& configured = {});
/// A `--recipe` value that may also be "all": one recipe (as parse_recipe), or every recipe in
/// recipe_names() order. \throws fp8emu::Error "unknown recipe '<name>' (accepted: delayed,
///         current, mxfp8, block, nvfp4, all)" for an unknown name.
std::vector<Recipe> parse_recipe_selection(const std::string& name, const std::vector<Recipe>& configured = {});

/// One configured record of every recipe, in the order of the Recipe alternatives, each starting
/// from TE's defaults: what an experiment or a tool configures from its flags and then selects from
/// by name. Built from the variant, so a new recipe joins every set (and `--recipe all`) by being an
/// alternative of Recipe. Copyable; get<R>() references stay valid for the set's lifetime.
class RecipeSet {
 public:
  static constexpr std::size_t kSize = std::variant_size_v<Recipe>;

  RecipeSet();

  /// The configured record of recipe R (one of the Recipe alternatives).
  template <class R>
  R& get() { return std::get<R>(records_[index_of<R>()]); }
  template <class R>
  const R& get() const { return std::get<R>(records_[index_of<R>()]); }

  /// Every configured record, in recipe_names() order.
  std::vector<Recipe> all() const { return {records_.begin(), records_.end()}; }
  /// The configured record named `name`. \throws fp8emu::Error as parse_recipe.
  Recipe find(const std::string& name) const { return parse_recipe(name, all()); }
  /// A `--recipe` value: one name or "all". \throws fp8emu::Error as parse_recipe_selection.
  std::vector<Recipe> select(const std::string& selection) const { return parse_recipe_selection(selection, all()); }
  /// Sets the fp8_format of every record that takes it (takes_format_flag; the experiments' `--format`).
  void set_format(RecipeFormat f);
  /// Validates every record, whichever will run. \throws fp8emu::Error from the first bad record.
  void validate() const;

 private:
  template <class R, std::size_t I = 0>
  static constexpr std::size_t index_of() {
    static_assert(I < kSize, "not a Recipe alternative");
    if constexpr (std::is_same_v<R, std::variant_alternative_t<I, Recipe>>) return I;
    else return index_of<R, I + 1>();
  }
  std::array<Recipe, kSize> records_;
};

}  // namespace fp8emu::scaling
