/// \file enum_names.hpp
/// \brief The one mechanism for the names of fp8emu's enums on command lines, in files and in
/// Python: a table of {value, name} per enum, read both ways, with one error message for an
/// unknown name, "unknown <what> '<s>' (accepted: <the listed names>)".
///
/// A table row may be unlisted: parsed but left out of "accepted" (a name that exists only to be
/// refused later with a better message, as TE's E5M2 recipe format).
#pragma once

#include <cstddef>
#include <string>

#include "fp8emu/util/error.hpp"

namespace fp8emu {

template <class E>
struct EnumName {
  E value;
  const char* name;
  bool listed = true;  ///< shown among the accepted names of an error
};

/// The listed names of a table, comma-separated ("relu, gelu").
template <class E, std::size_t N>
std::string enum_names(const EnumName<E> (&table)[N]) {
  std::string s;
  for (const EnumName<E>& e : table)
    if (e.listed) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

/// The name of a value ("?" for a value the table lacks).
template <class E, std::size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

/// The value named `s` (exact match). \throws fp8emu::Error "unknown <what> '<s>' (accepted: ...)".
template <class E, std::size_t N>
E parse_enum(const EnumName<E> (&table)[N], const std::string& s, const char* what) {
  for (const EnumName<E>& e : table)
    if (s == e.name) return e.value;
  FP8EMU_FAIL("unknown ", what, " '", s, "' (accepted: ", enum_names(table), ")");
}

}  // namespace fp8emu
