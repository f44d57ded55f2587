// The fused two-axis block casts (Kernels::quantize_mxfp8_both, quantize_block_1d_both) against the
// two single-axis calls they replace, bit for bit: codes, scale_inv, E8M0 codes and each copy's
// counts, for the emulated and the element kernel sets, over ragged shapes (rows and cols not
// multiples of 32 or 128, a single row or column), NaN/Inf/zero/subnormal/overflow inputs, whole
// blocks of zeros and of NaNs, both E8M0 rules, pow2 scales on and off, both formats and every
// choice of outputs. The GPU set is compared the same way by the kernel check (`fp8emu validate`,
// tests/gpu). A comparison that cannot fail proves nothing: the last cases feed it a copy with one
// changed code, scale, E8M0 code or count and require it to say so.
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
#include "fp8emu/backend/kernels.hpp"
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

emu::BlockQuantized single(const backend::Kernels& k, const Variant& v, const float* x, int rows, int cols,
                           emu::BlockAxis axis, Format fmt, emu::QuantizeStats* st) {
  return v.mx ? k.quantize_mxfp8(x, rows, cols, axis, fmt, v.rule, st)
              : k.quantize_block_1d(x, rows, cols, axis, fmt, v.block, v.pow2, v.eps, st);
}
void fused(const backend::Kernels& k, const Variant& v, const float* x, int rows, int cols, Format fmt,
           emu::BlockQuantized* qr, emu::BlockQuantized* qc, emu::QuantizeStats* sr, emu::QuantizeStats* sc) {
  if (v.mx)
    k.quantize_mxfp8_both(x, rows, cols, fmt, v.rule, qr, qc, sr, sc);
  else
    k.quantize_block_1d_both(x, rows, cols, fmt, v.block, v.pow2, v.eps, qr, qc, sr, sc);
}

}  // namespace

TEST_CASE("Fused block casts equal the two single-axis casts bit for bit (emulated and element sets)",
          "[fused][block]") {
  const backend::Kernels* sets[] = {&backend::emulated_kernels(), &backend::element_kernels()};
  const backend::Kernels& reference = backend::element_kernels();
  std::uint64_t compared = 0, seed = 7;
  for (const auto& shape : kShapes) {
    const int rows = shape[0], cols = shape[1];
    const std::vector<float> x = ragged_inputs(rows, cols, ++seed);
    for (const Format fmt : {Format::kE4M3, Format::kE5M2})
      for (const Variant& v : variants()) {
        // The reference: the element set's single-axis calls.
        emu::QuantizeStats sra, sca;
        const emu::BlockQuantized ra = single(reference, v, x.data(), rows, cols, emu::BlockAxis::kRowwise, fmt, &sra);
        const emu::BlockQuantized ca = single(reference, v, x.data(), rows, cols, emu::BlockAxis::kColumnwise, fmt, &sca);
        for (const backend::Kernels* k : sets) {
          // The set's own single-axis calls first (the emulator's OpenMP/SIMD paths are checked
          // against the element layer elsewhere too).
          emu::QuantizeStats srk, sck;
          CHECK(diff_block(ra, single(*k, v, x.data(), rows, cols, emu::BlockAxis::kRowwise, fmt, &srk)) == "");
          CHECK(diff_block(ca, single(*k, v, x.data(), rows, cols, emu::BlockAxis::kColumnwise, fmt, &sck)) == "");
          for (const int outputs : {3, 1, 2}) {
            INFO(k->name() << " " << describe(v, fmt, rows, cols, outputs));
            // Outputs start non-empty and stats non-zero: the fused call overwrites the operands
            // and adds to the stats, as quantize_mxfp8 / quantize_block_1d do.
            emu::BlockQuantized rb = ra, cb = ca;
            rb.codes.assign(3, 0x55);
            cb.scale_inv.assign(2, 9.0f);
            emu::QuantizeStats srb, scb;
            srb.count = 5;
            scb.nan = 2;
            fused(*k, v, x.data(), rows, cols, fmt, outputs & 1 ? &rb : nullptr, outputs & 2 ? &cb : nullptr, &srb,
                  &scb);
            emu::QuantizeStats want_r, want_c;
            want_r.count = 5;
            want_c.nan = 2;
            if (outputs & 1) {
              want_r += sra;
              CHECK(diff_block(ra, rb) == "");
            }
            if (outputs & 2) {
              want_c += sca;
              CHECK(diff_block(ca, cb) == "");
            }
            CHECK(diff_stats(want_r, srb) == "");
            CHECK(diff_stats(want_c, scb) == "");
            // Null stats are allowed.
            emu::BlockQuantized rn, cn;
            fused(*k, v, x.data(), rows, cols, fmt, &rn, &cn, nullptr, nullptr);
            CHECK(diff_block(ra, rn) == "");
            CHECK(diff_block(ca, cn) == "");
            ++compared;
          }
        }
      }
  }
  CHECK(compared == std::size(kShapes) * 2 * variants().size() * 2 * 3);
}

TEST_CASE("Fused block casts: empty shapes, and the errors of the single-axis casts", "[fused][block]") {
  for (const backend::Kernels* k : {&backend::emulated_kernels(), &backend::element_kernels()}) {
    INFO(k->name());
    emu::BlockQuantized qr, qc;
    emu::QuantizeStats sr, sc;
    k->quantize_mxfp8_both(nullptr, 3, 0, Format::kE4M3, E8M0Rule::kTransformerEngine, &qr, &qc, &sr, &sc);
    CHECK(qr.n == 3);
    CHECK(qr.k == 0);
    CHECK(qc.n == 0);
    CHECK(qc.k == 3);
    CHECK(qr.codes.empty());
    CHECK(sr.count == 0);
    const float x[4] = {1, 2, 3, 4};
    CHECK_THROWS_WITH(k->quantize_mxfp8_both(x, 2, 2, Format::kE4M3, E8M0Rule::kOcp, nullptr, nullptr, &sr, &sc),
                      Catch::Contains("both the row-wise and the column-wise output are null"));
    CHECK_THROWS_WITH(k->quantize_block_1d_both(x, 2, 2, Format::kE4M3, 128, true, 0.0f, nullptr, nullptr, &sr, &sc),
                      Catch::Contains("both the row-wise and the column-wise output are null"));
    CHECK_THROWS_WITH(k->quantize_mxfp8_both(x, -1, 2, Format::kE4M3, E8M0Rule::kOcp, &qr, nullptr, &sr, &sc),
                      Catch::Contains("negative shape"));
    CHECK_THROWS_WITH(k->quantize_block_1d_both(x, 2, 2, Format::kE4M3, 0, true, 0.0f, nullptr, &qc, &sr, &sc),
                      Catch::Contains("block size must be >= 1"));
    CHECK_THROWS_AS(k->quantize_block_1d_both(x, 2, 2, Format::kBFloat16, 128, true, 0.0f, &qr, &qc, &sr, &sc),
                    Error);
  }
}

TEST_CASE("Fused block casts: the comparison catches one changed code, scale, E8M0 code or count", "[fused][block]") {
  const int rows = 37, cols = 45;
  const std::vector<float> x = ragged_inputs(rows, cols, 99);
  const backend::Kernels& k = backend::emulated_kernels();
  emu::BlockQuantized ra, ca;
  emu::QuantizeStats sr, sc;
  k.quantize_mxfp8_both(x.data(), rows, cols, Format::kE4M3, E8M0Rule::kTransformerEngine, &ra, &ca, &sr, &sc);
  REQUIRE(diff_block(ra, ra) == "");
  emu::BlockQuantized b = ca;
  b.codes[17] ^= 1u;
  CHECK(diff_block(ca, b) == "codes[17]");
  b = ca;
  b.scale_inv.back() = std::nextafter(b.scale_inv.back(), INFINITY);
  CHECK(diff_block(ca, b) == "scale_inv[" + std::to_string(ca.scale_inv.size() - 1) + "]");
  b = ca;
  b.e8m0[3] ^= 1u;
  CHECK(diff_block(ca, b) == "e8m0[3]");
  b = ra;
  b.scale_inv[0] = -b.scale_inv[0];
  CHECK(diff_block(ra, b) == "scale_inv[0]");
  emu::QuantizeStats s = sc;
  ++s.underflow;
  CHECK(diff_stats(sc, s) == "stats.underflow");
  // The row-wise and column-wise copies really differ (one is not the other transposed): a fused
  // kernel that wrote one copy for both would fail the first test case.
  std::vector<std::uint8_t> transposed(ra.codes.size());
  k.transpose(rows, cols, ra.codes.data(), transposed.data());
  CHECK(transposed != ca.codes);
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
    CHECK(diff_block(both.rowwise_blocks, row.rowwise_blocks) == "");
    CHECK(diff_block(both.columnwise_blocks, col.columnwise_blocks) == "");
    CHECK(diff_stats(s_both, s_row) == "");  // kBoth counts the row-wise cast only
    CHECK(s_col.count == std::uint64_t(rows) * std::uint64_t(cols));
    CHECK(row.columnwise_blocks.codes.empty());
    CHECK(col.rowwise_blocks.codes.empty());
  }
}
