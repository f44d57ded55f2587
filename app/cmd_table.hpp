// `fp8emu table`: every code of a small format.
//
// Returns 0, or 2 after one line "fp8emu <command>: error: ..." naming the problem.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fp8emu::cli {

/// `fp8emu table --format F [--csv]`.
struct TableOptions {
  std::string format;
  bool csv = false;
};

/// Prints every code of the format: code, binary fields, exact value, class. \return 0 or 2.
int run_table(const TableOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
