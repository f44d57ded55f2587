// MLP, loss and optimizers (see include/fp8emu/nn/mlp.hpp).
#include "fp8emu/nn/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

namespace {
constexpr EnumName<Activation> kActivationNames[] = {{Activation::kReLU, "relu"}, {Activation::kGELU, "gelu"}};
constexpr EnumName<Optimizer::Kind> kOptimizerNames[] = {{Optimizer::Kind::kAdam, "adam"},
                                                         {Optimizer::Kind::kSgd, "sgd"}};
}  // namespace

Activation parse_activation(const std::string& s) { return parse_enum(kActivationNames, s, "activation"); }

namespace {
backend::ActivationOp act_op(Activation a) {
  return a == Activation::kReLU ? backend::ActivationOp::kReLU : backend::ActivationOp::kGELU;
}
}  // namespace

Mlp::Mlp(const std::vector<int>& sizes, Activation act, Precision precision,
         const scaling::Recipe& recipe, std::uint64_t seed)
    : act_(act) {
  FP8EMU_CHECK(sizes.size() >= 2, "Mlp: need at least input and output sizes");
  Rng rng(seed);
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    layers.emplace_back(sizes[l], sizes[l + 1], precision, recipe);
    layers.back().init(rng);
  }
}

Mlp::Mlp(const Mlp& o) : layers(o.layers), act_(o.act_) {}

Mlp& Mlp::operator=(const Mlp& o) {
  if (this != &o) *this = Mlp(o);
  return *this;
}

void Mlp::reserve(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *device_;
  in_.clear();
  pre_.clear();
  int widest = 1;
  for (const Linear& L : layers) {
    in_.emplace_back(d, rows, L.in_features());
    pre_.emplace_back(d, rows, L.out_features());
    widest = std::max({widest, L.in_features(), L.out_features()});
  }
  grad_a_ = backend::DeviceTensor<float>(d, rows, widest);
  grad_b_ = backend::DeviceTensor<float>(d, rows, widest);
  loss_ = backend::DeviceTensor<float>(d, 1, rows);
  labels_ = backend::DeviceTensor<std::uint8_t>(d, 1, rows);
  capacity_ = rows;
}

// The step program: each layer, the activation between layers; x in in_[0] (or the caller's).
void Mlp::forward(const float* x, int rows, float* logits, bool training) {
  const backend::Device& d = *device_;
  const std::size_t n = layers.size();
  const float* in = x;
  for (std::size_t l = 0; l < n; ++l) {
    float* y = (l + 1 == n) ? logits : pre_[l].get();
    layers[l].forward(in, rows, y, training);
    if (l + 1 < n) {
      d.activation_forward(act_op(act_), y, in_[l + 1].get(), std::size_t(rows) * std::size_t(layers[l].out_features()));
      in = in_[l + 1].get();
    }
  }
}

// Each layer from the last, the activation's derivative between layers.
void Mlp::backward(const float* dlogits, int rows) {
  const backend::Device& d = *device_;
  const float* grad = dlogits;
  float* dx = grad_a_.get();
  float* spare = grad_b_.get();
  for (std::size_t l = layers.size(); l-- > 0;) {
    Linear& L = layers[l];
    L.backward(grad, rows, l > 0 ? dx : nullptr);
    if (l > 0) {
      d.activation_backward(act_op(act_), pre_[l - 1].get(), dx, std::size_t(rows) * std::size_t(L.in_features()));
      grad = dx;
      std::swap(dx, spare);
    }
  }
}

void Mlp::forward(const Matrix& x, Matrix& logits, bool training,
                  std::vector<std::pair<double, double>>* layer_out_ref) {
  FP8EMU_CHECK(device_->host_memory(), "Mlp: the Matrix forward of a model on the ", device_->name(),
               " device (call to_host() first)");
  FP8EMU_CHECK(x.cols == layers.front().in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               layers.front().in_features());
  const std::size_t n = layers.size();
  const int rows = x.rows;
  reserve(rows);
  device_->copy(in_[0].get(), x.data.data(), x.size() * sizeof(float));  // kept for the backward
  logits.resize(rows, layers.back().out_features());
  // The FP32 twin of every layer fed the same input: FP8 and BF16 layers measure it themselves
  // (Linear::twin_error); an FP32 layer is its own twin (error 0, reference sum(y^2)).
  std::vector<TwinError> twins(layer_out_ref ? n : 0);
  std::vector<TwinError*> saved(n);
  for (std::size_t l = 0; l < n && layer_out_ref; ++l) {
    saved[l] = layers[l].twin_error;
    layers[l].twin_error = &twins[l];
  }
  forward(in_[0].get(), rows, logits.data.data(), training);
  if (!layer_out_ref) return;
  layer_out_ref->assign(n, {0.0, 0.0});
  for (std::size_t l = 0; l < n; ++l) {
    layers[l].twin_error = saved[l];
    if (layers[l].precision() != Precision::kFp32) {
      (*layer_out_ref)[l] = {twins[l].err, twins[l].ref};
      continue;
    }
    const float* y = (l + 1 == n) ? logits.data.data() : pre_[l].get();
    const std::size_t m = std::size_t(rows) * std::size_t(layers[l].out_features());
    double ref = 0.0;
    for (std::size_t i = 0; i < m; ++i) ref += double(y[i]) * double(y[i]);
    (*layer_out_ref)[l] = {0.0, ref};
  }
}

void Mlp::backward(const Matrix& dlogits) {
  FP8EMU_CHECK(device_->host_memory(), "Mlp: the Matrix backward of a model on the ", device_->name(),
               " device (call to_host() first)");
  backward(dlogits.data.data(), dlogits.rows);
}

void Mlp::update_forward_scales() {
  for (auto& l : layers) l.update_forward_scales();
}

void Mlp::update_backward_scales() {
  for (auto& l : layers) l.update_backward_scales();
}

std::string Mlp::device_unsupported() const {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string why = layers[i].device_unsupported();
    if (!why.empty()) return "layer fc" + std::to_string(i + 1) + " " + why;
  }
  return {};
}

void Mlp::to_device(const backend::Device& device) {
  const std::string why = device_unsupported();
  FP8EMU_CHECK(why.empty(), "device-resident MLP: ", why);
  for (Linear& l : layers) l.move_to_device(device);
  device_ = &device;
  capacity_ = 0;
}

void Mlp::to_host() {
  for (Linear& l : layers) l.to_host();
  device_ = &backend::cpu_device();
  capacity_ = 0;
  in_.clear();
  pre_.clear();
}

std::vector<DeviceParam> Mlp::params() {
  std::vector<DeviceParam> p;
  for (Linear& l : layers) l.params(p);
  return p;
}

void Mlp::reset_stats() {
  for (Linear& l : layers) l.reset_stats();
}

double Mlp::train_step(const Matrix& x, const std::vector<std::uint8_t>& labels, int divisor, Optimizer& opt) {
  const backend::Device& d = *device_;
  const int rows = x.rows;
  const int classes = layers.back().out_features();
  FP8EMU_CHECK(x.cols == layers.front().in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               layers.front().in_features());
  FP8EMU_CHECK(std::size_t(rows) == labels.size(), "cross-entropy: ", rows, " rows of logits but ", labels.size(),
               " labels");
  FP8EMU_CHECK(divisor >= rows && divisor >= 1, "cross-entropy: divisor ", divisor, " is smaller than the ", rows,
               " rows");
  for (std::uint8_t y : labels)
    FP8EMU_CHECK(y < classes, "cross-entropy: label ", int(y), " out of range for ", classes, " classes");
  if (rows == 0) return 0.0;
  reserve(rows);
  in_[0].upload(x.data.data(), std::size_t(rows) * std::size_t(x.cols));
  forward(in_[0].get(), rows, pre_.back().get(), true);
  // softmax_cross_entropy_sum: per-row terms, summed below in double in row order.
  labels_.upload(labels.data(), std::size_t(rows));
  float* dlogits = grad_b_.get();  // the backward's first dx is grad_a_
  d.softmax_xent(pre_.back().get(), labels_.get(), rows, classes, float(divisor), loss_.get(), dlogits);
  backward(dlogits, rows);
  // TE's update points (every layer's forward then backward scales), then the optimizer.
  for (Linear& L : layers) L.update_scales();
  opt.step(d, params());
  return sum_loss_terms(d, loss_.get(), rows);
}

double sum_loss_terms(const backend::Device& device, const float* terms, int rows) {
  std::vector<float> t(static_cast<std::size_t>(rows));
  device.download(t.data(), terms, t.size() * sizeof(float));
  double total = 0.0;
  for (float v : t) total += double(v);
  return total;
}

double softmax_cross_entropy(const Matrix& logits, const std::vector<std::uint8_t>& labels,
                             Matrix* dlogits) {
  return softmax_cross_entropy_sum(logits, labels, dlogits, logits.rows) / double(logits.rows);
}

double softmax_cross_entropy_sum(const Matrix& logits, const std::vector<std::uint8_t>& labels, Matrix* dlogits,
                                 int divisor) {
  FP8EMU_CHECK(std::size_t(logits.rows) == labels.size(), "cross-entropy: ", logits.rows,
               " rows of logits but ", labels.size(), " labels");
  FP8EMU_CHECK(divisor >= logits.rows && divisor >= 1, "cross-entropy: divisor ", divisor, " is smaller than the ",
               logits.rows, " rows");
  const int b = logits.rows, c = logits.cols;
  if (dlogits) dlogits->resize(b, c);
  double total = 0.0;
  for (int i = 0; i < b; ++i) {
    const int y = labels[std::size_t(i)];
    FP8EMU_CHECK(y < c, "cross-entropy: label ", y, " out of range for ", c, " classes");
    total += double(core::softmax_xent_row(logits.row(i), c, y, float(divisor), dlogits ? dlogits->row(i) : nullptr));
  }
  return total;
}

std::vector<int> argmax_rows(const Matrix& logits) {
  std::vector<int> out(std::size_t(logits.rows), 0);
  for (int i = 0; i < logits.rows; ++i) {
    const float* z = logits.row(i);
    int best = 0;
    for (int j = 1; j < logits.cols; ++j)
      if (z[j] > z[best] || (std::isnan(z[best]) && !std::isnan(z[j]))) best = j;
    out[std::size_t(i)] = best;
  }
  return out;
}

Optimizer::Optimizer(Kind kind, float lr, float momentum) : kind_(kind), lr_(lr), momentum_(momentum) {
  FP8EMU_CHECK(lr > 0.0f && std::isfinite(lr), "optimizer: learning rate must be positive, got ", lr);
}

backend::AdamStep Optimizer::adam_step(float lr, long t) {
  backend::AdamStep a;
  const float bc1 = 1.0f - std::pow(a.b1, float(t));
  const float bc2 = 1.0f - std::pow(a.b2, float(t));
  a.step = lr / bc1;
  a.sqrt_bc2 = std::sqrt(bc2);
  return a;
}

Optimizer::Kind Optimizer::parse(const std::string& s) { return parse_enum(kOptimizerNames, s, "optimizer"); }

void Optimizer::step(Mlp& model) {
  std::vector<std::pair<Matrix*, Matrix*>> params;
  for (auto& l : model.layers) {
    params.emplace_back(&l.weight, &l.grad_weight);
    params.emplace_back(&l.bias, &l.grad_bias);
  }
  step(params);
}

Optimizer::Optimizer(const Optimizer& o)
    : kind_(o.kind_), lr_(o.lr_), momentum_(o.momentum_), t_(o.t_), m_(o.m_), v_(o.v_) {
  if (!o.home_) return;
  for (std::size_t p = 0; p < o.dm_.size(); ++p) {
    o.dm_[p].download(m_[p].data());
    o.dv_[p].download(v_[p].data());
  }
}

Optimizer& Optimizer::operator=(const Optimizer& o) {
  if (this != &o) *this = Optimizer(o);
  return *this;
}

void Optimizer::step(const std::vector<std::pair<Matrix*, Matrix*>>& params) {
  std::vector<DeviceParam> p;
  for (const auto& [value, grad] : params) p.push_back({value->data.data(), grad->data.data(), value->size()});
  step(backend::cpu_device(), p);
}

void Optimizer::step(const backend::Device& device, const std::vector<DeviceParam>& params) {
  FP8EMU_CHECK(home_ == &device || (!home_ && device.host_memory()), "optimizer: its moments are on the ",
               home_ ? home_->name() : "host", ", the step on the ", device.name(),
               " device (Optimizer::to_device first)");
  if (m_.empty() && !home_) {
    for (const DeviceParam& q : params) {
      m_.emplace_back(q.n, 0.0f);
      v_.emplace_back(q.n, 0.0f);
    }
  }
  FP8EMU_CHECK(m_.size() == params.size(), "optimizer: ", m_.size(), " moment buffers for ", params.size(),
               " parameters");
  ++t_;
  const backend::AdamStep a = adam_step(lr_, t_);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const DeviceParam& q = params[p];
    float* m = home_ ? dm_[p].get() : m_[p].data();
    float* v = home_ ? dv_[p].get() : v_[p].data();
    if (kind_ == Kind::kAdam)
      device.adam(q.value, q.grad, m, v, q.n, a);
    else
      device.sgd(q.value, q.grad, m, q.n, momentum_, lr_);
  }
}

void Optimizer::to_device(const backend::Device& device, const std::vector<DeviceParam>& params) {
  to_host();
  if (m_.empty()) {
    for (const DeviceParam& q : params) {
      m_.emplace_back(q.n, 0.0f);
      v_.emplace_back(q.n, 0.0f);  // SGD keeps it at zero
    }
  }
  FP8EMU_CHECK(m_.size() == params.size(), "device-resident optimizer: ", m_.size(), " moment buffers for ",
               params.size(), " parameters");
  for (std::size_t p = 0; p < params.size(); ++p)
    FP8EMU_CHECK(m_[p].size() == params[p].n && v_[p].size() == params[p].n, "device-resident optimizer: moment ", p,
                 " has ", m_[p].size(), " elements, the parameter ", params[p].n);
  if (device.host_memory()) return;  // the host vectors serve a device of host memory
  for (std::size_t p = 0; p < params.size(); ++p) {
    dm_.emplace_back(device, 1, int(params[p].n));
    dv_.emplace_back(device, 1, int(params[p].n));
    dm_.back().upload(m_[p].data());
    dv_.back().upload(v_[p].data());
  }
  home_ = &device;
}

void Optimizer::to_host() {
  if (!home_) return;
  for (std::size_t p = 0; p < dm_.size(); ++p) {
    dm_[p].download(m_[p].data());
    dv_[p].download(v_[p].data());
  }
  dm_.clear();
  dv_.clear();
  home_ = nullptr;
}

}  // namespace fp8emu::nn
