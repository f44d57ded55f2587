// The vectorised exp_rn, tanh_rn and GELU kernels (emulation/activation.cpp) against the element functions
// of the core (core::exp_rn, core::tanh_rn, core::gelu_tanh_forward, core::gelu_tanh_grad), bit for bit, on every
// instruction-set path and thread count. The element functions are themselves checked against
// glibc's binary64 functions and Boost.Multiprecision on all 2^32 inputs (tests/core/
// test_fp32_math.cpp); here the oracle is the element function, which the kernels must reproduce.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/emulation/activation.hpp"
#include "gemm_isa.hpp"

using namespace fp8emu;

namespace {

namespace isa_ns = fp8emu::emu::detail;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Inputs that reach every lane kind: both tanh branches, each side of 1/8, 2^-12 and 9.1, NaNs with
// payloads, infinities, zeros, subnormals, and random bit patterns over the whole range.
std::vector<float> sample_inputs() {
  std::vector<float> v;
  for (const std::uint32_t edge : {0x39800000u, 0x3E000000u, 0x4111999Au, 0x7F800000u, 0x00000000u, 0x00000001u,
                                   0x3F800000u, 0x7FC00001u, 0x7F800123u, 0x40000000u, 0x3DFFFFFFu, 0x42AE0000u, 0x42B00000u, 0x33000000u})
    for (std::uint32_t d = 0; d < 5; ++d)
      for (const std::uint32_t s : {0u, 0x80000000u}) {
        v.push_back(from_bits((edge + d) | s));
        v.push_back(from_bits((edge - d) | s));
      }
  std::mt19937 g(1234);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(std::uint32_t(g())));
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int i = 0; i < 200000; ++i) v.push_back(n(g));
  v.push_back(1.0f);  // a ragged tail: the size is not a multiple of 8
  return v;
}

template <class Fn>
void each_path(Fn fn) {
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p)
    for (int threads : {1, 2}) {
      REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
      omp_set_num_threads(threads);
      INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", " << threads << " threads");
      fn();
    }
  isa_ns::set_gemm_isa(saved_isa);
  omp_set_num_threads(saved_threads);
}

}  // namespace

TEST_CASE("Vectorised exp_rn and tanh_rn and the GELU: every path equals the element functions bit for bit", "[element][activation]") {
  const std::vector<float> x = sample_inputs();
  std::vector<float> dy(x.size());
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& d : dy) d = u(g);
  each_path([&] {
    std::vector<float> y(x.size()), gelu(x.size()), dx(x.size()), ex(x.size());
    emu::exp_rn(x.data(), x.size(), ex.data());
    std::size_t bad_exp = 0;
    for (std::size_t i = 0; i < x.size(); ++i) bad_exp += !same_bits(ex[i], core::exp_rn(x[i]));
    CHECK(bad_exp == 0);
    emu::tanh_rn(x.data(), x.size(), y.data());
    emu::gelu_tanh_forward(x.data(), x.size(), gelu.data());
    emu::gelu_tanh_backward(x.data(), dy.data(), x.size(), dx.data());
    std::size_t bad_tanh = 0, bad_gelu = 0, bad_grad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      bad_tanh += !same_bits(y[i], core::tanh_rn(x[i]));
      bad_gelu += !same_bits(gelu[i], core::gelu_tanh_forward(x[i]));
      bad_grad += !same_bits(dx[i], dy[i] * core::gelu_tanh_grad(x[i]));
    }
    CHECK(bad_tanh == 0);
    CHECK(bad_gelu == 0);
    CHECK(bad_grad == 0);
    // in place
    std::vector<float> z = x;
    emu::gelu_tanh_forward(z.data(), z.size(), z.data());
    CHECK(std::memcmp(z.data(), gelu.data(), 4 * z.size()) == 0);
  });
}

TEST_CASE("Vectorised tanh_rn equals core::tanh_rn for all 2^32 inputs on every path",
          "[element][activation][exhaustive]") {
  // Per chunk of inputs, the element function once (OpenMP), then every ISA path (2 threads).
  constexpr std::size_t kChunk = std::size_t(1) << 22;
  std::vector<float> in(kChunk), want(kChunk), out(kChunk);
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int paths = int(isa_ns::gemm_isa_supported()) + 1;
  std::vector<std::uint64_t> bad(std::size_t(paths), 0);
  std::vector<std::uint32_t> first_bad(std::size_t(paths), 0);
  for (std::uint64_t base = 0; base < (std::uint64_t(1) << 32); base += kChunk) {
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(kChunk); ++i) {
      in[std::size_t(i)] = from_bits(std::uint32_t(base + std::uint64_t(i)));
      want[std::size_t(i)] = core::tanh_rn(in[std::size_t(i)]);
    }
    for (int p = 0; p < paths; ++p) {
      REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
      emu::tanh_rn(in.data(), kChunk, out.data());
      for (std::size_t i = 0; i < kChunk; ++i)
        if (!same_bits(out[i], want[i]) && bad[std::size_t(p)]++ == 0) first_bad[std::size_t(p)] = std::uint32_t(base + i);
    }
  }
  isa_ns::set_gemm_isa(saved_isa);
  for (int p = 0; p < paths; ++p) {
    INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ": first mismatch at input bits 0x" << std::hex << first_bad[std::size_t(p)]);
    CHECK(bad[std::size_t(p)] == 0);
  }
}

TEST_CASE("Vectorised exp_rn equals core::exp_rn for all 2^32 inputs on every path",
          "[element][activation][exhaustive]") {
  // Per chunk of inputs, the element function once (OpenMP), then every ISA path (2 threads).
  constexpr std::size_t kChunk = std::size_t(1) << 22;
  std::vector<float> in(kChunk), want(kChunk), out(kChunk);
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int paths = int(isa_ns::gemm_isa_supported()) + 1;
  std::vector<std::uint64_t> bad(std::size_t(paths), 0);
  std::vector<std::uint32_t> first_bad(std::size_t(paths), 0);
  for (std::uint64_t base = 0; base < (std::uint64_t(1) << 32); base += kChunk) {
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(kChunk); ++i) {
      in[std::size_t(i)] = from_bits(std::uint32_t(base + std::uint64_t(i)));
      want[std::size_t(i)] = core::exp_rn(in[std::size_t(i)]);
    }
    for (int p = 0; p < paths; ++p) {
      REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
      emu::exp_rn(in.data(), kChunk, out.data());
      for (std::size_t i = 0; i < kChunk; ++i)
        if (!same_bits(out[i], want[i]) && bad[std::size_t(p)]++ == 0) first_bad[std::size_t(p)] = std::uint32_t(base + i);
    }
  }
  isa_ns::set_gemm_isa(saved_isa);
  for (int p = 0; p < paths; ++p) {
    INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ": first mismatch at input bits 0x" << std::hex << first_bad[std::size_t(p)]);
    CHECK(bad[std::size_t(p)] == 0);
  }
}
