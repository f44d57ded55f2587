// train-lm's per-run log and state at a step boundary, and their checkpoint codec (the runner's
// envelope, common/runner.hpp, around them; the parts shared with train are
// common/run_record.hpp's).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/run_record.hpp"
#include "common/runner.hpp"
#include "fp8emu/emulation/quantize.hpp"

namespace fp8emu::experiments::lm {

struct LmLog : common::RunRecord {  // the shared record: seconds, layers, shards' scales, ranks' check
  std::string name;
  std::vector<int> steps;  // evaluation steps
  std::vector<double> train_loss, val_loss;
  std::string sample;
  // Time in the training steps alone (forward, loss, backward, updates; no evaluation, checkpoint or
  // copy to the host) and their count, of this process: not checkpointed, so a resumed run counts
  // the steps it ran itself.
  double step_seconds = 0.0;
  long timed_steps = 0;
  // The first of them alone: with --resident it includes the device's first allocations and
  // cuBLASLt's plans (the upload of the model is not step time), so benchmarks leave it out.
  double first_step_seconds = 0.0;
};

struct LmState {  // a run at a step boundary
  LmLog log;
  int step = 0;
  double loss_sum = 0.0;
  int loss_count = 0;
  std::vector<emu::QuantizeStats> stats;  // 3 per Linear: the casts since the last evaluation
  common::ModelState model;               // parameters, moments, the sampler's generator
};

// ---- Checkpoints: the runner's envelope (common/runner.hpp) around these logs and states.
struct Codec : common::CodecTypes<LmLog, LmState> {
  static constexpr common::CheckpointId id{"FP8EMU-LM-CHECKPOINT-4", "fp8emu train-lm checkpoint"};

  static void put_log(common::Writer& w, const LmLog& l) {
    w.str(l.name);
    w.vec(l.steps);
    w.vec(l.train_loss);
    w.vec(l.val_loss);
    w.str(l.sample);
    common::put_record(w, l);
  }

  static LmLog get_log(common::Reader& r, const std::string& path) {
    LmLog l;
    l.name = r.str();
    l.steps = r.vec<int>();
    l.train_loss = r.vec<double>();
    l.val_loss = r.vec<double>();
    l.sample = r.str();
    static_cast<common::RunRecord&>(l) = common::get_record(r, path, "evaluations");
    return l;
  }

  static void put_state(common::Writer& w, const LmState& s) {
    put_log(w, s.log);
    w.pod(std::int32_t(s.step));
    w.pod(s.loss_sum);
    w.pod(std::int32_t(s.loss_count));
    w.pod(std::uint64_t(s.stats.size()));
    for (const auto& st : s.stats) common::put_stats(w, st);
    common::put_model(w, s.model);
  }

  static LmState get_state(common::Reader& r, const std::string& path) {
    LmState s;
    s.log = get_log(r, path);
    s.step = r.pod<std::int32_t>();
    s.loss_sum = r.pod<double>();
    s.loss_count = r.pod<std::int32_t>();
    const std::uint64_t k = r.pod<std::uint64_t>();
    FP8EMU_CHECK(k <= 100000, path, ": corrupt checkpoint (stats)");
    for (std::uint64_t i = 0; i < k; ++i) s.stats.push_back(common::get_stats(r));
    s.model = common::get_model(r, path);
    return s;
  }
};

}  // namespace fp8emu::experiments::lm
