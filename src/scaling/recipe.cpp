// TE recipe records, checks and compute_scale_from_amax (see include/fp8emu/scaling/recipe.hpp).
#include "fp8emu/scaling/recipe.hpp"

#include <cmath>
#include <cstring>
#include <utility>

#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

namespace {
// E5M2 parses so that the recipes' checks can refuse it with TE's message; it is not offered.
constexpr EnumName<RecipeFormat> kRecipeFormatNames[] = {
    {RecipeFormat::kHybrid, "hybrid"}, {RecipeFormat::kE4M3, "e4m3"}, {RecipeFormat::kE5M2, "e5m2", false}};
constexpr EnumName<AmaxComputeAlgo> kAmaxComputeAlgoNames[] = {{AmaxComputeAlgo::kMax, "max"},
                                                               {AmaxComputeAlgo::kMostRecent, "most_recent"}};
constexpr EnumName<E8M0Rule> kE8M0RuleNames[] = {
    {E8M0Rule::kTransformerEngine, "te"}, {E8M0Rule::kOcp, "ocp"}, {E8M0Rule::kEven, "even"}};
}  // namespace

RecipeFormat parse_recipe_format(const std::string& s) { return parse_enum(kRecipeFormatNames, s, "FP8 format"); }
const char* to_string(RecipeFormat f) { return enum_name(kRecipeFormatNames, f); }
const char* to_string(AmaxComputeAlgo a) { return enum_name(kAmaxComputeAlgoNames, a); }
AmaxComputeAlgo parse_amax_compute_algo(const std::string& s, const char* what) {
  return parse_enum(kAmaxComputeAlgoNames, s, what);
}
E8M0Rule parse_e8m0_rule(const std::string& s, const char* what) { return parse_enum(kE8M0RuleNames, s, what); }
const char* to_string(E8M0Rule r) { return enum_name(kE8M0RuleNames, r); }

namespace {
void check_not_e5m2(RecipeFormat f, const char* recipe) {
  FP8EMU_CHECK(f != RecipeFormat::kE5M2, recipe,
               ": the E5M2-only format is rejected, as Transformer Engine rejects it (\"Pure E5M2 "
               "training is not supported\"); use hybrid (E4M3 forward, E5M2 backward) or e4m3");
}
}  // namespace

Format forward_format(RecipeFormat f, bool fnuz) {
  check_not_e5m2(f, "FP8 recipe");
  return fnuz ? Format::kE4M3FNUZ : Format::kE4M3;
}

Format backward_format(RecipeFormat f, bool fnuz) {
  check_not_e5m2(f, "FP8 recipe");
  if (f == RecipeFormat::kHybrid) return fnuz ? Format::kE5M2FNUZ : Format::kE5M2;
  return fnuz ? Format::kE4M3FNUZ : Format::kE4M3;
}

void DelayedScaling::validate() const {
  FP8EMU_CHECK(amax_history_len >= 1 && amax_history_len <= kMaxAmaxHistoryLen,
               "delayed scaling: amax_history_len must be >= 1 and <= ", kMaxAmaxHistoryLen, ", got ",
               amax_history_len);
  FP8EMU_CHECK(std::isfinite(margin), "delayed scaling: margin must be finite, got ", margin);
  check_not_e5m2(fp8_format, "delayed scaling");
}

void CurrentScaling::validate() const {
  FP8EMU_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.0f,
               "current scaling: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  check_not_e5m2(fp8_format, "current scaling");
}

void MXFP8BlockScaling::validate() const { check_not_e5m2(fp8_format, "MXFP8 block scaling"); }

void Float8BlockScaling::validate() const {
  FP8EMU_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.0f,
               "block scaling: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  check_not_e5m2(fp8_format, "block scaling");
  FP8EMU_CHECK(!(mxfp8_gemms && use_f32_scales),
               "block scaling: mxfp8_gemms (Blackwell) needs power-of-two scales, but use_f32_scales is on (TE: on ",
               "Blackwell the FP8 block scaling recipe is emulated with MXFP8, which requires power of two scaling ",
               "factors)");
}

void NVFP4BlockScaling::validate() const {
  FP8EMU_CHECK(fp8_format == RecipeFormat::kE4M3, "NVFP4 block scaling: fp8_format (the block scales' format) must be ",
               "E4M3, got ", to_string(fp8_format), " (TE: NVFP4BlockScaling takes only Format.E4M3)");
}

const char* recipe_name(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kName; }, r);
}

namespace {
template <std::size_t... I>
std::vector<std::string> names_of(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, Recipe>::kName...};
}

// The default record of the alternative named `name`, if any.
template <std::size_t... I>
std::optional<Recipe> default_recipe(const std::string& name, std::index_sequence<I...>) {
  std::optional<Recipe> out;
  ((name == std::variant_alternative_t<I, Recipe>::kName ? (void)out.emplace(std::in_place_index<I>) : (void)0), ...);
  return out;
}

std::string accepted_list(bool with_all) {
  std::string s;
  for (const std::string& n : recipe_names()) s += (s.empty() ? "" : ", ") + n;
  return with_all ? s + ", all" : s;
}
}  // namespace

const std::vector<std::string>& recipe_names() {
  static const std::vector<std::string> names = names_of(std::make_index_sequence<std::variant_size_v<Recipe>>{});
  return names;
}

ScalingMode scaling_mode(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kScalingMode; }, r);
}

bool uses_per_tensor_scales(const Recipe& r) { return scaling_mode(r) == ScalingMode::kPerTensor; }

bool supports_accumulation_models(const Recipe& r) { return scaling_mode(r) == ScalingMode::kPerTensor; }

std::optional<Recipe> find_recipe(const std::string& name, const std::vector<Recipe>& configured) {
  for (const Recipe& r : configured)
    if (name == recipe_name(r)) return r;
  return default_recipe(name, std::make_index_sequence<std::variant_size_v<Recipe>>{});
}

Recipe parse_recipe(const std::string& name, const std::vector<Recipe>& configured) {
  std::optional<Recipe> r = find_recipe(name, configured);
  if (!r) FP8EMU_FAIL("unknown recipe '", name, "' (accepted: ", accepted_list(false), ")");
  return *r;
}

std::vector<Recipe> parse_recipe_selection(const std::string& name, const std::vector<Recipe>& configured) {
  std::vector<Recipe> out;
  if (name == "all") {
    for (const std::string& n : recipe_names()) out.push_back(*find_recipe(n, configured));
    return out;
  }
  std::optional<Recipe> r = find_recipe(name, configured);
  if (!r) FP8EMU_FAIL("unknown recipe '", name, "' (accepted: ", accepted_list(true), ")");
  out.push_back(*r);
  return out;
}

RecipeFormat recipe_format(const Recipe& r) {
  return std::visit([](const auto& x) { return x.fp8_format; }, r);
}

void validate(const Recipe& r) {
  std::visit([](const auto& x) { x.validate(); }, r);
}

namespace {
template <std::size_t... I>
std::array<Recipe, sizeof...(I)> default_records(std::index_sequence<I...>) {
  return {Recipe(std::in_place_index<I>)...};
}
}  // namespace

RecipeSet::RecipeSet() : records_(default_records(std::make_index_sequence<kSize>{})) {}

void RecipeSet::set_format(RecipeFormat f) {
  for (Recipe& r : records_)
    std::visit(
        [f](auto& x) {
          if constexpr (takes_format_flag<std::decay_t<decltype(x)>>::value) x.fp8_format = f;
        },
        r);
}

void RecipeSet::validate() const {
  for (const Recipe& r : records_) scaling::validate(r);
}

}  // namespace fp8emu::scaling
