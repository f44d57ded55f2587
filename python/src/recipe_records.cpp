// The C++ recipe records (include/fp8emu/scaling/recipe.hpp) as Python classes: one class per
// alternative of scaling::Recipe, its properties the record's fields by the names of TE's Python
// recipe classes (each record's visit_fields), so fp8emu.recipe hands the extension a record and not
// a tuple of values, and a new recipe or field needs no code here. Private to the extension.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "arrays.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::python {
namespace {

using namespace nb::literals;

// A field's value for Python: the enums by their TE names, numbers and flags as they are.
nb::object to_python(scaling::RecipeFormat f) { return nb::str(scaling::to_string(f)); }
nb::object to_python(scaling::AmaxComputeAlgo a) { return nb::str(scaling::to_string(a)); }
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
void from_python(nb::handle v, scaling::AmaxComputeAlgo& out, const char* field) {
  out = scaling::parse_amax_compute_algo(text_of(v, field), field);
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
    R::visit_fields(probe, [&](const char* f, auto&) { names.emplace_back(f); });
    return names;
  });
  cls.def("validate", [](const R& r) { r.validate(); }, "TE's checks of the record; ValueError naming the field.");
  R probe;
  R::visit_fields(probe, [&](const char* field, auto&) {
    const std::string key = field;
    cls.def_prop_rw(
        field,
        [key](const R& r) {
          nb::object out;
          R::visit_fields(r, [&](const char* f, const auto& v) {
            if (key == f) out = to_python(v);
          });
          return out;
        },
        [key](R& r, nb::handle value) {
          R::visit_fields(r, [&](const char* f, auto& v) {
            if (key == f) from_python(value, v, f);
          });
        });
  });
}

template <std::size_t... I>
void bind_records(nb::module_& m, std::index_sequence<I...>) {
  (bind_record<std::variant_alternative_t<I, scaling::Recipe>>(m), ...);
}

}  // namespace

void bind_recipe_records(nb::module_& m) {
  bind_records(m, std::make_index_sequence<std::variant_size_v<scaling::Recipe>>{});
  m.def("recipe_record", [](const std::string& name) { return scaling::parse_recipe(name); }, "name"_a,
        "A new record of the recipe named `name` (TE's defaults); ValueError naming the recipes.");
}

}  // namespace fp8emu::python
