// backend::element_device(): the host-memory Device whose FP8 casts and GEMMs run the element layer
// of include/fp8emu/core on one thread, in the decomposition the CUDA kernels use (per element, per
// block, per tile; the amax as a max of bits; counts as sums), with the argument checks every
// backend shares. The emulator's SIMD and multi-threaded paths (cpu_device()) and the GPU
// (cuda_device()) are checked against it bit for bit (fp8emu_internal/device_check.hpp). Every
// other operation is cpu_device()'s (cpu_device.hpp).
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_device.hpp"
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

void transpose_codes(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      out[std::size_t(c) * std::size_t(rows) + std::size_t(r)] = in[std::size_t(r) * std::size_t(cols) + std::size_t(c)];
}

class ElementDevice final : public detail::CpuDevice {
 public:
  ElementDevice() : CpuDevice("element") {}

 protected:
  float compute_amax(const float* x, std::size_t n) const override {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) m = core::max_u32(m, core::amax_bits(x[i]));
    return core::bits_to_f32(m);
  }

  // One thread per element in the GPU kernel: each element cast once, written to both places.
  emu::QuantizeStats cast_transpose_host(const float* x, int rows, int cols, float scale, Format fmt,
                                         std::uint8_t* q_rowwise, std::uint8_t* q_columnwise,
                                         float* amax) const override {
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

  void gemm_fp8_tn_host(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                        const std::uint8_t* B, Format fb, float scale_inv_b, const emu::GemmAccumulation& acc,
                        float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    const float s = core::mul_rn(scale_inv_a, scale_inv_b);
    const AccumulationModel& m = model_of(acc.model);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
            core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), spec_of(fa), B + std::size_t(j) * std::size_t(K),
                                  spec_of(fb), K, m, acc.promotion_interval, acc.split_k, s);
  }

  emu::BlockQuantized quantize_blocks(const BlockCast& c, const float* x, int rows, int cols, emu::BlockAxis axis,
                                      emu::QuantizeStats* stats) const override {
    FP8EMU_CHECK(c.block >= 1, c.what(), ": block size must be >= 1, got ", c.block);
    FP8EMU_CHECK(rows >= 0 && cols >= 0, c.what(), ": negative shape");
    return block_cast_view(x, rows, cols, axis, c.fmt, c.block,
                           c.view_rule(axis == emu::BlockAxis::kColumnwise, rows, cols), stats);
  }

  emu::BlockQuantized2D quantize_tiles(const BlockCast& c, const float* x, int rows, int cols,
                                       emu::QuantizeStats* stats) const override {
    const int tile = c.block;
    FP8EMU_CHECK(tile >= 1, c.what(), ": tile size must be >= 1, got ", tile);
    FP8EMU_CHECK(rows >= 0 && cols >= 0, c.what(), ": negative shape");
    const FormatSpec f = spec_of(c.fmt);
    emu::BlockQuantized2D out;
    out.rowwise = emu::make_block_record(rows, cols, emu::BlockAxis::kRowwise, tile, c.fmt, false);
    out.columnwise = emu::make_block_record(rows, cols, emu::BlockAxis::kColumnwise, tile, c.fmt, false);
    core::BlockRule rule = c.block_rule();
    if (rule.has_tensor_scale()) {
      out.rowwise.amax = compute_amax(x, std::size_t(rows) * std::size_t(cols));
      out.columnwise.amax = out.rowwise.amax;
      rule.tensor_amax = &*out.rowwise.amax;
    }
    const int tr = (rows + tile - 1) / tile, tc = (cols + tile - 1) / tile;
    std::vector<float> scale(std::size_t(tr) * std::size_t(tc)), scale_inv(scale.size());
    for (int bi = 0; bi < tr; ++bi)
      for (int bj = 0; bj < tc; ++bj) {
        const float amax = core::tile_amax(x, rows, cols, tile, bi, bj);  // the GPU reduces the same bits
        const std::size_t t = std::size_t(bi) * std::size_t(tc) + std::size_t(bj);
        scale[t] = core::block_rule_scale(amax, f, rule, &scale_inv[t], nullptr);
      }
    emu::QuantizeStats st;
    st.count = std::size_t(rows) * std::size_t(cols);
    for (int r = 0; r < rows; ++r)
      for (int cc = 0; cc < cols; ++cc) {
        core::CastCounts k;
        const std::size_t i = std::size_t(r) * std::size_t(cols) + std::size_t(cc);
        out.rowwise.codes[i] = core::cast_element(x[i], scale[core::tile_index(r, cc, tile, tc)], f, k);
        add_counts(st, k);
      }
    transpose_codes(rows, cols, out.rowwise.codes.data(), out.columnwise.codes.data());
    emu::spread_tile_scales(rows, cols, tile, scale_inv.data(), out);
    if (stats) *stats += st;
    return out;
  }

  void gemm_fp8_block_tn_host(const emu::BlockQuantized& A, const emu::BlockQuantized& B,
                              const emu::GemmAccumulation& acc, float* D) const override {
    emu::check_gemm_block_tn(A, B);
    emu::check_block_accumulation(acc);
    const AccumulationModel& m = model_of(acc.model);
    const int nb = A.blocks();
    const bool nvfp4 = A.amax.has_value();
    const float alpha = nvfp4 ? core::nvfp4_gemm_alpha(*A.amax, core::nvfp4_numerator(spec_of(A.format)), *B.amax,
                                                       core::nvfp4_numerator(spec_of(B.format)))
                              : 1.0f;
    for (int i = 0; i < A.n; ++i)
      for (int j = 0; j < B.n; ++j) {
        float& d = D[std::size_t(i) * std::size_t(B.n) + std::size_t(j)];
        d = core::gemm_block_element(
            A.codes.data() + std::size_t(i) * std::size_t(A.k), spec_of(A.format),
            A.scale_inv.data() + std::size_t(i) * std::size_t(nb), B.codes.data() + std::size_t(j) * std::size_t(B.k),
            spec_of(B.format), B.scale_inv.data() + std::size_t(j) * std::size_t(nb), A.k, A.block, m);
        if (nvfp4) d = core::mul_rn(alpha, d);
      }
  }

 private:
  emu::BlockQuantized block_cast_view(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                      int block, const core::BlockRule& rule, emu::QuantizeStats* stats) const {
    emu::BlockQuantized q = emu::make_block_record(rows, cols, axis, block, fmt, rule.is_mxfp8());
    core::BlockRule scaled = rule;
    if (rule.has_tensor_scale()) {  // the tensor's amax first
      q.amax = compute_amax(x, std::size_t(rows) * std::size_t(cols));
      scaled.tensor_amax = &*q.amax;
    }
    emu::QuantizeStats st;
    st.count = q.codes.size();
    for (int r = 0; r < q.n; ++r)
      for (int b = 0; b < q.blocks(); ++b) {
        core::CastCounts c;
        core::cast_view_block(x, axis == emu::BlockAxis::kRowwise, cols, r, b, block, q.k, q.blocks(), spec_of(fmt),
                              scaled, q.codes.data(), q.scale_inv.data(), rule.is_mxfp8() ? q.e8m0.data() : nullptr, c);
        add_counts(st, c);
      }
    if (stats) *stats += st;
    return q;
  }};

}  // namespace

const Device& element_device() {
  static const ElementDevice d;
  return d;
}

}  // namespace fp8emu::backend
