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

/// Text from an input file or flag, fit to be quoted in an error message: at most `max` bytes (then
/// "..."), and every byte that is not printable ASCII as \xNN (a newline as \n), so that the message
/// stays one line whatever the input holds.
inline std::string excerpt(const std::string& s, std::size_t max = 80) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c < 0x20 || c >= 0x7F) out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    else out += char(c);
  }
  if (s.size() > max) out += "...";
  return out;
}

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
