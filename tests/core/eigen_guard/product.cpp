// Compile-only check of the guard in fp8emu/eigen.hpp: an Eigen product of FP8 matrices must not
// compile. Built twice by CTest: with FP8EMU_GUARD_CONTROL (legal use: map, cast, float product)
// it must compile; without it (an FP8 x FP8 product) it must fail.
#include "fp8emu/eigen.hpp"

int main() {
  using M = Eigen::Matrix<fp8emu::float8_e4m3fn, 2, 2>;
  M a, b;
  a.setConstant(fp8emu::float8_e4m3fn(1.0f));
  b = a;
#ifdef FP8EMU_GUARD_CONTROL
  const Eigen::Matrix2f c = a.cast<float>() * b.cast<float>();
  return c(0, 0) == 2.0f ? 0 : 1;
#else
  const M c = a * b;  // must not compile: the product would accumulate in e4m3fn
  return float(c(0, 0)) == 2.0f ? 0 : 1;
#endif
}
