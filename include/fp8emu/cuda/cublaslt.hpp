/// \file cublaslt.hpp
/// \brief Production GEMMs through NVIDIA cuBLASLt: the FP8 TN GEMM as Transformer Engine calls it
/// (per-tensor scale_inv pointers, optional fast accumulation, optional bias epilogue, fp32, bf16 or
/// E4M3 output with a D scale and the amax of D), plus BF16 and FP32 GEMMs, the baselines of
/// `fp8emu bench gpu`.
///
/// Bit-exact to the emulator on Hopper (measured on an H200 with CUDA 13 / cuBLASLt 13.1; see
/// docs/gpu.md): with FAST_ACCUM = 1 it equals emu::gemm_fp8_tn with the `hopper` model and no
/// promotion, with FAST_ACCUM = 0 the `hopper` model promoted every 128, in both cases with the
/// split-K count of the algorithm cuBLASLt ran (LtAlgo::split_k; cuBLASLt documents none of this).
/// `fp8emu validate` checks it on whatever GPU it runs on.
///
/// Available only when fp8emu is built with CUDA (FP8EMU_HAVE_CUDA); the functions need a GPU with
/// compute capability 8.9 or newer (backend::cuda_status().usable()) and throw fp8emu::Error
/// otherwise, or on any CUDA or cuBLASLt error (naming the call and the status).
///
/// Layout (row-major, as emu::gemm_fp8_tn): A Shape [M, K], B Shape [N, K], both K-contiguous;
/// D Shape [M, N]; D[i,j] = scale_inv_a * scale_inv_b * sum_k A[i,k] B[j,k] (+ bias[j]).
/// cuBLASLt's FP8 kernels need K and N to be multiples of 16 (the leading dimensions of A, B and D
/// in its column-major terms) and E4M3 for at least one operand; violations throw before any call.
/// This header includes no CUDA header: device pointers are plain pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::cuda {

/// Element type of D.
enum class LtOutput : std::uint8_t {
  kFp32,  ///< float (cuBLASLt C type fp32; D passed as C, in place, beta = 0).
  kBf16,  ///< bfloat16 bits (uint16; C type bf16; D passed as C, in place, beta = 0).
  kE4M3,  ///< E4M3 codes of RN(t * d_scale), satfinite (C type bf16, C pointer null, beta = 0: D
          ///< cannot stand in for C of another type); the only output with AMAX_D.
};

/// The algorithm cuBLASLt ran (its CUBLASLT_ALGO_CONFIG_* attributes).
struct LtAlgo {
  int split_k = 1;           ///< CUBLASLT_ALGO_CONFIG_SPLITK_NUM: K splits (1: none).
  unsigned reduction = 0;    ///< CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME (cublasLtReductionScheme_t).
  unsigned tile = 0;         ///< CUBLASLT_ALGO_CONFIG_TILE_ID (cublasLtMatmulTile_t).
  unsigned stages = 0;       ///< CUBLASLT_ALGO_CONFIG_STAGES_ID (cublasLtMatmulStages_t).
};

/// One FP8 GEMM on device memory (all pointers are device pointers).
struct LtFp8Gemm {
  int M = 0, N = 0, K = 0;
  const std::uint8_t* A = nullptr;      ///< Shape [M, K], row-major FP8 codes.
  Format format_a = Format::kE4M3;
  const float* scale_inv_a = nullptr;   ///< One fp32: A's dequantization scale.
  const std::uint8_t* B = nullptr;      ///< Shape [N, K], row-major FP8 codes.
  Format format_b = Format::kE4M3;
  const float* scale_inv_b = nullptr;   ///< One fp32.
  bool fast_accum = false;              ///< CUBLASLT_MATMUL_DESC_FAST_ACCUM.
  const std::uint16_t* bias = nullptr;  ///< Shape [N], bf16 bits (cuBLASLt's bias type for FP8), or null.
  LtOutput output = LtOutput::kFp32;
  void* D = nullptr;                    ///< Shape [M, N], row-major, of the output type.
  const float* d_scale = nullptr;       ///< One fp32 (CUBLASLT_MATMUL_DESC_D_SCALE_POINTER); kE4M3 only, required.
  /// One fp32 set to max |D| before the D scale (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER), or null.
  /// cuBLASLt computes it only for an FP8 D, so it needs output kE4M3 (checked).
  float* amax_d = nullptr;
  /// 0: the heuristic's algorithm as it comes. S >= 1: that algorithm with
  /// CUBLASLT_ALGO_CONFIG_SPLITK_NUM = S (for S > 1 with the compute-type workspace reduction,
  /// CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), checked by cublasLtMatmulAlgoCheck.
  int split_k = 0;
  LtAlgo* algo = nullptr;  ///< Host pointer; if set, receives the algorithm that ran.
};

/// The GEMM D [M, N] = A [M, K] B [N, K]^T of `output` type, every other field of LtFp8Gemm at its
/// default (no bias, no D scale or amax, the heuristic's split-K).
inline LtFp8Gemm lt_fp8_gemm(int M, int N, int K, const std::uint8_t* A, Format format_a, const float* scale_inv_a,
                             const std::uint8_t* B, Format format_b, const float* scale_inv_b, bool fast_accum,
                             LtOutput output, void* D) {
  LtFp8Gemm g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.format_a = format_a;
  g.scale_inv_a = scale_inv_a;
  g.B = B;
  g.format_b = format_b;
  g.scale_inv_b = scale_inv_b;
  g.fast_accum = fast_accum;
  g.output = output;
  g.D = D;
  return g;
}

/// A cuBLASLt handle and a 32 MiB workspace on the FP8 GPU. Each GEMM configuration (kind, shape,
/// types, flags) gets its descriptors and the heuristic's first algorithm once, reused by later
/// calls; pointers are set on every call. Calls are asynchronous on the default stream;
/// synchronize() waits. Not thread-safe.
class LtContext {
 public:
  LtContext();
  ~LtContext();
  LtContext(const LtContext&) = delete;
  LtContext& operator=(const LtContext&) = delete;

  /// The FP8 GEMM of `g` (see LtFp8Gemm). \throws fp8emu::Error on a bad shape, a negative split_k,
  /// a split-K the algorithm does not support, or a cuBLASLt error.
  void gemm_fp8_tn(const LtFp8Gemm& g);
  /// D [M, N] = A [M, K] B [N, K]^T in bf16 (bits), fp32 accumulation, bf16 output.
  void gemm_bf16_tn(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B, std::uint16_t* D);
  /// D [M, N] = A [M, K] B [K, N], all row-major (emu::gemm_f32_nn's layout), fp32 accumulation
  /// (CUBLAS_COMPUTE_32F) and output; A and B fp32, or bf16 bits with bf16_inputs. The plan is made
  /// for the pointers' common alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*). \return false, with
  /// nothing enqueued, when cuBLASLt has no plan for this shape and alignment (the caller computes D
  /// another way); \throws fp8emu::Error when the GEMM itself fails.
  bool gemm_nn(int M, int N, int K, const void* A, const void* B, float* D, bool bf16_inputs);
  /// D [M, N] = A [M, K] B [N, K]^T in fp32 (CUBLAS_COMPUTE_32F; with tf32, CUBLAS_COMPUTE_32F_FAST_TF32).
  void gemm_f32_tn(int M, int N, int K, const float* A, const float* B, float* D, bool tf32 = false);
  /// Waits for the device (cudaDeviceSynchronize).
  void synchronize();

 private:
  void set_pointers(void* desc, const LtFp8Gemm& g);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The FP8 GEMM on host memory: copies A, B (and bias, rounded to bf16 RNE) to the device, runs
/// LtContext::gemm_fp8_tn and copies D (M*N floats, bf16 bits or E4M3 codes) and, if amax_d is
/// non-null (E4M3 output only), the amax of D back. d_scale is used for the E4M3 output; split_k
/// and algo as LtFp8Gemm::split_k and LtFp8Gemm::algo.
void lt_gemm_fp8_tn_host(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                         const std::uint8_t* B, Format fb, float scale_inv_b, bool fast_accum, const float* bias,
                         LtOutput output, void* D, float d_scale = 1.0f, float* amax_d = nullptr, int split_k = 0,
                         LtAlgo* algo = nullptr);

}  // namespace fp8emu::cuda
