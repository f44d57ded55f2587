// train-lm's per-run log and state at a step boundary, and their checkpoint codec (the runner's
// envelope, common/runner.hpp, around them).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/runner.hpp"
#include "fp8emu/emulation/quantize.hpp"

namespace fp8emu::experiments::lm {

struct LayerPoint {  // one Linear at one evaluation
  std::string layer;
  double rel_error = 0.0;
  float scale_x = NAN, scale_w = NAN, scale_dy = NAN;
  emu::QuantizeStats x, w, dy;
};

struct LmLog {
  std::string name;
  std::vector<int> steps;  // evaluation steps
  std::vector<double> train_loss, val_loss, seconds;
  std::vector<std::vector<LayerPoint>> layers;
  std::string sample;
  bool diverged = false;
  // Data parallelism: per evaluation every shard's stored scales (FP8 runs with --dp-shards > 1),
  // whether the ranks' parameters were identical at every evaluation, rank 0's last checksum.
  std::vector<std::vector<float>> shard_scales;
  bool ranks_identical = true;
  std::uint64_t checksum = 0;
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
  std::vector<std::vector<float>> params, opt_m, opt_v;
  std::vector<std::vector<float>> fwd_state, bwd_state;  // per Linear, Quantizer::save_state
  std::vector<emu::QuantizeStats> stats;  // 3 per Linear
  long opt_steps = 0;
  std::string rng;
  std::vector<std::vector<float>> shard_states;  // every shard's quantizer state (--dp-shards > 1)
};

// ---- Checkpoints: the runner's envelope (common/runner.hpp) around these logs and states.
struct Codec : common::CodecTypes<LmLog, LmState> {
  static constexpr common::CheckpointId id{"FP8EMU-LM-CHECKPOINT-3", "fp8emu train-lm checkpoint"};

  static void put_log(common::Writer& w, const LmLog& l) {
    w.str(l.name);
    w.vec(l.steps);
    w.vec(l.train_loss);
    w.vec(l.val_loss);
    w.vec(l.seconds);
    common::put_table(w, l.layers, [&](const LayerPoint& p) {
      w.str(p.layer);
      w.pod(p.rel_error);
      w.pod(p.scale_x);
      w.pod(p.scale_w);
      w.pod(p.scale_dy);
      common::put_stats(w, p.x);
      common::put_stats(w, p.w);
      common::put_stats(w, p.dy);
    });
    w.str(l.sample);
    w.pod(std::uint8_t(l.diverged));
    common::put_tensors(w, {&l.shard_scales});
    w.pod(std::uint8_t(l.ranks_identical));
    w.pod(l.checksum);
  }

  static LmLog get_log(common::Reader& r, const std::string& path) {
    LmLog l;
    l.name = r.str();
    l.steps = r.vec<int>();
    l.train_loss = r.vec<double>();
    l.val_loss = r.vec<double>();
    l.seconds = r.vec<double>();
    l.layers = common::get_table<LayerPoint>(r, path, "evaluations", 1000000, 10000, [&] {
      LayerPoint p;
      p.layer = r.str();
      p.rel_error = r.pod<double>();
      p.scale_x = r.pod<float>();
      p.scale_w = r.pod<float>();
      p.scale_dy = r.pod<float>();
      p.x = common::get_stats(r);
      p.w = common::get_stats(r);
      p.dy = common::get_stats(r);
      return p;
    });
    l.sample = r.str();
    l.diverged = r.pod<std::uint8_t>() != 0;
    common::get_tensors(r, path, {&l.shard_scales});
    l.ranks_identical = r.pod<std::uint8_t>() != 0;
    l.checksum = r.pod<std::uint64_t>();
    return l;
  }

  static void put_state(common::Writer& w, const LmState& s) {
    put_log(w, s.log);
    w.pod(std::int32_t(s.step));
    w.pod(s.loss_sum);
    w.pod(std::int32_t(s.loss_count));
    common::put_tensors(w, {&s.params, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
    w.pod(std::uint64_t(s.stats.size()));
    for (const auto& st : s.stats) common::put_stats(w, st);
    w.pod(std::int64_t(s.opt_steps));
    w.str(s.rng);
    common::put_tensors(w, {&s.shard_states});
  }

  static LmState get_state(common::Reader& r, const std::string& path) {
    LmState s;
    s.log = get_log(r, path);
    s.step = r.pod<std::int32_t>();
    s.loss_sum = r.pod<double>();
    s.loss_count = r.pod<std::int32_t>();
    common::get_tensors(r, path, {&s.params, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
    const std::uint64_t k = r.pod<std::uint64_t>();
    FP8EMU_CHECK(k <= 100000, path, ": corrupt checkpoint (stats)");
    for (std::uint64_t i = 0; i < k; ++i) s.stats.push_back(common::get_stats(r));
    s.opt_steps = long(r.pod<std::int64_t>());
    s.rng = r.str();
    common::get_tensors(r, path, {&s.shard_states});
    return s;
  }
};

}  // namespace fp8emu::experiments::lm
