// gnuplot rendering (see fp8emu_internal/plot.hpp).
#include "fp8emu_internal/plot.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace fp8emu::io {
namespace {

constexpr double kDefaultTimeout = 60.0;

struct GnuplotRun {
  enum Outcome { kExited, kNotStarted, kKilledBySignal, kTimedOut } outcome = kNotStarted;
  int exit_code = 0;  ///< kExited: gnuplot's status; kNotStarted: errno of the start; kKilledBySignal: the signal
};

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : left > 1000 ? 1000 : int(left);
}

// Runs gnuplot with `dir` as its working directory and `script` on its standard input; no shell
// is involved and no user-supplied path appears in the script. gnuplot runs in its own process
// group; past `timeout_s` seconds (writing the script included) the whole group is killed.
GnuplotRun run_gnuplot_in(const std::string& dir, const std::string& script, double timeout_s) {
  GnuplotRun res;
  int fds[2], err_fds[2];
  if (::pipe(fds) != 0) {
    res.exit_code = errno;
    return res;
  }
  // Reports a failed exec: closed without a byte when gnuplot starts (close-on-exec).
  if (::pipe2(err_fds, O_CLOEXEC) != 0) {
    res.exit_code = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return res;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    res.exit_code = errno;
    for (int fd : {fds[0], fds[1], err_fds[0], err_fds[1]}) ::close(fd);
    return res;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[0], 0);
    ::close(fds[0]);
    ::close(fds[1]);
    ::close(err_fds[0]);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
    }
    int e = 0;
    if (::chdir(dir.c_str()) != 0) e = errno;
    else {
      ::execlp("gnuplot", "gnuplot", static_cast<char*>(nullptr));
      e = errno;
    }
    if (::write(err_fds[1], &e, sizeof e) < 0) {
    }
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that the group exists before any kill below
  ::close(fds[0]);
  ::close(err_fds[1]);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000.0));

  // Did gnuplot start? (EOF: exec succeeded; an int: the errno of chdir or exec.)
  int start_errno = 0;
  ssize_t r;
  while ((r = ::read(err_fds[0], &start_errno, sizeof start_errno)) < 0 && errno == EINTR) {
  }
  ::close(err_fds[0]);
  if (r == ssize_t(sizeof start_errno)) {
    ::close(fds[1]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    res.exit_code = start_errno;
    return res;
  }

  // The script, without blocking: a gnuplot that neither reads nor exits must not hang us.
  // A gnuplot that exits early must not kill us with SIGPIPE.
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  std::size_t done = 0;
  bool timed_out = false;
  while (done < script.size()) {
    const ssize_t w = ::write(fds[1], script.data() + done, script.size() - done);
    if (w > 0) {
      done += std::size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) {
        timed_out = true;
        break;
      }
      pollfd p{fds[1], POLLOUT, 0};
      ::poll(&p, 1, ms_left(deadline));
      continue;
    }
    break;  // EPIPE: gnuplot exited; its status tells why
  }
  ::close(fds[1]);
  ::sigaction(SIGPIPE, &old, nullptr);
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }

  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (timed_out) continue;
    if (Clock::now() >= deadline) {
      timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms_left(deadline), 10)));
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);  // helpers gnuplot started, if any
    res.outcome = GnuplotRun::kTimedOut;
  } else if (WIFEXITED(status)) {
    res.outcome = GnuplotRun::kExited;
    res.exit_code = WEXITSTATUS(status);
  } else {
    res.outcome = GnuplotRun::kKilledBySignal;
    res.exit_code = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return res;
}

}  // namespace

double gnuplot_timeout_seconds(std::string* note) {
  const char* env = std::getenv("FP8EMU_GNUPLOT_TIMEOUT");
  if (!env || !*env) return kDefaultTimeout;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end != env && *end == '\0' && std::isfinite(v) && v > 0.0 && v <= 86400.0) return v;
  if (note)
    *note = std::string("FP8EMU_GNUPLOT_TIMEOUT='") + env + "' is not a number of seconds in (0, 86400]; using " +
            std::to_string(int(kDefaultTimeout));
  return kDefaultTimeout;
}

bool render_png(const std::string& gnuplot_script, const std::string& png_path) {
  namespace fs = std::filesystem;
  const fs::path target(png_path);
  const std::string name = target.filename().string();
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string tmp = "." + name + ".tmp." + std::to_string(::getpid());  // relative to dir
  std::string script = gnuplot_script;
  for (std::size_t at; (at = script.find("@OUTPUT@")) != std::string::npos;) script.replace(at, 8, tmp);
  std::string timeout_note;
  const double timeout = gnuplot_timeout_seconds(&timeout_note);
  if (!timeout_note.empty()) std::fprintf(stderr, "note: %s\n", timeout_note.c_str());
  const GnuplotRun run = run_gnuplot_in(dir, script, timeout);
  const fs::path tmp_path = fs::path(dir) / tmp;
  std::error_code ec;
  const bool wrote = fs::exists(tmp_path, ec) && fs::file_size(tmp_path, ec) > 0 && !ec;
  if (run.outcome != GnuplotRun::kExited || run.exit_code != 0 || !wrote) {
    std::string why;
    char buf[160];
    switch (run.outcome) {
      case GnuplotRun::kNotStarted:
        why = run.exit_code == ENOENT ? "gnuplot is not installed (apt-get install gnuplot-nox, or run scripts/setup)"
                                      : std::string("gnuplot cannot be started (") + std::strerror(run.exit_code) + ")";
        break;
      case GnuplotRun::kTimedOut:
        std::snprintf(buf, sizeof buf, "gnuplot did not finish within %g s and was stopped (FP8EMU_GNUPLOT_TIMEOUT "
                      "sets the limit in seconds)", timeout);
        why = buf;
        break;
      case GnuplotRun::kKilledBySignal:
        std::snprintf(buf, sizeof buf, "gnuplot was killed by signal %d", run.exit_code);
        why = buf;
        break;
      case GnuplotRun::kExited:
        if (run.exit_code != 0) {
          std::snprintf(buf, sizeof buf, "gnuplot failed (exit %d)", run.exit_code);
          why = buf;
        } else {
          why = "gnuplot wrote no image (is its pngcairo terminal missing, or the disk full?)";
        }
        break;
    }
    std::fprintf(stderr, "note: %s not written: %s\n", name.c_str(), why.c_str());
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
