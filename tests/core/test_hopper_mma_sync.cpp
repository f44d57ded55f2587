// The hopper-mma-sync accumulation row (core/accumulation.hpp) against Hopper's FP8
// mma.sync.aligned.m16n8k32 as recorded on an NVIDIA H200 (tests/data/h200/mma-sync and
// mma-sync-edge, provenance in tests/data/h200/README.md): every recorded tile, bit for bit, for
// the three operand pairs; and the rows and variants that do not fit, so the comparison can fail.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/mma.hpp"

using namespace fp8emu;

namespace {

// One recorded pair: tiles of A (16 x 32 row-major codes), B (32 x 8 row-major codes, B[k][n]), C and
// D (16 x 8 row-major little-endian fp32), D = mma(A, B, C).
struct Tiles {
  FormatSpec fa, fb;
  std::vector<std::uint8_t> A, B;
  std::vector<std::uint32_t> C, D;
  std::size_t count() const { return A.size() / 512; }
};

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
std::vector<std::uint32_t> read_words(const std::string& path) {
  const std::vector<std::uint8_t> b = read_bytes(path);
  std::vector<std::uint32_t> w(b.size() / 4);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = std::uint32_t(b[4 * i]) | std::uint32_t(b[4 * i + 1]) << 8 | std::uint32_t(b[4 * i + 2]) << 16 |
           std::uint32_t(b[4 * i + 3]) << 24;
  return w;
}

Tiles load(const std::string& set, const std::string& pair) {
  const std::string p = std::string(FP8EMU_TEST_DATA_DIR) + "/h200/" + set + "/" + pair;
  Tiles t{pair.compare(0, 4, "e4m3") == 0 ? kSpecE4M3 : kSpecE5M2,
          pair.compare(5, 4, "e4m3") == 0 ? kSpecE4M3 : kSpecE5M2,
          read_bytes(p + "_A.u8"),
          read_bytes(p + "_B.u8"),
          read_words(p + "_C.f32"),
          read_words(p + "_D.f32")};
  REQUIRE(t.A.size() % 512 == 0);
  REQUIRE(t.B.size() == t.count() * 256);
  REQUIRE(t.C.size() == t.count() * 128);
  REQUIRE(t.D.size() == t.count() * 128);
  return t;
}

// Outputs of `m` (with C as the instruction's C) that differ from the recorded D, over every tile.
std::size_t mismatches(const Tiles& t, const AccumulationModel& m) {
  std::size_t bad = 0;
  for (std::size_t tile = 0; tile < t.count(); ++tile)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        std::uint8_t a[32], b[32];
        for (int k = 0; k < 32; ++k) {
          a[k] = t.A[tile * 512 + std::size_t(r) * 32 + std::size_t(k)];
          b[k] = t.B[tile * 256 + std::size_t(k) * 8 + std::size_t(n)];
        }
        const std::size_t o = tile * 128 + std::size_t(r) * 8 + std::size_t(n);
        bad += core::mma_dot_with_c(a, t.fa, b, t.fb, 32, m, t.C[o]) != t.D[o];
      }
  return bad;
}

const char* const kPairs[] = {"e4m3_e4m3", "e5m2_e5m2", "e4m3_e5m2"};

}  // namespace

TEST_CASE("hopper-mma-sync reproduces every recorded H200 mma.sync tile, all three pairs",
          "[mma][hopper-mma-sync][h200]") {
  const AccumulationModel& m = model_of(Accumulation::kHopperMmaSync);
  for (const char* pair : kPairs) {
    INFO(pair);
    const Tiles finite = load("mma-sync", pair), edge = load("mma-sync-edge", pair);
    REQUIRE(finite.count() == 768);  // 98,304 dot products
    REQUIRE(edge.count() == 192);    // 24,576 outputs with NaN/Inf codes, special C values, zeros
    CHECK(mismatches(finite, m) == 0);
    CHECK(mismatches(edge, m) == 0);
  }
}

TEST_CASE("hopper-mma-sync: the wgmma and Ada rows, and variants of the row, do not fit the recordings",
          "[mma][hopper-mma-sync][h200]") {
  // Counted over the 98,304 finite dot products of each pair: a model that is not Hopper's mma.sync
  // gets a large share wrong, whatever C does.
  for (const char* pair : kPairs) {
    INFO(pair);
    const Tiles t = load("mma-sync", pair);
    const std::size_t n = t.count() * 128;
    CHECK(mismatches(t, model_of(Accumulation::kHopper)) > n / 4);
    CHECK(mismatches(t, model_of(Accumulation::kAda)) > n / 4);
    AccumulationModel v = model_of(Accumulation::kHopperMmaSync);
    v.step_interleave = 16;  // steps k = 0..15, then 16..31
    CHECK(mismatches(t, v) > n / 100);
    v = model_of(Accumulation::kHopperMmaSync);
    v.c_joins_first_block = true;  // C inside the first step's alignment
    CHECK(mismatches(t, v) > n / 100);
    v = model_of(Accumulation::kHopperMmaSync);
    v.steps = 1;  // one block FMA of 32
    CHECK(mismatches(t, v) > n / 100);
    v = model_of(Accumulation::kHopperMmaSync);
    v.fraction_bits = 24;  // terms truncated one bit higher
    CHECK(mismatches(t, v) > n / 100);
    v.fraction_bits = 26;  // one bit lower
    CHECK(mismatches(t, v) > n / 100);
    v = model_of(Accumulation::kHopperMmaSync);
    v.significant_bits = 23;  // the sum cut to 23 bits
    CHECK(mismatches(t, v) > n / 100);
  }
  // FP8 operands decoded on their own fields instead of widened to fp16: the two differ only where
  // an E4M3 subnormal's product sets the alignment (fp16 normalises it), which the random tiles
  // catch once, in the mixed pair (tile 97, row 14, column 1). E5M2 subnormals align at -14 either way.
  AccumulationModel fp8_fields = model_of(Accumulation::kHopperMmaSync);
  fp8_fields.operands = core::MmaOperands::kFp8;
  CHECK(mismatches(load("mma-sync", "e4m3_e5m2"), fp8_fields) == 1);
}

TEST_CASE("emu::mma_tn (the library's and Python's mma) reproduces every recorded H200 mma.sync tile", "[mma][h200]") {
  for (const char* set : {"mma-sync", "mma-sync-edge"})
    for (const char* pair : kPairs) {
      INFO(set << " " << pair);
      const Tiles t = load(set, pair);
      const Format fa = t.fa.mantissa_bits == kSpecE4M3.mantissa_bits ? Format::kE4M3 : Format::kE5M2;
      const Format fb = t.fb.mantissa_bits == kSpecE4M3.mantissa_bits ? Format::kE4M3 : Format::kE5M2;
      std::size_t bad = 0, bad_hopper = 0;
      for (std::size_t tile = 0; tile < t.count(); ++tile) {
        std::uint8_t bt[8 * 32];  // B^T: the K-contiguous operand
        for (int k = 0; k < 32; ++k)
          for (int n = 0; n < 8; ++n) bt[n * 32 + k] = t.B[tile * 256 + std::size_t(k) * 8 + std::size_t(n)];
        float c[128], d[128], dh[128];
        std::memcpy(c, &t.C[tile * 128], sizeof c);
        emu::mma_tn(16, 8, 32, &t.A[tile * 512], fa, bt, fb, emu::Accumulation::kHopperMmaSync, c, d);
        emu::mma_tn(16, 8, 32, &t.A[tile * 512], fa, bt, fb, emu::Accumulation::kHopper, c, dh);
        for (int o = 0; o < 128; ++o) {
          std::uint32_t got, got_h;
          std::memcpy(&got, &d[o], 4);
          std::memcpy(&got_h, &dh[o], 4);
          bad += got != t.D[tile * 128 + std::size_t(o)];
          bad_hopper += got_h != t.D[tile * 128 + std::size_t(o)];
        }
      }
      CHECK(bad == 0);
      CHECK(bad_hopper > 0);  // the wgmma row does not fit mma.sync: the comparison can fail
    }
  const std::uint8_t z[32] = {};
  float d = 0;
  CHECK_THROWS_WITH(emu::mma_tn(1, 1, 32, z, Format::kE4M3, z, Format::kE4M3, emu::Accumulation::kFp32, nullptr, &d),
                    Catch::Contains("not a tensor-core model"));
  CHECK_THROWS_WITH(emu::mma_tn(1, 1, 32, z, Format::kE2M1, z, Format::kE4M3, emu::Accumulation::kHopper, nullptr, &d),
                    Catch::Contains("mma operand A"));
}
