// The vectorised attention forward (emulation/attention.cpp) against the element function
// core::attention_row_forward, bit for bit, on every instruction-set path: random heads of several
// lengths and widths, causal and not, with scores that reach exp_rn's special lanes (large
// negative differences, underflow to subnormals and zero, Inf and NaN entries).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fp8emu/core/attention.hpp"
#include "fp8emu/emulation/attention.hpp"
#include "gemm_isa.hpp"

using namespace fp8emu;

TEST_CASE("Vectorised attention forward and query backward equal the element functions bit for bit", "[element][attention]") {
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved = isa_ns::gemm_isa();
  std::mt19937 g(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  struct Shape {
    int T, d;
    float spread;  // scales q and k: wide spreads push exp's inputs far below 0
  };
  for (const Shape sh : {Shape{1, 1, 1.0f}, Shape{7, 5, 1.0f}, Shape{8, 8, 3.0f}, Shape{33, 32, 1.0f},
                         Shape{64, 32, 6.0f}, Shape{17, 3, 30.0f}}) {
    for (const bool causal : {true, false}) {
      const int ld = 3 * sh.d + 2;  // rows interleave q, k, v (plus padding) as the layer's qkv
      std::vector<float> qkv(std::size_t(sh.T) * std::size_t(ld));
      for (auto& x : qkv) x = n01(g) * sh.spread;
      if (sh.T > 4 && sh.d > 2) {
        qkv[std::size_t(2) * ld + sh.d + 1] = INFINITY;  // key 2: an Inf score for some rows
        qkv[std::size_t(3) * ld + 1] = NAN;               // query 3: NaN scores
      }
      const float scale = 1.0f / std::sqrt(float(sh.d));
      const float* q0 = qkv.data();
      const float* k0 = qkv.data() + sh.d;
      const float* v0 = qkv.data() + 2 * sh.d;
      std::vector<float> want_p(std::size_t(sh.T) * sh.T), want_o(std::size_t(sh.T) * sh.d);
      for (int i = 0; i < sh.T; ++i)
        core::attention_row_forward(q0 + std::size_t(i) * ld, k0, v0, ld, i, sh.T, sh.d, scale, causal,
                                    want_p.data() + std::size_t(i) * sh.T, want_o.data() + std::size_t(i) * sh.d);
      for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p) {
        REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
        std::vector<float> got_p(want_p.size(), -7.0f), got_o(want_o.size(), -7.0f);
        emu::attention_forward_head(q0, k0, v0, ld, sh.T, sh.d, scale, causal, got_p.data(), got_o.data(), sh.d);
        std::size_t bad_p = 0, bad_o = 0;
        for (std::size_t x = 0; x < got_p.size(); ++x) bad_p += std::memcmp(&got_p[x], &want_p[x], 4) != 0;
        for (std::size_t x = 0; x < got_o.size(); ++x) bad_o += std::memcmp(&got_o[x], &want_o[x], 4) != 0;
        // The query side of the backward, from the forward's probabilities and an output gradient.
        std::vector<float> go(std::size_t(sh.T) * sh.d);
        for (auto& x : go) x = n01(g);
        std::vector<float> want_ds(want_p.size()), want_dq(std::size_t(sh.T) * sh.d), got_ds(want_p.size(), -7.0f),
            got_dq(want_dq.size(), -7.0f);
        for (int i = 0; i < sh.T; ++i)
          core::attention_row_backward_q(want_p.data() + std::size_t(i) * sh.T, go.data() + std::size_t(i) * sh.d, k0,
                                         v0, ld, i, sh.T, sh.d, scale, causal, want_ds.data() + std::size_t(i) * sh.T,
                                         want_dq.data() + std::size_t(i) * sh.d);
        emu::attention_backward_q_head(want_p.data(), go.data(), sh.d, k0, v0, ld, sh.T, sh.d, scale, causal,
                                       got_ds.data(), got_dq.data(), sh.d);
        std::size_t bad_ds = 0, bad_dq = 0;
        for (int i = 0; i < sh.T; ++i)  // ds past the last key is not written by either
          for (int j = 0; j <= (causal ? i : sh.T - 1); ++j) {
            const std::size_t x = std::size_t(i) * sh.T + std::size_t(j);
            bad_ds += std::memcmp(&got_ds[x], &want_ds[x], 4) != 0;
          }
        for (std::size_t x = 0; x < got_dq.size(); ++x) bad_dq += std::memcmp(&got_dq[x], &want_dq[x], 4) != 0;
        INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", T " << sh.T << ", d " << sh.d << ", causal " << causal);
        CHECK(bad_p == 0);
        CHECK(bad_o == 0);
        CHECK(bad_ds == 0);
        CHECK(bad_dq == 0);
      }
    }
  }
  isa_ns::set_gemm_isa(saved);
}
