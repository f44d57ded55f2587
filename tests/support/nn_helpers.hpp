// Test helpers for the NN layers.
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8emu/nn/matrix.hpp"

namespace fp8emu::testing {

/// [r, c] matrix with entries uniform in [-bound, bound).
// A finite fp32 value rounded to bfloat16 (round to nearest, ties to even on the 16 dropped bits),
// as an fp32: the FP8 GEMM's bias as TE casts it (pytorch/module/linear.py: an fp32 bias becomes
// bf16 for cuBLASLt's epilogue). Written here from the format, independent of the library's casts.
inline float bf16_round(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

inline nn::Matrix random_matrix(int r, int c, nn::Rng& rng, float bound) {
  nn::Matrix m(r, c);
  for (float& v : m.data) v = rng.uniform(bound);
  return m;
}

}  // namespace fp8emu::testing
