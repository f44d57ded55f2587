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
}

}  // namespace fp8emu::experiments::common
