// The shared parts of a run's log and state (see run_record.hpp).
#include "common/run_record.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "common/runner.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::common {

void put_record(Writer& w, const RunRecord& r) {
  w.pod(std::uint8_t(r.diverged));
  w.vec(r.seconds);
  put_table(w, r.layers, [&](const LayerCasts& c) {
    w.str(c.layer);
    w.pod(c.rel_error);
    put_stats(w, c.input);
    put_stats(w, c.weight);
    put_stats(w, c.grad_output);
    w.pod(c.scale_input);
    w.pod(c.scale_weight);
    w.pod(c.scale_grad_output);
  });
  put_tensors(w, {&r.shard_scales});
  w.pod(std::uint8_t(r.ranks_identical));
  w.pod(r.checksum);
}

RunRecord get_record(Reader& r, const std::string& path, const char* points) {
  RunRecord rec;
  rec.diverged = r.pod<std::uint8_t>() != 0;
  rec.seconds = r.vec<double>();
  rec.layers = get_table<LayerCasts>(r, path, points, 1000000, 100000, [&] {
    LayerCasts c;
    c.layer = r.str();
    c.rel_error = r.pod<double>();
    c.input = get_stats(r);
    c.weight = get_stats(r);
    c.grad_output = get_stats(r);
    c.scale_input = r.pod<float>();
    c.scale_weight = r.pod<float>();
    c.scale_grad_output = r.pod<float>();
    return c;
  });
  get_tensors(r, path, {&rec.shard_scales});
  rec.ranks_identical = r.pod<std::uint8_t>() != 0;
  rec.checksum = r.pod<std::uint64_t>();
  return rec;
}

void put_model(Writer& w, const ModelState& s) {
  put_tensors(w, {&s.params, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
  w.pod(std::int64_t(s.opt_steps));
  w.str(s.rng);
  put_tensors(w, {&s.shard_states});
}

ModelState get_model(Reader& r, const std::string& path) {
  ModelState s;
  get_tensors(r, path, {&s.params, &s.fwd_state, &s.bwd_state, &s.opt_m, &s.opt_v});
  s.opt_steps = long(r.pod<std::int64_t>());
  s.rng = r.str();
  get_tensors(r, path, {&s.shard_states});
  return s;
}

std::vector<emu::QuantizeStats> cast_counts(const std::vector<nn::Linear*>& layers, const DataParallel& dp) {
  std::vector<std::uint64_t> c;
  for (const nn::Linear* l : layers)
    for (const emu::QuantizeStats* st : {&l->stats.input, &l->stats.weight, &l->stats.grad_output})
      c.insert(c.end(), {st->count, st->saturated, st->underflow, st->nan});
  c = dp.sum_over_ranks(c);
  std::vector<emu::QuantizeStats> out(3 * layers.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].count = c[4 * i];
    out[i].saturated = c[4 * i + 1];
    out[i].underflow = c[4 * i + 2];
    out[i].nan = c[4 * i + 3];
  }
  return out;
}

void check_ranks(const DataParallel& dp, RunRecord& record, const std::string& run, const std::string& where) {
  const std::vector<std::uint64_t> sums = dp.parameter_checksums();
  record.checksum = sums[0];
  if (std::any_of(sums.begin(), sums.end(), [&](std::uint64_t c) { return c != sums[0]; })) {
    if (record.ranks_identical && dp.root())
      std::fprintf(stderr, "warning: run %s: the ranks' parameters differ %s (rank 0's are written)\n", run.c_str(),
                   where.c_str());
    record.ranks_identical = false;
  }
}

ModelState capture_model(const std::vector<nn::Linear*>& layers, const Parameters& params, const nn::Optimizer& opt,
                         const nn::Rng& rng, DataParallel& dp) {
  ModelState s;
  for (const auto& p : params) s.params.push_back(p.first->data);
  auto layer_states = [&] {  // shard 0's (the layers' own with one shard)
    for (const nn::Linear* l : layers) {
      s.fwd_state.push_back(l->save_state(scaling::Direction::kForward));
      s.bwd_state.push_back(l->save_state(scaling::Direction::kBackward));
    }
  };
  if (dp.owns(0)) dp.with_shard(0, layer_states);
  else layer_states();
  s.shard_states = dp.all_states();
  s.opt_steps = opt.steps();
  s.opt_m = opt.first_moments();
  s.opt_v = opt.second_moments();
  s.rng = rng.state();
  return s;
}

void restore_model(const ModelState& s, const std::vector<nn::Linear*>& layers, const Parameters& params,
                   nn::Optimizer& opt, nn::Rng& rng, const std::string& path) {
  FP8EMU_CHECK(s.params.size() == params.size() && s.fwd_state.size() == layers.size() &&
                   s.bwd_state.size() == layers.size(),
               path, ": the checkpoint's model does not match this configuration");
  for (std::size_t i = 0; i < params.size(); ++i) {
    FP8EMU_CHECK(s.params[i].size() == params[i].first->size(), path, ": checkpointed tensor ", i,
                 " has a different shape");
    params[i].first->data = s.params[i];
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    try {
      layers[i]->load_state(scaling::Direction::kForward, s.fwd_state[i]);
      layers[i]->load_state(scaling::Direction::kBackward, s.bwd_state[i]);
    } catch (const Error& e) {
      FP8EMU_FAIL(path, ": checkpointed layer ", i, ": ", e.what());
    }
  }
  opt.restore(s.opt_steps, s.opt_m, s.opt_v);
  try {
    rng.set_state(s.rng);
  } catch (const std::exception&) {
    FP8EMU_FAIL(path, ": corrupt checkpoint (generator state)");
  }
}

}  // namespace fp8emu::experiments::common
