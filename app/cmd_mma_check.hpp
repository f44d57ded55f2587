// `fp8emu mma-check`: replay recorded tensor-core dot products through the model.
#pragma once

#include <ostream>
#include <string>

namespace fp8emu::cli {

struct MmaCheckOptions {
  std::string arch;         ///< "volta", "ampere", "ada", "hopper", "blackwell": a tensor-core row's `arch`
  std::string instruction;  ///< "wgmma" or "mma.sync"; empty: the arch's first row (hopper: wgmma)
  std::string format;       ///< "e4m3", "e5m2", "fp16", "bf16", "tf32" for both operands (FP8 format_a / format_b override it)
  std::string format_a, format_b;
  std::string output;       ///< "fp32" or "fp16"
  std::string a, b, c, d;   ///< files in the MATLAB-tensor-core model_validation text layout; c optional
  std::string tiles;        ///< instead of a, b, c, d: the prefix of m16n8k32 tile files (see --tiles)
};

/// Compares every row (every output element of every tile); prints the first mismatches and, last,
/// `mismatches: N of M`.
/// \return 0 when N = 0, 1 when rows mismatch, 2 on malformed input (message names file and line).
int run_mma_check(const MmaCheckOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
