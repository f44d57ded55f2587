// See bench_blas.hpp. Compiled with FP8EMU_HAVE_OPENBLAS=1 and OpenBLAS's include folder when
// CMake found OpenBLAS's package configuration; otherwise every function reports its absence.
#include "bench_blas.hpp"

#ifdef FP8EMU_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace fp8emu::cli {

#ifdef FP8EMU_HAVE_OPENBLAS
bool have_openblas() { return true; }

bool openblas_sgemm(int n, const float* A, const float* B, float* C, int threads) {
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  return true;
}

std::string openblas_description() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")";
}
#else
bool have_openblas() { return false; }
bool openblas_sgemm(int, const float*, const float*, float*, int) { return false; }
std::string openblas_description() { return ""; }
#endif

}  // namespace fp8emu::cli
