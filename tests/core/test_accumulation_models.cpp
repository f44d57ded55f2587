// The accumulation-model table (include/fp8emu/core/accumulation.hpp): names and parsing derived
// from the rows, the checks derived from the block, and the datapath's use of each field, with
// expected values worked by hand from the model's definition (docs/tensor-core-model.md).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/util/error.hpp"

using namespace fp8emu;

namespace {
std::uint32_t bits(float x) { return core::f32_to_bits(x); }
}  // namespace

TEST_CASE("Accumulation models: every row parses by its name and prints its name", "[accumulation]") {
  CHECK(kAccumulationModelCount == 19);
  for (const AccumulationModel& m : kAccumulationModels) {
    INFO(m.name);
    CHECK(emu::parse_accumulation(m.name) == m.id);
    CHECK(std::string(emu::to_string(m.id)) == m.name);
  }
  CHECK(emu::accumulation_names() ==
        "exact, fp32, hopper, ada, hopper-mma-sync, blackwell, volta-fp16, ampere-fp16, ampere-bf16, ampere-tf32, ada-fp16, ada-bf16, ada-tf32, hopper-fp16, hopper-bf16, hopper-tf32, blackwell-fp16, blackwell-bf16, blackwell-tf32");
  try {
    emu::parse_accumulation("volta-bf16");
    FAIL("no error for an unknown model");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "unknown accumulation model 'volta-bf16' (accepted: exact, fp32, hopper, ada, hopper-mma-sync, blackwell, volta-fp16, ampere-fp16, ampere-bf16, ampere-tf32, ada-fp16, ada-bf16, ada-tf32, hopper-fp16, hopper-bf16, hopper-tf32, blackwell-fp16, blackwell-bf16, blackwell-tf32)");
  }
}

TEST_CASE("Accumulation models: the promotion check follows the row's block", "[accumulation]") {
  const std::uint8_t a[1] = {0x38}, b[1] = {0x38};
  float d = 0.0f;
  // Hopper fuses 32 products per block, Ada 16: 16 is a valid interval for Ada only.
  CHECK_NOTHROW(emu::gemm_fp8_tn(1, 1, 1, a, Format::kE4M3, 1.0f, b, Format::kE4M3, 1.0f, {Accumulation::kAda, 16}, &d));
  CHECK_THROWS_WITH(
      emu::gemm_fp8_tn(1, 1, 1, a, Format::kE4M3, 1.0f, b, Format::kE4M3, 1.0f, {Accumulation::kHopper, 16}, &d),
      "GEMM: promotion interval 16 is not a multiple of the hopper block (32)");
  CHECK_THROWS_WITH(
      emu::gemm_fp8_tn(1, 1, 1, a, Format::kE4M3, 1.0f, b, Format::kE4M3, 1.0f, {Accumulation::kExact, 32}, &d),
      "GEMM: the exact model takes no promotion interval (it would no longer be exact)");
}

TEST_CASE("Accumulation models: where C joins is a field of the row", "[accumulation]") {
  // One product 1.0 * 1.0 (E4M3 0x38) and C = 2^-20. Joining the block, C is aligned to 13 fraction
  // bits below the largest exponent (2^0) and truncated to 0: the result is 1.0. Added last with one
  // RN fp32 add, 1 + 2^-20 is exact in fp32 (23 fraction bits).
  const std::uint8_t a[1] = {0x38}, b[1] = {0x38};
  const std::uint32_t c = bits(0x1p-20f);
  AccumulationModel joins = model_of(Accumulation::kAda);
  AccumulationModel last = joins;
  last.c_joins_first_block = false;
  CHECK(core::mma_dot_with_c(a, kSpecE4M3, b, kSpecE4M3, 1, joins, c) == bits(1.0f));
  CHECK(core::mma_dot_with_c(a, kSpecE4M3, b, kSpecE4M3, 1, last, c) == bits(1.0f + 0x1p-20f));
}

TEST_CASE("Accumulation models: the fraction bits of the row set the alignment", "[accumulation]") {
  // Products 1.0 * 1.0 and 2^-6 * 2^-8 = 2^-14 (E4M3 0x38 = 1, 0x08 = 2^-6, subnormal 0x02 = 2 * 2^-9 = 2^-8): with
  // F = 13 the 2^-14 term is below the last kept bit 2^-13 and truncated away; with F = 14 it is kept
  // in the sum, and the 15 significant bits of 1 + 2^-14 survive when 15 bits are kept, not 14.
  const std::uint8_t a[2] = {0x38, 0x08}, b[2] = {0x38, 0x02};
  AccumulationModel f13 = model_of(Accumulation::kHopper);
  AccumulationModel f14 = f13;
  f14.fraction_bits = 14;
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, f13)) == bits(1.0f));
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, f14)) == bits(1.0f));  // kept, then cut at 14 bits
  f14.significant_bits = 15;
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, f14)) == bits(1.0f + 0x1p-14f));
  // The exact and fp32 rows keep it: 1 + 2^-14 is an fp32.
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, model_of(Accumulation::kExact))) == bits(1.0f + 0x1p-14f));
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, model_of(Accumulation::kFp32))) == bits(1.0f + 0x1p-14f));
}

TEST_CASE("Accumulation models: FP8 codes enter an fp16, bf16 or tf32 row as values of its format", "[accumulation]") {
  // E4M3 0x01 = 2^-9 (subnormal: M = 1 at the E4M3 emin -6). In the fp16 and bf16 rows it is a
  // normal number: 1.0 * 2^-9. Products 2^-9 * 2^-9 = 2^-18 and 1 * 1: exponents -18 and 0 either
  // way, so the sum 1 + 2^-18 is exact with F = 24 or 25 and 24 bits kept (RZ), but cut with F = 13.
  const std::uint8_t a[2] = {0x38, 0x01}, b[2] = {0x38, 0x01};
  for (Accumulation id : {Accumulation::kAmpereFp16, Accumulation::kHopperBf16, Accumulation::kBlackwellTf32}) {
    INFO(emu::to_string(id));
    CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, model_of(id))) == bits(1.0f + 0x1p-18f));
  }
  CHECK(bits(core::dot_run(a, kSpecE4M3, b, kSpecE4M3, 2, model_of(Accumulation::kHopper))) == bits(1.0f));
}
