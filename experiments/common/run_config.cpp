// The checks of the shared training flags (see run_config.hpp).
#include "common/run_config.hpp"

#include <cmath>

#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::common {

void check_run_config(const RunConfig& c) {
  FP8EMU_CHECK(std::isfinite(c.lr) && c.lr > 0.0f, "--lr must be positive and finite, got ", c.lr);
  FP8EMU_CHECK(c.threads >= 0, "--threads must be >= 0, got ", c.threads);
  FP8EMU_CHECK(c.threads <= kMaxThreads, "--threads must be <= ", kMaxThreads, ", got ", c.threads);
  FP8EMU_CHECK(c.checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ", c.checkpoint_every);
  FP8EMU_CHECK(bf16_accumulation_of(c) == Accumulation::kFp32 || c.bf16_baseline,
               "--bf16-accumulation ", c.bf16_accumulation, " sets the BF16 run's GEMMs: add --bf16 to train that run");
  fp32_accumulation_of(c);
}

namespace {
// The row named `name`: fp32, or a tensor-core row whose input is `input`.
Accumulation wide_accumulation(const std::string& name, core::MmaOperands input, const char* flag, const char* kind,
                               const char* rows) {
  Accumulation a = Accumulation::kFp32;
  for (const AccumulationModel& m : kAccumulationModels)
    if (name == m.name) a = m.id;
  FP8EMU_CHECK(name == model_of(a).name && layer_accumulation_fits(a, input),
               flag, " must be fp32 or a ", kind, " tensor core (", rows, "), got '", name, "'");
  return a;
}
}  // namespace

Accumulation bf16_accumulation_of(const RunConfig& c) {
  return wide_accumulation(c.bf16_accumulation, core::MmaOperands::kBf16, "--bf16-accumulation", "bf16",
                           "ampere-bf16, ada-bf16, hopper-bf16, blackwell-bf16");
}

Accumulation fp32_accumulation_of(const RunConfig& c) {
  return wide_accumulation(c.fp32_accumulation, core::MmaOperands::kTf32, "--fp32-accumulation", "tf32",
                           "ampere-tf32, ada-tf32, hopper-tf32, blackwell-tf32");
}

}  // namespace fp8emu::experiments::common
