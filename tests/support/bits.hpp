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

}  // namespace fp8emu::testing
