// fp8emu train's per-run log and state at an epoch boundary, and their checkpoint codec (the
// runner's envelope, common/runner.hpp, around them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/runner.hpp"
#include "fashion_mnist/train.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/mlp.hpp"

namespace fp8emu::experiments::fmnist {

struct LayerEpoch {
  double rel_error = 0.0;
  emu::QuantizeStats input, weight, grad_output;
  float scale_input = 1, scale_weight = 1, scale_grad_output = 1;
};

struct RunLog {
  RunResult result;
  bool diverged = false;                       // a non-finite training loss was seen
  std::vector<double> seconds;                 // cumulative, per epoch
  std::vector<std::vector<LayerEpoch>> layers;  // [epoch][layer], FP8 runs only
  // Data parallelism: per epoch every shard's stored scales (DataParallel::shard_scales; FP8 runs
  // with --dp-shards > 1), whether the ranks' parameters were identical after every epoch, and
  // rank 0's parameter checksum after the last one.
  std::vector<std::vector<float>> shard_scales;
  bool ranks_identical = true;
  std::uint64_t checksum = 0;
};

using common::shortest;

// The flags, parsed once.
struct Settings {
  std::vector<int> sizes;                // layer widths, input to classes
  nn::Activation activation;
  emu::Accumulation accumulation;
  nn::Optimizer::Kind optimizer;
  std::vector<backend::Kind> backends;   // per Linear, resolved (after any cuda fallback)
  const backend::Device* resident = nullptr;  // where runs keep their model between steps (--resident)
};

// The state of the run in progress at an epoch boundary.
struct RunState {
  RunLog log;
  int epochs_done = 0;
  std::vector<std::vector<float>> weights, biases;
  std::vector<std::vector<float>> fwd_state, bwd_state;  // per Linear, Quantizer::save_state
  long opt_steps = 0;
  std::vector<std::vector<float>> opt_m, opt_v;
  std::string rng;
  std::vector<int> order;
  std::vector<std::vector<float>> shard_states;  // every shard's quantizer state (--dp-shards > 1)
};

// ---- Checkpoints: the runner's envelope (common/runner.hpp) around these logs and states.
struct Codec : common::CodecTypes<RunLog, RunState> {
  static constexpr common::CheckpointId id{"FP8EMU-CHECKPOINT-3", "fp8emu checkpoint"};

  static void put_log(common::Writer& w, const RunLog& l) {
    w.str(l.result.name);
    w.pod(std::uint8_t(l.diverged));
    w.vec(l.result.train_loss);
    w.vec(l.result.test_loss);
    w.vec(l.result.test_accuracy);
    w.pod(l.result.seconds);
    w.vec(l.seconds);
    common::put_table(w, l.layers, [&](const LayerEpoch& e) {
      w.pod(e.rel_error);
      common::put_stats(w, e.input);
      common::put_stats(w, e.weight);
      common::put_stats(w, e.grad_output);
      w.pod(e.scale_input);
      w.pod(e.scale_weight);
      w.pod(e.scale_grad_output);
    });
    common::put_tensors(w, {&l.shard_scales});
    w.pod(std::uint8_t(l.ranks_identical));
    w.pod(l.checksum);
  }

  static RunLog get_log(common::Reader& r, const std::string& path) {
    RunLog l;
    l.result.name = r.str();
    l.diverged = r.pod<std::uint8_t>() != 0;
    l.result.train_loss = r.vec<double>();
    l.result.test_loss = r.vec<double>();
    l.result.test_accuracy = r.vec<double>();
    l.result.seconds = r.pod<double>();
    l.seconds = r.vec<double>();
    l.layers = common::get_table<LayerEpoch>(r, path, "epochs", 1000000, 100000, [&] {
      LayerEpoch x;
      x.rel_error = r.pod<double>();
      x.input = common::get_stats(r);
      x.weight = common::get_stats(r);
      x.grad_output = common::get_stats(r);
      x.scale_input = r.pod<float>();
      x.scale_weight = r.pod<float>();
      x.scale_grad_output = r.pod<float>();
      return x;
    });
    common::get_tensors(r, path, {&l.shard_scales});
    l.ranks_identical = r.pod<std::uint8_t>() != 0;
    l.checksum = r.pod<std::uint64_t>();
    return l;
  }

  static void put_state(common::Writer& w, const RunState& s) {
    put_log(w, s.log);
    w.pod(std::int32_t(s.epochs_done));
    common::put_tensors(w, {&s.weights, &s.biases, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
    w.pod(std::int64_t(s.opt_steps));
    w.str(s.rng);
    w.vec(s.order);
    common::put_tensors(w, {&s.shard_states});
  }

  static RunState get_state(common::Reader& r, const std::string& path) {
    RunState s;
    s.log = get_log(r, path);
    s.epochs_done = r.pod<std::int32_t>();
    common::get_tensors(r, path, {&s.weights, &s.biases, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
    s.opt_steps = long(r.pod<std::int64_t>());
    s.rng = r.str();
    s.order = r.vec<int>();
    common::get_tensors(r, path, {&s.shard_states});
    return s;
  }
};

}  // namespace fp8emu::experiments::fmnist
