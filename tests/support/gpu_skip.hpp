// The GPU tests' gate: run when the cuda backend can, otherwise skip with a message (a pass), or
// fail when FP8EMU_REQUIRE_GPU is set (scripts/gpu-check sets it where a GPU is visible).
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "fp8emu/backend/select.hpp"

namespace fp8emu::testing {

/// True when a GPU can run the tests; otherwise skips (message, pass) or fails (FP8EMU_REQUIRE_GPU).
inline bool have_gpu() {
  const backend::CudaStatus& s = backend::cuda_status();
  if (s.usable()) return true;
  const char* req = std::getenv("FP8EMU_REQUIRE_GPU");
  const bool required = req && *req && std::strcmp(req, "0") != 0;
  if (required) FAIL("FP8EMU_REQUIRE_GPU is set but the cuda backend cannot run: " << s.why_not());
  std::cout << "SKIPPED: no usable GPU (" << s.why_not() << "); set FP8EMU_REQUIRE_GPU=1 to make this a failure\n";
  WARN("SKIPPED: no usable GPU: " << s.why_not());
  return false;
}

}  // namespace fp8emu::testing
