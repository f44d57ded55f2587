// emu::mma_tn_values and emu::gemm_tc_nn (the tensor cores of fp16, bf16 and tf32 inputs as GEMMs)
// against the recorded GPU rows of tests/data/tensor-core-mma (the diagonal of a GEMM over the
// first recorded rows is those rows), against the per-element core path (core::mma_dot on
// core::MmaValues, which decodes each operand where it is used; the GEMMs' own loop for rows without
// NaN or Inf is checked against it with subnormals and the whole exponent range), and their errors.
#include <catch2/catch.hpp>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "fp8emu/core/half.hpp"
#include "gemm_isa.hpp"        // emulation/: the instruction-set paths
#include "gemm_tc_values.hpp"  // emulation/: the vector kernel of the values GEMMs
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/util/error.hpp"
#include "support/mma_data.hpp"

using namespace fp8emu;

namespace {
float from_bits(std::uint32_t u) { return core::bits_to_f32(u); }
std::uint32_t to_bits(float x) { return core::f32_to_bits(x); }

// Runs body(name of the kernel) once per values kernel this processor has: every instruction-set
// path, and on AVX-512 both kernels (the fp64 FMA one of gemm_tc_values512.cpp where the processor
// has VPOPCNTDQ, and the 16-lane one, set_gemm_tc_fma512(false)); the choices are restored after.
template <class Body>
void for_each_values_kernel(Body body) {
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const bool saved_fma512 = isa_ns::gemm_tc_fma512();
  const bool fma512_supported = isa_ns::set_gemm_tc_fma512(true);
  for (int path = 0; path <= int(isa_ns::gemm_isa_supported()); ++path)
    for (const bool fma512 : {true, false}) {
      if (!fma512 && (path != int(isa_ns::GemmIsa::kAvx512) || !fma512_supported)) continue;
      REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(path)) == isa_ns::GemmIsa(path));
      REQUIRE(isa_ns::set_gemm_tc_fma512(fma512) == (fma512 && fma512_supported));
      body(std::string(isa_ns::to_string(isa_ns::GemmIsa(path))) + (fma512 ? "" : " (16-lane kernel)"));
    }
  isa_ns::set_gemm_isa(saved_isa);
  isa_ns::set_gemm_tc_fma512(saved_fma512);
}

// Random values of the operand format: normals of a wide exponent range, subnormals, zeros of both
// signs and (with `specials`) NaN and Inf.
std::vector<float> random_values(std::size_t n, core::MmaOperands o, std::mt19937& rng, bool specials,
                                 bool full_range = false) {
  std::vector<float> v(n);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (float& x : v) {
    std::uint32_t u = bits(rng);
    const std::uint32_t kind = bits(rng) % 16;
    if (o == core::MmaOperands::kFp16) {
      std::uint16_t h = std::uint16_t(u);
      if ((h & 0x7C00u) == 0x7C00u && !specials) h &= 0xBFFFu;  // no Inf/NaN: clear an exponent bit
      if (kind < 2) h &= 0x83FFu;                                 // subnormal or zero
      x = from_bits(core::half_to_f32_bits(h));
    } else {
      const std::uint32_t keep = o == core::MmaOperands::kBf16 ? 0xFFFF0000u : 0xFFFFE000u;
      u &= keep;
      // exponents -31 .. 32, or (full_range) every normal exponent: products far below the floor
      u = (u & 0x807FFFFFu) | ((full_range ? 1u + (u >> 23) % 254u : 96u + (u >> 23) % 64u) << 23);
      if (kind < 2) u &= 0x807FFFFFu & keep;                       // subnormal or zero
      if (specials && kind == 2) u = (u & 0x80000000u) | 0x7F800000u;
      if (specials && kind == 3) u = 0x7FC00000u;
      x = from_bits(u);
    }
  }
  return v;
}
}  // namespace

TEST_CASE("mma_tn_values reproduces recorded rows on the diagonal of a GEMM", "[mma][values][recorded]") {
  for (const testing::MmaDataset& ds : testing::mma_datasets()) {
    if (testing::mma_dataset_is_fp8(ds)) continue;
    INFO(ds.gpu << " " << ds.format);
    const std::vector<testing::MmaRow> rows = testing::load_mma_dataset(ds);
    const int n = 150, K = int(rows[0].a.size());
    std::vector<float> A(std::size_t(n) * K), B(std::size_t(n) * K), C(std::size_t(n) * n, 0.0f), D(C.size());
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < K; ++k) {
        A[std::size_t(i) * K + k] = from_bits(rows[std::size_t(i)].a[std::size_t(k)]);
        B[std::size_t(i) * K + k] = from_bits(rows[std::size_t(i)].b[std::size_t(k)]);
      }
      C[std::size_t(i) * n + i] = from_bits(rows[std::size_t(i)].c);
    }
    emu::mma_tn_values(n, n, K, A.data(), B.data(), ds.fp32_model, C.data(), D.data());
    int mismatches = 0;
    for (int i = 0; i < n; ++i) mismatches += to_bits(D[std::size_t(i) * n + i]) != rows[std::size_t(i)].d;
    CHECK(mismatches == 0);
  }
}

TEST_CASE("mma_tn_values and gemm_tc_nn equal the per-element core path", "[mma][values]") {
  std::mt19937 rng(7);
  for (Accumulation id : {Accumulation::kVoltaFp16, Accumulation::kAmpereBf16, Accumulation::kAdaTf32,
                          Accumulation::kHopperFp16, Accumulation::kHopperBf16, Accumulation::kBlackwellTf32}) {
    const AccumulationModel& m = model_of(id);
    INFO(m.name);
    for (int variant = 0; variant < 3; ++variant) {
      const bool specials = variant == 1, full = variant == 2;
      const int M = 13, N = 9, K = 37;  // K not a multiple of any block: a short last block
      const std::vector<float> A = random_values(std::size_t(M) * K, m.operands, rng, specials, full);
      const std::vector<float> B = random_values(std::size_t(N) * K, m.operands, rng, specials, full);
      const std::vector<float> C = random_values(std::size_t(M) * N, core::MmaOperands::kTf32, rng, specials);
      std::vector<float> D(std::size_t(M) * N), Dnn(D.size()), Bt(B.size());
      emu::mma_tn_values(M, N, K, A.data(), B.data(), id, C.data(), D.data());
      for (int j = 0; j < N; ++j)
        for (int k = 0; k < K; ++k) Bt[std::size_t(k) * N + j] = B[std::size_t(j) * K + k];
      emu::gemm_tc_nn(M, N, K, A.data(), Bt.data(), id, Dnn.data());
      int bad = 0, bad_nn = 0;
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          const std::size_t at = std::size_t(i) * N + j;
          const auto* a = reinterpret_cast<const std::uint32_t*>(A.data()) + std::size_t(i) * K;
          const auto* b = reinterpret_cast<const std::uint32_t*>(Bt.data()) + j;
          const core::MmaDatapath p = m.tensor_core();
          bad += to_bits(D[at]) != core::mma_dot(core::MmaValues{a, 1}, core::MmaValues{b, N}, K, to_bits(C[at]), p);
          bad_nn += to_bits(Dnn[at]) != core::mma_dot(core::MmaValues{a, 1}, core::MmaValues{b, N}, K, 0u, p);
        }
      CHECK(bad == 0);
      CHECK(bad_nn == 0);
    }
  }
}

TEST_CASE("mma_tn_values: a value outside the format and an FP8 row are refused", "[mma][values][errors]") {
  const float a[2] = {1.0f, 1.0f + 0x1p-9f}, b[2] = {1.0f, 1.0f};
  float d = 0.0f;
  CHECK_NOTHROW(emu::mma_tn_values(1, 1, 2, a, b, Accumulation::kHopperFp16, nullptr, &d));
  CHECK(d == 2.0f + 0x1p-9f);
  CHECK_THROWS_WITH(emu::mma_tn_values(1, 1, 2, a, b, Accumulation::kHopperBf16, nullptr, &d),
                    Catch::Contains("mma: A[1] = ") && Catch::Contains("is not a bf16 value; round the operand to bf16 first"));
  CHECK_THROWS_WITH(emu::mma_tn_values(1, 1, 2, a, b, Accumulation::kHopper, nullptr, &d),
                    Catch::Contains("'hopper' is not a tensor-core model of fp16, bf16 or tf32 inputs"));
  CHECK_THROWS_WITH(emu::gemm_tc_nn(1, 1, 2, a, b, Accumulation::kFp32, &d),
                    Catch::Contains("gemm_tc_nn: 'fp32' is not a tensor-core model"));
}

TEST_CASE("gemm_tc_nn's and mma_tn_values' vector kernels equal the per-element core path on every ISA path and row",
          "[mma][values][element]") {
  // The fp16, bf16 and tf32 rows run detail::gemm_tc_values (emulation/gemm_tc_values.cpp) for rows
  // whose exponents lie in its range and the element loop for the others. Shapes past one cache
  // tile (128 columns, 64 or 72 rows) and one K chunk (256), ragged against every block, vector
  // width and register tile;
  // rows out of range, with NaN or Inf, of fp16 subnormals, and of the largest significands (each
  // block's product terms near 2^31, the kernel's int32 bound).
  namespace isa_ns = fp8emu::emu::detail;
  const int saved_threads = omp_get_max_threads();
  std::mt19937 rng(11);
  const int M = 77, N = 133, K = 300;
  std::uint64_t compared = 0;
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.datapath != Datapath::kTensorCore || m.input == core::MmaOperands::kFp8) continue;
    INFO(m.name);
    const core::MmaDatapath p = m.tensor_core();
    REQUIRE(isa_ns::tc_values_fast_path(p));
    const int lo = isa_ns::tc_values_min_exponent(p);
    // Values of exponent -20 .. 20 of the format (fp16: -14 .. 15), a few zeros.
    const bool f16 = m.operands == core::MmaOperands::kFp16;
    auto value = [&](int e) {
      if (f16) e = std::min(15, std::max(-14, e));
      const int frac = core::operand_fraction_bits(m.operands);
      const std::uint32_t mant = (rng() & ((1u << frac) - 1u)) << (23 - frac);
      return from_bits((rng() & 0x80000000u) | (std::uint32_t(127 + e) << 23) | mant);
    };
    std::vector<float> A(std::size_t(M) * K), Bt(std::size_t(K) * N);
    for (float& x : A) x = rng() % 13 == 0 ? 0.0f : value(int(rng() % 41) - 20);
    for (float& x : Bt) x = rng() % 13 == 0 ? 0.0f : value(int(rng() % 41) - 20);
    if (!f16) {  // every fp16 exponent is inside the range
      A[std::size_t(3) * K + 5] = value(lo - 1);                            // row 3: below the range
      A[std::size_t(4) * K + 7] = value(lo);                                // row 4: at its floor
      A[std::size_t(5) * K + 9] = value(isa_ns::kTcValuesMaxExponent + 1);  // row 5: above it
      Bt[std::size_t(20) * N + 30] = value(lo);                             // column 30: at the floor
    }
    A[std::size_t(6) * K + 2] = std::numeric_limits<float>::quiet_NaN();
    Bt[std::size_t(11) * N + 8] = -std::numeric_limits<float>::infinity();  // column 8
    // Row 7 and column 9: the first block's products are 1 (their sum, c = block = 2^lb, joins the
    // next block with exponent lb), then the largest significands at product exponent lb, one sign:
    // in the second block the product terms sum to nearly 2^(F + 2 + log2 block) and c adds 2^F.
    int lb = 0;
    while ((1 << lb) < m.block) ++lb;
    for (int k = 0; k < K; ++k) {
      const std::uint32_t top = m.operands == core::MmaOperands::kBf16 ? 0x007F0000u : 0x007FE000u;
      const bool first = k < m.block;
      A[std::size_t(7) * K + k] = first ? 2.0f : from_bits(std::uint32_t(127 + 3) << 23 | top);
      Bt[std::size_t(k) * N + 9] = first ? 0.5f : from_bits(std::uint32_t(127 + lb - 3) << 23 | top);
      if (f16)  // row 8: fp16 subnormals (exponent clamped at -14)
        A[std::size_t(8) * K + k] = from_bits(core::half_to_f32_bits(std::uint16_t(rng() & 0x83FFu)));
    }
    std::vector<float> B(std::size_t(N) * K);  // Bt transposed
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < N; ++j) B[std::size_t(j) * K + std::size_t(k)] = Bt[std::size_t(k) * N + std::size_t(j)];
    std::vector<std::uint32_t> want(std::size_t(M) * N);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const auto* a = reinterpret_cast<const std::uint32_t*>(A.data()) + std::size_t(i) * K;
        const auto* b = reinterpret_cast<const std::uint32_t*>(Bt.data()) + j;
        want[std::size_t(i) * N + j] = core::mma_dot(core::MmaValues{a, 1}, core::MmaValues{b, N}, K, 0u, p);
      }
    for_each_values_kernel([&](const std::string& kernel) {
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        // gemm_tc_nn reads B [K, N] (columns contiguous), mma_tn_values B^T [N, K] (rows).
        for (const bool nn : {true, false}) {
          std::vector<float> D(want.size(), -1.0f);
          if (nn) emu::gemm_tc_nn(M, N, K, A.data(), Bt.data(), m.id, D.data());
          else emu::mma_tn_values(M, N, K, A.data(), B.data(), m.id, nullptr, D.data());
          std::size_t bad = 0, first = 0;
          for (std::size_t x = 0; x < D.size(); ++x)
            if (to_bits(D[x]) != want[x] && bad++ == 0) first = x;
          INFO((nn ? "gemm_tc_nn, " : "mma_tn_values, ")
               << kernel << ", " << threads << " threads, first mismatch at [" << first / N << ", " << first % N
               << "]: " << D[first] << " vs " << from_bits(want[first]));
          CHECK(bad == 0);
          compared += D.size();
        }
      }
    });
  }
  omp_set_num_threads(saved_threads);
  CHECK(compared > 100000);
}

TEST_CASE("The values GEMMs' vector kernels keep the element model's bits in round-down mode",
          "[mma][values][element]") {
  // Every floating-point step of the kernels is exact or rounds by its own mode, so the caller's
  // MXCSR mode must not change a bit. Round-down is the mode that shows it: there x - x is -0. A
  // block that cancels exactly (1 - 1, or c = 1 and a product -1) must give +0, and the next block
  // must see c = +0 (a -0 taken for a negative c would add one grid step). Worked by hand for every
  // row (blocks of 4, 8 or 16, one or two of them): 1 - 1 = +0, then +0 + 1 = 1 (0x3F800000);
  // 1 - 1 alone = +0; 1, then 1 - 1 = +0.
  const int saved_mode = std::fegetround();
  std::mt19937 rng(5);
  std::size_t compared = 0;
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.datapath != Datapath::kTensorCore || m.input == core::MmaOperands::kFp8) continue;
    INFO(m.name);
    const core::MmaDatapath p = m.tensor_core();
    // Hand-worked: the first block is 1, -1, 0 ..., the next starts with 1.
    const int Kh = 2 * m.block;
    std::vector<float> ah(std::size_t(Kh), 0.0f), bh(std::size_t(Kh), 0.0f);
    ah[0] = 1.0f;
    ah[1] = -1.0f;
    ah[std::size_t(m.block)] = 1.0f;
    bh[0] = bh[1] = bh[std::size_t(m.block)] = 1.0f;
    // Random operands with cancelling blocks: values +-2^e (e in -3 .. 3) and zeros.
    const int M = 9, N = 37, K = 96;
    std::vector<float> A(std::size_t(M) * K), B(std::size_t(N) * K);
    for (std::vector<float>* v : {&A, &B})
      for (float& x : *v) x = rng() % 4 == 0 ? 0.0f : ((rng() & 1) ? -1.0f : 1.0f) * std::ldexp(1.0f, int(rng() % 7) - 3);
    std::vector<std::uint32_t> want(std::size_t(M) * N);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        want[std::size_t(i) * N + j] = core::mma_dot(
            core::MmaValues{reinterpret_cast<const std::uint32_t*>(A.data()) + std::size_t(i) * K, 1},
            core::MmaValues{reinterpret_cast<const std::uint32_t*>(B.data()) + std::size_t(j) * K, 1}, K, 0u, p);
    for_each_values_kernel([&](const std::string& kernel) {
      INFO(kernel);
      float dh = -1.0f, dh1 = -1.0f, dh2 = -1.0f;
      std::vector<float> ac(std::size_t(Kh), 0.0f), bc(std::size_t(Kh), 0.0f);
      ac[0] = 1.0f;
      ac[std::size_t(m.block)] = -1.0f;
      bc[0] = bc[std::size_t(m.block)] = 1.0f;
      std::vector<float> D(want.size());
      REQUIRE(std::fesetround(FE_DOWNWARD) == 0);
      emu::mma_tn_values(1, 1, Kh, ah.data(), bh.data(), m.id, nullptr, &dh);
      emu::mma_tn_values(1, 1, m.block, ah.data(), bh.data(), m.id, nullptr, &dh1);
      emu::mma_tn_values(1, 1, Kh, ac.data(), bc.data(), m.id, nullptr, &dh2);
      emu::mma_tn_values(M, N, K, A.data(), B.data(), m.id, nullptr, D.data());
      std::fesetround(saved_mode);
      CHECK(to_bits(dh) == 0x3F800000u);
      CHECK(to_bits(dh1) == 0u);
      CHECK(to_bits(dh2) == 0u);
      std::size_t bad = 0;
      for (std::size_t x = 0; x < D.size(); ++x) bad += to_bits(D[x]) != want[x];
      CHECK(bad == 0);
      compared += D.size();
    });
  }
  CHECK(compared > 10000);
}
