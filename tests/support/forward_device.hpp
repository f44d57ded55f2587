// backend::cpu_device() behind a Device that forwards every operation to it: the base of the
// mutant devices of the GPU self-check (tests/gpu/test_device_ops.cpp overrides one operation each)
// and, with host_memory() false, a stand-in for a device of its own memory that makes host callers
// (Quantizer::quantize, scaling::gemm_tn of host operands, a host Linear on a device) take their
// upload/download path on a machine without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/backend/device.hpp"

namespace fp8emu::testing {

class ForwardDevice : public backend::Device {
 public:
  /// host_memory: what host_memory() answers (false makes a host caller stage its data).
  explicit ForwardDevice(bool host_memory = true) : host_(host_memory) {}
  const backend::Device& b = backend::cpu_device();
  const char* name() const override { return "mutant"; }
  bool host_memory() const override { return host_; }
  void* allocate(std::size_t n) const override { return b.allocate(n); }
  void release(void* p) const noexcept override { b.release(p); }
  void upload(void* d, const void* s, std::size_t n) const override { b.upload(d, s, n); }
  void download(void* d, const void* s, std::size_t n) const override { b.download(d, s, n); }
  void copy(void* d, const void* s, std::size_t n) const override { b.copy(d, s, n); }
  void fill_zero(void* p, std::size_t n) const override { b.fill_zero(p, n); }
  void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    b.gemm_f32_nn(M, N, K, A, B, D);
  }
  void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    b.gemm_bf16_nn(M, N, K, A, B, D);
  }
  void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) const override {
    b.gemm_tc_nn(M, N, K, A, B, model, D);
  }
  void transpose_f32(int r, int c, const float* in, float* out) const override { b.transpose_f32(r, c, in, out); }
  void cast_transpose(const float* x, int r, int c, const float* s, Format f, std::uint8_t* qr, std::uint8_t* qc,
                      float* amax, backend::CastCounters* k) const override {
    b.cast_transpose(x, r, c, s, f, qr, qc, amax, k);
  }
  void current_scale(const float* x, std::size_t n, Format f, bool p, float e, float* s) const override {
    b.current_scale(x, n, f, p, e, s);
  }
  void delayed_update(float* h, float* s, int n, int L, float m, bool r) const override {
    b.delayed_update(h, s, n, L, m, r);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* sa, const std::uint8_t* B,
                   Format fb, const float* sb, const emu::GemmAccumulation& acc, float* D) const override {
    b.gemm_fp8_tn(M, N, K, A, fa, sa, B, fb, sb, acc, D);
  }
  void bias_add(float* y, const float* bias, int r, int c) const override { b.bias_add(y, bias, r, c); }
  void column_sum(const float* x, int r, int c, float* out) const override { b.column_sum(x, r, c, out); }
  void activation_forward(backend::ActivationOp a, const float* x, float* y, std::size_t n) const override {
    b.activation_forward(a, x, y, n);
  }
  void activation_backward(backend::ActivationOp a, const float* p, float* dx, std::size_t n) const override {
    b.activation_backward(a, p, dx, n);
  }
  void softmax_xent(const float* z, const std::uint8_t* l, int r, int c, float dv, float* loss,
                    float* d) const override {
    b.softmax_xent(z, l, r, c, dv, loss, d);
  }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const backend::AdamStep& s) const override {
    b.adam(w, g, m, v, n, s);
  }
  void sgd(float* w, const float* g, float* m, std::size_t n, float mo, float lr) const override {
    b.sgd(w, g, m, n, mo, lr);
  }
  void add(const float* x, const float* y, float* out, std::size_t n) const override { b.add(x, y, out, n); }
  void round_bf16(float* x, std::size_t n) const override { b.round_bf16(x, n); }
  void round_tf32(float* x, std::size_t n) const override { b.round_tf32(x, n); }
  void norm_forward(backend::NormOp op, const float* x, int r, int c, const float* g, const float* be, float eps,
                    bool zc, float* y, float* xh, float* rs) const override {
    b.norm_forward(op, x, r, c, g, be, eps, zc, y, xh, rs);
  }
  void norm_backward(backend::NormOp op, const float* dy, const float* xh, const float* rs, int r, int c,
                     const float* g, bool zc, float* dx, float* gg, float* gb) const override {
    b.norm_backward(op, dy, xh, rs, r, c, g, zc, dx, gg, gb);
  }
  void mlp_act_forward(backend::MlpActOp op, const float* h, int r, int f, float* a) const override {
    b.mlp_act_forward(op, h, r, f, a);
  }
  void mlp_act_backward(backend::MlpActOp op, const float* h, const float* da, int r, int f,
                        float* dh) const override {
    b.mlp_act_backward(op, h, da, r, f, dh);
  }
  void attention_forward(const float* q, int B, int T, int H, int d, float s, bool c, float* o,
                         float* p) const override {
    b.attention_forward(q, B, T, H, d, s, c, o, p);
  }
  void attention_backward(const float* q, const float* p, const float* go, int B, int T, int H, int d, float s,
                          bool c, float* ds, float* dq) const override {
    b.attention_backward(q, p, go, B, T, H, d, s, c, ds, dq);
  }
  void embed_forward(const std::uint8_t* t, int r, int T, const float* tok, const float* pos, int D,
                     float* x) const override {
    b.embed_forward(t, r, T, tok, pos, D, x);
  }
  void embed_backward(const std::uint8_t* t, int r, int T, const float* dx, int D, int V, int P, float* gt,
                      float* gp) const override {
    b.embed_backward(t, r, T, dx, D, V, P, gt, gp);
  }
  void block_cast(const backend::BlockCast& c, const float* x, int r, int cl, backend::BlockView rv,
                  backend::BlockView cv, backend::CastCounters* k) const override {
    b.block_cast(c, x, r, cl, rv, cv, k);
  }
  void gemm_fp8_block_tn(int M, int N, int K, int blk, const std::uint8_t* A, Format fa, const float* sa,
                         const std::uint8_t* B, Format fb, const float* sb, const float* amax_a, const float* amax_b,
                         const emu::GemmAccumulation& acc, float* D) const override {
    b.gemm_fp8_block_tn(M, N, K, blk, A, fa, sa, B, fb, sb, amax_a, amax_b, acc, D);
  }
  void block_scales_to_mxfp8(const float* in, int rows, int out_blocks, int repeat, float* out) const override {
    b.block_scales_to_mxfp8(in, rows, out_blocks, repeat, out);
  }

 private:
  bool host_;
};

}  // namespace fp8emu::testing
