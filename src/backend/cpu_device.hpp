// Private to src/backend: the host-memory Device (cpu_device(), element_device()). Every operation is
// the emulator function or the core element function the interface names (device.hpp); loops over
// elements, rows or columns run on OpenMP threads, each element's arithmetic on one thread, so
// results do not depend on the thread count. The FP8 arithmetic sits behind the protected virtual
// methods at the end of the operations (compute_amax, cast_transpose_host, quantize_blocks,
// quantize_tiles, gemm_fp8_tn_host, gemm_fp8_block_tn_host): cpu_device() runs the emulator's
// SIMD paths, element_device() (device_element.cpp) overrides them with the per-element reference.
#pragma once

#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/attention.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/hadamard.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/activation.hpp"
#include "fp8emu/emulation/attention.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/emulation/optimizer.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend::detail {

// Element loops fork threads only from this size (as the emulation kernels).
inline constexpr std::ptrdiff_t kParallelMin = std::ptrdiff_t(1) << 15;

inline void check_size(int rows, int cols, const char* what) {
  FP8EMU_CHECK(rows >= 0 && cols >= 0, what, ": sizes must be non-negative, got [", rows, ", ", cols, "]");
}

// A cast's counts added to a device's counters (nullable).
inline void add_counts(CastCounters* c, const emu::QuantizeStats& st) {
  if (!c) return;
  c->count += st.count;
  c->saturated += st.saturated;
  c->underflow += st.underflow;
  c->nan += st.nan;
}

class CpuDevice : public Device {
 public:
  explicit CpuDevice(const char* name) : name_(name) {}
  const char* name() const override { return name_; }
  bool host_memory() const override { return true; }

  void* allocate(std::size_t bytes) const override {
    if (bytes == 0) return nullptr;
    void* p = std::calloc(1, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) const noexcept override { std::free(p); }
  void upload(void* dst, const void* src, std::size_t bytes) const override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) const override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) const override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, std::size_t bytes) const override {
    if (bytes) std::memset(p, 0, bytes);
  }

  void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f32_nn: sizes must be non-negative, got M=", M, " N=", N, " K=", K);
    emu::gemm_f32_nn(M, N, K, A, B, D);
  }
  void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    gemm_f32_nn(M, N, K, A, B, D);
  }
  void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) const override {
    emu::gemm_tc_nn(M, N, K, A, B, model, D);
  }
  void transpose_f32(int rows, int cols, const float* in, float* out) const override {
    check_size(rows, cols, "transpose");
    emu::transpose(rows, cols, in, out);
  }

  void cast_transpose(const float* x, int rows, int cols, const float* scale, Format fmt, std::uint8_t* q_rowwise,
                      std::uint8_t* q_columnwise, float* amax, CastCounters* counters) const override {
    const bool empty = std::size_t(rows > 0 ? rows : 0) * std::size_t(cols > 0 ? cols : 0) == 0;
    const emu::QuantizeStats st =  // the scale is not read for an empty cast (it may be null then)
        cast_transpose_host(x, rows, cols, empty ? 1.0f : *scale, fmt, q_rowwise, q_columnwise, amax);
    add_counts(counters, st);
  }
  void current_scale(const float* x, std::size_t n, Format fmt, bool pow2, float epsilon,
                     float* scale) const override {
    emu::require_fp8(fmt, "current scaling");
    const float amax = compute_amax(x, n);
    *scale = core::compute_scale_from_amax(amax, max_finite_f32(fmt), pow2, epsilon, FLT_MAX);
  }
  void delayed_update(float* history, float* scale, int num_slots, int history_len, float scaled_max,
                      bool most_recent) const override {
    FP8EMU_CHECK(num_slots >= 0 && history_len >= 1, "delayed scaling update: need a non-negative slot count and "
                 "at least one history row, got ", num_slots, " and ", history_len);
    for (int j = 0; j < num_slots; ++j)
      core::delayed_update_slot_fused(history, num_slots, history_len, j, scale, scaled_max, most_recent);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* scale_a, const std::uint8_t* B,
                   Format fb, const float* scale_b, const emu::GemmAccumulation& acc, float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    if (M == 0 || N == 0) return;  // nothing to write: the scales are not read (they may be null then)
    gemm_fp8_tn_host(M, N, K, A, fa, emu::scale_inv_of(*scale_a), B, fb, emu::scale_inv_of(*scale_b), acc, D);
  }

  // The emulator's block casts into records, then copied into the views (host memory here).
  void block_cast(const BlockCast& c, const float* x, int rows, int cols, BlockView rowwise, BlockView columnwise,
                  CastCounters* counters) const override {
    check_block_cast(c, rows, cols, rowwise, columnwise);
    const bool row = rowwise.codes != nullptr, col = columnwise.codes != nullptr;
    emu::BlockQuantized r, cq;
    emu::QuantizeStats st;
    if (c.tiles) {
      emu::BlockQuantized2D w = quantize_tiles(c, x, rows, cols, &st);
      r = std::move(w.rowwise);
      cq = std::move(w.columnwise);
    } else {  // each view cast independently from x; the counts of the row-wise one when it is made
      if (row) r = quantize_blocks(c, x, rows, cols, emu::BlockAxis::kRowwise, &st);
      // The column-wise view of the Hadamard transform: cast from the transformed copy (same shape).
      std::vector<float> t;
      if (col && c.rht_columnwise) t = hadamard_rows(x, rows, cols, c.rht_sign_mask);
      if (col) cq = quantize_blocks(c, t.empty() ? x : t.data(), rows, cols, emu::BlockAxis::kColumnwise,
                                    row ? nullptr : &st);
    }
    auto put = [](const emu::BlockQuantized& q, BlockView v) {
      if (!v.codes) return;
      std::memcpy(v.codes, q.codes.data(), q.codes.size());
      std::memcpy(v.scale_inv, q.scale_inv.data(), q.scale_inv.size() * sizeof(float));
      if (q.amax) *v.amax = *q.amax;
    };
    put(r, rowwise);
    put(cq, columnwise);
    add_counts(counters, st);
  }
  void gemm_fp8_block_tn(int M, int N, int K, int block, const std::uint8_t* A, Format fa, const float* sa,
                         const std::uint8_t* B, Format fb, const float* sb, const float* amax_a,
                         const float* amax_b, const emu::GemmAccumulation& acc, float* D) const override {
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0 && block >= 1, "block-scaled GEMM: bad shape M=", M, " N=", N, " K=", K,
                 " block=", block);
    emu::check_block_accumulation(acc);
    auto record = [&](int n, const std::uint8_t* codes, Format f, const float* s, const float* amax) {
      emu::BlockQuantized q;
      q.n = n;
      q.k = K;
      q.block = block;
      q.format = f;
      q.codes.assign(codes, codes + std::size_t(n) * std::size_t(K));
      q.scale_inv.assign(s, s + std::size_t(n) * std::size_t(q.blocks()));
      if (amax) q.amax = *amax;
      return q;
    };
    gemm_fp8_block_tn_host(record(M, A, fa, sa, amax_a), record(N, B, fb, sb, amax_b), acc, D);
  }

  void block_scales_to_mxfp8(const float* in, int rows, int out_blocks, int repeat, float* out) const override {
    FP8EMU_CHECK(rows >= 0 && out_blocks >= 0 && repeat >= 1, "block_scales_to_mxfp8: bad shape rows=", rows,
                 " out_blocks=", out_blocks, " repeat=", repeat);
    const int in_blocks = (out_blocks + repeat - 1) / repeat;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < out_blocks; ++j)
        out[std::size_t(r) * std::size_t(out_blocks) + std::size_t(j)] = core::bits_to_f32(
            core::mxfp8_scale_from_block_scale_inv_bits(core::f32_to_bits(in[std::size_t(r) * std::size_t(in_blocks) + std::size_t(j / repeat)])));
  }

 protected:
  // The FP8 arithmetic on host arrays behind the operations above: the emulator's (SIMD and OpenMP
  // paths); element_device() overrides them with the per-element reference.
  virtual float compute_amax(const float* x, std::size_t n) const { return emu::compute_amax(x, n); }
  virtual emu::QuantizeStats cast_transpose_host(const float* x, int rows, int cols, float scale, Format fmt,
                                                 std::uint8_t* q_rowwise, std::uint8_t* q_columnwise,
                                                 float* amax) const {
    check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    emu::QuantizeStats st;
    emu::quantize_f32_2d(x, std::size_t(rows), std::size_t(cols), scale, fmt, q_rowwise, q_columnwise, amax, &st);
    return st;
  }
  virtual void gemm_fp8_tn_host(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                                const std::uint8_t* B, Format fb, float scale_inv_b,
                                const emu::GemmAccumulation& acc, float* D) const {
    emu::gemm_fp8_tn(M, N, K, A, fa, scale_inv_a, B, fb, scale_inv_b, acc, D);
  }
  /// TE's RHT of x [rows, cols] along its rows, 16 at a time: element (16 g + j, c) is
  /// core::rht16_element of rows 16 g .. 16 g + 15 of column c; rows past the last full group are x's.
  static std::vector<float> hadamard_rows(const float* x, int rows, int cols, std::uint16_t sign_mask) {
    std::vector<float> t(std::size_t(rows) * std::size_t(cols));
    const int groups = rows / core::kRhtSize;
    const std::size_t C = std::size_t(cols);
    // Per group of 16 rows: the inputs through rht16_input once, then each output row summed in
    // increasing i over whole rows (vectorised over the columns): the additions of
    // core::rht16_output, which the GPU runs per output, in the same order.
#pragma omp parallel if (std::ptrdiff_t(rows) * cols >= 1 << 15)
    {
      std::vector<double> v(core::kRhtSize * C), sum(C);
#pragma omp for schedule(static)
      for (int g = 0; g < groups; ++g) {
        const std::size_t r = std::size_t(g) * core::kRhtSize;
        for (int i = 0; i < core::kRhtSize; ++i)
          for (std::size_t cc = 0; cc < C; ++cc) v[std::size_t(i) * C + cc] = core::rht16_input(x[(r + std::size_t(i)) * C + cc]);
        for (int j = 0; j < core::kRhtSize; ++j) {
          for (std::size_t cc = 0; cc < C; ++cc) sum[cc] = 0.0;
          for (int i = 0; i < core::kRhtSize; ++i) {
            const bool negative = (core::hadamard16_entry(i, j) < 0) != (((sign_mask >> i) & 1u) != 0);
            const double* vi = v.data() + std::size_t(i) * C;
            if (negative)
              for (std::size_t cc = 0; cc < C; ++cc) sum[cc] += -vi[cc];
            else
              for (std::size_t cc = 0; cc < C; ++cc) sum[cc] += vi[cc];
          }
          float* out = t.data() + (r + std::size_t(j)) * C;
          for (std::size_t cc = 0; cc < C; ++cc)
            out[cc] = core::bits_to_f32(core::bf16_to_f32_bits(
                core::f32_bits_to_bf16_rne(core::f32_to_bits(float(sum[cc] * 0.25)))));
        }
      }
    }
    // A trailing group of fewer than 16 rows is not transformed (core::rht16_element's tail rule).
    std::copy(x + std::size_t(groups) * core::kRhtSize * C, x + std::size_t(rows) * C,
              t.begin() + std::ptrdiff_t(std::size_t(groups) * core::kRhtSize * C));
    return t;
  }
  /// One view of a 1 x block cast (emu::quantize_blocks with the cast's rule).
  virtual emu::BlockQuantized quantize_blocks(const BlockCast& c, const float* x, int rows, int cols,
                                              emu::BlockAxis axis, emu::QuantizeStats* stats) const {
    return emu::quantize_blocks(x, rows, cols, axis, c.fmt, c.block,
                                c.view_rule(axis == emu::BlockAxis::kColumnwise, rows, cols), stats);
  }
  /// Both views of a tile cast (emu::quantize_tiles with the cast's rule).
  virtual emu::BlockQuantized2D quantize_tiles(const BlockCast& c, const float* x, int rows, int cols,
                                               emu::QuantizeStats* stats) const {
    return emu::quantize_tiles(x, rows, cols, c.fmt, c.block, c.block_rule(), stats);
  }
  virtual void gemm_fp8_block_tn_host(const emu::BlockQuantized& A, const emu::BlockQuantized& B,
                                      const emu::GemmAccumulation& acc, float* D) const {
    emu::gemm_fp8_block_tn(A, B, acc, D);
  }

 public:
  void bias_add(float* y, const float* b, int rows, int cols) const override {
    check_size(rows, cols, "bias add");
    for (int i = 0; i < rows; ++i) {
      float* r = y + std::size_t(i) * std::size_t(cols);
      for (int j = 0; j < cols; ++j) r[j] += b[j];
    }
  }
  void column_sum(const float* x, int rows, int cols, float* out) const override {
    check_size(rows, cols, "column sum");
    // Row order per column, as core::column_sum; the loop nest runs rows outermost for the cache,
    // which adds the same terms in the same order.
    for (int j = 0; j < cols; ++j) out[j] = 0.0f;
    for (int i = 0; i < rows; ++i) {
      const float* r = x + std::size_t(i) * std::size_t(cols);
      for (int j = 0; j < cols; ++j) out[j] += r[j];
    }
  }
  void activation_forward(ActivationOp act, const float* x, float* y, std::size_t n) const override {
    const std::ptrdiff_t count = std::ptrdiff_t(n);
    if (act == ActivationOp::kReLU) {
      for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = core::relu_forward(x[i]);
    } else {
      emu::gelu_tanh_forward(x, n, y);  // core::gelu_tanh_forward per element, vectorised
    }
  }
  void activation_backward(ActivationOp act, const float* pre, float* dx, std::size_t n) const override {
    const std::ptrdiff_t count = std::ptrdiff_t(n);
    if (act == ActivationOp::kReLU) {
      for (std::ptrdiff_t i = 0; i < count; ++i) dx[i] *= core::relu_grad(pre[i]);
    } else {
      emu::gelu_tanh_backward(pre, dx, n, dx);  // dx * core::gelu_tanh_grad per element, vectorised
    }
  }
  void softmax_xent(const float* logits, const std::uint8_t* labels, int rows, int classes, float divisor,
                    float* loss, float* dlogits) const override {
    check_size(rows, classes, "cross-entropy");
    FP8EMU_CHECK(rows == 0 || classes >= 1, "cross-entropy: no classes");
    for (int i = 0; i < rows; ++i) {
      const std::size_t o = std::size_t(i) * std::size_t(classes);
      loss[i] = core::softmax_xent_row(logits + o, classes, labels[i], divisor, dlogits ? dlogits + o : nullptr);
    }
  }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) const override {
    emu::adam_step(w, g, m, v, n, s.b1, s.b2, s.step, s.sqrt_bc2, s.eps);  // core::adam_element's bits
  }
  void sgd(float* w, const float* g, float* m, std::size_t n, float momentum, float lr) const override {
    const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < count; ++i) core::sgd_momentum_element(w[i], g[i], m[i], momentum, lr);
  }

  void add(const float* a, const float* b, float* out, std::size_t n) const override {
    for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
  void round_bf16(float* x, std::size_t n) const override {
    for (std::size_t i = 0; i < n; ++i)
      x[i] = core::bits_to_f32(core::bf16_to_f32_bits(core::f32_bits_to_bf16_rne(core::f32_to_bits(x[i]))));
  }
  void round_tf32(float* x, std::size_t n) const override {
    for (std::size_t i = 0; i < n; ++i) x[i] = core::bits_to_f32(core::f32_bits_to_tf32_rna(core::f32_to_bits(x[i])));
  }
  void norm_forward(NormOp op, const float* x, int rows, int cols, const float* gamma, const float* beta, float eps,
                    bool zero_centered_gamma, float* y, float* xhat, float* rsigma) const override {
    check_size(rows, cols, "norm");
    const bool ln = op == NormOp::kLayerNorm;
#pragma omp parallel for schedule(static) if (rows >= 64)
    for (int i = 0; i < rows; ++i) {
      const std::size_t o = std::size_t(i) * std::size_t(cols);
      rsigma[i] = core::norm_forward_row(x + o, cols, ln, eps, gamma, beta, zero_centered_gamma, y + o, xhat + o);
    }
  }
  void norm_backward(NormOp op, const float* dy, const float* xhat, const float* rsigma, int rows, int cols,
                     const float* gamma, bool zero_centered_gamma, float* dx, float* grad_gamma,
                     float* grad_beta) const override {
    check_size(rows, cols, "norm backward");
    const bool ln = op == NormOp::kLayerNorm;
    for (int j = 0; j < cols; ++j) {
      float g = 0.0f, b = 0.0f;
      core::norm_param_grad_column(dy, xhat, rows, cols, j, g, b);
      grad_gamma[j] = g;
      grad_beta[j] = ln ? b : 0.0f;
    }
#pragma omp parallel for schedule(static) if (rows >= 64)
    for (int i = 0; i < rows; ++i) {
      const std::size_t o = std::size_t(i) * std::size_t(cols);
      core::norm_backward_row(dy + o, xhat + o, rsigma[i], cols, ln, gamma, zero_centered_gamma, dx + o);
    }
  }
  void mlp_act_forward(MlpActOp op, const float* h, int rows, int ffn, float* act) const override {
    check_size(rows, ffn, "MLP activation");
    if (op == MlpActOp::kGelu) return emu::gelu_tanh_forward(h, std::size_t(rows) * std::size_t(ffn), act);
    const std::size_t w = 2 * std::size_t(ffn);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows) * ffn >= kParallelMin / 16)
    for (int i = 0; i < rows; ++i) {
      const float* hr = h + std::size_t(i) * w;
      float* ar = act + std::size_t(i) * std::size_t(ffn);
      for (int j = 0; j < ffn; ++j)
        ar[j] = core::swiglu_forward(hr[j], hr[ffn + j]);
    }
  }
  void mlp_act_backward(MlpActOp op, const float* h, const float* da, int rows, int ffn, float* dh) const override {
    check_size(rows, ffn, "MLP activation backward");
    if (op == MlpActOp::kGelu) return emu::gelu_tanh_backward(h, da, std::size_t(rows) * std::size_t(ffn), dh);
    const std::size_t w = 2 * std::size_t(ffn);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows) * ffn >= kParallelMin / 16)
    for (int i = 0; i < rows; ++i) {
      const float* hr = h + std::size_t(i) * w;
      const float* dar = da + std::size_t(i) * std::size_t(ffn);
      float* dhr = dh + std::size_t(i) * w;
      for (int j = 0; j < ffn; ++j) core::swiglu_backward(hr[j], hr[ffn + j], dar[j], dhr[j], dhr[ffn + j]);
    }
  }
  void attention_forward(const float* qkv, int B, int T, int H, int d, float scale, bool causal, float* out,
                         float* probs) const override {
    FP8EMU_CHECK(B >= 0 && T >= 0 && H >= 0 && d >= 0, "attention: negative size");
    const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D;
#pragma omp parallel for schedule(static) collapse(2) if (B * H >= 4)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const float* base = qkv + std::size_t(b) * std::size_t(T) * ld + std::size_t(h) * std::size_t(d);
        // core::attention_row_forward for every row i, vectorised over keys (emulation/attention.cpp)
        emu::attention_forward_head(base, base + D, base + 2 * D, int(ld), T, d, scale, causal,
                                    probs + std::size_t(b * H + h) * std::size_t(T) * std::size_t(T),
                                    out + std::size_t(b) * std::size_t(T) * D + std::size_t(h) * std::size_t(d), int(D));
      }
  }
  void attention_backward(const float* qkv, const float* probs, const float* dout, int B, int T, int H, int d,
                          float scale, bool causal, float* ds, float* dqkv) const override {
    FP8EMU_CHECK(B >= 0 && T >= 0 && H >= 0 && d >= 0, "attention: negative size");
    const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D, TT = std::size_t(T) * std::size_t(T);
#pragma omp parallel for schedule(static) collapse(2) if (B * H >= 4)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const std::size_t row0 = std::size_t(b) * std::size_t(T), hd = std::size_t(h) * std::size_t(d);
        const float* q0 = qkv + row0 * ld + hd;
        const float* p0 = probs + std::size_t(b * H + h) * TT;
        float* ds0 = ds + std::size_t(b * H + h) * TT;
        const float* go0 = dout + row0 * D + hd;
        float* dq0 = dqkv + row0 * ld + hd;
        // core::attention_row_backward_q for every row i, vectorised over keys (emulation/attention.cpp)
        emu::attention_backward_q_head(p0, go0, int(D), q0 + D, q0 + 2 * D, int(ld), T, d, scale, causal, ds0, dq0,
                                       int(ld));
        for (int j = 0; j < T; ++j)
          core::attention_col_backward_kv(ds0, p0, T, q0, int(ld), go0, int(D), j, T, d, causal, dq0 + std::size_t(j) * ld + D,
                                          dq0 + std::size_t(j) * ld + 2 * D);
      }
  }
  void embed_forward(const std::uint8_t* tokens, int rows, int T, const float* tok, const float* pos, int D,
                     float* x) const override {
    check_size(rows, D, "embedding");
    for (int r = 0; r < rows; ++r) {
      const float* te = tok + std::size_t(tokens[r]) * std::size_t(D);
      const float* pe = pos + std::size_t(r % T) * std::size_t(D);
      float* xr = x + std::size_t(r) * std::size_t(D);
      for (int c = 0; c < D; ++c) xr[c] = te[c] + pe[c];
    }
  }
  void embed_backward(const std::uint8_t* tokens, int rows, int T, const float* dx, int D, int V, int P,
                      float* grad_tok, float* grad_pos) const override {
    check_size(rows, D, "embedding backward");
    std::memset(grad_tok, 0, std::size_t(V) * std::size_t(D) * sizeof(float));
    std::memset(grad_pos, 0, std::size_t(P) * std::size_t(D) * sizeof(float));
    for (int r = 0; r < rows; ++r) {
      float* gt = grad_tok + std::size_t(tokens[r]) * std::size_t(D);
      float* gp = grad_pos + std::size_t(r % T) * std::size_t(D);
      const float* g = dx + std::size_t(r) * std::size_t(D);
      for (int c = 0; c < D; ++c) {
        gt[c] += g[c];
        gp[c] += g[c];
      }
    }
  }

 private:
  const char* name_;
};

}  // namespace fp8emu::backend::detail
