// The tensor-core models against recorded GPU outputs (tests/data/tensor-core-mma, see its README)
// and directed cases for the choices the recordings do not settle (core/mma_model.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "support/bits.hpp"
#include "support/mma_data.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/mma_model.hpp"

using namespace fp8emu;
using namespace fp8emu::core;

using testing::bits;

TEST_CASE("every recorded tensor core is reproduced by its row, fp32 and fp16 output", "[mma][recorded]") {
  for (const testing::MmaDataset& ds : testing::mma_datasets()) {
    const std::vector<testing::MmaRow> rows = testing::load_mma_dataset(ds);
    INFO(ds.gpu << " " << ds.format);
    REQUIRE(rows.size() == 3500);
    const core::MmaDatapath p32 = model_of(ds.fp32_model).tensor_core();
    core::MmaDatapath p16 = model_of(ds.fp16_model).tensor_core();
    p16.accumulator = MmaAccumulator::kFp16;
    int m32 = 0, m16 = 0, n16 = 0;
    for (const testing::MmaRow& r : rows) {
      m32 += testing::mma_row_result(ds, r, p32, ds.c_used) != r.d;
      if (!r.has_d16) continue;
      ++n16;
      m16 += testing::mma_row_result(ds, r, p16, true) != r.d16;
    }
    CHECK(m32 == 0);
    CHECK(m16 == 0);
    // The files that have an fp16 result: every fp16-input one, and the FP8 ones of Ada, H100, H200, B200.
    const bool expect16 = std::string(ds.format) == "fp16" ||
                          (testing::mma_dataset_is_fp8(ds) && std::string(ds.gpu) != "L40S");
    CHECK(n16 == (expect16 ? 3500 : 0));
  }
}

TEST_CASE("the rows are not a fit: a neighbouring datapath breaks every recording", "[mma][recorded]") {
  // For each dataset, the row with one parameter moved (F - 1, half the block, C joining the other
  // way) must miss many rows; docs/tensor-core-model.md §Evidence lists the counts.
  for (const testing::MmaDataset& ds : testing::mma_datasets()) {
    const std::vector<testing::MmaRow> rows = testing::load_mma_dataset(ds);
    INFO(ds.gpu << " " << ds.format);
    const core::MmaDatapath base = model_of(ds.fp32_model).tensor_core();
    core::MmaDatapath f_minus = base, half = base, flip = base;
    f_minus.fraction_bits -= 1;
    if (f_minus.significant_bits > f_minus.fraction_bits + 1) f_minus.significant_bits = f_minus.fraction_bits + 1;
    half.block /= 2;
    flip.c_joins_first_step = !flip.c_joins_first_step;
    int worst = 0;
    for (const core::MmaDatapath& p : {f_minus, half, flip}) {
      int m = 0;
      for (const testing::MmaRow& r : rows) m += testing::mma_row_result(ds, r, p, ds.c_used) != r.d;
      worst = std::max(worst, m);
    }
    CHECK(worst > 200);
  }
}

TEST_CASE("block datapath worked by hand", "[mma]") {
  // E4M3 1.0 = 0x38 (M = 8, e = 0), 2^-9 = 0x01 (subnormal: M = 1, e = -6).
  // 1*1 + (2^-9)*(2^-9): product exponents 0 and -12; terms aligned to 13 fraction bits below 2^0:
  // 1 -> 2^13, 2^-18 -> 1 * 2^(13 - 6 - 12) = 2^-5 -> truncated to 0. Result exactly 1.
  const std::uint8_t a[2] = {0x38, 0x01}, b[2] = {0x38, 0x01};
  CHECK(mma_block(a, kSpecE4M3, b, kSpecE4M3, 2, 0u, MmaAccumulator::kFp32) == bits(1.0f));
  // Products 2^8 (0x78 * 0x38), 2^-5 (0x10 * 0x38) and 2^-6 (0x08 * 0x38): E = 8, so the quantum is
  // 2^(8-13) = 2^-5: 2^-5 is kept, 2^-6 truncated away -> 256.03125 = 8193 * 2^-5, exactly 14 bits.
  const std::uint8_t a2[3] = {0x78, 0x10, 0x08}, b2[3] = {0x38, 0x38, 0x38};  // 256, 2^-5, 2^-6
  CHECK(mma_block(a2, kSpecE4M3, b2, kSpecE4M3, 3, 0u, MmaAccumulator::kFp32) == bits(256.03125f));
  // Exact cancellation gives +0 (documented choice).
  const std::uint8_t a3[2] = {0x38, 0xB8}, b3[2] = {0x38, 0x38};
  CHECK(mma_block(a3, kSpecE4M3, b3, kSpecE4M3, 2, 0u, MmaAccumulator::kFp32) == 0u);
}

TEST_CASE("special values follow the documented model rule", "[mma]") {
  const std::uint8_t one = 0x3C, inf = 0x7C, ninf = 0xFC, nan = 0x7F, zero = 0x00;  // E5M2 codes
  auto dot = [](std::vector<std::uint8_t> a, std::vector<std::uint8_t> b, std::uint32_t c = 0u) {
    return mma_block(a.data(), kSpecE5M2, b.data(), kSpecE5M2, int(a.size()), c, MmaAccumulator::kFp32);
  };
  CHECK(dot({inf, one}, {one, one}) == 0x7F800000u);
  CHECK(dot({ninf}, {one}) == 0xFF800000u);
  CHECK(dot({inf, ninf}, {one, one}) == 0x7FFFFFFFu);  // +Inf and -Inf meet
  CHECK(dot({inf}, {zero}) == 0x7FFFFFFFu);            // Inf * 0
  CHECK(dot({nan}, {one}) == 0x7FFFFFFFu);
  CHECK(dot({one}, {one}, 0x7FC00000u) == 0x7FFFFFFFu);  // NaN c
  // Mixed E4M3 x E5M2: 1.0 (0x38) * 2.0 (E5M2 0x40) = 2.
  const std::uint8_t a = 0x38, b = 0x40;
  CHECK(mma_block(&a, kSpecE4M3, &b, kSpecE5M2, 1, 0u, MmaAccumulator::kFp32) == bits(2.0f));
}

TEST_CASE("fp16 helpers round to nearest even", "[mma][fp16]") {
  CHECK(f32_bits_to_half_rne(bits(1.0f)) == 0x3C00u);
  CHECK(f32_bits_to_half_rne(bits(65504.0f)) == 0x7BFFu);
  CHECK(f32_bits_to_half_rne(bits(65520.0f)) == 0x7C00u);  // halfway to 2^16: ties to even -> Inf
  CHECK(f32_bits_to_half_rne(bits(0x1p-24f)) == 0x0001u);
  CHECK(f32_bits_to_half_rne(bits(0x1p-25f)) == 0x0000u);  // tie to even (0)
  CHECK(f32_bits_to_half_rne(bits(1.0f + 0x1p-11f)) == 0x3C00u);  // tie to even
  CHECK(half_to_f32_bits(0x0001u) == bits(0x1p-24f));
  CHECK(half_to_f32_bits(0xFBFFu) == bits(-65504.0f));
}

TEST_CASE("operand decode of fp16, bf16 and tf32 values", "[mma][operands]") {
  // fp16 2^-24 (the smallest subnormal) is sig 1 at the fp16 emin: 1 * 2^(-14 - 10).
  MmaTerm t = decode_operand_term(bits(0x1p-24f), MmaOperands::kFp16);
  CHECK(t.sig == 1u);
  CHECK(t.exp == -14);
  CHECK(t.frac == 10);
  // bf16 1.5 = 0x3FC0: sig 0b11000000 (8 bits), exponent 0.
  t = decode_operand_term(0x3FC00000u, MmaOperands::kBf16);
  CHECK(t.sig == 0xC0u);
  CHECK(t.exp == 0);
  CHECK(t.frac == 7);
  // tf32 -3.0: sig 0b11000000000, exponent 1.
  t = decode_operand_term(bits(-3.0f), MmaOperands::kTf32);
  CHECK(t.sign == 1u);
  CHECK(t.sig == 0x600u);
  CHECK(t.exp == 1);
  CHECK(is_operand_value(bits(1.0f + 0x1p-10f), MmaOperands::kFp16));
  CHECK_FALSE(is_operand_value(bits(1.0f + 0x1p-11f), MmaOperands::kFp16));
  CHECK_FALSE(is_operand_value(bits(1.0f + 0x1p-10f), MmaOperands::kBf16));
  CHECK_FALSE(is_operand_value(bits(0x1p-25f), MmaOperands::kFp16));  // below fp16's subnormals
  CHECK(is_operand_value(bits(0x1p-130f), MmaOperands::kBf16));        // a bf16 subnormal
  CHECK_FALSE(is_operand_value(bits(1.0f + 0x1p-11f), MmaOperands::kTf32));
}

TEST_CASE("the exponent floor cuts terms far below it (min_exp_limit)", "[mma][floor]") {
  // hopper-fp16 with the fp16 accumulator: F = 25, floor -21. Products 1.125 * 2^-11 * 2^-11 =
  // 2^-22 + 2^-25 (exponent -22) and 2^-24 * 2^-23 = 2^-47 (fp16 subnormals: exponent -14 - 14).
  // With the floor E = -21, the quantum is 2^-46 and 2^-47 is cut: the sum 4.5 * 2^-24 is a tie,
  // rounded to even: 4 * 2^-24 = 2^-22. Without it E = -22, 2^-47 stays and the sum rounds up to
  // 5 * 2^-24.
  core::MmaDatapath p = model_of(Accumulation::kHopperFp16).tensor_core();
  p.accumulator = MmaAccumulator::kFp16;
  const std::uint32_t a[2] = {bits(0x1.2p-11f), bits(0x1p-24f)}, b[2] = {bits(0x1p-11f), bits(0x1p-23f)};
  CHECK(mma_dot(MmaValues{a}, MmaValues{b}, 2, 0u, p) == bits(0x1p-22f));
  p.exponent_floor_f16 = kNoExponentFloor;
  CHECK(mma_dot(MmaValues{a}, MmaValues{b}, 2, 0u, p) == bits(0x1.4p-22f));
}

TEST_CASE("fp16 add of C after the steps rounds once", "[mma][fp16]") {
  // 2048 + 1 = 2049 is a tie between 2048 and 2050 in fp16: to even, 2048; 2048 + 1.5 -> 2050.
  CHECK(add_f16_rne(0x6800u, 0x3C00u) == 0x6800u);
  CHECK(add_f16_rne(0x6800u, 0x3E00u) == 0x6801u);
  CHECK(add_f16_rne(0x3C00u, 0xBC00u) == 0x0000u);  // exact zero: +0
  CHECK(add_f16_rne(0x8000u, 0x8000u) == 0x8000u);  // -0 + -0
  CHECK(add_f16_rne(0x7C00u, 0xFC00u) == 0x7FFFu);  // +Inf + -Inf
  CHECK(add_f16_rne(0x7BFFu, 0x5000u) == 0x7C00u);  // 65504 + 32 rounds up to Inf
  CHECK(add_f16_rne(0x0001u, 0x0001u) == 0x0002u);  // subnormals add exactly
}

TEST_CASE("tf32 rounding: nearest, ties away from zero (PTX cvt.rna.tf32.f32)", "[mma][tf32]") {
  // tf32 keeps 10 fraction bits: the grid near 1 is 2^-10. 1 + 2^-11 is a tie: away from zero,
  // 1 + 2^-10 (ties-to-even would give 1); 1 + 2^-11 - 2^-23 rounds down; the sign is kept.
  CHECK(f32_bits_to_tf32_rna(bits(1.0f + 0x1p-11f)) == bits(1.0f + 0x1p-10f));
  CHECK(f32_bits_to_tf32_rna(bits(-(1.0f + 0x1p-11f))) == bits(-(1.0f + 0x1p-10f)));
  CHECK(f32_bits_to_tf32_rna(bits(1.0f + 0x1p-11f - 0x1p-23f)) == bits(1.0f));
  CHECK(f32_bits_to_tf32_rna(bits(2.0f - 0x1p-12f)) == bits(2.0f));  // the carry moves the exponent
  CHECK(f32_bits_to_tf32_rna(0x7F7FFFFFu) == 0x7F800000u);           // FLT_MAX rounds to Inf
  CHECK(f32_bits_to_tf32_rna(0x7F7FEFFFu) == 0x7F7FE000u);           // just below the tie stays finite
  CHECK(f32_bits_to_tf32_rna(0x00001000u) == 0x00002000u);           // subnormal tie, away from zero
  CHECK(f32_bits_to_tf32_rna(0xFF800000u) == 0xFF800000u);
  const std::uint32_t nan = f32_bits_to_tf32_rna(0x7F800001u);
  CHECK(((nan & 0x7F800000u) == 0x7F800000u && (nan & 0x7FFFFFu) != 0u));
  CHECK((nan & 0x1FFFu) == 0u);
  // Every 2^13-th pattern of the finite range against the arithmetic definition in long double:
  // the nearest multiple of the tf32 quantum of |x|'s binade, ties away.
  int bad = 0;
  for (std::uint64_t u = 0; u < 0x7F800000u; u += 0x1FFFu) {
    const float x = bits_to_f32(std::uint32_t(u));
    const int e = std::max(std::ilogb(x == 0.0f ? 1.0f : x), -126);
    const long double q = std::ldexp(1.0L, e - 10);
    const long double r = std::floor(static_cast<long double>(x) / q + 0.5L) * q;  // ties away (x >= 0)
    const std::uint32_t want = r >= 0x1p128L ? 0x7F800000u : f32_to_bits(float(r));
    bad += f32_bits_to_tf32_rna(std::uint32_t(u)) != want;
  }
  CHECK(bad == 0);
}
