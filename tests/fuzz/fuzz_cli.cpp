// libFuzzer target: the command line of fp8emu: CLI11's parsing of every flag (numbers, lists,
// enumerations) and each command's checks of what it parsed, for the commands whose checks come
// before any real work or whose work is small on the fixed inputs given here: train, train-lm,
// scale-trace, explain, mma-check, gemm, compare, table and accumulation-error. The input is split
// at NUL bytes into the words after `fp8emu`; flags naming files or folders are replaced: for train,
// train-lm and mma-check by paths that do not exist (so they stop at their data after checking their
// flags); for gemm by tiny valid operands (A and B [1, 2] E4M3 codes, C [1, 1] and bias [1] float32,
// so the GEMM itself runs on every accepted flag set); for compare by two valid float32 arrays (its
// positional words are dropped); --out by a path below a regular file, so that gemm and
// accumulation-error stop when they would create their results (accumulation-error checks all its
// flags before that, and no file is written per execution). Accepted outcomes: --help, a CLI11
// parse error, an fp8emu::Error (main's "fp8emu: error:" line), a tool's exit status 2 with its own
// error line, or a normal return. Any other exception is a crash.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cmd_explain.hpp"
#include "commands.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

namespace {
// Flags whose value is a path: dropped with their value, then set per command (see above).
const char* const kPathFlags[] = {"--data-dir", "--out", "--text", "--resume", "--a", "--b", "--c", "--d", "--bias"};

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

// The fixed files of gemm and compare, written once into the scratch folder.
struct Files {
  std::string a, b, c, bias, x, y, blocked_out;
};
const Files& files() {
  static const Files f = [] {
    const std::string d = fuzz::scratch_dir();
    Files r{d + "/a.npy", d + "/b.npy", d + "/c.npy", d + "/bias.npy", d + "/x.npy", d + "/y.npy",
            d + "/regular-file/out"};
    const auto put = [](const std::string& path, const char* dtype, std::vector<std::size_t> shape,
                        std::vector<std::uint8_t> bytes) {
      io::NpyArray n;
      n.dtype = dtype;
      n.shape = std::move(shape);
      n.data = std::move(bytes);
      io::write_npy(path, n);
    };
    put(r.a, "|u1", {1, 2}, {0x38, 0x40});        // E4M3 1, 2
    put(r.b, "|u1", {1, 2}, {0x40, 0xB8});        // 2, -1
    put(r.c, "<f4", {1, 1}, {0, 0, 0x80, 0x3F});  // 1.0f
    put(r.bias, "<f4", {1}, {0, 0, 0, 0x40});     // 2.0f
    put(r.x, "<f4", {1, 2}, {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40});
    put(r.y, "<f4", {1, 2}, {0, 0, 0x80, 0x3F, 1, 0, 0, 0x40});
    std::FILE* regular = std::fopen((d + "/regular-file").c_str(), "w");
    fuzz::require(regular != nullptr, "cannot create the scratch file");
    std::fclose(regular);
    return r;
  }();
  return f;
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
  const std::string cmd = words.size() >= 2 ? words[1] : std::string();
  std::vector<std::string> args;
  for (std::size_t i = 0; i < words.size(); ++i) {
    bool with_value = false;
    if (i > 0 && is_path_flag(words[i], &with_value)) {
      if (!with_value) ++i;  // its value
      continue;
    }
    // compare's words other than flags would be its two file names
    if (i > 1 && cmd == "compare" && (words[i].empty() || words[i][0] != '-')) continue;
    args.push_back(words[i]);
  }
  const Files& f = files();
  if (cmd == "train") args.insert(args.end(), {"--data-dir", missing, "--out", missing});
  if (cmd == "train-lm") args.insert(args.end(), {"--text", missing, "--out", missing});
  if (cmd == "mma-check") args.insert(args.end(), {"--a", missing, "--b", missing, "--d", missing});
  if (cmd == "gemm") {
    args.insert(args.end(), {"--a", f.a, "--b", f.b, "--out", f.blocked_out});
    // --c and --bias when the input named them (their values were dropped above)
    for (const std::string& word : words) {
      if (word == "--c" || word.rfind("--c=", 0) == 0) args.insert(args.end(), {"--c", f.c});
      if (word == "--bias" || word.rfind("--bias=", 0) == 0) args.insert(args.end(), {"--bias", f.bias});
    }
  }
  if (cmd == "compare") args.insert(args.end(), {f.x, f.y});
  if (cmd == "accumulation-error") args.insert(args.end(), {"--out", f.blocked_out});

  CLI::App app{"fp8emu"};
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = cli::add_registered_commands(app);  // the cmd_*.cpp linked in
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
        const int status = c.run();
        fuzz::require(status == 0 || status == 1 || status == 2, "exit status other than 0, 1 or 2");
        // gemm's and accumulation-error's results cannot be written (--out is below a file)
        fuzz::require(cmd != "gemm" || status == 2, "gemm wrote below a regular file");
        break;
      }
  } catch (const Error&) {
  }
  return 0;
}
