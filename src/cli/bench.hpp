// `fp8emu bench gemm`: GEMM throughput of the accumulation models against Eigen's fp32 GEMM.
#pragma once

#include <ostream>
#include <vector>

namespace fp8emu::cli {

/// Times Eigen's sgemm (the baseline, measured in the same run), the fp32 model and the Hopper
/// model (fast accumulation) at M = N = K = each size; best of `repeat` runs. Prints a table and,
/// last, `hopper_vs_eigen_sgemm: X` and `fp32_vs_eigen_sgemm: Y` (GFLOP/s ratios at the first size).
int run_bench_gemm(const std::vector<int>& sizes, int repeat, std::ostream& out);

}  // namespace fp8emu::cli
