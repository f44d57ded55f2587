// The device-resident MLP training step (see include/fp8emu/nn/device_mlp.hpp). Each block below
// names the host code whose arithmetic it repeats on backend::Device operations.
#include "fp8emu/nn/device_mlp.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

namespace {
// Roles within a layer's last-scale and counter arrays (Linear::last_scale_ order).
constexpr int kX = 0, kW = 1, kDy = 2;
}  // namespace

struct DeviceMlp::Layer {
  int in = 0, out = 0;
  bool fp8 = false;
  bool delayed = false;        // else current scaling (fp8 only)
  bool pow2 = false;           // current scaling
  float epsilon = 0.0f;        // current scaling
  bool most_recent = false;    // delayed scaling
  int history_len = 1;         // delayed scaling
  float scaled_max_fwd = 0.0f, scaled_max_bwd = 0.0f;  // delayed: RN(fp8_max * 2^-margin)
  Format fmt_fwd = Format::kE4M3, fmt_bwd = Format::kE5M2;
  emu::GemmAccumulation acc_fprop, acc_dgrad, acc_wgrad;
  Tensor<float> w, b, gw, gb;            // parameters and gradients
  Tensor<float> mw, vw, mb, vb;          // optimizer moments (v unused by SGD)
  Tensor<float> wt;                      // fp32: W^T scratch [in, out]
  Tensor<float> dyt;                     // fp32: dy^T scratch [out, capacity]
  Tensor<std::uint8_t> wq_row, wq_col;   // fp8: W codes [out, in] and [in, out]
  Tensor<std::uint8_t> xq_row, xq_col;   // fp8: x codes [capacity, in] and [in, capacity]
  Tensor<std::uint8_t> dyq_row, dyq_col; // fp8: dy codes [capacity, out] and [out, capacity]
  Tensor<float> fwd_history, fwd_scale;  // delayed: [L, 3], [3]
  Tensor<float> bwd_history, bwd_scale;  // delayed: [L, 2], [2]
  Tensor<float> last_scale;              // [3]: the scales of the last casts of x, W, dy
  Tensor<backend::CastCounters> counters;  // [3]: x, W, dy

  // The scale a cast of `role` multiplies by: the delayed state's slot, or the current scale the
  // step computed into last_scale.
  const float* scale(int role) const {
    if (!delayed) return last_scale.get() + role;
    return role == kDy ? bwd_scale.get() : fwd_scale.get() + role;
  }
  // Where a delayed-scaling cast records its amax: row 0 of the role's history column.
  float* amax(int role) const {
    if (!delayed) return nullptr;
    return role == kDy ? bwd_history.get() : fwd_history.get() + role;
  }
};

std::string DeviceMlp::unsupported(const Mlp& model) {
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const Linear& l = model.layers[i];
    const std::string name = "fc" + std::to_string(i + 1);
    if (l.twin_error) return "layer " + name + " measures its FP32 twin error (twin_error), which runs on the host";
    if (l.precision() == Precision::kFp32) continue;
    const scaling::Recipe& r = l.recipe();
    if (const auto* d = std::get_if<scaling::DelayedScaling>(&r)) {
      if (!d->uses_fused_update())
        return "layer " + name + " uses delayed scaling with a callable amax or scale function (the unfused update), "
               "which runs on the host";
      if (d->reduce_amax) return "layer " + name + " uses delayed scaling with an amax-reduction hook, which runs on the host";
      continue;
    }
    if (std::holds_alternative<scaling::CurrentScaling>(r)) continue;
    return "layer " + name + " uses the " + scaling::recipe_name(r) +
           " recipe; device-resident layers take fp32, delayed and current scaling so far";
  }
  return {};
}

DeviceMlp::DeviceMlp(const backend::Device& device, const Mlp& model, const Optimizer& opt)
    : dev_(&device),
      act_(model.act_ == Activation::kReLU ? backend::ActivationOp::kReLU : backend::ActivationOp::kGELU),
      opt_kind_(opt.kind_),
      lr_(opt.lr_),
      momentum_(opt.momentum_),
      steps_(opt.t_) {
  const std::string why = unsupported(model);
  FP8EMU_CHECK(why.empty(), "device-resident MLP: ", why);
  FP8EMU_CHECK(opt.m_.empty() || opt.m_.size() == 2 * model.layers.size(),
               "device-resident MLP: the optimizer's moments do not match the model");
  const backend::Device& d = device;
  layers_.resize(model.layers.size());
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const Linear& src = model.layers[i];
    Layer& L = layers_[i];
    L.in = src.in_features();
    L.out = src.out_features();
    L.fp8 = src.precision() == Precision::kFp8;
    L.w = Tensor<float>(d, L.out, L.in);
    L.b = Tensor<float>(d, 1, L.out);
    L.gw = Tensor<float>(d, L.out, L.in);
    L.gb = Tensor<float>(d, 1, L.out);
    L.mw = Tensor<float>(d, L.out, L.in);
    L.mb = Tensor<float>(d, 1, L.out);
    L.vw = Tensor<float>(d, L.out, L.in);  // SGD keeps these at zero, as Optimizer does
    L.vb = Tensor<float>(d, 1, L.out);
    L.w.upload(src.weight.data.data());
    L.b.upload(src.bias.data.data());
    L.gw.upload(src.grad_weight.data.data());
    L.gb.upload(src.grad_bias.data.data());
    if (!opt.m_.empty()) {
      FP8EMU_CHECK(opt.m_[2 * i].size() == L.w.size() && opt.m_[2 * i + 1].size() == L.b.size(),
                   "device-resident MLP: the optimizer's moments do not match layer fc", i + 1);
      L.mw.upload(opt.m_[2 * i].data());
      L.mb.upload(opt.m_[2 * i + 1].data());
      L.vw.upload(opt.v_[2 * i].data());
      L.vb.upload(opt.v_[2 * i + 1].data());
    }
    if (!L.fp8) {
      L.wt = Tensor<float>(d, L.in, L.out);
      continue;
    }
    L.acc_fprop = src.acc_fprop_;
    L.acc_dgrad = src.acc_dgrad_;
    L.acc_wgrad = src.acc_wgrad_;
    L.fmt_fwd = src.forward_quantizer().format();
    L.fmt_bwd = src.backward_quantizer().format();
    L.wq_row = Tensor<std::uint8_t>(d, L.out, L.in);
    L.wq_col = Tensor<std::uint8_t>(d, L.in, L.out);
    L.last_scale = Tensor<float>(d, 1, 3);
    L.last_scale.upload(src.last_scale_);
    L.counters = Tensor<backend::CastCounters>(d, 1, 3);
    const scaling::Recipe& r = src.recipe();
    if (const auto* ds = std::get_if<scaling::DelayedScaling>(&r)) {
      L.delayed = true;
      L.most_recent = ds->amax_compute_algo == scaling::AmaxComputeAlgo::kMostRecent;
      // DelayedScalingState::update's fused path: the host constant fp8_max * powf(2, -margin).
      L.scaled_max_fwd = scaling::fused_scaled_max(*ds, L.fmt_fwd);
      L.scaled_max_bwd = scaling::fused_scaled_max(*ds, L.fmt_bwd);
      const scaling::DelayedScalingState& fs = src.forward_state();
      const scaling::DelayedScalingState& bs = src.backward_state();
      L.history_len = fs.history_len();
      L.fwd_history = Tensor<float>(d, fs.history_len(), fs.num_slots());
      L.fwd_scale = Tensor<float>(d, 1, fs.num_slots());
      L.bwd_history = Tensor<float>(d, bs.history_len(), bs.num_slots());
      L.bwd_scale = Tensor<float>(d, 1, bs.num_slots());
      L.fwd_history.upload(fs.history_values().data());
      L.fwd_scale.upload(fs.scales().data());
      L.bwd_history.upload(bs.history_values().data());
      L.bwd_scale.upload(bs.scales().data());
    } else {
      const auto& cs = std::get<scaling::CurrentScaling>(r);
      L.pow2 = cs.use_power_2_scales;
      L.epsilon = cs.amax_epsilon;
    }
  }
}

DeviceMlp::~DeviceMlp() = default;

void DeviceMlp::ensure_rows(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *dev_;
  const std::size_t n = layers_.size();
  in_.clear();
  pre_.clear();
  int widest = 1;
  for (std::size_t l = 0; l < n; ++l) {
    Layer& L = layers_[l];
    in_.emplace_back(d, rows, L.in);
    pre_.emplace_back(d, rows, L.out);
    widest = std::max({widest, L.in, L.out});
    if (L.fp8) {
      L.xq_row = Tensor<std::uint8_t>(d, rows, L.in);
      L.xq_col = Tensor<std::uint8_t>(d, L.in, rows);
      L.dyq_row = Tensor<std::uint8_t>(d, rows, L.out);
      L.dyq_col = Tensor<std::uint8_t>(d, L.out, rows);
    } else {
      L.dyt = Tensor<float>(d, L.out, rows);
    }
  }
  grad_a_ = Tensor<float>(d, rows, widest);
  grad_b_ = Tensor<float>(d, rows, widest);
  loss_ = Tensor<float>(d, 1, rows);
  labels_ = Tensor<std::uint8_t>(d, 1, rows);
  capacity_ = rows;
}

// Linear::forward (training): fp32 = forward_fp32; FP8 = cast_weight (both copies), the input cast
// (both copies), fprop x . W^T, bias.
void DeviceMlp::forward_layer(Layer& L, const float* x, float* y, int rows) {
  const backend::Device& d = *dev_;
  if (!L.fp8) {
    d.transpose_f32(L.out, L.in, L.w.get(), L.wt.get());
    d.gemm_f32_nn(rows, L.out, L.in, x, L.wt.get(), y);
  } else {
    float* last = L.last_scale.get();
    if (!L.delayed) d.current_scale(L.w.get(), L.w.size(), L.fmt_fwd, L.pow2, L.epsilon, last + kW);
    d.cast_transpose(L.w.get(), L.out, L.in, L.scale(kW), L.fmt_fwd, L.wq_row.get(), L.wq_col.get(), L.amax(kW),
                     L.counters.get() + kW);
    if (!L.delayed)
      d.current_scale(x, std::size_t(rows) * std::size_t(L.in), L.fmt_fwd, L.pow2, L.epsilon, last + kX);
    d.cast_transpose(x, rows, L.in, L.scale(kX), L.fmt_fwd, L.xq_row.get(), L.xq_col.get(), L.amax(kX),
                     L.counters.get() + kX);
    d.gemm_fp8_tn(rows, L.out, L.in, L.xq_row.get(), L.fmt_fwd, L.scale(kX), L.wq_row.get(), L.fmt_fwd, L.scale(kW),
                  L.acc_fprop, y);
  }
  d.bias_add(y, L.b.get(), rows, L.out);
}

// Linear::backward: db = column sum of dy; fp32: dW = dy^T x, dx = dy W; FP8: the grad_output cast
// (both copies), wgrad dy^T . x^T, dgrad dy . W.
void DeviceMlp::backward_layer(Layer& L, const float* dy, float* dx, int rows) {
  const backend::Device& d = *dev_;
  const std::size_t l = std::size_t(&L - layers_.data());
  const float* x = in_[l].get();
  d.column_sum(dy, rows, L.out, L.gb.get());
  if (!L.fp8) {
    d.transpose_f32(rows, L.out, dy, L.dyt.get());
    d.gemm_f32_nn(L.out, L.in, rows, L.dyt.get(), x, L.gw.get());
    if (dx) d.gemm_f32_nn(rows, L.in, L.out, dy, L.w.get(), dx);
    return;
  }
  if (!L.delayed)
    d.current_scale(dy, std::size_t(rows) * std::size_t(L.out), L.fmt_bwd, L.pow2, L.epsilon,
                    L.last_scale.get() + kDy);
  d.cast_transpose(dy, rows, L.out, L.scale(kDy), L.fmt_bwd, L.dyq_row.get(), L.dyq_col.get(), L.amax(kDy),
                   L.counters.get() + kDy);
  d.gemm_fp8_tn(L.out, L.in, rows, L.dyq_col.get(), L.fmt_bwd, L.scale(kDy), L.xq_col.get(), L.fmt_fwd, L.scale(kX),
                L.acc_wgrad, L.gw.get());
  if (dx)
    d.gemm_fp8_tn(rows, L.in, L.out, L.dyq_row.get(), L.fmt_bwd, L.scale(kDy), L.wq_col.get(), L.fmt_fwd,
                  L.scale(kW), L.acc_dgrad, dx);
}

double DeviceMlp::train_step(const Matrix& x, const std::vector<std::uint8_t>& labels, int divisor) {
  const backend::Device& d = *dev_;
  const int rows = x.rows, n = int(layers_.size());
  const int classes = layers_.back().out;
  FP8EMU_CHECK(x.cols == layers_.front().in, "Linear: input has ", x.cols, " features, layer expects ",
               layers_.front().in);
  FP8EMU_CHECK(std::size_t(rows) == labels.size(), "cross-entropy: ", rows, " rows of logits but ", labels.size(),
               " labels");
  FP8EMU_CHECK(divisor >= rows && divisor >= 1, "cross-entropy: divisor ", divisor, " is smaller than the ", rows,
               " rows");
  for (std::uint8_t y : labels)
    FP8EMU_CHECK(y < classes, "cross-entropy: label ", int(y), " out of range for ", classes, " classes");
  if (rows == 0) return 0.0;
  ensure_rows(rows);

  // Mlp::forward: each layer, the activation between layers.
  in_[0].upload(x.data.data(), std::size_t(rows) * std::size_t(x.cols));
  for (int l = 0; l < n; ++l) {
    forward_layer(layers_[std::size_t(l)], in_[std::size_t(l)].get(), pre_[std::size_t(l)].get(), rows);
    if (l + 1 < n)
      d.activation_forward(act_, pre_[std::size_t(l)].get(), in_[std::size_t(l) + 1].get(),
                           std::size_t(rows) * std::size_t(layers_[std::size_t(l)].out));
  }
  // softmax_cross_entropy_sum: per-row terms, summed here in double in row order.
  labels_.upload(labels.data(), std::size_t(rows));
  float* grad = grad_a_.get();
  float* dx = grad_b_.get();
  d.softmax_xent(pre_.back().get(), labels_.get(), rows, classes, float(divisor), loss_.get(), grad);
  // Mlp::backward: each layer from the last, the activation's derivative between layers.
  for (int l = n - 1; l >= 0; --l) {
    Layer& L = layers_[std::size_t(l)];
    backward_layer(L, grad, l > 0 ? dx : nullptr, rows);
    if (l > 0) {
      d.activation_backward(act_, pre_[std::size_t(l) - 1].get(), dx, std::size_t(rows) * std::size_t(L.in));
      std::swap(grad, dx);
    }
  }
  // TE's update points, every layer's forward then backward scales (DelayedScalingState::update's
  // fused path); the scales the step's casts used are kept as the layer's last scales first.
  for (Layer& L : layers_) {
    if (!L.fp8 || !L.delayed) continue;
    float* last = L.last_scale.get();
    d.copy(last + kX, L.fwd_scale.get(), 2 * sizeof(float));
    d.copy(last + kDy, L.bwd_scale.get(), sizeof(float));
    d.delayed_update(L.fwd_history.get(), L.fwd_scale.get(), L.fwd_scale.cols(), L.history_len, L.scaled_max_fwd,
                     L.most_recent);
    d.delayed_update(L.bwd_history.get(), L.bwd_scale.get(), L.bwd_scale.cols(), L.history_len, L.scaled_max_bwd,
                     L.most_recent);
  }
  // Optimizer::step: every parameter in layer order, weight then bias.
  ++steps_;
  const backend::AdamStep adam = Optimizer::adam_step(lr_, steps_);
  for (Layer& L : layers_) {
    if (opt_kind_ == Optimizer::Kind::kAdam) {
      d.adam(L.w.get(), L.gw.get(), L.mw.get(), L.vw.get(), L.w.size(), adam);
      d.adam(L.b.get(), L.gb.get(), L.mb.get(), L.vb.get(), L.b.size(), adam);
    } else {
      d.sgd(L.w.get(), L.gw.get(), L.mw.get(), L.w.size(), momentum_, lr_);
      d.sgd(L.b.get(), L.gb.get(), L.mb.get(), L.b.size(), momentum_, lr_);
    }
  }
  std::vector<float> terms(static_cast<std::size_t>(rows));
  d.download(terms.data(), loss_.get(), terms.size() * sizeof(float));
  double total = 0.0;
  for (float t : terms) total += double(t);
  return total;
}

void DeviceMlp::reset_stats() {
  for (Layer& L : layers_)
    if (L.fp8) dev_->fill_zero(L.counters.get(), L.counters.bytes());
}

void DeviceMlp::download(Mlp& model, Optimizer& opt) const {
  FP8EMU_CHECK(model.layers.size() == layers_.size(), "device-resident MLP: download into a model of ",
               model.layers.size(), " layers, made from one of ", layers_.size());
  std::vector<std::vector<float>> m, v;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = layers_[i];
    Linear& dst = model.layers[i];
    FP8EMU_CHECK(dst.in_features() == L.in && dst.out_features() == L.out,
                 "device-resident MLP: download into a layer of another shape (fc", i + 1, ")");
    L.w.download(dst.weight.data.data());
    L.b.download(dst.bias.data.data());
    L.gw.download(dst.grad_weight.data.data());
    L.gb.download(dst.grad_bias.data.data());
    for (const Tensor<float>* t : {&L.mw, &L.mb}) {
      m.emplace_back(t->size());
      t->download(m.back().data());
    }
    for (const Tensor<float>* t : {&L.vw, &L.vb}) {
      v.emplace_back(t->size());
      t->download(v.back().data());
    }
    if (!L.fp8) continue;
    L.last_scale.download(dst.last_scale_);
    backend::CastCounters c[3];
    L.counters.download(c);
    emu::QuantizeStats* st[3] = {&dst.stats.input, &dst.stats.weight, &dst.stats.grad_output};
    for (int r = 0; r < 3; ++r) {
      *st[r] = {};
      st[r]->count = c[r].count;
      st[r]->saturated = c[r].saturated;
      st[r]->underflow = c[r].underflow;
      st[r]->nan = c[r].nan;
    }
    if (L.delayed) {
      std::vector<float> scales(L.fwd_scale.size()), history(L.fwd_history.size());
      L.fwd_scale.download(scales.data());
      L.fwd_history.download(history.data());
      dst.forward_state().restore(scales, history);
      scales.resize(L.bwd_scale.size());
      history.resize(L.bwd_history.size());
      L.bwd_scale.download(scales.data());
      L.bwd_history.download(history.data());
      dst.backward_state().restore(scales, history);
    }
  }
  opt.restore(steps_, std::move(m), std::move(v));
}

}  // namespace fp8emu::nn
