// All 256 codes of each format decode to the values of the OCP OFP8 r1.0 definition (§5.3):
//   E > 0: (-1)^S * 2^(E - bias) * (1 + M / 2^m);  E = 0: (-1)^S * 2^(1 - bias) * (M / 2^m)
// E4M3: m = 3, bias 7, only S.1111.111 is NaN. E5M2: m = 2, bias 15, S.11111.00 = Inf,
// S.11111.{01,10,11} = NaN. The expected values are computed here from those rules with std::ldexp,
// independently of the library's format records.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>

#include "fp8emu/core/convert.hpp"

using namespace fp8emu;

namespace {
double ocp_value(std::uint8_t c, int mbits, int bias, bool ieee_like) {
  const int s = c >> 7, e = (c >> mbits) & ((1 << (7 - mbits)) - 1), m = c & ((1 << mbits) - 1);
  const int emax_field = (1 << (7 - mbits)) - 1;
  const double sign = s ? -1.0 : 1.0;
  if (ieee_like && e == emax_field) return m == 0 ? sign * INFINITY : NAN;
  if (!ieee_like && e == emax_field && m == (1 << mbits) - 1) return NAN;
  if (e == 0) return sign * std::ldexp(double(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0 + double(m) / double(1 << mbits), e - bias);
}
}  // namespace

TEST_CASE("every code decodes to its OCP value", "[format][e4m3][e5m2][all-codes]") {
  struct Case {
    const FormatSpec* spec;
    int mbits, bias;  // from the OCP table, not from the record under test
    bool ieee_like;
  };
  for (const Case& f : {Case{&kSpecE4M3, 3, 7, false}, Case{&kSpecE5M2, 2, 15, true}}) {
    for (int c = 0; c < 256; ++c) {
      const double want = ocp_value(std::uint8_t(c), f.mbits, f.bias, f.ieee_like);
      const float got = core::fp8_to_f32(std::uint8_t(c), *f.spec);
      INFO(f.spec->name << " code 0x" << std::hex << c);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else {
        CHECK(double(got) == want);
        CHECK(std::signbit(got) == bool(c & 0x80));
      }
    }
  }
}

TEST_CASE("anchor codes from the OCP table", "[format]") {
  CHECK(core::fp8_to_f32(0x38, kSpecE4M3) == 1.0f);     // 0.0111.000
  CHECK(core::fp8_to_f32(0x7E, kSpecE4M3) == 0x1.cp8f); // max normal
  CHECK(core::fp8_to_f32(0x08, kSpecE4M3) == 0x1p-6f);  // min normal
  CHECK(core::fp8_to_f32(0x01, kSpecE4M3) == 0x1p-9f);  // min subnormal
  CHECK(core::fp8_to_f32(0x3C, kSpecE5M2) == 1.0f);     // 0.01111.00
  CHECK(core::fp8_to_f32(0x7B, kSpecE5M2) == 0x1.cp15f);
  CHECK(core::fp8_to_f32(0x04, kSpecE5M2) == 0x1p-14f);
  CHECK(core::fp8_to_f32(0x01, kSpecE5M2) == 0x1p-16f);
  CHECK(std::isinf(core::fp8_to_f32(0xFC, kSpecE5M2)));
}

TEST_CASE("encode(decode(c)) == c for every non-NaN code, both saturation modes", "[format][all-codes]") {
  for (const FormatSpec* f : {&kSpecE4M3, &kSpecE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const float v = core::fp8_to_f32(std::uint8_t(c), *f);
      if (std::isnan(v)) continue;
      INFO(f->name << " code 0x" << std::hex << c);
      CHECK(core::f32_to_fp8(v, *f, Saturation::kNoSat) == c);
      if (!std::isinf(v)) CHECK(core::f32_to_fp8(v, *f, Saturation::kSatFinite) == c);
    }
  }
}

TEST_CASE("rounding directed cases worked from the spec", "[format][e4m3][e5m2]") {
  // E4M3 around the max: 464 = 448 + half ulp (ulp 32 at 2^8) ties to even 0x7E (mantissa 110).
  CHECK(core::f32_to_fp8(0x1.dp8f, kSpecE4M3, Saturation::kNoSat) == 0x7E);
  // Just above 464: rounds to the NaN slot -> overflow: NaN (nosat) or max (satfinite).
  CHECK(core::f32_to_fp8(std::nextafter(0x1.dp8f, 1e9f), kSpecE4M3, Saturation::kNoSat) == 0x7F);
  CHECK(core::f32_to_fp8(std::nextafter(0x1.dp8f, 1e9f), kSpecE4M3, Saturation::kSatFinite) == 0x7E);
  CHECK(core::f32_to_fp8(-INFINITY, kSpecE4M3, Saturation::kSatFinite) == 0xFE);
  CHECK(core::f32_to_fp8(-INFINITY, kSpecE4M3, Saturation::kNoSat) == 0xFF);
  // E5M2: 61440 = 57344 + half ulp (4096) ties to even -> mantissa 11 is odd -> rounds up to Inf.
  CHECK(core::f32_to_fp8(0x1.ep15f, kSpecE5M2, Saturation::kNoSat) == 0x7C);
  CHECK(core::f32_to_fp8(0x1.ep15f, kSpecE5M2, Saturation::kSatFinite) == 0x7B);
  CHECK(core::f32_to_fp8(INFINITY, kSpecE5M2, Saturation::kSatFinite) == 0x7B);
  // Half the smallest subnormal goes to (signed) zero; just above goes to the smallest subnormal.
  CHECK(core::f32_to_fp8(0x1p-10f, kSpecE4M3, Saturation::kSatFinite) == 0x00);
  CHECK(core::f32_to_fp8(-0x1p-10f, kSpecE4M3, Saturation::kSatFinite) == 0x80);
  CHECK(core::f32_to_fp8(0x1.000002p-10f, kSpecE4M3, Saturation::kSatFinite) == 0x01);
  // 1.5 * 2^-9 ties between subnormal codes 1 and 2 -> even (2).
  CHECK(core::f32_to_fp8(0x1.8p-9f, kSpecE4M3, Saturation::kSatFinite) == 0x02);
  // 1 + 2^-4 ties between 1.0 (0x38) and 1.125 (0x39) -> even 0x38; 1 + 3*2^-4 -> 0x3A.
  CHECK(core::f32_to_fp8(0x1.1p0f, kSpecE4M3, Saturation::kSatFinite) == 0x38);
  CHECK(core::f32_to_fp8(0x1.3p0f, kSpecE4M3, Saturation::kSatFinite) == 0x3A);
  // Largest subnormal rounds up into the smallest normal: 0.1111 * 2^-6 (7.5 * 2^-9) -> 0x08.
  CHECK(core::f32_to_fp8(7.5f * 0x1p-9f, kSpecE4M3, Saturation::kSatFinite) == 0x08);
  // CUDA's float entry point drops the sign of NaN.
  CHECK(core::f32_to_fp8(-NAN, kSpecE4M3, Saturation::kSatFinite) == 0x7F);
  CHECK(core::f32_to_fp8(-NAN, kSpecE5M2, Saturation::kNoSat) == 0x7F);
}
