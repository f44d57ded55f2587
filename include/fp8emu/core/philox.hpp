/// \file philox.hpp
/// \brief The random bits of TE's NVFP4 stochastic rounding, reproduced from (seed, offset), and
/// the software E2M1 stochastic rounder. Host and device (FP8EMU_HD).
///
/// Sources (TE d0067d0; docs/nvfp4.md §Stochastic rounding restates them):
///   - the generator: Philox4x32 with 10 rounds (Random123's philox4x32, whose known-answer vectors
///     tests/core/test_philox.cpp checks), in TE's state layout (`common/util/curanddx.hpp`): key =
///     (low, high 32 bits of the seed); the 128-bit counter (w:z:y:x) starts at
///     (subsequence << 64) + offset, and each generate4 returns the four words x, y, z, w of the
///     current counter, then increments it. The offset counts generate4 calls (it is not divided by
///     4 as curand's is); PyTorch's generator advances it by 1024 per quantize call;
///   - the element map: TE's tuned 1D NVFP4 kernel (`cast/nvfp4/specialized/
///     quantize_transpose_nvfp4_tuned_1D.cuh`, what TE runs for bf16 tensors whose dimensions are
///     multiples of 32): a grid of 128 x 128 chunks (blockIdx.x along columns), 128 threads each,
///     thread t of chunk (bx, by) on subsequence t + 128 bx + 128 by ceil(cols / 128); each chunk
///     four 64 x 64 stages in the order (0,0), (0,1), (1,0), (1,1) (row, column halves); per stage a
///     thread takes 8 words for its row-wise blocks and, when the kernel also writes the transposed
///     copy, 8 more for its column-wise blocks; byte i of a word rounds element i of its group of 4;
///   - the rounder: TE's `ptx::stochastic_round_fp4_e2m1` (`common/util/ptx.cuh`), which sm_120
///     runs (no cvt.rs there) and which TE's fix states takes the instruction's 8 bits per element.
///
/// Model choices (named, not measured): the sm_100 instruction `cvt.rs.satfinite.e2m1x4.f32` is
/// modelled by the software rounder with the same byte per element (`sr_software_rounder`; the
/// PTX text leaves the byte map and the addition unpublished); tensors whose dimensions are not
/// multiples of 32, which TE casts with its fallback kernel, take the tuned kernel's map.
#pragma once

#include <cstdint>

#include <Random123/philox.h>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"

namespace fp8emu::core {

/// How far PyTorch's generator advances TE's Philox offset per quantize call (TE
/// `init_philox_state(gen, 1024)`); TE draws a second state, one step later, for the column-wise
/// pass after an unfused Hadamard transform.
inline constexpr std::uint64_t kTeRngOffsetPerCast = 1024;

/// Four 32-bit words of Philox4x32-10 (TE's generate4).
struct PhiloxWords {
  std::uint32_t w[4];
};

/// Philox4x32-10 at the 128-bit counter (subsequence << 64) + offset + step, key = seed, in TE's
/// layout (see the file comment): the words x, y, z, w.
FP8EMU_HD PhiloxWords te_philox(std::uint64_t seed, std::uint64_t subsequence, std::uint64_t offset, std::uint64_t step) {
  const std::uint64_t lo = offset + step;
  const std::uint64_t hi = subsequence + (lo < offset ? 1u : 0u);
  r123::Philox4x32 g;
  const r123::Philox4x32::ctr_type ctr = {{std::uint32_t(lo), std::uint32_t(lo >> 32), std::uint32_t(hi),
                                           std::uint32_t(hi >> 32)}};
  const r123::Philox4x32::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  const r123::Philox4x32::ctr_type out = g(ctr, key);
  return PhiloxWords{{out.v[0], out.v[1], out.v[2], out.v[3]}};
}

/// The stream of one view's stochastic rounding: which TE kernel launch drew its bits.
///   seed, offset  TE's rng_state (seed, offset) of the launch;
///   rows, cols    the shape of the tensor that launch read (x, or after the unfused Hadamard
///                 transform the transformed x^T);
///   with_transpose  the launch also wrote the transposed copy (RETURN_TRANSPOSE: both views of x
///                 from one stream);
///   transposed    this view is that transposed copy (its row r is column r of the tensor read).
struct SrStream {
  std::uint64_t seed = 0, offset = 0;
  int rows = 0, cols = 0;
  bool with_transpose = false;
  bool transposed = false;
};

/// The four words (one generate4) that round the 16 elements of one block.
struct SrBlockBits {
  PhiloxWords words;
  /// The 8 random bits of element j (0..15) of the block.
  FP8EMU_HD std::uint32_t bits(int j, bool lanes_swapped, bool transposed) const {
    // Row-wise blocks: words w * 2 + h, w = (j / 8) XOR lane's bank group, h = (j % 8) / 4;
    // column-wise blocks: words e * 2 + h, e = j / 8. Byte j % 4.
    const int half = (j / 8) ^ (!transposed && lanes_swapped ? 1 : 0);
    const int word = half * 2 + (j % 8) / 4;
    return (words.w[word] >> (8 * (j % 4))) & 0xFFu;
  }
};

/// The generate4 of block `blk` (16 elements along K) of view row `vr` of a view cast from stream
/// s, and whether its lane takes its halves swapped (row-wise blocks of lanes 16..31 consume the
/// words of their elements 8..15 first). The view's K axis is the tensor's columns (row-wise) or
/// rows (transposed).
FP8EMU_HD SrBlockBits te_sr_block(const SrStream& s, int vr, int blk, bool* lanes_swapped) {
  // The element of the tensor the launch read: (r, c) with the block along c (row-wise) or r.
  const int r = s.transposed ? blk * 16 : vr, c = s.transposed ? vr : blk * 16;
  const int bx = c / 128, by = r / 128, lr = r % 128, lc = c % 128;
  const int stage = 2 * (lr / 64) + lc / 64, tr = lr % 64, tc = lc % 64;
  int t = 0, word0 = 0;  // thread, and its first word of this block within the stage's words
  if (!s.transposed) {
    const int tid_x = tc / 16, it = tr / 32, tid_y = tr % 32;
    t = 4 * tid_y + tid_x;
    word0 = it * 4;
    *lanes_swapped = (t % 32) / 16 == 1;
  } else {
    const int lane = tc / 2, w = tc % 2, rb = tr / 16;
    const int warp = ((rb - lane / 2) % 4 + 4) % 4;
    t = 32 * warp + lane;
    word0 = 8 + w * 4;
    *lanes_swapped = false;
  }
  const int grid_x = (s.cols + 127) / 128;
  const std::uint64_t subsequence = std::uint64_t(t) + 128u * std::uint64_t(bx) + 128u * std::uint64_t(by) * std::uint64_t(grid_x);
  const int stage_words = s.with_transpose ? 16 : 8;
  const int word = stage * stage_words + word0;  // a multiple of 4: one generate4
  return SrBlockBits{te_philox(s.seed, subsequence, s.offset, std::uint64_t(word / 4))};
}

/// TE's software E2M1 stochastic rounder (ptx::stochastic_round_fp4_e2m1) of v with 8 random bits,
/// as an E2M1 value: u = bits / 256; a = |v|; step 2 for a >= 4, 1 for a >= 2, else 0.5;
/// t = RN(u * step + a) (fmaf; the product is exact); q = min(floor(t / step_t) * step_t, 6) with
/// step_t the step at t; the sign of v (NaN gives +6, so +-Inf and |v| > 6 give +-6).
FP8EMU_HD float sr_fp4_e2m1(float v, std::uint32_t bits8) {
  const float u = float(bits8 & 0xFFu) * (1.0f / 256.0f);
  const float a = f32_abs(v);
  const float step = a >= 4.0f ? 2.0f : a >= 2.0f ? 1.0f : 0.5f;
  const float t = add_rn(u * step, a);  // u * step is exact (8 bits times a power of two)
  const float step_t = t >= 4.0f ? 2.0f : t >= 2.0f ? 1.0f : 0.5f;
  if (f32_is_nan(v)) return 6.0f;
  // min(floor(t / step_t) * step_t, 6), exact: step_t is a power of two and t < 6 below.
  const float q = t >= 6.0f ? 6.0f : float(int(t / step_t)) * step_t;
  return (f32_to_bits(v) >> 31) ? -q : q;
}

}  // namespace fp8emu::core
