// Data-parallel training for the experiments (`fp8emu train`, `fp8emu train-lm`), with results that
// do not depend on the rank count (docs/data-parallel.md).
//
// Each global batch is cut into S fixed shards (--dp-shards S). A shard is what one rank of a
// data-parallel job with S ranks would hold: its rows, its forward and backward casts, its own
// quantizer state (scale, amax_history). N ranks (mpirun -np N, N dividing S) each run S/N
// consecutive shards one after the other; nothing a shard computes depends on which rank runs it.
// Every combination across shards is done in shard order:
//   - gradients: each shard's gradient (the backward of its rows, the loss divided by the global
//     batch) is kept; the step's gradient is part(s_0) + part(s_1) + ... in fp32, element by
//     element, over the shards that have rows (a deterministic reduce-scatter, then an all-gather);
//   - delayed scaling's amax (TE DelayedScaling.reduce_amax over the amax_reduction_group): before
//     the history roll, each shard's staging amax (amax_history row 0) of every slot becomes the
//     max over the shards of its group (--amax-reduction dp | none | group=K);
//   - losses, counts and error sums: per-shard partial sums, added by the experiment in shard order.
// With S = 1 (the default) there is one shard and nothing is exchanged: the arithmetic is the
// single-process run's.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/dist.hpp"
#include "common/runner.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/matrix.hpp"

namespace fp8emu::experiments::common {

/// The amax-reduction group of delayed scaling, in shards.
struct AmaxReduction {
  enum class Kind : std::uint8_t {
    kDp,     ///< All S shards (TE's default group: the data-parallel group).
    kNone,   ///< Each shard alone: per-rank amaxes and scales (a reduction over the wrong group).
    kGroup,  ///< Consecutive groups of `group` shards: shards [g*K, g*K + K).
  };
  Kind kind = Kind::kDp;
  int group = 0;  ///< kGroup: shards per group.
  /// "dp", "none" or "group=K".
  std::string name() const;
};

/// "dp", "none" or "group=K" (K >= 1). \throws fp8emu::Error naming the accepted values.
AmaxReduction parse_amax_reduction(const std::string& s);

/// A half-open row range [begin, end) of a batch.
struct Rows {
  int begin = 0, end = 0;
  int count() const { return end - begin; }
};

/// (parameter, gradient) pairs of a model in optimizer order (nn::ParamList).
using Parameters = std::vector<std::pair<nn::Matrix*, nn::Matrix*>>;

class DataParallel {
 public:
  /// \throws fp8emu::Error when shards < 1, shards is not a multiple of the group's ranks, or a
  ///         group=K does not divide shards (one message naming the flag and the fix).
  DataParallel(const dist::Group& group, int shards, AmaxReduction reduction);

  const dist::Group& group() const { return group_; }
  bool root() const { return group_.root(); }
  int ranks() const { return group_.size(); }
  int shards() const { return shards_; }
  const AmaxReduction& reduction() const { return reduction_; }
  int local_shards() const { return shards_ / group_.size(); }
  int first_shard() const { return group_.rank() * local_shards(); }
  bool owns(int shard) const { return shard >= first_shard() && shard < first_shard() + local_shards(); }

  /// Rows of shard s in a batch of n rows: [floor(s n / S), floor((s + 1) n / S)).
  Rows rows(int n, int shard) const;

  /// Binds a run's model: its Linear layers (their quantizer states become one per shard, each
  /// starting from the layer's current state) and its parameters in optimizer order.
  void bind(std::vector<nn::Linear*> linears, Parameters params);

  /// Runs f(shard) for every shard of this rank in shard order, with that shard's quantizer
  /// states in the layers.
  void for_each_shard(const std::function<void(int)>& f);
  /// Runs f() with shard s's quantizer states in the layers (s must be one of this rank's).
  void with_shard(int shard, const std::function<void()>& f);

  /// After shard s's backward: keeps the parameters' gradients as that shard's part.
  void keep_gradients(int shard);
  /// Collective. Writes the step's gradient into the parameters' gradients on every rank: the
  /// parts of the shards with has_rows[s], added in shard order (fp32).
  void reduce_gradients(const std::vector<bool>& has_rows);

  /// Collective. TE's amax reduction and scale update (after a step's backward): for every shard,
  /// the staging amax of each delayed-scaling slot becomes the max over the shard's group, then
  /// every layer's forward and backward scales are updated (Linear::update_*_scales).
  void update_scales();

  /// Collective. One training step of a batch of `batch_rows` rows cut into the shards: for every
  /// shard of this rank that has rows, in shard order with its quantizer states, `shard_step(shard,
  /// rows)` runs that shard's forward and backward and returns its summed loss; then its gradients
  /// are kept, TE's scale update runs with the amax reduction (update_scales: the forward scales at
  /// autocast exit and the backward ones after the backward; the backward never reads the forward
  /// scales, so both are updated here) and the gradients are reduced (reduce_gradients).
  /// \return the batch's summed loss: the shards' sums added in shard order (sum_shards), the same
  ///         bits for every rank count. The optimizer step is the caller's.
  double step(int batch_rows, const std::function<double(int shard, Rows rows)>& shard_step);

  /// Collective. `local` holds k values per shard of this rank (in shard order); returns the S * k
  /// values of every shard in shard order.
  std::vector<double> gather_shards(const std::vector<double>& local) const;
  /// Collective. `local` holds k values per shard of this rank; returns the k sums over the shards,
  /// added in shard order (the first counted shard's values, then each later one added: the same
  /// bits for every rank count). With `counted`, only shards s with counted[s] take part (shards
  /// that held no rows this step).
  std::vector<double> sum_shards(const std::vector<double>& local, const std::vector<bool>* counted = nullptr) const;
  /// Collective. Element-wise sums over the ranks (exact: integers).
  std::vector<std::uint64_t> sum_over_ranks(const std::vector<std::uint64_t>& local) const;

  /// Collective. The quantizer states (scale and amax_history of both directions of every layer)
  /// of every shard, each flattened, in shard order; empty for S = 1 (the layers hold the state).
  std::vector<std::vector<float>> all_states();
  /// Restores this rank's shards from all_states()'s S entries (a checkpoint).
  /// \throws fp8emu::Error naming `path` when the count or sizes do not match.
  void restore_states(const std::vector<std::vector<float>>& all, const std::string& path);

  /// Collective. Per shard, per layer: the stored scales of the input, weight and grad_output
  /// slots (S * layers * 3, shard-major); NaN for a layer without delayed-scaling state.
  std::vector<float> shard_scales();

  /// Collective. A 64-bit FNV-1a checksum of every parameter's bytes, per rank in rank order.
  std::vector<std::uint64_t> parameter_checksums() const;

 private:
  struct LayerState {
    scaling::DelayedScalingState fwd{3, 1}, bwd{2, 1};
    /// The quantizers' other state (Quantizer::save_state: NVFP4's stochastic-rounding stream), per
    /// shard as the scales, so a shard's bits do not depend on how many shards a rank runs.
    std::vector<float> fwd_other, bwd_other;
  };
  void enter(int local);
  void leave(int local);
  bool has_delayed_state(const nn::Linear& l) const;
  std::vector<float> flatten_state(int local) const;

  const dist::Group& group_;
  int shards_;
  AmaxReduction reduction_;
  std::vector<nn::Linear*> linears_;
  Parameters params_;
  std::size_t grad_size_ = 0;
  std::vector<std::vector<LayerState>> states_;  // [local shard][layer], S > 1 only
  std::vector<std::vector<float>> parts_;        // [local shard][grad_size_], S > 1 only
};

/// Appends the shards.csv rows of one point (an epoch, a step) to `os`: per layer and shard the
/// stored scales of input, weight and grad_output (shard_scales()'s values; NaN layers skipped).
void append_shard_scales(std::ostream& os, const std::string& run, long point, const std::vector<std::string>& layers,
                         int shards, const std::vector<float>& scales);
/// The largest ratio, over the layers and tensors of shard_scales()'s values, of the largest to
/// the smallest scale that the shards hold for the same tensor: 1 when every shard agrees.
double max_scale_ratio(const std::vector<float>& scales, int shards);
/// summary.json's record of a run's data parallelism.
nlohmann::json data_parallel_run_json(const std::vector<std::vector<float>>& shard_scales, int shards,
                                      bool ranks_identical, std::uint64_t checksum);

/// The results folder of a job: rank 0 names it (ResultsFolder's rules: --resume, --out or a
/// timestamped default) and every rank gets the same name. \throws dist::CollectiveError.
ResultsFolder shared_results_folder(const dist::Group& group, const std::string& out_dir, const std::string& resume,
                                   const std::string& timestamp_prefix, std::vector<std::string> result_files);

/// resume_point for a job: rank 0 reads and checks the checkpoint, the other ranks receive its
/// bytes (they need no shared file system). \throws dist::CollectiveError.
template <class Codec>
Checkpoint<Codec> shared_resume_point(const dist::Group& group, const ResultsFolder& out, bool resuming,
                                      const std::string& fingerprint, std::size_t runs,
                                      const MismatchMessage& mismatch) {
  Checkpoint<Codec> c;
  c.fingerprint = fingerprint;
  std::vector<std::uint8_t> bytes;
  group.on_root([&] {
    c = resume_point<Codec>(out, resuming, fingerprint, runs, mismatch);
    if (resuming && group.size() > 1) bytes = read_checksummed(out.checkpoint_path());
  });
  if (!resuming || group.size() == 1) return c;
  group.broadcast(bytes, 0);
  if (!group.root()) c = parse_checkpoint<Codec>(bytes, out.checkpoint_path());
  return c;
}

}  // namespace fp8emu::experiments::common
