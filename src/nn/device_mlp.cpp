// The device-resident MLP training step (see include/fp8emu/nn/device_mlp.hpp). Each block below
// names the host code whose arithmetic it repeats on backend::Device operations.
#include "fp8emu/nn/device_mlp.hpp"

#include <algorithm>

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

std::string DeviceMlp::unsupported(const Mlp& model) {
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const std::string why = model.layers[i].device_unsupported();
    if (!why.empty()) return "layer fc" + std::to_string(i + 1) + " " + why;
  }
  return {};
}

namespace {
// The layers, after the model's check (so its message names the layer).
// Copies of the layers kept on the device (Linear::to_device), after the model's check (so its
// message names the layer).
std::vector<Linear> device_layers(const backend::Device& d, const Mlp& model) {
  const std::string why = DeviceMlp::unsupported(model);
  FP8EMU_CHECK(why.empty(), "device-resident MLP: ", why);
  std::vector<Linear> out(model.layers.begin(), model.layers.end());
  for (Linear& l : out) {
    l.set_device(d);
    l.to_device();
  }
  return out;
}
std::vector<DeviceParam> params_of(std::vector<Linear>& layers) {
  std::vector<DeviceParam> p;
  for (Linear& l : layers) l.params(p);  // Optimizer::step(Mlp&)'s order
  return p;
}
}  // namespace

DeviceMlp::DeviceMlp(const backend::Device& device, const Mlp& model, const Optimizer& opt)
    : dev_(&device),
      act_(model.act_ == Activation::kReLU ? backend::ActivationOp::kReLU : backend::ActivationOp::kGELU),
      layers_(device_layers(device, model)),
      opt_(device, opt, params_of(layers_)) {}

void DeviceMlp::ensure_rows(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *dev_;
  in_.clear();
  pre_.clear();
  int widest = 1;
  for (const Linear& L : layers_) {
    in_.emplace_back(d, rows, L.in_features());
    pre_.emplace_back(d, rows, L.out_features());
    widest = std::max({widest, L.in_features(), L.out_features()});
  }
  grad_a_ = Tensor<float>(d, rows, widest);
  grad_b_ = Tensor<float>(d, rows, widest);
  loss_ = Tensor<float>(d, 1, rows);
  labels_ = Tensor<std::uint8_t>(d, 1, rows);
  capacity_ = rows;
}

double DeviceMlp::train_step(const Matrix& x, const std::vector<std::uint8_t>& labels, int divisor) {
  const backend::Device& d = *dev_;
  const int rows = x.rows, n = int(layers_.size());
  const int classes = layers_.back().out_features();
  FP8EMU_CHECK(x.cols == layers_.front().in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               layers_.front().in_features());
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
    const std::size_t i = std::size_t(l);
    layers_[i].forward(in_[i].get(), rows, pre_[i].get());
    if (l + 1 < n)
      d.activation_forward(act_, pre_[i].get(), in_[i + 1].get(), std::size_t(rows) * std::size_t(layers_[i].out_features()));
  }
  // softmax_cross_entropy_sum: per-row terms, summed below in double in row order.
  labels_.upload(labels.data(), std::size_t(rows));
  float* grad = grad_a_.get();
  float* dx = grad_b_.get();
  d.softmax_xent(pre_.back().get(), labels_.get(), rows, classes, float(divisor), loss_.get(), grad);
  // Mlp::backward: each layer from the last, the activation's derivative between layers.
  for (int l = n - 1; l >= 0; --l) {
    Linear& L = layers_[std::size_t(l)];
    L.backward(grad, rows, l > 0 ? dx : nullptr);
    if (l > 0) {
      d.activation_backward(act_, pre_[std::size_t(l) - 1].get(), dx, std::size_t(rows) * std::size_t(L.in_features()));
      std::swap(grad, dx);
    }
  }
  // TE's update points (every layer's forward then backward scales), then Optimizer::step.
  for (Linear& L : layers_) L.update_scales();
  opt_.step();
  return sum_loss_terms(d, loss_.get(), rows);
}

void DeviceMlp::reset_stats() {
  for (Linear& L : layers_) L.reset_stats();
}

void DeviceMlp::download(Mlp& model, Optimizer& opt) const {
  FP8EMU_CHECK(model.layers.size() == layers_.size(), "device-resident MLP: download into a model of ",
               model.layers.size(), " layers, made from one of ", layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].copy_to(model.layers[i]);
  opt_.download(opt);
}

}  // namespace fp8emu::nn
