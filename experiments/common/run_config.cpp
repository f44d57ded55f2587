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
  bf16_accumulation_of(c);
}

Accumulation bf16_accumulation_of(const RunConfig& c) {
  Accumulation a = Accumulation::kFp32;
  for (const AccumulationModel& m : kAccumulationModels)
    if (c.bf16_accumulation == m.name) a = m.id;
  const AccumulationModel& m = model_of(a);
  FP8EMU_CHECK(c.bf16_accumulation == m.name &&
                   (a == Accumulation::kFp32 ||
                    (m.datapath == Datapath::kTensorCore && m.input == core::MmaOperands::kBf16)),
               "--bf16-accumulation must be fp32 or a bf16 tensor core (ampere-bf16, ada-bf16, hopper-bf16, "
               "blackwell-bf16), got '", c.bf16_accumulation, "'");
  return a;
}

}  // namespace fp8emu::experiments::common
