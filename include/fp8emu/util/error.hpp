/// \file error.hpp
/// \brief Host-side error reporting: every failure of fp8emu's host API throws fp8emu::Error with a
/// message that names the problem (shape mismatch, corrupt file, bad flag ...).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace fp8emu {

/// The exception thrown by fp8emu's host code. what() is a complete, user-facing sentence.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
[[noreturn]] void fail(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  (void)file;
  (void)line;
  throw Error(os.str());
}
}  // namespace detail

}  // namespace fp8emu

/// Throws fp8emu::Error built from the streamed arguments when `cond` is false.
#define FP8EMU_CHECK(cond, ...) \
  do { \
    if (!(cond)) ::fp8emu::detail::fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/// Throws fp8emu::Error built from the streamed arguments.
#define FP8EMU_FAIL(...) ::fp8emu::detail::fail(__FILE__, __LINE__, __VA_ARGS__)
