// `fp8emu doctor` (see cmd_doctor.hpp).
#include "cmd_doctor.hpp"

#include <omp.h>

#include <iostream>

#include "commands.hpp"
#include "fp8emu/backend/select.hpp"

namespace fp8emu::cli {
namespace {

std::string cuda_version(int v) {  // 13000 -> "13.0"
  return v == 0 ? "none" : std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

int run_doctor(std::ostream& out) {
  const backend::CudaStatus& s = backend::cuda_status();
  out << "fp8emu doctor\n";
  out << "  build:      CUDA " << (s.built ? "compiled in (runtime " + cuda_version(s.runtime_version) + ")" : "not compiled in")
      << "\n";
  if (s.built) {
    out << "  cuBLASLt:   " << s.cublaslt_version << "\n";
    out << "  driver:     " << (s.driver_version ? "CUDA " + cuda_version(s.driver_version) : "none") << "\n";
    if (!s.error.empty()) out << "  probe:      " << s.error << "\n";
    out << "  GPUs:       " << s.gpus.size() << "\n";
    for (const backend::GpuInfo& g : s.gpus) {
      out << "    [" << g.index << "] " << g.name << ", sm_" << g.cc_major << g.cc_minor << ", "
          << g.memory_bytes / (1024 * 1024) << " MiB: FP8 mma " << (g.fp8_mma() ? "yes" : "no") << ", wgmma "
          << (g.wgmma() ? "yes" : "no") << ", MXFP8 MMA " << (g.mxfp8() ? "yes" : "no") << "\n";
    }
  }
  out << "  OpenMP:     " << omp_get_max_threads() << " threads\n";
  out << "  backends:\n";
  out << "    reference  yes (FP32 on the CPU)\n";
  out << "    emulated   yes (bit-exact FP8 on the CPU)\n";
  out << "    cuda       " << (s.usable() ? "yes" : "no: " + s.why_not()) << "\n";
  return 0;
}

Command add_doctor(CLI::App& app) {
  CLI::App* doctor = app.add_subcommand("doctor", "What this machine offers: CUDA, GPUs, FP8 features, backends");
  return {doctor, [] { return run_doctor(std::cout); }};
}

const CommandRegistrar registered{60, add_doctor};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
