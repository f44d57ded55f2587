// `fp8emu mma-check`: replay recorded tensor-core dot products through the model.
#pragma once

#include <ostream>
#include <string>

namespace fp8emu::cli {

struct MmaCheckOptions {
  std::string arch;    ///< "hopper" (wgmma, blocks of 32) or "ada" (mma.sync m16n8k32, blocks of 16)
  std::string format;  ///< "e4m3" or "e5m2"
  std::string output;  ///< "fp32" or "fp16"
  std::string a, b, c, d;  ///< files in the MATLAB-tensor-core model_validation text layout; c optional
};

/// Compares every row; prints the first mismatches and, last, `mismatches: N of M`.
/// \return 0 when N = 0, 1 when rows mismatch, 2 on malformed input (message names file and line).
int run_mma_check(const MmaCheckOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
