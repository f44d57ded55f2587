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
#include "fp8emu/nn/linear.hpp"

namespace fp8emu::nn {

/// Hidden-layer nonlinearity.
enum class Activation : std::uint8_t {
  kReLU,
  kGELU,  ///< tanh form, as TE's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
};

/// The activation of x (GELU: tanh form, with the correctly rounded core::tanh_rn).
float activation_forward(Activation a, float x);
/// Its derivative at x.
float activation_grad(Activation a, float x);

/// Parse "relu" / "gelu". \throws fp8emu::Error naming the accepted values.
Activation parse_activation(const std::string& s);

/// Linear -> act -> ... -> Linear (no activation after the last layer).
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

  std::vector<Linear> layers;

 private:
  friend class DeviceMlp;
  Activation act_;
  std::vector<Matrix> inputs_;   // input of each layer (saved for backward)
  std::vector<Matrix> preacts_;  // output of each hidden layer before the activation
};

/// Mean softmax cross-entropy over the batch (fp32 softmax, log-sum-exp with max subtraction; the
/// sum over the batch in double, in row order). If dlogits is non-null it receives
/// (softmax - onehot) / batch. \throws fp8emu::Error on a shape mismatch or a label out of range.
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

/// Optimizer over all parameters of an Mlp, elementwise fp32 updates.
class Optimizer {
 public:
  enum class Kind : std::uint8_t { kAdam, kSgd };
  /// Adam as torch.optim.Adam (betas 0.9/0.999, eps 1e-8, bias-corrected), or SGD with momentum
  /// as torch.optim.SGD (v = mu v + g; p -= lr v).
  Optimizer(Kind kind, float lr, float momentum = 0.9f);
  void step(Mlp& model);
  /// One step over (parameter, gradient) pairs; the same list, in the same order, every step.
  void step(const std::vector<std::pair<Matrix*, Matrix*>>& params);
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
  friend class DeviceOptimizer;
  Kind kind_;
  float lr_, momentum_;
  long t_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace fp8emu::nn
