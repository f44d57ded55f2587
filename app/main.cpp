// The fp8emu command-line tool: one executable, one subcommand per job (app/cmd_*.cpp).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cmd_explain.hpp"
#include "commands.hpp"
#include "common/dist.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/util/error.hpp"
#include "fp8emu_internal/resources.hpp"

namespace {
// OpenMP threads that wait at a barrier spin for ~300k iterations by default (libgomp). On a machine
// whose cores are shared with other work, that spinning starves the threads that have work and made
// training 3-10x slower in our measurements (docs: README, "Performance"); a short spin costs ~5 %
// on idle cores. The runtime reads its settings when it loads, before main, so unless the user chose
// a policy, set a short spin count and re-execute once. Results never depend on it.
void prefer_short_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("FP8EMU_NO_REEXEC")) return;
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  ::setenv("FP8EMU_NO_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run with the defaults
}
}  // namespace

int main(int argc, char** argv) {
  using namespace fp8emu::cli;
  prefer_short_openmp_spin(argv);
  // Under a file-size limit (ulimit -f, prlimit --fsize) a write beyond it raises SIGXFSZ, which
  // kills the process without a word and may leave a half-written file behind. Ignored, the write
  // fails with EFBIG instead, and the atomic writer (src/io/atomic_file.cpp) reports it in one line
  // and removes its temporary file: the earlier version of the file stays as it was.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fp8emu: bit-exact FP8 emulation and FP8-vs-FP32 training experiments"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FP8EMU_VERSION_STRING);
  // Every app/cmd_<name>.cpp, in the order of `fp8emu --help` (their positions, commands.hpp).
  const std::vector<Command> commands = add_registered_commands(app);

  // The one error wrapper. Command-line errors: --help and --version exit 0 through CLI11; any
  // other is bad input: one line, exit 2 (as the tools' own input errors). A command that throws
  // fp8emu::Error (a bad flag value, a bad input file, an output that cannot be written, a run that
  // would not fit in memory) or runs out of memory: one line, exit 2 as well. Any other exception is
  // a fault of fp8emu itself: one line, exit 1. Under mpirun every rank meets the same error: rank 0
  // alone prints it.
  const bool print_errors = fp8emu::experiments::common::dist::reports_errors();
  const std::vector<std::string> args = protect_negative_values(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  // A first word that is neither a flag nor a command: name it (CLI11 would only say that a
  // subcommand is required).
  if (args.size() >= 2 && !args[1].empty() && args[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const Command& c : commands) {
      known = known || c.app->get_name() == args[1];
      names += (names.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "fp8emu: error: unknown command '%s' (commands: %s; see fp8emu --help)\n", args[1].c_str(),
                   names.c_str());
      return 2;
    }
  }
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    if (print_errors)
      std::fprintf(stderr, "fp8emu: error: %s (see fp8emu --help or fp8emu <command> --help)\n", e.what());
    return 2;
  }
  try {
    for (const Command& c : commands)
      if (*c.app) return c.run();
  } catch (const fp8emu::Error& e) {
    if (fp8emu::experiments::common::dist::reports_errors()) std::fprintf(stderr, "fp8emu: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    if (fp8emu::experiments::common::dist::reports_errors())
      std::fprintf(stderr, "fp8emu: error: out of memory: the command needs more memory than it can get (%s)\n",
                   fp8emu::io::describe_memory_limit().c_str());
    return 2;
  } catch (const std::exception& e) {
    if (fp8emu::experiments::common::dist::reports_errors()) std::fprintf(stderr, "fp8emu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
