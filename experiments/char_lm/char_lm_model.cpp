// The char-LM model (see char_lm_model.hpp): one step program on backend::Device operations.
#include "char_lm/char_lm_model.hpp"

#include <algorithm>

#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments {

CharLm::CharLm(const LmSpec& s, const nn::LinearSpec& linear_spec, bool fp8_head, std::uint64_t seed)
    : spec_(s),
      tok_emb_(s.vocab, s.d_model),
      pos_emb_(s.seq_len, s.d_model),
      grad_tok_(s.vocab, s.d_model),
      grad_pos_(s.seq_len, s.d_model),
      final_norm_(s.norm, s.d_model),
      head_(s.d_model, s.vocab,
            linear_spec.precision == nn::Precision::kFp8 && !fp8_head ? nn::Precision::kFp32 : linear_spec.precision,
            linear_spec.recipe) {
  nn::Rng rng(seed);
  for (float& v : tok_emb_.data) v = rng.uniform(0.1f);
  for (float& v : pos_emb_.data) v = rng.uniform(0.02f);
  for (int l = 0; l < s.layers; ++l) {
    blocks_.push_back(std::make_unique<nn::TransformerLayer>(s.d_model, s.heads, s.ffn, s.norm, s.act, linear_spec));
    blocks_.back()->act_dtype = s.act_dtype;
    for (nn::Linear* lin : blocks_.back()->linears()) lin->init(rng);
  }
  head_.init(rng);
}

std::vector<std::pair<std::string, nn::Linear*>> CharLm::linears() {
  std::vector<std::pair<std::string, nn::Linear*>> out;
  const char* names[] = {"qkv", "proj", "fc1", "fc2"};
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const std::vector<nn::Linear*> ls = blocks_[l]->linears();
    for (std::size_t k = 0; k < ls.size(); ++k) out.emplace_back("l" + std::to_string(l) + "." + names[k], ls[k]);
  }
  out.emplace_back("head", &head_);
  return out;
}

nn::ParamList CharLm::params() {
  nn::ParamList p;
  p.emplace_back(&tok_emb_, &grad_tok_);
  p.emplace_back(&pos_emb_, &grad_pos_);
  for (auto& b : blocks_) b->params(p);
  p.emplace_back(&final_norm_.gamma, &final_norm_.grad_gamma);
  if (final_norm_.kind() == nn::NormKind::kLayerNorm) p.emplace_back(&final_norm_.beta, &final_norm_.grad_beta);
  p.emplace_back(&head_.weight, &head_.grad_weight);
  p.emplace_back(&head_.bias, &head_.grad_bias);
  return p;
}

// The same parameters where the model lives, in params()'s order.
std::vector<nn::DeviceParam> CharLm::device_params() {
  std::vector<nn::DeviceParam> p;
  p.push_back({this->p(tok_emb_, tok_), this->p(grad_tok_, gtok_), tok_emb_.size()});
  p.push_back({this->p(pos_emb_, pos_), this->p(grad_pos_, gpos_), pos_emb_.size()});
  for (auto& b : blocks_) b->params(p);
  final_norm_.params(p);
  head_.params(p);
  return p;
}

void CharLm::reserve(int rows) {
  if (rows <= capacity_) return;
  const backend::Device& d = *device_;
  const int D = spec_.d_model, V = spec_.vocab;
  a_ = Tensor<float>(d, rows, D);
  b_ = Tensor<float>(d, rows, D);
  final_out_ = Tensor<float>(d, rows, D);
  logits_ = Tensor<float>(d, rows, V);
  dlogits_ = Tensor<float>(d, rows, V);
  loss_ = Tensor<float>(d, 1, rows);
  tokens_ = Tensor<std::uint8_t>(d, 1, rows);
  targets_ = Tensor<std::uint8_t>(d, 1, rows);
  capacity_ = rows;
}

void CharLm::load_tokens(const std::vector<std::uint8_t>& tokens, int T) {
  const int rows = int(tokens.size());
  FP8EMU_CHECK(T >= 1 && rows % T == 0 && T <= spec_.seq_len, "char-LM: a batch of ", rows, " tokens, sequence ", T);
  for (std::uint8_t t : tokens) FP8EMU_CHECK(t < spec_.vocab, "char-LM: token ", int(t), " out of the vocabulary");
  reserve(rows);
  tokens_.upload(tokens.data(), tokens.size());
}

// The step program: embeddings, the blocks, the final norm, the head.
void CharLm::forward(int rows, int T, float* logits, bool training) {
  const backend::Device& d = *device_;
  const int D = spec_.d_model;
  const std::size_t n = std::size_t(rows) * std::size_t(D);
  const bool bf16 = spec_.act_dtype == nn::ActivationDtype::kBf16;
  float* x = a_.get();
  float* y = b_.get();
  d.embed_forward(tokens_.get(), rows, T, p(tok_emb_, tok_), p(pos_emb_, pos_), D, x);
  if (bf16) d.round_bf16(x, n);
  for (auto& blk : blocks_) {
    blk->forward(x, rows, T, y, training);
    std::swap(x, y);
  }
  final_norm_.forward(x, rows, final_out_.get(), training);
  if (bf16) d.round_bf16(final_out_.get(), n);
  head_.forward(final_out_.get(), rows, logits, training);
  if (training) {
    seq_ = T;
    rows_ = rows;
  }
}

// The head, the final norm, the blocks from the last, then the embeddings' gradients (zeroed, then
// each row added in row order).
void CharLm::backward(const float* dlogits, int rows) {
  FP8EMU_CHECK(rows_ >= 0 && rows == rows_, "char-LM: backward without a matching training forward");
  const backend::Device& d = *device_;
  float* dy = a_.get();
  float* dx = b_.get();
  head_.backward(dlogits, rows, dy);
  final_norm_.backward(dy, rows, dx);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    blocks_[l]->backward(dx, rows, dy);
    std::swap(dx, dy);
  }
  d.embed_backward(tokens_.get(), rows, seq_, dx, spec_.d_model, spec_.vocab, spec_.seq_len, p(grad_tok_, gtok_),
                   p(grad_pos_, gpos_));
  rows_ = -1;
}

void CharLm::forward(const std::vector<std::uint8_t>& tokens, int T, nn::Matrix& logits, bool training) {
  FP8EMU_CHECK(!off_host(), "char-LM: the Matrix forward of a model on the ", device_->name(),
               " device (call to_host() first)");
  load_tokens(tokens, T);
  logits.resize(int(tokens.size()), spec_.vocab);
  forward(int(tokens.size()), T, logits.data.data(), training);
}

void CharLm::backward(const nn::Matrix& dlogits) {
  FP8EMU_CHECK(!off_host(), "char-LM: the Matrix backward of a model on the ", device_->name(),
               " device (call to_host() first)");
  backward(dlogits.data.data(), dlogits.rows);
}

std::string CharLm::device_unsupported() {
  for (const auto& [name, l] : linears()) {
    const std::string why = l->device_unsupported();
    if (!why.empty()) return "layer " + name + " " + why;
  }
  return {};
}

void CharLm::to_device(const backend::Device& device, nn::Optimizer& opt) {
  const std::string why = device_unsupported();
  FP8EMU_CHECK(why.empty(), "device-resident LM: ", why);
  for (auto& blk : blocks_) blk->to_device(device);
  final_norm_.to_device(device);
  head_.move_to_device(device);
  device_ = &device;
  capacity_ = 0;
  rows_ = -1;
  if (off_host()) {
    Tensor<float>* t[4] = {&tok_, &pos_, &gtok_, &gpos_};
    const nn::Matrix* m[4] = {&tok_emb_, &pos_emb_, &grad_tok_, &grad_pos_};
    for (int i = 0; i < 4; ++i) {
      *t[i] = Tensor<float>(device, m[i]->rows, m[i]->cols);
      t[i]->upload(m[i]->data.data());
    }
  }
  opt.to_device(device, device_params());
}

void CharLm::to_host(nn::Optimizer& opt) {
  opt.to_host();
  if (off_host()) {
    tok_.download(tok_emb_.data.data());
    pos_.download(pos_emb_.data.data());
    gtok_.download(grad_tok_.data.data());
    gpos_.download(grad_pos_.data.data());
    for (Tensor<float>* t : {&tok_, &pos_, &gtok_, &gpos_}) *t = Tensor<float>();
  }
  for (auto& blk : blocks_) blk->to_host();
  final_norm_.to_host();
  head_.to_host();
  device_ = &backend::cpu_device();
  capacity_ = 0;
  rows_ = -1;
}

double CharLm::train_step(const std::vector<std::uint8_t>& tokens, const std::vector<std::uint8_t>& targets, int T,
                          int divisor, nn::Optimizer& opt) {
  const backend::Device& d = *device_;
  const int rows = int(tokens.size());
  FP8EMU_CHECK(targets.size() == tokens.size(), "char-LM: ", tokens.size(), " tokens but ", targets.size(),
               " targets");
  for (std::uint8_t t : targets) FP8EMU_CHECK(t < spec_.vocab, "char-LM: target ", int(t), " out of the vocabulary");
  load_tokens(tokens, T);
  targets_.upload(targets.data(), targets.size());
  forward(rows, T, logits_.get(), true);
  d.softmax_xent(logits_.get(), targets_.get(), rows, spec_.vocab, float(divisor), loss_.get(), dlogits_.get());
  backward(dlogits_.get(), rows);
  // TE's update points, then the optimizer.
  for (const auto& [name, l] : linears()) l->update_scales();
  opt.step(d, device_params());
  return nn::sum_loss_terms(d, loss_.get(), rows);
}

double CharLm::eval_batch(const std::vector<std::uint8_t>& tokens, const std::vector<std::uint8_t>& targets, int T,
                          std::vector<nn::TwinError>* twins) {
  std::vector<std::pair<std::string, nn::Linear*>> lins = linears();
  FP8EMU_CHECK(!twins || twins->size() == lins.size(), "char-LM: ", twins ? twins->size() : 0, " twin sums for ",
               lins.size(), " Linears");
  FP8EMU_CHECK(targets.size() == tokens.size(), "char-LM: ", tokens.size(), " tokens but ", targets.size(),
               " targets");
  for (std::uint8_t t : targets) FP8EMU_CHECK(t < spec_.vocab, "char-LM: target ", int(t), " out of the vocabulary");
  for (std::size_t i = 0; i < lins.size(); ++i) lins[i].second->twin_error = twins ? &(*twins)[i] : nullptr;
  struct Clear {
    std::vector<std::pair<std::string, nn::Linear*>>& l;
    ~Clear() {
      for (auto& x : l) x.second->twin_error = nullptr;
    }
  } clear{lins};
  const int rows = int(tokens.size());
  load_tokens(tokens, T);
  targets_.upload(targets.data(), targets.size());
  forward(rows, T, logits_.get(), false);
  device_->softmax_xent(logits_.get(), targets_.get(), rows, spec_.vocab, float(rows), loss_.get(), nullptr);
  return nn::sum_loss_terms(*device_, loss_.get(), rows) / double(rows);
}

}  // namespace fp8emu::experiments
