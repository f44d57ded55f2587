/// \file u128.hpp
/// \brief A portable unsigned 128-bit integer (two 64-bit halves) with the few operations the exact
/// dot product needs, and its one rounding to fp32. Host and device (FP8EMU_HD): nvcc device code
/// has no `unsigned __int128`, so the CPU and the GPU share this one definition.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/mma_model.hpp"

namespace fp8emu::core {

/// hi * 2^64 + lo.
struct U128 {
  std::uint64_t hi = 0, lo = 0;
};

/// x += v (modulo 2^128).
FP8EMU_HD void add_u128(U128& x, std::uint64_t v) {
  const std::uint64_t lo = x.lo + v;
  x.hi += lo < x.lo ? 1u : 0u;
  x.lo = lo;
}
/// x < y.
FP8EMU_HD bool less_u128(const U128& x, const U128& y) { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo); }
/// x - y, for x >= y.
FP8EMU_HD U128 sub_u128(const U128& x, const U128& y) {
  U128 r;
  r.lo = x.lo - y.lo;
  r.hi = x.hi - y.hi - (x.lo < y.lo ? 1u : 0u);
  return r;
}
/// Number of significant bits (0 for 0).
FP8EMU_HD int bit_length_u128(const U128& x) { return x.hi ? 64 + bit_length(x.hi) : bit_length(x.lo); }
/// Bits [sh, sh + 64) of x, for 0 < sh < 128.
FP8EMU_HD std::uint64_t shr_u128(const U128& x, int sh) {
  if (sh >= 64) return x.hi >> (sh - 64);
  return (x.lo >> sh) | (x.hi << (64 - sh));
}
/// Whether bit i of x is set (0 <= i < 128).
FP8EMU_HD bool bit_u128(const U128& x, int i) { return ((i >= 64 ? x.hi >> (i - 64) : x.lo >> i) & 1u) != 0; }
/// Whether any of bits [0, n) of x is set (0 <= n <= 128).
FP8EMU_HD bool any_below_u128(const U128& x, int n) {
  if (n <= 0) return false;
  if (n >= 128) return x.hi != 0 || x.lo != 0;
  if (n >= 64) return x.lo != 0 || (n > 64 && (x.hi & ((std::uint64_t(1) << (n - 64)) - 1u)) != 0);
  return (x.lo & ((std::uint64_t(1) << n) - 1u)) != 0;
}

/// (-1)^neg * T * 2^k rounded to nearest even fp32. The callers' range: the result is never
/// subnormal and never overflows (FP8 x FP8 sums of at most 2^31 products).
FP8EMU_HD float round_u128_to_f32(bool neg, const U128& T, int k) {
  const int nbits = bit_length_u128(T);
  if (nbits == 0) return 0.0f;
  std::uint64_t t = 0;
  if (nbits > 24) {  // keep 24 bits, RNE on the rest
    const int sh = nbits - 24;
    t = shr_u128(T, sh);
    const bool half = bit_u128(T, sh - 1), sticky = any_below_u128(T, sh - 1);
    if (half && (sticky || (t & 1u))) ++t;
    k += sh;
    if (t >> 24) {  // the rounding carried into a new binade
      t >>= 1;
      ++k;
    }
  } else {
    t = T.lo;
  }
  return bits_to_f32(scaled_int_to_f32_rz(neg ? 1u : 0u, t, k));  // exact: 24 bits, in range
}

}  // namespace fp8emu::core
