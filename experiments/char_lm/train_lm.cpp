// `fp8emu train-lm` (see train_lm.hpp): the corpus, the model, its training step and its result
// files. The job around them (flags agreed by every rank, results folder, resume, checkpoints,
// progress, file rewriting) is the shared skeleton's (common/job.hpp).
#include "char_lm/train_lm.hpp"
#include "char_lm/char_lm_model.hpp"
#include "char_lm/corpus.hpp"
#include "char_lm/lm_log.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/data_parallel.hpp"
#include "common/dist.hpp"
#include "common/job.hpp"
#include "common/progress.hpp"
#include "common/run_record.hpp"
#include "common/runner.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "fp8emu/nn/transformer.hpp"
#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"
#include "fp8emu_internal/resources.hpp"

namespace fp8emu::experiments {
namespace {

constexpr EnumName<nn::NormKind> kNormNames[] = {{nn::NormKind::kLayerNorm, "layernorm"},
                                                 {nn::NormKind::kRMSNorm, "rmsnorm"}};
constexpr EnumName<nn::ActivationDtype> kActivationDtypeNames[] = {{nn::ActivationDtype::kFp32, "fp32"},
                                                                   {nn::ActivationDtype::kBf16, "bf16"}};

using namespace lm;

using nn::Matrix;
using common::fmt_g;

// ---------------------------------------------------------------- training

// "name=value,..." against the known layer names. \throws fp8emu::Error naming the valid names.
std::vector<std::pair<std::size_t, std::string>> parse_layer_values(const std::string& flag, const std::string& spec,
                                                                    const std::vector<std::string>& names) {
  std::vector<std::pair<std::size_t, std::string>> out;
  if (spec.empty()) return out;
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t eq = item.find('=');
    FP8EMU_CHECK(eq != std::string::npos && eq > 0, flag, ": expected name=value, got '", item, "'");
    const std::string name = item.substr(0, eq);
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      std::string valid;
      for (const std::string& n : names) valid += (valid.empty() ? "" : ", ") + n;
      FP8EMU_FAIL(flag, ": unknown layer '", name, "' (this model's layers are ", valid, ")");
    }
    const std::size_t i = std::size_t(it - names.begin());
    for (const auto& prev : out) FP8EMU_CHECK(prev.first != i, flag, ": layer '", name, "' is named twice");
    out.emplace_back(i, item.substr(eq + 1));
  }
  return out;
}

std::vector<std::string> layer_names_of(int layers) {
  std::vector<std::string> names;
  for (int l = 0; l < layers; ++l)
    for (const char* k : {"qkv", "proj", "fc1", "fc2"}) names.push_back("l" + std::to_string(l) + "." + k);
  names.push_back("head");
  return names;
}

using common::RunSpec;

struct Context {
  const TrainLmConfig& cfg;
  scaling::RecipeSet recipes;
  LmSpec spec;
  emu::Accumulation accumulation;       // --accumulation, parsed once
  std::vector<backend::Kind> backends;  // per Linear, resolved (after any cuda fallback)
  const backend::Device* resident;      // --resident: where runs keep their model between steps
  const Corpus& corpus;
  const std::vector<Batch>& val_batches;
  std::string checkpoint_path;
};

// The mean validation loss. Validation batch k is evaluated by shard k mod S (with its quantizer
// state), each shard summing its losses and, per Linear, its FP32-twin error sums (into `twins`
// when non-null) in batch order; the shards' sums are added in shard order (one shard: the plain
// sums). `after_shard0` runs right after shard 0's batches (on the rank that holds it).
double mean_val_loss(CharLm& model, const Context& ctx, common::DataParallel& dp, const std::vector<nn::Linear*>& lins,
                     std::vector<nn::TwinError>* twins, const std::function<void()>& after_shard0) {
  const std::size_t L = lins.size(), k = 1 + 2 * L;
  const int batches = int(ctx.val_batches.size()), S = dp.shards();
  std::vector<double> local(std::size_t(dp.local_shards()) * k, 0.0);
  dp.for_each_shard([&](int sh) {
    std::vector<nn::TwinError> tw(L);
    for (std::size_t i = 0; i < L; ++i) lins[i]->twin_error = twins ? &tw[i] : nullptr;
    double sum = 0.0;
    for (int b = sh; b < batches; b += S) {
      Matrix logits;
      model.forward(ctx.val_batches[std::size_t(b)].input, ctx.cfg.seq_len, logits, false);
      sum += nn::softmax_cross_entropy(logits, ctx.val_batches[std::size_t(b)].target, nullptr);
    }
    for (nn::Linear* l : lins) l->twin_error = nullptr;
    double* v = &local[std::size_t(sh - dp.first_shard()) * k];
    v[0] = sum;
    for (std::size_t i = 0; i < L; ++i) {
      v[1 + 2 * i] = tw[i].err;
      v[2 + 2 * i] = tw[i].ref;
    }
    if (sh == 0) after_shard0();
  });
  const std::vector<double> sum = dp.sum_shards(local);
  if (twins)
    for (std::size_t i = 0; i < L; ++i) (*twins)[i] = {sum[1 + 2 * i], sum[2 + 2 * i]};
  return sum[0] / double(ctx.val_batches.size());
}

std::string generate(CharLm& model, const Corpus& c, int T, int n, std::uint64_t seed) {
  // Sampling at temperature 0.8 from a seeded generator (the same draws for every run), starting
  // from a newline (or the first token of the vocabulary when there is none).
  std::vector<std::uint8_t> ctx;
  const auto nl = std::find(c.vocab.begin(), c.vocab.end(), std::uint8_t('\n'));
  ctx.push_back(std::uint8_t(nl == c.vocab.end() ? 0 : nl - c.vocab.begin()));
  nn::Rng rng(seed ^ 0xA5A5A5A5ull);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int t = std::min<int>(int(ctx.size()), T);
    const std::vector<std::uint8_t> window(ctx.end() - t, ctx.end());
    Matrix logits;
    model.forward(window, t, logits, false);
    const float* z = logits.row(logits.rows - 1);
    float mx = -INFINITY;
    for (int v = 0; v < logits.cols; ++v) mx = std::fmax(mx, z[v]);
    std::vector<double> p(static_cast<std::size_t>(logits.cols));
    double sum = 0.0;
    for (int v = 0; v < logits.cols; ++v) sum += (p[std::size_t(v)] = std::exp((double(z[v]) - mx) / 0.8));
    double u = double(rng.uniform()) * sum;
    int next = logits.cols - 1;
    for (int v = 0; v < logits.cols; ++v) {
      if ((u -= p[std::size_t(v)]) < 0) {
        next = v;
        break;
      }
    }
    ctx.push_back(std::uint8_t(next));
    out.push_back(char(c.vocab[std::size_t(next)]));
  }
  return out;
}

void add_step_seconds(LmLog& log, double seconds) {
  if (log.timed_steps == 0) log.first_step_seconds = seconds;
  log.step_seconds += seconds;
}

LmLog train_one(const Context& ctx, const RunSpec& run, common::DataParallel& dp, const LmState* resume,
                const std::function<void(const LmState&)>& checkpoint) {
  const TrainLmConfig& cfg = ctx.cfg;
  CharLm model(ctx.spec, {run.precision, run.recipe}, cfg.fp8_head, cfg.seed);
  auto named = model.linears();
  std::vector<nn::Linear*> lins;
  for (auto& nl : named) lins.push_back(nl.second);
  const bool fp8 = run.precision == nn::Precision::kFp8;
  if (run.precision == nn::Precision::kBf16)
    for (nn::Linear* l : lins) l->set_bf16_accumulation(common::bf16_accumulation_of(cfg));
  if (run.precision == nn::Precision::kFp32)
    for (nn::Linear* l : lins) l->set_fp32_accumulation(common::fp32_accumulation_of(cfg));
  if (fp8) {
    std::vector<std::string> names;
    for (auto& nl : named) names.push_back(nl.first);
    for (const auto& [i, r] : parse_layer_values("--layer-recipe", cfg.layer_recipe, names))
      if (lins[i]->precision() == nn::Precision::kFp8) lins[i]->set_recipe(ctx.recipes.find(r));
    const std::vector<backend::Kind>& kinds = ctx.backends;
    for (std::size_t i = 0; i < lins.size(); ++i) {
      nn::Linear& l = *lins[i];
      if (l.precision() != nn::Precision::kFp8) continue;  // the FP32 head
      if (scaling::supports_accumulation_models(l.recipe())) common::set_te_accumulation(l, ctx.accumulation);
      if (kinds[i] == backend::Kind::kReference) l.set_precision(nn::Precision::kFp32);
      else l.set_device(backend::device_of(kinds[i]));
    }
    for (const auto& [i, a] : parse_layer_values("--layer-accumulation", cfg.layer_accumulation, names)) {
      const emu::Accumulation la = emu::parse_accumulation(a);
      nn::Linear& l = *lins[i];
      if (l.precision() != nn::Precision::kFp8) continue;
      if (scaling::supports_accumulation_models(l.recipe())) common::set_te_accumulation(l, la);
      else l.set_accumulation({la, 0, 1}, {la, 0, 1}, {la, 0, 1});  // each scale block's partial
    }
  }
  nn::ParamList params = model.params();
  nn::Optimizer opt(nn::Optimizer::Kind::kAdam, cfg.lr);
  nn::Rng sampler(cfg.seed ^ 0x5DEECE66Dull);
  LmLog log;
  log.name = run.name;
  int first = 0;
  double loss_sum = 0.0;
  int loss_count = 0;
  if (resume) {
    const LmState& s = *resume;
    FP8EMU_CHECK(s.stats.size() == 3 * lins.size(), ctx.checkpoint_path,
                 ": the checkpoint's model does not match this configuration");
    common::restore_model(s.model, lins, params, opt, sampler, ctx.checkpoint_path);
    if (dp.root())  // the counts of every shard: rank 0 carries them on
      for (std::size_t i = 0; i < lins.size(); ++i) {
        lins[i]->stats.input = s.stats[3 * i];
        lins[i]->stats.weight = s.stats[3 * i + 1];
        lins[i]->stats.grad_output = s.stats[3 * i + 2];
      }
    log = s.log;
    first = s.step;
    loss_sum = s.loss_sum;
    loss_count = s.loss_count;
  }
  dp.bind(lins, params);
  if (resume) dp.restore_states(resume->model.shard_states, ctx.checkpoint_path);
  auto capture = [&](int step) {  // collective
    LmState s;
    s.log = log;
    s.step = step;
    s.loss_sum = loss_sum;
    s.loss_count = loss_count;
    s.model = common::capture_model(lins, params, opt, sampler, dp);
    s.stats = common::cast_counts(lins, dp);
    return s;
  };

  // --resident: the model and Adam's state live on one device between steps (CharLm::to_device, the same
  // bits); the host copy is brought up to date before each evaluation, checkpoint and the sample.
  const backend::Device* resident = ctx.resident;
  if (resident) {
    const std::string why = model.device_unsupported();
    if (!why.empty()) {
      if (dp.root())
        std::fprintf(stderr, "note: run %s is not device-resident (%s); it runs on the host\n", run.name.c_str(),
                     why.c_str());
      resident = nullptr;
    }
  }
  bool on_device = false;
  std::vector<float> shard0_dy_scale(lins.size(), NAN);  // shard 0's last grad_output casts
  auto to_host = [&] {
    if (!on_device) return;
    model.to_host(opt);
    on_device = false;
    for (std::size_t i = 0; i < lins.size(); ++i) shard0_dy_scale[i] = lins[i]->last_scale_grad_output();
  };
  const auto t0 = std::chrono::steady_clock::now();
  const double seconds_before = log.seconds.empty() ? 0.0 : log.seconds.back();
  common::Progress progress(cfg.progress && dp.root(), run.name, cfg.steps);
  const std::size_t max_start = ctx.corpus.train.size() - std::size_t(cfg.seq_len) - 1;
  const int S = dp.shards(), rows = cfg.batch_size * cfg.seq_len;
  for (int step = first + 1; step <= cfg.steps; ++step) {
    std::vector<std::size_t> starts;
    for (int b = 0; b < cfg.batch_size; ++b) starts.push_back(std::size_t(sampler.below(max_start + 1)));
    double loss;
    // The model goes to the device (again after an evaluation or checkpoint) outside the step's time.
    if (resident && !on_device) {
      model.to_device(*resident, opt);
      on_device = true;
    }
    const auto step_t0 = std::chrono::steady_clock::now();
    if (resident) {  // one shard (checked with the flags): the whole step on the device
      const Batch batch = window_batch(ctx.corpus.train, starts, cfg.seq_len);
      loss = model.train_step(batch.input, batch.target, cfg.seq_len, rows, opt) / double(rows);
      add_step_seconds(log, std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count());
      // The evaluation below runs on the device and then brings the host copy up to date; a
      // checkpoint, the end or a divergence without one needs it here.
      const bool checkpoints = cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && step < cfg.steps;
      const bool evaluates = cfg.evaluate && (step % cfg.eval_every == 0 || step == cfg.steps || !std::isfinite(loss));
      if (!evaluates && (step == cfg.steps || !std::isfinite(loss) || checkpoints)) to_host();
    } else {
      // Each shard: its sequences' forward, the loss over the whole batch's tokens, backward.
      const double total = dp.step(cfg.batch_size, [&](int sh, common::Rows r) {
        const Batch batch = window_batch(
            ctx.corpus.train, std::vector<std::size_t>(starts.begin() + r.begin, starts.begin() + r.end), cfg.seq_len);
        Matrix logits, dlogits;
        model.forward(batch.input, cfg.seq_len, logits, true);
        const double shard_loss = nn::softmax_cross_entropy_sum(logits, batch.target, &dlogits, rows);
        model.backward(dlogits);
        if (sh == 0)
          for (std::size_t i = 0; i < lins.size(); ++i) shard0_dy_scale[i] = lins[i]->last_scale_grad_output();
        return shard_loss;
      });
      loss = total / double(rows);
      opt.step(params);
      add_step_seconds(log, std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count());
    }
    ++log.timed_steps;
    loss_sum += loss;
    ++loss_count;
    double val = NAN;
    if (!cfg.evaluate && !std::isfinite(loss)) {
      log.diverged = true;
      progress.step(step, loss, val);
      break;
    }
    if (cfg.evaluate && (step % cfg.eval_every == 0 || step == cfg.steps || !std::isfinite(loss))) {
      std::vector<nn::TwinError> twins(lins.size());
      std::vector<std::array<float, 2>> shard0_scales(lins.size());  // x and W of shard 0's last casts
      const bool twin = run.precision != nn::Precision::kFp32;  // FP8 and BF16 layers against FP32
      auto keep_scales = [&] {
        for (std::size_t i = 0; i < lins.size(); ++i)
          shard0_scales[i] = {lins[i]->last_scale_input(), lins[i]->last_scale_weight()};
      };
      if (on_device) {  // mean_val_loss with one shard, on the device; then the host copy
        double sum = 0.0;
        for (const Batch& b : ctx.val_batches)
          sum += model.eval_batch(b.input, b.target, cfg.seq_len, twin ? &twins : nullptr);
        val = sum / double(ctx.val_batches.size());
        to_host();
        keep_scales();
      } else {
        val = mean_val_loss(model, ctx, dp, lins, twin ? &twins : nullptr, keep_scales);
      }
      const std::vector<emu::QuantizeStats> stats = common::cast_counts(lins, dp);
      if (fp8 && S > 1) log.shard_scales.push_back(dp.shard_scales());
      common::check_ranks(dp, log, run.name, "at step " + std::to_string(step));
      log.steps.push_back(step);
      log.train_loss.push_back(loss_sum / loss_count);
      log.val_loss.push_back(val);
      log.seconds.push_back(seconds_before +
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::vector<common::LayerCasts> pts;
      for (std::size_t i = 0; i < lins.size(); ++i) {
        common::LayerCasts p;
        p.layer = named[i].first;
        p.rel_error = twins[i].ref > 0 ? std::sqrt(twins[i].err / twins[i].ref) : 0.0;
        p.scale_input = shard0_scales[i][0];
        p.scale_weight = shard0_scales[i][1];
        p.scale_grad_output = shard0_dy_scale[i];
        p.input = stats[3 * i];
        p.weight = stats[3 * i + 1];
        p.grad_output = stats[3 * i + 2];
        lins[i]->stats = nn::LinearFp8Stats{};
        pts.push_back(p);
      }
      log.layers.push_back(std::move(pts));
      loss_sum = 0.0;
      loss_count = 0;
      if (!std::isfinite(loss) || !std::isfinite(val)) {
        log.diverged = true;
        progress.step(step, loss, val);
        break;
      }
    }
    progress.step(step, loss, val);
    if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && step < cfg.steps) checkpoint(capture(step));
  }
  to_host();  // a run that ended early (diverged) may still be on the device
  // The sample: rank 0, with shard 0's quantizer state.
  if (!log.diverged && dp.root() && cfg.evaluate)
    dp.with_shard(0, [&] { log.sample = generate(model, ctx.corpus, cfg.seq_len, cfg.sample_chars, cfg.seed); });
  return log;
}

// ---------------------------------------------------------------- outputs

std::string metrics_csv(const std::vector<LmLog>& logs) {
  std::ostringstream os;
  os << "run,step,train_loss,val_loss,val_perplexity,seconds\n";
  for (const LmLog& l : logs)
    for (std::size_t i = 0; i < l.steps.size(); ++i)
      os << l.name << ',' << l.steps[i] << ',' << fmt_g(l.train_loss[i]) << ',' << fmt_g(l.val_loss[i]) << ','
         << fmt_g(std::exp(l.val_loss[i])) << ',' << std::fixed << std::setprecision(3) << l.seconds[i]
         << std::defaultfloat << '\n';
  return os.str();
}

std::string layers_csv(const std::vector<LmLog>& logs) {
  std::ostringstream os;
  os << "run,step,layer,rel_error_vs_fp32,scale_x,scale_w,scale_dy,x_saturated,x_underflow,w_saturated,"
        "dy_saturated,dy_underflow,casts\n";
  auto sc = [](float s) { return std::isnan(s) ? std::string() : fmt_g(s); };
  for (const LmLog& l : logs)
    for (std::size_t i = 0; i < l.layers.size(); ++i)
      for (const common::LayerCasts& p : l.layers[i])
        os << l.name << ',' << l.steps[i] << ',' << p.layer << ',' << fmt_g(p.rel_error) << ',' << sc(p.scale_input)
           << ',' << sc(p.scale_weight) << ',' << sc(p.scale_grad_output) << ',' << p.input.saturated << ','
           << p.input.underflow << ',' << p.weight.saturated << ',' << p.grad_output.saturated << ','
           << p.grad_output.underflow << ',' << p.input.count + p.weight.count + p.grad_output.count << '\n';
  return os.str();
}

bool write_plot(const common::ResultsFolder& out, const std::vector<LmLog>& logs) {
  const std::string header =
      "set terminal pngcairo size 1100,450\nset output '@OUTPUT@'\nset multiplot layout 1,2\n"
      "set grid\nset xlabel 'step'\n";
  common::ResultsFolder::Panel train{"", "train loss (mean since last evaluation)", {}};
  common::ResultsFolder::Panel val{"", "validation loss", {}};
  for (const LmLog& l : logs) {
    const std::vector<long> steps(l.steps.begin(), l.steps.end());
    train.series.push_back({l.name, steps, l.train_loss});
    val.series.push_back({l.name, steps, l.val_loss});
  }
  return out.write_curves(header, {train, val});
}

std::string shards_csv(const std::vector<LmLog>& logs, const std::vector<std::string>& layers, int shards) {
  std::ostringstream os;
  os << "run,step,layer,shard,scale_input,scale_weight,scale_grad_output\n";
  for (const LmLog& l : logs)
    for (std::size_t e = 0; e < l.shard_scales.size() && e < l.steps.size(); ++e)
      common::append_shard_scales(os, l.name, l.steps[e], layers, shards, l.shard_scales[e]);
  return os.str();
}

// The experiment as a job of the shared skeleton (common/job.hpp), on every rank of the job.
class LmJob : public common::Job<Codec> {
 public:
  explicit LmJob(TrainLmConfig cfg)
      : Job({"train-lm", cfg.out_dir, cfg.resume, "lm-",
             {"metrics.csv", "layers.csv", "shards.csv", "samples.txt", "summary.json", "curves.png"},
             cfg.checkpoint_every, cfg.progress}),
        cfg_(std::move(cfg)),
        rs_(cfg_.recipes) {}

 private:
  // The flags, before touching data or disk.
  void configure() override {
    const TrainLmConfig& cfg = cfg_;
    scaling::RecipeSet& rs = rs_;
    if (!cfg.format.empty()) rs.set_format(scaling::parse_recipe_format(cfg.format));
    runs_ = {{"fp32", nn::Precision::kFp32, rs.get<scaling::DelayedScaling>()}};
    if (cfg.bf16_baseline) runs_.push_back({"bf16", nn::Precision::kBf16, rs.get<scaling::DelayedScaling>()});
    for (const scaling::Recipe& r : rs.select(cfg.recipe))
      runs_.push_back({std::string("fp8_") + scaling::recipe_name(r), nn::Precision::kFp8, r});
    for (const RunSpec& r : runs_) scaling::validate(r.recipe);
    common::check_run_config(cfg);
    FP8EMU_CHECK(cfg.steps >= 1, "--steps must be >= 1, got ", cfg.steps);
    FP8EMU_CHECK(cfg.batch_size >= 1 && cfg.batch_size <= kMaxDim, "--batch-size must be in [1, ", kMaxDim, "], got ",
                 cfg.batch_size);
    check_seq_len(cfg.seq_len);
    FP8EMU_CHECK(cfg.d_model >= 1 && cfg.d_model <= kMaxDim, "--d-model must be in [1, ", kMaxDim, "]");
    FP8EMU_CHECK(cfg.heads >= 1, "--heads must be >= 1, got ", cfg.heads);
    FP8EMU_CHECK(cfg.d_model % cfg.heads == 0, "--d-model ", cfg.d_model, " must be a multiple of --heads ",
                 cfg.heads);
    FP8EMU_CHECK(cfg.layers >= 1 && cfg.layers <= 64, "--layers must be in [1, 64], got ", cfg.layers);
    FP8EMU_CHECK(cfg.ffn >= 1 && cfg.ffn <= 4 * kMaxDim, "--ffn must be in [1, ", 4 * kMaxDim, "], got ", cfg.ffn);
    FP8EMU_CHECK(cfg.eval_every >= 1, "--eval-every must be >= 1, got ", cfg.eval_every);
    FP8EMU_CHECK(cfg.eval_batches >= 1 && cfg.eval_batches <= 1000, "--eval-batches must be in [1, 1000]");
    check_val_fraction(cfg.val_fraction);
    FP8EMU_CHECK(cfg.sample_chars >= 0 && cfg.sample_chars <= 100000, "--sample-chars must be in [0, 100000]");
    FP8EMU_CHECK(cfg.dp_shards <= cfg.batch_size, "--dp-shards ", cfg.dp_shards, " exceeds --batch-size ",
                 cfg.batch_size, ": every shard needs at least one sequence of a batch");
    {
      // A lower bound of the memory a run needs (12 bytes per weight of the layers: the weight, its
      // gradient and Adam's state; 4 bytes per activation kept for the backward pass: QKV, attention
      // output, projection, MLP hidden, attention probabilities), checked before any is allocated.
      const std::uint64_t d = std::uint64_t(cfg.d_model), layers = std::uint64_t(cfg.layers),
                          ffn = std::uint64_t(cfg.ffn), b = std::uint64_t(cfg.batch_size),
                          t = std::uint64_t(cfg.seq_len), h = std::uint64_t(cfg.heads);
      const std::uint64_t params = layers * (4 * d * d + 2 * d * ffn);
      const std::uint64_t activations = layers * (b * t * (5 * d + ffn) + b * h * t * t);
      io::check_memory(12 * params + 4 * activations,
                       "a transformer of " + std::to_string(cfg.layers) + " layers (--layers), --d-model " +
                           std::to_string(cfg.d_model) + ", --heads " + std::to_string(cfg.heads) + " and --ffn " +
                           std::to_string(cfg.ffn) + " on batches of " + std::to_string(cfg.batch_size) +
                           " sequences (--batch-size) of " + std::to_string(cfg.seq_len) + " bytes (--seq-len)");
    }
    common::DataParallel& dp = make_data_parallel(cfg.dp_shards, cfg.amax_reduction);
    spec_ = LmSpec{0,
                   cfg.d_model,
                   cfg.heads,
                   cfg.layers,
                   cfg.ffn,
                   cfg.seq_len,
                   parse_enum(kNormNames, cfg.norm, "--norm"),
                   nn::parse_mlp_activation(cfg.mlp_activation),
                   parse_enum(kActivationDtypeNames, cfg.activation_dtype, "--activation-dtype")};
    accumulation_ = emu::parse_accumulation(cfg.accumulation);
    {
      const std::vector<std::string> names = layer_names_of(cfg.layers);
      for (const auto& lr : parse_layer_values("--layer-recipe", cfg.layer_recipe, names)) rs.find(lr.second);
      for (const auto& la : parse_layer_values("--layer-accumulation", cfg.layer_accumulation, names))
        emu::parse_accumulation(la.second);
      backend::set_cuda_device_slot(group().local_rank());  // each rank of a node its own GPU
      backends_ = backend::resolve(backend::parse_layer_backends(cfg.backend, names, backend::Kind::kEmulated),
                                   cfg.strict, log_stream());
    }
    resident_ = common::resident_device(cfg.resident, backends_, dp.shards());
    common::set_threads(cfg.threads);
    if (resident_ && resident_ != &backend::cpu_device() && backend::library_gemms())
      log_stream() << "note: FP8EMU_DEVICE_GEMM=library: the GPU's fp32 and bf16 GEMMs run on cuBLASLt (a speed "
                      "baseline), so the fp32 and bf16 runs, and the FP8 runs' fp32 head and FP32-twin errors, are "
                      "not bit-identical to --backend emulated\n";
  }

  // The corpus, and the fixed validation windows, evenly spaced over the validation split (the
  // same for every run).
  void load_data() override {
    const TrainLmConfig& cfg = cfg_;
    corpus_ = load_corpus(cfg.text, cfg.seq_len, cfg.val_fraction);
    spec_.vocab = int(corpus_.vocab.size());
    val_batches_.clear();
    const std::size_t span = corpus_.val.size() - std::size_t(cfg.seq_len) - 1;
    for (int b = 0; b < cfg.eval_batches; ++b) {
      std::vector<std::size_t> starts;
      for (int i = 0; i < cfg.batch_size; ++i) {
        const std::size_t k = std::size_t(b) * std::size_t(cfg.batch_size) + std::size_t(i);
        starts.push_back(span * k / std::max<std::size_t>(1, std::size_t(cfg.eval_batches * cfg.batch_size)));
      }
      val_batches_.push_back(window_batch(corpus_.val, starts, cfg.seq_len));
    }
  }

  std::string fingerprint() override {
    const TrainLmConfig& cfg = cfg_;
    std::ostringstream fp;
    fp << "text=" << cfg.text << " bytes=" << corpus_.train.size() + corpus_.val.size() << " vocab=" << spec_.vocab
       << " steps=" << cfg.steps << " batch=" << cfg.batch_size << " seq=" << cfg.seq_len << " d=" << cfg.d_model
       << " heads=" << cfg.heads << " layers=" << cfg.layers << " ffn=" << cfg.ffn << " norm=" << cfg.norm
       << " act=" << cfg.mlp_activation << " dtype=" << cfg.activation_dtype << " recipe=" << cfg.recipe
       << " format=" << cfg.format << " acc=" << cfg.accumulation << " head=" << cfg.fp8_head
       << " lr=" << fmt_g(cfg.lr) << " seed=" << cfg.seed << " eval=" << cfg.eval_every << "x" << cfg.eval_batches
       << " val=" << cfg.val_fraction << " sample=" << cfg.sample_chars << " layer_recipe=" << cfg.layer_recipe
       << " layer_acc=" << cfg.layer_accumulation << " dp_shards=" << dp().shards()
       << " amax_reduction=" << dp().reduction().name() << (cfg.bf16_baseline ? " bf16=1" : "")
       << (cfg.bf16_accumulation != "fp32" ? " bf16_acc=" + cfg.bf16_accumulation : std::string())
       << (cfg.fp32_accumulation != "fp32" ? " fp32_acc=" + cfg.fp32_accumulation : std::string());
    const nlohmann::json changed = common::changed_recipe_parameters(cfg.recipes);
    if (!changed.empty()) fp << " recipes=" << changed.dump();  // only then: earlier fingerprints stay valid
    return fp.str();
  }

  std::size_t run_count() const override { return runs_.size(); }

  std::string mismatch_message(const std::string& path, const std::string& theirs,
                               const std::string& ours) const override {
    return path + " was written with different flags or data; resume with the same flags (checkpoint: " +
           excerpt(theirs, 4000) + "; now: " + excerpt(ours, 4000) + ")";
  }

  std::string header() const override {
    const TrainLmConfig& cfg = cfg_;
    return "fp8emu train-lm: " + std::to_string(corpus_.train.size() + corpus_.val.size()) + " bytes of text from " +
           cfg.text + " (" + std::to_string(corpus_.files) + " files, " + std::to_string(spec_.vocab) +
           " distinct bytes), transformer " + std::to_string(cfg.layers) + " x (d " + std::to_string(cfg.d_model) +
           ", " + std::to_string(cfg.heads) + " heads, ffn " + std::to_string(cfg.ffn) + "), " +
           std::to_string(cfg.steps) + " steps of " + std::to_string(cfg.batch_size) + " x " +
           std::to_string(cfg.seq_len) + " tokens";
  }

  LmLog train_run(std::size_t i, const LmState* state, const CheckpointFn& checkpoint, const ReportFn&) override {
    const Context ctx{cfg_, rs_, spec_, accumulation_, backends_, resident_, corpus_, val_batches_,
                      folder().checkpoint_path()};
    return train_one(ctx, runs_[i], dp(), state, checkpoint);
  }

  std::vector<std::pair<std::string, std::string>> run_files(const std::vector<LmLog>& logs) const override {
    std::vector<std::pair<std::string, std::string>> files{{"metrics.csv", metrics_csv(logs)},
                                                           {"layers.csv", layers_csv(logs)}};
    if (dp().shards() > 1)
      files.emplace_back("shards.csv", shards_csv(logs, layer_names_of(cfg_.layers), dp().shards()));
    return files;
  }

  // Samples, plot, summary.
  void finish(const std::vector<LmLog>& logs) override {
    const TrainLmConfig& cfg = cfg_;
    const common::ResultsFolder& out = folder();
    const common::DataParallel& dp = this->dp();
    std::ostringstream samples;
    for (const LmLog& l : logs) samples << "=== " << l.name << " (temperature 0.8, from a newline)\n" << l.sample << "\n\n";
    out.write("samples.txt", samples.str());
    const bool plot = cfg.evaluate && write_plot(out, logs);  // no curves without evaluations
    const nlohmann::json changed = common::changed_recipe_parameters(cfg.recipes);
    nlohmann::json j;
    j["fp8emu_version"] = FP8EMU_VERSION_STRING;
    j["config"] = {{"text", cfg.text},          {"bytes", corpus_.train.size() + corpus_.val.size()},
                   {"vocab", spec_.vocab},       {"steps", cfg.steps},
                   {"batch_size", cfg.batch_size}, {"seq_len", cfg.seq_len},
                   {"d_model", cfg.d_model},    {"heads", cfg.heads},
                   {"layers", cfg.layers},      {"ffn", cfg.ffn},
                   {"norm", cfg.norm},          {"mlp_activation", cfg.mlp_activation},
                   {"activation_dtype", cfg.activation_dtype}, {"recipe", cfg.recipe},
                   {"format", cfg.format},      {"accumulation", cfg.accumulation},
                   {"backend", cfg.backend},    {"fp8_head", cfg.fp8_head}, {"bf16", cfg.bf16_baseline},
                   {"bf16_accumulation", cfg.bf16_accumulation}, {"fp32_accumulation", cfg.fp32_accumulation},
                   {"layer_recipe", cfg.layer_recipe}, {"layer_accumulation", cfg.layer_accumulation},
                   {"lr", cfg.lr},              {"seed", cfg.seed},
                   {"eval_every", cfg.eval_every}, {"eval_batches", cfg.eval_batches}};
    if (!changed.empty()) j["config"]["recipes"] = changed;
    j["config"]["data_parallel"] = {
        {"dp_shards", dp.shards()}, {"amax_reduction", dp.reduction().name()}, {"ranks", dp.ranks()}};
    nlohmann::json rj = nlohmann::json::object();
    for (const LmLog& l : logs) {
      nlohmann::json x;
      x["val_loss"] = l.val_loss.empty() ? 0.0 : l.val_loss.back();
      x["val_perplexity"] = l.val_loss.empty() ? 0.0 : std::exp(l.val_loss.back());
      x["train_loss"] = l.train_loss.empty() ? 0.0 : l.train_loss.back();
      x["steps"] = l.steps.empty() ? 0 : l.steps.back();
      x["seconds"] = l.seconds.empty() ? 0.0 : l.seconds.back();
      x["step_seconds"] = l.step_seconds;  // the training steps of this process alone (see LmLog)
      x["timed_steps"] = l.timed_steps;
      x["first_step_seconds"] = l.first_step_seconds;
      x["diverged"] = l.diverged;
      x["sample"] = l.sample;
      x["data_parallel"] = common::data_parallel_run_json(l.shard_scales, dp.shards(), l.ranks_identical, l.checksum);
      rj[l.name] = x;
    }
    j["runs"] = rj;
    // What actually ran; the head runs FP32 unless --fp8-head.
    common::record_backends(j["config"], cfg.backend, layer_names_of(cfg.layers), !cfg.fp8_head);
    j["config"]["resident"] = cfg.resident;
    // FP8EMU_DEVICE_GEMM=library (or bench lm --library-gemms): the GPU's fp32/bf16 GEMMs on cuBLASLt.
    j["config"]["library_gemms"] = resident_ != nullptr && resident_ != &backend::cpu_device() && backend::library_gemms();
    // The first FP8 run against FP32 (and against BF16 with --bf16).
    const std::size_t first_fp8 = cfg.bf16_baseline ? 2 : 1;
    if (logs.size() > first_fp8 && !logs[0].val_loss.empty() && !logs[first_fp8].val_loss.empty())
      j["fp8_vs_fp32_val_loss_percent"] = 100.0 * (logs[first_fp8].val_loss.back() / logs[0].val_loss.back() - 1.0);
    if (cfg.bf16_baseline && logs.size() > 2 && !logs[1].val_loss.empty() && !logs[2].val_loss.empty())
      j["fp8_vs_bf16_val_loss_percent"] = 100.0 * (logs[2].val_loss.back() / logs[1].val_loss.back() - 1.0);
    // null when gnuplot is missing, failed or ran out of time (a plot is an extra; the note said why).
    j["plot"] = plot ? nlohmann::json("curves.png") : nlohmann::json(nullptr);
    // Samples are raw bytes of the corpus and need not be valid UTF-8: invalid sequences become U+FFFD
    // in summary.json (samples.txt keeps the bytes).
    out.write("summary.json", common::json_text(j, 1));
    if (cfg.progress) {
      for (const LmLog& l : logs) {
        const double val = l.val_loss.empty() ? 0.0 : l.val_loss.back();
        std::fprintf(stderr, "  %-12s val loss %.4f (perplexity %.3f)\n", l.name.c_str(), val, std::exp(val));
      }
      std::fprintf(stderr, "results: %s\n", out.dir().c_str());
    }
  }

  TrainLmConfig cfg_;
  scaling::RecipeSet rs_;
  std::vector<RunSpec> runs_;
  LmSpec spec_{};
  emu::Accumulation accumulation_{};
  std::vector<backend::Kind> backends_;
  const backend::Device* resident_ = nullptr;
  Corpus corpus_;
  std::vector<Batch> val_batches_;
};

}  // namespace

std::vector<LmRunResult> run_train_lm(TrainLmConfig cfg) {
  std::vector<LmRunResult> results;
  common::dist::run_or_abort("train-lm", [&] {
    LmJob job(std::move(cfg));
    for (const LmLog& l : job.run())
      results.push_back({l.name, l.val_loss.empty() ? 0.0 : l.val_loss.back(),
                         l.train_loss.empty() ? 0.0 : l.train_loss.back(), l.step_seconds, l.timed_steps,
                         l.first_step_seconds});
  });
  return results;
}

LmCorpusInfo inspect_lm_corpus(const std::string& text, int seq_len, double val_fraction) {
  check_seq_len(seq_len);
  check_val_fraction(val_fraction);
  const Corpus c = load_corpus(text, seq_len, val_fraction);
  return {c.files, c.train.size(), c.val.size(), int(c.vocab.size())};
}

std::string inspect_lm_checkpoint(const std::string& path) {
  const common::Checkpoint<Codec> c = common::read_checkpoint<Codec>(path);
  return std::to_string(c.completed.size()) + " run(s) done, next run " + std::to_string(c.current_run) +
         (c.has_state ? ", at step " + std::to_string(c.state.step) : std::string());
}

}  // namespace fp8emu::experiments
