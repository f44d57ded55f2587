// The optimizer on a backend::Device and the loss sum of device-resident models (see
// include/fp8emu/nn/device_layers.hpp).
#include "fp8emu/nn/device_layers.hpp"

#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

double sum_loss_terms(const backend::Device& device, const float* terms, int rows) {
  std::vector<float> t(static_cast<std::size_t>(rows));
  device.download(t.data(), terms, t.size() * sizeof(float));
  double total = 0.0;
  for (float v : t) total += double(v);
  return total;
}

// ---------------------------------------------------------------- DeviceOptimizer

DeviceOptimizer::DeviceOptimizer(const backend::Device& device, const Optimizer& opt, std::vector<DeviceParam> params)
    : dev_(&device),
      kind_(opt.kind_),
      lr_(opt.lr_),
      momentum_(opt.momentum_),
      steps_(opt.t_),
      params_(std::move(params)) {
  FP8EMU_CHECK(opt.m_.empty() || opt.m_.size() == params_.size(), "device-resident optimizer: ", opt.m_.size(),
               " moment buffers for ", params_.size(), " parameters");
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const int n = int(params_[p].n);
    m_.emplace_back(device, 1, n);
    v_.emplace_back(device, 1, n);  // SGD keeps it at zero, as Optimizer does
    if (opt.m_.empty()) continue;
    FP8EMU_CHECK(opt.m_[p].size() == params_[p].n && opt.v_[p].size() == params_[p].n,
                 "device-resident optimizer: moment ", p, " has ", opt.m_[p].size(), " elements, the parameter ",
                 params_[p].n);
    m_.back().upload(opt.m_[p].data());
    v_.back().upload(opt.v_[p].data());
  }
}

void DeviceOptimizer::step() {
  ++steps_;
  const backend::AdamStep adam = Optimizer::adam_step(lr_, steps_);
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const DeviceParam& q = params_[p];
    if (kind_ == Optimizer::Kind::kAdam)
      dev_->adam(q.value, q.grad, m_[p].get(), v_[p].get(), q.n, adam);
    else
      dev_->sgd(q.value, q.grad, m_[p].get(), q.n, momentum_, lr_);
  }
}

void DeviceOptimizer::download(Optimizer& opt) const {
  std::vector<std::vector<float>> m, v;
  for (std::size_t p = 0; p < params_.size(); ++p) {
    m.emplace_back(params_[p].n);
    v.emplace_back(params_[p].n);
    m_[p].download(m.back().data());
    v_[p].download(v.back().data());
  }
  opt.restore(steps_, std::move(m), std::move(v));
}

}  // namespace fp8emu::nn
