// The Eigen baseline of `fp8emu bench gemm` compiled for one x86-64 ISA level (CMake builds this file
// as the modules fp8emu_eigen_v3.so, -march=x86-64-v3: AVX2 + FMA, and fp8emu_eigen_v4.so,
// -march=x86-64-v4: AVX-512). bench_blas.cpp loads the best one the processor runs with dlopen.
//
// Why a dlopen'd module: Eigen is header-only, so every product instantiates its templates (weak,
// COMDAT symbols) in the object that uses it. Linked into one binary, the -march=x86-64-v4 copies
// and the baseline copies of fp8emu's own Eigen code would share mangled names and the linker would
// keep one of each: the baseline code could end up running AVX-512 instructions (or the baseline
// timing the v4 kernels). Here everything is hidden (-fvisibility=hidden) and the module is opened
// with RTLD_LOCAL, so its instantiations bind inside the module; it exports two C functions only.
#include <Eigen/Dense>

#define FP8EMU_EIGEN_EXPORT extern "C" __attribute__((visibility("default")))

/// C = A * B, n x n fp32 column-major, on `threads` threads (Eigen's OpenMP parallel product).
FP8EMU_EIGEN_EXPORT int fp8emu_eigen_sgemm(int n, const float* A, const float* B, float* C, int threads) {
  Eigen::setNbThreads(threads);
  const Eigen::Map<const Eigen::MatrixXf> a(A, n, n), b(B, n, n);
  Eigen::Map<Eigen::MatrixXf> c(C, n, n);
  c.noalias() = a * b;
  return 0;
}

/// "Eigen <version> (<SIMD instruction sets in use>)".
FP8EMU_EIGEN_EXPORT const char* fp8emu_eigen_describe() {
  static const std::string s = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                               std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
                               " (" + Eigen::SimdInstructionSetsInUse() + ")";
  return s.c_str();
}
