// Test helper: runs the fp8emu executable (FP8EMU_CLI_PATH) and captures its exit code and
// combined stdout/stderr (run through /bin/sh: arguments are shell words).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace fp8emu::testing {

struct CliResult {
  int code;
  std::string output;
};

/// Runs a shell command line, capturing its exit code and its stdout and stderr together.
inline CliResult run_shell(const std::string& command) {
  std::FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// Runs `fp8emu args`; `env` (shell assignments such as "PATH=/x FOO=1", or empty) is put before
/// the command, so it sets the environment of fp8emu only.
inline CliResult run_cli_env(const std::string& env, const std::string& args) {
  return run_shell(env + (env.empty() ? "" : " ") + std::string(FP8EMU_CLI_PATH) + " " + args);
}

inline CliResult run_cli(const std::string& args) { return run_cli_env("", args); }

/// A text corpus for train-lm tests, written once per process to a temporary file: about 40 KB of
/// word salad with line breaks from a fixed LCG (deterministic; enough structure to learn a little).
/// `tag` keeps the files of different test programs apart.
inline std::string word_salad_corpus(const std::string& tag) {
  const std::string path = "/tmp/fp8emu-" + tag + "-corpus-" + std::to_string(::getpid()) + ".txt";
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    return path;
  }
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then",
                         "sleeps", "under", "old", "tree", "while", "birds", "sing"};
  std::string text;
  std::uint32_t s = 1;
  for (int i = 0; i < 8000; ++i) {
    s = s * 1664525u + 1013904223u;
    text += words[(s >> 16) % 18];
    text += (s >> 8) % 9 == 0 ? ".\n" : " ";
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

}  // namespace fp8emu::testing
