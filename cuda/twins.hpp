// Per-element bodies of the GPU twins of the emulation kernels (include/fp8emu/backend/kernels.hpp).
//
// Every GPU kernel in cuda/ maps its threads onto these FP8EMU_HD functions, and
// tests/core/test_gpu_twins_host.cpp runs the very same functions on the CPU against emu::, so the
// arithmetic, the order of every sum and the special cases are checked bit for bit on machines
// without a GPU; what only a GPU can check (the thread mapping, the reductions, the copies) is
// left to the `gpu`-labelled tests and `fp8emu validate`.
//
// Each function names the emulation code it mirrors. They call the shared integer-only core
// (include/fp8emu/core) and do their fp32 arithmetic through add_rn / mul_rn / div_rn:
// __fadd_rn / __fmul_rn / __fdiv_rn on the device (IEEE round-to-nearest-even, never contracted
// into an FMA, subnormals kept: the CUDA code is built without fast math), plain IEEE operations on
// the host (fp8emu builds with -ffp-contract=off). Format records are passed by value.
//
// NaN payloads are the one thing the two sides cannot share: when an fp32 operation creates or
// propagates a NaN, x86 SSE returns the first NaN operand or the default NaN 0xFFC00000, NVIDIA
// GPUs always return 0x7FFFFFFF. FP8 codes and counts never depend on it (every fp32 -> FP8
// conversion maps all NaNs to the one NaN code); fp32 outputs that are NaN are NaN on both sides.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cuda::twin {

// ---- fp32 arithmetic, one rounding per operation --------------------------------------------

FP8EMU_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FP8EMU_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

FP8EMU_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

FP8EMU_HD bool is_nan(float x) { return (core::f32_to_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
FP8EMU_HD bool is_finite(float x) { return (core::f32_to_bits(x) & 0x7F800000u) != 0x7F800000u; }
FP8EMU_HD float abs_f(float x) { return core::bits_to_f32(core::f32_to_bits(x) & 0x7FFFFFFFu); }

/// The bits of |x| as an amax contribution: the max over these bits is fmaxf's max over |x| (fp32
/// order equals integer order for non-negative values, +Inf included), and a NaN gives 0, so it is
/// ignored as fmaxf ignores it. An exact, order-independent reduction.
FP8EMU_HD std::uint32_t amax_bits(float x) {
  const std::uint32_t u = core::f32_to_bits(x) & 0x7FFFFFFFu;
  return u > 0x7F800000u ? 0u : u;
}

FP8EMU_HD std::uint32_t max_u32(std::uint32_t a, std::uint32_t b) { return a > b ? a : b; }
FP8EMU_HD int min_i(int a, int b) { return a < b ? a : b; }

// ---- casts (emulation/quantize.cpp quantize_impl, emulation/block_quantize.cpp cast_blocks) ----

/// What one element's cast did (0 or 1 each), summed into emu::QuantizeStats.
struct CastCounts {
  std::uint32_t saturated = 0, underflow = 0, nan = 0;
};

/// One element of a cast: the code of RN(x * mult) under __NV_SATFINITE, and its counts:
/// saturated when |RN(x * mult)| overflows the format (NaN does not), underflow for a finite
/// non-zero x whose code is +-0, nan for a NaN x.
FP8EMU_HD std::uint8_t cast_element(float x, float mult, FormatSpec f, CastCounts& counts) {
  const float s = mul_rn(x, mult);
  const std::uint8_t code = core::f32_to_fp8(s, f, Saturation::kSatFinite);
  const bool nan = is_nan(x);
  counts.nan += nan ? 1u : 0u;
  counts.saturated += f.overflows(abs_f(s)) ? 1u : 0u;
  counts.underflow += (!nan && x != 0.0f && is_finite(x) && (code & f.top_code()) == 0) ? 1u : 0u;
  return code;
}

/// emu::dequantize of one code: RN(decode(q) * scale_inv).
FP8EMU_HD float dequantize_element(std::uint8_t q, float scale_inv, FormatSpec f) {
  return mul_rn(core::fp8_to_f32(q, f), scale_inv);
}

/// Index in a row-major [rows, cols] input of element (r, kk) of its K-major view (emu::BlockAxis:
/// rowwise: row r, column kk; columnwise: row kk, column r).
FP8EMU_HD std::size_t view_index(bool rowwise, int cols, int r, int kk) {
  return rowwise ? std::size_t(r) * std::size_t(cols) + std::size_t(kk)
                 : std::size_t(kk) * std::size_t(cols) + std::size_t(r);
}

/// Amax of one block of the view (emu cast_blocks: fmax of fabs from 0, NaN ignored).
FP8EMU_HD float view_block_amax(const float* x, bool rowwise, int cols, int r, int k0, int k1) {
  std::uint32_t m = 0;
  for (int kk = k0; kk < k1; ++kk) m = max_u32(m, amax_bits(x[view_index(rowwise, cols, r, kk)]));
  return core::bits_to_f32(m);
}

/// emu::mxfp8_scale_code: the E8M0 code of a block amax (non-negative, never NaN: it is an fmax
/// from 0). TE rule: round-up of RN(amax * rcp_max) with rcp_max = fl32(1 / fp8_max); OCP rule:
/// 2^(floor(log2 amax) - emax), clamped to the E8M0 range.
FP8EMU_HD std::uint8_t mxfp8_scale_code(float amax, FormatSpec f, bool te_rule, float rcp_max) {
  if (te_rule) return core::e8m0_round_up_from_f32_bits(core::f32_to_bits(mul_rn(amax, rcp_max)));
  const std::uint32_t u = core::f32_to_bits(amax) & 0x7FFFFFFFu;
  if (u > 0x7F800000u) return core::kE8M0NaN;
  if (u == 0x7F800000u) return core::kE8M0MaxCode;
  if (u == 0) return 0;
  const int e = int(u >> 23);
  const int floor_log2 = e != 0 ? e - 127 : core::bit_length(u & 0x7FFFFFu) - 1 - 149;  // subnormal amax
  const int code = floor_log2 - f.emax() + core::kE8M0Bias;
  return std::uint8_t(code < 0 ? 0 : code > int(core::kE8M0MaxCode) ? int(core::kE8M0MaxCode) : code);
}

/// The scale of one block or tile for Float8BlockScaling (emu::quantize_block_1d/2d):
/// compute_scale_from_amax with value_for_inf = FLT_MAX, and scale_inv = RN(1 / scale).
struct BlockScale {
  float scale, scale_inv;
};
FP8EMU_HD BlockScale block_scale(float amax, float fp8_max, bool pow2, float epsilon) {
  const float s = core::compute_scale_from_amax(amax, fp8_max, pow2, epsilon, FLT_MAX);
  return BlockScale{s, div_rn(1.0f, s)};
}

/// How the scale of a block of emu::quantize_mxfp8 / quantize_block_1d is found from its amax.
struct BlockRule {
  enum Kind : std::uint8_t { kMxfp8Te, kMxfp8Ocp, kFloat } kind = kFloat;
  float rcp_max = 0.0f;  ///< MXFP8 TE rule: fl32(1 / fp8_max).
  float fp8_max = 0.0f;  ///< kFloat: compute_scale_from_amax's fp8_max.
  bool pow2 = false;     ///< kFloat: power-of-2 scales.
  float epsilon = 0.0f;  ///< kFloat: amax_epsilon.
};

/// The rule of emu::quantize_mxfp8 (host code).
inline BlockRule mxfp8_rule(Format fmt, scaling::E8M0Rule rule) {
  BlockRule r;
  r.kind = rule == scaling::E8M0Rule::kTransformerEngine ? BlockRule::kMxfp8Te : BlockRule::kMxfp8Ocp;
  r.rcp_max = float(1.0 / spec_of(fmt).max_finite());  // as emu::mxfp8_scale_code
  return r;
}

/// The rule of emu::quantize_block_1d (host code).
inline BlockRule float_block_rule(Format fmt, bool pow2, float epsilon) {
  BlockRule r;
  r.kind = BlockRule::kFloat;
  r.fp8_max = max_finite_f32(fmt);
  r.pow2 = pow2;
  r.epsilon = epsilon;
  return r;
}

/// An empty record of the K-major view of a [rows, cols] input, sized as emu's (host code).
inline emu::BlockQuantized block_record(int rows, int cols, emu::BlockAxis axis, int block, Format fmt, bool mx) {
  const bool rowwise = axis == emu::BlockAxis::kRowwise;
  emu::BlockQuantized q;
  q.n = rowwise ? rows : cols;
  q.k = rowwise ? cols : rows;
  q.block = block;
  q.format = fmt;
  q.codes.resize(std::size_t(q.n) * std::size_t(q.k));
  q.scale_inv.resize(std::size_t(q.n) * std::size_t(q.blocks()));
  if (mx) q.e8m0.resize(q.scale_inv.size());
  return q;
}

/// emu::quantize_block_2d's scale_inv of both views from the tile scale_inv [ceil(rows/tile),
/// ceil(cols/tile)]: every row (column) carries its tile's value for each block (host code).
inline void spread_tile_scales(int rows, int cols, int tile, const float* tile_scale_inv, emu::BlockQuantized2D& q) {
  const int tc = (cols + tile - 1) / tile;
  emu::BlockQuantized& rw = q.rowwise;
  emu::BlockQuantized& cw = q.columnwise;
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < rw.blocks(); ++b)
      rw.scale_inv[std::size_t(r) * std::size_t(rw.blocks()) + std::size_t(b)] =
          tile_scale_inv[std::size_t(r / tile) * std::size_t(tc) + std::size_t(b)];
  for (int c = 0; c < cols; ++c)
    for (int b = 0; b < cw.blocks(); ++b)
      cw.scale_inv[std::size_t(c) * std::size_t(cw.blocks()) + std::size_t(b)] =
          tile_scale_inv[std::size_t(b) * std::size_t(tc) + std::size_t(c / tile)];
}

/// Casts block `blk` of view row r (emu cast_blocks with the scale_of of quantize_mxfp8 or
/// quantize_block_1d): writes the block's codes into codes [n, K], its scale_inv into
/// scale_inv [n, nb] and, for MXFP8, its E8M0 code into e8m0 [n, nb]; adds the cast's counts.
FP8EMU_HD void cast_view_block(const float* x, bool rowwise, int cols, int r, int blk, int block, int K, int nb,
                               FormatSpec f, const BlockRule& rule, std::uint8_t* codes, float* scale_inv,
                               std::uint8_t* e8m0, CastCounts& counts) {
  const int k0 = blk * block, k1 = min_i(K, k0 + block);
  const float amax = view_block_amax(x, rowwise, cols, r, k0, k1);
  const std::size_t si = std::size_t(r) * std::size_t(nb) + std::size_t(blk);
  float mult = 1.0f;
  if (rule.kind == BlockRule::kFloat) {
    const BlockScale bs = block_scale(amax, rule.fp8_max, rule.pow2, rule.epsilon);
    scale_inv[si] = bs.scale_inv;
    mult = bs.scale;
  } else {
    const std::uint8_t code = mxfp8_scale_code(amax, f, rule.kind == BlockRule::kMxfp8Te, rule.rcp_max);
    e8m0[si] = code;
    scale_inv[si] = core::bits_to_f32(core::e8m0_to_f32_bits(code));
    mult = core::bits_to_f32(core::e8m0_reciprocal_f32_bits(code));
  }
  for (int kk = k0; kk < k1; ++kk)
    codes[std::size_t(r) * std::size_t(K) + std::size_t(kk)] =
        cast_element(x[view_index(rowwise, cols, r, kk)], mult, f, counts);
}

// ---- GEMM accumulation (emulation/gemm_models.cpp dot_fp8 and its helpers) -----------------------

/// emu dot_fp32: c = +0, then c = RN(c + RN(a_k * b_k)) for k = 0..K-1 (the products are exact).
FP8EMU_HD float dot_fp32(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K) {
  float c = 0.0f;
  for (int k = 0; k < K; ++k) c = add_rn(c, mul_rn(core::fp8_to_f32(a[k], fa), core::fp8_to_f32(b[k], fb)));
  return c;
}

/// A 128-bit unsigned integer from two 64-bit halves (portable between g++ and nvcc device code).
struct U128 {
  std::uint64_t hi = 0, lo = 0;
};
FP8EMU_HD void add_u128(U128& x, std::uint64_t v) {
  const std::uint64_t lo = x.lo + v;
  x.hi += lo < x.lo ? 1u : 0u;
  x.lo = lo;
}
FP8EMU_HD bool less_u128(const U128& x, const U128& y) { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo); }
FP8EMU_HD U128 sub_u128(const U128& x, const U128& y) {  // x >= y
  U128 r;
  r.lo = x.lo - y.lo;
  r.hi = x.hi - y.hi - (x.lo < y.lo ? 1u : 0u);
  return r;
}
FP8EMU_HD int bit_length_u128(const U128& x) {
  return x.hi ? 64 + core::bit_length(x.hi) : core::bit_length(x.lo);
}
/// Bits [sh, sh+64) of x, for 0 < sh < 128.
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

/// emu round_to_f32: (-1)^neg * T * 2^k rounded to nearest even fp32 (the emulator's range: never
/// subnormal, never overflowing).
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
  return core::bits_to_f32(core::scaled_int_to_f32_rz(neg ? 1u : 0u, t, k));  // exact: 24 bits, in range
}

/// emu dot_exact: the exact sum of the exact products rounded once to fp32; NaN if any product is
/// NaN (NaN operand, Inf * 0) or +Inf and -Inf meet, else the Inf.
FP8EMU_HD float dot_exact(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K) {
  constexpr int kLsbExponent = -32;  // every FP8 x FP8 product is a multiple of 2^-32
  bool nan = false, pinf = false, ninf = false;
  U128 pos, neg;
  for (int k = 0; k < K; ++k) {
    const float va = core::fp8_to_f32(a[k], fa), vb = core::fp8_to_f32(b[k], fb);
    if (!is_finite(va) || !is_finite(vb)) {
      const float p = mul_rn(va, vb);
      if (is_nan(p)) nan = true;
      else (p > 0.0f ? pinf : ninf) = true;
      continue;
    }
    const core::MmaTerm ta = core::decode_fp8_term(a[k], fa), tb = core::decode_fp8_term(b[k], fb);
    const int e = ta.exp - ta.frac + tb.exp - tb.frac - kLsbExponent;  // 0 .. 50
    const std::uint64_t p = std::uint64_t(ta.sig) * tb.sig;           // < 2^8
    // p << e < 2^58: one 64-bit word.
    add_u128((ta.sign ^ tb.sign) ? neg : pos, p << e);
  }
  if (nan || (pinf && ninf)) return core::bits_to_f32(0x7FC00000u);
  if (pinf) return core::bits_to_f32(0x7F800000u);
  if (ninf) return core::bits_to_f32(0xFF800000u);
  return less_u128(pos, neg) ? round_u128_to_f32(true, sub_u128(neg, pos), kLsbExponent)
                             : round_u128_to_f32(false, sub_u128(pos, neg), kLsbExponent);
}

/// Products fused per tensor-core block (emu block_of): Hopper 32, Ada 16, else 1.
FP8EMU_HD int block_of(emu::Accumulation m) {
  return m == emu::Accumulation::kHopper ? 32 : m == emu::Accumulation::kAda ? 16 : 1;
}

/// emu dot_run: one run of K-elements with the model, from zero.
FP8EMU_HD float dot_run(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                        emu::Accumulation m) {
  switch (m) {
    case emu::Accumulation::kExact: return dot_exact(a, fa, b, fb, K);
    case emu::Accumulation::kFp32: return dot_fp32(a, fa, b, fb, K);
    default:
      return core::bits_to_f32(core::mma_dot(a, fa, b, fb, K, block_of(m), 0u, core::MmaAccumulator::kFp32));
  }
}

/// emu::dot_fp8: the accumulation of one output element, with the promotion wrapper (runs of
/// `promotion` K-elements, each from zero, added to an fp32 total in increasing K; 0 or >= K: one run).
FP8EMU_HD float dot_fp8(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                        emu::Accumulation m, int promotion) {
  if (promotion == 0 || promotion >= K) return dot_run(a, fa, b, fb, K, m);
  float total = 0.0f;
  for (int k0 = 0; k0 < K; k0 += promotion)
    total = add_rn(total, dot_run(a + k0, fa, b + k0, fb, min_i(promotion, K - k0), m));
  return total;
}

/// One element of emu::gemm_fp8_tn: RN(acc * s) with s = RN(scale_inv_a * scale_inv_b).
/// \param a  Row i of A (K codes). \param b  Row j of B (K codes).
FP8EMU_HD float gemm_tn_element(const std::uint8_t* a, FormatSpec fa, const std::uint8_t* b, FormatSpec fb, int K,
                                emu::Accumulation m, int promotion, float s) {
  return mul_rn(dot_fp8(a, fa, b, fb, K, m, promotion), s);
}

/// The argument checks of emu::gemm_fp8_tn, with its messages (host code).
inline void check_gemm_tn(int M, int N, int K, Format fa, Format fb, const emu::GemmAccumulation& acc) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "GEMM: negative shape M=", M, " N=", N, " K=", K);
  FP8EMU_CHECK(!(fa == Format::kE5M2 && fb == Format::kE5M2),
               "GEMM: E5M2 x E5M2 is not supported (cuBLASLt rejects it); use E4M3 for one operand");
  const int blk = block_of(acc.model);
  FP8EMU_CHECK(acc.model != emu::Accumulation::kExact || acc.promotion_interval == 0,
               "GEMM: the exact model takes no promotion interval (it would no longer be exact)");
  FP8EMU_CHECK(acc.promotion_interval >= 0, "GEMM: promotion interval must be >= 0, got ", acc.promotion_interval);
  FP8EMU_CHECK(acc.promotion_interval % blk == 0, "GEMM: promotion interval ", acc.promotion_interval,
               " is not a multiple of the ", emu::to_string(acc.model), " block (", blk, ")");
}

/// The argument checks of emu::gemm_fp8_block_tn (and a block size >= 1) (host code).
inline void check_gemm_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B) {
  FP8EMU_CHECK(A.k == B.k, "block-scaled GEMM: K mismatch, A has K = ", A.k, ", B has K = ", B.k);
  FP8EMU_CHECK(A.block == B.block, "block-scaled GEMM: block sizes differ (", A.block, " vs ", B.block, ")");
  FP8EMU_CHECK(A.block >= 1, "block-scaled GEMM: block size must be >= 1, got ", A.block);
}

/// One element of emu::gemm_fp8_block_tn: d = +0; for each K-block in increasing order,
/// d = RN(d + RN(P * RN(sa[blk] * sb[blk]))), P the fp32-sequential sum of the block's products.
/// \param a, b    Row i of A and row j of B (K codes). \param sa, sb  Their per-block scale_inv rows.
FP8EMU_HD float gemm_block_element(const std::uint8_t* a, FormatSpec fa, const float* sa, const std::uint8_t* b,
                                   FormatSpec fb, const float* sb, int K, int block) {
  float d = 0.0f;
  for (int k0 = 0, blk = 0; k0 < K; k0 += block, ++blk) {
    const float p = dot_fp32(a + k0, fa, b + k0, fb, min_i(block, K - k0));
    d = add_rn(d, mul_rn(p, mul_rn(sa[blk], sb[blk])));
  }
  return d;
}

}  // namespace fp8emu::cuda::twin
