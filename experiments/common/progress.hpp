// Progress lines of a training run on stderr: per batch within an epoch (`fp8emu train`) or per
// optimizer step (`fp8emu train-lm`). On a terminal the line is redrawn in place; into a file or
// pipe fewer lines are written (every quarter of an epoch, every evaluation).
#pragma once

#include <string>

namespace fp8emu::experiments::common {

class Progress {
 public:
  /// Progress through epoch `epoch` (1-based) of `epochs`, of `batches` batches:
  /// "[run] epoch e/E  pct%  batch d/B  loss L". `on` false: prints nothing.
  Progress(bool on, std::string run, int epoch, int epochs, int batches);
  /// Progress through a run of `steps` optimizer steps: "[run] step s/S pct%  loss L[  val V]".
  Progress(bool on, std::string run, int steps);

  /// Epoch progress: `done` batches of the epoch, `loss` their mean loss. A terminal sees every
  /// 20th batch and the last; a file each quarter of the epoch and the last batch.
  void batch(int done, double loss);
  /// Step progress: step `step` with its training loss and the validation loss `val` (NaN when the
  /// step did not evaluate). A terminal sees every 5th step, each evaluation and the last step; a
  /// file one line per evaluation.
  void step(int step, double loss, double val);

 private:
  bool on_, tty_;
  std::string run_;
  int epoch_ = 0, epochs_ = 0, total_ = 0, last_quarter_ = 0;
};

}  // namespace fp8emu::experiments::common
