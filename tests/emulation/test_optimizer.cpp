// The vectorised Adam step (emulation/optimizer.cpp) against the element function core::adam_element
// (its specification: one IEEE binary32 operation each, in a fixed order), bit for bit, on every
// instruction-set path, thread count, length and alignment.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/emulation/optimizer.hpp"
#include "gemm_isa.hpp"

using namespace fp8emu;

namespace {

namespace isa_ns = fp8emu::emu::detail;

// Equal bits, or both NaN (the payload of a NaN result is not specified: optimizer.hpp).
bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// Gradients, moments and weights over many binades, with zeros of both signs, subnormals,
// infinities and NaNs mixed in where `specials`; v >= 0 as an optimizer keeps it, except in the
// special mix.
void fill(std::mt19937& rng, std::vector<float>& w, std::vector<float>& g, std::vector<float>& m,
          std::vector<float>& v, bool specials) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-40, 10);
  const std::uint32_t edge[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u,
                                0xFF800000u, 0x7FC00000u, 0x7FA00001u, 0x7F7FFFFFu, 0x3F800000u};
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = std::ldexp(u(rng), e(rng));
    g[i] = std::ldexp(u(rng), e(rng));
    m[i] = std::ldexp(u(rng), e(rng));
    v[i] = std::ldexp(std::fabs(u(rng)), 2 * e(rng));
    if (specials && rng() % 5 == 0) {
      float* const arrays[] = {&w[i], &g[i], &m[i], &v[i]};
      *arrays[rng() % 4] = core::bits_to_f32(edge[rng() % (sizeof edge / sizeof edge[0])]);
    }
  }
}

}  // namespace

TEST_CASE("Adam step: the vectorised kernel gives core::adam_element's bits on every path", "[emulation][simd]") {
  const isa_ns::GemmIsa saved = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  struct Hyper {
    float b1, b2, lr, eps;
  };
  const Hyper hypers[] = {{0.9f, 0.999f, 1e-3f, 1e-8f}, {0.8f, 0.95f, 3e-2f, 1e-6f}, {0.0f, 0.5f, 1.0f, 0.0f}};
  std::mt19937 rng(20261205);
  long compared = 0, differ_sqrt = 0;
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p) {
    REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(8), std::size_t(9),
                                  std::size_t(63), std::size_t(4096 + 13), std::size_t(40000 + 5)})
        for (const std::size_t offset : {std::size_t(0), std::size_t(3)})
          for (const bool specials : {false, true})
            for (const Hyper& h : hypers) {
              const int t = 1 + int(rng() % 1000);  // the step number
              const float step = h.lr / (1.0f - std::pow(h.b1, float(t)));
              const float sqrt_bc2 = std::sqrt(1.0f - std::pow(h.b2, float(t)));
              std::vector<float> w(n + offset), g(n + offset), m(n + offset), v(n + offset);
              fill(rng, w, g, m, v, specials);
              std::vector<float> we = w, me = m, ve = v;
              for (std::size_t i = offset; i < n + offset; ++i)
                core::adam_element(we[i], g[i], me[i], ve[i], h.b1, h.b2, step, sqrt_bc2, h.eps);
              emu::adam_step(w.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset, n, h.b1,
                             h.b2, step, sqrt_bc2, h.eps);
              for (std::size_t i = 0; i < n + offset; ++i) {
                INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", " << threads << " threads, n " << n << ", i " << i
                                                            << ", g " << g[i]);
                REQUIRE(same(w[i], we[i]));
                REQUIRE(same(m[i], me[i]));
                REQUIRE(same(v[i], ve[i]));
                ++compared;
                // The inputs reach the square root's rounding: sqrt(v) is inexact for most of them.
                if (!specials && std::isfinite(ve[i]) && ve[i] > 0.0f) {
                  const double r = std::sqrt(double(ve[i]));
                  differ_sqrt += double(float(r)) != r;
                }
              }
            }
    }
  }
  isa_ns::set_gemm_isa(saved);
  omp_set_num_threads(saved_threads);
  CHECK(compared > 500000);
  CHECK(differ_sqrt > compared / 10);
}
