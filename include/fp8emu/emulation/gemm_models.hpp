/// \file gemm_models.hpp
/// \brief Scaled FP8 GEMM with a selectable accumulation model, mirroring cuBLASLt's FP8 matmul
/// with per-tensor scales: D = RN(acc(A, B) * RN(scale_inv_a * scale_inv_b)), alpha = 1, beta = 0.
///
/// Layout: TN, the one Hopper's FP8 GEMM takes: A Shape [M, K] and B Shape [N, K], both row-major
/// (K contiguous); D Shape [M, N] row-major, D[i,j] = sum_k A[i,k] B[j,k]. E5M2 x E5M2 is rejected,
/// as cuBLASLt rejects it.
///
/// Accumulation models (the value of acc for one output element) are the rows of
/// core/accumulation.hpp: exact, fp32 (sequential), hopper (wgmma k32 block FMA, blocks of 32),
/// ada (mma.sync m16n8k32, blocks of 16), hopper-mma-sync (Hopper's mma.sync: fp16 steps, C added
/// last); every element runs the one per-element body of core/dot.hpp that the CUDA kernels also run.
/// GEMM-level wrappers (GemmAccumulation), innermost first:
///   promotion_interval (TE's split accumulator):
///     0 - fast accumulation (cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1, TE fprop default): the
///         whole K (of a split-K range) stays in the tensor-core chain;
///     N - split accumulator (TE use_split_accumulator; CUTLASS's default 128 = 4 wgmma): each run of
///         N K-elements is chained from zero and added to an fp32 accumulator with one RN fp32 add,
///         in increasing K. N must be a multiple of the model's block. With kFp32 the same two-level
///         sum applies (runs of N summed in fp32, then added); kExact takes no promotion.
///   split_k (cuBLASLt's split-K, CUBLASLT_ALGO_CONFIG_SPLITK_NUM; measured on an H200):
///     1 - no split;
///     S - K cut into ranges of roundup(ceil(K / S), 128) elements (the last non-empty one short,
///         trailing ones empty); each range accumulated as above from zero, its promotion runs
///         starting at the range's start; acc = the fp32 RN sum of the range partials in K order.
///         The scale product then scales acc, as without split-K. kExact takes no split-K.
/// NaN/Inf inputs follow core/mma_model.hpp for the tensor-core models and IEEE fp32 arithmetic for
/// kFp32/kExact (kExact: any NaN, Inf*0 or +Inf with -Inf -> NaN, else the Inf).
/// Determinism: output elements are independent; results are identical for any thread count.
#pragma once

#include <cstdint>
#include <string>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::emu {

/// The model selector of core/accumulation.hpp, under its historical emu:: name.
using ::fp8emu::Accumulation;

/// The model named s (a row name of kAccumulationModels: "exact", "fp32", "hopper", "ada",
/// "hopper-mma-sync").
/// \throws fp8emu::Error naming the accepted values.
Accumulation parse_accumulation(const std::string& s);
/// The model's name (its row's `name`).
const char* to_string(Accumulation a);
/// The accepted names, comma-separated, in table order (for help texts and errors).
std::string accumulation_names();

/// The operand layout of an FP8 GEMM: TN, D = A B^T with B as [N, K] (the only layout Hopper's and
/// Ada's FP8 GEMMs take), or NN, D = A B with B as [K, N] (transposed to TN first, an exact copy).
enum class GemmLayout : std::uint8_t { kTn, kNn };
/// "tn" | "nn". \throws fp8emu::Error "unknown <what> '<s>' (accepted: tn, nn)".
GemmLayout parse_gemm_layout(const std::string& s, const char* what);

/// An accumulation model plus the GEMM-level wrappers: promotion and split-K (see the file comment).
struct GemmAccumulation {
  Accumulation model = Accumulation::kFp32;
  int promotion_interval = 0;  ///< 0: fast accumulation; N > 0: promote every N K-elements.
  int split_k = 1;             ///< K split into this many ranges, partials summed in fp32 (1: no split).
};

/// TE's defaults (pytorch/module/base.py _2X_ACC_FPROP/DGRAD/WGRAD) for a tensor-core model:
/// fprop fast accumulation, dgrad and wgrad split accumulator every 128.
inline GemmAccumulation te_fprop(Accumulation m) { return {m, 0}; }
inline GemmAccumulation te_dgrad(Accumulation m) { return {m, 128}; }
inline GemmAccumulation te_wgrad(Accumulation m) { return {m, 128}; }

/// The argument checks of gemm_fp8_tn, shared by every backend (same messages).
/// \throws fp8emu::Error for E5M2 x E5M2, negative sizes, a promotion interval that is negative,
///         given to the exact model, or not a multiple of the model's block, or a split_k below 1
///         or above 1 for the exact model.
void check_gemm_tn(int M, int N, int K, Format fa, Format fb, const GemmAccumulation& acc);

/// Whether an FP8 GEMM takes this operand pair: both OCP FP8 formats or both FNUZ ones (ROCm's
/// hipBLASLt pairs), not both E5M2 (cuBLASLt and TE reject E5M2 x E5M2; the tensor cores take every
/// other pair; the same for E5M2FNUZ).
constexpr bool gemm_operand_pair_supported(Format a, Format b) {
  const bool ocp = is_fp8(a) && is_fp8(b);
  const bool fnuz = is_fp8_or_fnuz(a) && is_fp8_or_fnuz(b) && !is_fp8(a) && !is_fp8(b);
  return (ocp && !(a == Format::kE5M2 && b == Format::kE5M2)) ||
         (fnuz && !(a == Format::kE5M2FNUZ && b == Format::kE5M2FNUZ));
}

/// D = RN(acc * RN(scale_inv_a * scale_inv_b)) (see the file comment).
/// \throws fp8emu::Error as check_gemm_tn.
void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const GemmAccumulation& acc, float* D);

/// Element type of D (cuBLASLt's D type). kFp8: codes of GemmEpilogue::output_format.
enum class GemmOutput : std::uint8_t { kFp32, kBf16, kFp16, kFp8 };

/// cuBLASLt-style epilogue of the FP8 matmul, applied to each element t of the scaled product:
///   t = RN(acc * RN(scale_inv_a * scale_inv_b))
///   if alpha != 1:  t = RN(alpha * t)
///   if beta != 0:   t = RN(t + RN(beta * C[i,j]))       (C is not read when beta == 0, as cuBLAS)
///   if bias:        t = RN(t + bias[j])
///   amax_d = max(amax_d, |t|)  (NaN ignored; before d_scale, as CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)
///   D = t (fp32), RNE to bf16 / fp16, or Q(RN(t * d_scale)) with __NV_SATFINITE for FP8 outputs.
/// The order of these roundings inside cuBLASLt is not documented; this is fp8emu's choice.
struct GemmEpilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* C = nullptr;     ///< Shape: [M, N] row-major fp32; needed when beta != 0.
  const float* bias = nullptr;  ///< Shape: [N] fp32, or null.
  GemmOutput output = GemmOutput::kFp32;
  Format output_format = Format::kE4M3;  ///< kFp8 outputs only: an OCP FP8 format (is_fp8).
  float d_scale = 1.0f;         ///< FP8 outputs only (the D scale; D's scale_inv is RN(1/d_scale)).
  float* amax_d = nullptr;      ///< If set, max-accumulated with |t| (not reset first).
};

/// The scaled GEMM with an epilogue. D points to M*N elements of the output type: float, uint16
/// bits (bf16, fp16) or uint8 codes (FP8). \throws as gemm_fp8_tn, when beta != 0 without C, and
///         for a kFp8 output whose output_format is not an FP8 format (named).
void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const GemmAccumulation& acc, const GemmEpilogue& epilogue, void* D);

/// bf16 bits of an fp32, round to nearest even (NaN -> 0x7FC0 with the sign kept).
std::uint16_t f32_to_bf16_bits(float x);

/// One output element's accumulation (no scales): the dot product of a[0..K) and b[0..K) with the
/// model and both wrappers (core::dot_split_k). Arguments are not checked.
float dot_fp8(const std::uint8_t* a, Format fa, const std::uint8_t* b, Format fb, int K, const GemmAccumulation& acc);

}  // namespace fp8emu::emu
