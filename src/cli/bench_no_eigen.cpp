// `fp8emu bench gemm` in a build without Eigen (its baseline): says so (see bench.hpp).
#include "bench.hpp"

namespace fp8emu::cli {

int run_bench_gemm(const std::vector<int>&, int, std::ostream& out) {
  out << "fp8emu bench gemm: this fp8emu was built without Eigen, the benchmark's baseline; install "
         "libeigen3-dev (or stage it with scripts/gpu-check --stage-deps) and reconfigure\n";
  return 2;
}

}  // namespace fp8emu::cli
