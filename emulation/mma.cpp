// Tensor-core MMA tiles and the fp32 comparison (see include/fp8emu/emulation/mma.hpp).
#include "fp8emu/emulation/mma.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::emu {

void mma_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb,
            Accumulation model, const float* C, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma: negative shape M=", M, " N=", N, " K=", K);
  require_fp8(fa, "mma operand A");
  require_fp8(fb, "mma operand B");
  const AccumulationModel& m = model_of(model);
  FP8EMU_CHECK(m.datapath == Datapath::kTensorCore, "mma: '", m.name,
               "' is not a tensor-core model (an MMA tile needs one: ", "hopper, ada or hopper-mma-sync)");
  const FormatSpec& sa = spec_of(fa);
  const FormatSpec& sb = spec_of(fb);
#pragma omp parallel for schedule(static) if (double(M) * N * K >= 1e6)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const std::size_t at = std::size_t(i) * std::size_t(N) + std::size_t(j);
      const std::uint32_t c = C ? core::f32_to_bits(C[at]) : 0u;
      D[at] = core::bits_to_f32(core::mma_dot_with_c(A + std::size_t(i) * std::size_t(K), sa,
                                                     B + std::size_t(j) * std::size_t(K), sb, K, m, c));
    }
}

std::uint64_t ulp_distance(float a, float b) {
  const auto position = [](float x) {  // monotone in x; +0 and -0 both 0
    const std::uint32_t u = core::f32_to_bits(x);
    return (u & 0x80000000u) ? -std::int64_t(u & 0x7FFFFFFFu) : std::int64_t(u);
  };
  const std::int64_t d = position(a) - position(b);
  return std::uint64_t(d < 0 ? -d : d);
}

CompareStats compare_f32(const float* x, const float* y, std::size_t n) {
  CompareStats s;
  s.elements = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&x[i], &y[i], 4) == 0) continue;
    ++s.mismatches;
    if (std::isnan(x[i]) != std::isnan(y[i])) {
      ++s.nan_in_one;
      continue;
    }
    if (std::isnan(x[i])) {
      ++s.nan_payload;
      continue;
    }
    s.max_ulp = std::max(s.max_ulp, std::int64_t(ulp_distance(x[i], y[i])));
    const double diff = std::fabs(double(x[i]) - double(y[i]));
    s.max_abs_error = std::max(s.max_abs_error, diff);
    if (y[i] != 0.0f) s.max_rel_error = std::max(s.max_rel_error, diff / std::fabs(double(y[i])));
  }
  return s;
}

}  // namespace fp8emu::emu
