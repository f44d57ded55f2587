// The per-element kernel set (see include/fp8emu/backend/kernels.hpp, element_kernels()): every
// method runs the element layer of include/fp8emu/core on one thread, in the decomposition the
// CUDA kernels use (per element, per block, per tile; the amax as a max of bits; counts as sums),
// with the argument checks every backend shares (emu::check_*). The emulator's SIMD and
// multi-threaded paths, and the GPU, are checked against it bit for bit.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend {
namespace {

emu::QuantizeStats& add_counts(emu::QuantizeStats& st, const core::CastCounts& c) {
  st.saturated += c.saturated;
  st.underflow += c.underflow;
  st.nan += c.nan;
  return st;
}

class ElementKernels final : public Kernels {
 public:
  const char* name() const override { return "element"; }

  float compute_amax(const float* x, std::size_t n) const override {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) m = core::max_u32(m, core::amax_bits(x[i]));
    return core::bits_to_f32(m);
  }

  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    const FormatSpec f = spec_of(fmt);
    emu::QuantizeStats st;
    st.count = n;
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      core::CastCounts c;
      q[i] = core::cast_element(x[i], scale, f, c);
      add_counts(st, c);
      m = core::max_u32(m, core::amax_bits(x[i]));
    }
    if (amax) *amax = std::fmax(*amax, core::bits_to_f32(m));  // as emu::quantize
    return st;
  }

  void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) const override {
    const FormatSpec f = spec_of(fmt);
    for (std::size_t i = 0; i < n; ++i) y[i] = core::dequantize_element(q[i], scale_inv, f);
  }

  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        out[std::size_t(c) * std::size_t(rows) + std::size_t(r)] = in[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
  }

  // One thread per element in the GPU kernel: each element cast once, written to both places.
  emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt,
                                    std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax) const override {
    check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    const FormatSpec f = spec_of(fmt);
    emu::QuantizeStats st;
    st.count = std::size_t(rows) * std::size_t(cols);
    std::uint32_t m = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const float v = x[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
        core::CastCounts cc;
        const std::uint8_t code = core::cast_element(v, scale, f, cc);
        add_counts(st, cc);
        m = core::max_u32(m, core::amax_bits(v));
        if (q_rowwise) q_rowwise[std::size_t(r) * std::size_t(cols) + std::size_t(c)] = code;
        if (q_columnwise) q_columnwise[std::size_t(c) * std::size_t(rows) + std::size_t(r)] = code;
      }
    if (amax) *amax = std::fmax(*amax, core::bits_to_f32(m));  // as emu::quantize
    return st;
  }

  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                   Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    const float s = core::mul_rn(scale_inv_a, scale_inv_b);
    const AccumulationModel& m = model_of(acc.model);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
            core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), spec_of(fa), B + std::size_t(j) * std::size_t(K),
                                  spec_of(fb), K, m, acc.promotion_interval, acc.split_k, s);
  }

  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     E8M0Rule rule, emu::QuantizeStats* stats) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "MXFP8 quantize: negative shape");
    return block_cast(x, rows, cols, axis, fmt, 32, emu::mxfp8_rule(fmt, rule), stats);
  }

  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                        int block, bool pow2, float epsilon,
                                        emu::QuantizeStats* stats) const override {
    FP8EMU_CHECK(block >= 1, "block quantize: block size must be >= 1, got ", block);
    return block_cast(x, rows, cols, axis, fmt, block, core::BlockRule::fp32_scale(spec_of(fmt), pow2, epsilon),
                      stats);
  }



  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float epsilon, emu::QuantizeStats* stats) const override {
    FP8EMU_CHECK(tile >= 1, "block quantize: tile size must be >= 1, got ", tile);
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "block quantize: negative shape");
    const FormatSpec f = spec_of(fmt);
    const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
    std::vector<float> scale(std::size_t(tr) * std::size_t(tc)), scale_inv(scale.size());
    for (int bi = 0; bi < tr; ++bi)
      for (int bj = 0; bj < tc; ++bj) {
        const float amax = core::tile_amax(x, rows, cols, tile, bi, bj);  // the GPU reduces the same bits
        const core::BlockScale s = core::block_scale(amax, float(f.max_finite()), pow2, epsilon);
        scale[std::size_t(bi) * std::size_t(tc) + std::size_t(bj)] = s.scale;
        scale_inv[std::size_t(bi) * std::size_t(tc) + std::size_t(bj)] = s.scale_inv;
      }
    emu::BlockQuantized2D out;
    out.rowwise = emu::make_block_record(rows, cols, emu::BlockAxis::kRowwise, tile, fmt, false);
    out.columnwise = emu::make_block_record(rows, cols, emu::BlockAxis::kColumnwise, tile, fmt, false);
    emu::QuantizeStats st;
    st.count = std::size_t(rows) * std::size_t(cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        core::CastCounts cc;
        const std::size_t i = std::size_t(r) * std::size_t(cols) + std::size_t(c);
        out.rowwise.codes[i] =
            core::cast_element(x[i], scale[core::tile_index(r, c, tile, tc)], f, cc);
        add_counts(st, cc);
      }
    transpose(rows, cols, out.rowwise.codes.data(), out.columnwise.codes.data());
    emu::spread_tile_scales(rows, cols, tile, scale_inv.data(), out);
    if (stats) *stats += st;
    return out;
  }

  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    emu::check_gemm_block_tn(A, B);
    const int nb = A.blocks();
    for (int i = 0; i < A.n; ++i)
      for (int j = 0; j < B.n; ++j)
        D[std::size_t(i) * std::size_t(B.n) + std::size_t(j)] = core::gemm_block_element(
            A.codes.data() + std::size_t(i) * std::size_t(A.k), spec_of(A.format),
            A.scale_inv.data() + std::size_t(i) * std::size_t(nb), B.codes.data() + std::size_t(j) * std::size_t(B.k),
            spec_of(B.format), B.scale_inv.data() + std::size_t(j) * std::size_t(nb), A.k, A.block);
  }

 private:
  emu::BlockQuantized block_cast(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt, int block,
                                 const core::BlockRule& rule, emu::QuantizeStats* stats) const {
    emu::BlockQuantized q = emu::make_block_record(rows, cols, axis, block, fmt, rule.is_mxfp8());
    emu::QuantizeStats st;
    st.count = q.codes.size();
    for (int r = 0; r < q.n; ++r)
      for (int b = 0; b < q.blocks(); ++b) {
        core::CastCounts c;
        core::cast_view_block(x, axis == emu::BlockAxis::kRowwise, cols, r, b, block, q.k, q.blocks(), spec_of(fmt),
                              rule, q.codes.data(), q.scale_inv.data(), rule.is_mxfp8() ? q.e8m0.data() : nullptr, c);
        add_counts(st, c);
      }
    if (stats) *stats += st;
    return q;
  }
};

}  // namespace

const Kernels& element_kernels() {
  static const ElementKernels k;
  return k;
}

}  // namespace fp8emu::backend
