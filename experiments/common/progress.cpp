// Progress lines of a training run (see progress.hpp).
#include "common/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <utility>

namespace fp8emu::experiments::common {

Progress::Progress(bool on, std::string run, int epoch, int epochs, int batches)
    : on_(on), tty_(::isatty(2) != 0), run_(std::move(run)), epoch_(epoch), epochs_(epochs), total_(batches) {}

Progress::Progress(bool on, std::string run, int steps)
    : on_(on), tty_(::isatty(2) != 0), run_(std::move(run)), total_(steps) {}

void Progress::batch(int done, double loss) {
  if (!on_) return;
  const int pct = total_ ? int(100.0 * done / total_) : 100;
  if (tty_) {
    if (done % 20 != 0 && done != total_) return;
    std::fprintf(stderr, "\r[%s] epoch %d/%d  %3d%%  batch %d/%d  loss %.4f", run_.c_str(), epoch_, epochs_, pct,
                 done, total_, loss);
    if (done == total_) std::fprintf(stderr, "\n");
  } else if (pct / 25 > last_quarter_ || done == total_) {
    last_quarter_ = pct / 25;
    std::fprintf(stderr, "[%s] epoch %d/%d  %3d%%  batch %d/%d  loss %.4f\n", run_.c_str(), epoch_, epochs_, pct,
                 done, total_, loss);
  }
  std::fflush(stderr);
}

void Progress::step(int step, double loss, double val) {
  if (!on_) return;
  const int pct = int(100.0 * step / total_);
  const bool eval = !std::isnan(val);
  if (!tty_ && !eval) return;  // a log file gets one line per evaluation
  if (tty_ && step % 5 != 0 && !eval && step != total_) return;
  std::fprintf(stderr, "%s[%s] step %d/%d %3d%%  loss %.4f", tty_ ? "\r" : "", run_.c_str(), step, total_, pct, loss);
  if (eval) std::fprintf(stderr, "  val %.4f%s", val, tty_ ? "\n" : "");
  if (!tty_) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace fp8emu::experiments::common
