// The format records against the OCP OFP8 r1.0 table, values written from the spec (hex floats so
// that the maxima appear only as their bit-exact definitions: 0x1.cp8 = 1.75 * 2^8, 0x1.cp15).
#include <catch2/catch.hpp>

#include <string>

#include "fp8emu/format/format_spec.hpp"

using namespace fp8emu;

TEST_CASE("E4M3 record matches OCP OFP8 r1.0 Table 2", "[format][e4m3]") {
  CHECK(kSpecE4M3.bits() == 8);
  CHECK(kSpecE4M3.max_finite() == 0x1.cp8);  // S.1111.110
  CHECK(kSpecE4M3.min_normal() == 0x1p-6);   // S.0001.000
  CHECK(kSpecE4M3.min_subnormal() == 0x1p-9);  // S.0000.001
  CHECK(kSpecE4M3.nan_code() == 0x7F);       // S.1111.111
  CHECK(kSpecE4M3.max_finite_code() == 0x7E);
  CHECK_FALSE(kSpecE4M3.has_inf);
  CHECK(max_finite_f32(Format::kE4M3) == 0x1.cp8f);
}

TEST_CASE("E5M2 record matches OCP OFP8 r1.0 Table 2", "[format][e5m2]") {
  CHECK(kSpecE5M2.max_finite() == 0x1.cp15);   // S.11110.11
  CHECK(kSpecE5M2.min_normal() == 0x1p-14);    // S.00001.00
  CHECK(kSpecE5M2.min_subnormal() == 0x1p-16); // S.00000.01
  CHECK(kSpecE5M2.inf_code() == 0x7C);         // S.11111.00
  CHECK(kSpecE5M2.nan_code() == 0x7F);         // S.11111.{01,10,11}
  CHECK(kSpecE5M2.max_finite_code() == 0x7B);
  CHECK(max_finite_f32(Format::kE5M2) == 0x1.cp15f);
}

TEST_CASE("Format registry: names, aliases and lookups", "[format][registry]") {
  // The names are the field's: OCP / ml_dtypes spellings (ml_dtypes float8_e4m3fn, float8_e8m0fnu ...).
  const char* expected[] = {"e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu", "e2m3fn",
                            "e3m2fn", "e2m1fn", "binary16", "bfloat16"};
  REQUIRE(kFormatCount == 10);
  for (int i = 0; i < kFormatCount; ++i) {
    const Format f = Format(i);
    INFO(expected[i]);
    CHECK(std::string(format_name(f)) == expected[i]);
    Format found = Format::kE5M2;
    CHECK(find_format(expected[i], std::string(expected[i]).size(), &found));
    CHECK(found == f);
  }
  Format f = Format::kE5M2;
  CHECK(find_format("e4m3", 4, &f));
  CHECK(f == Format::kE4M3);
  CHECK(find_format("fp4", 3, &f));
  CHECK(f == Format::kE2M1);
  CHECK(find_format("e8m0", 4, &f));
  CHECK(f == Format::kE8M0);
  CHECK_FALSE(find_format("e4m3f", 5, &f));  // a prefix of a name is not a name
  CHECK_FALSE(find_format("e4m", 3, &f));
  // Only the OCP FP8 formats are the FP8 kernels' operands.
  for (int i = 0; i < kFormatCount; ++i) CHECK(is_fp8(Format(i)) == (i <= 1));
  // Bit widths from the layout (OCP MX v1.0: FP6 = 6 bits, FP4 = 4, E8M0 = 8 unsigned).
  CHECK(spec_of(Format::kE2M3).bits() == 6);
  CHECK(spec_of(Format::kE2M1).bits() == 4);
  CHECK(spec_of(Format::kE8M0).bits() == 8);
  CHECK(spec_of(Format::kBinary16).bits() == 16);
}

TEST_CASE("E8M0, binary16 and bfloat16 records match their definitions", "[format][registry]") {
  // OCP MX v1.0 E8M0: value 2^(code - 127), code 0 = 2^-127, 0xFE = 2^127, 0xFF = NaN, no sign.
  CHECK(kSpecE8M0.value_of_code(0) == 0x1p-127);
  CHECK(kSpecE8M0.value_of_code(127) == 1.0);
  CHECK(kSpecE8M0.max_finite() == 0x1p127);
  CHECK(kSpecE8M0.nan_code() == 0xFF);
  CHECK(kSpecE8M0.sign_mask() == 0);
  // IEEE 754 binary16: max 65504 = 0x1.ffcp15 (0x7BFF), min normal 2^-14, Inf 0x7C00.
  CHECK(kSpecBinary16.max_finite() == 0x1.ffcp15);
  CHECK(kSpecBinary16.max_finite_code() == 0x7BFF);
  CHECK(kSpecBinary16.min_subnormal() == 0x1p-24);
  CHECK(kSpecBinary16.inf_code() == 0x7C00);
  // bfloat16: the top half of binary32; max 0x1.fep127 (0x7F7F), Inf 0x7F80.
  CHECK(kSpecBFloat16.max_finite() == 0x1.fep127);
  CHECK(kSpecBFloat16.max_finite_code() == 0x7F7F);
  CHECK(kSpecBFloat16.inf_code() == 0x7F80);
}
