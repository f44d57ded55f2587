// `fp8emu bench gemm`: GEMM throughput of the accumulation models against OpenBLAS's and Eigen's fp32 GEMMs.
// `fp8emu bench convert`: the bulk fp32 -> FP8 cast against CUDA's host code and a copy pass.
#pragma once

#include <cstddef>
#include <ostream>
#include <vector>

namespace fp8emu::cli {

/// Times the fp32 baselines, measured in the same run: OpenBLAS's cblas_sgemm (runtime-dispatched
/// kernels; when the build found OpenBLAS), Eigen's product built with fp8emu's flags, and Eigen built
/// for the best x86-64 ISA level the processor runs (x86-64-v4 or -v3, a dlopen'd module; when there
/// is one), then the fp32 model and the Hopper model (fast accumulation), at M = N = K = each size,
/// on all OpenMP threads; best of `repeat` interleaved rounds. Checks that the baselines agree
/// (returns 1 if not). Prints a table with the ratios against the fastest baseline of each size and,
/// last, `best_baseline: openblas_sgemm|eigen_sgemm|eigen_isa_sgemm`, `hopper_vs_best_sgemm: X` and
/// `fp32_vs_best_sgemm: Y` (GFLOP/s ratios at the first size). Returns 2 for bad arguments.
int run_bench_gemm(const std::vector<int>& sizes, int repeat, std::ostream& out);

/// fp32 -> E4M3 (__NV_SATFINITE) with a per-tensor scale and the amax, over `elements` values
/// (deterministic normal-distributed floats times a scale that makes about 4 % of them saturate),
/// timed in one run, best of `repeat` interleaved rounds:
///   cuda_host    CUDA's __nv_cvt_float_to_fp8(x * scale) and fmaxf amax, scalar loop, 1 thread
///                (only when cuda_fp8.h was found at build time);
///   core_scalar  core::encode_f32_bits of the product in a plain loop, 1 thread;
///   bulk         emu::quantize_f32 at 1 and at 2 threads;
///   copy         a pass reading the same floats and writing one byte each (the top byte), 2 threads.
/// Checks that cuda_host, core_scalar and bulk give identical bytes and amax (else prints an error
/// and returns 1). Prints a table (ns/element, GB/s counting 4 bytes read and 1 written per element,
/// M elements/s) and, last, `speedup_vs_cuda_host_per_thread: X` (cuda_host time / bulk time at 1
/// thread; omitted when CUDA's header is unavailable) and `fraction_of_copy_bandwidth: Y` (copy
/// time / bulk time at 2 threads). Returns 2 for bad arguments.
int run_bench_convert(std::size_t elements, int repeat, std::ostream& out);

}  // namespace fp8emu::cli
