// The job skeleton of a training experiment (`fp8emu train`, `fp8emu train-lm`): an experiment
// derives from Job<Codec> and supplies its flags check, data, fingerprint, run list, one run's
// training, the files rewritten after each run and the final report; Job::run does the rest once,
// on every rank of the job: the collective checks, the data-parallel group, the results folder
// (--out, --resume, stale files), the resume point, the progress header, the termination note of
// an mpirun job, the runs with their checkpoints, and the rewriting of the files by rank 0.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/data_parallel.hpp"
#include "common/dist.hpp"
#include "common/runner.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::common {

/// What the driver needs of a job's flags.
struct JobSpec {
  std::string command;           ///< "train", "train-lm": the command in the termination note.
  std::string out_dir;           ///< --out; empty: results/<timestamp_prefix><YYYYmmdd-HHMMSS>.
  std::string resume;            ///< --resume; empty: a fresh run.
  std::string timestamp_prefix;  ///< "" or "lm-".
  /// Every file the job may write (ResultsFolder: summary.json last, curves.png). A "shards.csv"
  /// among them is DataParallel's record of the shards' scales: removed on a run with one shard.
  std::vector<std::string> result_files;
  int checkpoint_every = 0;      ///< --checkpoint-every: 0 writes no checkpoint.
  bool progress = true;          ///< false: --quiet (no header, no progress lines).
};

/// A job: an experiment's runs (FP32 and each recipe) under the shared skeleton. `Codec` is the
/// experiment's checkpoint codec (runner.hpp: CodecTypes with its Log and State).
template <class Codec>
class Job {
 public:
  using Log = typename Codec::Log;
  using State = typename Codec::State;
  /// Writes a mid-run checkpoint of the run in progress (the driver adds the runs done).
  using CheckpointFn = std::function<void(const State&)>;
  /// Rewrites the per-run files with the runs done and `current` (rank 0; the others do nothing).
  using ReportFn = std::function<void(const Log&)>;

  explicit Job(JobSpec spec) : spec_(std::move(spec)) {}
  virtual ~Job() = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  /// Runs the job on this rank (every rank of an mpirun job calls it).
  /// \return every run's log, in the order of the run list.
  /// \throws fp8emu::Error (dist::CollectiveError under mpirun) for bad flags, bad data, an
  ///         unusable results folder or checkpoint; nothing is written before the flags and the
  ///         data are known to be good, nor before a --resume checkpoint has been read and checked.
  std::vector<Log> run();

 protected:
  // ---- What an experiment supplies, in the order run() calls it.

  /// Checks and parses the flags (every rank, under Group::agree: the same verdict everywhere); it
  /// calls make_data_parallel once. Writes nothing.
  virtual void configure() = 0;
  /// Reads the data (every rank, under Group::agree).
  virtual void load_data() = 0;
  /// The settings that determine the results: a --resume must match them exactly.
  virtual std::string fingerprint() = 0;
  /// The number of runs (FP32, then each recipe; known once the flags and data are).
  virtual std::size_t run_count() const = 0;
  /// The error of a --resume whose checkpoint has another fingerprint: (checkpoint path, its
  /// fingerprint, this run's).
  virtual std::string mismatch_message(const std::string& path, const std::string& theirs,
                                       const std::string& ours) const = 0;
  /// The progress header's description of the job ("fp8emu train: 2048 train / ..."); the driver
  /// appends the shards and the results folder.
  virtual std::string header() const = 0;
  /// A line after the header when resuming (with its newline); none by default.
  virtual std::string resume_line(const Checkpoint<Codec>& resumed) const {
    (void)resumed;
    return {};
  }
  /// Trains run i: from `resume` when non-null (a mid-run checkpoint), calling `checkpoint` at its
  /// own checkpoint points and `report` whenever the files should show its progress.
  virtual Log train_run(std::size_t i, const State* resume, const CheckpointFn& checkpoint,
                        const ReportFn& report) = 0;
  /// The files rewritten after each run (and at each `report`): name -> text, for the logs so far.
  virtual std::vector<std::pair<std::string, std::string>> run_files(const std::vector<Log>& logs) const = 0;
  /// Rank 0 after the last run: the summary (its presence marks a finished run), plot and report.
  virtual void finish(const std::vector<Log>& logs) = 0;

  // ---- What the driver gives it.

  const JobSpec& spec() const { return spec_; }
  const dist::Group& group() const { return group_; }
  /// Notes and warnings of configure(): stderr on rank 0, discarded on the other ranks.
  std::ostream& log_stream() { return group_.root() ? static_cast<std::ostream&>(std::cerr) : quiet_; }
  /// The data-parallel group of the job's shards. \throws fp8emu::Error for a bad count or reduction.
  DataParallel& make_data_parallel(int shards, const std::string& amax_reduction) {
    return dp_.emplace(group_, shards, parse_amax_reduction(amax_reduction));
  }
  DataParallel& dp() { return *dp_; }
  const DataParallel& dp() const { return *dp_; }
  /// The results folder (named once the data are loaded).
  const ResultsFolder& folder() const { return *folder_; }

 private:
  JobSpec spec_;
  const dist::Group& group_ = dist::world();
  std::ostringstream quiet_;
  std::optional<DataParallel> dp_;
  std::optional<ResultsFolder> folder_;
};

template <class Codec>
std::vector<typename Codec::Log> Job<Codec>::run() {
  // 1. The flags, before touching data or disk; 2. the data.
  group_.agree([&] { configure(); });
  FP8EMU_CHECK(dp_.has_value(), spec_.command, ": configure() made no data-parallel group");
  group_.agree([&] { load_data(); });

  // 3. The results folder, once the data are known to be good. On --resume the checkpoint is read
  // and checked first, so a bad resume touches nothing (ResultsFolder::prepare). Rank 0 alone
  // touches files; the other ranks get the folder's name and the checkpoint from it.
  folder_.emplace(shared_results_folder(group_, spec_.out_dir, spec_.resume, spec_.timestamp_prefix,
                                        spec_.result_files));
  const std::string fp = fingerprint();
  const std::size_t runs = run_count();
  const bool resuming = !spec_.resume.empty();
  const Checkpoint<Codec> resumed = shared_resume_point<Codec>(
      group_, *folder_, resuming, fp, runs,
      [&](const std::string& path, const std::string& theirs, const std::string& ours) {
        return mismatch_message(path, theirs, ours);
      });
  group_.on_root([&] {
    folder_->prepare(resuming);
    if (dp_->shards() == 1) std::filesystem::remove(folder_->path("shards.csv"));  // an older run's
  });
  if (spec_.progress && group_.root()) {
    std::string line = header();
    if (dp_->shards() > 1 || dp_->ranks() > 1)
      line += ", " + std::to_string(dp_->shards()) + " shards on " + std::to_string(dp_->ranks()) +
              " rank(s), amax reduction " + dp_->reduction().name();
    line += ", results in " + folder_->dir() + "\n";
    if (resuming) line += resume_line(resumed);
    std::fputs(line.c_str(), stderr);
  }
  const std::string stopped = "fp8emu " + spec_.command +
                              ": rank 0 stopped by mpirun (another rank failed or the job was stopped); ";
  dist::set_termination_note(
      spec_.checkpoint_every > 0
          ? stopped + "the last checkpoint is intact: continue with --resume " + folder_->dir() +
                " and the same flags (any rank count that divides --dp-shards)\n"
          : stopped + "no checkpoint was written (--checkpoint-every 0)\n");

  // 4. The runs; the per-run files are rewritten by rank 0 after each run and at each report.
  std::vector<Log> done = resumed.completed;  // the runs finished before the current one
  auto write_files = [&](const std::vector<Log>& logs) {
    for (const auto& [name, text] : run_files(logs)) folder_->write(name, text);
  };
  const ReportFn report = [&](const Log& current) {
    if (!group_.root()) return;
    std::vector<Log> all = done;
    all.push_back(current);
    write_files(all);
  };
  const std::vector<Log> logs = run_all<Codec>(
      runs, resumed, group_.root() ? folder_->checkpoint_path() : std::string(), spec_.checkpoint_every > 0,
      [&](std::size_t i, const State* state, const CheckpointFn& checkpoint) {
        return train_run(i, state, checkpoint, report);
      },
      [&](const std::vector<Log>& so_far) {
        done = so_far;
        if (group_.root()) write_files(so_far);
      });

  // 5. The summary and report (rank 0).
  if (group_.root()) finish(logs);
  return logs;
}

}  // namespace fp8emu::experiments::common
