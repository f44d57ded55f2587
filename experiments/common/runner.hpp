// The runner shared by the training experiments (`fp8emu train`, `fp8emu train-lm`): the run list,
// the results folder (timestamped default, --resume/--out, stale-file removal), the checkpoint
// envelope with its fingerprint and resume checks, the run loop with mid-run and run-boundary
// checkpoints, metrics and plot writing, and the backends record of summary.json. An experiment
// keeps only its data, model, step and the contents of its result files.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/checkpoint_io.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::experiments::common {

// ---------------------------------------------------------------- settings parsed once

/// One run of an experiment: FP32, or FP8 under one recipe.
struct RunSpec {
  std::string name;  ///< "fp32", "fp8_delayed", "fp8_current", "fp8_mxfp8", "fp8_block".
  nn::Precision precision;
  scaling::Recipe recipe;
};

/// The GEMM accumulation of an FP8 Linear of a per-tensor recipe, TE's way: a tensor-core model
/// (hopper, ada) with fprop fast accumulation and dgrad/wgrad promoted every 128; any other model
/// for every GEMM.
void set_te_accumulation(nn::Linear& layer, emu::Accumulation acc);

// ---------------------------------------------------------------- formatting

/// %.9g of a double (round-trips every fp32).
std::string fmt_g(double v);
/// A per-tensor scale, or empty when not applicable (NaN: block recipes have one scale per block).
std::string fmt_scale(float s);
/// a / n, 0 for n = 0.
double frac(std::uint64_t a, std::uint64_t n);

// ---------------------------------------------------------------- results folder

/// The output folder of an experiment. The constructor only decides the name: --resume continues in
/// its folder (--out must then be omitted or the same folder); no --out gives
/// results/<prefix><YYYYmmdd-HHMMSS>, with -2, -3 ... when a run in the same second took the name.
class ResultsFolder {
 public:
  /// \param result_files the files this experiment writes (summary.json last, curves.png).
  /// \throws fp8emu::Error when --out and --resume name different folders.
  ResultsFolder(const std::string& out_dir, const std::string& resume, const std::string& timestamp_prefix,
                std::vector<std::string> result_files);
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  std::string checkpoint_path() const { return path("checkpoint.bin"); }
  /// Creates the folder (or checks it is writable), then removes what an earlier run left there:
  /// summary.json and curves.png (so summary.json marks a finished run of this configuration), the
  /// temporary files of a killed run, and on a fresh run (not a resume) an old checkpoint.bin.
  void prepare(bool resuming) const;
  /// Writes `file` in the folder atomically.
  void write(const std::string& file, const std::string& text) const;
  /// curves.png (see write_curves); false when gnuplot is unavailable.
  struct Series {
    std::string name;
    std::vector<long> x;
    std::vector<double> y;
  };
  struct Panel {
    std::string before;  ///< gnuplot lines before the panel (e.g. a key position)
    std::string title;
    std::vector<Series> series;
  };
  bool write_curves(const std::string& header, const std::vector<Panel>& panels) const;

 private:
  std::string dir_;
  std::vector<std::string> result_files_;
};

// ---------------------------------------------------------------- checkpoints

/// What identifies an experiment's checkpoints: the magic string they start with, and what a file
/// with another magic is told not to be ("fp8emu checkpoint").
struct CheckpointId {
  const char* magic;
  const char* kind;
};

/// The base of an experiment's checkpoint codec: the types of a run's log and of the state of a
/// run in progress. A codec derives from it and adds
///   static constexpr CheckpointId id;
///   static void put_log(Writer&, const Log&);  static Log get_log(Reader&, const std::string& path);
///   static void put_state(Writer&, const State&); static State get_state(Reader&, const std::string& path);
template <class LogT, class StateT>
struct CodecTypes {
  using Log = LogT;
  using State = StateT;
};

/// A checkpoint: the runs done and, mid-run, the state of the run in progress. The byte layout
/// (checkpoint_io.hpp streams): magic, fingerprint, runs done (count, logs), index of the current
/// run, whether a state follows, the state (the codec's).
template <class Codec>
struct Checkpoint {
  using Log = typename Codec::Log;
  using State = typename Codec::State;
  std::string fingerprint;  ///< The settings that determine the results; a resume must match them.
  std::vector<Log> completed;
  std::uint32_t current_run = 0;  ///< Index into the run list.
  bool has_state = false;         ///< false at a run boundary.
  State state;
};

template <class Codec>
void write_checkpoint(const std::string& path, const Checkpoint<Codec>& c) {
  Writer w;
  w.str(Codec::id.magic);
  w.str(c.fingerprint);
  w.pod(std::uint64_t(c.completed.size()));
  for (const auto& l : c.completed) Codec::put_log(w, l);
  w.pod(c.current_run);
  w.pod(std::uint8_t(c.has_state));
  if (c.has_state) Codec::put_state(w, c.state);
  write_checksummed(path, w);
}

/// A checkpoint from the bytes of its file without the CRC (read_checksummed), e.g. as rank 0 of a
/// data-parallel job read and broadcast them. \throws fp8emu::Error naming `path` when corrupt.
template <class Codec>
Checkpoint<Codec> parse_checkpoint(const std::vector<std::uint8_t>& b, const std::string& path) {
  Reader r(b, path);
  const std::string magic = r.str();
  if (magic != Codec::id.magic) {
    const auto family = [](const std::string& m) { return m.substr(0, m.rfind('-')); };
    FP8EMU_CHECK(family(magic) != family(Codec::id.magic), path, ": written by another fp8emu version (format ",
                 excerpt(magic), "; this one reads ", Codec::id.magic, "), so it cannot be resumed: start the run again "
                 "without --resume");
    FP8EMU_FAIL(path, ": not an ", Codec::id.kind);
  }
  Checkpoint<Codec> c;
  c.fingerprint = r.str();
  const std::uint64_t n = r.pod<std::uint64_t>();
  FP8EMU_CHECK(n <= 16, path, ": corrupt checkpoint (runs)");
  for (std::uint64_t i = 0; i < n; ++i) c.completed.push_back(Codec::get_log(r, path));
  c.current_run = r.pod<std::uint32_t>();
  c.has_state = r.pod<std::uint8_t>() != 0;
  if (c.has_state) c.state = Codec::get_state(r, path);
  return c;
}

template <class Codec>
Checkpoint<Codec> read_checkpoint(const std::string& path) {
  return parse_checkpoint<Codec>(read_checksummed(path), path);
}

/// Groups of float tensors (weights, moments, scales, ...): per group a count, then each tensor.
inline void put_tensors(Writer& w, std::initializer_list<const std::vector<std::vector<float>>*> groups) {
  for (const auto* group : groups) {
    w.pod(std::uint64_t(group->size()));
    for (const auto& v : *group) w.vec(v);
  }
}
inline void get_tensors(Reader& r, const std::string& path, std::initializer_list<std::vector<std::vector<float>>*> groups) {
  for (auto* group : groups) {
    const std::uint64_t g = r.pod<std::uint64_t>();
    FP8EMU_CHECK(g <= 100000, path, ": corrupt checkpoint (tensors)");
    for (std::uint64_t i = 0; i < g; ++i) group->push_back(r.vec<float>());
  }
}

/// A table of records (per evaluation, per layer): the row count, then per row its length and records.
template <class T, class Put>
void put_table(Writer& w, const std::vector<std::vector<T>>& rows, Put put) {
  w.pod(std::uint64_t(rows.size()));
  for (const auto& row : rows) {
    w.pod(std::uint64_t(row.size()));
    for (const T& x : row) put(x);
  }
}
/// Reads put_table's records; `what` names the rows ("epochs") in the error of a corrupt count.
template <class T, class Get>
std::vector<std::vector<T>> get_table(Reader& r, const std::string& path, const char* what, std::uint64_t max_rows,
                                      std::uint64_t max_columns, Get get) {
  std::vector<std::vector<T>> rows;
  const std::uint64_t n = r.pod<std::uint64_t>();
  FP8EMU_CHECK(n <= max_rows, path, ": corrupt checkpoint (", what, ")");
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t m = r.pod<std::uint64_t>();
    FP8EMU_CHECK(m <= max_columns, path, ": corrupt checkpoint (layers)");
    std::vector<T> row;
    for (std::uint64_t k = 0; k < m; ++k) row.push_back(get());
    rows.push_back(std::move(row));
  }
  return rows;
}

/// How a fingerprint mismatch is reported: (checkpoint path, its fingerprint, this run's).
using MismatchMessage = std::function<std::string(const std::string&, const std::string&, const std::string&)>;

/// The checkpoint to continue from: empty for a fresh run; with --resume, the folder's
/// checkpoint.bin, checked against this configuration's fingerprint and run count.
/// \throws fp8emu::Error for a missing, corrupt or mismatched checkpoint (nothing is touched).
template <class Codec>
Checkpoint<Codec> resume_point(const ResultsFolder& out, bool resuming, const std::string& fingerprint,
                               std::size_t runs, const MismatchMessage& mismatch) {
  Checkpoint<Codec> c;
  c.fingerprint = fingerprint;
  if (!resuming) return c;
  const std::string path = out.checkpoint_path();
  c = read_checkpoint<Codec>(path);
  FP8EMU_CHECK(c.fingerprint == fingerprint, mismatch(path, c.fingerprint, fingerprint));
  FP8EMU_CHECK(c.current_run <= runs && c.completed.size() == c.current_run, path,
               ": corrupt checkpoint (run index)");
  return c;
}

/// Runs runs[i] for every i from the resume point on, as train(i, state to resume or nullptr,
/// write a mid-run checkpoint); after each, after_run(logs so far) and, when `boundaries`, a
/// checkpoint at the run boundary. An empty checkpoint_path writes none (the ranks other than 0 of
/// a data-parallel job). \return every run's log, in order.
template <class Codec>
std::vector<typename Codec::Log> run_all(
    std::size_t runs, const Checkpoint<Codec>& resumed, const std::string& checkpoint_path, bool boundaries,
    const std::function<typename Codec::Log(std::size_t, const typename Codec::State*,
                                            const std::function<void(const typename Codec::State&)>&)>& train,
    const std::function<void(const std::vector<typename Codec::Log>&)>& after_run) {
  std::vector<typename Codec::Log> logs = resumed.completed;
  for (std::size_t i = resumed.current_run; i < runs; ++i) {
    // The checkpoint of run i: mid-run with its state, or at the boundary before run i.
    auto write_at = [&](std::size_t run, const typename Codec::State* st) {
      Checkpoint<Codec> c;
      c.fingerprint = resumed.fingerprint;
      c.completed = logs;
      c.current_run = std::uint32_t(run);
      c.has_state = st != nullptr;
      if (st) c.state = *st;
      if (!checkpoint_path.empty()) write_checkpoint(checkpoint_path, c);
    };
    const bool resume_here = i == resumed.current_run && resumed.has_state;
    logs.push_back(train(i, resume_here ? &resumed.state : nullptr,
                         [&](const typename Codec::State& st) { write_at(i, &st); }));
    after_run(logs);
    if (boundaries) write_at(i + 1, nullptr);
  }
  return logs;
}

// ---------------------------------------------------------------- summary.json

/// Records in `config` what ran: "backend_used" (a cuda layer that could not run fell back to
/// emulated) and, after a fallback, "backend_fallback" with the reason. With `last_fp32` the last
/// layer is recorded as reference (an LM head that runs FP32).
void record_backends(nlohmann::json& config, const std::string& spec, const std::vector<std::string>& names,
                     bool last_fp32);

/// The shortest decimal that reads back as the same fp32 (so 1e-3f records as 0.001).
double shortest(float v);

/// A recipe's parameters as summary.json records them: {name: value} from the record's
/// visit_parameters (floats as their shortest decimal).
nlohmann::json recipe_parameters_json(const scaling::Recipe& recipe);
/// The parameters of `set` that differ from TE's defaults (a default scaling::RecipeSet), by recipe
/// name: {"delayed": {"margin": 1}}; empty when none does.
nlohmann::json changed_recipe_parameters(const scaling::RecipeSet& set);

/// The device of --resident (train, train-lm): "off" none; "on" the device of the layers' one
/// backend (backend::cuda_device(), or backend::cpu_device() for emulated: the same step program on
/// the CPU, a check); "auto" the GPU when every layer runs on cuda (after any fallback) and with
/// one shard, else none. \throws fp8emu::Error for another value, or "on" with several shards or
/// mixed backends (naming the problem).
const backend::Device* resident_device(const std::string& mode, const std::vector<backend::Kind>& kinds, int shards);

/// Sets the OpenMP thread count (0: the default). \return the threads parallel regions will use.
int set_threads(int threads);

/// JSON text of a summary; text that is not valid UTF-8 becomes U+FFFD.
std::string json_text(const nlohmann::json& j, int indent);

}  // namespace fp8emu::experiments::common
