// The subcommands of the fp8emu tool. Each app/cmd_<name>.cpp defines add_<name>, which adds the
// subcommand, its options and its help to the App, beside the run_<name> that does the work, and
// registers it with a CommandRegistrar; app/main.cpp only builds the App from the registered
// commands and runs the one that was chosen. A new command is one new app/cmd_<name>.cpp (CMake
// picks it up): nothing here or in main.cpp changes.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

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

/// Adds one subcommand to `app` and returns it (an app/cmd_<name>.cpp's add_<name>).
using AddCommand = Command (*)(CLI::App& app);

/// A command's registration: `position` orders `fp8emu --help` (ascending). Today's commands use
/// train 10, scale-trace 20, accumulation-error 30, gemm 40, compare 50, doctor 60, bench 70,
/// validate 80, mma-check 90, explain 100, table 110, convert 120, train-lm 130; a new one takes
/// a free position (a later one lists it last).
struct RegisteredCommand {
  int position;
  AddCommand add;
};

/// The commands registered in this program, in registration (static initialisation) order.
inline std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> registry;
  return registry;
}

/// Registers a command when the program starts: each app/cmd_<name>.cpp defines, at namespace scope,
///   const CommandRegistrar registered{position, add_<name>};
struct CommandRegistrar {
  CommandRegistrar(int position, AddCommand add) { command_registry().push_back({position, add}); }
};

/// Adds every registered command to `app` in the order of their positions.
/// \throws std::logic_error when two commands share a position (a fault of the program).
inline std::vector<Command> add_registered_commands(CLI::App& app) {
  std::vector<RegisteredCommand> sorted = command_registry();
  std::sort(sorted.begin(), sorted.end(),
            [](const RegisteredCommand& a, const RegisteredCommand& b) { return a.position < b.position; });
  std::vector<Command> commands;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i].position == sorted[i - 1].position)
      throw std::logic_error("two fp8emu commands registered at position " + std::to_string(sorted[i].position));
    commands.push_back(sorted[i].add(app));
  }
  return commands;
}

}  // namespace fp8emu::cli
