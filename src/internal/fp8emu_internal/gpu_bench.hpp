/// \file gpu_bench.hpp
/// \brief GPU timings for `fp8emu bench gpu`: cuBLASLt GEMM throughput per precision, the quantize
/// kernel's bandwidth against a device-to-device copy, and the GEMM and cast work of one MLP
/// training step in FP8 and in BF16. Inputs are generated on the device; times come from CUDA
/// events around `reps` runs after one warm-up run.
///
/// Available only when fp8emu is built with CUDA; needs compute capability >= 8.9. Errors of a
/// measurement (for example cuBLASLt rejecting a shape, or running out of memory) are returned in
/// `error`, not thrown, so that one failure does not end a sweep. No CUDA header is included here.
#pragma once

#include <cstddef>
#include <string>

namespace fp8emu::cuda {

/// The GEMMs of the throughput sweep (all TN, M = N = K, through cuBLASLt unless noted).
enum class BenchGemm {
  kFp8FastAccum,  ///< E4M3 x E4M3 -> bf16, per-tensor scales, CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1.
  kFp8,           ///< The same without fast accumulation (cuBLASLt's periodic promotion).
  kBf16,          ///< bf16 x bf16 -> bf16, fp32 accumulation.
  kTf32,          ///< fp32 data, CUBLAS_COMPUTE_32F_FAST_TF32.
  kFp32,          ///< fp32, CUBLAS_COMPUTE_32F.
  kMmaSync,       ///< fp8emu's mma.sync m16n8k32 E4M3 kernel (fp32 output; not tuned for speed).
};
const char* to_string(BenchGemm g);

struct Timing {
  double seconds = 0.0;  ///< Mean time of one run.
  double rate = 0.0;     ///< TFLOP/s for GEMMs (2 M N K / seconds / 1e12), GB/s for memory kernels.
  std::string error;     ///< Non-empty when the measurement could not be made.
};

/// The name of the GPU the benchmarks run on.
std::string bench_gpu_name();

/// One GEMM of size n^3; `reps` timed runs.
Timing bench_gemm(BenchGemm kind, int n, int reps);

/// The quantize kernel (fp32 -> E4M3 with amax and counts) over n floats: rate = (4 + 1) n bytes / s.
Timing bench_quantize(std::size_t n, int reps);
/// The fused cast-transpose kernel (Device::cast_transpose: fp32 -> E4M3 row-wise and column-wise
/// codes, amax and counts) on a [rows, cols] matrix: rate = (4 + 1 + 1) rows cols bytes / s.
Timing bench_cast_transpose(int rows, int cols, int reps);
/// The fused two-axis block cast (Device::block_cast with both views for `mxfp8`, E8M0 scales by TE's
/// rule; else 1 x 128 blocks with pow2 fp32 scales): fp32 -> E4M3 row-wise
/// and column-wise codes with their scales and counts, on a [rows, cols] matrix. rate = bytes read
/// + written / s: (4 + 1 + 1) rows cols plus the scales of both copies (MXFP8: a 4-byte scale_inv
/// and a 1-byte E8M0 code per 32 elements and copy; 1x128: a 4-byte scale_inv per 128 and copy).
Timing bench_block_cast_both(int rows, int cols, bool mxfp8, int reps);
/// The one-pass 128 x 128 tile cast (block_cast's kernel for tiles: fp32 -> E4M3 row-wise and
/// column-wise codes, pow2 tile scales, counts) on a [rows, cols] matrix: rate = (4 + 1 + 1) rows
/// cols bytes plus 8 per tile (scale and scale_inv) / s.
Timing bench_tile_cast_both(int rows, int cols, int reps);
/// cudaMemcpy device to device of n floats: rate = 2 * 4 n bytes / s (read and write).
Timing bench_memcpy(std::size_t n, int reps);

/// One training step's GEMM and cast work for an MLP of `layers` square Linear layers of `width`
/// on a batch of `batch` rows: per layer fprop, dgrad and wgrad GEMMs. FP8 (TE delayed scaling):
/// each of x, W, dy is cast once into its row-wise and K-major (transposed) codes by the fused
/// cast-transpose kernel (amax recorded; E4M3, E5M2 for dy), then three FP8 GEMMs (fprop fast accumulation, dgrad and wgrad
/// without), bf16 outputs. BF16: the same three GEMMs on bf16 operands of the same shapes. Neither
/// includes activations, the loss or the optimizer.
/// fp8_fused: the FP8 step as Transformer Engine runs it with bf16 activations and the casts fused
/// into their producers: the first input is a bf16 tensor cast once (cast_transpose from bf16);
/// every fprop GEMM but the last writes the next layer's E4M3 input itself (cuBLASLt's FP8 output
/// with a D scale and the amax of D), whose transposed copy for wgrad is an FP8 transpose (1 byte
/// read, 1 written); each weight is cast from its fp32 master once per step (cast_transpose); each
/// gradient arrives in bf16 from the dgrad of the layer above and is cast once (cast_transpose from
/// bf16, E5M2). The layers form one chain forward and back, as in the BF16 step.
struct StepTiming {
  Timing fp8, fp8_fused, bf16;
};
StepTiming bench_mlp_step(int batch, int width, int layers, int reps);

/// Checks the bf16-input cast_transpose kernel that fp8_fused uses against the emulator
/// (emu::quantize_f32_2d of the exactly widened values): both copies' codes,
/// the amax and the counts, E4M3 and E5M2, on a [rows, cols] matrix of bf16 values spanning
/// normals, subnormals, overflow, zeros, infinities and NaN. Empty when equal, else the first
/// difference.
std::string check_bf16_cast_transpose(int rows, int cols);

}  // namespace fp8emu::cuda
