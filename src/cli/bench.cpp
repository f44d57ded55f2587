// `fp8emu bench gemm` (see bench.hpp).
#include "bench.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fp8emu/emulation/gemm_models.hpp"

namespace fp8emu::cli {
namespace {

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_bench_gemm(const std::vector<int>& sizes, int repeat, std::ostream& out) {
  for (int n : sizes)
    if (n < 1 || n > 16384) {
      out << "fp8emu bench gemm: error: --sizes must be in [1, 16384], got " << n << "\n";
      return 2;
    }
  if (repeat < 1 || sizes.empty()) {
    out << "fp8emu bench gemm: error: --repeat must be >= 1 and --sizes not empty\n";
    return 2;
  }
#ifdef _OPENMP
  Eigen::setNbThreads(omp_get_max_threads());
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
  char line[256];
  std::snprintf(line, sizeof line, "GEMM M = N = K, %d threads, best of %d; GFLOP/s = 2 M N K / seconds\n", threads,
                repeat);
  out << line << "  size  eigen_sgemm  fp32_model  hopper_model  fp32/eigen  hopper/eigen\n";
  double first_fp32 = 0, first_hopper = 0;
  for (std::size_t si = 0; si < sizes.size(); ++si) {
    const int n = sizes[si];
    std::mt19937 g(1);
    Eigen::MatrixXf A = Eigen::MatrixXf::Random(n, n), B = Eigen::MatrixXf::Random(n, n), C(n, n);
    std::vector<std::uint8_t> qa(std::size_t(n) * n), qb(qa.size());
    for (auto& c : qa) c = std::uint8_t(g() & 0x77);  // finite E4M3 codes
    for (auto& c : qb) c = std::uint8_t(g() & 0x77);
    std::vector<float> D(qa.size());
    const double flop = 2.0 * n * double(n) * n;
    // Rounds interleave the baseline and the models, so that all three see the same machine
    // conditions; the best time of each is kept.
    double t_eigen = 1e300, t_fp32 = 1e300, t_hopper = 1e300;
    for (int r = 0; r < repeat; ++r) {
      t_eigen = std::min(t_eigen, seconds([&] { C.noalias() = A * B; }));
      t_fp32 = std::min(t_fp32, seconds([&] {
        emu::gemm_fp8_tn(n, n, n, qa.data(), Format::kE4M3, 1, qb.data(), Format::kE4M3, 1,
                         {emu::Accumulation::kFp32, 0}, D.data());
      }));
      t_hopper = std::min(t_hopper, seconds([&] {
        emu::gemm_fp8_tn(n, n, n, qa.data(), Format::kE4M3, 1, qb.data(), Format::kE4M3, 1,
                         {emu::Accumulation::kHopper, 0}, D.data());
      }));
    }
    const double ge = flop / t_eigen / 1e9, gf = flop / t_fp32 / 1e9, gh = flop / t_hopper / 1e9;
    std::snprintf(line, sizeof line, "%6d %12.2f %11.2f %13.2f %11.3f %13.3f\n", n, ge, gf, gh, gf / ge, gh / ge);
    out << line << std::flush;
    if (si == 0) {
      first_fp32 = gf / ge;
      first_hopper = gh / ge;
    }
  }
  std::snprintf(line, sizeof line, "hopper_vs_eigen_sgemm: %.3f\nfp32_vs_eigen_sgemm: %.3f\n", first_hopper, first_fp32);
  out << line;
  return 0;
}

}  // namespace fp8emu::cli
