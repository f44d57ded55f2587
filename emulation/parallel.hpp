// Private: when the CPU kernels fork OpenMP threads. Small loops run on the calling thread: a
// fork/join costs microseconds unloaded and far more when other processes compete for the cores
// (waiting threads spin), while splitting never changes results (every kernel is thread-count
// invariant).
#pragma once

#include <cstddef>

namespace fp8emu::emu::detail {

/// Elementwise loops with fewer elements than this run single-threaded.
inline constexpr std::ptrdiff_t kParallelMinElements = std::ptrdiff_t(1) << 15;
/// GEMMs with fewer multiply-adds than this run single-threaded.
inline constexpr double kParallelMinMacs = double(1 << 18);

}  // namespace fp8emu::emu::detail
