// The character-level transformer LM of `fp8emu train-lm`: token and position embeddings, N
// transformer layers (nn/transformer.hpp), a final norm and a Linear head, written once on
// backend::Device operations. On the host (the Matrix calls) every layer runs its program on
// cpu_device() with each Linear wherever --backend puts it; after to_device(d) the model and the
// optimizer's moments live in d's memory and train_step / eval_batch run a whole step there (the
// --resident run), with the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/mlp.hpp"
#include "fp8emu/nn/norm.hpp"
#include "fp8emu/nn/transformer.hpp"

namespace fp8emu::experiments {

struct LmSpec {
  int vocab, d_model, heads, layers, ffn, seq_len;
  nn::NormKind norm;
  nn::MlpActivation act;
  nn::ActivationDtype act_dtype;
};

class CharLm {
 public:
  /// The head is FP32 unless fp8_head (TE practice keeps it in higher precision).
  CharLm(const LmSpec& s, const nn::LinearSpec& linear_spec, bool fp8_head, std::uint64_t seed);
  CharLm(const CharLm&) = delete;
  CharLm& operator=(const CharLm&) = delete;

  /// Linear layers with their --backend names (l0.qkv, l0.proj, l0.fc1, l0.fc2, ..., head).
  std::vector<std::pair<std::string, nn::Linear*>> linears();
  /// (parameter, gradient) pairs on the host, in the optimizer's order.
  nn::ParamList params();

  /// logits [B*T, V] for tokens [B*T] (B sequences of length T <= seq_len), on the host.
  void forward(const std::vector<std::uint8_t>& tokens, int T, nn::Matrix& logits, bool training);
  /// Gradients of the last training forward from dlogits [B*T, V].
  void backward(const nn::Matrix& dlogits);

  /// Why the model cannot live on a device ("layer <name> <why>"), or empty.
  std::string device_unsupported();
  /// Moves the model and the optimizer's moments into `device`'s memory; the host fields are stale
  /// until to_host(). \throws fp8emu::Error with device_unsupported()'s phrase.
  void to_device(const backend::Device& device, nn::Optimizer& opt);
  /// Brings the model and the optimizer's moments back (waits).
  void to_host(nn::Optimizer& opt);
  /// One step where the model lives: forward, softmax cross-entropy over `divisor` rows, backward,
  /// every Linear's update points, the optimizer. Returns the sum of the rows' loss terms (double,
  /// row order), as softmax_cross_entropy_sum.
  double train_step(const std::vector<std::uint8_t>& tokens, const std::vector<std::uint8_t>& targets, int T,
                    int divisor, nn::Optimizer& opt);
  /// One validation batch as the host evaluates it (an evaluation forward, the mean of the rows'
  /// loss terms); with `twins` (one per Linear, linears() order) each FP8 or BF16 Linear adds its
  /// FP32-twin error.
  double eval_batch(const std::vector<std::uint8_t>& tokens, const std::vector<std::uint8_t>& targets, int T,
                    std::vector<nn::TwinError>* twins);

 private:
  template <class T>
  using Tensor = backend::DeviceTensor<T>;
  void forward(int rows, int T, float* logits, bool training);  // tokens already in tokens_
  void backward(const float* dlogits, int rows);
  void reserve(int rows);
  void load_tokens(const std::vector<std::uint8_t>& tokens, int T);
  std::vector<nn::DeviceParam> device_params();
  bool off_host() const { return !device_->host_memory(); }
  float* p(nn::Matrix& m, Tensor<float>& t) { return off_host() ? t.get() : m.data.data(); }

  LmSpec spec_;
  nn::Matrix tok_emb_, pos_emb_, grad_tok_, grad_pos_;
  std::vector<std::unique_ptr<nn::TransformerLayer>> blocks_;
  nn::Norm final_norm_;
  nn::Linear head_;
  const backend::Device* device_ = &backend::cpu_device();
  Tensor<float> tok_, pos_, gtok_, gpos_;  // the embeddings and their gradients off the host
  int capacity_ = 0, seq_ = 1, rows_ = -1;  // rows_: of the last training forward
  Tensor<float> a_, b_, final_out_, dlogits_, loss_, logits_;
  Tensor<std::uint8_t> tokens_, targets_;
};

}  // namespace fp8emu::experiments
