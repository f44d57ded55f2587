/// \file cast.hpp
/// \brief The per-element bodies of the FP8 and FP4 casts: one element's scaled cast with its
/// counts, the dequantization of one code, the K-major view indexing of a block-scaled operand, a
/// block's amax, its MXFP8 (E8M0), Float8BlockScaling (fp32) or NVFP4 (E4M3 under an fp32 tensor
/// scale) scale, and the cast of one block. Host and device
/// (FP8EMU_HD): the CPU emulator's scalar paths and the CUDA kernels call exactly these functions;
/// the CPU's SIMD casts (emulation/bulk_convert) are tested against them.
///
/// Casts are CUDA's `__NV_SATFINITE` round-to-nearest-even conversion of RN(x * multiplier)
/// (core/convert.hpp). The amax is a max over amax_bits (core/fp32_ops.hpp): NaN ignored, exact,
/// independent of the order. Sources mirrored: TE `cast_transpose` / `quantize_mxfp8.cuh` /
/// `quantize_transpose_vector_blockwise.cu` / `recipe_common.cuh` / `cast/nvfp4/core_nvfp4.cuh` and
/// `dequantize_nvfp4.cuh` / `recipe/nvfp4.cu` (docs/transformer-engine.md, docs/nvfp4.md).
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/core/philox.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::core {

/// What a run of element casts did, summed as emu::QuantizeStats sums it.
struct CastCounts {
  std::uint32_t saturated = 0;  ///< |RN(x * mult)| overflowed the format and was clipped to max (NaN never
                                ///< counts; nor, for FNUZ formats, an infinity, which becomes NaN).
  std::uint32_t underflow = 0;  ///< finite non-zero x whose code is +-0.
  std::uint32_t nan = 0;        ///< NaN x.
};

/// Whether f is OCP FP4 E2M1 (the one element format with the comparison encoder below).
FP8EMU_HD constexpr bool is_e2m1(FormatSpec f) {
  return f.exponent_bits == 2 && f.mantissa_bits == 1 && f.has_sign && !f.fnuz && f.nan_codes == 0 && !f.has_inf;
}

/// The E2M1 code of v under __NV_SATFINITE round-to-nearest-even, by comparisons with the rounding
/// boundaries (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5; ties go to the even code): what
/// f32_to_fp8(v, E2M1, kSatFinite) returns for every fp32 v (tests/core/test_nvfp4_random.cpp),
/// cheaper. The sign bit is v's (a negative value rounding to zero gives code 8); NaN gives +6.
FP8EMU_HD std::uint8_t e2m1_code_satfinite(float v) {
  if (f32_is_nan(v)) return 7;
  const float a = f32_abs(v);
  const int mag = int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f) + int(a > 2.5f) +
                  int(a >= 3.5f) + int(a > 5.0f);
  return std::uint8_t(mag | int((f32_to_bits(v) >> 28) & 8u));
}

/// Adds one element's counts (see CastCounts): x the input, s = RN(x * mult), code its code.
FP8EMU_HD void count_element(float x, float s, std::uint8_t code, FormatSpec f, CastCounts& counts) {
  const bool nan = f32_is_nan(x);
  counts.nan += nan ? 1u : 0u;
  // Clipped to max: FNUZ formats send an infinite RN(x * mult) to NaN instead (not counted).
  counts.saturated += (f.overflows(f32_abs(s)) && !(f.fnuz && !f32_is_finite(s))) ? 1u : 0u;
  counts.underflow += (!nan && x != 0.0f && f32_is_finite(x) && f.is_zero_code(code)) ? 1u : 0u;
}

/// The code of a scaled value s as the recipe kernels convert it, by format:
///   OCP FP8, FP6, FP4: CUDA's __NV_SATFINITE (TE's kernels): RNE, finite overflow and +-Inf to
///     +-max, NaN to the NaN code (FP6/FP4: +max);
///   FNUZ (ROCm TE on MI300, its hip_f8 cast with clip, transformer_engine/common/amd_detail/
///     hip_f8_impl.h): RNE, finite overflow to +-max, +-Inf and NaN to the NaN code 0x80, and a value
///     that rounds to zero to +0 (FNUZ has no -0): the encoder's kSatFiniteKeepInf.
FP8EMU_HD std::uint8_t cast_code(float s, FormatSpec f) {
  if (is_e2m1(f)) return e2m1_code_satfinite(s);
  if (f.fnuz) return encode_f32_bits_with(f32_to_bits(s), f, Policy::ml_dtypes_saturate());  // one NaN code
  return f32_to_fp8(s, f, Saturation::kSatFinite);
}

/// One element of a cast: the code of RN(x * mult) (cast_code: CUDA's __NV_SATFINITE, or ROCm's
/// cast for FNUZ formats), and its counts added to `counts` (see CastCounts).
FP8EMU_HD std::uint8_t cast_element(float x, float mult, FormatSpec f, CastCounts& counts) {
  const float s = mul_rn(x, mult);
  const std::uint8_t code = cast_code(s, f);
  count_element(x, s, code, f, counts);
  return code;
}

/// One element of a stochastically rounded E2M1 cast: the code of sr_fp4_e2m1(RN(x * mult), bits8)
/// (TE's software rounder), with its counts as cast_element's.
FP8EMU_HD std::uint8_t cast_element_sr(float x, float mult, FormatSpec f, std::uint32_t bits8, CastCounts& counts) {
  const float s = mul_rn(x, mult);
  const float q = sr_fp4_e2m1(s, bits8);  // an E2M1 value: its code is exact
  const std::uint8_t code = is_e2m1(f) ? e2m1_code_satfinite(q) : f32_to_fp8(q, f, Saturation::kSatFinite);
  count_element(x, s, code, f, counts);
  return code;
}

/// Dequantization of one code: RN(decode(q) * scale_inv).
FP8EMU_HD float dequantize_element(std::uint8_t q, float scale_inv, FormatSpec f) {
  return mul_rn(fp8_to_f32(q, f), scale_inv);
}

/// Index in a row-major [rows, cols] input of element (r, kk) of its K-major view: rowwise: row r,
/// column kk (K = cols); columnwise: row kk, column r (K = rows).
FP8EMU_HD std::size_t view_index(bool rowwise, int cols, int r, int kk) {
  return rowwise ? std::size_t(r) * std::size_t(cols) + std::size_t(kk)
                 : std::size_t(kk) * std::size_t(cols) + std::size_t(r);
}

/// Amax of elements [k0, k1) of view row r (NaN ignored; +0 for an empty or all-NaN block).
FP8EMU_HD float view_block_amax(const float* x, bool rowwise, int cols, int r, int k0, int k1) {
  std::uint32_t m = 0;
  for (int kk = k0; kk < k1; ++kk) m = max_u32(m, amax_bits(x[view_index(rowwise, cols, r, kk)]));
  return bits_to_f32(m);
}

/// The E8M0 scale code of an MXFP8 block from its amax (non-negative or NaN).
///   TE rule (quantize_mxfp8.cuh, ptx float_to_e8m0): round-up of RN(amax * rcp_max), rcp_max =
///     fl32(1 / fp8_max), so no element of the block saturates;
///   OCP MX v1.0 §6.3 rule: 2^(floor(log2 amax) - emax of the element format), clamped to the E8M0
///     range (elements above fp8_max * 2^e then saturate); NaN -> 0xFF, +Inf -> 0xFE, 0 -> 0.
///   torchao EVEN rule (mx_formats to_mx, ScaleCalculationMode.EVEN): the fp32 bits of amax plus
///     2^(22 - mantissa bits), the mantissa dropped (amax rounded half up to the element's
///     precision, which may carry into the next binade), then 2^(exponent - emax), clamped to
///     [0, 254]; NaN -> 0xFF.
FP8EMU_HD std::uint8_t mxfp8_scale_code(float amax, FormatSpec f, E8M0Rule rule, float rcp_max) {
  if (rule == E8M0Rule::kTransformerEngine) return e8m0_round_up_from_f32_bits(f32_to_bits(mul_rn(amax, rcp_max)));
  if (rule == E8M0Rule::kEven) {
    const std::uint32_t a = f32_to_bits(amax) & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return kE8M0NaN;
    const int e = int(((a + (1u << (22 - f.mantissa_bits))) & 0x7F800000u) >> 23);
    const int code = e - f.emax();
    return std::uint8_t(code < 0 ? 0 : code > int(kE8M0MaxCode) ? int(kE8M0MaxCode) : code);
  }
  const std::uint32_t u = f32_to_bits(amax) & 0x7FFFFFFFu;
  if (u > 0x7F800000u) return kE8M0NaN;
  if (u == 0x7F800000u) return kE8M0MaxCode;
  if (u == 0) return 0;
  const int e = int(u >> 23);
  const int floor_log2 = e != 0 ? e - 127 : bit_length(u & 0x7FFFFFu) - 1 - 149;  // subnormal amax
  const int code = floor_log2 - f.emax() + kE8M0Bias;
  return std::uint8_t(code < 0 ? 0 : code > int(kE8M0MaxCode) ? int(kE8M0MaxCode) : code);
}

/// Amax of tile (bi, bj) of a row-major [rows, cols] input cut into tile x tile tiles (the last row
/// and column of tiles may be partial); NaN ignored.
FP8EMU_HD float tile_amax(const float* x, int rows, int cols, int tile, int bi, int bj) {
  std::uint32_t m = 0;
  for (int r = bi * tile; r < rows && r < (bi + 1) * tile; ++r)
    for (int c = bj * tile; c < cols && c < (bj + 1) * tile; ++c)
      m = max_u32(m, amax_bits(x[std::size_t(r) * std::size_t(cols) + std::size_t(c)]));
  return bits_to_f32(m);
}

/// Index of the tile holding element (r, c), in the row-major [ceil(rows/tile), tc] tile grid.
FP8EMU_HD std::size_t tile_index(int r, int c, int tile, int tc) {
  return std::size_t(r / tile) * std::size_t(tc) + std::size_t(c / tile);
}

/// The scale and scale_inv of one Float8BlockScaling block or tile: compute_scale_from_amax with
/// value_for_inf = FLT_MAX (TE recipe_common.cuh), scale_inv = RN(1 / scale).
struct BlockScale {
  float scale, scale_inv;
};
FP8EMU_HD BlockScale block_scale(float amax, float fp8_max, bool pow2, float epsilon) {
  const float s = compute_scale_from_amax(amax, fp8_max, pow2, epsilon, FLT_MAX);
  return BlockScale{s, div_rn(1.0f, s)};
}

/// The numerator of NVFP4's tensor scale for element format f: fl32(E4M3 max * element max), the
/// product exact in fp32 (TE's 2688 for E2M1 elements).
FP8EMU_HD constexpr float nvfp4_numerator(FormatSpec f) {
  return float(kSpecE4M3.max_finite()) * float(f.max_finite());
}

/// NVFP4's fp32 tensor scale S_enc from the tensor's amax (TE core_nvfp4.cuh
/// compute_global_encode_scaling_factor_FP4): S_enc = min(RN(numerator / amax), FLT_MAX), numerator
/// = fl32(E4M3 max * element max) = 2688 for E2M1; S_enc = 1 when amax is 0 or S_enc is 0 (amax =
/// +Inf). amax is a max of amax_bits, so never NaN.
FP8EMU_HD float nvfp4_tensor_scale(float amax, float numerator) {
  float s = div_rn(numerator, amax);
  if (s > FLT_MAX) s = FLT_MAX;
  return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

/// How the scale of a block is found from its amax: MXFP8 (E8M0, TE or OCP rule), an fp32 scale
/// (Float8BlockScaling), or NVFP4's E4M3 block scale under an fp32 tensor scale. Passed by value to
/// device code.
struct BlockRule {
  enum Kind : std::uint8_t { kMxfp8Te, kMxfp8Ocp, kMxfp8Even, kFloat, kNvfp4 } kind = kFloat;
  float rcp_max = 0.0f;  ///< MXFP8 TE rule: fl32(1 / fp8_max). kNvfp4: fl32(1 / element max).
  float fp8_max = 0.0f;  ///< kFloat: compute_scale_from_amax's fp8_max.
  bool pow2 = false;     ///< kFloat: power-of-2 scales.
  float epsilon = 0.0f;  ///< kFloat: amax_epsilon.
  float numerator = 0.0f;  ///< kNvfp4: fl32(E4M3 max * element max), S_enc's numerator (2688).
  /// kNvfp4: the tensor's amax, in the memory of the device that casts (the device computes it
  /// before the blocks; every block reads it).
  const float* tensor_amax = nullptr;
  /// E2M1 elements rounded stochastically (TE's NVFP4 gradients) with the bits of stream `sr`
  /// (core/philox.hpp); 1 x 16 blocks only.
  bool stochastic = false;
  SrStream sr;

  /// The MXFP8 rule for element format f (te_rule: TE's round-up, else OCP's floor).
  static constexpr BlockRule mxfp8(FormatSpec f, E8M0Rule e8m0_rule) {
    BlockRule r;
    r.kind = e8m0_rule == E8M0Rule::kTransformerEngine ? kMxfp8Te
             : e8m0_rule == E8M0Rule::kOcp             ? kMxfp8Ocp
                                                       : kMxfp8Even;
    r.rcp_max = float(1.0 / f.max_finite());  // TE Quantized_Limits::max_norm_rcp
    return r;
  }
  /// The Float8BlockScaling rule for element format f.
  static constexpr BlockRule fp32_scale(FormatSpec f, bool pow2_scales, float amax_epsilon) {
    BlockRule r;
    r.kind = kFloat;
    r.fp8_max = float(f.max_finite());
    r.pow2 = pow2_scales;
    r.epsilon = amax_epsilon;
    return r;
  }
  /// NVFP4's rule for element format f (E2M1 in TE): E4M3 block scales under the fp32 tensor scale
  /// of the amax at `tensor_amax` (null until the device has computed it).
  static constexpr BlockRule nvfp4(FormatSpec f, const float* tensor_amax) {
    BlockRule r;
    r.kind = kNvfp4;
    r.rcp_max = 1.0f / float(f.max_finite());  // TE: fl32(1 / element max)
    r.numerator = nvfp4_numerator(f);
    r.tensor_amax = tensor_amax;
    return r;
  }
  FP8EMU_HD constexpr bool is_mxfp8() const { return kind == kMxfp8Te || kind == kMxfp8Ocp || kind == kMxfp8Even; }
  /// The E8M0 rule of an MXFP8 kind.
  FP8EMU_HD constexpr E8M0Rule e8m0_rule() const {
    return kind == kMxfp8Te ? E8M0Rule::kTransformerEngine : kind == kMxfp8Ocp ? E8M0Rule::kOcp : E8M0Rule::kEven;
  }
  /// Whether the block scales sit under a tensor scale (the device computes the tensor's amax first).
  FP8EMU_HD constexpr bool has_tensor_scale() const { return kind == kNvfp4; }
};

/// The scale of one block with this amax under `rule`: stores the block's scale_inv in *scale_inv
/// and, for MXFP8 rules, its E8M0 code in *e8m0 (may be null otherwise), and returns the multiplier
/// its elements are cast with (cast_element's mult).
///   kNvfp4 (TE core_nvfp4.cuh, in TE's order): S_enc = nvfp4_tensor_scale(tensor amax),
///   S_dec = RN(1 / S_enc); the block scale S_dec_b = E4M3 satfinite RN of
///   min(RN(amax * RN(S_enc * fl32(1 / element max))), FLT_MAX); multiplier
///   min(RN(1 / RN(S_dec_b * S_dec)), FLT_MAX) (FLT_MAX when S_dec_b is 0). *scale_inv = S_dec_b
///   (exact; TE's NVFP4 scale_inv is this E4M3 value); dequantize with nvfp4_dequant_scale.
FP8EMU_HD float block_rule_scale(float amax, FormatSpec f, const BlockRule& rule, float* scale_inv,
                                 std::uint8_t* e8m0) {
  if (rule.kind == BlockRule::kFloat) {
    const BlockScale bs = block_scale(amax, rule.fp8_max, rule.pow2, rule.epsilon);
    *scale_inv = bs.scale_inv;
    return bs.scale;
  }
  if (rule.kind == BlockRule::kNvfp4) {
    const float s_enc = nvfp4_tensor_scale(*rule.tensor_amax, rule.numerator);
    const float s_dec = div_rn(1.0f, s_enc);
    float sb = mul_rn(amax, mul_rn(s_enc, rule.rcp_max));
    if (sb > FLT_MAX) sb = FLT_MAX;
    const float s_dec_b = fp8_to_f32(f32_to_fp8(sb, kSpecE4M3, Saturation::kSatFinite), kSpecE4M3);
    *scale_inv = s_dec_b;
    const float inv = div_rn(1.0f, mul_rn(s_dec_b, s_dec));
    return inv > FLT_MAX ? FLT_MAX : inv;
  }
  const std::uint8_t code = mxfp8_scale_code(amax, f, rule.e8m0_rule(), rule.rcp_max);
  *e8m0 = code;
  *scale_inv = bits_to_f32(e8m0_to_f32_bits(code));
  return bits_to_f32(e8m0_reciprocal_f32_bits(code));
}

/// The dequantization multiplier of an NVFP4 block (TE dequantize_nvfp4.cuh): RN(RN(S_dec_b *
/// tensor amax) * fl32(1 / numerator)), so a code decodes to RN(decode(q) * this). TE uses the amax
/// here, not 1 / S_enc.
FP8EMU_HD float nvfp4_dequant_scale(float s_dec_b, float tensor_amax, float numerator) {
  return mul_rn(mul_rn(s_dec_b, tensor_amax), 1.0f / numerator);
}

/// The NVFP4 GEMM's alpha from its operands' tensor amaxes (TE recipe/nvfp4.cu
/// compute_nvfp4_per_tensor_scale_kernel, alpha_in = 1): RN(RN(amax_a * amax_b) * fl32(1 /
/// (num_a * num_b))), left to right in fp32 (num_a * num_b is exact in fp32 for every pair of
/// element formats: their maxima have small odd parts).
FP8EMU_HD float nvfp4_gemm_alpha(float amax_a, float num_a, float amax_b, float num_b) {
  return mul_rn(mul_rn(amax_a, amax_b), 1.0f / (num_a * num_b));
}

/// Casts block `blk` of view row r of a row-major [rows, cols] input x: the block's amax, its scale
/// by `rule`, then each element. Writes the codes into codes [n, K] (row-major), the block's
/// scale_inv into scale_inv [n, nb] and, for MXFP8 rules, its E8M0 code into e8m0 [n, nb] (may be
/// null otherwise); adds the counts. A final partial block is scaled by its own amax.
FP8EMU_HD void cast_view_block(const float* x, bool rowwise, int cols, int r, int blk, int block, int K, int nb,
                               FormatSpec f, const BlockRule& rule, std::uint8_t* codes, float* scale_inv,
                               std::uint8_t* e8m0, CastCounts& counts) {
  const int k0 = blk * block, k1 = min_int(K, k0 + block);
  const float amax = view_block_amax(x, rowwise, cols, r, k0, k1);
  const std::size_t si = std::size_t(r) * std::size_t(nb) + std::size_t(blk);
  const float mult = block_rule_scale(amax, f, rule, scale_inv + si, rule.is_mxfp8() ? e8m0 + si : nullptr);
  if (rule.stochastic) {  // one generate4 per 16-element block
    bool swapped = false;
    const SrBlockBits bits = te_sr_block(rule.sr, r, blk, &swapped);
    for (int kk = k0; kk < k1; ++kk)
      codes[std::size_t(r) * std::size_t(K) + std::size_t(kk)] = cast_element_sr(
          x[view_index(rowwise, cols, r, kk)], mult, f, bits.bits(kk - k0, swapped, rule.sr.transposed), counts);
    return;
  }
  for (int kk = k0; kk < k1; ++kk)
    codes[std::size_t(r) * std::size_t(K) + std::size_t(kk)] =
        cast_element(x[view_index(rowwise, cols, r, kk)], mult, f, counts);
}

}  // namespace fp8emu::core
