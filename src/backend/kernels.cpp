// The emulated kernel set and the cuda one's entry (see include/fp8emu/backend/kernels.hpp).
#include "fp8emu/backend/kernels.hpp"

#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

namespace {

class EmulatedKernels final : public Kernels {
 public:
  const char* name() const override { return "emulated"; }
  float compute_amax(const float* x, std::size_t n) const override { return emu::compute_amax(x, n); }
  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    return emu::quantize(x, n, scale, fmt, q, amax);
  }
  void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) const override {
    emu::dequantize(q, n, scale_inv, fmt, y);
  }
  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    emu::transpose(rows, cols, in, out);
  }
  emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt,
                                    std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax) const override {
    check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    emu::QuantizeStats st;
    emu::quantize_f32_2d(x, std::size_t(rows), std::size_t(cols), scale, fmt, q_rowwise, q_columnwise, amax, &st);
    return st;
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                   Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D) const override {
    emu::gemm_fp8_tn(M, N, K, A, fa, scale_inv_a, B, fb, scale_inv_b, acc, D);
  }
  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     E8M0Rule rule, emu::QuantizeStats* stats) const override {
    return emu::quantize_mxfp8(x, rows, cols, axis, fmt, rule, stats);
  }
  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                        int block, bool pow2, float epsilon,
                                        emu::QuantizeStats* stats) const override {
    return emu::quantize_block_1d(x, rows, cols, axis, fmt, block, pow2, epsilon, stats);
  }

  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float epsilon, emu::QuantizeStats* stats) const override {
    return emu::quantize_block_2d(x, rows, cols, fmt, tile, pow2, epsilon, stats);
  }
  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    emu::gemm_fp8_block_tn(A, B, D);
  }
};

}  // namespace

void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise) {
  emu::require_fp8(fmt, "cast_transpose");
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "cast_transpose: negative shape [", rows, ", ", cols, "]");
  FP8EMU_CHECK(q_rowwise || q_columnwise, "cast_transpose: both the row-wise and the column-wise output are null");
}

// The two single-axis casts: the definition of the fused casts' result (the emulated set's, each
// one cache-friendly pass of the emulator, and the element set's, the reference the GPU's fused
// kernels are checked against).
void Kernels::quantize_mxfp8_both(const float* x, int rows, int cols, Format fmt, E8M0Rule rule,
                                  emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                  emu::QuantizeStats* rowwise_stats, emu::QuantizeStats* columnwise_stats) const {
  check_block_both("MXFP8 quantize", rowwise, columnwise);
  if (rowwise) *rowwise = quantize_mxfp8(x, rows, cols, emu::BlockAxis::kRowwise, fmt, rule, rowwise_stats);
  if (columnwise)
    *columnwise = quantize_mxfp8(x, rows, cols, emu::BlockAxis::kColumnwise, fmt, rule, columnwise_stats);
}

void Kernels::quantize_block_1d_both(const float* x, int rows, int cols, Format fmt, int block, bool pow2,
                                     float epsilon, emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                     emu::QuantizeStats* rowwise_stats, emu::QuantizeStats* columnwise_stats) const {
  check_block_both("block quantize", rowwise, columnwise);
  if (rowwise)
    *rowwise = quantize_block_1d(x, rows, cols, emu::BlockAxis::kRowwise, fmt, block, pow2, epsilon, rowwise_stats);
  if (columnwise)
    *columnwise =
        quantize_block_1d(x, rows, cols, emu::BlockAxis::kColumnwise, fmt, block, pow2, epsilon, columnwise_stats);
}

void check_block_both(const char* what, const emu::BlockQuantized* rowwise, const emu::BlockQuantized* columnwise) {
  FP8EMU_CHECK(rowwise || columnwise, what, ": both the row-wise and the column-wise output are null");
}

const Kernels& emulated_kernels() {
  static const EmulatedKernels k;
  return k;
}

const Kernels& cuda_kernels() {
  const CudaStatus& s = cuda_status();
  FP8EMU_CHECK(s.usable(), "the cuda backend cannot run: ", s.why_not());
#if defined(FP8EMU_HAVE_CUDA)
  return cuda::kernels();
#else
  FP8EMU_FAIL("this fp8emu was built without CUDA");  // unreachable: usable() is false
#endif
}

}  // namespace fp8emu::backend
