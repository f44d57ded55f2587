// Data-parallel training with results independent of the rank count (see data_parallel.hpp).
#include "common/data_parallel.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

namespace fp8emu::experiments::common {

std::string AmaxReduction::name() const {
  switch (kind) {
    case Kind::kDp: return "dp";
    case Kind::kNone: return "none";
    case Kind::kGroup: return "group=" + std::to_string(group);
  }
  return "?";
}

AmaxReduction parse_amax_reduction(const std::string& s) {
  AmaxReduction r;
  if (s == "dp") return r;
  if (s == "none") {
    r.kind = AmaxReduction::Kind::kNone;
    return r;
  }
  if (s.rfind("group=", 0) == 0 && s.size() > 6 && s.size() <= 6 + 9 &&
      s.find_first_not_of("0123456789", 6) == std::string::npos) {
    r.kind = AmaxReduction::Kind::kGroup;
    r.group = std::stoi(s.substr(6));
    if (r.group >= 1) return r;
  }
  FP8EMU_FAIL("unknown --amax-reduction '", s,
              "' (accepted: dp, none, group=K with K >= 1 consecutive shards per group)");
}

DataParallel::DataParallel(const dist::Group& group, int shards, AmaxReduction reduction)
    : group_(group), shards_(shards), reduction_(reduction) {
  FP8EMU_CHECK(shards >= 1, "--dp-shards must be >= 1, got ", shards);
  FP8EMU_CHECK(shards % group.size() == 0, "--dp-shards ", shards, " is not a multiple of the ", group.size(),
               " ranks that mpirun started: each rank runs dp-shards / ranks shards (results depend on "
               "--dp-shards, not on the rank count); use --dp-shards ", group.size(), " (or a multiple), or a rank "
               "count that divides ", shards);
  if (reduction.kind == AmaxReduction::Kind::kGroup)
    FP8EMU_CHECK(shards % reduction.group == 0, "--amax-reduction group=", reduction.group,
                 ": the group size must divide --dp-shards ", shards, " (groups of consecutive shards)");
}

Rows DataParallel::rows(int n, int shard) const {
  const long long s = shards_;
  return {int(static_cast<long long>(shard) * n / s), int(static_cast<long long>(shard + 1) * n / s)};
}

namespace {
// A quantizer's state that is not delayed scaling's (NVFP4's rounding stream), or empty.
std::vector<float> other_state(const nn::Linear& l, scaling::Direction d) {
  const scaling::Quantizer& q = d == scaling::Direction::kForward ? l.forward_quantizer() : l.backward_quantizer();
  return q.amax_history_state() ? std::vector<float>{} : q.save_state();
}
void swap_other_state(nn::Linear& l, scaling::Direction d, std::vector<float>& kept) {
  std::vector<float> now = other_state(l, d);
  if (now.empty() && kept.empty()) return;
  l.load_state(d, kept);
  kept.swap(now);
}
}  // namespace

bool DataParallel::has_delayed_state(const nn::Linear& l) const {
  return l.precision() == nn::Precision::kFp8 && l.forward_quantizer().amax_history_state() != nullptr;
}

void DataParallel::bind(std::vector<nn::Linear*> linears, Parameters params) {
  linears_ = std::move(linears);
  params_ = std::move(params);
  grad_size_ = 0;
  for (const auto& p : params_) grad_size_ += p.second->size();
  states_.clear();
  parts_.clear();
  if (shards_ == 1) return;  // the layers hold the one shard's state; the gradient is the shard's
  for (int j = 0; j < local_shards(); ++j) {
    std::vector<LayerState> st;
    for (const nn::Linear* l : linears_)
      st.push_back({l->forward_state(), l->backward_state(), other_state(*l, scaling::Direction::kForward),
                    other_state(*l, scaling::Direction::kBackward)});
    states_.push_back(std::move(st));
    parts_.emplace_back(grad_size_);
  }
}

void DataParallel::enter(int local) {
  if (shards_ == 1) return;
  for (std::size_t i = 0; i < linears_.size(); ++i) {
    LayerState& st = states_[std::size_t(local)][i];
    std::swap(linears_[i]->forward_state(), st.fwd);
    std::swap(linears_[i]->backward_state(), st.bwd);
    swap_other_state(*linears_[i], scaling::Direction::kForward, st.fwd_other);
    swap_other_state(*linears_[i], scaling::Direction::kBackward, st.bwd_other);
  }
}

void DataParallel::leave(int local) { enter(local); }  // the swap back

void DataParallel::for_each_shard(const std::function<void(int)>& f) {
  for (int j = 0; j < local_shards(); ++j) {
    enter(j);
    f(first_shard() + j);
    leave(j);
  }
}

void DataParallel::with_shard(int shard, const std::function<void()>& f) {
  FP8EMU_CHECK(owns(shard), "data parallel: shard ", shard, " is not one of rank ", group_.rank(), "'s");
  enter(shard - first_shard());
  f();
  leave(shard - first_shard());
}

void DataParallel::keep_gradients(int shard) {
  if (shards_ == 1) return;
  float* out = parts_[std::size_t(shard - first_shard())].data();
  for (const auto& p : params_) {
    std::memcpy(out, p.second->data.data(), p.second->size() * sizeof(float));
    out += p.second->size();
  }
}

namespace {
// out[e] = part(s_0)[e] + part(s_1)[e] + ..., in shard order over the shards with rows; part(s)
// starts at base + s * stride. One fp32 add per element and shard, the same whatever the ranks.
void fold_parts(const float* base, std::size_t stride, std::size_t n, const std::vector<bool>& has_rows,
                float* out) {
  bool first = true;
  for (std::size_t s = 0; s < has_rows.size(); ++s) {
    if (!has_rows[s]) continue;
    const float* p = base + s * stride;
    if (first) {
      std::memcpy(out, p, n * sizeof(float));
      first = false;
    } else {
      for (std::size_t e = 0; e < n; ++e) out[e] += p[e];
    }
  }
  if (first) std::memset(out, 0, n * sizeof(float));
}
}  // namespace

void DataParallel::reduce_gradients(const std::vector<bool>& has_rows) {
  if (shards_ == 1) return;
  FP8EMU_CHECK(has_rows.size() == std::size_t(shards_), "data parallel: one has_rows flag per shard expected");
  const std::size_t G = grad_size_, N = std::size_t(ranks()), L = std::size_t(local_shards());
  std::vector<float> full(G);
  if (N == 1) {
    std::vector<float> all(L * G);  // the parts side by side: shard s at s * G
    for (std::size_t j = 0; j < L; ++j) std::memcpy(all.data() + j * G, parts_[j].data(), G * sizeof(float));
    fold_parts(all.data(), G, G, has_rows, full.data());
  } else {
    // Rank q folds elements [c_q, c_q+1) of every shard's part (a reduce-scatter whose sums are
    // made here, in shard order), then every rank gathers the folded chunks.
    std::vector<std::size_t> c(N + 1);
    for (std::size_t q = 0; q <= N; ++q) c[q] = G * q / N;
    const std::size_t me = std::size_t(group_.rank()), mine = c[me + 1] - c[me];
    std::vector<float> send;
    send.reserve(L * G);
    std::vector<std::size_t> send_counts(N), recv_counts(N, L * mine), chunk_counts(N);
    for (std::size_t q = 0; q < N; ++q) {
      for (std::size_t j = 0; j < L; ++j) send.insert(send.end(), parts_[j].begin() + long(c[q]), parts_[j].begin() + long(c[q + 1]));
      send_counts[q] = L * (c[q + 1] - c[q]);
      chunk_counts[q] = c[q + 1] - c[q];
    }
    std::vector<float> recv(N * L * mine);  // from rank p, its shards j: shard p * L + j at (p * L + j) * mine
    group_.alltoallv(send.data(), send_counts, recv.data(), recv_counts);
    std::vector<float> folded(mine);
    fold_parts(recv.data(), mine, mine, has_rows, folded.data());
    group_.allgatherv(folded.data(), full.data(), chunk_counts);
  }
  const float* in = full.data();
  for (const auto& p : params_) {
    std::memcpy(p.second->data.data(), in, p.second->size() * sizeof(float));
    in += p.second->size();
  }
}

void DataParallel::update_scales() {
  if (shards_ > 1 && reduction_.kind != AmaxReduction::Kind::kNone) {
    // The staging amaxes of every shard: per delayed-scaling layer its forward slots, then its
    // backward slots (TE concatenates the row 0 of every module into one buffer per direction).
    std::vector<float> local;
    for (int j = 0; j < local_shards(); ++j)
      for (std::size_t i = 0; i < linears_.size(); ++i) {
        if (!has_delayed_state(*linears_[i])) continue;
        const LayerState& st = states_[std::size_t(j)][i];
        for (int k = 0; k < st.fwd.num_slots(); ++k) local.push_back(st.fwd.history(0, k));
        for (int k = 0; k < st.bwd.num_slots(); ++k) local.push_back(st.bwd.history(0, k));
      }
    const std::size_t A = local.size() / std::size_t(local_shards());
    const std::vector<float> all = group_.allgather(local);
    const int K = reduction_.kind == AmaxReduction::Kind::kDp ? shards_ : reduction_.group;
    for (int j = 0; j < local_shards(); ++j) {
      const int s = first_shard() + j, lo = s / K * K;
      std::size_t a = 0;
      for (std::size_t i = 0; i < linears_.size(); ++i) {
        if (!has_delayed_state(*linears_[i])) continue;
        LayerState& st = states_[std::size_t(j)][i];
        auto reduce = [&](scaling::DelayedScalingState& ds) {
          for (int k = 0; k < ds.num_slots(); ++k, ++a) {
            float m = all[std::size_t(lo) * A + a];  // MAX over the group, in shard order
            for (int t = lo + 1; t < lo + K; ++t) m = std::fmax(m, all[std::size_t(t) * A + a]);
            ds.set_amax(k, m);
          }
        };
        reduce(st.fwd);
        reduce(st.bwd);
      }
    }
  }
  for (int j = 0; j < local_shards(); ++j) {
    enter(j);
    for (nn::Linear* l : linears_) {
      l->update_forward_scales();
      l->update_backward_scales();
    }
    leave(j);
  }
}

double DataParallel::step(int batch_rows, const std::function<double(int shard, Rows rows)>& shard_step) {
  std::vector<double> totals(std::size_t(local_shards()), 0.0);
  std::vector<bool> has_rows(static_cast<std::size_t>(shards_));
  for (int sh = 0; sh < shards_; ++sh) has_rows[std::size_t(sh)] = rows(batch_rows, sh).count() > 0;
  for_each_shard([&](int sh) {
    const Rows r = rows(batch_rows, sh);
    if (r.count() == 0) return;
    totals[std::size_t(sh - first_shard())] = shard_step(sh, r);
    keep_gradients(sh);
  });
  update_scales();
  reduce_gradients(has_rows);
  return sum_shards(totals, &has_rows)[0];
}

std::vector<double> DataParallel::gather_shards(const std::vector<double>& local) const {
  FP8EMU_CHECK(local.size() % std::size_t(local_shards()) == 0, "data parallel: values per shard do not divide");
  return group_.allgather(local);
}

std::vector<double> DataParallel::sum_shards(const std::vector<double>& local, const std::vector<bool>* counted) const {
  const std::vector<double> all = gather_shards(local);
  const std::size_t k = local.size() / std::size_t(local_shards());
  std::vector<double> sum(k, 0.0);
  bool first = true;
  for (std::size_t s = 0; s < std::size_t(shards()); ++s) {
    if (counted && !(*counted)[s]) continue;
    for (std::size_t i = 0; i < k; ++i) sum[i] = first ? all[s * k + i] : sum[i] + all[s * k + i];
    first = false;
  }
  return sum;
}

std::vector<std::uint64_t> DataParallel::sum_over_ranks(const std::vector<std::uint64_t>& local) const {
  const std::vector<std::uint64_t> all = group_.allgather(local);
  std::vector<std::uint64_t> sum(local.size(), 0);
  for (std::size_t r = 0; r < std::size_t(ranks()); ++r)
    for (std::size_t k = 0; k < local.size(); ++k) sum[k] += all[r * local.size() + k];
  return sum;
}

std::vector<float> DataParallel::flatten_state(int local) const {
  std::vector<float> v;
  for (const LayerState& st : states_[std::size_t(local)]) {
    for (const scaling::DelayedScalingState* ds : {&st.fwd, &st.bwd}) {
      v.insert(v.end(), ds->scales().begin(), ds->scales().end());
      v.insert(v.end(), ds->history_values().begin(), ds->history_values().end());
    }
    v.insert(v.end(), st.fwd_other.begin(), st.fwd_other.end());
    v.insert(v.end(), st.bwd_other.begin(), st.bwd_other.end());
  }
  return v;
}

std::vector<std::vector<float>> DataParallel::all_states() {
  if (shards_ == 1) return {};
  std::vector<float> local;
  for (int j = 0; j < local_shards(); ++j) {
    const std::vector<float> f = flatten_state(j);
    local.insert(local.end(), f.begin(), f.end());
  }
  const std::vector<float> all = group_.allgather(local);
  const std::size_t per = local.size() / std::size_t(local_shards());
  std::vector<std::vector<float>> out;
  for (int s = 0; s < shards_; ++s)
    out.emplace_back(all.begin() + long(std::size_t(s) * per), all.begin() + long(std::size_t(s + 1) * per));
  return out;
}

void DataParallel::restore_states(const std::vector<std::vector<float>>& all, const std::string& path) {
  if (shards_ == 1) return;
  FP8EMU_CHECK(all.size() == std::size_t(shards_), path, ": the checkpoint holds the quantizer states of ",
               all.size(), " shards, this run has --dp-shards ", shards_);
  for (int j = 0; j < local_shards(); ++j) {
    const std::vector<float>& v = all[std::size_t(first_shard() + j)];
    FP8EMU_CHECK(v.size() == flatten_state(j).size(), path, ": a shard's checkpointed quantizer state has ",
                 v.size(), " values, this model's has ", flatten_state(j).size());
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
      std::vector<float> part(v.begin() + long(at), v.begin() + long(at + n));
      at += n;
      return part;
    };
    for (LayerState& st : states_[std::size_t(j)]) {
      for (scaling::DelayedScalingState* ds : {&st.fwd, &st.bwd}) {
        std::vector<float> scales = take(ds->scales().size());
        std::vector<float> history = take(ds->history_values().size());
        ds->restore(scales, history);
      }
      st.fwd_other = take(st.fwd_other.size());
      st.bwd_other = take(st.bwd_other.size());
    }
  }
}

std::vector<float> DataParallel::shard_scales() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> local;
  for (int j = 0; j < local_shards(); ++j)
    for (std::size_t i = 0; i < linears_.size(); ++i) {
      if (!has_delayed_state(*linears_[i])) {
        local.insert(local.end(), {nan, nan, nan});
        continue;
      }
      const scaling::DelayedScalingState& f =
          shards_ == 1 ? linears_[i]->forward_state() : states_[std::size_t(j)][i].fwd;
      const scaling::DelayedScalingState& b =
          shards_ == 1 ? linears_[i]->backward_state() : states_[std::size_t(j)][i].bwd;
      local.insert(local.end(), {f.scale(nn::Linear::kInput), f.scale(nn::Linear::kWeight),
                                 b.scale(nn::Linear::kGradOutput)});
    }
  return group_.allgather(local);
}

std::vector<std::uint64_t> DataParallel::parameter_checksums() const {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (const auto& p : params_) {
    const auto* b = reinterpret_cast<const unsigned char*>(p.first->data.data());
    for (std::size_t i = 0; i < p.first->size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return group_.allgather(std::vector<std::uint64_t>{h});
}

void append_shard_scales(std::ostream& os, const std::string& run, long point, const std::vector<std::string>& layers,
                         int shards, const std::vector<float>& scales) {
  const std::size_t L = layers.size();
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t sh = 0; sh < std::size_t(shards); ++sh) {
      const float* v = &scales[(sh * L + l) * 3];
      if (std::isnan(v[0])) continue;
      os << run << ',' << point << ',' << layers[l] << ',' << sh << ',' << fmt_g(v[0]) << ',' << fmt_g(v[1]) << ','
         << fmt_g(v[2]) << '\n';
    }
}

double max_scale_ratio(const std::vector<float>& scales, int shards) {
  const std::size_t per_shard = scales.size() / std::size_t(shards);
  double ratio = 1.0;
  for (std::size_t t = 0; t < per_shard; ++t) {
    float lo = scales[t], hi = scales[t];
    if (std::isnan(lo)) continue;
    for (std::size_t sh = 1; sh < std::size_t(shards); ++sh) {
      lo = std::fmin(lo, scales[sh * per_shard + t]);
      hi = std::fmax(hi, scales[sh * per_shard + t]);
    }
    ratio = std::fmax(ratio, double(hi) / double(lo));
  }
  return ratio;
}

nlohmann::json data_parallel_run_json(const std::vector<std::vector<float>>& shard_scales, int shards,
                                      bool ranks_identical, std::uint64_t checksum) {
  nlohmann::json j;
  double worst = 1.0;
  for (const std::vector<float>& sc : shard_scales) worst = std::fmax(worst, max_scale_ratio(sc, shards));
  j["max_scale_ratio_across_shards"] = worst;
  j["last_scale_ratio_across_shards"] = shard_scales.empty() ? 1.0 : max_scale_ratio(shard_scales.back(), shards);
  j["parameters_identical_across_ranks"] = ranks_identical;
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(checksum));
  j["parameter_checksum"] = hex;
  return j;
}

ResultsFolder shared_results_folder(const dist::Group& group, const std::string& out_dir, const std::string& resume,
                                   const std::string& timestamp_prefix, std::vector<std::string> result_files) {
  std::optional<ResultsFolder> root_folder;  // named once: a timestamped name depends on the clock
  group.on_root([&] { root_folder.emplace(out_dir, resume, timestamp_prefix, result_files); });
  if (root_folder) {
    std::vector<std::uint8_t> b(root_folder->dir().begin(), root_folder->dir().end());
    group.broadcast(b, 0);
    return *root_folder;
  }
  std::vector<std::uint8_t> b;
  group.broadcast(b, 0);
  // The other ranks take the name as given: they touch no file.
  const std::string dir(b.begin(), b.end());
  return ResultsFolder(resume.empty() ? dir : std::string(), resume, timestamp_prefix, std::move(result_files));
}

}  // namespace fp8emu::experiments::common
