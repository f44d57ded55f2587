// Linear layer in FP32 or emulated FP8 (see include/fp8emu/nn/linear.hpp).
#include "fp8emu/nn/linear.hpp"

#include <cmath>

#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

Linear::Linear(int in_features, int out_features, Precision precision,
               const scaling::DelayedScaling& recipe)
    : precision_(precision),
      recipe_(recipe),
      fwd_state_(3, recipe.amax_history_len),
      bwd_state_(2, recipe.amax_history_len) {
  FP8EMU_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in=",
               in_features, " out=", out_features);
  weight = Matrix(out_features, in_features);
  bias = Matrix(1, out_features);
  grad_weight = Matrix(out_features, in_features);
  grad_bias = Matrix(1, out_features);
}

void Linear::init(Rng& rng) {
  const float bound = 1.0f / std::sqrt(float(in_features()));
  for (float& w : weight.data) w = rng.uniform(bound);
  for (float& b : bias.data) b = rng.uniform(bound);
}

namespace {
void add_bias(Matrix& y, const Matrix& bias) {
  for (int i = 0; i < y.rows; ++i) {
    float* r = y.row(i);
    for (int j = 0; j < y.cols; ++j) r[j] += bias.data[std::size_t(j)];
  }
}
}  // namespace

void Linear::forward_fp32(const Matrix& x, Matrix& y) const {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  Matrix wt(in_features(), out_features());
  emu::transpose(weight.rows, weight.cols, weight.data.data(), wt.data.data());
  y.resize(x.rows, out_features());
  emu::gemm_f32_nn(x.rows, out_features(), in_features(), x.data.data(), wt.data.data(), y.data.data());
  add_bias(y, bias);
}

void Linear::forward(const Matrix& x, Matrix& y, bool training) {
  FP8EMU_CHECK(x.cols == in_features(), "Linear: input has ", x.cols, " features, layer expects ",
               in_features());
  const int batch = x.rows, in = in_features(), out = out_features();
  if (precision_ == Precision::kFp32) {
    forward_fp32(x, y);
    if (training) saved_x_ = x;
  } else {
    const Format ff = recipe_.forward_format();
    const float sx = fwd_state_.scale(kInput), sw = fwd_state_.scale(kWeight);
    x_q_.resize(x.size());
    w_q_.resize(weight.size());
    stats.input += emu::quantize(x.data.data(), x.size(), sx, ff, x_q_.data(), fwd_state_.amax_ptr(kInput));
    stats.weight += emu::quantize(weight.data.data(), weight.size(), sw, ff, w_q_.data(),
                                  fwd_state_.amax_ptr(kWeight));
    sinv_x_ = emu::scale_inv_of(sx);
    sinv_w_ = emu::scale_inv_of(sw);
    std::vector<std::uint8_t> w_q_t(w_q_.size());  // W_q^T, Shape [in, out] (TE's transposed FP8 weight)
    emu::transpose(out, in, w_q_.data(), w_q_t.data());
    y.resize(batch, out);
    emu::gemm_fp8_nn(batch, out, in, x_q_.data(), ff, sinv_x_, w_q_t.data(), ff, sinv_w_, y.data.data());
    add_bias(y, bias);
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
  // db: sum over the batch in row order, fp32.
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
  } else {
    const Format fb = recipe_.backward_format(), ff = recipe_.forward_format();
    const float sdy = bwd_state_.scale(kGradOutput);
    std::vector<std::uint8_t> dy_q(dy.size());
    stats.grad_output += emu::quantize(dy.data.data(), dy.size(), sdy, fb, dy_q.data(),
                                       bwd_state_.amax_ptr(kGradOutput));
    const float sinv_dy = emu::scale_inv_of(sdy);
    std::vector<std::uint8_t> dy_q_t(dy_q.size());  // Shape [out, batch]
    emu::transpose(batch, out, dy_q.data(), dy_q_t.data());
    emu::gemm_fp8_nn(out, in, batch, dy_q_t.data(), fb, sinv_dy, x_q_.data(), ff, sinv_x_,
                     grad_weight.data.data());
    if (dx) {
      dx->resize(batch, in);
      emu::gemm_fp8_nn(batch, in, out, dy_q.data(), fb, sinv_dy, w_q_.data(), ff, sinv_w_,
                       dx->data.data());
    }
  }
  have_saved_ = false;
}

void Linear::update_forward_scales() {
  if (precision_ == Precision::kFp8) fwd_state_.update(recipe_, recipe_.forward_format());
}

void Linear::update_backward_scales() {
  if (precision_ == Precision::kFp8) bwd_state_.update(recipe_, recipe_.backward_format());
}

}  // namespace fp8emu::nn
