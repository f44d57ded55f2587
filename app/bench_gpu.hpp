// `fp8emu bench gpu`: GEMM throughput per precision (cuBLASLt), the quantize kernel's bandwidth and
// one MLP training step's GEMM and cast work, FP8 against BF16.
#pragma once

#include <ostream>
#include <vector>

namespace fp8emu::cli {

struct BenchGpuOptions {
  std::vector<int> sizes{1024, 2048, 4096, 8192, 16384};  ///< M = N = K of the GEMM sweep.
  int repeat = 5;             ///< timed runs per measurement (after one warm-up run)
  double budget_seconds = 150.0;  ///< the sweep stops before a size predicted to exceed it
};

/// Without a usable GPU: prints why to `err` and returns 2. Otherwise prints Markdown tables:
/// TFLOP/s of cuBLASLt FP8 (fast accumulation and not), BF16, TF32, FP32 and fp8emu's mma.sync
/// kernel per size; the quantize kernel's GB/s against a device-to-device cudaMemcpy; one MLP step
/// (GEMMs and casts) in FP8 and BF16. Returns 0 (1 if every measurement failed).
int run_bench_gpu(const BenchGpuOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
