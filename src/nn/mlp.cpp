// MLP, loss and optimizers (see include/fp8emu/nn/mlp.hpp).
#include "fp8emu/nn/mlp.hpp"

#include <cmath>

#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

Activation parse_activation(const std::string& s) {
  if (s == "relu") return Activation::kReLU;
  if (s == "gelu") return Activation::kGELU;
  FP8EMU_FAIL("unknown activation '", s, "' (accepted: relu, gelu)");
}

namespace {
// Elementwise optimizer loops fork threads only from this size (as the emulation kernels).
constexpr std::ptrdiff_t kParallelMinElements = std::ptrdiff_t(1) << 15;

}  // namespace

// The element arithmetic lives in core/nn_element.hpp (shared with any GPU kernel).
float activation_forward(Activation a, float x) {
  return a == Activation::kReLU ? core::relu_forward(x) : core::gelu_tanh_forward(x);
}

float activation_grad(Activation a, float x) {
  return a == Activation::kReLU ? core::relu_grad(x) : core::gelu_tanh_grad(x);
}

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

void Mlp::forward(const Matrix& x, Matrix& logits, bool training,
                  std::vector<std::pair<double, double>>* layer_out_ref) {
  const std::size_t n = layers.size();
  inputs_.resize(n);
  preacts_.resize(n);
  if (layer_out_ref) layer_out_ref->assign(n, {0.0, 0.0});
  inputs_[0] = x;
  Matrix twin;
  for (std::size_t l = 0; l < n; ++l) {
    Matrix& y = (l + 1 == n) ? logits : preacts_[l];
    layers[l].forward(inputs_[l], y, training);
    if (layer_out_ref) {
      layers[l].forward_fp32(inputs_[l], twin);
      double err = 0.0, ref = 0.0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        const double d = double(y.data[i]) - double(twin.data[i]);
        err += d * d;
        ref += double(twin.data[i]) * double(twin.data[i]);
      }
      (*layer_out_ref)[l] = {err, ref};
    }
    if (l + 1 < n) {
      Matrix& next = inputs_[l + 1];
      next.resize(y.rows, y.cols);
      for (std::size_t i = 0; i < y.size(); ++i) next.data[i] = activation_forward(act_, y.data[i]);
    }
  }
}

void Mlp::backward(const Matrix& dlogits) {
  Matrix grad = dlogits, dx;
  for (std::size_t l = layers.size(); l-- > 0;) {
    layers[l].backward(grad, l > 0 ? &dx : nullptr);
    if (l > 0) {
      const Matrix& pre = preacts_[l - 1];
      for (std::size_t i = 0; i < dx.size(); ++i) dx.data[i] *= activation_grad(act_, pre.data[i]);
      std::swap(grad, dx);
    }
  }
}

void Mlp::update_forward_scales() {
  for (auto& l : layers) l.update_forward_scales();
}

void Mlp::update_backward_scales() {
  for (auto& l : layers) l.update_backward_scales();
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

Optimizer::Kind Optimizer::parse(const std::string& s) {
  if (s == "adam") return Kind::kAdam;
  if (s == "sgd") return Kind::kSgd;
  FP8EMU_FAIL("unknown optimizer '", s, "' (accepted: adam, sgd)");
}

void Optimizer::step(Mlp& model) {
  std::vector<std::pair<Matrix*, Matrix*>> params;
  for (auto& l : model.layers) {
    params.emplace_back(&l.weight, &l.grad_weight);
    params.emplace_back(&l.bias, &l.grad_bias);
  }
  step(params);
}

void Optimizer::step(const std::vector<std::pair<Matrix*, Matrix*>>& params) {
  if (m_.empty()) {
    for (auto& pg : params) {
      m_.emplace_back(pg.first->size(), 0.0f);
      v_.emplace_back(pg.first->size(), 0.0f);
    }
  }
  ++t_;
  const backend::AdamStep a = adam_step(lr_, t_);
  const float b1 = a.b1, b2 = a.b2, eps = a.eps;
  for (std::size_t p = 0; p < params.size(); ++p) {
    float* w = params[p].first->data.data();
    const float* g = params[p].second->data.data();
    float* m = m_[p].data();
    float* v = v_[p].data();
    const std::ptrdiff_t n = std::ptrdiff_t(params[p].first->size());
    if (kind_ == Kind::kAdam) {
      const float step = a.step, sqrt_bc2 = a.sqrt_bc2;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
      for (std::ptrdiff_t i = 0; i < n; ++i) core::adam_element(w[i], g[i], m[i], v[i], b1, b2, step, sqrt_bc2, eps);
    } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
      for (std::ptrdiff_t i = 0; i < n; ++i) core::sgd_momentum_element(w[i], g[i], m[i], momentum_, lr_);
    }
  }
}

}  // namespace fp8emu::nn
