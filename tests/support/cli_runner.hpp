// Test helper: runs the fp8emu executable (FP8EMU_CLI_PATH) and captures its exit code and
// combined stdout/stderr (run through /bin/sh: arguments are shell words).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fp8emu::testing {

struct CliResult {
  int code;
  std::string output;
};

/// Runs `fp8emu args`; `env` (shell assignments such as "PATH=/x FOO=1", or empty) is put before
/// the command, so it sets the environment of fp8emu only.
inline CliResult run_cli_env(const std::string& env, const std::string& args) {
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(FP8EMU_CLI_PATH) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline CliResult run_cli(const std::string& args) { return run_cli_env("", args); }

}  // namespace fp8emu::testing
