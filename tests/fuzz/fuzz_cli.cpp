// libFuzzer target: the command line of fp8emu: CLI11's parsing of every flag (numbers, lists,
// enumerations) and each command's checks of what it parsed, for the commands whose checks come
// before any real work: train, train-lm, scale-trace, explain and mma-check. The input is split at
// NUL bytes into the words after `fp8emu`; flags naming files or folders are replaced by paths that
// do not exist (so train and train-lm stop at their data after checking their flags) and --out by
// a scratch folder. Accepted outcomes: --help, a CLI11 parse error, an fp8emu::Error (main's
// "fp8emu: error:" line) or a normal return. Any other exception is a crash.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cmd_explain.hpp"
#include "commands.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

namespace {
// Flags whose value is a path: dropped with their value, then set to a path that does not exist.
const char* const kPathFlags[] = {"--data-dir", "--out", "--text", "--resume", "--a", "--b", "--c", "--d"};

bool is_path_flag(const std::string& w, bool* with_value) {
  for (const char* f : kPathFlags) {
    const std::string flag(f);
    if (w == flag) {
      *with_value = false;
      return true;
    }
    if (w.rfind(flag + "=", 0) == 0) {
      *with_value = true;
      return true;
    }
  }
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {  // the commands print to stdout; libFuzzer reports on stderr
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    return true;
  }();
  (void)quiet;
  static const std::string missing = fuzz::scratch_dir() + "/does-not-exist";
  std::vector<std::string> words{"fp8emu"};
  std::string w;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0) {
      if (words.size() >= 24) return 0;
      words.push_back(w);
      w.clear();
    } else {
      w += char(data[i]);
    }
  }
  std::vector<std::string> args;
  for (std::size_t i = 0; i < words.size(); ++i) {
    bool with_value = false;
    if (i > 0 && is_path_flag(words[i], &with_value)) {
      if (!with_value) ++i;  // its value
      continue;
    }
    args.push_back(words[i]);
  }
  if (args.size() >= 2) {
    const std::string& cmd = args[1];
    if (cmd == "train") args.insert(args.end(), {"--data-dir", missing, "--out", missing});
    if (cmd == "train-lm") args.insert(args.end(), {"--text", missing, "--out", missing});
    if (cmd == "mma-check") args.insert(args.end(), {"--a", missing, "--b", missing, "--d", missing});
  }

  CLI::App app{"fp8emu"};
  app.require_subcommand(1);
  const std::vector<cli::Command> commands{cli::add_train(app), cli::add_train_lm(app), cli::add_scale_trace(app),
                                           cli::add_explain(app), cli::add_mma_check(app)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const std::vector<std::string> protected_args = cli::protect_negative_values(int(argv.size()), argv.data());
  std::vector<const char*> ptrs;
  for (const std::string& a : protected_args) ptrs.push_back(a.c_str());
  try {
    app.parse(int(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  try {
    for (const cli::Command& c : commands)
      if (*c.app) {
        c.run();
        break;
      }
  } catch (const Error&) {
  }
  return 0;
}
