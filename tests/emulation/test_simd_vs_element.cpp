// The emulator's SIMD and multi-threaded paths against the element layer (include/fp8emu/core),
// bit for bit, through the comparison `fp8emu validate` runs on a GPU (backend::check_kernels).
// backend::element_kernels() calls exactly the functions the CUDA kernels call, in the same
// decomposition (per element, per block, per tile; amax as a max of bits; counts as sums), so one
// element layer is checked against every vectorised CPU path here, and against the GPU by validate
// and the `gpu`-labelled tests (the thread mapping needs a GPU).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "fp8emu_internal/kernel_check.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/backend/kernels.hpp"

using namespace fp8emu;

namespace {

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
  emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt, std::uint8_t* qr,
                                    std::uint8_t* qc, float* amax) const override {
    return base_.cast_transpose(x, rows, cols, scale, fmt, qr, qc, amax);
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float sa, const std::uint8_t* B, Format fb,
                   float sb, const emu::GemmAccumulation& acc, float* D) const override {
    base_.gemm_fp8_tn(M, N, K, A, fa, sa, B, fb, sb, acc, D);
    if (M > 0 && N > 0 && std::isfinite(D[0]) && D[0] != 0.0f) D[0] = std::nextafter(D[0], INFINITY);
  }
  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     E8M0Rule rule, emu::QuantizeStats* st) const override {
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

TEST_CASE("Element layer: every emulator kernel (SIMD, OpenMP) bit-identical to the per-element kernels", "[element]") {
  const backend::Kernels& twins = backend::element_kernels();
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
  for (const char* method : {"compute_amax", "quantize", "cast_transpose", "dequantize", "transpose", "gemm_fp8_tn", "quantize_mxfp8",
                             "quantize_block_1d", "quantize_block_2d", "gemm_fp8_block_tn"}) {
    INFO(method);
    CHECK(std::any_of(rows.begin(), rows.end(), [&](const backend::KernelCheckRow& r) {
      return r.kernel == method || r.kernel.rfind(std::string(method) + " ", 0) == 0;
    }));
  }
  CHECK(values > 1000000);
}

TEST_CASE("Kernel check: a one-ulp fault in one GEMM element is reported", "[element]") {
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

TEST_CASE("Kernel check: NaNs with different payloads count apart, not as mismatches", "[element]") {
  CHECK(backend::same_f32(core::bits_to_f32(0x7FFFFFFFu), core::bits_to_f32(0xFFC00000u)));
  CHECK_FALSE(backend::same_f32(0.0f, -0.0f));
  CHECK_FALSE(backend::same_f32(INFINITY, core::bits_to_f32(0x7FC00000u)));
  CHECK(backend::same_f32(1.5f, 1.5f));
}

TEST_CASE("Element layer: the exact dot product keeps wide sums exact", "[element]") {
  // 65535 products 448 * 57344 = 49 * 2^19 each, and one tiny 2^-9 * 57344 = 112: at the 2^-32 LSB of
  // the exact sum the total needs more than 64 bits. Worked value: 65535 * 49 = 3211215 (22 bits),
  // so 3211215 * 2^19 is an fp32, and 112 is below half its ulp (2^17 / 2): RNE gives 3211215 * 2^19.
  std::vector<std::uint8_t> a(65536, 0x7E), b(65536, 0x7B);
  a[3] = 0x01;
  const float expected = 3211215.0f * 0x1p19f;
  const float emu_result =
      emu::dot_fp8(a.data(), Format::kE4M3, b.data(), Format::kE5M2, 65536, {emu::Accumulation::kExact, 0});
  CHECK(core::f32_to_bits(core::dot_exact(a.data(), kSpecE4M3, b.data(), kSpecE5M2, 65536)) ==
        core::f32_to_bits(expected));
  CHECK(core::f32_to_bits(emu_result) == core::f32_to_bits(expected));
}
