/// \file mlp.hpp
/// \brief Multi-layer perceptron of Linear layers, softmax cross-entropy and optimizers (fp32).
///
/// Activations, loss and optimizer run in fp32 for both precisions; only the Linear layers' GEMMs
/// change. Update points follow TE: forward scales after the forward (autocast exit), backward
/// scales after the whole backward. Determinism: bit-identical for any OpenMP thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/device_param.hpp"
#include "fp8emu/nn/linear.hpp"

namespace fp8emu::nn {

/// Hidden-layer nonlinearity.
enum class Activation : std::uint8_t {
  kReLU,
  kGELU,  ///< tanh form, as TE's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
};

/// Parse "relu" / "gelu". \throws fp8emu::Error naming the accepted values.
Activation parse_activation(const std::string& s);

/// Linear -> act -> ... -> Linear (no activation after the last layer).
class Optimizer;

class Mlp {
 public:
  /// \param sizes  Layer widths, e.g. {784, 256, 128, 10}; at least two entries.
  /// \param seed   Initial weights are a function of the seed only (same for both precisions).
  Mlp(const std::vector<int>& sizes, Activation act, Precision precision,
      const scaling::Recipe& recipe, std::uint64_t seed);

  /// logits = model(x). \param x Shape: [batch, sizes.front()]. \param logits Shape: [batch, sizes.back()].
  /// \param layer_out_ref If non-null, receives per layer sum((y - y_fp32)^2) and sum(y_fp32^2),
  ///        where y_fp32 is the FP32 twin of the layer fed the same input (relative error data).
  void forward(const Matrix& x, Matrix& logits, bool training,
               std::vector<std::pair<double, double>>* layer_out_ref = nullptr);
  /// Backward from d(loss)/d(logits), Shape [batch, sizes.back()]. Fills each layer's gradients.
  void backward(const Matrix& dlogits);
  void update_forward_scales();
  void update_backward_scales();

  // ---- device residency (as nn::Linear): one step program on backend::Device operations ---------
  /// Why the model cannot live on a device (one sentence naming the layer and what it uses), or empty.
  std::string device_unsupported() const;
  /// Moves every layer (parameters, gradients, recipe state, cast counts) into `device`'s memory; the
  /// host fields are stale until to_host(). \throws fp8emu::Error with device_unsupported()'s sentence.
  void to_device(const backend::Device& device);
  /// Brings everything back (waits); the model runs on the host again.
  void to_host();
  /// One training step where the model lives, on a shard of `divisor` rows: forward (training),
  /// softmax cross-entropy with dlogits = (softmax - onehot) / divisor, backward, TE's update points
  /// (every layer's forward then backward scales), then `opt`'s step (its moments must live where
  /// the model does: Optimizer::to_device with params()).
  /// \param x Shape [rows, in] (host). \param labels rows labels, each < the output width (host).
  /// \returns the sum of the rows' loss terms, in double in row order (softmax_cross_entropy_sum).
  /// \throws fp8emu::Error on a shape mismatch, a label out of range or a divisor below rows.
  double train_step(const Matrix& x, const std::vector<std::uint8_t>& labels, int divisor, Optimizer& opt);
  /// Every layer's weight then bias, with their gradients, where the model lives (Optimizer::step's order).
  std::vector<DeviceParam> params();
  /// Zeroes every layer's cast counts.
  void reset_stats();

  Mlp(const Mlp& o);
  Mlp& operator=(const Mlp& o);
  Mlp(Mlp&&) noexcept = default;
  Mlp& operator=(Mlp&&) noexcept = default;

  std::vector<Linear> layers;

 private:
  void forward(const float* x, int rows, float* logits, bool training);
  void backward(const float* dlogits, int rows);
  void reserve(int rows);
  Activation act_;
  const backend::Device* device_ = &backend::cpu_device();
  int capacity_ = 0;
  std::vector<backend::DeviceTensor<float>> in_;   // input of each layer [capacity, in_l] (saved for backward)
  std::vector<backend::DeviceTensor<float>> pre_;  // output of each layer [capacity, out_l] (the last: logits)
  backend::DeviceTensor<float> grad_a_, grad_b_;   // gradient ping-pong [capacity, widest]
  backend::DeviceTensor<float> loss_;              // [capacity]
  backend::DeviceTensor<std::uint8_t> labels_;     // [capacity]
};

double softmax_cross_entropy(const Matrix& logits, const std::vector<std::uint8_t>& labels,
                             Matrix* dlogits);
/// One shard of a batch of `divisor` rows (data parallelism): the sum of the rows' losses (double,
/// row order) and, if dlogits is non-null, (softmax - onehot) / divisor. softmax_cross_entropy is
/// this with divisor = rows, divided by rows. \throws fp8emu::Error as above, or for a divisor
/// smaller than the rows.
double softmax_cross_entropy_sum(const Matrix& logits, const std::vector<std::uint8_t>& labels, Matrix* dlogits,
                                 int divisor);

/// Index of the largest logit per row (first on ties; NaN never wins).
std::vector<int> argmax_rows(const Matrix& logits);

/// The sum of `rows` per-row loss terms in a device's memory (Device::softmax_xent's), downloaded and
/// added in double in row order, as softmax_cross_entropy_sum adds them.
double sum_loss_terms(const backend::Device& device, const float* terms, int rows);

/// Optimizer over all parameters of an Mlp, elementwise fp32 updates.
class Optimizer {
 public:
  enum class Kind : std::uint8_t { kAdam, kSgd };
  /// Adam as torch.optim.Adam (betas 0.9/0.999, eps 1e-8, bias-corrected), or SGD with momentum
  /// as torch.optim.SGD (v = mu v + g; p -= lr v).
  Optimizer(Kind kind, float lr, float momentum = 0.9f);
  /// A copy on the host (moments brought back from a device).
  Optimizer(const Optimizer& o);
  Optimizer& operator=(const Optimizer& o);
  Optimizer(Optimizer&&) noexcept = default;
  Optimizer& operator=(Optimizer&&) noexcept = default;
  void step(Mlp& model);
  /// One step over (parameter, gradient) pairs; the same list, in the same order, every step.
  void step(const std::vector<std::pair<Matrix*, Matrix*>>& params);
  /// One step over parameters in `device`'s memory (Device::adam / Device::sgd per tensor, in order);
  /// the moments are the device's after to_device(), else the host's (a device of host memory).
  void step(const backend::Device& device, const std::vector<DeviceParam>& params);
  /// Moves the moments (zero ones first, before the first step) into `device`'s memory, shaped as
  /// `params`. \throws fp8emu::Error when the moments do not match the parameters.
  void to_device(const backend::Device& device, const std::vector<DeviceParam>& params);
  /// Brings the moments back (waits).
  void to_host();
  static Kind parse(const std::string& s);
  /// Adam's constants for step t >= 1 (b1 0.9, b2 0.999, eps 1e-8): step = RN(lr / RN(1 - b1^t)),
  /// sqrt_bc2 = RN(sqrt(RN(1 - b2^t))), the powers by std::pow in fp32.
  static backend::AdamStep adam_step(float lr, long t);

  /// Checkpoint access: step count and moment buffers (one per parameter tensor, in layer order:
  /// weight, bias, ...; empty before the first step).
  long steps() const { return t_; }
  const std::vector<std::vector<float>>& first_moments() const { return m_; }
  const std::vector<std::vector<float>>& second_moments() const { return v_; }
  void restore(long steps, std::vector<std::vector<float>> m, std::vector<std::vector<float>> v) {
    t_ = steps;
    m_ = std::move(m);
    v_ = std::move(v);
  }

 private:
  Kind kind_;
  float lr_, momentum_;
  long t_ = 0;
  std::vector<std::vector<float>> m_, v_;
  const backend::Device* home_ = nullptr;  // the device holding the moments, null: the host
  std::vector<backend::DeviceTensor<float>> dm_, dv_;
};

}  // namespace fp8emu::nn
