// The main experiment: FP32 vs emulated FP8 on Fashion-MNIST: the data, the MLP, its training
// step and its result files. The job around them (flags agreed by every rank, results folder,
// resume, checkpoints, progress, file rewriting) is the shared skeleton's (common/job.hpp).
#include "train.hpp"
#include "fashion_mnist/dataset.hpp"
#include "fashion_mnist/run_log.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <memory>
#include <sstream>

#include "common/data_parallel.hpp"
#include "common/dist.hpp"
#include "common/job.hpp"
#include "common/progress.hpp"
#include "common/run_record.hpp"
#include "common/runner.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/io/idx.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "fp8emu/util/error.hpp"
#include "fp8emu_internal/resources.hpp"

namespace fp8emu::experiments {
namespace {

using namespace fmnist;

using nn::Matrix;
using common::fmt_g;
using common::fmt_scale;
using common::frac;
constexpr int kEvalBatch = 1000;
constexpr int kMaxWidth = 1 << 16;


// The test set in batches of kEvalBatch; batch k is evaluated by shard k mod S (with that shard's
// quantizer state, as the rank holding it would), each shard summing its batches in order; the
// shards' sums are then added in shard order (one shard: the plain sums in batch order).
void evaluate(nn::Mlp& model, const Split& test, bool twin, common::DataParallel& dp, double& loss, double& acc,
              std::vector<double>* rel_error) {
  const int n = test.x.rows, S = dp.shards();
  const int batches = (n + kEvalBatch - 1) / kEvalBatch;
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) order[std::size_t(i)] = i;
  Matrix x, logits;
  std::vector<std::uint8_t> y;
  const std::size_t L = model.layers.size(), k = 2 + 2 * L;  // loss sum, correct, (err, ref) per layer
  std::vector<double> local(std::size_t(dp.local_shards()) * k, 0.0);
  std::vector<std::pair<double, double>> part;
  dp.for_each_shard([&](int s) {
    double* v = &local[std::size_t(s - dp.first_shard()) * k];
    long correct = 0;
    for (int bi = s; bi < batches; bi += S) {
      const int b = bi * kEvalBatch, cnt = std::min(kEvalBatch, n - b);
      gather(test, order, std::size_t(b), cnt, x, y);
      model.forward(x, logits, false, twin ? &part : nullptr);
      v[0] += nn::softmax_cross_entropy(logits, y, nullptr) * cnt;
      const std::vector<int> pred = nn::argmax_rows(logits);
      for (int i = 0; i < cnt; ++i) correct += pred[std::size_t(i)] == y[std::size_t(i)];
      if (twin)
        for (std::size_t l = 0; l < L; ++l) {
          v[2 + 2 * l] += part[l].first;
          v[3 + 2 * l] += part[l].second;
        }
    }
    v[1] = double(correct);
  });
  const std::vector<double> sum = dp.sum_shards(local);
  const double loss_sum = sum[0];
  const double correct = sum[1];
  std::vector<std::pair<double, double>> sums(L);
  for (std::size_t l = 0; l < L; ++l) sums[l] = {sum[2 + 2 * l], sum[3 + 2 * l]};
  loss = n ? loss_sum / n : 0.0;
  acc = n ? correct / n : 0.0;
  if (rel_error) {
    rel_error->clear();
    for (auto& s : sums)  // NaN (a diverged layer) propagates; 0 only for an all-zero reference and error
      rel_error->push_back(s.second > 0 || std::isnan(s.first) ? std::sqrt(s.first / s.second)
                                                               : (s.first == 0 ? 0.0 : INFINITY));
  }
}

// "fc1".."fcN", the names of the Linear layers in --backend.
std::vector<std::string> layer_names(const std::vector<int>& sizes) {
  std::vector<std::string> names;
  for (std::size_t i = 1; i < sizes.size(); ++i) names.push_back("fc" + std::to_string(i));
  return names;
}

RunLog train_one(const TrainConfig& cfg, const Settings& set, const common::RunSpec& run, const Split& train,
                 const Split& test, common::DataParallel& dp, const std::function<void(const RunLog&)>& on_epoch,
                 const RunState* resume, const std::function<void(const RunState&)>& checkpoint,
                 const std::string& checkpoint_path) {
  const std::string& name = run.name;
  const nn::Precision precision = run.precision;
  const scaling::Recipe& recipe = run.recipe;
  RunLog log;
  log.result.name = name;
  nn::Mlp model(set.sizes, set.activation, precision, recipe, cfg.seed);
  if (precision == nn::Precision::kFp8 && scaling::supports_accumulation_models(recipe)) {
    for (auto& l : model.layers) common::set_te_accumulation(l, set.accumulation);
  }
  if (precision == nn::Precision::kBf16)
    for (auto& l : model.layers) l.set_bf16_accumulation(common::bf16_accumulation_of(cfg));
  if (precision == nn::Precision::kFp32)
    for (auto& l : model.layers) l.set_fp32_accumulation(common::fp32_accumulation_of(cfg));
  if (precision == nn::Precision::kFp8) {
    for (std::size_t i = 0; i < set.backends.size(); ++i) {
      if (set.backends[i] == backend::Kind::kReference) model.layers[i].set_precision(nn::Precision::kFp32);
      else model.layers[i].set_device(backend::device_of(set.backends[i]));
    }
  }
  nn::Optimizer opt(set.optimizer, cfg.lr);
  nn::Rng shuffle_rng(cfg.seed ^ 0x9E3779B97F4A7C15ull);
  std::vector<int> order(std::size_t(train.x.rows));
  for (int i = 0; i < train.x.rows; ++i) order[std::size_t(i)] = i;
  const int batch_size = std::min(cfg.batch_size, train.x.rows);  // a batch never exceeds the data
  const int batches = (train.x.rows + batch_size - 1) / batch_size;
  const bool fp8 = precision == nn::Precision::kFp8;
  int first_epoch = 1;
  double seconds_before = 0.0;  // training time before a resume
  std::vector<nn::Linear*> linears;
  common::Parameters params;  // Optimizer::step(Mlp&)'s order
  for (nn::Linear& l : model.layers) {
    linears.push_back(&l);
    params.emplace_back(&l.weight, &l.grad_weight);
    params.emplace_back(&l.bias, &l.grad_bias);
  }
  if (resume) {
    common::restore_model(resume->model, linears, params, opt, shuffle_rng, checkpoint_path);
    FP8EMU_CHECK(resume->order.size() == order.size(), checkpoint_path,
                 ": the checkpoint's data does not match this configuration");
    order = resume->order;
  }
  dp.bind(linears, params);
  if (resume) {
    dp.restore_states(resume->model.shard_states, checkpoint_path);
    log = resume->log;
    first_epoch = resume->epochs_done + 1;
    seconds_before = log.result.seconds;
  }
  const int S = dp.shards();
  // --resident: the run's model and optimizer live on one device between steps (Mlp::to_device, the
  // same bits); the host copy is brought up to date after each epoch's steps, for the statistics,
  // the evaluation and the checkpoints. Runs it does not take (--unfused-update) stay on the host.
  const backend::Device* resident = set.resident;
  if (resident) {
    const std::string why = model.device_unsupported();
    if (!why.empty()) {
      if (dp.root())
        std::fprintf(stderr, "note: run %s is not device-resident (%s); it runs on the host\n", name.c_str(),
                     why.c_str());
      resident = nullptr;
    }
  }
  bool on_device = false;
  const auto t0 = std::chrono::steady_clock::now();
  Matrix x, logits, dlogits;
  std::vector<std::uint8_t> y;
  for (int epoch = first_epoch; epoch <= cfg.epochs; ++epoch) {
    shuffle_rng.shuffle(order);
    for (auto& l : model.layers) l.stats = {};
    if (resident) {  // counters start at 0
      model.to_device(*resident);
      opt.to_device(*resident, model.params());
      on_device = true;
    }
    common::Progress progress(cfg.progress && dp.root(), name, epoch, cfg.epochs, batches);
    double loss_sum = 0.0;
    std::vector<std::array<float, 3>> shard0_scales(model.layers.size());  // shard 0's last casts
    const auto steps_t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batches; ++b) {
      const std::size_t begin = std::size_t(b) * std::size_t(batch_size);
      const int cnt = int(std::min<std::size_t>(std::size_t(batch_size), order.size() - begin));
      // Each shard: forward, loss over the whole batch's size, backward (TE's casts of one rank).
      if (on_device) {  // one shard (checked with the flags): the whole step on the device
        gather(train, order, begin, cnt, x, y);
        const double loss = model.train_step(x, y, cnt, opt) / double(cnt);
        loss_sum += loss;
        progress.batch(b + 1, loss_sum / (b + 1));
        continue;
      }
      const double total = dp.step(cnt, [&](int sh, common::Rows r) {
        gather(train, order, begin + std::size_t(r.begin), r.count(), x, y);
        model.forward(x, logits, true);
        const double shard_loss = nn::softmax_cross_entropy_sum(logits, y, &dlogits, cnt);
        model.backward(dlogits);
        if (sh == 0)
          for (std::size_t l = 0; l < model.layers.size(); ++l)
            shard0_scales[l] = {model.layers[l].last_scale_input(), model.layers[l].last_scale_weight(),
                                model.layers[l].last_scale_grad_output()};
        return shard_loss;
      });
      const double loss = total / double(cnt);
      opt.step(model);
      loss_sum += loss;
      progress.batch(b + 1, loss_sum / (b + 1));
    }
    if (on_device) {
      model.to_host();  // waits for the device's last step
      opt.to_host();
      on_device = false;
      for (std::size_t l = 0; l < model.layers.size(); ++l)
        shard0_scales[l] = {model.layers[l].last_scale_input(), model.layers[l].last_scale_weight(),
                            model.layers[l].last_scale_grad_output()};
    }
    log.result.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - steps_t0).count();
    log.result.steps += batches;
    // What the training casts did this epoch (every shard's counts; shard 0's last scales), taken
    // before evaluation casts the test set.
    std::vector<common::LayerCasts> le(fp8 ? model.layers.size() : 0);
    const std::vector<emu::QuantizeStats> counts =
        common::cast_counts(std::vector<nn::Linear*>(linears.begin(), linears.begin() + long(le.size())), dp);
    for (std::size_t l = 0; l < le.size(); ++l) {
      le[l].input = counts[3 * l];
      le[l].weight = counts[3 * l + 1];
      le[l].grad_output = counts[3 * l + 2];
      le[l].scale_input = shard0_scales[l][0];
      le[l].scale_weight = shard0_scales[l][1];
      le[l].scale_grad_output = shard0_scales[l][2];
    }
    if (fp8 && S > 1) log.shard_scales.push_back(dp.shard_scales());
    common::check_ranks(dp, log, name, "after epoch " + std::to_string(epoch));
    double test_loss = 0, test_acc = 0;
    std::vector<double> rel;
    evaluate(model, test, fp8, dp, test_loss, test_acc, fp8 ? &rel : nullptr);
    log.result.train_loss.push_back(batches ? loss_sum / batches : 0.0);
    log.result.test_loss.push_back(test_loss);
    log.result.test_accuracy.push_back(test_acc);
    log.result.seconds =
        seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log.seconds.push_back(log.result.seconds);
    if (fp8) {
      for (std::size_t l = 0; l < le.size(); ++l) le[l].rel_error = rel[l];
      log.layers.push_back(std::move(le));
    }
    if (!std::isfinite(log.result.train_loss.back()) && !log.diverged) {
      log.diverged = true;
      if (dp.root()) std::fprintf(stderr, "warning: run %s diverged: non-finite training loss in epoch %d "
                           "(try a smaller --lr)\n", name.c_str(), epoch);
    }
    if (cfg.progress && dp.root())
      std::fprintf(stderr, "[%s] epoch %d/%d  train_loss %.4f  test_loss %.4f  test_accuracy %.4f  (%.1f s)\n",
                   name.c_str(), epoch, cfg.epochs, log.result.train_loss.back(), test_loss, test_acc,
                   log.result.seconds);
    on_epoch(log);
    if (cfg.checkpoint_every > 0 && epoch % cfg.checkpoint_every == 0 && epoch < cfg.epochs)
      checkpoint({log, epoch, common::capture_model(linears, params, opt, shuffle_rng, dp), order});
  }
  return log;
}

std::string metrics_csv(const std::vector<RunLog>& logs) {
  std::ostringstream os;
  os << "run,epoch,train_loss,test_loss,test_accuracy,seconds\n";
  for (const auto& l : logs)
    for (std::size_t e = 0; e < l.result.train_loss.size(); ++e)
      os << l.result.name << ',' << e + 1 << ',' << fmt_g(l.result.train_loss[e]) << ','
         << fmt_g(l.result.test_loss[e]) << ',' << fmt_g(l.result.test_accuracy[e]) << ','
         << std::fixed << std::setprecision(3) << l.seconds[e] << std::defaultfloat << '\n';
  return os.str();
}

std::string layers_csv(const std::vector<RunLog>& logs) {
  std::ostringstream os;
  os << "run,epoch,layer,rel_error,input_saturated,input_underflow,weight_saturated,"
        "weight_underflow,grad_output_saturated,grad_output_underflow,scale_input,scale_weight,"
        "scale_grad_output\n";
  for (const auto& l : logs)
    for (std::size_t e = 0; e < l.layers.size(); ++e)
      for (std::size_t k = 0; k < l.layers[e].size(); ++k) {
        const common::LayerCasts& x = l.layers[e][k];
        os << l.result.name << ',' << e + 1 << ',' << k << ',' << fmt_g(x.rel_error) << ','
           << fmt_g(frac(x.input.saturated, x.input.count)) << ','
           << fmt_g(frac(x.input.underflow, x.input.count)) << ','
           << fmt_g(frac(x.weight.saturated, x.weight.count)) << ','
           << fmt_g(frac(x.weight.underflow, x.weight.count)) << ','
           << fmt_g(frac(x.grad_output.saturated, x.grad_output.count)) << ','
           << fmt_g(frac(x.grad_output.underflow, x.grad_output.count)) << ','
           << fmt_scale(x.scale_input) << ',' << fmt_scale(x.scale_weight) << ','
           << fmt_scale(x.scale_grad_output) << '\n';
      }
  return os.str();
}

nlohmann::json json_scale(float s) { return std::isnan(s) ? nlohmann::json(nullptr) : nlohmann::json(s); }

nlohmann::json config_json(const TrainConfig& cfg, const std::vector<int>& sizes, int threads,
                           const common::DataParallel& dp) {
  nlohmann::json c;
  c["data_dir"] = cfg.data_dir;
  c["epochs"] = cfg.epochs;
  c["batch_size"] = cfg.batch_size;
  c["train_samples"] = cfg.train_samples;
  c["test_samples"] = cfg.test_samples;
  c["seed"] = cfg.seed;
  c["threads"] = threads;
  c["recipe"] = cfg.recipe;
  c["layer_sizes"] = sizes;
  c["activation"] = cfg.activation;
  c["optimizer"] = cfg.optimizer;
  c["lr"] = shortest(cfg.lr);
  for (const scaling::Recipe& r : cfg.recipes.all()) c[scaling::recipe_name(r)] = common::recipe_parameters_json(r);
  c["backend"] = cfg.backend;
  common::record_backends(c, cfg.backend, layer_names(sizes), false);
  c["resident"] = cfg.resident;
  if (cfg.bf16_baseline) c["bf16"] = true;  // only when set: earlier runs' fingerprints stay valid
  if (cfg.bf16_accumulation != "fp32") c["bf16_accumulation"] = cfg.bf16_accumulation;  // likewise
  if (cfg.fp32_accumulation != "fp32") c["fp32_accumulation"] = cfg.fp32_accumulation;
  c["gemm_accumulation"] =
      model_of(emu::parse_accumulation(cfg.accumulation)).datapath == Datapath::kTensorCore
          ? cfg.accumulation + " (fprop fast accumulation, dgrad/wgrad promoted every 128; block recipes: fp32)"
          : cfg.accumulation + " (every GEMM; block recipes: fp32)";
  c["data_parallel"] = {{"dp_shards", dp.shards()}, {"amax_reduction", dp.reduction().name()}, {"ranks", dp.ranks()}};
  return c;
}

nlohmann::json summary_json(const std::vector<RunLog>& logs, const nlohmann::json& config,
                            bool plot, int shards) {
  nlohmann::json j;
  j["fp8emu_version"] = FP8EMU_VERSION_STRING;
  j["config"] = config;
  nlohmann::json runs = nlohmann::json::object();
  for (const auto& l : logs) {
    nlohmann::json r;
    r["test_accuracy"] = l.result.test_accuracy.empty() ? 0.0 : l.result.test_accuracy.back();
    r["train_loss"] = l.result.train_loss.empty() ? 0.0 : l.result.train_loss.back();
    r["test_loss"] = l.result.test_loss.empty() ? 0.0 : l.result.test_loss.back();
    r["seconds"] = l.result.seconds;
    r["epochs"] = l.result.train_loss.size();
    r["diverged"] = l.diverged;
    r["data_parallel"] = common::data_parallel_run_json(l.shard_scales, shards, l.ranks_identical, l.checksum);
    if (!l.layers.empty()) {
      nlohmann::json layers = nlohmann::json::array();
      for (std::size_t k = 0; k < l.layers.back().size(); ++k) {
        const common::LayerCasts& x = l.layers.back()[k];
        layers.push_back({{"layer", k},
                          {"rel_error", x.rel_error},
                          {"input_saturated", frac(x.input.saturated, x.input.count)},
                          {"input_underflow", frac(x.input.underflow, x.input.count)},
                          {"weight_saturated", frac(x.weight.saturated, x.weight.count)},
                          {"weight_underflow", frac(x.weight.underflow, x.weight.count)},
                          {"grad_output_saturated", frac(x.grad_output.saturated, x.grad_output.count)},
                          {"grad_output_underflow", frac(x.grad_output.underflow, x.grad_output.count)},
                          {"scale_input", json_scale(x.scale_input)},
                          {"scale_weight", json_scale(x.scale_weight)},
                          {"scale_grad_output", json_scale(x.scale_grad_output)}});
      }
      r["layers"] = layers;
    }
    runs[l.result.name] = r;
  }
  j["runs"] = runs;
  // Per FP8 (and BF16) run: test accuracy minus FP32's, in percentage points.
  nlohmann::json gap = nlohmann::json::object();
  for (std::size_t i = 1; i < logs.size(); ++i)
    gap[logs[i].result.name] = 100.0 * (logs[i].result.test_accuracy.back() - logs[0].result.test_accuracy.back());
  j["fp8_minus_fp32_accuracy_pp"] = gap;
  j["files"] = {{"metrics", "metrics.csv"}, {"layers", "layers.csv"}, {"plot", plot ? "curves.png" : ""}};
  if (shards > 1) j["files"]["shards"] = "shards.csv";
  return j;
}

// curves.png: train loss and test accuracy per epoch for every run.
bool write_plot(const common::ResultsFolder& out, const std::vector<RunLog>& logs) {
  std::ostringstream header;
  header << "set terminal pngcairo noenhanced size 1200,480 font ',10'\n"
         << "set output '@OUTPUT@'\n"
         << "set multiplot layout 1,2 title 'fp8emu train: Fashion-MNIST MLP, FP32 vs FP8'\n"
         << "set key top right\nset grid\nset xlabel 'epoch'\n"
         << "set xrange [0.5:" << logs.front().result.train_loss.size() << ".5]\n";
  common::ResultsFolder::Panel loss{"", "train loss (mean per epoch)", {}};
  common::ResultsFolder::Panel accuracy{"set key bottom right\n", "test accuracy", {}};
  for (const auto& l : logs) {
    std::vector<long> epochs;
    for (std::size_t e = 0; e < l.result.train_loss.size(); ++e) epochs.push_back(long(e + 1));
    loss.series.push_back({l.result.name, epochs, l.result.train_loss});
    accuracy.series.push_back({l.result.name, epochs, l.result.test_accuracy});
  }
  return out.write_curves(header.str(), {loss, accuracy});
}

std::string shards_csv(const std::vector<RunLog>& logs, const std::vector<std::string>& layers, int shards) {
  std::ostringstream os;
  os << "run,epoch,layer,shard,scale_input,scale_weight,scale_grad_output\n";
  for (const auto& l : logs)
    for (std::size_t e = 0; e < l.shard_scales.size(); ++e)
      common::append_shard_scales(os, l.result.name, long(e + 1), layers, shards, l.shard_scales[e]);
  return os.str();
}

// The experiment as a job of the shared skeleton (common/job.hpp), on every rank of the job.
class TrainJob : public common::Job<Codec> {
 public:
  explicit TrainJob(TrainConfig cfg)
      : Job({"train", cfg.out_dir, cfg.resume, "",
             {"metrics.csv", "layers.csv", "shards.csv", "summary.json", "curves.png"}, cfg.checkpoint_every,
             cfg.progress}),
        cfg_(std::move(cfg)) {}

 private:
  // Check the whole configuration before touching data or disk.
  void configure() override {
    TrainConfig& cfg = cfg_;
    if (!cfg.format.empty()) {
      cfg.recipes.set_format(scaling::parse_recipe_format(cfg.format));
    }
    recipes_ = cfg.recipes.select(cfg.recipe);
    cfg.recipes.validate();  // every recipe's parameters, whichever recipes run
    common::check_run_config(cfg);
    FP8EMU_CHECK(cfg.epochs >= 1, "--epochs must be >= 1, got ", cfg.epochs);
    FP8EMU_CHECK(cfg.batch_size >= 1, "--batch-size must be >= 1, got ", cfg.batch_size);
    FP8EMU_CHECK(cfg.train_samples >= 1, "--train-samples must be >= 1, got ", cfg.train_samples);
    FP8EMU_CHECK(cfg.test_samples >= 1, "--test-samples must be >= 1, got ", cfg.test_samples);
    for (int h : cfg.hidden) FP8EMU_CHECK(h >= 1 && h <= kMaxWidth, "--hidden sizes must be in [1, ", kMaxWidth, "], got ", h);
    common::DataParallel& dp = make_data_parallel(cfg.dp_shards, cfg.amax_reduction);
    set_.activation = nn::parse_activation(cfg.activation);
    set_.accumulation = emu::parse_accumulation(cfg.accumulation);
    set_.optimizer = nn::Optimizer::parse(cfg.optimizer);
    {
      std::vector<int> sizes{1};  // only the layer count matters for the names
      sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
      sizes.push_back(1);
      backend::set_cuda_device_slot(group().local_rank());  // each rank of a node its own GPU
      set_.backends = backend::resolve(
          backend::parse_layer_backends(cfg.backend, layer_names(sizes), backend::Kind::kEmulated), cfg.strict,
          log_stream());
    }
    set_.resident = common::resident_device(cfg.resident, set_.backends, dp.shards());
    threads_ = common::set_threads(cfg.threads);
  }

  void load_data() override {
    TrainConfig& cfg = cfg_;
    train_ = load_split(cfg.data_dir, "train", cfg.train_samples);
    test_ = load_split(cfg.data_dir, "t10k", cfg.test_samples);
    const Split& train = train_;
    const Split& test = test_;
    FP8EMU_CHECK(test.x.cols == train.x.cols, cfg.data_dir, ": test images have ", test.x.cols,
                 " pixels, training images ", train.x.cols);
    const int batch = std::min(cfg.batch_size, train.x.rows);
    FP8EMU_CHECK(batch >= cfg.dp_shards, "--dp-shards ", cfg.dp_shards, " exceeds the batch of ", batch,
                 " images: every shard needs at least one image of a batch (use a larger --batch-size or fewer "
                 "shards)");
    // A lower bound of the memory the runs need (the data, 12 bytes per parameter for the weight,
    // its gradient and the optimizer's state, 8 bytes per activation for the values and their
    // gradients), checked before any of it is allocated.
    std::uint64_t params = 0, widths = std::uint64_t(train.x.cols) + kClasses, prev = std::uint64_t(train.x.cols);
    std::string mlp = std::to_string(train.x.cols);
    for (const std::uint64_t w : std::vector<std::uint64_t>(cfg.hidden.begin(), cfg.hidden.end())) {
      params += prev * w + w;
      widths += w;
      prev = w;
      mlp += "-" + std::to_string(w);
    }
    params += prev * kClasses + kClasses;
    const std::uint64_t rows = std::uint64_t(std::max(batch, std::min(kEvalBatch, test.x.rows)));
    const std::uint64_t data = (std::uint64_t(train.x.rows) + std::uint64_t(test.x.rows)) * std::uint64_t(train.x.cols) * 4;
    io::check_memory(data + 12 * params + 8 * rows * widths,
                     "the MLP " + mlp + "-" + std::to_string(kClasses) + " (--hidden) with batches of " +
                         std::to_string(rows) + " images (--batch-size)");
  }

  std::string fingerprint() override {
    TrainConfig& cfg = cfg_;
    set_.sizes = {train_.x.cols};
    set_.sizes.insert(set_.sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
    set_.sizes.push_back(kClasses);
    cfg.train_samples = train_.x.rows;  // what was used (the request may exceed the file)
    cfg.test_samples = test_.x.rows;
    config_ = config_json(cfg, set_.sizes, threads_, dp());
    // FP8EMU_DEVICE_GEMM=library on a GPU-resident run: its fp32 GEMMs on cuBLASLt (not bit-identical);
    // recorded (and part of the fingerprint) only then.
    if (set_.resident && set_.resident != &backend::cpu_device() && backend::library_gemms()) {
      config_["library_gemms"] = true;
      log_stream() << "note: FP8EMU_DEVICE_GEMM=library: the GPU's fp32 GEMMs run on cuBLASLt (a speed baseline), "
                      "so the fp32 run and the FP8 runs' FP32-twin errors are not bit-identical to --backend "
                      "emulated\n";
    }
    runs_ = {{"fp32", nn::Precision::kFp32, scaling::DelayedScaling{}}};
    if (cfg.bf16_baseline) runs_.push_back({"bf16", nn::Precision::kBf16, scaling::DelayedScaling{}});
    for (const auto& r : recipes_)
      runs_.push_back({std::string("fp8_") + scaling::recipe_name(r), nn::Precision::kFp8, r});
    nlohmann::json fingerprint_json = config_;
    fingerprint_json.erase("threads");  // results do not depend on it
    fingerprint_json.erase("resident");  // nor on where the model lives
    fingerprint_json["data_parallel"].erase("ranks");  // nor on the rank count
    return fingerprint_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  std::size_t run_count() const override { return runs_.size(); }

  std::string mismatch_message(const std::string& path, const std::string& theirs, const std::string&) const override {
    return path + " was written by a run with other settings; resume with the same flags as that run (its "
                  "configuration: " + excerpt(theirs, 4000) + ")";
  }

  std::string header() const override {
    std::string h = "fp8emu train: " + std::to_string(train_.x.rows) + " train / " + std::to_string(test_.x.rows) +
                    " test images from " + cfg_.data_dir + ", MLP";
    for (std::size_t i = 0; i < set_.sizes.size(); ++i) h += (i ? "-" : " ") + std::to_string(set_.sizes[i]);
    return h + ", " + std::to_string(cfg_.epochs) + " epochs, " + std::to_string(threads_) + " threads";
  }

  std::string resume_line(const common::Checkpoint<Codec>& resumed) const override {
    return "resuming from " + folder().checkpoint_path() + ": " + std::to_string(resumed.completed.size()) +
           " run(s) done, run " + std::to_string(resumed.current_run + 1) + " at epoch " +
           std::to_string(resumed.has_state ? resumed.state.epochs_done + 1 : 1) + "\n";
  }

  RunLog train_run(std::size_t i, const RunState* state, const CheckpointFn& checkpoint,
                   const ReportFn& report) override {
    return train_one(cfg_, set_, runs_[i], train_, test_, dp(), report, state, checkpoint,
                     folder().checkpoint_path());
  }

  std::vector<std::pair<std::string, std::string>> run_files(const std::vector<RunLog>& logs) const override {
    std::vector<std::pair<std::string, std::string>> files{{"metrics.csv", metrics_csv(logs)},
                                                           {"layers.csv", layers_csv(logs)}};
    if (dp().shards() > 1) files.emplace_back("shards.csv", shards_csv(logs, layer_names(set_.sizes), dp().shards()));
    return files;
  }

  // Plot and summary (the summary last: its presence marks a finished run), and the table on stdout.
  void finish(const std::vector<RunLog>& logs) override {
    const TrainConfig& cfg = cfg_;
    const common::ResultsFolder& out = folder();
    const bool plot = cfg.report && write_plot(out, logs);
    out.write("summary.json", common::json_text(summary_json(logs, config_, plot, dp().shards()), 2));
    if (!cfg.report) return;
    std::printf("%-12s %14s %10s %10s %9s\n", "run", "test_accuracy", "train_loss", "test_loss", "seconds");
    for (const auto& l : logs)
      std::printf("%-12s %14.4f %10.4f %10.4f %9.1f\n", l.result.name.c_str(), l.result.test_accuracy.back(),
                  l.result.train_loss.back(), l.result.test_loss.back(), l.result.seconds);
    for (std::size_t i = 1; i < logs.size(); ++i)
      std::printf("%s - fp32 test accuracy: %+.2f percentage points\n", logs[i].result.name.c_str(),
                  100.0 * (logs[i].result.test_accuracy.back() - logs[0].result.test_accuracy.back()));
    std::printf("results: %s (summary.json, metrics.csv, layers.csv%s%s)\n", out.dir().c_str(),
                dp().shards() > 1 ? ", shards.csv" : "", plot ? ", curves.png" : "");
  }

  TrainConfig cfg_;
  std::vector<scaling::Recipe> recipes_;
  Settings set_;
  int threads_ = 0;
  Split train_, test_;
  nlohmann::json config_;
  std::vector<common::RunSpec> runs_;
};

}  // namespace

std::vector<RunResult> run_train(TrainConfig cfg) {
  std::vector<RunResult> results;
  common::dist::run_or_abort("train", [&] {
    TrainJob job(std::move(cfg));
    for (const RunLog& l : job.run()) results.push_back(l.result);
  });
  return results;
}

std::string inspect_checkpoint(const std::string& path) {
  const common::Checkpoint<Codec> c = common::read_checkpoint<Codec>(path);
  return std::to_string(c.completed.size()) + " run(s) done, next run " + std::to_string(c.current_run) +
         (c.has_state ? ", after epoch " + std::to_string(c.state.epochs_done) : std::string());
}

}  // namespace fp8emu::experiments
