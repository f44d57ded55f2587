// Linear layer in FP32 or emulated FP8 (see include/fp8emu/nn/linear.hpp).
#include "fp8emu/nn/linear.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/nn/linear_step.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {
namespace {

void add_bias(Matrix& y, const Matrix& bias) {
  for (int i = 0; i < y.rows; ++i) {
    float* r = y.row(i);
    for (int j = 0; j < y.cols; ++j) r[j] = core::bias_add(r[j], bias.data[std::size_t(j)]);
  }
}

std::unique_ptr<scaling::Quantizer> clone_of(const std::unique_ptr<scaling::Quantizer>& q) {
  return q ? q->clone() : nullptr;
}

constexpr int kX = 0, kW = 1, kDy = 2;  // roles in the last-scale and counter arrays
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using backend::stats_of;

// The operand of a cast of [rows, cols] in buffers made for as many or more rows.
scaling::DeviceOperand operand_view(const scaling::DeviceQuantizedTensor& t, const scaling::Quantizer& q, int rows,
                                    int cols, scaling::TensorRole role, scaling::Usage usage) {
  scaling::DeviceOperand o = scaling::device_operand(q, rows, cols, role, usage);
  const scaling::DeviceOperand& buf = t.operand();
  if (o.has(scaling::Usage::kRowwise)) {
    o.rowwise_data = buf.rowwise_data;
    o.rowwise_scale_inv = buf.rowwise_scale_inv;
    o.rowwise_amax = buf.rowwise_amax;
  }
  if (o.has(scaling::Usage::kColumnwise)) {
    o.columnwise_data = buf.columnwise_data;
    o.columnwise_scale_inv = buf.columnwise_scale_inv;
    o.columnwise_amax = buf.columnwise_amax;
  }
  o.scale = buf.scale;
  return o;
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
      device_(o.return_device_ ? o.return_device_ : o.device_),
      recipe_(o.recipe_),
      fwd_q_(clone_of(o.fwd_q_)),
      bwd_q_(clone_of(o.bwd_q_)),
      idle_fwd_state_(o.idle_fwd_state_),
      idle_bwd_state_(o.idle_bwd_state_),
      acc_fprop_(o.acc_fprop_),
      acc_dgrad_(o.acc_dgrad_),
      acc_wgrad_(o.acc_wgrad_),
      bf16_acc_(o.bf16_acc_),
      fp32_acc_(o.fp32_acc_),
      rounding_stream_(o.rounding_stream_) {
  // The copy lives on the host (its quantizers' state too), with the source's current values; its
  // step buffers are made at its first call (no cached weight, no saved forward).
  if (o.resident_) o.copy_to(*this);
  if (fwd_q_) fwd_q_->to_host();
  if (bwd_q_) bwd_q_->to_host();
  carried_scales_ = {o.last_scale(0), o.last_scale(1), o.last_scale(2)};
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
  FP8EMU_CHECK(!resident_, "Linear: set_recipe on a device-resident layer (call to_host() first)");
  recipe_ = recipe;
  fwd_q_ = std::move(fwd);
  bwd_q_ = std::move(bwd);
  fwd_q_->seed_rounding(rounding_stream_);
  bwd_q_->seed_rounding(rounding_stream_);
  idle_fwd_state_ = scaling::DelayedScalingState(scaling::num_slots(scaling::Direction::kForward), 1);
  idle_bwd_state_ = scaling::DelayedScalingState(scaling::num_slots(scaling::Direction::kBackward), 1);
  carried_scales_ = {kNaN, kNaN, kNaN};
  buffers_on_ = nullptr;  // the step buffers follow the new quantizers at the next call
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

std::vector<float> Linear::save_state(scaling::Direction direction) const {
  return (direction == scaling::Direction::kForward ? fwd_q_ : bwd_q_)->save_state();
}
void Linear::load_state(scaling::Direction direction, const std::vector<float>& state) {
  (direction == scaling::Direction::kForward ? fwd_q_ : bwd_q_)->load_state(state);
}

void Linear::init(Rng& rng) {
  // Each layer's stochastic-rounding stream from the generator's state here, peeked, not drawn:
  // the weights of every recipe and precision stay those of the same seed.
  rounding_stream_ = rng.peek();
  fwd_q_->seed_rounding(rounding_stream_);
  bwd_q_->seed_rounding(rounding_stream_);
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

// ---- buffers -------------------------------------------------------------------------------------

void Linear::set_device(const backend::Device& d) {
  FP8EMU_CHECK(!resident_, "Linear: set_device on a device-resident layer (call to_host() first)");
  if (device_ == &d) return;
  if (buffers_on_) carried_scales_ = {last_scale(0), last_scale(1), last_scale(2)};
  device_ = &d;
  buffers_on_ = nullptr;
}

void Linear::set_precision(Precision p) {
  FP8EMU_CHECK(!resident_, "Linear: set_precision on a device-resident layer (call to_host() first)");
  if (p == precision_) return;
  if (buffers_on_) carried_scales_ = {last_scale(0), last_scale(1), last_scale(2)};
  precision_ = p;
  buffers_on_ = nullptr;
}

// The step's buffers on device_, made again when the device, the precision or the recipe changed
// (the weight cache and a saved forward are then gone; the last scales carry over).
void Linear::make_buffers() {
  if (buffers_on_ == device_) return;
  const backend::Device& d = *device_;
  if (buffers_on_ && buffers_on_ != device_) buffers_on_ = nullptr;  // scales carried by set_device
  capacity_ = 0;
  forward_rows_ = -1;
  saved_x_ = nullptr;
  have_weight_cache_ = false;
  xq_ = {};
  dyq_ = {};
  for (Tensor<float>* t : {&xs_, &dyt_, &xb_, &dyb_, &twin_wt_, &twin_y_, &io_x_, &io_y_}) *t = Tensor<float>();
  const int in = in_features(), out = out_features();
  last_scale_ = Tensor<float>(d, 1, 3);
  last_scale_.upload(carried_scales_.data());
  counters_ = Tensor<backend::CastCounters>(d, 1, 3);
  if (!d.host_memory()) {
    w_ = Tensor<float>(d, out, in);
    b_ = Tensor<float>(d, 1, out);
    gw_ = Tensor<float>(d, out, in);
    gb_ = Tensor<float>(d, 1, out);
  } else {
    for (Tensor<float>* t : {&w_, &b_, &gw_, &gb_}) *t = Tensor<float>();
  }
  wt_ = Tensor<float>();
  wb_ = Tensor<float>();
  wq_ = {};
  if (precision_ == Precision::kFp8)
    wq_ = scaling::DeviceQuantizedTensor(
        d, scaling::device_operand(*fwd_q_, out, in, scaling::TensorRole::kWeight, scaling::Usage::kBoth));
  else
    wt_ = Tensor<float>(d, in, out);
  if (rounds_operands()) wb_ = Tensor<float>(d, out, in);
  buffers_on_ = device_;
}

void Linear::reserve(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *device_;
  const int in = in_features(), out = out_features();
  using scaling::TensorRole;
  using scaling::Usage;
  if (precision_ == Precision::kFp8) {
    xq_ = scaling::DeviceQuantizedTensor(d, scaling::device_operand(*fwd_q_, rows, in, TensorRole::kInput, Usage::kBoth));
    dyq_ = scaling::DeviceQuantizedTensor(
        d, scaling::device_operand(*bwd_q_, rows, out, TensorRole::kGradOutput, Usage::kBoth));
  } else {
    xs_ = Tensor<float>(d, rows, in);
    dyt_ = Tensor<float>(d, out, rows);
    if (rounds_operands()) {
      xb_ = Tensor<float>(d, rows, in);
      dyb_ = Tensor<float>(d, rows, out);
    }
  }
  if (!d.host_memory()) {
    io_x_ = Tensor<float>(d, rows, std::max(in, out));
    io_y_ = Tensor<float>(d, rows, std::max(in, out));
  }
  capacity_ = rows;
}

float Linear::last_scale(int role) const {
  if (buffers_on_ != device_ || last_scale_.size() == 0) return carried_scales_[std::size_t(role)];
  float s = kNaN;
  device_->download(&s, last_scale_.get() + role, sizeof(float));
  return s;
}

void Linear::take_counts() {
  if (resident_ || precision_ != Precision::kFp8) return;
  backend::CastCounters c[3];
  counters_.download(c);
  emu::QuantizeStats* st[3] = {&stats.input, &stats.weight, &stats.grad_output};
  for (int r = 0; r < 3; ++r) *st[r] += stats_of(c[r]);
  device_->fill_zero(counters_.get(), counters_.bytes());
}

// ---- the step program ----------------------------------------------------------------------------

void Linear::cast_weight(std::optional<bool> is_first_microbatch) {
  if (is_first_microbatch == false) {
    FP8EMU_CHECK(have_weight_cache_, "Linear: is_first_microbatch=false but no FP8 weight is cached "
                                     "(call with true first)");
    return;  // reuse the cached FP8 weight: no cast, no amax
  }
  // Both copies: row-wise for fprop, column-wise for dgrad.
  w_op_ = operand_view(wq_, *fwd_q_, out_features(), in_features(), scaling::TensorRole::kWeight,
                       scaling::Usage::kBoth);
  fwd_q_->cast(*device_, w(), out_features(), in_features(), scaling::TensorRole::kWeight, w_op_,
               counters_.get() + kW);
  if (w_op_.mode == scaling::ScalingMode::kPerTensor) device_->copy(last_scale_.get() + kW, w_op_.scale, sizeof(float));
  have_weight_cache_ = true;
}

// Linear::forward on device pointers: fp32 y = x W^T + b; bf16 y = bf16(bf16(x) . bf16(W)^T + b);
// FP8: the weight cast (both copies), the input cast (both copies when training), fprop, bias.
void Linear::step_forward(const float* x, int rows, float* y, bool training, std::optional<bool> is_first_microbatch,
                          bool keep_x) {
  FP8EMU_CHECK(rows >= 0, "Linear: negative batch ", rows);
  make_buffers();
  reserve(rows);
  const backend::Device& d = *device_;
  const int in = in_features(), out = out_features();
  const std::size_t nx = std::size_t(rows) * std::size_t(in), ny = std::size_t(rows) * std::size_t(out);
  forward_rows_ = -1;
  if (precision_ == Precision::kBf16) {
    d.copy(xb_.get(), x, nx * sizeof(float));
    d.round_bf16(xb_.get(), nx);
    d.copy(wb_.get(), w(), wb_.bytes());  // bf16(W), kept for dgrad: W changes only after backward
    d.round_bf16(wb_.get(), wb_.size());
    d.transpose_f32(out, in, wb_.get(), wt_.get());  // the transpose of the rounded W is the rounded transpose
    bf16_gemm(rows, out, in, xb_.get(), wt_.get(), y);
    d.bias_add(y, b(), rows, out);
    d.round_bf16(y, ny);
    saved_x_ = xb_.get();
  } else if (precision_ == Precision::kFp32 && fp32_acc_ != Accumulation::kFp32) {
    d.copy(xb_.get(), x, nx * sizeof(float));
    d.round_tf32(xb_.get(), nx);
    d.copy(wb_.get(), w(), wb_.bytes());  // tf32(W), kept for dgrad
    d.round_tf32(wb_.get(), wb_.size());
    d.transpose_f32(out, in, wb_.get(), wt_.get());
    d.gemm_tc_nn(rows, out, in, xb_.get(), wt_.get(), fp32_acc_, y);
    d.bias_add(y, b(), rows, out);
    saved_x_ = xb_.get();
  } else if (precision_ == Precision::kFp32) {
    d.transpose_f32(out, in, w(), wt_.get());
    d.gemm_f32_nn(rows, out, in, x, wt_.get(), y);
    d.bias_add(y, b(), rows, out);
    if (keep_x) d.copy(xs_.get(), x, nx * sizeof(float));
    saved_x_ = keep_x ? xs_.get() : x;
  } else {
    cast_weight(is_first_microbatch);
    // Row-wise for fprop; a training forward also keeps the column-wise copy for wgrad.
    x_op_ = operand_view(xq_, *fwd_q_, rows, in, scaling::TensorRole::kInput,
                         training ? scaling::Usage::kBoth : scaling::Usage::kRowwise);
    fp8_linear_fprop(d, *fwd_q_, x, rows, x_op_, w_op_, b(), acc_fprop_, y, counters_.get() + kX);
    if (x_op_.mode == scaling::ScalingMode::kPerTensor) d.copy(last_scale_.get() + kX, x_op_.scale, sizeof(float));
  }
  accumulate_twin(x, rows, y);
  if (training) forward_rows_ = rows;
}

// forward_fp32 of the same x on the device (W^T, gemm_f32_nn, bias), then both outputs on the host,
// err += (y - twin)^2 and ref += twin^2 in double in element order.
void Linear::accumulate_twin(const float* x, int rows, const float* y) {
  if (!twin_error || precision_ == Precision::kFp32) return;
  const backend::Device& d = *device_;
  const int in = in_features(), out = out_features();
  const std::size_t n = std::size_t(rows) * std::size_t(out);
  if (twin_wt_.size() == 0) twin_wt_ = Tensor<float>(d, in, out);
  if (twin_y_.size() < n) twin_y_ = Tensor<float>(d, rows, out);
  d.transpose_f32(out, in, w(), twin_wt_.get());
  d.gemm_f32_nn(rows, out, in, x, twin_wt_.get(), twin_y_.get());
  d.bias_add(twin_y_.get(), b(), rows, out);
  std::vector<float> hy(n), ht(n);
  d.download(hy.data(), y, n * sizeof(float));
  d.download(ht.data(), twin_y_.get(), n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const double e = double(hy[i]) - double(ht[i]);
    twin_error->err += e * e;
    twin_error->ref += double(ht[i]) * double(ht[i]);
  }
}

// Linear::backward on device pointers: db = column sum of dy; fp32 dW = dy^T x, dx = dy W; bf16 the
// same on bf16(dy), bf16(x), bf16(W) with dx rounded; FP8: the grad_output cast (both copies), wgrad
// dy^T . x^T, dgrad dy . W.
void Linear::step_backward(const float* dy, int rows, float* dx) {
  FP8EMU_CHECK(forward_rows_ >= 0, "Linear: backward called without a preceding training forward");
  FP8EMU_CHECK(rows == forward_rows_, "Linear: grad_output has ", rows, " rows, the forward output ", forward_rows_);
  const backend::Device& d = *device_;
  const int in = in_features(), out = out_features();
  const std::size_t ndy = std::size_t(rows) * std::size_t(out);
  if (precision_ == Precision::kBf16) {
    d.column_sum(dy, rows, out, gb());  // from the unquantized gradient
    d.copy(dyb_.get(), dy, ndy * sizeof(float));  // bf16(dy) once, for both GEMMs
    d.round_bf16(dyb_.get(), ndy);
    d.transpose_f32(rows, out, dyb_.get(), dyt_.get());
    bf16_gemm(out, in, rows, dyt_.get(), saved_x_, gw());
    if (dx) {
      bf16_gemm(rows, in, out, dyb_.get(), wb_.get(), dx);  // wb_: the forward's bf16(W)
      d.round_bf16(dx, std::size_t(rows) * std::size_t(in));
    }
  } else if (precision_ == Precision::kFp32 && fp32_acc_ != Accumulation::kFp32) {
    d.column_sum(dy, rows, out, gb());
    d.copy(dyb_.get(), dy, ndy * sizeof(float));  // tf32(dy) once, for both GEMMs
    d.round_tf32(dyb_.get(), ndy);
    d.transpose_f32(rows, out, dyb_.get(), dyt_.get());
    d.gemm_tc_nn(out, in, rows, dyt_.get(), saved_x_, fp32_acc_, gw());
    if (dx) d.gemm_tc_nn(rows, in, out, dyb_.get(), wb_.get(), fp32_acc_, dx);  // wb_: the forward's tf32(W)
  } else if (precision_ == Precision::kFp32) {
    d.column_sum(dy, rows, out, gb());
    d.transpose_f32(rows, out, dy, dyt_.get());
    d.gemm_f32_nn(out, in, rows, dyt_.get(), saved_x_, gw());
    if (dx) d.gemm_f32_nn(rows, in, out, dy, w(), dx);
  } else {
    scaling::DeviceOperand dy_op =
        operand_view(dyq_, *bwd_q_, rows, out, scaling::TensorRole::kGradOutput, scaling::Usage::kBoth);
    fp8_linear_backward(d, *bwd_q_, dy, rows, dy_op, x_op_, w_op_, acc_dgrad_, acc_wgrad_, dx, gw(), gb(),
                        counters_.get() + kDy);
    if (dy_op.mode == scaling::ScalingMode::kPerTensor) d.copy(last_scale_.get() + kDy, dy_op.scale, sizeof(float));
  }
  forward_rows_ = -1;
}

// ---- the host calls --------------------------------------------------------------------------------

// Runs the step where the parameters live: on device_ for a device of host memory or a resident
// layer; a host layer on a device of its own memory stages the call (host pointers: x and its
// parameters up, y down).
void Linear::run_forward(const float* x, int rows, float* y, bool training, std::optional<bool> is_first_microbatch,
                         bool keep_x) {
  FP8EMU_CHECK(rows >= 0, "Linear: negative batch ", rows);
  if (!staged()) {
    step_forward(x, rows, y, training, is_first_microbatch, keep_x);
    take_counts();
    return;
  }
  const backend::Device& d = *device_;
  make_buffers();
  reserve(rows);
  w_.upload(weight.data.data());
  b_.upload(bias.data.data());
  d.upload(io_x_.get(), x, std::size_t(rows) * std::size_t(in_features()) * sizeof(float));
  step_forward(io_x_.get(), rows, io_y_.get(), training, is_first_microbatch, true);
  d.download(y, io_y_.get(), std::size_t(rows) * std::size_t(out_features()) * sizeof(float));
  take_counts();
}

void Linear::run_backward(const float* dy, int rows, float* dx) {
  FP8EMU_CHECK(forward_rows_ >= 0, "Linear: backward called without a preceding training forward");
  FP8EMU_CHECK(rows == forward_rows_, "Linear: grad_output has ", rows, " rows, the forward output ", forward_rows_);
  if (!staged()) {
    step_backward(dy, rows, dx);
    take_counts();
    return;
  }
  const backend::Device& d = *device_;
  d.upload(io_x_.get(), dy, std::size_t(rows) * std::size_t(out_features()) * sizeof(float));
  step_backward(io_x_.get(), rows, dx ? io_y_.get() : nullptr);
  if (dx) d.download(dx, io_y_.get(), std::size_t(rows) * std::size_t(in_features()) * sizeof(float));
  gw_.download(grad_weight.data.data());
  gb_.download(grad_bias.data.data());
  take_counts();
}

void Linear::forward(const Matrix& x, Matrix& y, bool training, std::optional<bool> is_first_microbatch) {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  FP8EMU_CHECK(!resident_ || device_->host_memory(), "Linear: the Matrix forward of a layer resident on the ",
               device_->name(), " device (call to_host() first)");
  y.resize(x.rows, out_features());
  run_forward(x.data.data(), x.rows, y.data.data(), training, is_first_microbatch, true);
}

void Linear::backward(const Matrix& dy, Matrix* dx) {
  FP8EMU_CHECK(forward_rows_ >= 0, "Linear: backward called without a preceding training forward");
  FP8EMU_CHECK(dy.rows == forward_rows_ && dy.cols == out_features(), "Linear: grad_output shape [", dy.rows, ", ",
               dy.cols, "] does not match the forward output [", forward_rows_, ", ", out_features(), "]");
  FP8EMU_CHECK(!resident_ || device_->host_memory(), "Linear: the Matrix backward of a layer resident on the ",
               device_->name(), " device (call to_host() first)");
  if (dx) dx->resize(dy.rows, in_features());
  run_backward(dy.data.data(), dy.rows, dx ? dx->data.data() : nullptr);
}

// ---- residency -------------------------------------------------------------------------------------

std::string Linear::device_unsupported() const {
  if (twin_error) return "measures its FP32 twin error (Linear::twin_error)";
  if (precision_ != Precision::kFp8) return {};
  std::string why = fwd_q_->device_unsupported();
  return why.empty() ? bwd_q_->device_unsupported() : why;
}

void Linear::to_device() {
  if (resident_) return;
  const std::string why = device_unsupported();
  FP8EMU_CHECK(why.empty(), "device-resident Linear: the layer ", why);
  make_buffers();
  const backend::Device& d = *device_;
  if (!d.host_memory()) {
    w_.upload(weight.data.data());
    b_.upload(bias.data.data());
    gw_.upload(grad_weight.data.data());
    gb_.upload(grad_bias.data.data());
  }
  // The counts so far carry on there (stats is reset by the layer's owner).
  const backend::CastCounters c[3] = {backend::counters_of(stats.input), backend::counters_of(stats.weight),
                                      backend::counters_of(stats.grad_output)};
  counters_.upload(c);
  if (precision_ == Precision::kFp8) {
    try {
      fwd_q_->to_device(d);
      bwd_q_->to_device(d);
    } catch (...) {
      fwd_q_->to_host();
      throw;
    }
  }
  resident_ = true;
}

void Linear::to_host() {
  if (!resident_) return;
  const backend::Device& d = *device_;
  if (!d.host_memory()) {
    w_.download(weight.data.data());
    b_.download(bias.data.data());
    gw_.download(grad_weight.data.data());
    gb_.download(grad_bias.data.data());
  }
  backend::CastCounters c[3];
  counters_.download(c);
  emu::QuantizeStats* st[3] = {&stats.input, &stats.weight, &stats.grad_output};
  for (int r = 0; r < 3; ++r) *st[r] = stats_of(c[r]);
  d.fill_zero(counters_.get(), counters_.bytes());
  fwd_q_->to_host();
  bwd_q_->to_host();
  resident_ = false;
  if (return_device_) {
    set_device(*return_device_);
    return_device_ = nullptr;
  }
}

void Linear::move_to_device(const backend::Device& device) {
  if (resident_ && device_ == &device) return;
  to_host();
  const backend::Device* previous = device_;
  set_device(device);
  to_device();
  return_device_ = previous;
}

void Linear::forward(const float* x, int rows, float* y, bool training) {
  run_forward(x, rows, y, training, std::nullopt, false);
}

void Linear::backward(const float* dy, int rows, float* dx) { run_backward(dy, rows, dx); }

void Linear::update_scales() {
  update_forward_scales();
  update_backward_scales();
}

void Linear::reset_stats() {
  stats = {};
  if (buffers_on_ == device_ && counters_.size() > 0) device_->fill_zero(counters_.get(), counters_.bytes());
}

void Linear::params(std::vector<DeviceParam>& out) {
  FP8EMU_CHECK(!staged(), "Linear: params() of a host layer on the ", device_->name(),
               " device: its parameters are the Matrix fields (to_device() first)");
  make_buffers();
  out.push_back({w(), gw(), weight.size()});
  out.push_back({b(), gb(), bias.size()});
}

void Linear::copy_to(Linear& dst) const {
  FP8EMU_CHECK(dst.in_features() == in_features() && dst.out_features() == out_features(),
               "device-resident Linear: download into a layer of another shape");
  FP8EMU_CHECK(&dst == this || !dst.resident_, "Linear: copy_to into a device-resident layer (to_host() it first)");
  auto& self = const_cast<Linear&>(*this);  // the pointers below are only read
  const backend::Device& d = *device_;
  if (resident_ && !d.host_memory()) {
    d.download(dst.weight.data.data(), self.w(), weight.size() * sizeof(float));
    d.download(dst.bias.data.data(), self.b(), bias.size() * sizeof(float));
    d.download(dst.grad_weight.data.data(), self.gw(), grad_weight.size() * sizeof(float));
    d.download(dst.grad_bias.data.data(), self.gb(), grad_bias.size() * sizeof(float));
  } else if (&dst != this) {
    dst.weight.data = weight.data;
    dst.bias.data = bias.data;
    dst.grad_weight.data = grad_weight.data;
    dst.grad_bias.data = grad_bias.data;
  }
  if (precision_ != Precision::kFp8) return;
  if (resident_) {
    backend::CastCounters c[3];
    counters_.download(c);
    emu::QuantizeStats* st[3] = {&dst.stats.input, &dst.stats.weight, &dst.stats.grad_output};
    for (int r = 0; r < 3; ++r) *st[r] = stats_of(c[r]);
  } else if (&dst != this) {
    dst.stats = stats;
  }
  const std::array<float, 3> last = {last_scale(0), last_scale(1), last_scale(2)};
  dst.carried_scales_ = last;
  if (dst.buffers_on_ == dst.device_ && dst.last_scale_.size() > 0) dst.last_scale_.upload(last.data());
  // The quantizers' state: a copy brought to the host (the device's copy stays where it is).
  for (auto [from, to] : {std::pair{fwd_q_.get(), dst.fwd_q_.get()}, std::pair{bwd_q_.get(), dst.bwd_q_.get()}}) {
    const scaling::DelayedScalingState* s = from->amax_history_state();
    scaling::DelayedScalingState* t = to->amax_history_state();
    if (!s || !t) continue;
    std::unique_ptr<scaling::Quantizer> c = from->clone();
    c->to_host();
    t->restore(c->amax_history_state()->scales(), c->amax_history_state()->history_values());
  }
}

void Linear::set_accumulation(const emu::GemmAccumulation& fprop, const emu::GemmAccumulation& dgrad,
                              const emu::GemmAccumulation& wgrad) {
  if (!supports_accumulation_models())
    for (const emu::GemmAccumulation* a : {&fprop, &dgrad, &wgrad})
      FP8EMU_CHECK(a->promotion_interval == 0 && a->split_k <= 1, "Linear: the ", scaling::recipe_name(recipe_),
                   " recipe's block-scaled GEMMs promote every scale block's partial: a model takes no promotion "
                   "interval or split-K there, got ", a->promotion_interval, " and ", a->split_k);
  acc_fprop_ = fprop;
  acc_dgrad_ = dgrad;
  acc_wgrad_ = wgrad;
}

void Linear::set_bf16_accumulation(Accumulation model) {
  const AccumulationModel& m = model_of(model);
  FP8EMU_CHECK(layer_accumulation_fits(model, core::MmaOperands::kBf16),
               "Linear: the bf16 GEMMs sum as fp32 or on a bf16 tensor core (ampere-bf16, ada-bf16, hopper-bf16, "
               "blackwell-bf16), not '", m.name, "'");
  bf16_acc_ = model;
}

void Linear::set_fp32_accumulation(Accumulation model) {
  const AccumulationModel& m = model_of(model);
  FP8EMU_CHECK(layer_accumulation_fits(model, core::MmaOperands::kTf32),
               "Linear: the fp32 GEMMs sum as fp32 or on a tf32 tensor core (ampere-tf32, ada-tf32, hopper-tf32, "
               "blackwell-tf32), not '", m.name, "'");
  FP8EMU_CHECK(!resident_, "Linear: set_fp32_accumulation on a device-resident layer (to_host() it first)");
  if (model != fp32_acc_) buffers_on_ = nullptr;  // the rounded copies are made (or dropped) at the next call
  fp32_acc_ = model;
}

bool Linear::rounds_operands() const {
  return precision_ == Precision::kBf16 || (precision_ == Precision::kFp32 && fp32_acc_ != Accumulation::kFp32);
}

// A GEMM of the bf16 layer: D [M, N] = A [M, K] B [K, N] on bf16 values, summed as bf16_acc_ says.
void Linear::bf16_gemm(int M, int N, int K, const float* A, const float* B, float* D) const {
  if (bf16_acc_ == Accumulation::kFp32) device_->gemm_bf16_nn(M, N, K, A, B, D);
  else device_->gemm_tc_nn(M, N, K, A, B, bf16_acc_, D);
}

void Linear::update_forward_scales() {
  if (precision_ == Precision::kFp8) fwd_q_->update_scales();
}

void Linear::update_backward_scales() {
  if (precision_ == Precision::kFp8) bwd_q_->update_scales();
}

Linear resident_copy(const backend::Device& device, const Linear& src) {
  Linear l(src);
  l.move_to_device(device);
  return l;
}

}  // namespace fp8emu::nn
