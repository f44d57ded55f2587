// `fp8emu bench gpu`: GEMM throughput per precision (cuBLASLt), the quantize kernel's bandwidth and
// one MLP training step's GEMM and cast work, FP8 against BF16.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fp8emu::cli {

struct BenchGpuOptions {
  std::vector<int> sizes{1024, 2048, 4096, 8192, 16384};  ///< M = N = K of the GEMM sweep.
  int repeat = 5;             ///< timed runs per measurement (after one warm-up run)
  double budget_seconds = 150.0;  ///< the GEMM sweep stops before a size predicted to exceed it; the casts and the
                                  ///< MLP step run while it is not spent (not the train-lm table)
  /// Steps per run of the train-lm table (bench lm's large configuration: d-model 1024, 8 layers, 8
  /// heads, ffn 4096, sequence 512, batch 32, bf16 activations, device-resident, FP32/BF16 GEMMs on
  /// cuBLASLt); 0 leaves the table out.
  int lm_steps = 6;
  std::string lm_text;  ///< Its corpus; empty: train-lm's default.
};

/// Without a usable GPU: prints why to `err` and returns 2. Otherwise prints Markdown tables:
/// TFLOP/s of cuBLASLt FP8 (fast accumulation and not), BF16, TF32, FP32 and fp8emu's mma.sync
/// kernel per size; the quantize kernel's GB/s against a device-to-device cudaMemcpy; one MLP step
/// (GEMMs and casts) in FP8 (casts from fp32; bf16 activations with the casts fused into their
/// producers) and BF16; train-lm's step in FP32, BF16 and every FP8 recipe (run_bench_lm). Returns 0
/// (1 if every measurement failed).
int run_bench_gpu(const BenchGpuOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
