// The C++ recipe records (include/fp8emu/scaling/recipe.hpp) as Python classes: one class per
// alternative of scaling::Recipe, its properties the record's fields by the names of TE's Python
// recipe classes (each record's visit_fields), so fp8emu.recipe hands the extension a record and not
// a tuple of values, and a new recipe or field needs no code here. Private to the extension.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "arrays.hpp"
#include "fp8emu/scaling/nvfp4_quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::python {
namespace {

using namespace nb::literals;

// A Python callable held by a C++ hook (TE's amax_compute_algo and scaling_factor_compute_algo).
// The reference is released with the GIL held, wherever the last copy of the hook goes.
struct PyCallable {
  std::shared_ptr<nb::object> fn;
  explicit PyCallable(nb::handle f)
      : fn(new nb::object(nb::borrow(f)), [](nb::object* o) {
          nb::gil_scoped_acquire gil;
          delete o;
        }) {}
};

// A float32 NumPy array holding a copy of n values, of `shape`.
nb::object numpy_copy(const float* p, std::size_t n, std::initializer_list<std::size_t> shape) {
  auto* v = new std::vector<float>(p, p + n);
  nb::capsule own(v, [](void* q) noexcept { delete static_cast<std::vector<float>*>(q); });
  return nb::cast(nb::ndarray<nb::numpy, float>(v->data(), shape.size(), shape.begin(), own));
}

// What a callable returned, as float32 values (numpy.asarray(r, float32).reshape(-1)).
std::vector<float> float32_values(nb::handle r) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object a = np.attr("ascontiguousarray")(np.attr("asarray")(r, np.attr("float32")).attr("reshape")(-1));
  const auto nd = nb::cast<nb::ndarray<const float, nb::ndim<1>, nb::c_contig>>(a);
  return std::vector<float>(nd.data(), nd.data() + nd.size());
}

// TE's amax_compute_algo callable: f(history) with history a float32 (L, slots) copy (row 0 this
// step's amaxes, before the roll) -> the amax of each slot (slots,).
struct PyAmaxCompute : PyCallable {
  using PyCallable::PyCallable;
  void operator()(const float* history, int L, int slots, float* amax) const {
    nb::gil_scoped_acquire gil;
    const std::vector<float> a = float32_values(
        (*fn)(numpy_copy(history, std::size_t(L) * std::size_t(slots), {std::size_t(L), std::size_t(slots)})));
    if (a.size() != std::size_t(slots))
      throw nb::value_error(("amax_compute_algo returned " + std::to_string(a.size()) + " value(s); expected " +
                             std::to_string(slots) + " (one amax per slot of the (" + std::to_string(L) + ", " +
                             std::to_string(slots) + ") history)")
                                .c_str());
    std::copy(a.begin(), a.end(), amax);
  }
};

// TE's scaling_factor_compute_algo: f(amax, scale, fp8_max, recipe) with float32 (slots,) copies and
// fp8_max a Python float -> the new scales, (slots,) or one value for every slot.
struct PyScalingFactor : PyCallable {
  using PyCallable::PyCallable;
  void operator()(const float* amax, const float* scale, int slots, float fp8_max, const scaling::DelayedScaling& recipe,
                  float* out) const {
    nb::gil_scoped_acquire gil;
    const std::size_t n = std::size_t(slots);
    const std::vector<float> s = float32_values(
        (*fn)(numpy_copy(amax, n, {n}), numpy_copy(scale, n, {n}), double(fp8_max), nb::cast(recipe)));
    if (s.size() != n && s.size() != 1)
      throw nb::value_error(("scaling_factor_compute_algo returned " + std::to_string(s.size()) + " value(s); expected " +
                             std::to_string(n))
                                .c_str());
    for (std::size_t j = 0; j < n; ++j) out[j] = s[s.size() == 1 ? 0 : j];
  }
};

// A field's value for Python: the enums by their TE names, callables as they were given, numbers
// and flags as they are.
nb::object to_python(scaling::RecipeFormat f) { return nb::str(scaling::to_string(f)); }
nb::object to_python(scaling::AmaxComputeAlgo a, const scaling::AmaxComputeFn& fn) {
  if (const auto* p = fn.target<PyAmaxCompute>()) return *p->fn;
  return nb::str(scaling::to_string(a));
}
nb::object to_python(const scaling::ScalingFactorFn& fn) {
  if (const auto* p = fn.target<PyScalingFactor>()) return *p->fn;
  return nb::none();
}
nb::object to_python(E8M0Rule r) { return nb::str(scaling::to_string(r)); }
template <class T>
nb::object to_python(const T& v) {
  return nb::cast(v);
}

// A Python value into a field, with the C++ parsers' checks and messages (a ValueError naming the
// field and the accepted values; a TypeError for a value of another type).
std::string text_of(nb::handle v, const char* field) {
  if (!nb::isinstance<nb::str>(v))
    throw nb::type_error((std::string(field) + " must be a string, got " +
                          nb::cast<std::string>(nb::str(nb::handle(v.type())))).c_str());
  return nb::cast<std::string>(v);
}
void from_python(nb::handle v, scaling::RecipeFormat& out, const char* field) {
  out = scaling::parse_recipe_format(text_of(v, field));
}
// TE's amax_compute_algo: a name ("max", "most_recent") or a callable on the history.
void from_python(nb::handle v, scaling::AmaxComputeAlgo& algo, scaling::AmaxComputeFn& fn, const char* field) {
  if (PyCallable_Check(v.ptr()) && !nb::isinstance<nb::str>(v)) {
    algo = scaling::AmaxComputeAlgo::kMax;
    fn = PyAmaxCompute(v);
    return;
  }
  algo = scaling::parse_amax_compute_algo(text_of(v, field), field);
  fn = nullptr;
}
// TE's scaling_factor_compute_algo: None (TE's default formula) or a callable.
void from_python(nb::handle v, scaling::ScalingFactorFn& fn, const char* field) {
  if (v.is_none()) {
    fn = nullptr;
    return;
  }
  if (!PyCallable_Check(v.ptr()))
    throw nb::type_error((std::string(field) + " must be a callable or None, got " +
                          nb::cast<std::string>(nb::str(nb::handle(v.type()))))
                             .c_str());
  fn = PyScalingFactor(v);
}
void from_python(nb::handle v, E8M0Rule& out, const char* field) { out = scaling::parse_e8m0_rule(text_of(v, field), field); }
template <class T>
void from_python(nb::handle v, T& out, const char* field) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!nb::isinstance<nb::bool_>(v)) throw nb::type_error((std::string(field) + " must be a bool").c_str());
  }
  T value;
  if (!nb::try_cast(v, value)) throw nb::type_error((std::string(field) + " must be a number").c_str());
  out = value;
}

template <class R>
void bind_record(nb::module_& m) {
  const std::string name = std::string("RecipeRecord_") + R::kName;
  nb::class_<R> cls(m, name.c_str(), "A C++ recipe record (include/fp8emu/scaling/recipe.hpp); see fp8emu.recipe.");
  cls.def(nb::init<>());
  cls.def_prop_ro_static("name", [](nb::handle) { return std::string(R::kName); });
  cls.def_static("field_names", [] {
    std::vector<std::string> names;
    R probe;
    R::visit_fields(probe, [&](const char* f, auto&...) { names.emplace_back(f); });
    return names;
  });
  cls.def("validate", [](const R& r) { r.validate(); }, "TE's checks of the record; ValueError naming the field.");
  R probe;
  R::visit_fields(probe, [&](const char* field, auto&...) {
    const std::string key = field;
    cls.def_prop_rw(
        field,
        [key](const R& r) {
          nb::object out;
          R::visit_fields(r, [&](const char* f, const auto&... v) {
            if (key == f) out = to_python(v...);
          });
          return out;
        },
        [key](R& r, nb::handle value) {
          R::visit_fields(r, [&](const char* f, auto&... v) {
            if (key == f) from_python(value, v..., f);
          });
        },
        nb::for_setter(nb::arg("value").none()));  // None is a value of some fields (no callable)
  });
}

template <std::size_t... I>
void bind_records(nb::module_& m, std::index_sequence<I...>) {
  (bind_record<std::variant_alternative_t<I, scaling::Recipe>>(m), ...);
}

}  // namespace

std::vector<std::shared_ptr<nb::object>> recipe_callables(const scaling::Recipe& recipe) {
  std::vector<std::shared_ptr<nb::object>> out;
  if (const auto* d = std::get_if<scaling::DelayedScaling>(&recipe)) {
    if (const auto* a = d->amax_compute_fn.target<PyAmaxCompute>()) out.push_back(a->fn);
    if (const auto* f = d->scaling_factor_compute_fn.target<PyScalingFactor>()) out.push_back(f->fn);
  }
  return out;
}

void bind_recipe_records(nb::module_& m) {
  bind_records(m, std::make_index_sequence<std::variant_size_v<scaling::Recipe>>{});
  m.def("recipe_record", [](const std::string& name) { return scaling::parse_recipe(name); }, "name"_a,
        "A new record of the recipe named `name` (TE's defaults); ValueError naming the recipes.");
  // NVFP4's stochastic-rounding state (TE's rng_state: Philox seed, offset) of a quantizer; None
  // and a ValueError for recipes without one.
  m.def(
      "quantizer_rng_state",
      [](const PyQuantizer& q) -> nb::object {
        const auto* n = dynamic_cast<const scaling::Nvfp4Quantizer*>(q.q.get());
        if (!n) return nb::none();
        return nb::make_tuple(n->rounding_seed(), n->rounding_offset());
      },
      "quantizer"_a);
  m.def(
      "set_quantizer_rng_state",
      [](PyQuantizer& q, std::uint64_t seed, std::uint64_t offset) {
        auto* n = dynamic_cast<scaling::Nvfp4Quantizer*>(q.q.get());
        if (!n)
          throw nb::value_error((std::string("set_rng_state: the ") + q.q->recipe_name() +
                                 " recipe rounds to nearest; only NVFP4BlockScaling has a stochastic-rounding state")
                                    .c_str());
        n->set_rounding_state(seed, offset);
      },
      "quantizer"_a, "seed"_a, "offset"_a);
}

}  // namespace fp8emu::python
