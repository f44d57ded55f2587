// `fp8emu compare`: bitwise comparison of two float32 .npy arrays.
#pragma once

#include <ostream>
#include <string>

namespace fp8emu::cli {

/// Compares two float32 .npy arrays of one shape: bitwise mismatches, max ULP distance, max
/// absolute and relative error. \return 0 if bit-identical, 1 if not, 2 on bad input.
int run_compare(const std::string& x, const std::string& y, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
