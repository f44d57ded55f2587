// Linear layer in FP32 or emulated FP8 (see include/fp8emu/nn/linear.hpp).
#include "fp8emu/nn/linear.hpp"

#include <cfloat>
#include <cmath>
#include <limits>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {
namespace {

constexpr int kFloat8Block = 128;    // TE Float8BlockScaling: 1x128 blocks, 128x128 weight tiles

int history_len_of(const scaling::Recipe& r) {
  const auto* d = std::get_if<scaling::DelayedScaling>(&r);
  return d ? std::max(1, d->amax_history_len) : 1;
}

void add_bias(Matrix& y, const Matrix& bias) {
  for (int i = 0; i < y.rows; ++i) {
    float* r = y.row(i);
    for (int j = 0; j < y.cols; ++j) r[j] += bias.data[std::size_t(j)];
  }
}

}  // namespace

Linear::Linear(int in_features, int out_features, Precision precision, const scaling::Recipe& recipe)
    : precision_(precision), recipe_(recipe), fwd_state_(3, 1), bwd_state_(2, 1) {
  FP8EMU_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in=",
               in_features, " out=", out_features);
  set_recipe(recipe);
  weight = Matrix(out_features, in_features);
  bias = Matrix(1, out_features);
  grad_weight = Matrix(out_features, in_features);
  grad_bias = Matrix(1, out_features);
}

void Linear::set_recipe(const scaling::Recipe& recipe) {
  scaling::validate(recipe);
  recipe_ = recipe;
  fwd_state_ = scaling::DelayedScalingState(3, history_len_of(recipe));
  bwd_state_ = scaling::DelayedScalingState(2, history_len_of(recipe));
  fwd_format_ = scaling::forward_format(scaling::recipe_format(recipe_));
  bwd_format_ = scaling::backward_format(scaling::recipe_format(recipe_));
  for (float& sc : last_scale_) sc = std::numeric_limits<float>::quiet_NaN();
  have_weight_cache_ = false;
  if (!is_block_recipe())  // TE's choice on Hopper: fprop fast accumulation, dgrad/wgrad split
    set_accumulation(emu::te_fprop(emu::Accumulation::kHopper), emu::te_dgrad(emu::Accumulation::kHopper),
                     emu::te_wgrad(emu::Accumulation::kHopper));
  else
    set_accumulation({}, {}, {});
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

// Per-tensor cast of m into q under delayed or current scaling; records the scale used in
// last_scale_[role] and returns scale_inv = RN(1/scale).
float Linear::per_tensor_cast(const Matrix& m, Format fmt, bool forward, int slot, int role,
                              std::vector<std::uint8_t>& q, emu::QuantizeStats& st) {
  float* amax = nullptr;  // current scaling: TE casts with a null amax pointer after its amax kernel
  float scale;
  if (const auto* cur = std::get_if<scaling::CurrentScaling>(&recipe_)) {
    scale = core::compute_scale_from_amax(kernels_->compute_amax(m.data.data(), m.size()), max_finite_f32(fmt),
                                          cur->use_power_2_scales, cur->amax_epsilon, FLT_MAX);
  } else {
    scaling::DelayedScalingState& state = forward ? fwd_state_ : bwd_state_;
    amax = state.amax_ptr(slot);
    scale = state.scale(slot);
  }
  q.resize(m.size());
  st += kernels_->quantize(m.data.data(), m.size(), scale, fmt, q.data(), amax);
  last_scale_[role] = scale;
  return emu::scale_inv_of(scale);
}

// 1D block cast of an activation or gradient (or an MXFP8 weight) along `axis`.
emu::BlockQuantized Linear::block_cast(const Matrix& m, emu::BlockAxis axis, Format fmt,
                                       emu::QuantizeStats* st) const {
  if (const auto* mx = std::get_if<scaling::MXFP8BlockScaling>(&recipe_))
    return kernels_->quantize_mxfp8(m.data.data(), m.rows, m.cols, axis, fmt, mx->rule, st);
  const auto& bl = std::get<scaling::Float8BlockScaling>(recipe_);
  return kernels_->quantize_block_1d(m.data.data(), m.rows, m.cols, axis, fmt, kFloat8Block, !bl.use_f32_scales,
                                bl.amax_epsilon, st);
}

void Linear::cast_weight(std::optional<bool> is_first_microbatch) {
  if (is_first_microbatch == false) {
    FP8EMU_CHECK(have_weight_cache_, "Linear: is_first_microbatch=false but no FP8 weight is cached "
                                     "(call with true first)");
    return;  // reuse the cached FP8 weight: no cast, no amax
  }
  const int out = out_features(), in = in_features();
  if (std::holds_alternative<scaling::MXFP8BlockScaling>(recipe_)) {
    w_row_ = block_cast(weight, emu::BlockAxis::kRowwise, fwd_format_, &stats.weight);
    w_col_ = block_cast(weight, emu::BlockAxis::kColumnwise, fwd_format_, nullptr);
  } else if (const auto* bl = std::get_if<scaling::Float8BlockScaling>(&recipe_)) {
    emu::BlockQuantized2D w = kernels_->quantize_block_2d(weight.data.data(), out, in, fwd_format_, kFloat8Block,
                                                     !bl->use_f32_scales, bl->amax_epsilon, &stats.weight);
    w_row_ = std::move(w.rowwise);
    w_col_ = std::move(w.columnwise);
  } else {
    sinv_w_ = per_tensor_cast(weight, fwd_format_, true, kWeight, 1, w_q_, stats.weight);
  }
  have_weight_cache_ = true;
}

void Linear::forward(const Matrix& x, Matrix& y, bool training, std::optional<bool> is_first_microbatch) {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  const int batch = x.rows, in = in_features(), out = out_features();
  if (precision_ == Precision::kFp32) {
    forward_fp32(x, y);
    if (training) saved_x_ = x;
  } else if (is_block_recipe()) {
    cast_weight(is_first_microbatch);
    const emu::BlockQuantized x_row = block_cast(x, emu::BlockAxis::kRowwise, fwd_format_, &stats.input);
    if (training) x_col_ = block_cast(x, emu::BlockAxis::kColumnwise, fwd_format_, nullptr);
    y.resize(batch, out);
    kernels_->gemm_fp8_block_tn(x_row, w_row_, y.data.data());
    add_bias(y, bias);
  } else {
    cast_weight(is_first_microbatch);
    sinv_x_ = per_tensor_cast(x, fwd_format_, true, kInput, 0, x_q_, stats.input);
    y.resize(batch, out);
    kernels_->gemm_fp8_tn(batch, out, in, x_q_.data(), fwd_format_, sinv_x_, w_q_.data(), fwd_format_, sinv_w_,
                     acc_fprop_, y.data.data());  // x [batch, in] . W [out, in]^T
    add_bias(y, bias);
  }
  if (twin_error && precision_ == Precision::kFp8) {
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
  for (int j = 0; j < out; ++j) grad_bias.data[std::size_t(j)] = 0.0f;
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < out; ++j) grad_bias.data[std::size_t(j)] += dy(i, j);

  if (precision_ == Precision::kFp32) {
    Matrix dyt(out, batch);
    emu::transpose(batch, out, dy.data.data(), dyt.data.data());
    emu::gemm_f32_nn(out, in, batch, dyt.data.data(), saved_x_.data.data(), grad_weight.data.data());
    if (dx) {
      dx->resize(batch, in);
      emu::gemm_f32_nn(batch, in, out, dy.data.data(), weight.data.data(), dx->data.data());
    }
  } else if (is_block_recipe()) {
    const emu::BlockQuantized dy_row = block_cast(dy, emu::BlockAxis::kRowwise, bwd_format_, &stats.grad_output);
    const emu::BlockQuantized dy_col = block_cast(dy, emu::BlockAxis::kColumnwise, bwd_format_, nullptr);
    kernels_->gemm_fp8_block_tn(dy_col, x_col_, grad_weight.data.data());  // [out, K=batch] x [in, K=batch]
    if (dx) {
      dx->resize(batch, in);
      kernels_->gemm_fp8_block_tn(dy_row, w_col_, dx->data.data());  // [batch, K=out] x [in, K=out]
    }
  } else {
    std::vector<std::uint8_t> dy_q;
    const float sinv_dy = per_tensor_cast(dy, bwd_format_, false, kGradOutput, 2, dy_q, stats.grad_output);
    // TE's transposed FP8 copies (Hopper/Ada take only the TN layout): dy^T, x^T, W^T.
    std::vector<std::uint8_t> dy_q_t(dy_q.size()), x_q_t(x_q_.size());
    kernels_->transpose(batch, out, dy_q.data(), dy_q_t.data());  // [out, batch]
    kernels_->transpose(batch, in, x_q_.data(), x_q_t.data());    // [in, batch]
    kernels_->gemm_fp8_tn(out, in, batch, dy_q_t.data(), bwd_format_, sinv_dy, x_q_t.data(), fwd_format_, sinv_x_,
                     acc_wgrad_, grad_weight.data.data());
    if (dx) {
      std::vector<std::uint8_t> w_q_t(w_q_.size());
      kernels_->transpose(out, in, w_q_.data(), w_q_t.data());  // [in, out]
      dx->resize(batch, in);
      kernels_->gemm_fp8_tn(batch, in, out, dy_q.data(), bwd_format_, sinv_dy, w_q_t.data(), fwd_format_, sinv_w_,
                       acc_dgrad_, dx->data.data());
    }
  }
  have_saved_ = false;
}

void Linear::set_accumulation(const emu::GemmAccumulation& fprop, const emu::GemmAccumulation& dgrad,
                              const emu::GemmAccumulation& wgrad) {
  FP8EMU_CHECK(!is_block_recipe() || (fprop.model == emu::Accumulation::kFp32 && dgrad.model == emu::Accumulation::kFp32 &&
                                      wgrad.model == emu::Accumulation::kFp32),
               "Linear: the ", scaling::recipe_name(recipe_),
               " recipe supports only fp32 accumulation (tensor-core models are per-tensor only for now)");
  acc_fprop_ = fprop;
  acc_dgrad_ = dgrad;
  acc_wgrad_ = wgrad;
}

void Linear::update_forward_scales() {
  if (precision_ != Precision::kFp8) return;
  if (const auto* d = std::get_if<scaling::DelayedScaling>(&recipe_)) fwd_state_.update(*d, fwd_format_);
}

void Linear::update_backward_scales() {
  if (precision_ != Precision::kFp8) return;
  if (const auto* d = std::get_if<scaling::DelayedScaling>(&recipe_)) bwd_state_.update(*d, bwd_format_);
}

}  // namespace fp8emu::nn
