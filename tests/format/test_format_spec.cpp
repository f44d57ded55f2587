// The format records against the OCP OFP8 r1.0 table, values written from the spec (hex floats so
// that the maxima appear only as their bit-exact definitions: 0x1.cp8 = 1.75 * 2^8, 0x1.cp15).
#include <catch2/catch.hpp>

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
