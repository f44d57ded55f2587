// The parts of a training run's log and checkpointed state that every experiment keeps, their
// checkpoint codec (checkpoint_io.hpp streams), and the collective steps that fill them: the casts'
// counts over the ranks, the ranks' parameter check, the model's state at a checkpoint and its
// restoration. An experiment's log and state add their own fields (losses, samples, data order).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint_io.hpp"
#include "common/data_parallel.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/matrix.hpp"
#include "fp8emu/nn/mlp.hpp"

namespace fp8emu::experiments::common {

/// One Linear layer at one point of a run (an epoch, an evaluation step).
struct LayerCasts {
  std::string layer;      ///< Its name ("l0.qkv"); empty where the layer's index names it.
  double rel_error = 0.0; ///< Relative L2 error of its output against its FP32 twin (test/validation data).
  /// The counts of its input, weight and grad_output casts since the previous point, every shard's.
  emu::QuantizeStats input, weight, grad_output;
  /// Shard 0's last stored scales of the three casts; NaN where a recipe has one scale per block.
  float scale_input = NAN, scale_weight = NAN, scale_grad_output = NAN;
};

/// What every run's log holds besides the experiment's own series.
struct RunRecord {
  bool diverged = false;                           ///< A non-finite loss was seen.
  std::vector<double> seconds;                     ///< Wall seconds since the run began, per point.
  std::vector<std::vector<LayerCasts>> layers;     ///< [point][layer]; FP8 (and BF16) runs only.
  /// Per point every shard's stored scales (DataParallel::shard_scales; FP8 runs with several shards).
  std::vector<std::vector<float>> shard_scales;
  bool ranks_identical = true;                     ///< The ranks' parameters were equal at every point.
  std::uint64_t checksum = 0;                      ///< Rank 0's parameter checksum at the last point.
};

/// The model, optimizer and quantizer state of a run in progress.
struct ModelState {
  std::vector<std::vector<float>> params;                ///< Every parameter, in the optimizer's order.
  std::vector<std::vector<float>> fwd_state, bwd_state;  ///< Per Linear, shard 0's Quantizer::save_state.
  long opt_steps = 0;
  std::vector<std::vector<float>> opt_m, opt_v;          ///< The optimizer's moments.
  std::string rng;                                       ///< The run's generator (Rng::state).
  std::vector<std::vector<float>> shard_states;          ///< DataParallel::all_states() (several shards).
};

// ---- checkpoint codec

void put_record(Writer& w, const RunRecord& r);
/// \param points the name of the points in the error of a corrupt count ("epochs", "evaluations").
RunRecord get_record(Reader& r, const std::string& path, const char* points);
void put_model(Writer& w, const ModelState& s);
ModelState get_model(Reader& r, const std::string& path);

// ---- filling them

/// Collective. The counts of every layer's input, weight and grad_output casts (three per layer,
/// in that order), each summed over the ranks.
std::vector<emu::QuantizeStats> cast_counts(const std::vector<nn::Linear*>& layers, const DataParallel& dp);

/// Collective. Records rank 0's parameter checksum in `record` and whether every rank's equals it;
/// the first time they differ rank 0 warns on stderr ("warning: run <run>: the ranks' parameters
/// differ <where> (rank 0's are written)"; `where`: "after epoch 3", "at step 200").
void check_ranks(const DataParallel& dp, RunRecord& record, const std::string& run, const std::string& where);

/// Collective (bound `dp`). The state of the model of `layers` and `params`, its optimizer and the
/// run's generator: the parameters, shard 0's quantizer states and every shard's.
ModelState capture_model(const std::vector<nn::Linear*>& layers, const Parameters& params, const nn::Optimizer& opt,
                         const nn::Rng& rng, DataParallel& dp);

/// Restores capture_model's state but the shards' (DataParallel::restore_states, once bound).
/// \throws fp8emu::Error naming `path` when the checkpoint's model does not match this one.
void restore_model(const ModelState& s, const std::vector<nn::Linear*>& layers, const Parameters& params,
                   nn::Optimizer& opt, nn::Rng& rng, const std::string& path);

}  // namespace fp8emu::experiments::common
