// Test helpers for the NN layers.
#pragma once

#include "fp8emu/nn/matrix.hpp"

namespace fp8emu::testing {

/// [r, c] matrix with entries uniform in [-bound, bound).
inline nn::Matrix random_matrix(int r, int c, nn::Rng& rng, float bound) {
  nn::Matrix m(r, c);
  for (float& v : m.data) v = rng.uniform(bound);
  return m;
}

}  // namespace fp8emu::testing
