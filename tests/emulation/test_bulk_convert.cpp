// Bulk FP8 cast and dequantization kernels against the scalar core, element by element:
//   q[i] == core::encode_f32_bits(bits(widen(x[i]) * scale), spec, kSatFinite)
// with the amax and the counts of emu::quantize's definition (max |x| over non-NaN x, F.overflows(|x*s|),
// finite non-zero x flushed to a zero code, NaN x). Inputs: every fp32 pattern of the top 16 bits
// with low halves that make ties and sticky bits, every special, random patterns; all 2^16 bf16 and
// fp16 patterns; scales including subnormal, huge, 0, -1, Inf and NaN; lengths 0..67 and large
// ones at unaligned addresses; 1 and 2 OpenMP threads; every instruction-set build of the kernel.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "bulk_kernels.hpp"  // private: the span kernel, instantiated below per instruction set
#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"
#include "support/bits.hpp"

using namespace fp8emu;
using fp8emu::testing::bits;

namespace {

float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// What the bulk cast must produce for inputs already widened to fp32 (bit patterns).
struct Expected {
  std::vector<std::uint8_t> q;
  float amax = 0.0f;
  emu::QuantizeStats stats;
};

Expected reference(const std::vector<std::uint32_t>& wide, float scale, Format fmt) {
  const FormatSpec& f = spec_of(fmt);
  Expected e;
  e.q.resize(wide.size());
  e.stats.count = wide.size();
  for (std::size_t i = 0; i < wide.size(); ++i) {
    const float x = float_of(wide[i]);
    const float s = x * scale;
    // The recipe kernels' conversion: CUDA's satfinite, or ROCm's for FNUZ (finite overflow to max,
    // Inf and NaN to NaN: the encoder's ml_dtypes-saturate policy, the one NaN code either way).
    const std::uint8_t c = f.fnuz ? core::encode_f32_bits_with(bits(s), f, Policy::ml_dtypes_saturate())
                                  : core::encode_f32_bits(bits(s), f, Saturation::kSatFinite);
    e.q[i] = c;
    // Every NaN is ignored, signalling ones too (CUDA's fmaxf); glibc's fmaxf returns NaN for a
    // signalling NaN operand (IEEE 754-2008 maxNum), so the reference skips NaN explicitly.
    if (!std::isnan(x)) e.amax = std::max(e.amax, std::fabs(x));
    e.stats.nan += std::isnan(x);
    e.stats.saturated += f.overflows(std::fabs(s)) && !(f.fnuz && std::isinf(s));  // FNUZ: Inf becomes NaN
    e.stats.underflow += (std::isfinite(x) && x != 0.0f && f.is_zero_code(c));
  }
  return e;
}

void check_stats(const emu::QuantizeStats& got, const emu::QuantizeStats& want) {
  CHECK(got.count == want.count);
  CHECK(got.saturated == want.saturated);
  CHECK(got.underflow == want.underflow);
  CHECK(got.nan == want.nan);
}

// Index of the first difference, or -1.
template <class T>
long first_mismatch(const T* a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < b.size(); ++i)
    if (a[i] != b[i]) return long(i);
  return -1;
}

// Scales: plain, inexact, subnormal, huge (products overflow to Inf), zero and signed, Inf, NaN.
const float kScales[] = {1.0f,     0.3f,     1.0f / 3.0f,     7.77e-3f, 6.1e4f, max_finite_f32(Format::kE4M3) / 3.7f,
                         0x1p-20f, 0x1p-149f, 0x1.fffffep127f, 0.0f,    -0.0f,  -1.0f,
                         -2.5e-3f, INFINITY, NAN};

// fp32 inputs: the top 16 bits through all 2^16 values with low halves that are zero, one, just
// below and at the half-way point of bit 16 and all ones; specials; random patterns.
std::vector<std::uint32_t> structured_f32() {
  std::vector<std::uint32_t> v;
  for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
    for (std::uint32_t hi = 0; hi < 0x10000u; ++hi) v.push_back((hi << 16) | lo);
  const float e4m3_max = max_finite_f32(Format::kE4M3), e5m2_max = max_finite_f32(Format::kE5M2);
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min(), e4m3_max, 464.0f,
                  464.00003f, e5m2_max, 61440.0f, 61439.996f, 0x1p-10f, 0x1.8p-10f, 0x1p-17f, 0x1.8p-17f})
    v.push_back(bits(s));
  std::mt19937 g(12345);
  for (int i = 0; i < 100000; ++i) v.push_back(std::uint32_t(g()));
  return v;
}

std::vector<std::uint16_t> all_16bit() {
  std::vector<std::uint16_t> v(0x10000);
  for (std::uint32_t i = 0; i < 0x10000u; ++i) v[i] = std::uint16_t(i);
  return v;
}

// The three public 1-D entry points behind one signature (wide = fp32 bits of the inputs).
enum class In { kF32, kBF16, kF16 };
const char* name_of(In t) { return t == In::kF32 ? "fp32" : t == In::kBF16 ? "bf16" : "fp16"; }

struct Input {
  In type;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;
  std::vector<std::uint32_t> wide;  // widened exactly, by the core
  std::size_t size() const { return wide.size(); }
};

Input make_f32(const std::vector<std::uint32_t>& b) {
  Input in{In::kF32, {}, {}, b};
  for (std::uint32_t u : b) in.f32.push_back(float_of(u));
  return in;
}
Input make_16(In t, const std::vector<std::uint16_t>& h) {
  Input in{t, {}, h, {}};
  for (std::uint16_t v : h) in.wide.push_back(t == In::kBF16 ? core::bf16_to_f32_bits(v) : core::half_to_f32_bits(v));
  return in;
}

// Cast elements [off, off + n) of `in` into q (q[0] is element off).
void cast(const Input& in, std::size_t off, std::size_t n, float scale, Format fmt, std::uint8_t* q, float* amax,
          emu::QuantizeStats* st) {
  switch (in.type) {
    case In::kF32: emu::quantize_f32(in.f32.data() + off, n, scale, fmt, q, amax, st); break;
    case In::kBF16: emu::quantize_bf16(in.h16.data() + off, n, scale, fmt, q, amax, st); break;
    case In::kF16: emu::quantize_f16(in.h16.data() + off, n, scale, fmt, q, amax, st); break;
  }
}

void cast_2d(const Input& in, std::size_t rows, std::size_t cols, float scale, Format fmt, std::uint8_t* qr,
             std::uint8_t* qc, float* amax, emu::QuantizeStats* st) {
  switch (in.type) {
    case In::kF32: emu::quantize_f32_2d(in.f32.data(), rows, cols, scale, fmt, qr, qc, amax, st); break;
    case In::kBF16: emu::quantize_bf16_2d(in.h16.data(), rows, cols, scale, fmt, qr, qc, amax, st); break;
    case In::kF16: emu::quantize_f16_2d(in.h16.data(), rows, cols, scale, fmt, qr, qc, amax, st); break;
  }
}

// Whole-array check of one input set against the reference, for every scale, both formats, with
// and without counts.
void check_all_scales(const Input& in) {
  for (Format fmt : {Format::kE4M3, Format::kE5M2, Format::kE4M3FNUZ, Format::kE5M2FNUZ}) {
    for (float scale : kScales) {
      const Expected want = reference(in.wide, scale, fmt);
      for (bool with_stats : {false, true}) {
        INFO(name_of(in.type) << " " << spec_of(fmt).name << " scale " << scale << " stats " << with_stats);
        std::vector<std::uint8_t> q(in.size(), 0xAA);
        float amax = 0.0f;
        emu::QuantizeStats st;
        cast(in, 0, in.size(), scale, fmt, q.data(), &amax, with_stats ? &st : nullptr);
        const long bad = first_mismatch(q.data(), want.q);
        INFO("first mismatch at " << bad << " (input bits 0x" << std::hex << (bad >= 0 ? in.wide[std::size_t(bad)] : 0u)
                                  << ")");
        CHECK(bad == -1);
        CHECK(bits(amax) == bits(want.amax));
        if (with_stats) check_stats(st, want.stats);
      }
    }
  }
}

}  // namespace

TEST_CASE("bulk fp32 -> FP8 equals the scalar core on structured and random patterns", "[emulation][bulk]") {
  check_all_scales(make_f32(structured_f32()));
}

TEST_CASE("bulk bf16 and fp16 -> FP8 equal the scalar core for all 2^16 inputs", "[emulation][bulk]") {
  check_all_scales(make_16(In::kBF16, all_16bit()));
  check_all_scales(make_16(In::kF16, all_16bit()));
}

TEST_CASE("branch-free fp16 widening equals core::half_to_f32_bits for all 2^16 inputs", "[emulation][bulk]") {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    INFO("half 0x" << std::hex << h);
    CHECK(emu::detail::WidenF16::bits(std::uint16_t(h)) == core::half_to_f32_bits(std::uint16_t(h)));
  }
}

TEST_CASE("bulk cast: lengths 0..67 and large, unaligned, nothing written outside the output",
          "[emulation][bulk]") {
  const std::vector<std::uint32_t> base = structured_f32();
  std::vector<std::uint16_t> h16(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) h16[i] = std::uint16_t(base[i] >> 7);  // mixes exponents
  const Input inputs[] = {make_f32(base), make_16(In::kBF16, h16), make_16(In::kF16, h16)};
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 67; ++n) lengths.push_back(n);
  lengths.insert(lengths.end(), {255, 256, 257, 16383, 16384, 16385, 100003, 300001});
  const int saved = omp_get_max_threads();
  for (const Input& in : inputs) {
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (std::size_t n : lengths) {
        for (std::size_t in_off : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
          const std::size_t out_off = 1 + (n + in_off) % 7;  // output never 8-byte aligned
          const Format fmt = (n + in_off) % 2 ? Format::kE5M2 : Format::kE4M3;
          const float scale = (n % 3 == 0) ? 0.3f : 1024.0f;
          const std::vector<std::uint32_t> part(in.wide.begin() + long(in_off), in.wide.begin() + long(in_off + n));
          const Expected want = reference(part, scale, fmt);
          std::vector<std::uint8_t> buf(n + out_off + 8, 0xAA);
          float amax = -1.0f;  // max-accumulated: fmaxf(-1, max|x|), and 0 for n == 0
          emu::QuantizeStats st;
          cast(in, in_off, n, scale, fmt, buf.data() + out_off, &amax, &st);
          INFO(name_of(in.type) << " n " << n << " in_off " << in_off << " out_off " << out_off << " threads "
                                << threads);
          CHECK(first_mismatch(buf.data() + out_off, want.q) == -1);
          CHECK(bits(amax) == bits(want.amax));
          check_stats(st, want.stats);
          bool guards = true;
          for (std::size_t i = 0; i < out_off; ++i) guards = guards && buf[i] == 0xAA;
          for (std::size_t i = out_off + n; i < buf.size(); ++i) guards = guards && buf[i] == 0xAA;
          CHECK(guards);
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("bulk cast: identical bytes, amax and counts for 1 and 2 threads", "[emulation][bulk][determinism]") {
  std::mt19937 g(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(std::size_t(5) << 15 | 17);
  for (float& v : x) v = normal(g) * ((g() & 1023) == 0 ? 1e4f : 1.0f);
  x[12345] = NAN;
  x[54321] = -INFINITY;
  const int saved = omp_get_max_threads();
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    std::vector<std::uint8_t> q1(x.size()), q2(x.size());
    float a1 = 0.0f, a2 = 0.0f;
    emu::QuantizeStats s1, s2;
    omp_set_num_threads(1);
    emu::quantize_f32(x.data(), x.size(), 100.0f, fmt, q1.data(), &a1, &s1);
    omp_set_num_threads(2);
    emu::quantize_f32(x.data(), x.size(), 100.0f, fmt, q2.data(), &a2, &s2);
    CHECK(q1 == q2);
    CHECK(bits(a1) == bits(a2));
    check_stats(s1, s2);
    CHECK(s1.saturated > 0);
    CHECK(s1.nan == 1);
  }
  omp_set_num_threads(saved);
}

TEST_CASE("emu::quantize (the layers' cast, now on the bulk kernel) equals the scalar core", "[emulation][bulk]") {
  const Input in = make_f32(structured_f32());
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    for (float scale : kScales) {
      const Expected want = reference(in.wide, scale, fmt);
      std::vector<std::uint8_t> q(in.size());
      float amax = 0.0f;
      const emu::QuantizeStats st = emu::quantize(in.f32.data(), in.size(), scale, fmt, q.data(), &amax);
      INFO(spec_of(fmt).name << " scale " << scale);
      CHECK(first_mismatch(q.data(), want.q) == -1);
      CHECK(bits(amax) == bits(want.amax));
      check_stats(st, want.stats);
    }
  }
}

TEST_CASE("2-D cast: column-wise output is the transpose of the row-wise output", "[emulation][bulk][2d]") {
  const std::vector<std::uint32_t> base = structured_f32();
  std::vector<std::uint16_t> h16(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) h16[i] = std::uint16_t((base[i] >> 9) ^ base[i]);
  const Input inputs[] = {make_f32(base), make_16(In::kBF16, h16), make_16(In::kF16, h16)};
  const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1},   {3, 130}, {129, 7}, {64, 64},  {65, 129},
                                                        {200, 1}, {1, 200}, {0, 5},   {5, 0},    {130, 3},
                                                        {257, 300}, {63, 65}, {1, 70000}, {70000, 1}};
  const int saved = omp_get_max_threads();
  for (const Input& in : inputs) {
    for (auto [rows, cols] : shapes) {
      const std::size_t n = rows * cols;
      REQUIRE(n <= in.size());
      const Format fmt = (rows + cols) % 2 ? Format::kE5M2 : Format::kE4M3;
      const float scale = 3.7f;
      const std::vector<std::uint32_t> part(in.wide.begin(), in.wide.begin() + long(n));
      const Expected want = reference(part, scale, fmt);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        INFO(name_of(in.type) << " " << rows << " x " << cols << " threads " << threads);
        std::vector<std::uint8_t> row(n + 1, 0xAA), col(n + 1, 0xAA), col_only(n + 1, 0xAA), row_only(n + 1, 0xAA);
        float amax = 0.0f, amax_col = 0.0f, amax_row = 0.0f;
        emu::QuantizeStats st, st_col, st_row;
        cast_2d(in, rows, cols, scale, fmt, row.data(), col.data(), &amax, &st);
        cast_2d(in, rows, cols, scale, fmt, nullptr, col_only.data(), &amax_col, &st_col);
        cast_2d(in, rows, cols, scale, fmt, row_only.data(), nullptr, &amax_row, &st_row);
        CHECK(first_mismatch(row.data(), want.q) == -1);
        bool transposed = true;
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols; ++c) transposed = transposed && col[c * rows + r] == want.q[r * cols + c];
        CHECK(transposed);
        CHECK(col_only == col);
        CHECK(row_only == row);
        CHECK((row[n] == 0xAA && col[n] == 0xAA));
        for (float a : {amax, amax_col, amax_row}) CHECK(bits(a) == bits(want.amax));
        for (const emu::QuantizeStats& s : {st, st_col, st_row}) check_stats(s, want.stats);
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("byte block transposes of the 2-D cast: the portable 8 x 8 and the SSE2 16 x 16", "[emulation][bulk][2d]") {
  std::mt19937 g(3);
  std::vector<std::uint8_t> src(16 * 37);
  for (auto& b : src) b = std::uint8_t(g());
  for (std::size_t ld_dst : {std::size_t(16), std::size_t(21), std::size_t(40)}) {
    std::vector<std::uint8_t> dst(16 * ld_dst, 0xAA);
    emu::detail::transpose_block_u64(src.data() + 5, 37, dst.data() + 1, ld_dst);
    bool ok = true;
    for (std::size_t r = 0; r < 8; ++r)
      for (std::size_t c = 0; c < 8; ++c) ok = ok && dst[1 + c * ld_dst + r] == src[5 + r * 37 + c];
    CHECK(ok);
#if defined(__SSE2__)
    std::fill(dst.begin(), dst.end(), 0xAA);
    emu::detail::transpose_block_sse2(src.data() + 3, 37, dst.data(), ld_dst);
    ok = true;
    for (std::size_t r = 0; r < 16; ++r)
      for (std::size_t c = 0; c < 16; ++c) ok = ok && dst[c * ld_dst + r] == src[3 + r * 37 + c];
    CHECK(ok);
#endif
  }
}

TEST_CASE("2-D cast rejects a call with no output and a size that overflows", "[emulation][bulk][2d][errors]") {
  const float x[4] = {1, 2, 3, 4};
  std::uint8_t q[4];
  CHECK_THROWS_AS(emu::quantize_f32_2d(x, 2, 2, 1.0f, Format::kE4M3, nullptr, nullptr, nullptr), Error);
  CHECK_THROWS_WITH(emu::quantize_f32_2d(x, std::size_t(1) << 40, std::size_t(1) << 40, 1.0f, Format::kE4M3, q,
                                         nullptr, nullptr),
                    Catch::Contains("overflows"));
}

TEST_CASE("dequantize to fp32 and bf16 equals decode * scale_inv and the core's RNE to bf16",
          "[emulation][bulk][dequantize]") {
  // Scales whose products land on bf16 ties (1 + 2^-8: bit 15 set, nothing below it for short
  // significands), overflow bf16 and fp32, go subnormal, or are special.
  const float scales[] = {1.0f,      0.3f,        0x1.01p0f, 0x1.018p0f,        0x1.ffp-1f, 3.0e-5f, 0x1p-140f,
                          1.0e30f,   0x1.fep127f, 0.0f,      -1.0f,              INFINITY,   NAN};
  std::vector<std::uint8_t> codes;
  for (int rep = 0; rep < 300; ++rep)
    for (int c = 0; c < 256; ++c) codes.push_back(std::uint8_t(c * 7 + rep));  // all codes, shuffled
  const int saved = omp_get_max_threads();
  for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
    const FormatSpec& f = spec_of(fmt);
    for (float s : scales) {
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(31), std::size_t(67), codes.size() - 5}) {
          const std::size_t off = n % 5;
          std::vector<float> y(n + 1, -7.0f);
          std::vector<std::uint16_t> yb(n + 1, 0xAAAA);
          emu::dequantize_to_f32(codes.data() + off, n, s, fmt, y.data());
          emu::dequantize_to_bf16(codes.data() + off, n, s, fmt, yb.data());
          INFO(f.name << " scale_inv " << s << " n " << n << " threads " << threads);
          bool f32_ok = true, bf16_ok = true;
          for (std::size_t i = 0; i < n; ++i) {
            const float want = core::fp8_to_f32(codes[off + i], f) * s;
            f32_ok = f32_ok && (std::isnan(want) ? std::isnan(y[i]) : bits(y[i]) == bits(want));
            bf16_ok = bf16_ok && yb[i] == core::f32_bits_to_bf16_rne(bits(want));
          }
          CHECK(f32_ok);
          CHECK(bf16_ok);
          CHECK((y[n] == -7.0f && yb[n] == 0xAAAA));
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// Every instruction-set build of the span kernel (the library's target clones pick one at load
// time, so on any one machine the public API runs only one of them): the same source instantiated
// for AVX-512, AVX2 and the baseline, each compared with the core where the CPU can run it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
namespace {
template <const FormatSpec& F>
__attribute__((always_inline)) inline void span_any(const float* x, std::size_t n, float s, std::uint8_t* q,
                                                    std::uint32_t* a, emu::detail::Counts* c) {
  emu::detail::cast_span<F, emu::detail::WidenF32, true>(x, n, s, q, a, c);
}
using SpanFn = void (*)(const float*, std::size_t, float, std::uint8_t*, std::uint32_t*, emu::detail::Counts*);
template <const FormatSpec& F>
__attribute__((target("arch=x86-64-v4"))) void span_avx512(const float* x, std::size_t n, float s, std::uint8_t* q,
                                                           std::uint32_t* a, emu::detail::Counts* c) {
  span_any<F>(x, n, s, q, a, c);
}
template <const FormatSpec& F>
__attribute__((target("avx2"))) void span_avx2(const float* x, std::size_t n, float s, std::uint8_t* q,
                                               std::uint32_t* a, emu::detail::Counts* c) {
  span_any<F>(x, n, s, q, a, c);
}
template <const FormatSpec& F>
void span_base(const float* x, std::size_t n, float s, std::uint8_t* q, std::uint32_t* a, emu::detail::Counts* c) {
  span_any<F>(x, n, s, q, a, c);
}
// The per-tensor formats, in the order of the builds' kernel arrays below.
const Format kSpanFormats[] = {Format::kE4M3, Format::kE5M2, Format::kE4M3FNUZ, Format::kE5M2FNUZ};
// The block-scaled casts' kernel: one multiplier per element (cast_span_with + ScaleEach).
template <const FormatSpec& F>
__attribute__((always_inline)) inline void each_any(const float* x, std::size_t n, const float* m, std::uint8_t* q,
                                                    emu::detail::Counts* c) {
  std::uint32_t a = 0;
  emu::detail::cast_span_with<F, emu::detail::WidenF32, true>(x, n, emu::detail::ScaleEach{m}, q, &a, c);
}
using EachFn = void (*)(const float*, std::size_t, const float*, std::uint8_t*, emu::detail::Counts*);
__attribute__((target("arch=x86-64-v4"))) void each_avx512_e4m3(const float* x, std::size_t n, const float* m,
                                                                std::uint8_t* q, emu::detail::Counts* c) {
  each_any<kSpecE4M3>(x, n, m, q, c);
}
__attribute__((target("arch=x86-64-v4"))) void each_avx512_e5m2(const float* x, std::size_t n, const float* m,
                                                                std::uint8_t* q, emu::detail::Counts* c) {
  each_any<kSpecE5M2>(x, n, m, q, c);
}
__attribute__((target("avx2"))) void each_avx2_e4m3(const float* x, std::size_t n, const float* m, std::uint8_t* q,
                                                    emu::detail::Counts* c) {
  each_any<kSpecE4M3>(x, n, m, q, c);
}
__attribute__((target("avx2"))) void each_avx2_e5m2(const float* x, std::size_t n, const float* m, std::uint8_t* q,
                                                    emu::detail::Counts* c) {
  each_any<kSpecE5M2>(x, n, m, q, c);
}
void each_base_e4m3(const float* x, std::size_t n, const float* m, std::uint8_t* q, emu::detail::Counts* c) {
  each_any<kSpecE4M3>(x, n, m, q, c);
}
void each_base_e5m2(const float* x, std::size_t n, const float* m, std::uint8_t* q, emu::detail::Counts* c) {
  each_any<kSpecE5M2>(x, n, m, q, c);
}
}  // namespace

TEST_CASE("every instruction-set build of the per-element-multiplier cast equals core::cast_element",
          "[emulation][bulk][simd]") {
  // The block-scaled casts (MXFP8, 1 x 128, 128 x 128) expand each block's multiplier over its
  // elements: each element with its own multiplier (cycling through kScales and powers of two)
  // must give core::cast_element's code and counts.
  const Input in = make_f32(structured_f32());
  std::vector<float> mult(in.size());
  const std::size_t ns = sizeof kScales / sizeof kScales[0];
  for (std::size_t i = 0; i < in.size(); ++i)
    mult[i] = (i / 7) % 3 == 0 ? std::ldexp(1.0f, int(i % 61) - 30) : kScales[(i / 5) % ns];
  struct Build {
    const char* name;
    bool runs;
    EachFn e4m3, e5m2;
  };
  const Build builds[] = {
      {"x86-64-v4", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"),
       each_avx512_e4m3, each_avx512_e5m2},
      {"avx2", bool(__builtin_cpu_supports("avx2")), each_avx2_e4m3, each_avx2_e5m2},
      {"baseline", true, each_base_e4m3, each_base_e5m2},
  };
  for (const Build& b : builds) {
    if (!b.runs) {
      WARN("this CPU cannot run the " << b.name << " build; not checked here");
      continue;
    }
    for (Format fmt : {Format::kE4M3, Format::kE5M2}) {
      std::vector<std::uint8_t> want(in.size()), q(in.size());
      fp8emu::core::CastCounts wc;
      for (std::size_t i = 0; i < in.size(); ++i) want[i] = fp8emu::core::cast_element(in.f32[i], mult[i], spec_of(fmt), wc);
      emu::detail::Counts c;
      (fmt == Format::kE4M3 ? b.e4m3 : b.e5m2)(in.f32.data(), in.size(), mult.data(), q.data(), &c);
      INFO(b.name << " " << spec_of(fmt).name);
      CHECK(first_mismatch(q.data(), want) == -1);
      CHECK(c.saturated == wc.saturated);
      CHECK(c.underflow == wc.underflow);
      CHECK(c.nan == wc.nan);
    }
  }
}

TEST_CASE("every instruction-set build of the span kernel equals the scalar core", "[emulation][bulk][simd]") {
  const Input in = make_f32(structured_f32());
  struct Build {
    const char* name;
    bool runs;
    SpanFn kernels[4];  // kSpanFormats
  };
  const Build builds[] = {
      {"x86-64-v4", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"),
       {span_avx512<kSpecE4M3>, span_avx512<kSpecE5M2>, span_avx512<kSpecE4M3FNUZ>, span_avx512<kSpecE5M2FNUZ>}},
      {"avx2", bool(__builtin_cpu_supports("avx2")),
       {span_avx2<kSpecE4M3>, span_avx2<kSpecE5M2>, span_avx2<kSpecE4M3FNUZ>, span_avx2<kSpecE5M2FNUZ>}},
      {"baseline", true, {span_base<kSpecE4M3>, span_base<kSpecE5M2>, span_base<kSpecE4M3FNUZ>, span_base<kSpecE5M2FNUZ>}},
  };
  for (const Build& b : builds) {
    if (!b.runs) {
      WARN("this CPU cannot run the " << b.name << " build; not checked here");
      continue;
    }
    for (int fi = 0; fi < 4; ++fi) {
      const Format fmt = kSpanFormats[fi];
      for (float scale : kScales) {
        const Expected want = reference(in.wide, scale, fmt);
        std::vector<std::uint8_t> q(in.size());
        std::uint32_t amax = 0;
        emu::detail::Counts c;
        b.kernels[fi](in.f32.data(), in.size(), scale, q.data(), &amax, &c);
        INFO(b.name << " " << spec_of(fmt).name << " scale " << scale);
        CHECK(first_mismatch(q.data(), want.q) == -1);
        CHECK(amax == bits(want.amax));
        CHECK(c.saturated == want.stats.saturated);
        CHECK(c.underflow == want.stats.underflow);
        CHECK(c.nan == want.stats.nan);
      }
    }
  }
}
#endif

TEST_CASE("bulk fp32 -> FP8 equals the scalar core for all 2^32 inputs (scale 1, OCP and FNUZ formats)",
          "[emulation][bulk][exhaustive]") {
  // With scale 1 the fp32 multiply is exact, so the SIMD kernel must give core::encode_f32_bits of
  // every bit pattern; chunks of 2^24 inputs, the amax of each chunk checked as well.
  const std::size_t chunk = std::size_t(1) << 24;
  std::vector<float> x(chunk);
  std::vector<std::uint8_t> q4(chunk), q5(chunk), q4z(chunk), q5z(chunk);
  std::uint64_t bad = 0, bad_amax = 0;
  std::uint32_t first = 0;
  for (std::uint64_t base = 0; base < (std::uint64_t(1) << 32); base += chunk) {
    for (std::size_t i = 0; i < chunk; ++i) {
      const std::uint32_t b = std::uint32_t(base + i);
      std::memcpy(&x[i], &b, 4);
    }
    float amax = 0.0f;
    emu::quantize_f32(x.data(), chunk, 1.0f, Format::kE4M3, q4.data(), &amax);
    emu::quantize_f32(x.data(), chunk, 1.0f, Format::kE5M2, q5.data(), nullptr);
    emu::quantize_f32(x.data(), chunk, 1.0f, Format::kE4M3FNUZ, q4z.data(), nullptr);
    emu::quantize_f32(x.data(), chunk, 1.0f, Format::kE5M2FNUZ, q5z.data(), nullptr);
    float want_amax = 0.0f;
    std::uint64_t chunk_bad = 0;
    std::uint32_t chunk_first = 0xFFFFFFFFu;
#pragma omp parallel for schedule(static) reduction(+ : chunk_bad) reduction(min : chunk_first) \
    reduction(max : want_amax)
    for (std::int64_t i = 0; i < std::int64_t(chunk); ++i) {
      const std::uint32_t b = std::uint32_t(base + std::uint64_t(i));
      if (q4[std::size_t(i)] != core::encode_f32_bits(b, kSpecE4M3, Saturation::kSatFinite) ||
          q5[std::size_t(i)] != core::encode_f32_bits(b, kSpecE5M2, Saturation::kSatFinite) ||
          q4z[std::size_t(i)] != core::encode_f32_bits_with(b, kSpecE4M3FNUZ, Policy::ml_dtypes_saturate()) ||
          q5z[std::size_t(i)] != core::encode_f32_bits_with(b, kSpecE5M2FNUZ, Policy::ml_dtypes_saturate())) {
        ++chunk_bad;
        chunk_first = std::min(chunk_first, b);
      }
      const float a = std::fabs(x[std::size_t(i)]);
      if (a > want_amax) want_amax = a;  // false for NaN: ignored
    }
    if (chunk_bad && !bad) first = chunk_first;
    bad += chunk_bad;
    bad_amax += std::memcmp(&amax, &want_amax, 4) != 0;
  }
  INFO("first mismatching input bits 0x" << std::hex << first);
  CHECK(bad == 0);
  CHECK(bad_amax == 0);
}
