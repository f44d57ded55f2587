// Linear layer in FP32 or emulated FP8 (see include/fp8emu/nn/linear.hpp).
#include "fp8emu/nn/linear.hpp"

#include <cmath>
#include <limits>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {
namespace {

void add_bias(Matrix& y, const Matrix& bias) {
  for (int i = 0; i < y.rows; ++i) {
    float* r = y.row(i);
    for (int j = 0; j < y.cols; ++j) r[j] = core::bias_add(r[j], bias.data[std::size_t(j)]);
  }
}

// A copy of `n` floats rounded to bf16 (Device::round_bf16 of the CPU device: the same loop the
// transformer layers' bf16 activations use).
std::vector<float> bf16_copy(const float* x, std::size_t n) {
  std::vector<float> r(x, x + n);
  backend::cpu_device().round_bf16(r.data(), n);
  return r;
}

std::unique_ptr<scaling::Quantizer> clone_of(const std::unique_ptr<scaling::Quantizer>& q) {
  return q ? q->clone() : nullptr;
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp8: return "fp8";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

Linear::Linear(int in_features, int out_features, Precision precision, const scaling::Recipe& recipe)
    : precision_(precision), recipe_(recipe) {
  FP8EMU_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in=",
               in_features, " out=", out_features);
  set_recipe(recipe);
  weight = Matrix(out_features, in_features);
  bias = Matrix(1, out_features);
  grad_weight = Matrix(out_features, in_features);
  grad_bias = Matrix(1, out_features);
}

Linear::Linear(const Linear& o)
    : weight(o.weight),
      bias(o.bias),
      grad_weight(o.grad_weight),
      grad_bias(o.grad_bias),
      stats(o.stats),
      twin_error(o.twin_error),
      precision_(o.precision_),
      device_(o.device_),
      recipe_(o.recipe_),
      fwd_q_(clone_of(o.fwd_q_)),
      bwd_q_(clone_of(o.bwd_q_)),
      idle_fwd_state_(o.idle_fwd_state_),
      idle_bwd_state_(o.idle_bwd_state_),
      acc_fprop_(o.acc_fprop_),
      acc_dgrad_(o.acc_dgrad_),
      acc_wgrad_(o.acc_wgrad_),
      have_saved_(o.have_saved_),
      saved_batch_(o.saved_batch_),
      saved_x_(o.saved_x_),
      x_q_(o.x_q_),
      w_q_(o.w_q_),
      have_weight_cache_(o.have_weight_cache_) {
  for (int i = 0; i < 3; ++i) last_scale_[i] = o.last_scale_[i];
}

Linear& Linear::operator=(const Linear& o) {
  if (this != &o) {
    Linear copy(o);
    *this = std::move(copy);
  }
  return *this;
}

void Linear::set_recipe(const scaling::Recipe& recipe) {
  // make_quantizer validates the recipe before anything changes.
  std::unique_ptr<scaling::Quantizer> fwd = scaling::make_quantizer(recipe, scaling::Direction::kForward);
  std::unique_ptr<scaling::Quantizer> bwd = scaling::make_quantizer(recipe, scaling::Direction::kBackward);
  recipe_ = recipe;
  fwd_q_ = std::move(fwd);
  bwd_q_ = std::move(bwd);
  idle_fwd_state_ = scaling::DelayedScalingState(scaling::num_slots(scaling::Direction::kForward), 1);
  idle_bwd_state_ = scaling::DelayedScalingState(scaling::num_slots(scaling::Direction::kBackward), 1);
  for (float& sc : last_scale_) sc = std::numeric_limits<float>::quiet_NaN();
  have_weight_cache_ = false;
  if (supports_accumulation_models())  // TE's choice on Hopper: fprop fast accumulation, dgrad/wgrad split
    set_accumulation(emu::te_fprop(emu::Accumulation::kHopper), emu::te_dgrad(emu::Accumulation::kHopper),
                     emu::te_wgrad(emu::Accumulation::kHopper));
  else
    set_accumulation({}, {}, {});
}

const scaling::DelayedScalingState& Linear::forward_state() const {
  const scaling::DelayedScalingState* s = fwd_q_->amax_history_state();
  return s ? *s : idle_fwd_state_;
}
const scaling::DelayedScalingState& Linear::backward_state() const {
  const scaling::DelayedScalingState* s = bwd_q_->amax_history_state();
  return s ? *s : idle_bwd_state_;
}
scaling::DelayedScalingState& Linear::forward_state() {
  scaling::DelayedScalingState* s = fwd_q_->amax_history_state();
  return s ? *s : idle_fwd_state_;
}
scaling::DelayedScalingState& Linear::backward_state() {
  scaling::DelayedScalingState* s = bwd_q_->amax_history_state();
  return s ? *s : idle_bwd_state_;
}

void Linear::init(Rng& rng) {
  const float bound = 1.0f / std::sqrt(float(in_features()));
  for (float& w : weight.data) w = rng.uniform(bound);
  for (float& b : bias.data) b = rng.uniform(bound);
}

void Linear::forward_fp32(const Matrix& x, Matrix& y) const {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  Matrix wt(in_features(), out_features());
  emu::transpose(weight.rows, weight.cols, weight.data.data(), wt.data.data());
  y.resize(x.rows, out_features());
  emu::gemm_f32_nn(x.rows, out_features(), in_features(), x.data.data(), wt.data.data(), y.data.data());
  add_bias(y, bias);
}

void Linear::cast_weight(std::optional<bool> is_first_microbatch) {
  if (is_first_microbatch == false) {
    FP8EMU_CHECK(have_weight_cache_, "Linear: is_first_microbatch=false but no FP8 weight is cached "
                                     "(call with true first)");
    return;  // reuse the cached FP8 weight: no cast, no amax
  }
  // Both copies: row-wise for fprop, column-wise for dgrad.
  w_q_ = fwd_q_->quantize(*device_, weight.data.data(), out_features(), in_features(), scaling::TensorRole::kWeight,
                          scaling::Usage::kBoth, &stats.weight);
  last_scale_[1] = w_q_.scale;
  have_weight_cache_ = true;
}

void Linear::forward(const Matrix& x, Matrix& y, bool training, std::optional<bool> is_first_microbatch) {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  const int batch = x.rows, in = in_features(), out = out_features();
  if (precision_ == Precision::kFp32) {
    forward_fp32(x, y);
    if (training) saved_x_ = x;
  } else if (precision_ == Precision::kBf16) {
    // y = bf16(bf16(x) . bf16(W)^T + b): the transpose of the rounded W is the rounded transpose.
    Matrix xb(batch, in), wt(in, out);
    xb.data = bf16_copy(x.data.data(), x.size());
    emu::transpose(weight.rows, weight.cols, weight.data.data(), wt.data.data());
    backend::cpu_device().round_bf16(wt.data.data(), wt.size());
    y.resize(batch, out);
    emu::gemm_f32_nn(batch, out, in, xb.data.data(), wt.data.data(), y.data.data());
    add_bias(y, bias);
    backend::cpu_device().round_bf16(y.data.data(), y.size());
    if (training) saved_x_ = std::move(xb);
  } else {
    cast_weight(is_first_microbatch);
    // Row-wise for fprop; a training forward also keeps the column-wise copy for wgrad.
    x_q_ = fwd_q_->quantize(*device_, x.data.data(), batch, in, scaling::TensorRole::kInput,
                            training ? scaling::Usage::kBoth : scaling::Usage::kRowwise, &stats.input);
    last_scale_[0] = x_q_.scale;
    y.resize(batch, out);
    // fprop: x [batch, in] . W [out, in]^T
    scaling::gemm_tn(*device_, x_q_, scaling::Usage::kRowwise, w_q_, scaling::Usage::kRowwise, acc_fprop_,
                     y.data.data());
    add_bias(y, bias);
  }
  if (twin_error && precision_ != Precision::kFp32) {
    Matrix twin;
    forward_fp32(x, twin);
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double d = double(y.data[i]) - double(twin.data[i]);
      twin_error->err += d * d;
      twin_error->ref += double(twin.data[i]) * double(twin.data[i]);
    }
  }
  have_saved_ = training;
  saved_batch_ = batch;
}

void Linear::backward(const Matrix& dy, Matrix* dx) {
  FP8EMU_CHECK(have_saved_, "Linear: backward called without a preceding training forward");
  FP8EMU_CHECK(dy.rows == saved_batch_ && dy.cols == out_features(), "Linear: grad_output shape [",
               dy.rows, ", ", dy.cols, "] does not match the forward output [", saved_batch_, ", ",
               out_features(), "]");
  const int batch = dy.rows, in = in_features(), out = out_features();
  // db: sum over the batch in row order, fp32, from the unquantized gradient.
  for (int j = 0; j < out; ++j) grad_bias.data[std::size_t(j)] = core::column_sum(dy.data.data(), batch, out, j);

  if (precision_ == Precision::kFp32) {
    Matrix dyt(out, batch);
    emu::transpose(batch, out, dy.data.data(), dyt.data.data());
    emu::gemm_f32_nn(out, in, batch, dyt.data.data(), saved_x_.data.data(), grad_weight.data.data());
    if (dx) {
      dx->resize(batch, in);
      emu::gemm_f32_nn(batch, in, out, dy.data.data(), weight.data.data(), dx->data.data());
    }
  } else if (precision_ == Precision::kBf16) {
    // dW = bf16(dy)^T . bf16(x) in fp32; dx = bf16(bf16(dy) . bf16(W)).
    const std::vector<float> dyb = bf16_copy(dy.data.data(), dy.size());
    Matrix dyt(out, batch);
    emu::transpose(batch, out, dyb.data(), dyt.data.data());
    emu::gemm_f32_nn(out, in, batch, dyt.data.data(), saved_x_.data.data(), grad_weight.data.data());
    if (dx) {
      const std::vector<float> wb = bf16_copy(weight.data.data(), weight.size());
      dx->resize(batch, in);
      emu::gemm_f32_nn(batch, in, out, dyb.data(), wb.data(), dx->data.data());
      backend::cpu_device().round_bf16(dx->data.data(), dx->size());
    }
  } else {
    const scaling::QuantizedTensor dy_q = bwd_q_->quantize(*device_, dy.data.data(), batch, out,
                                                           scaling::TensorRole::kGradOutput, scaling::Usage::kBoth,
                                                           &stats.grad_output);
    last_scale_[2] = dy_q.scale;
    // wgrad: dy^T [out, K=batch] . x^T [in, K=batch]^T
    scaling::gemm_tn(*device_, dy_q, scaling::Usage::kColumnwise, x_q_, scaling::Usage::kColumnwise, acc_wgrad_,
                     grad_weight.data.data());
    if (dx) {
      dx->resize(batch, in);
      // dgrad: dy [batch, K=out] . W^T [in, K=out]^T
      scaling::gemm_tn(*device_, dy_q, scaling::Usage::kRowwise, w_q_, scaling::Usage::kColumnwise, acc_dgrad_,
                       dx->data.data());
    }
  }
  have_saved_ = false;
}

void Linear::set_accumulation(const emu::GemmAccumulation& fprop, const emu::GemmAccumulation& dgrad,
                              const emu::GemmAccumulation& wgrad) {
  FP8EMU_CHECK(supports_accumulation_models() ||
                   (fprop.model == emu::Accumulation::kFp32 && dgrad.model == emu::Accumulation::kFp32 &&
                    wgrad.model == emu::Accumulation::kFp32),
               "Linear: the ", scaling::recipe_name(recipe_),
               " recipe supports only fp32 accumulation (tensor-core models are per-tensor only for now)");
  acc_fprop_ = fprop;
  acc_dgrad_ = dgrad;
  acc_wgrad_ = wgrad;
}

void Linear::update_forward_scales() {
  if (precision_ == Precision::kFp8) fwd_q_->update_scales();
}

void Linear::update_backward_scales() {
  if (precision_ == Precision::kFp8) bwd_q_->update_scales();
}

}  // namespace fp8emu::nn
