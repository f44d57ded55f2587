// Test helper: the bit pattern of an fp32 (independent of the library's own bit casts).
#pragma once

#include <cstdint>
#include <cstring>

namespace fp8emu::testing {

inline std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// The fp32 of a bit pattern.
inline float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace fp8emu::testing
