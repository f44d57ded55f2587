// The subcommands of the fp8emu tool. Each app/cmd_<name>.cpp defines add_<name>, which registers
// the subcommand, its options and its help on the App, beside the run_<name> that does the work;
// app/main.cpp only builds the App from these and runs the one that was chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <new>
#include <string>

#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "fp8emu_internal/resources.hpp"

namespace fp8emu::cli {

/// A registered subcommand: its CLI11 node and what to run when the command line chose it (the
/// options it reads live with the closure). `run` returns the exit status; an exception it throws
/// is reported by main as "fp8emu: error: ..." with status 2 (fp8emu::Error, std::bad_alloc) or 1
/// (any other: a fault of fp8emu).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// The text of an error line for a caught exception: what() of fp8emu's errors; for
/// std::bad_alloc, whose what() says nothing useful, that memory ran out and what limits it.
inline std::string error_text(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of memory: the command needs more memory than it can get (" + io::describe_memory_limit() + ")";
  return e.what();
}

/// The FP8 format named by a flag's value: a registry name or alias of an OCP FP8 format ("e4m3",
/// "e4m3fn", "e5m2"). Returns false for anything else (the caller words the error).
inline bool parse_fp8_format(const std::string& s, Format* out) {
  return find_format(s.data(), s.size(), out) && is_fp8(*out);
}

/// The OCP FP8 formats of the registry with their aliases, comma-separated ("e4m3fn (e4m3), e5m2"):
/// the accepted values of parse_fp8_format, for help texts and errors.
inline std::string fp8_format_names() {
  std::string s;
  for (const FormatRecord& r : kFormats) {
    if (!is_fp8(r.id)) continue;
    s += (s.empty() ? "" : ", ") + std::string(r.spec->name);
    std::string al;
    for (const char* a : r.aliases)
      if (a) al += (al.empty() ? "" : ", ") + std::string(a);
    if (!al.empty()) s += " (" + al + ")";
  }
  return s;
}

/// A format's label in tables and reports: its short name (first alias, else the canonical name),
/// upper case ("E4M3", "E5M2", "E4M3FNUZ").
inline std::string format_label(Format f) {
  const FormatRecord& r = record_of(f);
  std::string s = r.aliases[0] ? r.aliases[0] : r.spec->name;
  for (char& c : s) c = char(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

/// The recipe names of scaling::recipe_names(), comma-separated (help texts).
inline std::string recipe_list() {
  std::string s;
  for (const std::string& n : scaling::recipe_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Command add_train(CLI::App& app);               // cmd_train.cpp: experiments/fashion_mnist
Command add_scale_trace(CLI::App& app);         // cmd_scale_trace.cpp
Command add_accumulation_error(CLI::App& app);  // cmd_accumulation_error.cpp: experiments/accumulation_error
Command add_gemm(CLI::App& app);                // cmd_gemm.cpp
Command add_compare(CLI::App& app);             // cmd_compare.cpp
Command add_doctor(CLI::App& app);              // cmd_doctor.cpp
Command add_bench(CLI::App& app);               // cmd_bench.cpp: bench gemm | convert | gpu
Command add_validate(CLI::App& app);            // cmd_validate.cpp
Command add_mma_check(CLI::App& app);           // cmd_mma_check.cpp
Command add_explain(CLI::App& app);             // cmd_explain.cpp
Command add_table(CLI::App& app);               // cmd_table.cpp
Command add_convert(CLI::App& app);             // cmd_convert.cpp
Command add_train_lm(CLI::App& app);            // cmd_train_lm.cpp: experiments/char_lm

}  // namespace fp8emu::cli
