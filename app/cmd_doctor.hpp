// `fp8emu doctor`: what this machine and build offer to fp8emu.
#pragma once

#include <ostream>

namespace fp8emu::cli {

/// Prints the CUDA toolkit this build used, driver, GPUs with compute capability and FP8 features,
/// cuBLASLt version, OpenMP threads, and which backends can run (and why not). Returns 0 whenever
/// the machine could be inspected (a missing GPU is a finding, not a failure).
int run_doctor(std::ostream& out);

}  // namespace fp8emu::cli
