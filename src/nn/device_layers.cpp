// Layers on a backend::Device (see include/fp8emu/nn/device_layers.hpp). Each block names the host
// code whose arithmetic it repeats on backend::Device operations.
#include "fp8emu/nn/device_layers.hpp"

#include <variant>

#include "fp8emu/scaling/block_quantizer.hpp"
#include "fp8emu/scaling/mxfp8_quantizer.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::nn {

namespace {
// Roles within a layer's last-scale and counter arrays (Linear::last_scale_ order).
constexpr int kX = 0, kW = 1, kDy = 2;
}  // namespace

double sum_loss_terms(const backend::Device& device, const float* terms, int rows) {
  std::vector<float> t(static_cast<std::size_t>(rows));
  device.download(t.data(), terms, t.size() * sizeof(float));
  double total = 0.0;
  for (float v : t) total += double(v);
  return total;
}

// ---------------------------------------------------------------- DeviceLinear

std::string DeviceLinear::unsupported(const Linear& l) {
  if (l.twin_error) return "measures its FP32 twin error (Linear::twin_error; set DeviceLinear::twin_error instead)";
  if (l.precision() != Precision::kFp8) return {};  // FP32 and BF16 layers keep no recipe state
  const scaling::Recipe& r = l.recipe();
  if (const auto* d = std::get_if<scaling::DelayedScaling>(&r)) {
    if (!d->uses_fused_update())
      return "uses delayed scaling with a callable amax or scale function (the unfused update), which runs on the host";
    if (d->reduce_amax) return "uses delayed scaling with an amax-reduction hook, which runs on the host";
    return {};
  }
  return {};  // current scaling, MXFP8, 128-block scaling
}

namespace {
// Scale blocks of a K-major view with K = k.
int blocks_of(int k, int block) { return (k + block - 1) / block; }
}  // namespace

DeviceLinear::DeviceLinear(const backend::Device& device, const Linear& src)
    : dev_(&device),
      in_(src.in_features()),
      out_(src.out_features()),
      fp8_(src.precision() == Precision::kFp8),
      bf16_(src.precision() == Precision::kBf16) {
  const std::string why = unsupported(src);
  FP8EMU_CHECK(why.empty(), "device-resident Linear: the layer ", why);
  const backend::Device& d = device;
  w_ = Tensor<float>(d, out_, in_);
  b_ = Tensor<float>(d, 1, out_);
  gw_ = Tensor<float>(d, out_, in_);
  gb_ = Tensor<float>(d, 1, out_);
  w_.upload(src.weight.data.data());
  b_.upload(src.bias.data.data());
  gw_.upload(src.grad_weight.data.data());
  gb_.upload(src.grad_bias.data.data());
  if (!fp8_) {
    wt_ = Tensor<float>(d, in_, out_);
    if (bf16_) wb_ = Tensor<float>(d, out_, in_);
    return;
  }
  acc_fprop_ = src.acc_fprop_;
  acc_dgrad_ = src.acc_dgrad_;
  acc_wgrad_ = src.acc_wgrad_;
  fmt_fwd_ = src.forward_quantizer().format();
  fmt_bwd_ = src.backward_quantizer().format();
  wq_row_ = Tensor<std::uint8_t>(d, out_, in_);
  wq_col_ = Tensor<std::uint8_t>(d, in_, out_);
  last_scale_ = Tensor<float>(d, 1, 3);
  last_scale_.upload(src.last_scale_);
  counters_ = Tensor<backend::CastCounters>(d, 1, 3);
  backend::CastCounters c[3];  // the counts so far carry on (Linear::stats is reset by its owner)
  const emu::QuantizeStats* st[3] = {&src.stats.input, &src.stats.weight, &src.stats.grad_output};
  for (int r = 0; r < 3; ++r) c[r] = {st[r]->count, st[r]->saturated, st[r]->underflow, st[r]->nan};
  counters_.upload(c);
  const scaling::Recipe& r = src.recipe();
  // The block recipes' casts (scaling/mxfp8_quantizer.cpp, block_quantizer.cpp): MXFP8 both views of
  // every tensor; 128-block 1 x 128 for the input and the gradient, 128 x 128 tiles for the weight.
  if (const auto* mx = std::get_if<scaling::MXFP8BlockScaling>(&r)) {
    blocks_ = true;
    cast_x_.kind = backend::BlockCast::kMxfp8;
    cast_x_.rule = mx->rule;
    cast_x_.block = scaling::kMxfp8Block;
    cast_w_ = cast_dy_ = cast_x_;
  } else if (const auto* bs = std::get_if<scaling::Float8BlockScaling>(&r)) {
    blocks_ = true;
    cast_x_.kind = backend::BlockCast::kBlock1d;
    cast_x_.block = scaling::kFloat8Block;
    cast_x_.pow2 = !bs->use_f32_scales;
    cast_x_.epsilon = bs->amax_epsilon;
    cast_w_ = cast_dy_ = cast_x_;
    cast_w_.kind = backend::BlockCast::kTile2d;
  }
  if (blocks_) {
    cast_x_.fmt = cast_w_.fmt = fmt_fwd_;
    cast_dy_.fmt = fmt_bwd_;
    const int blk = cast_x_.block;
    w_si_row_ = Tensor<float>(d, out_, blocks_of(in_, blk));
    w_si_col_ = Tensor<float>(d, in_, blocks_of(out_, blk));
    return;
  }
  if (const auto* ds = std::get_if<scaling::DelayedScaling>(&r)) {
    delayed_ = true;
    most_recent_ = ds->amax_compute_algo == scaling::AmaxComputeAlgo::kMostRecent;
    scaled_max_fwd_ = scaling::fused_scaled_max(*ds, fmt_fwd_);
    scaled_max_bwd_ = scaling::fused_scaled_max(*ds, fmt_bwd_);
    const scaling::DelayedScalingState& fs = src.forward_state();
    const scaling::DelayedScalingState& bs = src.backward_state();
    history_len_ = fs.history_len();
    fwd_history_ = Tensor<float>(d, fs.history_len(), fs.num_slots());
    fwd_scale_ = Tensor<float>(d, 1, fs.num_slots());
    bwd_history_ = Tensor<float>(d, bs.history_len(), bs.num_slots());
    bwd_scale_ = Tensor<float>(d, 1, bs.num_slots());
    fwd_history_.upload(fs.history_values().data());
    fwd_scale_.upload(fs.scales().data());
    bwd_history_.upload(bs.history_values().data());
    bwd_scale_.upload(bs.scales().data());
  } else {
    const auto& cs = std::get<scaling::CurrentScaling>(r);
    pow2_ = cs.use_power_2_scales;
    epsilon_ = cs.amax_epsilon;
  }
}

void DeviceLinear::reserve(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *dev_;
  if (fp8_) {
    xq_row_ = Tensor<std::uint8_t>(d, rows, in_);
    xq_col_ = Tensor<std::uint8_t>(d, in_, rows);
    dyq_row_ = Tensor<std::uint8_t>(d, rows, out_);
    dyq_col_ = Tensor<std::uint8_t>(d, out_, rows);
    if (blocks_) {
      const int blk = cast_x_.block;
      x_si_row_ = Tensor<float>(d, rows, blocks_of(in_, blk));
      x_si_col_ = Tensor<float>(d, in_, blocks_of(rows, blk));
      dy_si_row_ = Tensor<float>(d, rows, blocks_of(out_, blk));
      dy_si_col_ = Tensor<float>(d, out_, blocks_of(rows, blk));
    }
  } else {
    dyt_ = Tensor<float>(d, out_, rows);
    if (bf16_) {
      xb_ = Tensor<float>(d, rows, in_);
      dyb_ = Tensor<float>(d, rows, out_);
    }
  }
  capacity_ = rows;
}

// The scale a cast of `role` multiplies by: the delayed state's slot, or the current scale the
// step computed into last_scale_.
const float* DeviceLinear::scale(int role) const {
  if (!delayed_) return last_scale_.get() + role;
  return role == kDy ? bwd_scale_.get() : fwd_scale_.get() + role;
}

// Where a delayed-scaling cast records its amax: row 0 of the role's history column.
float* DeviceLinear::amax(int role) const {
  if (!delayed_) return nullptr;
  return role == kDy ? bwd_history_.get() : fwd_history_.get() + role;
}

// Linear::forward (training): fp32 = forward_fp32; FP8 = cast_weight (both copies), the input cast
// (both copies), fprop x . W^T, bias.
void DeviceLinear::forward(const float* x, int rows, float* y) {
  FP8EMU_CHECK(rows >= 0, "Linear: negative batch ", rows);
  reserve(rows);
  const backend::Device& d = *dev_;
  saved_x_ = x;
  forward_rows_ = rows;
  if (bf16_) {  // Linear::forward, bf16: y = bf16(bf16(x) . bf16(W)^T + b)
    const std::size_t nx = std::size_t(rows) * std::size_t(in_);
    d.copy(xb_.get(), x, nx * sizeof(float));
    d.round_bf16(xb_.get(), nx);
    d.copy(wb_.get(), w_.get(), w_.bytes());  // bf16(W), kept for dgrad: W changes only after backward
    d.round_bf16(wb_.get(), wb_.size());
    d.transpose_f32(out_, in_, wb_.get(), wt_.get());
    d.gemm_bf16_nn(rows, out_, in_, xb_.get(), wt_.get(), y);
    d.bias_add(y, b_.get(), rows, out_);
    d.round_bf16(y, std::size_t(rows) * std::size_t(out_));
    saved_x_ = xb_.get();
    accumulate_twin(x, rows, y);
    return;
  }
  if (!fp8_) {
    d.transpose_f32(out_, in_, w_.get(), wt_.get());
    d.gemm_f32_nn(rows, out_, in_, x, wt_.get(), y);
  } else if (blocks_) {  // the quantizers' casts (both views), the block-scaled fprop
    d.block_cast(cast_w_, w_.get(), out_, in_, {wq_row_.get(), w_si_row_.get()}, {wq_col_.get(), w_si_col_.get()},
                 counters_.get() + kW);
    d.block_cast(cast_x_, x, rows, in_, {xq_row_.get(), x_si_row_.get()}, {xq_col_.get(), x_si_col_.get()},
                 counters_.get() + kX);
    d.gemm_fp8_block_tn(rows, out_, in_, cast_x_.block, xq_row_.get(), fmt_fwd_, x_si_row_.get(), wq_row_.get(),
                        fmt_fwd_, w_si_row_.get(), y);
  } else {
    float* last = last_scale_.get();
    // The scales these casts use are the last scales of x and W (Linear::forward keeps them); delayed
    // scaling's are its state's, current scaling's computed below.
    if (delayed_) d.copy(last + kX, fwd_scale_.get(), 2 * sizeof(float));
    if (!delayed_) d.current_scale(w_.get(), w_.size(), fmt_fwd_, pow2_, epsilon_, last + kW);
    d.cast_transpose(w_.get(), out_, in_, scale(kW), fmt_fwd_, wq_row_.get(), wq_col_.get(), amax(kW),
                     counters_.get() + kW);
    if (!delayed_) d.current_scale(x, std::size_t(rows) * std::size_t(in_), fmt_fwd_, pow2_, epsilon_, last + kX);
    d.cast_transpose(x, rows, in_, scale(kX), fmt_fwd_, xq_row_.get(), xq_col_.get(), amax(kX), counters_.get() + kX);
    d.gemm_fp8_tn(rows, out_, in_, xq_row_.get(), fmt_fwd_, scale(kX), wq_row_.get(), fmt_fwd_, scale(kW), acc_fprop_,
                  y);
  }
  d.bias_add(y, b_.get(), rows, out_);
  accumulate_twin(x, rows, y);
}

// Linear::forward's twin: forward_fp32 of the same x on the device (W^T, gemm_f32_nn, bias), then
// both outputs on the host, err += (y - twin)^2 and ref += twin^2 in double in element order.
void DeviceLinear::accumulate_twin(const float* x, int rows, const float* y) {
  if (!twin_error || (!fp8_ && !bf16_)) return;
  const backend::Device& d = *dev_;
  const std::size_t n = std::size_t(rows) * std::size_t(out_);
  if (twin_wt_.size() == 0) twin_wt_ = Tensor<float>(d, in_, out_);
  if (twin_y_.size() < n) twin_y_ = Tensor<float>(d, rows, out_);
  d.transpose_f32(out_, in_, w_.get(), twin_wt_.get());
  d.gemm_f32_nn(rows, out_, in_, x, twin_wt_.get(), twin_y_.get());
  d.bias_add(twin_y_.get(), b_.get(), rows, out_);
  std::vector<float> hy(n), ht(n);
  d.download(hy.data(), y, n * sizeof(float));
  d.download(ht.data(), twin_y_.get(), n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const double e = double(hy[i]) - double(ht[i]);
    twin_error->err += e * e;
    twin_error->ref += double(ht[i]) * double(ht[i]);
  }
}

// Linear::backward: db = column sum of dy; fp32: dW = dy^T x, dx = dy W; FP8: the grad_output cast
// (both copies), wgrad dy^T . x^T, dgrad dy . W.
void DeviceLinear::backward(const float* dy, int rows, float* dx) {
  FP8EMU_CHECK(forward_rows_ >= 0, "Linear: backward called without a preceding training forward");
  FP8EMU_CHECK(rows == forward_rows_, "Linear: grad_output has ", rows, " rows, the forward output ", forward_rows_);
  const backend::Device& d = *dev_;
  d.column_sum(dy, rows, out_, gb_.get());
  if (bf16_) {  // Linear::backward, bf16: dW = bf16(dy)^T . bf16(x); dx = bf16(bf16(dy) . bf16(W))
    const std::size_t ndy = std::size_t(rows) * std::size_t(out_);
    d.copy(dyb_.get(), dy, ndy * sizeof(float));  // bf16(dy) once, for both GEMMs
    d.round_bf16(dyb_.get(), ndy);
    d.transpose_f32(rows, out_, dyb_.get(), dyt_.get());
    d.gemm_bf16_nn(out_, in_, rows, dyt_.get(), saved_x_, gw_.get());
    if (dx) {
      d.gemm_bf16_nn(rows, in_, out_, dyb_.get(), wb_.get(), dx);  // wb_: the forward's bf16(W)
      d.round_bf16(dx, std::size_t(rows) * std::size_t(in_));
    }
    return;
  }
  if (!fp8_) {
    d.transpose_f32(rows, out_, dy, dyt_.get());
    d.gemm_f32_nn(out_, in_, rows, dyt_.get(), saved_x_, gw_.get());
    if (dx) d.gemm_f32_nn(rows, in_, out_, dy, w_.get(), dx);
    return;
  }
  if (blocks_) {  // the gradient's cast (both views); wgrad dy^T . x^T and dgrad dy . W, block-scaled
    const int blk = cast_x_.block;
    d.block_cast(cast_dy_, dy, rows, out_, {dyq_row_.get(), dy_si_row_.get()}, {dyq_col_.get(), dy_si_col_.get()},
                 counters_.get() + kDy);
    d.gemm_fp8_block_tn(out_, in_, rows, blk, dyq_col_.get(), fmt_bwd_, dy_si_col_.get(), xq_col_.get(), fmt_fwd_,
                        x_si_col_.get(), gw_.get());
    if (dx)
      d.gemm_fp8_block_tn(rows, in_, out_, blk, dyq_row_.get(), fmt_bwd_, dy_si_row_.get(), wq_col_.get(), fmt_fwd_,
                          w_si_col_.get(), dx);
    return;
  }
  if (!delayed_)
    d.current_scale(dy, std::size_t(rows) * std::size_t(out_), fmt_bwd_, pow2_, epsilon_, last_scale_.get() + kDy);
  d.cast_transpose(dy, rows, out_, scale(kDy), fmt_bwd_, dyq_row_.get(), dyq_col_.get(), amax(kDy),
                   counters_.get() + kDy);
  d.gemm_fp8_tn(out_, in_, rows, dyq_col_.get(), fmt_bwd_, scale(kDy), xq_col_.get(), fmt_fwd_, scale(kX), acc_wgrad_,
                gw_.get());
  if (dx)
    d.gemm_fp8_tn(rows, in_, out_, dyq_row_.get(), fmt_bwd_, scale(kDy), wq_col_.get(), fmt_fwd_, scale(kW),
                  acc_dgrad_, dx);
}

// DelayedScalingState::update's fused path for the forward and the backward state.
void DeviceLinear::update_scales() {
  if (!fp8_ || !delayed_) return;
  const backend::Device& d = *dev_;
  float* last = last_scale_.get();
  d.copy(last + kX, fwd_scale_.get(), 2 * sizeof(float));
  d.copy(last + kDy, bwd_scale_.get(), sizeof(float));
  d.delayed_update(fwd_history_.get(), fwd_scale_.get(), fwd_scale_.cols(), history_len_, scaled_max_fwd_,
                   most_recent_);
  d.delayed_update(bwd_history_.get(), bwd_scale_.get(), bwd_scale_.cols(), history_len_, scaled_max_bwd_,
                   most_recent_);
}

void DeviceLinear::reset_stats() {
  if (fp8_) dev_->fill_zero(counters_.get(), counters_.bytes());
}

void DeviceLinear::params(std::vector<DeviceParam>& out) {
  out.push_back({w_.get(), gw_.get(), w_.size()});
  out.push_back({b_.get(), gb_.get(), b_.size()});
}

void DeviceLinear::download(Linear& dst) const {
  FP8EMU_CHECK(dst.in_features() == in_ && dst.out_features() == out_,
               "device-resident Linear: download into a layer of another shape");
  w_.download(dst.weight.data.data());
  b_.download(dst.bias.data.data());
  gw_.download(dst.grad_weight.data.data());
  gb_.download(dst.grad_bias.data.data());
  if (!fp8_) return;
  last_scale_.download(dst.last_scale_);
  backend::CastCounters c[3];
  counters_.download(c);
  emu::QuantizeStats* st[3] = {&dst.stats.input, &dst.stats.weight, &dst.stats.grad_output};
  for (int r = 0; r < 3; ++r) {
    *st[r] = {};
    st[r]->count = c[r].count;
    st[r]->saturated = c[r].saturated;
    st[r]->underflow = c[r].underflow;
    st[r]->nan = c[r].nan;
  }
  if (!delayed_) return;
  std::vector<float> scales(fwd_scale_.size()), history(fwd_history_.size());
  fwd_scale_.download(scales.data());
  fwd_history_.download(history.data());
  dst.forward_state().restore(scales, history);
  scales.resize(bwd_scale_.size());
  history.resize(bwd_history_.size());
  bwd_scale_.download(scales.data());
  bwd_history_.download(history.data());
  dst.backward_state().restore(scales, history);
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
