// `fp8emu convert`: raw binary or .npy files between float32, float16, bfloat16 and the small formats.
//
// Returns 0, or 2 after one line "fp8emu convert: error: ..." naming the problem; a failed run
// leaves no output file (the output is written once, atomically, at the end).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fp8emu::cli {

/// `fp8emu convert IN OUT --to DTYPE ...` (see run_convert).
struct ConvertOptions {
  std::string in, out;
  std::string to, from, format;  ///< DTYPEs: float32, float16, bfloat16 or a format name
  std::string scale;             ///< empty: 1
  std::string policy;            ///< empty: cuda
  std::string rounding;          ///< empty: the policy's (nearest; E8M0: up)
  std::string seed;              ///< required by --rounding stochastic
  bool amax = false;
};

/// Converts IN to OUT, each a raw little-endian file or a .npy file (by the ".npy" suffix).
/// To a small format: code = Q(x * scale), one fp32 multiply (as Transformer Engine's cast), Q by
/// the policy and rounding; from a small format: value * scale_inv with scale_inv = 1/scale
/// rounded to fp32; float16/bfloat16 <-> float32 exactly or with round to nearest even (core/half.hpp).
/// Stochastic rounding draws 32 bits per element, in element order, from std::mt19937(seed).
/// \return 0, or 2 on bad input (nothing written).
int run_convert(const ConvertOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
