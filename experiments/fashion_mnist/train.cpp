// The main experiment: FP32 vs emulated FP8 on Fashion-MNIST: the data, the MLP, its training
// step and its result files. The run list, results folder, checkpoints and plot are the shared
// runner's (common/runner.hpp).
#include "train.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/runner.hpp"
#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/io/idx.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments {
namespace {

using nn::Matrix;
using common::fmt_g;
using common::fmt_scale;
using common::frac;
constexpr int kClasses = 10;
constexpr int kEvalBatch = 1000;
constexpr int kMaxWidth = 1 << 16;
constexpr int kMaxThreads = 1024;

struct Split {
  Matrix x;                          // Shape [n, 784], pixel / 255
  std::vector<std::uint8_t> labels;  // Shape [n]
};

std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    const std::string p = dir + "/" + stem + ext;
    if (std::filesystem::exists(p)) return p;
  }
  FP8EMU_FAIL("Fashion-MNIST not found: ", dir, " has no ", stem, ".gz. Install the data with "
              "`apt-get install dataset-fashion-mnist` (as root, or run scripts/setup), or point "
              "--data-dir at a folder holding the four IDX files.");
}

Split load_split(const std::string& dir, const std::string& prefix, int limit) {
  const std::string images = find_idx(dir, prefix + "-images-idx3-ubyte");  // images first: named first
  const std::string labels = find_idx(dir, prefix + "-labels-idx1-ubyte");
  const io::ImageDataset ds = io::read_idx_dataset(images, labels, kClasses);
  FP8EMU_CHECK(ds.count >= 1, images, ": holds no images");
  FP8EMU_CHECK(ds.rows >= 1 && ds.cols >= 1, images, ": images of size ", ds.rows, "x", ds.cols);
  const int n = std::min(limit, ds.count);
  const int d = ds.rows * ds.cols;
  Split s;
  s.x = Matrix(n, d);
  for (std::size_t i = 0; i < s.x.size(); ++i) s.x.data[i] = float(ds.images[i]) / 255.0f;
  s.labels.assign(ds.labels.begin(), ds.labels.begin() + n);
  return s;
}

void gather(const Split& s, const std::vector<int>& idx, std::size_t begin, int count, Matrix& x,
            std::vector<std::uint8_t>& y) {
  x.resize(count, s.x.cols);
  y.resize(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    const int src = idx[begin + std::size_t(i)];
    std::copy(s.x.row(src), s.x.row(src) + s.x.cols, x.row(i));
    y[std::size_t(i)] = s.labels[std::size_t(src)];
  }
}

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
};

// The shortest decimal that reads back as the same fp32 (so 1e-3f prints as 0.001).
double shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

// The flags, parsed once.
struct Settings {
  std::vector<int> sizes;                // layer widths, input to classes
  nn::Activation activation;
  emu::Accumulation accumulation;
  nn::Optimizer::Kind optimizer;
  std::vector<backend::Kind> backends;   // per Linear, resolved (after any cuda fallback)
};

// The state of the run in progress at an epoch boundary.
struct RunState {
  RunLog log;
  int epochs_done = 0;
  std::vector<std::vector<float>> weights, biases, fwd_scales, fwd_hist, bwd_scales, bwd_hist;
  long opt_steps = 0;
  std::vector<std::vector<float>> opt_m, opt_v;
  std::string rng;
  std::vector<int> order;
};

// ---- Checkpoints: the runner's envelope (common/runner.hpp) around these logs and states.
struct Codec : common::CodecTypes<RunLog, RunState> {
  static constexpr common::CheckpointId id{"FP8EMU-CHECKPOINT-1", "fp8emu checkpoint"};

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
    return l;
  }

  static void put_state(common::Writer& w, const RunState& s) {
    put_log(w, s.log);
    w.pod(std::int32_t(s.epochs_done));
    common::put_tensors(w, {&s.weights, &s.biases, &s.fwd_scales, &s.fwd_hist, &s.bwd_scales, &s.bwd_hist, &s.opt_m,
                            &s.opt_v});
    w.pod(std::int64_t(s.opt_steps));
    w.str(s.rng);
    w.vec(s.order);
  }

  static RunState get_state(common::Reader& r, const std::string& path) {
    RunState s;
    s.log = get_log(r, path);
    s.epochs_done = r.pod<std::int32_t>();
    common::get_tensors(r, path, {&s.weights, &s.biases, &s.fwd_scales, &s.fwd_hist, &s.bwd_scales, &s.bwd_hist,
                                  &s.opt_m, &s.opt_v});
    s.opt_steps = long(r.pod<std::int64_t>());
    s.rng = r.str();
    s.order = r.vec<int>();
    return s;
  }
};

RunState capture(const RunLog& log, int epochs_done, const nn::Mlp& model, const nn::Optimizer& opt,
                 const nn::Rng& rng, const std::vector<int>& order) {
  RunState s;
  s.log = log;
  s.epochs_done = epochs_done;
  for (const nn::Linear& l : model.layers) {
    s.weights.push_back(l.weight.data);
    s.biases.push_back(l.bias.data);
    s.fwd_scales.push_back(l.forward_state().scales());
    s.fwd_hist.push_back(l.forward_state().history_values());
    s.bwd_scales.push_back(l.backward_state().scales());
    s.bwd_hist.push_back(l.backward_state().history_values());
  }
  s.opt_steps = opt.steps();
  s.opt_m = opt.first_moments();
  s.opt_v = opt.second_moments();
  s.rng = rng.state();
  s.order = order;
  return s;
}

void restore(const RunState& s, nn::Mlp& model, nn::Optimizer& opt, nn::Rng& rng, std::vector<int>& order,
             const std::string& path) {
  FP8EMU_CHECK(s.weights.size() == model.layers.size() && s.order.size() == order.size(), path,
               ": the checkpoint's model or data does not match this configuration");
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    nn::Linear& l = model.layers[i];
    FP8EMU_CHECK(s.weights[i].size() == l.weight.size() && s.biases[i].size() == l.bias.size(), path,
                 ": checkpointed layer ", i, " has a different shape");
    l.weight.data = s.weights[i];
    l.bias.data = s.biases[i];
    l.forward_state().restore(s.fwd_scales[i], s.fwd_hist[i]);
    l.backward_state().restore(s.bwd_scales[i], s.bwd_hist[i]);
  }
  opt.restore(s.opt_steps, s.opt_m, s.opt_v);
  try {
    rng.set_state(s.rng);
  } catch (const std::exception&) {
    FP8EMU_FAIL(path, ": corrupt checkpoint (generator state)");
  }
  order = s.order;
}

class Progress {
 public:
  Progress(bool on, std::string run, int epoch, int epochs, int batches)
      : on_(on), tty_(::isatty(2) != 0), run_(std::move(run)), epoch_(epoch), epochs_(epochs),
        batches_(batches) {}
  void update(int done, double loss) {
    if (!on_) return;
    const int pct = batches_ ? int(100.0 * done / batches_) : 100;
    if (tty_) {
      if (done % 20 != 0 && done != batches_) return;
      std::fprintf(stderr, "\r[%s] epoch %d/%d  %3d%%  batch %d/%d  loss %.4f", run_.c_str(), epoch_,
                   epochs_, pct, done, batches_, loss);
      if (done == batches_) std::fprintf(stderr, "\n");
    } else if (pct / 25 > last_quarter_ || done == batches_) {
      last_quarter_ = pct / 25;
      std::fprintf(stderr, "[%s] epoch %d/%d  %3d%%  batch %d/%d  loss %.4f\n", run_.c_str(), epoch_,
                   epochs_, pct, done, batches_, loss);
    }
    std::fflush(stderr);
  }

 private:
  bool on_, tty_;
  std::string run_;
  int epoch_, epochs_, batches_, last_quarter_ = 0;
};

void evaluate(nn::Mlp& model, const Split& test, bool twin, double& loss, double& acc,
              std::vector<double>* rel_error) {
  const int n = test.x.rows;
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) order[std::size_t(i)] = i;
  Matrix x, logits;
  std::vector<std::uint8_t> y;
  double loss_sum = 0.0;
  long correct = 0;
  std::vector<std::pair<double, double>> sums(model.layers.size(), {0.0, 0.0}), part;
  for (int b = 0; b < n; b += kEvalBatch) {
    const int cnt = std::min(kEvalBatch, n - b);
    gather(test, order, std::size_t(b), cnt, x, y);
    model.forward(x, logits, false, twin ? &part : nullptr);
    loss_sum += nn::softmax_cross_entropy(logits, y, nullptr) * cnt;
    const std::vector<int> pred = nn::argmax_rows(logits);
    for (int i = 0; i < cnt; ++i) correct += pred[std::size_t(i)] == y[std::size_t(i)];
    if (twin)
      for (std::size_t l = 0; l < sums.size(); ++l) {
        sums[l].first += part[l].first;
        sums[l].second += part[l].second;
      }
  }
  loss = n ? loss_sum / n : 0.0;
  acc = n ? double(correct) / n : 0.0;
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
                 const Split& test, const std::function<void(const RunLog&)>& on_epoch, const RunState* resume,
                 const std::function<void(const RunState&)>& checkpoint, const std::string& checkpoint_path) {
  const std::string& name = run.name;
  const nn::Precision precision = run.precision;
  const scaling::Recipe& recipe = run.recipe;
  RunLog log;
  log.result.name = name;
  nn::Mlp model(set.sizes, set.activation, precision, recipe, cfg.seed);
  if (precision == nn::Precision::kFp8 && scaling::supports_accumulation_models(recipe)) {
    for (auto& l : model.layers) common::set_te_accumulation(l, set.accumulation);
  }
  if (precision == nn::Precision::kFp8) {
    for (std::size_t i = 0; i < set.backends.size(); ++i) {
      if (set.backends[i] == backend::Kind::kReference) model.layers[i].set_precision(nn::Precision::kFp32);
      else model.layers[i].set_kernels(backend::kernels_of(set.backends[i]));
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
  if (resume) {
    restore(*resume, model, opt, shuffle_rng, order, checkpoint_path);
    log = resume->log;
    first_epoch = resume->epochs_done + 1;
    seconds_before = log.result.seconds;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Matrix x, logits, dlogits;
  std::vector<std::uint8_t> y;
  for (int epoch = first_epoch; epoch <= cfg.epochs; ++epoch) {
    shuffle_rng.shuffle(order);
    for (auto& l : model.layers) l.stats = {};
    Progress progress(cfg.progress, name, epoch, cfg.epochs, batches);
    double loss_sum = 0.0;
    for (int b = 0; b < batches; ++b) {
      const std::size_t begin = std::size_t(b) * std::size_t(batch_size);
      const int cnt = int(std::min<std::size_t>(std::size_t(batch_size), order.size() - begin));
      gather(train, order, begin, cnt, x, y);
      model.forward(x, logits, true);
      model.update_forward_scales();  // TE: autocast exit, after the forward
      const double loss = nn::softmax_cross_entropy(logits, y, &dlogits);
      model.backward(dlogits);
      model.update_backward_scales();  // TE: end of the first module's backward
      opt.step(model);
      loss_sum += loss;
      progress.update(b + 1, loss_sum / (b + 1));
    }
    // What the training casts did this epoch, taken before evaluation casts the test set.
    std::vector<LayerEpoch> le(fp8 ? model.layers.size() : 0);
    for (std::size_t l = 0; l < le.size(); ++l) {
      const nn::Linear& L = model.layers[l];
      le[l].input = L.stats.input;
      le[l].weight = L.stats.weight;
      le[l].grad_output = L.stats.grad_output;
      le[l].scale_input = L.last_scale_input();
      le[l].scale_weight = L.last_scale_weight();
      le[l].scale_grad_output = L.last_scale_grad_output();
    }
    double test_loss = 0, test_acc = 0;
    std::vector<double> rel;
    evaluate(model, test, fp8, test_loss, test_acc, fp8 ? &rel : nullptr);
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
      std::fprintf(stderr, "warning: run %s diverged: non-finite training loss in epoch %d "
                           "(try a smaller --lr)\n", name.c_str(), epoch);
    }
    if (cfg.progress)
      std::fprintf(stderr, "[%s] epoch %d/%d  train_loss %.4f  test_loss %.4f  test_accuracy %.4f  (%.1f s)\n",
                   name.c_str(), epoch, cfg.epochs, log.result.train_loss.back(), test_loss, test_acc,
                   log.result.seconds);
    on_epoch(log);
    if (cfg.checkpoint_every > 0 && epoch % cfg.checkpoint_every == 0 && epoch < cfg.epochs)
      checkpoint(capture(log, epoch, model, opt, shuffle_rng, order));
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
        const LayerEpoch& x = l.layers[e][k];
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

nlohmann::json config_json(const TrainConfig& cfg, const std::vector<int>& sizes, int threads) {
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
  c["delayed"] = {{"fp8_format", scaling::to_string(cfg.delayed.fp8_format)},
                  {"amax_history_len", cfg.delayed.amax_history_len},
                  {"amax_compute_algo",
                   cfg.delayed.amax_compute_algo == scaling::AmaxComputeAlgo::kMax ? "max" : "most_recent"},
                  {"margin", shortest(cfg.delayed.margin)},
                  {"fused_update", cfg.delayed.fused_update}};
  c["current"] = {{"fp8_format", scaling::to_string(cfg.current.fp8_format)},
                  {"use_power_2_scales", cfg.current.use_power_2_scales},
                  {"amax_epsilon", shortest(cfg.current.amax_epsilon)}};
  c["mxfp8"] = {{"fp8_format", scaling::to_string(cfg.mxfp8.fp8_format)},
                {"e8m0_rule", cfg.mxfp8.rule == E8M0Rule::kOcp ? "ocp" : "te"}};
  c["block"] = {{"fp8_format", scaling::to_string(cfg.block.fp8_format)},
                {"use_f32_scales", cfg.block.use_f32_scales},
                {"amax_epsilon", shortest(cfg.block.amax_epsilon)}};
  c["backend"] = cfg.backend;
  common::record_backends(c, cfg.backend, layer_names(sizes), false);
  c["gemm_accumulation"] =
      model_of(emu::parse_accumulation(cfg.accumulation)).datapath == Datapath::kTensorCore
          ? cfg.accumulation + " (fprop fast accumulation, dgrad/wgrad promoted every 128; block recipes: fp32)"
          : cfg.accumulation + " (every GEMM; block recipes: fp32)";
  return c;
}

nlohmann::json summary_json(const std::vector<RunLog>& logs, const nlohmann::json& config,
                            bool plot) {
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
    if (!l.layers.empty()) {
      nlohmann::json layers = nlohmann::json::array();
      for (std::size_t k = 0; k < l.layers.back().size(); ++k) {
        const LayerEpoch& x = l.layers.back()[k];
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
  // Per FP8 run: test accuracy minus FP32's, in percentage points.
  nlohmann::json gap = nlohmann::json::object();
  for (std::size_t i = 1; i < logs.size(); ++i)
    gap[logs[i].result.name] = 100.0 * (logs[i].result.test_accuracy.back() - logs[0].result.test_accuracy.back());
  j["fp8_minus_fp32_accuracy_pp"] = gap;
  j["files"] = {{"metrics", "metrics.csv"}, {"layers", "layers.csv"}, {"plot", plot ? "curves.png" : ""}};
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

}  // namespace

std::vector<RunResult> run_train(TrainConfig cfg) {
  // 1. Check the whole configuration before touching data or disk.
  if (!cfg.format.empty()) {
    const scaling::RecipeFormat f = scaling::parse_recipe_format(cfg.format);
    cfg.delayed.fp8_format = cfg.current.fp8_format = cfg.mxfp8.fp8_format = cfg.block.fp8_format = f;
  }
  const std::vector<scaling::Recipe> recipes =
      scaling::parse_recipe_selection(cfg.recipe, {cfg.delayed, cfg.current, cfg.mxfp8, cfg.block});
  // Every recipe's parameters are checked, whichever recipes run.
  for (const scaling::Recipe& r : {scaling::Recipe(cfg.delayed), scaling::Recipe(cfg.current),
                                   scaling::Recipe(cfg.mxfp8), scaling::Recipe(cfg.block)})
    scaling::validate(r);
  FP8EMU_CHECK(std::isfinite(cfg.lr) && cfg.lr > 0.0f, "--lr must be positive and finite, got ", cfg.lr);
  FP8EMU_CHECK(cfg.epochs >= 1, "--epochs must be >= 1, got ", cfg.epochs);
  FP8EMU_CHECK(cfg.batch_size >= 1, "--batch-size must be >= 1, got ", cfg.batch_size);
  FP8EMU_CHECK(cfg.train_samples >= 1, "--train-samples must be >= 1, got ", cfg.train_samples);
  FP8EMU_CHECK(cfg.test_samples >= 1, "--test-samples must be >= 1, got ", cfg.test_samples);
  FP8EMU_CHECK(cfg.threads >= 0, "--threads must be >= 0, got ", cfg.threads);
  FP8EMU_CHECK(cfg.checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ", cfg.checkpoint_every);
  for (int h : cfg.hidden) FP8EMU_CHECK(h >= 1 && h <= kMaxWidth, "--hidden sizes must be in [1, ", kMaxWidth, "], got ", h);
  FP8EMU_CHECK(cfg.threads <= kMaxThreads, "--threads must be <= ", kMaxThreads, ", got ", cfg.threads);
  Settings set;
  set.activation = nn::parse_activation(cfg.activation);
  set.accumulation = emu::parse_accumulation(cfg.accumulation);
  set.optimizer = nn::Optimizer::parse(cfg.optimizer);
  {
    std::vector<int> sizes{1};  // only the layer count matters for the names
    sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
    sizes.push_back(1);
    set.backends = backend::resolve(
        backend::parse_layer_backends(cfg.backend, layer_names(sizes), backend::Kind::kEmulated), cfg.strict,
        std::cerr);
  }
  const int threads = common::set_threads(cfg.threads);

  // 2. Data.
  const Split train = load_split(cfg.data_dir, "train", cfg.train_samples);
  const Split test = load_split(cfg.data_dir, "t10k", cfg.test_samples);
  FP8EMU_CHECK(test.x.cols == train.x.cols, cfg.data_dir, ": test images have ", test.x.cols,
               " pixels, training images ", train.x.cols);

  // 3. The output folder, once the data is known to be good. On --resume the checkpoint is read and
  // checked first, so a bad resume touches nothing (common::ResultsFolder::prepare).
  common::ResultsFolder out(cfg.out_dir, cfg.resume, "", {"metrics.csv", "layers.csv", "summary.json", "curves.png"});
  cfg.out_dir = out.dir();
  set.sizes = {train.x.cols};
  set.sizes.insert(set.sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  set.sizes.push_back(kClasses);
  const std::vector<int>& sizes = set.sizes;
  cfg.train_samples = train.x.rows;  // what was used (the request may exceed the file)
  cfg.test_samples = test.x.rows;
  const nlohmann::json config = config_json(cfg, sizes, threads);
  nlohmann::json fingerprint_json = config;
  fingerprint_json.erase("threads");  // results do not depend on it
  const std::string fingerprint = fingerprint_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<common::RunSpec> runs{{"fp32", nn::Precision::kFp32, scaling::DelayedScaling{}}};
  for (const auto& r : recipes)
    runs.push_back({std::string("fp8_") + scaling::recipe_name(r), nn::Precision::kFp8, r});
  const std::string checkpoint_path = out.checkpoint_path();
  const common::Checkpoint<Codec> resumed = common::resume_point<Codec>(
      out, !cfg.resume.empty(), fingerprint, runs.size(),
      [](const std::string& path, const std::string& theirs, const std::string&) {
        return path + " was written by a run with other settings; resume with the same flags as that run (its "
                      "configuration: " + theirs + ")";
      });
  out.prepare(!cfg.resume.empty());
  if (cfg.progress) {
    std::fprintf(stderr, "fp8emu train: %d train / %d test images from %s, MLP", train.x.rows, test.x.rows,
                 cfg.data_dir.c_str());
    for (std::size_t i = 0; i < sizes.size(); ++i) std::fprintf(stderr, "%s%d", i ? "-" : " ", sizes[i]);
    std::fprintf(stderr, ", %d epochs, %d threads, results in %s\n", cfg.epochs, threads, cfg.out_dir.c_str());
    if (!cfg.resume.empty())
      std::fprintf(stderr, "resuming from %s: %zu run(s) done, run %u at epoch %d\n", checkpoint_path.c_str(),
                   resumed.completed.size(), resumed.current_run + 1,
                   resumed.has_state ? resumed.state.epochs_done + 1 : 1);
  }

  // 4. The runs; metrics files are rewritten after every epoch.
  std::vector<RunLog> done;  // the runs finished before the current one
  auto save = [&](const RunLog& current) {
    std::vector<RunLog> all = done;
    all.push_back(current);
    out.write("metrics.csv", metrics_csv(all));
    out.write("layers.csv", layers_csv(all));
  };
  done = resumed.completed;
  const std::vector<RunLog> logs = common::run_all<Codec>(
      runs.size(), resumed, checkpoint_path, cfg.checkpoint_every > 0,
      [&](std::size_t i, const RunState* state, const std::function<void(const RunState&)>& checkpoint) {
        return train_one(cfg, set, runs[i], train, test, save, state, checkpoint, checkpoint_path);
      },
      [&](const std::vector<RunLog>& so_far) { done = so_far; });

  // 5. Plot and summary (the summary last: its presence marks a finished run).
  const bool plot = write_plot(out, logs);
  out.write("summary.json", common::json_text(summary_json(logs, config, plot), 2));

  std::printf("%-12s %14s %10s %10s %9s\n", "run", "test_accuracy", "train_loss", "test_loss", "seconds");
  for (const auto& l : logs)
    std::printf("%-12s %14.4f %10.4f %10.4f %9.1f\n", l.result.name.c_str(), l.result.test_accuracy.back(),
                l.result.train_loss.back(), l.result.test_loss.back(), l.result.seconds);
  for (std::size_t i = 1; i < logs.size(); ++i)
    std::printf("%s - fp32 test accuracy: %+.2f percentage points\n", logs[i].result.name.c_str(),
                100.0 * (logs[i].result.test_accuracy.back() - logs[0].result.test_accuracy.back()));
  std::printf("results: %s (summary.json, metrics.csv, layers.csv%s)\n", cfg.out_dir.c_str(),
              plot ? ", curves.png" : "");
  std::vector<RunResult> results;
  for (auto& l : logs) results.push_back(l.result);
  return results;
}

std::string inspect_checkpoint(const std::string& path) {
  const common::Checkpoint<Codec> c = common::read_checkpoint<Codec>(path);
  return std::to_string(c.completed.size()) + " run(s) done, next run " + std::to_string(c.current_run) +
         (c.has_state ? ", after epoch " + std::to_string(c.state.epochs_done) : std::string());
}

}  // namespace fp8emu::experiments
