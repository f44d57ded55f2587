// PROVISIONAL (branch cuda-device): a minimal backend::cpu_device() so that the GPU test of
// cuda_device() links in this branch. The cpu-device branch's device_cpu.cpp replaces this file at
// merge. Each operation runs the emulator function or core element function that device.hpp names,
// on host memory.
#include <cfloat>
#include <cstdlib>
#include <cstring>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend {
namespace {

class CpuDevice final : public Device {
 public:
  const char* name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) const override {
    if (bytes == 0) return nullptr;
    void* p = std::calloc(bytes, 1);
    FP8EMU_CHECK(p != nullptr, "cpu device: cannot allocate ", bytes, " bytes");
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
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f32_nn: negative size");
    emu::gemm_f32_nn(M, N, K, A, B, D);
  }
  void transpose_f32(int rows, int cols, const float* in, float* out) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "transpose: negative shape");
    emu::transpose(rows, cols, in, out);
  }

  void cast_transpose(const float* x, int rows, int cols, const float* scale, Format fmt, std::uint8_t* q_rowwise,
                      std::uint8_t* q_columnwise, float* amax, CastCounters* counters) const override {
    check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    emu::QuantizeStats st;
    emu::quantize_f32_2d(x, std::size_t(rows), std::size_t(cols), n ? *scale : 1.0f, fmt, q_rowwise, q_columnwise,
                         amax, &st);
    if (counters) {
      counters->count += st.count;
      counters->saturated += st.saturated;
      counters->underflow += st.underflow;
      counters->nan += st.nan;
    }
  }
  void current_scale(const float* x, std::size_t n, Format fmt, bool pow2, float epsilon,
                     float* scale) const override {
    emu::require_fp8(fmt, "current_scale");
    *scale = core::compute_scale_from_amax(emu::compute_amax(x, n), max_finite_f32(fmt), pow2, epsilon, FLT_MAX);
  }
  void delayed_update(float* history, float* scale, int num_slots, int history_len, float scaled_max,
                      bool most_recent) const override {
    FP8EMU_CHECK(num_slots >= 0, "delayed scaling: negative slot count");
    if (num_slots == 0) return;
    FP8EMU_CHECK(history_len >= 1, "delayed scaling: amax_history_len must be >= 1");
    for (int j = 0; j < num_slots; ++j)
      core::delayed_update_slot_fused(history, num_slots, history_len, j, scale, scaled_max, most_recent);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* scale_a,
                   const std::uint8_t* B, Format fb, const float* scale_b, const emu::GemmAccumulation& acc,
                   float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    if (M == 0 || N == 0) return;
    emu::gemm_fp8_tn(M, N, K, A, fa, emu::scale_inv_of(*scale_a), B, fb, emu::scale_inv_of(*scale_b), acc, D);
  }

  void bias_add(float* y, const float* b, int rows, int cols) const override {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) y[std::size_t(i) * std::size_t(cols) + std::size_t(j)] += b[j];
  }
  void column_sum(const float* x, int rows, int cols, float* out) const override {
    for (int j = 0; j < cols; ++j) out[j] = core::column_sum(x, rows, cols, j);
  }
  void activation_forward(ActivationOp act, const float* x, float* y, std::size_t n) const override {
    for (std::size_t i = 0; i < n; ++i)
      y[i] = act == ActivationOp::kReLU ? core::relu_forward(x[i]) : core::gelu_tanh_forward(x[i]);
  }
  void activation_backward(ActivationOp act, const float* pre, float* dx, std::size_t n) const override {
    for (std::size_t i = 0; i < n; ++i)
      dx[i] *= act == ActivationOp::kReLU ? core::relu_grad(pre[i]) : core::gelu_tanh_grad(pre[i]);
  }
  void softmax_xent(const float* logits, const std::uint8_t* labels, int rows, int classes, float divisor,
                    float* loss, float* dlogits) const override {
    for (int i = 0; i < rows; ++i) {
      const std::size_t at = std::size_t(i) * std::size_t(classes);
      loss[i] = core::softmax_xent_row(logits + at, classes, labels[i], divisor, dlogits ? dlogits + at : nullptr);
    }
  }
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) const override {
    for (std::size_t i = 0; i < n; ++i)
      core::adam_element(w[i], g[i], m[i], v[i], s.b1, s.b2, s.step, s.sqrt_bc2, s.eps);
  }
  void sgd(float* w, const float* g, float* m, std::size_t n, float momentum, float lr) const override {
    for (std::size_t i = 0; i < n; ++i) core::sgd_momentum_element(w[i], g[i], m[i], momentum, lr);
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice d;
  return d;
}

}  // namespace fp8emu::backend
