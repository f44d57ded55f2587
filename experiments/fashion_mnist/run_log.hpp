// fp8emu train's per-run log and state at an epoch boundary, and their checkpoint codec (the
// runner's envelope, common/runner.hpp, around them; the parts shared with train-lm are
// common/run_record.hpp's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_record.hpp"
#include "common/runner.hpp"
#include "fashion_mnist/train.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/mlp.hpp"

namespace fp8emu::experiments::fmnist {

// A run's log: its result (name, losses and accuracy per epoch) and the shared record (per epoch
// seconds and per-layer casts, the shards' scales, the ranks' check).
struct RunLog : common::RunRecord {
  RunResult result;
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
  common::ModelState model;  // the weights and biases (per layer, in that order), moments, shuffle generator
  std::vector<int> order;    // the shuffled order of the training images
};

// ---- Checkpoints: the runner's envelope (common/runner.hpp) around these logs and states.
struct Codec : common::CodecTypes<RunLog, RunState> {
  static constexpr common::CheckpointId id{"FP8EMU-CHECKPOINT-4", "fp8emu checkpoint"};

  static void put_log(common::Writer& w, const RunLog& l) {
    w.str(l.result.name);
    w.vec(l.result.train_loss);
    w.vec(l.result.test_loss);
    w.vec(l.result.test_accuracy);
    w.pod(l.result.seconds);
    common::put_record(w, l);
  }

  static RunLog get_log(common::Reader& r, const std::string& path) {
    RunLog l;
    l.result.name = r.str();
    l.result.train_loss = r.vec<double>();
    l.result.test_loss = r.vec<double>();
    l.result.test_accuracy = r.vec<double>();
    l.result.seconds = r.pod<double>();
    static_cast<common::RunRecord&>(l) = common::get_record(r, path, "epochs");
    return l;
  }

  static void put_state(common::Writer& w, const RunState& s) {
    put_log(w, s.log);
    w.pod(std::int32_t(s.epochs_done));
    common::put_model(w, s.model);
    w.vec(s.order);
  }

  static RunState get_state(common::Reader& r, const std::string& path) {
    RunState s;
    s.log = get_log(r, path);
    s.epochs_done = r.pod<std::int32_t>();
    s.model = common::get_model(r, path);
    s.order = r.vec<int>();
    return s;
  }
};

}  // namespace fp8emu::experiments::fmnist
