// The GPU twins' per-element bodies (cuda/twins.hpp) run on the CPU against the emulator, bit for
// bit, through the same comparison `fp8emu validate` runs on a GPU (backend::check_kernels). The
// kernel set below calls exactly the functions the CUDA kernels call, in the same decomposition
// (per element, per block, per tile; amax as a max of bits; counts as sums), so what it checks is
// the twins' arithmetic and order; the thread mapping itself needs a GPU (tests/gpu).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "cuda/twins.hpp"
#include "fp8emu_internal/kernel_check.hpp"
#include "fp8emu/backend/kernels.hpp"

using namespace fp8emu;
namespace twin = fp8emu::cuda::twin;

namespace {

emu::QuantizeStats add_counts(emu::QuantizeStats st, const twin::CastCounts& c) {
  st.saturated += c.saturated;
  st.underflow += c.underflow;
  st.nan += c.nan;
  return st;
}

class HostTwinKernels final : public backend::Kernels {
 public:
  const char* name() const override { return "host twins"; }

  float compute_amax(const float* x, std::size_t n) const override {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) m = twin::max_u32(m, twin::amax_bits(x[i]));
    return core::bits_to_f32(m);
  }

  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    const FormatSpec f = spec_of(fmt);
    emu::QuantizeStats st;
    st.count = n;
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      twin::CastCounts c;
      q[i] = twin::cast_element(x[i], scale, f, c);
      st = add_counts(st, c);
      m = twin::max_u32(m, twin::amax_bits(x[i]));
    }
    if (amax) *amax = std::fmax(*amax, core::bits_to_f32(m));
    return st;
  }

  void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) const override {
    for (std::size_t i = 0; i < n; ++i) y[i] = twin::dequantize_element(q[i], scale_inv, spec_of(fmt));
  }

  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) out[std::size_t(c) * rows + r] = in[std::size_t(r) * cols + c];
  }

  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                   Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D) const override {
    twin::check_gemm_tn(M, N, K, fa, fb, acc);
    const float s = scale_inv_a * scale_inv_b;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        D[std::size_t(i) * N + j] = twin::gemm_tn_element(A + std::size_t(i) * K, spec_of(fa), B + std::size_t(j) * K,
                                                          spec_of(fb), K, acc.model, acc.promotion_interval, s);
  }

  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     scaling::E8M0Rule rule, emu::QuantizeStats* stats) const override {
    return block_cast(x, rows, cols, axis, fmt, 32, twin::mxfp8_rule(fmt, rule), true, stats);
  }

  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                        int block, bool pow2, float epsilon,
                                        emu::QuantizeStats* stats) const override {
    return block_cast(x, rows, cols, axis, fmt, block, twin::float_block_rule(fmt, pow2, epsilon), false, stats);
  }

  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float epsilon, emu::QuantizeStats* stats) const override {
    const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
    std::vector<float> scale(std::size_t(tr) * tc), scale_inv(scale.size());
    for (int bi = 0; bi < tr; ++bi)
      for (int bj = 0; bj < tc; ++bj) {
        std::uint32_t m = 0;  // the tile's amax, a max of bits as the GPU's reduction
        for (int r = bi * tile; r < std::min(rows, (bi + 1) * tile); ++r)
          for (int c = bj * tile; c < std::min(cols, (bj + 1) * tile); ++c)
            m = twin::max_u32(m, twin::amax_bits(x[std::size_t(r) * cols + c]));
        const twin::BlockScale s = twin::block_scale(core::bits_to_f32(m), max_finite_f32(fmt), pow2, epsilon);
        scale[std::size_t(bi) * tc + bj] = s.scale;
        scale_inv[std::size_t(bi) * tc + bj] = s.scale_inv;
      }
    emu::BlockQuantized2D out;
    out.rowwise = twin::block_record(rows, cols, emu::BlockAxis::kRowwise, tile, fmt, false);
    out.columnwise = twin::block_record(rows, cols, emu::BlockAxis::kColumnwise, tile, fmt, false);
    emu::QuantizeStats st;
    st.count = std::size_t(rows) * cols;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        twin::CastCounts cc;
        out.rowwise.codes[std::size_t(r) * cols + c] =
            twin::cast_element(x[std::size_t(r) * cols + c], scale[std::size_t(r / tile) * tc + c / tile],
                               spec_of(fmt), cc);
        st = add_counts(st, cc);
      }
    transpose(rows, cols, out.rowwise.codes.data(), out.columnwise.codes.data());
    twin::spread_tile_scales(rows, cols, tile, scale_inv.data(), out);
    if (stats) *stats += st;
    return out;
  }

  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    twin::check_gemm_block_tn(A, B);
    const int nb = A.blocks();
    for (int i = 0; i < A.n; ++i)
      for (int j = 0; j < B.n; ++j)
        D[std::size_t(i) * B.n + j] = twin::gemm_block_element(
            A.codes.data() + std::size_t(i) * A.k, spec_of(A.format), A.scale_inv.data() + std::size_t(i) * nb,
            B.codes.data() + std::size_t(j) * B.k, spec_of(B.format), B.scale_inv.data() + std::size_t(j) * nb, A.k,
            A.block);
  }

 private:
  emu::BlockQuantized block_cast(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt, int block,
                                 const twin::BlockRule& rule, bool mx, emu::QuantizeStats* stats) const {
    emu::BlockQuantized q = twin::block_record(rows, cols, axis, block, fmt, mx);
    emu::QuantizeStats st;
    st.count = q.codes.size();
    for (int r = 0; r < q.n; ++r)
      for (int b = 0; b < q.blocks(); ++b) {
        twin::CastCounts c;
        twin::cast_view_block(x, axis == emu::BlockAxis::kRowwise, cols, r, b, block, q.k, q.blocks(), spec_of(fmt),
                              rule, q.codes.data(), q.scale_inv.data(), mx ? q.e8m0.data() : nullptr, c);
        st = add_counts(st, c);
      }
    if (stats) *stats += st;
    return q;
  }
};

// The emulator with one deliberate fault, to show the comparison sees it.
class OffByOneUlpGemm final : public backend::Kernels {
 public:
  explicit OffByOneUlpGemm(const backend::Kernels& base) : base_(base) {}
  const char* name() const override { return "faulty"; }
  float compute_amax(const float* x, std::size_t n) const override { return base_.compute_amax(x, n); }
  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    return base_.quantize(x, n, scale, fmt, q, amax);
  }
  void dequantize(const std::uint8_t* q, std::size_t n, float si, Format fmt, float* y) const override {
    base_.dequantize(q, n, si, fmt, y);
  }
  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    base_.transpose(rows, cols, in, out);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float sa, const std::uint8_t* B, Format fb,
                   float sb, const emu::GemmAccumulation& acc, float* D) const override {
    base_.gemm_fp8_tn(M, N, K, A, fa, sa, B, fb, sb, acc, D);
    if (M > 0 && N > 0 && std::isfinite(D[0]) && D[0] != 0.0f) D[0] = std::nextafter(D[0], INFINITY);
  }
  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     scaling::E8M0Rule rule, emu::QuantizeStats* st) const override {
    return base_.quantize_mxfp8(x, rows, cols, axis, fmt, rule, st);
  }
  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt, int block,
                                        bool pow2, float eps, emu::QuantizeStats* st) const override {
    return base_.quantize_block_1d(x, rows, cols, axis, fmt, block, pow2, eps, st);
  }
  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float eps, emu::QuantizeStats* st) const override {
    return base_.quantize_block_2d(x, rows, cols, fmt, tile, pow2, eps, st);
  }
  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    base_.gemm_fp8_block_tn(A, B, D);
  }

 private:
  const backend::Kernels& base_;
};

}  // namespace

TEST_CASE("GPU twins run on the CPU: every kernel bit-identical to the emulator", "[gpu-twins]") {
  const HostTwinKernels twins;
  backend::KernelCheckOptions opt;
  opt.sizes = {1, 17, 40, 131};
  opt.seed = 7;
  const std::vector<backend::KernelCheckRow> rows = backend::check_kernels(backend::emulated_kernels(), twins, opt);
  REQUIRE(!rows.empty());
  std::uint64_t values = 0;
  for (const backend::KernelCheckRow& r : rows) {
    INFO(r.kernel << ", " << r.inputs << ": " << r.first_mismatch);
    CHECK(r.mismatches == 0);
    CHECK(r.values > 0);
    values += r.values;
  }
  // Every method is covered.
  for (const char* method : {"compute_amax", "quantize", "dequantize", "transpose", "gemm_fp8_tn", "quantize_mxfp8",
                             "quantize_block_1d", "quantize_block_2d", "gemm_fp8_block_tn"}) {
    INFO(method);
    CHECK(std::any_of(rows.begin(), rows.end(), [&](const backend::KernelCheckRow& r) {
      return r.kernel == method || r.kernel.rfind(std::string(method) + " ", 0) == 0;
    }));
  }
  CHECK(values > 1000000);
}

TEST_CASE("Kernel check: a one-ulp fault in one GEMM element is reported", "[gpu-twins]") {
  const OffByOneUlpGemm faulty(backend::emulated_kernels());
  backend::KernelCheckOptions opt;
  opt.sizes = {5};
  opt.only = "gemm_fp8_tn";
  const std::vector<backend::KernelCheckRow> rows = backend::check_kernels(backend::emulated_kernels(), faulty, opt);
  CHECK(backend::total_mismatches(rows) > 0);
  bool named = false;
  for (const backend::KernelCheckRow& r : rows) named |= r.first_mismatch.find("D[0]") != std::string::npos;
  CHECK(named);
  CHECK(backend::format_rows(rows).find("First mismatch per row") != std::string::npos);
}

TEST_CASE("Kernel check: NaNs with different payloads count apart, not as mismatches", "[gpu-twins]") {
  CHECK(backend::same_f32(core::bits_to_f32(0x7FFFFFFFu), core::bits_to_f32(0xFFC00000u)));
  CHECK_FALSE(backend::same_f32(0.0f, -0.0f));
  CHECK_FALSE(backend::same_f32(INFINITY, core::bits_to_f32(0x7FC00000u)));
  CHECK(backend::same_f32(1.5f, 1.5f));
}

TEST_CASE("Twins: exact dot product rounding of wide sums", "[gpu-twins]") {
  // 65536 products of 448 * 57344 (2^24.6 each): the sum needs more than 64 bits at the 2^-32 LSB.
  std::vector<std::uint8_t> a(65536, 0x7E), b(65536, 0x7B);
  a[3] = 0x01;  // one tiny product that must not be lost before the single rounding
  const float ref = emu::dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE5M2, 65536, {emu::Accumulation::kExact, 0});
  const float tw = twin::dot_exact(a.data(), kSpecE4M3, b.data(), kSpecE5M2, 65536);
  CHECK(core::f32_to_bits(ref) == core::f32_to_bits(tw));
}
