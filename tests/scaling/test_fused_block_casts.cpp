// The two-view block casts (Device::block_cast with both views, TE's fused two-axis kernels) against
// the single-view casts of the per-element reference (element_device()) and the emulator's
// single-axis functions, bit for bit: codes, scale_inv and the counts, for cpu_device() and
// element_device(), over ragged shapes (rows and cols not multiples of 32 or 128, a single row or
// column), NaN/Inf/zero/subnormal/overflow inputs, whole blocks of zeros and of NaNs, both E8M0
// rules, pow2 scales on and off, both formats and every choice of views. The GPU is compared the
// same way by the device check (`fp8emu validate`, tests/gpu). A comparison that cannot fail proves
// nothing: the last cases feed it a copy with one changed code, scale or count and require it to
// say so.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/scaling/block_quantizer.hpp"
#include "fp8emu/scaling/mxfp8_quantizer.hpp"
#include "fp8emu/util/error.hpp"

using namespace fp8emu;

namespace {

std::uint32_t bits(float f) { return core::f32_to_bits(f); }

// The first difference between two operands or two stats ("" when they are bit-identical).
std::string diff_block(const emu::BlockQuantized& a, const emu::BlockQuantized& b) {
  if (a.n != b.n || a.k != b.k || a.block != b.block || a.format != b.format) return "shape or format";
  if (a.codes.size() != b.codes.size() || a.scale_inv.size() != b.scale_inv.size() || a.e8m0.size() != b.e8m0.size())
    return "sizes";
  for (std::size_t i = 0; i < a.codes.size(); ++i)
    if (a.codes[i] != b.codes[i]) return "codes[" + std::to_string(i) + "]";
  for (std::size_t i = 0; i < a.scale_inv.size(); ++i)
    if (bits(a.scale_inv[i]) != bits(b.scale_inv[i])) return "scale_inv[" + std::to_string(i) + "]";
  for (std::size_t i = 0; i < a.e8m0.size(); ++i)
    if (a.e8m0[i] != b.e8m0[i]) return "e8m0[" + std::to_string(i) + "]";
  return "";
}
std::string diff_stats(const emu::QuantizeStats& a, const emu::QuantizeStats& b) {
  if (a.count != b.count) return "stats.count";
  if (a.saturated != b.saturated) return "stats.saturated";
  if (a.underflow != b.underflow) return "stats.underflow";
  if (a.nan != b.nan) return "stats.nan";
  return "";
}

// Values of every kind, blocks of zeros and of NaNs included; deterministic in the seed.
std::vector<float> ragged_inputs(int rows, int cols, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float m4 = max_finite_f32(Format::kE4M3), m5 = max_finite_f32(Format::kE5M2);
  const float specials[] = {NAN, -NAN, core::bits_to_f32(0x7F800001u), core::bits_to_f32(0xFFFFFFFFu), INFINITY,
                            -INFINITY, 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, core::bits_to_f32(1u),
                            core::bits_to_f32(0x807FFFFFu), m4, -m4, m5, std::nextafter(m4, FLT_MAX),
                            0x1p-9f * 0.5f, 0x1p-16f * 2.5f, 0x1p-126f};
  const std::size_t n_special = sizeof specials / sizeof specials[0];
  std::vector<float> x(std::size_t(rows) * std::size_t(cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float v;
      const float u = unit(g);
      if ((r / 5) % 7 == 3 && c < 40) v = 0.0f;                   // rows of zero blocks
      else if ((c / 3) % 11 == 5 && r >= 32 && r < 64) v = NAN;  // column blocks of NaN
      else if (u < 0.08f) v = specials[g() % n_special];
      else if (u < 0.3f) v = (g() & 1u ? -1.0f : 1.0f) * std::exp2(-40.0f + 80.0f * unit(g));  // wide
      else if (u < 0.4f) v = (g() & 1u ? -1.0f : 1.0f) * std::exp2(-24.0f + 16.0f * unit(g));  // FP8 subnormals
      else v = normal(g) * float(1 + (r % 4) * 100);
      x[std::size_t(r) * std::size_t(cols) + std::size_t(c)] = v;
    }
  return x;
}

const int kShapes[][2] = {{1, 1}, {1, 33}, {33, 1}, {3, 200}, {31, 33}, {37, 45}, {64, 128}, {65, 130},
                          {96, 257}, {129, 131}, {130, 256}, {257, 40}};

struct Variant {
  bool mx;
  E8M0Rule rule;
  int block;
  bool pow2;
  float eps;
};

std::string describe(const Variant& v, Format fmt, int rows, int cols, int outputs) {
  std::string s = v.mx ? std::string("mxfp8 ") + (v.rule == E8M0Rule::kOcp ? "ocp" : "te")
                       : "block 1x" + std::to_string(v.block) + (v.pow2 ? " pow2" : " fp32") +
                             (v.eps > 0.0f ? " eps" : "");
  return s + " " + format_name(fmt) + " [" + std::to_string(rows) + "x" + std::to_string(cols) + "] outputs " +
         std::to_string(outputs);
}

std::vector<Variant> variants() {
  return {{true, E8M0Rule::kTransformerEngine, 32, false, 0.0f},
          {true, E8M0Rule::kOcp, 32, false, 0.0f},
          {false, E8M0Rule::kTransformerEngine, 128, true, 0.0f},
          {false, E8M0Rule::kTransformerEngine, 128, false, 0.0f},
          {false, E8M0Rule::kTransformerEngine, 32, false, 1e-3f},
          {false, E8M0Rule::kTransformerEngine, 48, true, 0.0f}};
}

backend::BlockCast cast_of(const Variant& v, Format fmt) {
  backend::BlockCast c;
  c.scale = v.mx ? backend::BlockScaleFormat::kE8M0 : backend::BlockScaleFormat::kFp32;
  c.fmt = fmt;
  c.rule = v.rule;
  c.block = v.block;
  c.pow2 = v.pow2;
  c.epsilon = v.eps;
  return c;
}

// The views one Device::block_cast writes (host memory), and its counts. outputs: 1 row-wise,
// 2 column-wise, 3 both. Buffers start filled with junk, the counters non-zero: the cast overwrites
// the views asked for, leaves the others, and adds to the counters.
struct Views {
  std::vector<std::uint8_t> rowwise, columnwise;
  std::vector<float> rowwise_scale_inv, columnwise_scale_inv;
  backend::CastCounters counters{5, 0, 0, 2};
};
Views block_cast(const backend::Device& d, const backend::BlockCast& c, const float* x, int rows, int cols,
                 int outputs) {
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  Views v;
  v.rowwise.assign(n, 0xA5);
  v.columnwise.assign(n, 0xA5);
  v.rowwise_scale_inv.assign(std::size_t(rows) * std::size_t((cols + c.block - 1) / c.block), -7.0f);
  v.columnwise_scale_inv.assign(std::size_t(cols) * std::size_t((rows + c.block - 1) / c.block), -7.0f);
  d.block_cast(c, x, rows, cols,
               outputs & 1 ? backend::BlockView{v.rowwise.data(), v.rowwise_scale_inv.data()} : backend::BlockView{},
               outputs & 2 ? backend::BlockView{v.columnwise.data(), v.columnwise_scale_inv.data()}
                           : backend::BlockView{},
               &v.counters);
  return v;
}

// The first difference between two views ("" when they are bit-identical).
std::string diff_views(const Views& a, const Views& b) {
  auto codes = [](const char* what, const std::vector<std::uint8_t>& x, const std::vector<std::uint8_t>& y) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) return std::string(what) + "[" + std::to_string(i) + "]";
    return std::string();
  };
  auto scales = [](const char* what, const std::vector<float>& x, const std::vector<float>& y) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (bits(x[i]) != bits(y[i])) return std::string(what) + "[" + std::to_string(i) + "]";
    return std::string();
  };
  for (const std::string& d :
       {codes("rowwise", a.rowwise, b.rowwise), codes("columnwise", a.columnwise, b.columnwise),
        scales("rowwise scale_inv", a.rowwise_scale_inv, b.rowwise_scale_inv),
        scales("columnwise scale_inv", a.columnwise_scale_inv, b.columnwise_scale_inv)})
    if (!d.empty()) return d;
  if (a.counters.count != b.counters.count) return "counters.count";
  if (a.counters.saturated != b.counters.saturated) return "counters.saturated";
  if (a.counters.underflow != b.counters.underflow) return "counters.underflow";
  if (a.counters.nan != b.counters.nan) return "counters.nan";
  return "";
}

// One view of the emulator's single-axis cast (emu::quantize_mxfp8 / quantize_block_1d) as Views
// hold it, with `outputs` naming the view and the counts added to {5, 0, 0, 2}.
Views emulator_view(const Variant& v, Format fmt, const float* x, int rows, int cols, int outputs, Views base) {
  const emu::BlockAxis axis = outputs == 1 ? emu::BlockAxis::kRowwise : emu::BlockAxis::kColumnwise;
  emu::QuantizeStats st;
  const emu::BlockQuantized q = v.mx ? emu::quantize_mxfp8(x, rows, cols, axis, fmt, v.rule, &st)
                                     : emu::quantize_block_1d(x, rows, cols, axis, fmt, v.block, v.pow2, v.eps, &st);
  (outputs == 1 ? base.rowwise : base.columnwise) = q.codes;
  (outputs == 1 ? base.rowwise_scale_inv : base.columnwise_scale_inv) = q.scale_inv;
  base.counters = {5 + st.count, st.saturated, st.underflow, 2 + st.nan};
  return base;
}

}  // namespace

TEST_CASE("Two-view block casts equal the single-view casts bit for bit (cpu and element devices)",
          "[fused][block]") {
  const backend::Device* devices[] = {&backend::cpu_device(), &backend::element_device()};
  const backend::Device& reference = backend::element_device();
  std::uint64_t compared = 0, seed = 7;
  for (const auto& shape : kShapes) {
    const int rows = shape[0], cols = shape[1];
    const std::vector<float> x = ragged_inputs(rows, cols, ++seed);
    for (const Format fmt : {Format::kE4M3, Format::kE5M2})
      for (const Variant& v : variants()) {
        const backend::BlockCast c = cast_of(v, fmt);
        // The reference: the element device's single-view casts, and what both views must hold (the
        // row-wise view's counts, as the quantizers count a kBoth cast).
        const Views ra = block_cast(reference, c, x.data(), rows, cols, 1);
        const Views ca = block_cast(reference, c, x.data(), rows, cols, 2);
        Views both = ra;
        both.columnwise = ca.columnwise;
        both.columnwise_scale_inv = ca.columnwise_scale_inv;
        INFO(describe(v, fmt, rows, cols, 0));
        // The emulator's single-axis functions (the CPU paths, SIMD and OpenMP) agree with it.
        CHECK(diff_views(ra, emulator_view(v, fmt, x.data(), rows, cols, 1, ra)) == "");
        CHECK(diff_views(ca, emulator_view(v, fmt, x.data(), rows, cols, 2, ca)) == "");
        for (const backend::Device* d : devices)
          for (const int outputs : {3, 1, 2}) {
            INFO(d->name() << " " << describe(v, fmt, rows, cols, outputs));
            CHECK(diff_views(outputs == 3 ? both : outputs == 1 ? ra : ca,
                             block_cast(*d, c, x.data(), rows, cols, outputs)) == "");
            ++compared;
          }
      }
  }
  CHECK(compared == std::size(kShapes) * 2 * variants().size() * 2 * 3);
}

TEST_CASE("Two-view block casts: empty shapes, and the errors of the single-axis casts", "[fused][block]") {
  for (const backend::Device* d : {&backend::cpu_device(), &backend::element_device()}) {
    INFO(d->name());
    backend::BlockCast mx = cast_of({true, E8M0Rule::kTransformerEngine, 32, false, 0.0f}, Format::kE4M3);
    backend::BlockCast b128 = cast_of({false, E8M0Rule::kTransformerEngine, 128, true, 0.0f}, Format::kE4M3);
    std::uint8_t code = 0x5A;
    float scale = -7.0f;
    backend::CastCounters k;
    d->block_cast(mx, nullptr, 3, 0, {&code, &scale}, {&code, &scale}, &k);  // nothing to cast or write
    CHECK(k.count == 0);
    CHECK(code == 0x5A);
    const float x[4] = {1, 2, 3, 4};
    CHECK_THROWS_WITH(d->block_cast(mx, x, 2, 2, {}, {}, &k), Catch::Contains("no view asked for"));
    CHECK_THROWS_WITH(d->block_cast(b128, x, 2, 2, {}, {}, &k), Catch::Contains("no view asked for"));
    CHECK_THROWS_WITH(d->block_cast(mx, x, -1, 2, {&code, &scale}, {}, &k), Catch::Contains("negative shape"));
    backend::BlockCast b0 = b128;
    b0.block = 0;
    CHECK_THROWS_WITH(d->block_cast(b0, x, 2, 2, {}, {&code, &scale}, &k), Catch::Contains("block size must be >= 1"));
    backend::BlockCast bf = b128;
    bf.fmt = Format::kBFloat16;
    CHECK_THROWS_AS(d->block_cast(bf, x, 2, 2, {&code, &scale}, {}, &k), Error);
    backend::BlockCast e8m0_tiles = mx;
    e8m0_tiles.tiles = true;
    CHECK_THROWS_WITH(d->block_cast(e8m0_tiles, x, 2, 2, {&code, &scale}, {}, &k),
                      Catch::Contains("tiles take fp32 or E4M3 scales"));
  }
}

TEST_CASE("Two-view block casts: the comparison catches one changed code, scale or count", "[fused][block]") {
  const int rows = 37, cols = 45;
  const std::vector<float> x = ragged_inputs(rows, cols, 99);
  const backend::BlockCast c = cast_of({true, E8M0Rule::kTransformerEngine, 32, false, 0.0f}, Format::kE4M3);
  const Views a = block_cast(backend::cpu_device(), c, x.data(), rows, cols, 3);
  REQUIRE(diff_views(a, a) == "");
  Views b = a;
  b.columnwise[17] ^= 1u;
  CHECK(diff_views(a, b) == "columnwise[17]");
  b = a;
  b.columnwise_scale_inv.back() = std::nextafter(b.columnwise_scale_inv.back(), INFINITY);
  CHECK(diff_views(a, b) == "columnwise scale_inv[" + std::to_string(a.columnwise_scale_inv.size() - 1) + "]");
  b = a;
  b.rowwise_scale_inv[0] = -b.rowwise_scale_inv[0];
  CHECK(diff_views(a, b) == "rowwise scale_inv[0]");
  b = a;
  ++b.counters.underflow;
  CHECK(diff_views(a, b) == "counters.underflow");
  // The row-wise and column-wise copies really differ (one is not the other transposed): a fused
  // kernel that wrote one copy for both would fail the first test case.
  std::vector<std::uint8_t> transposed(a.rowwise.size());
  emu::transpose(rows, cols, a.rowwise.data(), transposed.data());
  CHECK(transposed != a.columnwise);
}

TEST_CASE("MXFP8 and 1x128 quantizers: both usages equal the row-wise and column-wise casts apart", "[fused][block]") {
  const int rows = 70, cols = 300;
  const std::vector<float> x = ragged_inputs(rows, cols, 5);
  const backend::Device& k = backend::cpu_device();
  for (int recipe = 0; recipe < 2; ++recipe) {
    INFO((recipe == 0 ? "mxfp8" : "block"));
    std::unique_ptr<scaling::Quantizer> q;
    if (recipe == 0)
      q = scaling::MXFP8BlockScaling{}.make_quantizer(scaling::Direction::kForward);
    else
      q = scaling::Float8BlockScaling{}.make_quantizer(scaling::Direction::kForward);
    emu::QuantizeStats s_both, s_row, s_col;
    const scaling::QuantizedTensor both =
        q->quantize(k, x.data(), rows, cols, scaling::TensorRole::kInput, scaling::Usage::kBoth, &s_both);
    const scaling::QuantizedTensor row =
        q->quantize(k, x.data(), rows, cols, scaling::TensorRole::kInput, scaling::Usage::kRowwise, &s_row);
    const scaling::QuantizedTensor col =
        q->quantize(k, x.data(), rows, cols, scaling::TensorRole::kInput, scaling::Usage::kColumnwise, &s_col);
    CHECK(diff_block(both.blocks().rowwise, row.blocks().rowwise) == "");
    CHECK(diff_block(both.blocks().columnwise, col.blocks().columnwise) == "");
    CHECK(diff_stats(s_both, s_row) == "");  // kBoth counts the row-wise cast only
    CHECK(s_col.count == std::uint64_t(rows) * std::uint64_t(cols));
    CHECK(row.blocks().columnwise.codes.empty());
    CHECK(col.blocks().rowwise.codes.empty());
  }
}
