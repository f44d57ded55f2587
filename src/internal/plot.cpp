// gnuplot rendering (see fp8emu_internal/plot.hpp).
#include "fp8emu_internal/plot.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

namespace fp8emu::io {
namespace {

// Runs gnuplot with `dir` as its working directory and `script` on its standard input; no shell
// is involved and no user-supplied path appears in the script. Returns gnuplot's exit status, or
// 127 when it cannot be started.
int run_gnuplot_in(const std::string& dir, const std::string& script) {
  int fds[2];
  if (::pipe(fds) != 0) return 127;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return 127;
  }
  if (pid == 0) {
    ::dup2(fds[0], 0);
    ::close(fds[0]);
    ::close(fds[1]);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
    }
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execlp("gnuplot", "gnuplot", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);
  // A gnuplot that exits early must not kill us with SIGPIPE.
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  std::size_t done = 0;
  while (done < script.size()) {
    const ssize_t w = ::write(fds[1], script.data() + done, script.size() - done);
    if (w <= 0) break;
    done += std::size_t(w);
  }
  ::close(fds[1]);
  ::sigaction(SIGPIPE, &old, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 127;
}

}  // namespace

bool render_png(const std::string& gnuplot_script, const std::string& png_path) {
  namespace fs = std::filesystem;
  const fs::path target(png_path);
  const std::string name = target.filename().string();
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = "." + name + ".tmp." + std::to_string(::getpid());  // relative to dir
  std::string script = gnuplot_script;
  for (std::size_t at; (at = script.find("@OUTPUT@")) != std::string::npos;) script.replace(at, 8, tmp);
  const int rc = run_gnuplot_in(dir, script);
  const fs::path tmp_path = fs::path(dir) / tmp;
  std::error_code ec;
  const bool ok = rc == 0 && fs::exists(tmp_path, ec) && fs::file_size(tmp_path, ec) > 0 && !ec;
  if (!ok) {
    if (rc == 127)
      std::fprintf(stderr, "note: %s not written: gnuplot is not installed (apt-get install gnuplot-nox, "
                           "or run scripts/setup)\n", name.c_str());
    else
      std::fprintf(stderr, "note: %s not written: gnuplot failed (exit %d) or the disk is full\n", name.c_str(), rc);
    fs::remove(tmp_path, ec);
    return false;
  }
  fs::rename(tmp_path, target, ec);
  if (ec) {
    std::fprintf(stderr, "note: %s not written: %s\n", name.c_str(), ec.message().c_str());
    fs::remove(tmp_path, ec);
    return false;
  }
  return true;
}

}  // namespace fp8emu::io
