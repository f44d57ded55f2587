// The emulator's SIMD and multi-threaded paths against the element layer (include/fp8emu/core),
// bit for bit, through the comparison `fp8emu validate` runs on a GPU (backend::check_kernels).
// backend::element_kernels() calls exactly the functions the CUDA kernels call, in the same
// decomposition (per element, per block, per tile; amax as a max of bits; counts as sums), so one
// element layer is checked against every vectorised CPU path here, and against the GPU by validate
// and the `gpu`-labelled tests (the thread mapping needs a GPU).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "fp8emu_internal/kernel_check.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/backend/kernels.hpp"

using namespace fp8emu;

namespace {

// The emulator with one deliberate fault, to show the comparison sees it.
class OffByOneUlpGemm final : public backend::Kernels {
 public:
  explicit OffByOneUlpGemm(const backend::Kernels& base) : base_(base) {}
  const char* name() const override { return "faulty"; }
  float compute_amax(const float* x, std::size_t n) const override { return base_.compute_amax(x, n); }
  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    return base_.quantize(x, n, scale, fmt, q, amax);
  }
  void dequantize(const std::uint8_t* q, std::size_t n, float si, Format fmt, float* y) const override {
    base_.dequantize(q, n, si, fmt, y);
  }
  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    base_.transpose(rows, cols, in, out);
  }
  emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt, std::uint8_t* qr,
                                    std::uint8_t* qc, float* amax) const override {
    return base_.cast_transpose(x, rows, cols, scale, fmt, qr, qc, amax);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float sa, const std::uint8_t* B, Format fb,
                   float sb, const emu::GemmAccumulation& acc, float* D) const override {
    base_.gemm_fp8_tn(M, N, K, A, fa, sa, B, fb, sb, acc, D);
    if (M > 0 && N > 0 && std::isfinite(D[0]) && D[0] != 0.0f) D[0] = std::nextafter(D[0], INFINITY);
  }
  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     E8M0Rule rule, emu::QuantizeStats* st) const override {
    return base_.quantize_mxfp8(x, rows, cols, axis, fmt, rule, st);
  }
  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt, int block,
                                        bool pow2, float eps, emu::QuantizeStats* st) const override {
    return base_.quantize_block_1d(x, rows, cols, axis, fmt, block, pow2, eps, st);
  }
  void quantize_mxfp8_both(const float* x, int rows, int cols, Format fmt, E8M0Rule rule, emu::BlockQuantized* qr,
                           emu::BlockQuantized* qc, emu::QuantizeStats* sr, emu::QuantizeStats* sc) const override {
    base_.quantize_mxfp8_both(x, rows, cols, fmt, rule, qr, qc, sr, sc);
  }
  void quantize_block_1d_both(const float* x, int rows, int cols, Format fmt, int block, bool pow2, float eps,
                              emu::BlockQuantized* qr, emu::BlockQuantized* qc, emu::QuantizeStats* sr,
                              emu::QuantizeStats* sc) const override {
    base_.quantize_block_1d_both(x, rows, cols, fmt, block, pow2, eps, qr, qc, sr, sc);
  }
  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float eps, emu::QuantizeStats* st) const override {
    return base_.quantize_block_2d(x, rows, cols, fmt, tile, pow2, eps, st);
  }
  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    base_.gemm_fp8_block_tn(A, B, D);
  }

 private:
  const backend::Kernels& base_;
};

}  // namespace

TEST_CASE("Element layer: every emulator kernel (SIMD, OpenMP) bit-identical to the per-element kernels", "[element]") {
  const backend::Kernels& twins = backend::element_kernels();
  backend::KernelCheckOptions opt;
  opt.sizes = {1, 17, 40, 131};
  opt.seed = 7;
  const std::vector<backend::KernelCheckRow> rows = backend::check_kernels(backend::emulated_kernels(), twins, opt);
  REQUIRE(!rows.empty());
  std::uint64_t values = 0;
  for (const backend::KernelCheckRow& r : rows) {
    INFO(r.kernel << ", " << r.inputs << ": " << r.first_mismatch);
    CHECK(r.mismatches == 0);
    CHECK(r.values > 0);
    values += r.values;
  }
  // Every method is covered.
  for (const char* method : {"compute_amax", "quantize", "cast_transpose", "dequantize", "transpose", "gemm_fp8_tn", "quantize_mxfp8",
                             "quantize_block_1d", "quantize_block_2d", "gemm_fp8_block_tn", "quantize_mxfp8_both",
                             "quantize_block_1d_both"}) {
    INFO(method);
    CHECK(std::any_of(rows.begin(), rows.end(), [&](const backend::KernelCheckRow& r) {
      return r.kernel == method || r.kernel.rfind(std::string(method) + " ", 0) == 0;
    }));
  }
  CHECK(values > 1000000);
}

TEST_CASE("Kernel check: a one-ulp fault in one GEMM element is reported", "[element]") {
  const OffByOneUlpGemm faulty(backend::emulated_kernels());
  backend::KernelCheckOptions opt;
  opt.sizes = {5};
  opt.only = "gemm_fp8_tn";
  const std::vector<backend::KernelCheckRow> rows = backend::check_kernels(backend::emulated_kernels(), faulty, opt);
  CHECK(backend::total_mismatches(rows) > 0);
  bool named = false;
  for (const backend::KernelCheckRow& r : rows) named |= r.first_mismatch.find("D[0]") != std::string::npos;
  CHECK(named);
  CHECK(backend::format_rows(rows).find("First mismatch per row") != std::string::npos);
}

TEST_CASE("Kernel check: NaNs with different payloads count apart, not as mismatches", "[element]") {
  CHECK(backend::same_f32(core::bits_to_f32(0x7FFFFFFFu), core::bits_to_f32(0xFFC00000u)));
  CHECK_FALSE(backend::same_f32(0.0f, -0.0f));
  CHECK_FALSE(backend::same_f32(INFINITY, core::bits_to_f32(0x7FC00000u)));
  CHECK(backend::same_f32(1.5f, 1.5f));
}

TEST_CASE("Element layer: the exact dot product keeps wide sums exact", "[element]") {
  // 65535 products 448 * 57344 = 49 * 2^19 each, and one tiny 2^-9 * 57344 = 112: at the 2^-32 LSB of
  // the exact sum the total needs more than 64 bits. Worked value: 65535 * 49 = 3211215 (22 bits),
  // so 3211215 * 2^19 is an fp32, and 112 is below half its ulp (2^17 / 2): RNE gives 3211215 * 2^19.
  std::vector<std::uint8_t> a(65536, 0x7E), b(65536, 0x7B);
  a[3] = 0x01;
  const float expected = 3211215.0f * 0x1p19f;
  const float emu_result =
      emu::dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE5M2, 65536, {emu::Accumulation::kExact, 0});
  CHECK(core::f32_to_bits(core::dot_exact(a.data(), kSpecE4M3, b.data(), kSpecE5M2, 65536)) ==
        core::f32_to_bits(expected));
  CHECK(core::f32_to_bits(emu_result) == core::f32_to_bits(expected));
}

// ------------------------------------------------------------------------------------------------
// The CPU GEMMs on every instruction-set path this processor can run (emulation/gemm_isa.hpp forces
// each one: baseline x86-64, AVX2, AVX-512), with 1 and 2 threads, against the scalar element model
// core::gemm_tn_element, bit for bit: every accumulation model, promotion and split-K setting,
// ragged shapes (M, N, K not multiples of the register and cache tiles, K not a multiple of the
// block), zeros of both signs, subnormals, maximal codes, NaN and Inf codes, and both operand pairs.
#include <omp.h>

#include <cstring>
#include <random>

#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "gemm_isa.hpp"

namespace {

// Codes for one operand: mostly random finite codes, with zeros (+0 and -0), subnormals and the
// largest codes mixed in; rows listed in `special_rows` also get a NaN (and for E5M2 an Inf) code.
std::vector<std::uint8_t> gemm_codes(std::mt19937& g, int rows, int K, Format f, const std::vector<int>& special_rows) {
  const FormatSpec& s = spec_of(f);
  std::vector<std::uint8_t> v(std::size_t(rows) * std::size_t(K));
  for (auto& c : v) {
    const unsigned kind = g() % 16;
    const auto sign = std::uint8_t(g() & 0x80u);
    if (kind == 0) c = sign;                                                         // +-0
    else if (kind == 1) c = std::uint8_t(sign | (1u + g() % ((1u << s.mantissa_bits) - 1u)));  // subnormal
    else if (kind == 2) c = std::uint8_t(sign | s.max_finite_code());               // largest magnitude
    else
      for (;;) {
        c = std::uint8_t(g());
        if ((c & s.top_code()) <= s.max_finite_code()) break;
      }
  }
  for (int r : special_rows) {
    if (r >= rows) continue;
    v[std::size_t(r) * std::size_t(K) + std::size_t(g() % unsigned(K))] = std::uint8_t(s.nan_code());
    if (s.has_inf) v[std::size_t(r) * std::size_t(K) + std::size_t(g() % unsigned(K))] = std::uint8_t(0x80u | s.inf_code());
  }
  return v;
}

// Codes with a wide spread of magnitudes along K: long runs of tiny products after a huge one, so
// the running sum's exponent sets the alignment and most terms are shifted out entirely.
std::vector<std::uint8_t> spread_codes(std::mt19937& g, int rows, int K, Format f) {
  const FormatSpec& s = spec_of(f);
  std::vector<std::uint8_t> v(std::size_t(rows) * std::size_t(K));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool big = (i % std::size_t(K)) % 97 == 0;
    const unsigned mag = big ? s.max_finite_code() - g() % 4u : 1u + g() % 24u;
    v[i] = std::uint8_t((g() & 0x80u) | mag);
  }
  return v;
}

}  // namespace

TEST_CASE("CPU GEMM: every ISA path and thread count equals the element model bit for bit", "[element][gemm]") {
  using namespace fp8emu::emu;
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  std::vector<isa_ns::GemmIsa> paths;
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p) paths.push_back(isa_ns::GemmIsa(p));
  std::mt19937 g(2027);
  struct Shape {
    int M, N, K;
  };
  // 1x1x1; smaller than one register tile; ragged everywhere and K crossing the 256-element K chunk;
  // N crossing the 256-column cache tile; M crossing the 64-row cache tile with a long K.
  const Shape shapes[] = {{1, 1, 1}, {3, 17, 45}, {37, 70, 300}, {9, 290, 70}, {66, 20, 700}};
  const std::pair<Format, Format> pairs[] = {
      {Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}, {Format::kE5M2, Format::kE4M3}};
  const GemmAccumulation accs[] = {
      {Accumulation::kHopper, 0, 1},  {Accumulation::kHopper, 32, 1}, {Accumulation::kHopper, 128, 1},
      {Accumulation::kHopper, 96, 2}, {Accumulation::kHopper, 0, 3},  {Accumulation::kHopper, 128, 25},
      {Accumulation::kAda, 0, 1},     {Accumulation::kAda, 16, 1},    {Accumulation::kAda, 128, 3},
      {Accumulation::kFp32, 0, 1},    {Accumulation::kFp32, 64, 1},   {Accumulation::kFp32, 0, 2},
      {Accumulation::kFp32, 100, 1},  {Accumulation::kFp32, 128, 3},  {Accumulation::kFp32, 96, 25},
      {Accumulation::kExact, 0, 1},   {Accumulation::kHopperMmaSync, 0, 1}, {Accumulation::kHopperMmaSync, 64, 2}};
  const bool saved_vbmi = isa_ns::gemm_pack_vbmi();
  const bool vbmi_supported = isa_ns::set_gemm_pack_vbmi(true);
  std::uint64_t compared = 0;
  for (const Shape& sh : shapes)
    for (const auto& fmts : pairs)
      for (int variant = 0; variant < 2; ++variant) {
        std::vector<std::uint8_t> a, b;
        if (variant == 0) {
          a = gemm_codes(g, sh.M, sh.K, fmts.first, {1, sh.M - 1});
          b = gemm_codes(g, sh.N, sh.K, fmts.second, {2});
        } else {
          a = spread_codes(g, sh.M, sh.K, fmts.first);
          b = spread_codes(g, sh.N, sh.K, fmts.second);
        }
        const float sa = 0.375f, sb = 3.0f;
        for (const GemmAccumulation& acc : accs) {
          const AccumulationModel& m = model_of(acc.model);
          const float s = sa * sb;
          std::vector<float> want(std::size_t(sh.M) * std::size_t(sh.N));
          for (int i = 0; i < sh.M; ++i)
            for (int j = 0; j < sh.N; ++j)
              want[std::size_t(i) * std::size_t(sh.N) + std::size_t(j)] = core::gemm_tn_element(
                  a.data() + std::size_t(i) * std::size_t(sh.K), spec_of(fmts.first),
                  b.data() + std::size_t(j) * std::size_t(sh.K), spec_of(fmts.second), sh.K, m, acc.promotion_interval,
                  acc.split_k, s);
          // exact and hopper-mma-sync run the element model itself on every path: one path suffices.
          const bool per_element = acc.model == Accumulation::kExact || acc.model == Accumulation::kHopperMmaSync;
          for (isa_ns::GemmIsa isa : paths)
            for (int run = 0; run < 4; ++run) {  // 1 and 2 threads; AVX-512: table and VBMI packing
              const int threads = 1 + run % 2;
              const bool vbmi = run >= 2;
              if (per_element && isa != paths.back()) continue;
              if (vbmi && (isa != isa_ns::GemmIsa::kAvx512 || !vbmi_supported)) continue;
              REQUIRE(isa_ns::set_gemm_isa(isa) == isa);
              REQUIRE(isa_ns::set_gemm_pack_vbmi(vbmi) == vbmi);
              omp_set_num_threads(threads);
              std::vector<float> d(want.size(), -1.0f);
              gemm_fp8_tn(sh.M, sh.N, sh.K, a.data(), fmts.first, sa, b.data(), fmts.second, sb, acc, d.data());
              std::size_t bad = 0, first = 0;
              for (std::size_t x = 0; x < d.size(); ++x)
                if (std::memcmp(&d[x], &want[x], 4) != 0 && !(std::isnan(d[x]) && std::isnan(want[x]))) {
                  if (bad++ == 0) first = x;
                }
              INFO(isa_ns::to_string(isa) << (vbmi ? " (VBMI packing)" : "") << ", " << threads << " threads, " << m.name << " promotion "
                                          << acc.promotion_interval << " split_k " << acc.split_k << ", "
                                          << format_name(fmts.first) << " x " << format_name(fmts.second) << ", "
                                          << sh.M << "x" << sh.N << "x" << sh.K << " variant " << variant
                                          << ", first mismatch at " << first << ": " << d[first] << " vs " << want[first]);
              CHECK(bad == 0);
              compared += d.size();
            }
        }
      }
  isa_ns::set_gemm_isa(saved_isa);
  isa_ns::set_gemm_pack_vbmi(saved_vbmi);
  omp_set_num_threads(saved_threads);
  CHECK(compared > 100000);
}

TEST_CASE("CPU fp32 GEMM: every ISA path and thread count sums each element in k order", "[element][gemm]") {
  // gemm_f32_nn (the fp32 layers) against the scalar loop c = RN(c + RN(a * b)), k = 0..K-1, with
  // values whose sums round differently in any other order, and Inf/NaN entries.
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  std::mt19937 g(99);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Shape {
    int M, N, K;
  };
  for (const Shape sh : {Shape{1, 1, 1}, Shape{5, 9, 3}, Shape{67, 300, 290}, Shape{130, 33, 700}}) {
    std::vector<float> A(std::size_t(sh.M) * std::size_t(sh.K)), B(std::size_t(sh.K) * std::size_t(sh.N));
    for (auto& x : A) x = u(g) * std::ldexp(1.0f, int(g() % 40) - 20);
    for (auto& x : B) x = u(g);
    if (sh.M > 2 && sh.K > 2) {
      A[std::size_t(sh.K) + 1] = INFINITY;
      A[2 * std::size_t(sh.K)] = NAN;
    }
    std::vector<float> want(std::size_t(sh.M) * std::size_t(sh.N));
    for (int i = 0; i < sh.M; ++i)
      for (int j = 0; j < sh.N; ++j) {
        float c = 0.0f;
        for (int k = 0; k < sh.K; ++k)
          c = core::add_rn(c, core::mul_rn(A[std::size_t(i) * std::size_t(sh.K) + std::size_t(k)],
                                           B[std::size_t(k) * std::size_t(sh.N) + std::size_t(j)]));
        want[std::size_t(i) * std::size_t(sh.N) + std::size_t(j)] = c;
      }
    for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p)
      for (int threads : {1, 2}) {
        REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
        omp_set_num_threads(threads);
        std::vector<float> d(want.size(), -1.0f);
        emu::gemm_f32_nn(sh.M, sh.N, sh.K, A.data(), B.data(), d.data());
        std::size_t bad = 0;
        for (std::size_t x = 0; x < d.size(); ++x)
          bad += std::memcmp(&d[x], &want[x], 4) != 0 && !(std::isnan(d[x]) && std::isnan(want[x]));
        INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", " << threads << " threads, " << sh.M << "x" << sh.N << "x"
                                                   << sh.K);
        CHECK(bad == 0);
      }
  }
  isa_ns::set_gemm_isa(saved_isa);
  omp_set_num_threads(saved_threads);
}

TEST_CASE("CPU block-scaled GEMM: every ISA path and thread count equals the element kernels bit for bit",
          "[element][gemm]") {
  // gemm_fp8_block_tn (MXFP8 and 1 x 128 operands) against the element kernel set, which sums each
  // element per block with core functions on one thread; ragged K (a partial last block), NaN/Inf
  // codes, scales spanning many binades and zero blocks.
  using namespace fp8emu::emu;
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  std::vector<isa_ns::GemmIsa> paths;
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p) paths.push_back(isa_ns::GemmIsa(p));
  std::mt19937 g(31);
  struct Shape {
    int M, N, K, block;
  };
  const Shape shapes[] = {{1, 1, 1, 32}, {5, 70, 45, 32}, {37, 13, 300, 32}, {9, 140, 300, 128}, {70, 9, 64, 32}};
  std::uint64_t compared = 0;
  for (const Shape& sh : shapes)
    for (const auto& fmts : {std::pair{Format::kE4M3, Format::kE4M3}, std::pair{Format::kE5M2, Format::kE4M3}}) {
      auto operand = [&](int n, Format f, std::vector<int> special) {
        BlockQuantized q;
        q.n = n;
        q.k = sh.K;
        q.block = sh.block;
        q.format = f;
        q.codes = gemm_codes(g, n, sh.K, f, special);
        q.scale_inv.resize(std::size_t(n) * std::size_t(q.blocks()));
        for (auto& s : q.scale_inv) s = g() % 11 == 0 ? 0.0f : std::ldexp(1.0f + float(g() % 8) / 8.0f, int(g() % 40) - 20);
        return q;
      };
      const BlockQuantized A = operand(sh.M, fmts.first, {0, sh.M - 1}), B = operand(sh.N, fmts.second, {1});
      std::vector<float> want(std::size_t(sh.M) * std::size_t(sh.N));
      fp8emu::backend::element_kernels().gemm_fp8_block_tn(A, B, want.data());
      for (isa_ns::GemmIsa isa : paths)
        for (int threads : {1, 2}) {
          REQUIRE(isa_ns::set_gemm_isa(isa) == isa);
          omp_set_num_threads(threads);
          std::vector<float> d(want.size(), -1.0f);
          gemm_fp8_block_tn(A, B, d.data());
          std::size_t bad = 0, first = 0;
          for (std::size_t x = 0; x < d.size(); ++x)
            if (std::memcmp(&d[x], &want[x], 4) != 0 && !(std::isnan(d[x]) && std::isnan(want[x])))
              if (bad++ == 0) first = x;
          INFO(isa_ns::to_string(isa) << ", " << threads << " threads, " << format_name(fmts.first) << " x "
                                      << format_name(fmts.second) << ", " << sh.M << "x" << sh.N << "x" << sh.K
                                      << " block " << sh.block << ", first mismatch at " << first << ": " << d[first]
                                      << " vs " << want[first]);
          CHECK(bad == 0);
          compared += d.size();
        }
    }
  isa_ns::set_gemm_isa(saved_isa);
  omp_set_num_threads(saved_threads);
  CHECK(compared > 10000);
}
