// See bench_blas.hpp. Compiled with FP8EMU_HAVE_OPENBLAS=1 and OpenBLAS's include folder when
// CMake found OpenBLAS's package configuration; otherwise every function reports its absence.
#include "bench_blas.hpp"

#ifdef FP8EMU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#ifdef FP8EMU_HAVE_EIGEN_MODULES
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#endif

namespace fp8emu::cli {

#ifdef FP8EMU_HAVE_OPENBLAS
bool have_openblas() { return true; }

bool openblas_sgemm(int n, const float* A, const float* B, float* C, int threads) {
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  return true;
}

void openblas_sgemm_nn(int M, int N, int K, const float* A, const float* B, float* D) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, D, N);
}

std::string openblas_description() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")";
}
#else
bool have_openblas() { return false; }
bool openblas_sgemm(int, const float*, const float*, float*, int) { return false; }
void openblas_sgemm_nn(int, int, int, const float*, const float*, float*) {}
std::string openblas_description() { return ""; }
#endif

namespace {

struct EigenModule {
  std::string level, why;
  int (*sgemm)(int, const float*, const float*, float*, int) = nullptr;
  const char* (*describe)() = nullptr;
};

#ifdef FP8EMU_HAVE_EIGEN_MODULES
std::string executable_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, std::size_t(n));
  const std::size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

EigenModule load_eigen_module() {
  EigenModule m;
  // The features -march=x86-64-v3 and -v4 let the compiler use (checked one by one: Clang's
  // __builtin_cpu_supports does not know the level names; the rest of v3, F16C, LZCNT and MOVBE,
  // come with every processor that has these).
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  const char* level = v4 ? "v4" : v3 ? "v3" : nullptr;
  if (!level) {
    m.why = "the processor is below x86-64-v3";
    return m;
  }
  const std::string file = std::string("fp8emu_eigen_") + level + ".so";
  // Beside the executable (the build tree), or the install's library folder relative to its bin/.
  const std::string exe_dir = executable_dir();
  for (const std::string& dir : {exe_dir, exe_dir + "/" FP8EMU_EIGEN_MODULE_INSTALL_DIR}) {
    // RTLD_LOCAL: the module's (hidden) Eigen instantiations never bind to or from this binary's.
    void* h = dlopen((dir + "/" + file).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    m.sgemm = reinterpret_cast<int (*)(int, const float*, const float*, float*, int)>(dlsym(h, "fp8emu_eigen_sgemm"));
    m.describe = reinterpret_cast<const char* (*)()>(dlsym(h, "fp8emu_eigen_describe"));
    if (m.sgemm && m.describe) {
      m.level = std::string("x86-64-") + level;
      return m;
    }
    m.sgemm = nullptr;
    m.describe = nullptr;
  }
  m.why = file + " not found beside the executable or in <bin>/" FP8EMU_EIGEN_MODULE_INSTALL_DIR;
  return m;
}
#else
EigenModule load_eigen_module() {
  EigenModule m;
  m.why = "not in this build (x86-64 with GCC >= 11 or Clang >= 12 builds it)";
  return m;
}
#endif

const EigenModule& eigen_module() {
  static const EigenModule m = load_eigen_module();
  return m;
}

}  // namespace

std::string eigen_isa_level() { return eigen_module().level; }

bool eigen_isa_sgemm(int n, const float* A, const float* B, float* C, int threads) {
  if (!eigen_module().sgemm) return false;
  return eigen_module().sgemm(n, A, B, C, threads) == 0;
}

std::string eigen_isa_description() {
  const EigenModule& m = eigen_module();
  return m.describe ? std::string(m.describe()) : m.why;
}

}  // namespace fp8emu::cli
