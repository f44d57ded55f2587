// The emulator's SIMD and multi-threaded paths against the element layer (include/fp8emu/core),
// bit for bit, through the comparison `fp8emu validate` runs on a GPU (backend::check_devices):
// cpu_device() against element_device(). element_device() calls exactly the functions the CUDA
// kernels call, in the same decomposition (per element, per block, per tile; amax as a max of bits;
// counts as sums), so one element layer is checked against every vectorised CPU path here, and
// against the GPU by validate and the `gpu`-labelled tests (the thread mapping needs a GPU).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "fp8emu_internal/device_check.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "support/forward_device.hpp"

using namespace fp8emu;

namespace {

// cpu_device() with one deliberate fault, to show the comparison sees it.
class OffByOneUlpGemm final : public testing::ForwardDevice {
 public:
  OffByOneUlpGemm() : ForwardDevice(true) {}
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* sa, const std::uint8_t* B,
                   Format fb, const float* sb, const emu::GemmAccumulation& acc, float* D) const override {
    ForwardDevice::gemm_fp8_tn(M, N, K, A, fa, sa, B, fb, sb, acc, D);
    if (M > 0 && N > 0 && std::isfinite(D[0]) && D[0] != 0.0f) D[0] = std::nextafter(D[0], INFINITY);
  }
};

}  // namespace

TEST_CASE("Element layer: every FP8 and FP4 operation of cpu_device() (SIMD, OpenMP) bit-identical to element_device()",
          "[element]") {
  backend::DeviceCheckOptions opt;
  opt.sizes = {1, 17, 40, 131};
  opt.seed = 7;
  opt.fnuz = true;
  const std::vector<backend::DeviceCheckRow> rows =
      backend::check_devices(backend::element_device(), backend::cpu_device(), opt);
  REQUIRE(!rows.empty());
  std::uint64_t values = 0;
  for (const backend::DeviceCheckRow& r : rows) {
    INFO(r.op << ", " << r.inputs << ": " << r.first_mismatch);
    CHECK(r.mismatches == 0);
    CHECK(r.values > 0);
    values += r.values;
  }
  // Every FP8 operation is covered, every block-cast variant among them.
  for (const char* op : {"current_scale", "cast_transpose", "block_cast mxfp8", "block_cast 1x128",
                         "block_cast 128x128", "block_cast 16x16", "block_cast nvfp4 1x16", "block_cast nvfp4 16x16",
                         "block_cast mxfp4", "block_cast mxfp6", "gemm_fp8_tn", "gemm_fp8_block_tn",
                         "gemm_fp8_block_tn nvfp4", "gemm_fp8_block_tn mxfp4"}) {
    INFO(op);
    CHECK(std::any_of(rows.begin(), rows.end(), [&](const backend::DeviceCheckRow& r) {
      return r.op == op || r.op.rfind(std::string(op) + " ", 0) == 0;
    }));
  }
  CHECK(values > 1000000);
}

TEST_CASE("Device check: a one-ulp fault in one GEMM element is reported", "[element]") {
  const OffByOneUlpGemm faulty;
  backend::DeviceCheckOptions opt;
  opt.sizes = {5};
  opt.only = "gemm_fp8_tn";
  const std::vector<backend::DeviceCheckRow> rows = backend::check_devices(backend::cpu_device(), faulty, opt);
  CHECK(backend::total_mismatches(rows) > 0);
  bool named = false;
  for (const backend::DeviceCheckRow& r : rows) named |= r.first_mismatch.find("D[0]") != std::string::npos;
  CHECK(named);
  CHECK(backend::format_rows(rows).find("First mismatch per row") != std::string::npos);
  CHECK_THROWS_WITH(backend::check_devices(backend::cpu_device(), faulty, [] {
                      backend::DeviceCheckOptions o;
                      o.only = "quantize";
                      return o;
                    }()),
                    Catch::Contains("unknown operation 'quantize'"));
}

TEST_CASE("Element layer: the emulator's dequantize and code transpose equal the per-element functions",
          "[element]") {
  // Every code of both formats, several scale_inv (rounding, overflow, zero, NaN); shapes with ragged
  // edges for the blocked transpose.
  for (const Format fmt : {Format::kE4M3, Format::kE5M2}) {
    std::vector<std::uint8_t> q(256 * 37);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::uint8_t((i * 97) & 0xFF);
    for (const float si : {1.0f, 0.0123f, 0x1p-30f, 1e30f, INFINITY, 0.0f, NAN}) {
      std::vector<float> y(q.size());
      emu::dequantize(q.data(), q.size(), si, fmt, y.data());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < q.size(); ++i)
        bad += !backend::same_f32(y[i], core::dequantize_element(q[i], si, spec_of(fmt)));
      INFO(format_name(fmt) << " scale_inv " << si);
      CHECK(bad == 0);
    }
  }
  for (const auto& [rows, cols] : {std::pair{1, 5}, std::pair{37, 256}, std::pair{130, 67}}) {
    std::vector<std::uint8_t> in(std::size_t(rows) * std::size_t(cols)), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::uint8_t((i * 131 + 7) & 0xFF);
    emu::transpose(rows, cols, in.data(), out.data());
    std::size_t bad = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        bad += out[std::size_t(c) * std::size_t(rows) + std::size_t(r)] != in[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
    INFO(rows << " x " << cols);
    CHECK(bad == 0);
  }
}

TEST_CASE("Device check: NaNs with different payloads count apart, not as mismatches", "[element]") {
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
#include "gemm_tc_chain.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace {

// Codes for one operand: mostly random finite codes, with zeros (+0 and -0), subnormals and the
// largest codes mixed in; rows listed in `special_rows` also get a NaN (and for E5M2 an Inf) code.
std::vector<std::uint8_t> gemm_codes(std::mt19937& g, int rows, int K, Format f, const std::vector<int>& special_rows) {
  const FormatSpec& s = spec_of(f);
  std::vector<std::uint8_t> v(std::size_t(rows) * std::size_t(K));
  for (auto& c : v) {
    const unsigned kind = g() % 16;
    const auto sign = std::uint8_t(g() & 0x80u);
    if (kind == 0) c = s.fnuz ? 0 : sign;                                            // +-0 (FNUZ: +0)
    else if (kind == 1) c = std::uint8_t(sign | (1u + g() % ((1u << s.mantissa_bits) - 1u)));  // subnormal
    else if (kind == 2) c = std::uint8_t(sign | s.max_finite_code());               // largest magnitude
    else
      for (;;) {
        c = std::uint8_t(g());
        if (!s.is_special_code(c)) break;
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
  // N crossing the 256-column cache tile; M crossing the 64-row (int16 kernel) and 72-row (FMA
  // kernels) cache tiles with a long K.
  const Shape shapes[] = {{1, 1, 1}, {3, 17, 45}, {37, 70, 300}, {9, 290, 70}, {74, 20, 700}};
  const std::pair<Format, Format> pairs[] = {
      {Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}, {Format::kE5M2, Format::kE4M3},
      {Format::kE4M3FNUZ, Format::kE5M2FNUZ}, {Format::kE5M2FNUZ, Format::kE4M3FNUZ}};
  const GemmAccumulation accs[] = {
      {Accumulation::kHopper, 0, 1},  {Accumulation::kHopper, 32, 1}, {Accumulation::kHopper, 128, 1},
      {Accumulation::kHopper, 96, 2}, {Accumulation::kHopper, 0, 3},  {Accumulation::kHopper, 128, 25},
      {Accumulation::kAda, 0, 1},     {Accumulation::kAda, 16, 1},    {Accumulation::kAda, 128, 3},
      {Accumulation::kFp32, 0, 1},    {Accumulation::kFp32, 64, 1},   {Accumulation::kFp32, 0, 2},
      {Accumulation::kFp32, 100, 1},  {Accumulation::kFp32, 128, 3},  {Accumulation::kFp32, 96, 25},
      {Accumulation::kExact, 0, 1},   {Accumulation::kHopperMmaSync, 0, 1}, {Accumulation::kHopperMmaSync, 64, 2},
      // FP8 codes widened to fp16, bf16 and tf32 rows: the values kernel, and the element model with
      // promotion or split-K.
      {Accumulation::kHopperBf16, 0, 1}, {Accumulation::kAmpereFp16, 0, 1}, {Accumulation::kVoltaFp16, 0, 1},
      {Accumulation::kAdaTf32, 0, 1},   {Accumulation::kHopperFp16, 64, 1}};
  const bool saved_vbmi = isa_ns::gemm_pack_vbmi();
  const bool vbmi_supported = isa_ns::set_gemm_pack_vbmi(true);
  const bool saved_fma512 = isa_ns::gemm_tc_fma512();
  const bool fma512_supported = isa_ns::set_gemm_tc_fma512(true);
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
            // 1 and 2 threads; AVX-512: the int16 kernel with table and VBMI packing, and the
            // round-toward-zero FMA kernel (VPOPCNTDQ).
            for (int run = 0; run < 6; ++run) {
              const int threads = 1 + run % 2;
              const bool vbmi = run / 2 == 1, fma512 = run / 2 == 2;
              if (per_element && isa != paths.back()) continue;
              if (vbmi && (isa != isa_ns::GemmIsa::kAvx512 || !vbmi_supported)) continue;
              if (fma512 && (isa != isa_ns::GemmIsa::kAvx512 || !fma512_supported)) continue;
              REQUIRE(isa_ns::set_gemm_isa(isa) == isa);
              REQUIRE(isa_ns::set_gemm_pack_vbmi(vbmi) == vbmi);
              REQUIRE(isa_ns::set_gemm_tc_fma512(fma512) == fma512);
              omp_set_num_threads(threads);
              std::vector<float> d(want.size(), -1.0f);
              gemm_fp8_tn(sh.M, sh.N, sh.K, a.data(), fmts.first, sa, b.data(), fmts.second, sb, acc, d.data());
              std::size_t bad = 0, first = 0;
              for (std::size_t x = 0; x < d.size(); ++x)
                if (std::memcmp(&d[x], &want[x], 4) != 0 && !(std::isnan(d[x]) && std::isnan(want[x]))) {
                  if (bad++ == 0) first = x;
                }
              INFO(isa_ns::to_string(isa) << (vbmi ? " (VBMI packing)" : "") << (fma512 ? " (FMA kernel)" : "") << ", " << threads << " threads, " << m.name << " promotion "
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
  isa_ns::set_gemm_tc_fma512(saved_fma512);
  omp_set_num_threads(saved_threads);
  CHECK(compared > 100000);
}

TEST_CASE("CPU GEMM: every FP8 operand format fits the FMA kernels' exponent bytes and packing",
          "[element][gemm]") {
  // The FMA kernels (gemm_tc_fma.cpp, gemm_tc_fma512.cpp) store a non-zero code's exponent as the
  // byte e + 63 (A) or e + 64 (B), with 0 for zeros, and rely on real exponents in [-16, 15]: real
  // byte sums then lie in [95, 157] (no unsigned wrap) and sums with a zero (at most 79) stay below
  // them and below every non-zero running sum (|c| >= 2^-45). A format added to the FP8 GEMMs with
  // a wider range must fail here before it reaches those kernels.
  namespace isa_ns = fp8emu::emu::detail;
  int formats = 0;
  for (int f = 0; f < kFormatCount; ++f) {
    if (!is_fp8_or_fnuz(Format(f))) continue;
    ++formats;
    isa_ns::CodeFields t[256];
    isa_ns::decode_table(spec_of(Format(f)), t);
    int lo = 1000, hi = -1000;
    for (int c = 0; c < 256; ++c)
      if (!t[c].special && t[c].m != 0) {
        lo = std::min(lo, int(t[c].e));
        hi = std::max(hi, int(t[c].e));
      }
    INFO(format_name(Format(f)) << ": exponents [" << lo << ", " << hi << "]");
    CHECK(lo >= -16);
    CHECK(hi <= 15);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // The FMA kernels' vector packing rule (special codes by magnitude, zeros, signs): a format
    // outside it would silently leave them for the int16 kernel (AVX-512) or the baseline one (AVX2).
    CHECK(isa_ns::gemm_tc_fma_packs(t, t));
#endif
  }
  CHECK(formats >= 4);  // e4m3fn, e5m2 and their FNUZ forms at least: the loop is not empty
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
TEST_CASE("CPU GEMM: the tensor-core kernels leave MXCSR as they found it and signal no invalid operation",
          "[element][gemm]") {
  // The FMA kernels switch MXCSR to round-toward-zero per tile; the caller's mode and masks must
  // come back, and finite operands must raise neither invalid nor divide-by-zero: here both
  // are unmasked (a signal would end the test binary), on one thread so that all the work runs
  // under this MXCSR.
  using namespace fp8emu::emu;
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const bool saved_fma512 = isa_ns::gemm_tc_fma512();
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::mt19937 g(7);
  const int M = 9, N = 70, K = 300;
  const std::vector<std::uint8_t> a = spread_codes(g, M, K, Format::kE4M3), b = spread_codes(g, N, K, Format::kE5M2);
  const unsigned saved_csr = _mm_getcsr();
  // Flags cleared (earlier tests leave theirs), IM and ZM cleared: invalid and zero-divide unmasked.
  const unsigned csr = saved_csr & ~(0x3Fu | (1u << 7) | (1u << 9));
  int runs = 0;
  for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p)
    for (int fma512 = 0; fma512 < 2; ++fma512) {
      if (fma512 && isa_ns::GemmIsa(p) != isa_ns::GemmIsa::kAvx512) continue;
      REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
      if (isa_ns::set_gemm_tc_fma512(fma512 != 0) != (fma512 != 0)) continue;  // no VPOPCNTDQ here
      for (const GemmAccumulation& acc : {GemmAccumulation{Accumulation::kHopper, 0, 1},
                                          GemmAccumulation{Accumulation::kAda, 128, 2}}) {
        std::vector<float> d(std::size_t(M) * std::size_t(N));
        _mm_setcsr(csr);
        gemm_fp8_tn(M, N, K, a.data(), Format::kE4M3, 0.5f, b.data(), Format::kE5M2, 2.0f, acc, d.data());
        const unsigned after = _mm_getcsr();
        _mm_setcsr(saved_csr);
        INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << (fma512 ? " (FMA kernel)" : "") << ", MXCSR " << std::hex << csr
                                                   << " before, " << after << " after");
        CHECK((after & 0xFFC0u) == (csr & 0xFFC0u));  // rounding control, masks, DAZ and FTZ restored
        CHECK((after & 0x5u) == 0u);                   // no invalid or zero-divide flag (inexact may be set)
        ++runs;
      }
    }
  isa_ns::set_gemm_isa(saved_isa);
  isa_ns::set_gemm_tc_fma512(saved_fma512);
  omp_set_num_threads(saved_threads);
  CHECK(runs >= 2);
}
#endif

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

TEST_CASE("Transposes: every ISA path and thread count moves every fp32 bit pattern and code", "[element][gemm]") {
  // emu::transpose against out[c][r] = in[r][c] by index, on shapes with ragged 8 x 8, 16 x 16 and
  // 64 x 64 edges, with bit patterns (NaN payloads, -0, subnormals) that a value copy could change.
  namespace isa_ns = fp8emu::emu::detail;
  const isa_ns::GemmIsa saved_isa = isa_ns::gemm_isa();
  const int saved_threads = omp_get_max_threads();
  for (const auto& [rows, cols] : {std::pair{1, 1}, std::pair{1, 9}, std::pair{7, 3}, std::pair{8, 8},
                                   std::pair{37, 256}, std::pair{130, 67}, std::pair{200, 513}}) {
    std::vector<std::uint32_t> bits(std::size_t(rows) * std::size_t(cols));
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = std::uint32_t(i * 2654435761u) ^ 0x7FC00001u * (i % 3 == 0);
    std::vector<float> in(bits.size()), out(bits.size());
    std::memcpy(in.data(), bits.data(), 4 * bits.size());
    std::vector<std::uint8_t> codes(bits.size()), cout(bits.size());
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = std::uint8_t(bits[i] >> 11);
    for (int p = 0; p <= int(isa_ns::gemm_isa_supported()); ++p)
      for (int threads : {1, 2}) {
        REQUIRE(isa_ns::set_gemm_isa(isa_ns::GemmIsa(p)) == isa_ns::GemmIsa(p));
        omp_set_num_threads(threads);
        std::fill(out.begin(), out.end(), 0.0f);
        std::fill(cout.begin(), cout.end(), std::uint8_t(0));
        emu::transpose(rows, cols, in.data(), out.data());
        emu::transpose(rows, cols, codes.data(), cout.data());
        std::size_t bad = 0, bad_codes = 0;
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c) {
            const std::size_t src = std::size_t(r) * std::size_t(cols) + std::size_t(c);
            const std::size_t dst = std::size_t(c) * std::size_t(rows) + std::size_t(r);
            bad += std::memcmp(&out[dst], &bits[src], 4) != 0;
            bad_codes += cout[dst] != codes[src];
          }
        INFO(isa_ns::to_string(isa_ns::GemmIsa(p)) << ", " << threads << " threads, " << rows << " x " << cols);
        CHECK(bad == 0);
        CHECK(bad_codes == 0);
      }
  }
  isa_ns::set_gemm_isa(saved_isa);
  omp_set_num_threads(saved_threads);
}

TEST_CASE("CPU block-scaled GEMM: every ISA path and thread count equals element_device() bit for bit",
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
  const Shape shapes[] = {{1, 1, 1, 32},     {5, 70, 45, 32},    {37, 13, 300, 32}, {9, 140, 300, 128},
                          {70, 9, 64, 32},   {13, 290, 520, 16}, {7, 70, 200, 48}};
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
      {  // the reference: element_device()'s block-scaled GEMM (host memory)
        const auto& ref = fp8emu::backend::element_device();
        ref.gemm_fp8_block_tn(A.n, B.n, A.k, A.block, A.codes.data(), A.format, A.scale_inv.data(), B.codes.data(),
                              B.format, B.scale_inv.data(), nullptr, nullptr, {}, want.data());
      }
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
