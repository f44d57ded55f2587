// backend::cuda_device() (include/fp8emu/device/device.hpp): the GPU's memory and the operations of
// a device-resident training step, on one stream the device owns. Each operation checks its
// arguments on the host (the emulator's checks and messages where it names an emu:: function), then
// enqueues kernels that map threads onto the element functions of include/fp8emu/core, the ones the
// host calls:
//   - gemm_f32_nn: one thread per element of D, products and sums rounded once each (core::mul_rn,
//     core::add_rn, no FMA) in increasing k from +0: emu::gemm_f32_nn's fp32-sequential order. The
//     operands pass through shared-memory tiles; each element's order is unchanged by them.
//   - transpose_f32, cast_transpose, the amax, the block casts and the FP8 GEMMs are the kernels of
//     cuda/kernels.cu and cuda/gemm.cu, their launchers taking the scales from device memory.
//   - everything else is one thread per element, row, column or slot calling core/nn_element.hpp,
//     core/scale.hpp, core/attention.hpp (the kernels in device_kernels.cuh): the order of every
//     fp32 sum is the element function's.
// Reductions across threads (amax, cast counts) are maxima of core::amax_bits and integer sums:
// exact in any order. So no result depends on the launch configuration.
#include <cuda_runtime.h>

#include <atomic>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>
#include <string>

#include "device_buffer.hpp"
#include "fp8emu/device/device.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/attention.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/core/nn_element.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/cuda/backend.hpp"
#include "fp8emu/cuda/cublaslt.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"
#include "launch.hpp"

namespace fp8emu::cuda::detail {
namespace {

using backend::ActivationOp;
using backend::AdamStep;
using backend::CastCounters;

#include "device_kernels.cuh"  // the kernels of the operations below

// ---- the device ----------------------------------------------------------------------------------

// What the device owns, made on first use: the GPU (use_fp8_device: the set_cuda_device_slot choice),
// its stream (blocking with respect to the legacy default stream, like the `cuda` kernel set's
// synchronous copies), whether it has stream-ordered allocation, and the scratch of the casts and
// the current scale (zeroed before each use; `mu` keeps each operation's enqueue of
// zero-use-finish whole when several host threads share the device).
struct State {
  int device = 0;
  cudaStream_t stream = nullptr;
  bool pools = false;
  CastTotals* scratch = nullptr;
  std::mutex mu;
  // cuBLASLt for the FP8 GEMMs it computes bit-exactly (see gemm_fp8_tn): on Hopper (sm_90) unless
  // FP8EMU_DEVICE_GEMM=element; made on first use, with a device pair for the two scale_inv.
  bool lt_allowed = false;
  std::unique_ptr<LtContext> lt;  // see lt_context()
  float* lt_scale_inv = nullptr;
  // GEMMs cuBLASLt refused (no algorithm, or none that runs with split-K 1): the per-element kernel
  // computes them instead. Key: M, N, K, the two formats, fast accumulation.
  std::set<std::tuple<int, int, int, int, int, bool>> lt_refused;
  // The library bf16 GEMM's operands as bf16 bits (grow-only; see library_gemm_nn).
  std::uint16_t* bf16_scratch = nullptr;
  std::size_t bf16_scratch_elems = 0;
};

// backend::set_library_gemms: -1 until FP8EMU_DEVICE_GEMM is read; the GEMMs it sent back to the
// exact kernel.
std::atomic<int> library_flag{-1};
std::atomic<unsigned long long> library_fallbacks{0};

State& state() {
  static State* s = [] {
    auto* st = new State;  // never freed: the stream and scratch live as long as the process
    st->device = use_fp8_device();
    int pools = 0;
    FP8EMU_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, st->device));
    st->pools = pools != 0;
    FP8EMU_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamDefault));
    FP8EMU_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st->scratch), sizeof(CastTotals)));
    int major = 0, minor = 0;
    FP8EMU_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, st->device));
    FP8EMU_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, st->device));
    const char* env = std::getenv("FP8EMU_DEVICE_GEMM");
    st->lt_allowed = major == 9 && minor == 0 && !(env && std::string(env) == "element");
    return st;
  }();
  return *s;
}

// The cuBLASLt context, made on first use (the caller holds s.mu).
LtContext& lt_context(State& s) {
  if (!s.lt) s.lt = std::make_unique<LtContext>();
  return *s.lt;
}

// The device made current for the calling thread (CUDA's current device is per thread).
State& enter() {
  State& s = state();
  FP8EMU_CUDA_CHECK(cudaSetDevice(s.device));
  return s;
}

class CudaDevice final : public backend::Device {
 public:
  const char* name() const override { return "cuda"; }
  bool host_memory() const override { return false; }

  // ---- memory ----
  void* allocate(std::size_t bytes) const override {
    if (bytes == 0) return nullptr;
    State& s = enter();
    void* p = nullptr;
    if (s.pools)
      FP8EMU_CUDA_CHECK(cudaMallocAsync(&p, bytes, s.stream));
    else
      FP8EMU_CUDA_CHECK(cudaMalloc(&p, bytes));
    const cudaError_t e = cudaMemsetAsync(p, 0, bytes, s.stream);
    if (e != cudaSuccess) {
      release(p);
      check_cuda(e, "cudaMemsetAsync(p, 0, bytes, stream) of Device::allocate");
    }
    return p;
  }

  void release(void* p) const noexcept override {
    if (!p) return;
    try {
      State& s = state();
      // Errors are dropped: a destructor calls this, and a failed free leaks at worst (at exit the
      // CUDA runtime may already be unloaded).
      if (cudaSetDevice(s.device) != cudaSuccess) return;
      if (s.pools)
        (void)cudaFreeAsync(p, s.stream);
      else
        (void)cudaFree(p);
    } catch (...) {
    }
  }

  // Synchronous for the host buffer: it may be reused (or freed) when upload returns, whatever kind
  // of host memory it is (a pinned buffer would otherwise be read later by the DMA).
  void upload(void* dst, const void* host_src, std::size_t bytes) const override {
    if (bytes == 0) return;
    State& s = enter();
    FP8EMU_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s.stream));
    FP8EMU_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }

  void download(void* host_dst, const void* src, std::size_t bytes) const override {
    if (bytes == 0) return;
    State& s = enter();
    FP8EMU_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s.stream));
    FP8EMU_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }

  void copy(void* dst, const void* src, std::size_t bytes) const override {
    if (bytes == 0) return;
    State& s = enter();
    FP8EMU_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream));
  }

  void fill_zero(void* p, std::size_t bytes) const override {
    if (bytes == 0) return;
    State& s = enter();
    FP8EMU_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s.stream));
  }

  // ---- fp32 linear algebra ----
  void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f32_nn: negative size M = ", M, ", N = ", N, ", K = ", K);
    if (M == 0 || N == 0) return;  // as emu::gemm_f32_nn; K = 0 writes zeros
    if (library_gemm_nn(M, N, K, A, B, D, false)) return;
    gemm_f32_exact(M, N, K, A, B, D);
  }

  void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_bf16_nn: negative size M = ", M, ", N = ", N, ", K = ", K);
    if (M == 0 || N == 0) return;
    if (library_gemm_nn(M, N, K, A, B, D, true)) return;
    gemm_f32_exact(M, N, K, A, B, D);
  }

  void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) const override {
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_tc_nn: negative size M = ", M, ", N = ", N, ", K = ", K);
    const AccumulationModel& m = model_of(model);
    FP8EMU_CHECK(m.datapath == Datapath::kTensorCore && m.input != core::MmaOperands::kFp8, "gemm_tc_nn: '", m.name,
                 "' is not a tensor-core model of fp16, bf16 or tf32 inputs (e.g. hopper-bf16, ampere-fp16, ada-tf32)");
    if (M == 0 || N == 0) return;
    State& s = enter();
    const dim3 grid(unsigned(core::min_int((N + kG - 1) / kG, 65535)),
                    unsigned(core::min_int((M + kG - 1) / kG, 65535)));
    gemm_tc_nn_kernel<<<grid, dim3(kG, kG), 0, s.stream>>>(M, N, K, reinterpret_cast<const std::uint32_t*>(A),
                                                          reinterpret_cast<const std::uint32_t*>(B), m.tensor_core(), D);
    FP8EMU_CUDA_CHECK_LAUNCH("gemm_tc_nn_kernel");
  }

  void transpose_f32(int rows, int cols, const float* in, float* out) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "transpose: negative shape [", rows, ", ", cols, "]");
    if (rows == 0 || cols == 0) return;
    State& s = enter();
    launch_transpose(rows, cols, in, out, s.stream);
  }

  // ---- FP8 casts and GEMMs, scales in device memory ----
  void cast_transpose(const float* x, int rows, int cols, const float* scale, Format fmt, std::uint8_t* q_rowwise,
                      std::uint8_t* q_columnwise, float* amax, CastCounters* counters) const override {
    backend::check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    FP8EMU_CHECK(n == 0 || scale != nullptr, "cast_transpose: null scale pointer");
    if (n == 0 && !amax && !counters) return;
    State& s = enter();
    // The kernel adds its totals to the zeroed scratch; the finish kernel moves them to *amax and
    // *counters. With n = 0 only the amax can change: fmaxf(*amax, +0), the emulator's cast of no
    // element.
    std::lock_guard<std::mutex> lock(s.mu);
    FP8EMU_CUDA_CHECK(cudaMemsetAsync(s.scratch, 0, sizeof(CastTotals), s.stream));
    if (n > 0)
      launch_cast_transpose(x, rows, cols, ScaleArg::at(scale), fmt, q_rowwise, q_columnwise, s.scratch, s.stream);
    if (amax || counters) {
      finish_cast_kernel<<<1, 1, 0, s.stream>>>(s.scratch, static_cast<unsigned long long>(n), amax, counters);
      FP8EMU_CUDA_CHECK_LAUNCH("finish_cast_kernel");
    }
  }

  // n = 0: amax +0 (emu::compute_amax of nothing), so *scale = compute_scale_from_amax(0, ...).
  void current_scale(const float* x, std::size_t n, Format fmt, bool pow2, float epsilon,
                     float* scale) const override {
    emu::require_ocp_fp8(fmt, "current_scale");
    FP8EMU_CHECK(scale != nullptr, "current_scale: null scale pointer");
    State& s = enter();
    std::lock_guard<std::mutex> lock(s.mu);
    unsigned int* bits = &s.scratch->amax_bits;
    FP8EMU_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned int), s.stream));
    launch_amax(x, n, bits, s.stream);
    current_scale_kernel<<<1, 1, 0, s.stream>>>(bits, max_finite_f32(fmt), pow2, epsilon, scale);
    FP8EMU_CUDA_CHECK_LAUNCH("current_scale_kernel");
  }

  void delayed_update(float* history, float* scale, int num_slots, int history_len, float scaled_max,
                      bool most_recent) const override {
    FP8EMU_CHECK(num_slots >= 0, "delayed scaling: number of tensor slots must be >= 0, got ", num_slots);
    if (num_slots == 0) return;
    FP8EMU_CHECK(history_len >= 1, "delayed scaling: amax_history_len must be >= 1, got ", history_len);
    State& s = enter();
    delayed_update_kernel<<<blocks_1d(std::size_t(num_slots)), kThreads1d, 0, s.stream>>>(
        history, scale, num_slots, history_len, scaled_max, most_recent);
    FP8EMU_CUDA_CHECK_LAUNCH("delayed_update_kernel");
  }

  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* scale_a,
                   const std::uint8_t* B, Format fb, const float* scale_b, const emu::GemmAccumulation& acc,
                   float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    emu::require_ocp_fp8(fa, "gemm_fp8_tn operand A");
    emu::require_ocp_fp8(fb, "gemm_fp8_tn operand B");
    if (M == 0 || N == 0) return;
    FP8EMU_CHECK(scale_a != nullptr && scale_b != nullptr, "gemm_fp8_tn: null scale pointer");
    State& s = enter();
    // cuBLASLt where it is one of the emulator's models, measured bit for bit on an H200 (docs/gpu.md
    // §Results, docs/tensor-core-model.md): on sm_90, FAST_ACCUM = 1 is the `hopper` model without
    // promotion and FAST_ACCUM = 0 the `hopper` model promoted every 128, with split-K forced to 1
    // and D = RN(acc * RN(scale_inv_a * scale_inv_b)) in fp32. cuBLASLt runs on the legacy default
    // stream, which orders itself with this device's (blocking) stream both ways.
    const auto lt_key = std::make_tuple(M, N, K, int(fa), int(fb), acc.promotion_interval == 0);
    if (s.lt_allowed && acc.model == emu::Accumulation::kHopper && acc.split_k == 1 &&
        (acc.promotion_interval == 0 || acc.promotion_interval == 128) && K > 0 && K % 16 == 0 && N % 16 == 0) {
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.lt_refused.count(lt_key)) {
        lt_context(s);
        if (!s.lt_scale_inv)
          FP8EMU_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.lt_scale_inv), 2 * sizeof(float)));
        scale_inv_pair_kernel<<<1, 1, 0, s.stream>>>(scale_a, scale_b, s.lt_scale_inv);
        FP8EMU_CUDA_CHECK_LAUNCH("scale_inv_pair_kernel");
        LtFp8Gemm g = lt_fp8_gemm(M, N, K, A, fa, s.lt_scale_inv, B, fb, s.lt_scale_inv + 1,
                                  acc.promotion_interval == 0, LtOutput::kFp32, D);
        g.split_k = 1;
        try {
          s.lt->gemm_fp8_tn(g);
          return;
        } catch (const Error&) {
          s.lt_refused.insert(lt_key);  // planning failed before anything ran: the kernel below computes D
        }
      }
    }
    launch_gemm_tn(M, N, K, A, fa, B, fb, acc.model, acc.promotion_interval, acc.split_k,
                   GemmScaleArg::from_scales(scale_a, scale_b), D, s.stream);
  }

  // ---- block-scaled casts and GEMM (MXFP8, Float8BlockScaling) ----
  // The launchers of cuda/kernels.cu on the views' device pointers: the fused two-axis cast
  // (launch_block_cast_both, reading the cast's core::BlockRule) for 1 x block, the tile cast,
  // transpose and scale spreading of quantize_block_2d for tiles; counts as the quantizers take them.
  void block_cast(const backend::BlockCast& c, const float* x, int rows, int cols, backend::BlockView rowwise,
                  backend::BlockView columnwise, CastCounters* counters) const override {
    backend::check_block_cast(c, rows, cols, rowwise, columnwise);
    const bool row = rowwise.codes != nullptr, col = columnwise.codes != nullptr;
    const bool mx = c.scale == backend::BlockScaleFormat::kE8M0;  // E8M0 codes beside scale_inv
    const int block = c.block;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    if (n == 0) return;
    State& s = enter();
    core::BlockRule rule = c.block_rule();
    // Temporaries, released (stream-ordered, after the kernels) on every way out, a throw included.
    struct Temps {
      const CudaDevice* dev;
      std::vector<void*> p;
      ~Temps() {
        for (void* q : p) dev->release(q);
      }
    } temps{this, {}};
    auto temp = [&](std::size_t bytes) {  // zero-filled, released by `temps`
      temps.p.reserve(temps.p.size() + 1);
      void* q = allocate(bytes);
      temps.p.push_back(q);
      return q;
    };
    auto tensor_amax = [&](const float* src, float* amax) {  // a max of amax_bits: bits order as floats
      FP8EMU_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), s.stream));
      launch_amax(src, n, reinterpret_cast<unsigned int*>(amax), s.stream);
    };
    auto* totals = static_cast<CastTotals*>(temp(2 * sizeof(CastTotals)));
    if (c.rht_columnwise || c.stochastic_rounding) {
      // One launch per view, each with its own rule (stochastic rounding: its own stream) and source:
      // the column-wise view of the Hadamard transform is cast from the transformed copy under its
      // own (post-transform) amax, every other view from x under x's.
      const std::size_t rb = std::size_t(rows) * ((std::size_t(cols) + block - 1) / block),
                        cb = std::size_t(cols) * ((std::size_t(rows) + block - 1) / block);
      for (const bool colview : {false, true}) {
        const backend::BlockView& v = colview ? columnwise : rowwise;
        if (!v.codes) continue;
        const float* src = x;
        if (colview && c.rht_columnwise) {
          auto* t = static_cast<float*>(temp(n * sizeof(float)));
          launch_rht_rows(x, rows, cols, c.rht_sign_mask, t, s.stream);
          src = t;
        }
        core::BlockRule view_rule = c.view_rule(colview, rows, cols);
        if (view_rule.has_tensor_scale()) {
          tensor_amax(src, v.amax);
          view_rule.tensor_amax = v.amax;
        }
        const BlockCastOut o{v.codes, v.scale_inv, mx ? static_cast<std::uint8_t*>(temp(colview ? cb : rb)) : nullptr,
                             colview ? totals + 1 : totals};
        launch_block_cast_both(src, rows, cols, block, c.fmt, view_rule, colview ? BlockCastOut{} : o,
                               colview ? o : BlockCastOut{}, s.stream);
      }
      finish_cast_kernel<<<1, 1, 0, s.stream>>>(row ? totals : totals + 1, n, nullptr, counters);
      FP8EMU_CUDA_CHECK_LAUNCH("finish_cast_kernel");
      return;
    }
    if (rule.has_tensor_scale()) {
      // The tensor's amax first, into the first view's slot, copied into the other's; every block
      // reads it.
      float* amax = row ? rowwise.amax : columnwise.amax;
      tensor_amax(x, amax);
      if (row && col)
        FP8EMU_CUDA_CHECK(cudaMemcpyAsync(columnwise.amax, amax, sizeof(float), cudaMemcpyDeviceToDevice, s.stream));
      rule.tensor_amax = amax;
    }
    if (c.tiles) {
      const std::size_t rowwise_blocks = (std::size_t(cols) + block - 1) / block,
                        columnwise_blocks = (std::size_t(rows) + block - 1) / block;
      const std::size_t tiles = rowwise_blocks * columnwise_blocks;
      auto* tile_scale = static_cast<float*>(temp(tiles * sizeof(float)));
      auto* tile_scale_inv = static_cast<float*>(temp(tiles * sizeof(float)));
      // 128 x 128 tiles: one pass writing the views asked for; other tiles need the row-wise codes.
      std::uint8_t* codes = row || block == 128 ? rowwise.codes : static_cast<std::uint8_t*>(temp(n));
      launch_tile_cast_both(x, rows, cols, block, c.fmt, rule, tile_scale, tile_scale_inv, codes,
                            col ? columnwise.codes : nullptr, totals, s.stream);
      if (row) {
        spread_tile_rows_kernel<<<blocks_1d(std::size_t(rows) * rowwise_blocks), kThreads1d, 0, s.stream>>>(
            rows, cols, block, tile_scale_inv, rowwise.scale_inv);
        FP8EMU_CUDA_CHECK_LAUNCH("spread_tile_rows_kernel");
      }
      if (col) {
        spread_tile_cols_kernel<<<blocks_1d(std::size_t(cols) * columnwise_blocks), kThreads1d, 0, s.stream>>>(
            rows, cols, block, tile_scale_inv, columnwise.scale_inv);
        FP8EMU_CUDA_CHECK_LAUNCH("spread_tile_cols_kernel");
      }
    } else {
      // E8M0 codes: the kernel writes them for the MXFP8 rules; the views keep only scale_inv.
      const std::size_t rb = std::size_t(rows) * ((std::size_t(cols) + block - 1) / block),
                        cb = std::size_t(cols) * ((std::size_t(rows) + block - 1) / block);
      std::uint8_t* re = mx && row ? static_cast<std::uint8_t*>(temp(rb)) : nullptr;
      std::uint8_t* ce = mx && col ? static_cast<std::uint8_t*>(temp(cb)) : nullptr;
      BlockCastOut ro, co;
      if (row) ro = BlockCastOut{rowwise.codes, rowwise.scale_inv, re, totals};
      if (col) co = BlockCastOut{columnwise.codes, columnwise.scale_inv, ce, totals + 1};
      launch_block_cast_both(x, rows, cols, block, c.fmt, rule, ro, co, s.stream);
    }
    // The counts of the row-wise cast when made, else the column-wise one's (the tile cast: one).
    const CastTotals* counted = c.tiles || row ? totals : totals + 1;
    finish_cast_kernel<<<1, 1, 0, s.stream>>>(counted, n, nullptr, counters);
    FP8EMU_CUDA_CHECK_LAUNCH("finish_cast_kernel");
  }

  void gemm_fp8_block_tn(int M, int N, int K, int block, const std::uint8_t* A, Format fa, const float* sa,
                         const std::uint8_t* B, Format fb, const float* sb, const float* amax_a,
                         const float* amax_b, const emu::GemmAccumulation& acc, float* D) const override {
    emu::require_block_element(fa, "block-scaled GEMM operand A");
    emu::require_block_element(fb, "block-scaled GEMM operand B");
    FP8EMU_CHECK((amax_a == nullptr) == (amax_b == nullptr), "block-scaled GEMM: operand ", amax_a ? "A" : "B",
                 " has an NVFP4 tensor scale (amax) and operand ", amax_a ? "B" : "A", " has none");
    FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0 && block >= 1, "block-scaled GEMM: bad shape M=", M, " N=", N, " K=", K,
                 " block=", block);
    emu::check_block_accumulation(acc);
    if (M == 0 || N == 0) return;
    State& s = enter();
    launch_gemm_block_tn(M, N, K, block, A, fa, sa, B, fb, sb, amax_a, amax_b, acc.model, D, s.stream);
  }

  void block_scales_to_mxfp8(const float* in, int rows, int out_blocks, int repeat, float* out) const override {
    FP8EMU_CHECK(rows >= 0 && out_blocks >= 0 && repeat >= 1, "block_scales_to_mxfp8: bad shape rows=", rows,
                 " out_blocks=", out_blocks, " repeat=", repeat);
    const std::size_t n = std::size_t(rows) * std::size_t(out_blocks);
    if (n == 0) return;
    State& s = enter();
    block_scales_to_mxfp8_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(in, out_blocks, repeat, out, n);
    FP8EMU_CUDA_CHECK_LAUNCH("block_scales_to_mxfp8_kernel");
  }

  // ---- per-element work of an MLP step ----
  void bias_add(float* y, const float* b, int rows, int cols) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "bias_add: negative shape [", rows, ", ", cols, "]");
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    if (n == 0) return;
    State& s = enter();
    bias_add_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(y, b, n, cols);
    FP8EMU_CUDA_CHECK_LAUNCH("bias_add_kernel");
  }

  // rows = 0 with cols > 0 writes cols zeros (core::column_sum of no rows).
  void column_sum(const float* x, int rows, int cols, float* out) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "column_sum: negative shape [", rows, ", ", cols, "]");
    if (cols == 0) return;
    State& s = enter();
    column_sum_kernel<<<blocks_1d(std::size_t(cols)), kThreads1d, 0, s.stream>>>(x, rows, cols, out);
    FP8EMU_CUDA_CHECK_LAUNCH("column_sum_kernel");
  }

  void activation_forward(ActivationOp act, const float* x, float* y, std::size_t n) const override {
    check_activation(act);
    if (n == 0) return;
    State& s = enter();
    activation_forward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(act, x, y, n);
    FP8EMU_CUDA_CHECK_LAUNCH("activation_forward_kernel");
  }

  void activation_backward(ActivationOp act, const float* pre, float* dx, std::size_t n) const override {
    check_activation(act);
    if (n == 0) return;
    State& s = enter();
    activation_backward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(act, pre, dx, n);
    FP8EMU_CUDA_CHECK_LAUNCH("activation_backward_kernel");
  }

  void softmax_xent(const float* logits, const std::uint8_t* labels, int rows, int classes, float divisor,
                    float* loss, float* dlogits) const override {
    FP8EMU_CHECK(rows >= 0 && classes >= 0, "softmax_xent: negative shape [", rows, ", ", classes, "]");
    if (rows == 0) return;
    FP8EMU_CHECK(classes >= 1, "softmax_xent: ", rows, " rows of 0 classes");
    FP8EMU_CHECK(loss != nullptr, "softmax_xent: null loss pointer");
    State& s = enter();
    softmax_xent_kernel<<<blocks_1d(std::size_t(rows)), kThreads1d, 0, s.stream>>>(logits, labels, rows, classes,
                                                                                  divisor, loss, dlogits);
    FP8EMU_CUDA_CHECK_LAUNCH("softmax_xent_kernel");
  }

  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& st) const override {
    if (n == 0) return;
    State& s = enter();
    adam_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(w, g, m, v, n, st);
    FP8EMU_CUDA_CHECK_LAUNCH("adam_kernel");
  }

  void sgd(float* w, const float* g, float* m, std::size_t n, float momentum, float lr) const override {
    if (n == 0) return;
    State& s = enter();
    sgd_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(w, g, m, n, momentum, lr);
    FP8EMU_CUDA_CHECK_LAUNCH("sgd_kernel");
  }

  // ---- per-element work of a transformer step ----
  void add(const float* a, const float* b, float* out, std::size_t n) const override {
    if (n == 0) return;
    State& s = enter();
    add_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(a, b, out, n);
    FP8EMU_CUDA_CHECK_LAUNCH("add_kernel");
  }

  void round_bf16(float* x, std::size_t n) const override {
    if (n == 0) return;
    State& s = enter();
    round_bf16_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(x, n);
    FP8EMU_CUDA_CHECK_LAUNCH("round_bf16_kernel");
  }

  void round_tf32(float* x, std::size_t n) const override {
    if (n == 0) return;
    State& s = enter();
    round_tf32_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(x, n);
    FP8EMU_CUDA_CHECK_LAUNCH("round_tf32_kernel");
  }

  void norm_forward(backend::NormOp op, const float* x, int rows, int cols, const float* gamma, const float* beta,
                    float eps, bool zero_centered_gamma, float* y, float* xhat, float* rsigma) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "norm: negative shape [", rows, ", ", cols, "]");
    if (rows == 0) return;
    State& s = enter();
    norm_forward_kernel<<<blocks_1d(std::size_t(rows)), kThreads1d, 0, s.stream>>>(
        op == backend::NormOp::kLayerNorm, x, rows, cols, gamma, beta, eps, zero_centered_gamma, y, xhat, rsigma);
    FP8EMU_CUDA_CHECK_LAUNCH("norm_forward_kernel");
  }

  void norm_backward(backend::NormOp op, const float* dy, const float* xhat, const float* rsigma, int rows, int cols,
                     const float* gamma, bool zero_centered_gamma, float* dx, float* grad_gamma,
                     float* grad_beta) const override {
    FP8EMU_CHECK(rows >= 0 && cols >= 0, "norm backward: negative shape [", rows, ", ", cols, "]");
    if (cols == 0) return;
    State& s = enter();
    const bool ln = op == backend::NormOp::kLayerNorm;
    norm_param_grad_kernel<<<blocks_1d(std::size_t(cols)), kThreads1d, 0, s.stream>>>(ln, dy, xhat, rows, cols,
                                                                                     grad_gamma, grad_beta);
    FP8EMU_CUDA_CHECK_LAUNCH("norm_param_grad_kernel");
    if (rows == 0) return;
    norm_backward_kernel<<<blocks_1d(std::size_t(rows)), kThreads1d, 0, s.stream>>>(ln, dy, xhat, rsigma, rows, cols,
                                                                                   gamma, zero_centered_gamma, dx);
    FP8EMU_CUDA_CHECK_LAUNCH("norm_backward_kernel");
  }

  void mlp_act_forward(backend::MlpActOp op, const float* h, int rows, int ffn, float* act) const override {
    FP8EMU_CHECK(rows >= 0 && ffn >= 0, "MLP activation: negative shape [", rows, ", ", ffn, "]");
    const std::size_t n = std::size_t(rows) * std::size_t(ffn);
    if (n == 0) return;
    State& s = enter();
    mlp_act_forward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(op == backend::MlpActOp::kSwiGlu, h, rows, ffn,
                                                                       act);
    FP8EMU_CUDA_CHECK_LAUNCH("mlp_act_forward_kernel");
  }

  void mlp_act_backward(backend::MlpActOp op, const float* h, const float* da, int rows, int ffn,
                        float* dh) const override {
    FP8EMU_CHECK(rows >= 0 && ffn >= 0, "MLP activation backward: negative shape [", rows, ", ", ffn, "]");
    const std::size_t n = std::size_t(rows) * std::size_t(ffn);
    if (n == 0) return;
    State& s = enter();
    mlp_act_backward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(op == backend::MlpActOp::kSwiGlu, h, da, rows,
                                                                        ffn, dh);
    FP8EMU_CUDA_CHECK_LAUNCH("mlp_act_backward_kernel");
  }

  void attention_forward(const float* qkv, int B, int T, int H, int d, float scale, bool causal, float* out,
                         float* probs) const override {
    FP8EMU_CHECK(B >= 0 && T >= 0 && H >= 0 && d >= 0, "attention: negative size");
    const std::size_t n = std::size_t(B) * std::size_t(H) * std::size_t(T);
    if (n == 0) return;
    State& s = enter();
    attention_forward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(qkv, B, T, H, d, scale, causal, out, probs);
    FP8EMU_CUDA_CHECK_LAUNCH("attention_forward_kernel");
  }

  void attention_backward(const float* qkv, const float* probs, const float* dout, int B, int T, int H, int d,
                          float scale, bool causal, float* ds, float* dqkv) const override {
    FP8EMU_CHECK(B >= 0 && T >= 0 && H >= 0 && d >= 0, "attention: negative size");
    const std::size_t n = std::size_t(B) * std::size_t(H) * std::size_t(T);
    if (n == 0) return;
    State& s = enter();
    attention_backward_q_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(qkv, probs, dout, B, T, H, d, scale,
                                                                            causal, ds, dqkv);
    FP8EMU_CUDA_CHECK_LAUNCH("attention_backward_q_kernel");
    attention_backward_kv_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(qkv, probs, dout, B, T, H, d, causal, ds,
                                                                             dqkv);
    FP8EMU_CUDA_CHECK_LAUNCH("attention_backward_kv_kernel");
  }

  void embed_forward(const std::uint8_t* tokens, int rows, int T, const float* tok, const float* pos, int D,
                     float* x) const override {
    FP8EMU_CHECK(rows >= 0 && D >= 0 && T >= 1, "embedding: bad shape");
    const std::size_t n = std::size_t(rows) * std::size_t(D);
    if (n == 0) return;
    State& s = enter();
    embed_forward_kernel<<<blocks_1d(n), kThreads1d, 0, s.stream>>>(tokens, rows, T, tok, pos, D, x);
    FP8EMU_CUDA_CHECK_LAUNCH("embed_forward_kernel");
  }

  void embed_backward(const std::uint8_t* tokens, int rows, int T, const float* dx, int D, int V, int P,
                      float* grad_tok, float* grad_pos) const override {
    FP8EMU_CHECK(rows >= 0 && D >= 0 && V >= 0 && P >= 0 && T >= 1, "embedding backward: bad shape");
    State& s = enter();
    if (std::size_t(V) * std::size_t(D) > 0)
      FP8EMU_CUDA_CHECK(cudaMemsetAsync(grad_tok, 0, std::size_t(V) * std::size_t(D) * sizeof(float), s.stream));
    if (std::size_t(P) * std::size_t(D) > 0)
      FP8EMU_CUDA_CHECK(cudaMemsetAsync(grad_pos, 0, std::size_t(P) * std::size_t(D) * sizeof(float), s.stream));
    if (rows == 0 || D == 0) return;
    embed_backward_kernel<<<blocks_1d(std::size_t(D)), kThreads1d, 0, s.stream>>>(tokens, rows, T, dx, D, grad_tok,
                                                                                 grad_pos);
    FP8EMU_CUDA_CHECK_LAUNCH("embed_backward_kernel");
  }

 private:
  // emu::gemm_f32_nn's order: the per-element kernel.
  void gemm_f32_exact(int M, int N, int K, const float* A, const float* B, float* D) const {
    State& s = enter();
    const dim3 grid(unsigned(core::min_int((N + kG - 1) / kG, 65535)),
                    unsigned(core::min_int((M + kG - 1) / kG, 65535)));
    gemm_f32_nn_kernel<<<grid, dim3(kG, kG), 0, s.stream>>>(M, N, K, A, B, D);
    FP8EMU_CUDA_CHECK_LAUNCH("gemm_f32_nn_kernel");
  }

  // The library GEMMs of backend::set_library_gemms: D [M, N] = A [M, K] B [K, N] through cuBLASLt's
  // NN GEMM in fp32 (CUBLAS_COMPUTE_32F), for bf16 on both operands converted to bf16 bits in the
  // device's grow-only scratch. False (nothing done) when the switch is off, K = 0, or cuBLASLt
  // refused this shape (counted in library_gemm_fallbacks): the exact kernel then computes D.
  bool library_gemm_nn(int M, int N, int K, const float* A, const float* B, float* D, bool bf16) const {
    if (K == 0 || !cuda::library_gemms()) return false;
    State& s = enter();
    // The refusal is per shape and alignment (cuBLASLt plans for the pointers' alignment; a bf16
    // operand is staged in the 256-byte-aligned scratch, so only D's alignment varies then).
    const std::uintptr_t any = reinterpret_cast<std::uintptr_t>(D) | std::uintptr_t(256) |
                               (bf16 ? 0 : reinterpret_cast<std::uintptr_t>(A) | reinterpret_cast<std::uintptr_t>(B));
    const int align = int(any & (~any + 1));
    const auto key = std::make_tuple(M, N, K, bf16 ? -1 : -2, align, false);
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.lt_refused.count(key)) {
      ++library_fallbacks;
      return false;
    }
    const void* a = A;
    const void* b = B;
    if (bf16) {
      const std::size_t mk = std::size_t(M) * std::size_t(K), kn = std::size_t(K) * std::size_t(N);
      const std::size_t b_at = (mk + 127) / 128 * 128;  // B's copy 256-byte aligned
      if (s.bf16_scratch_elems < b_at + kn) {
        if (s.bf16_scratch) FP8EMU_CUDA_CHECK(cudaFree(s.bf16_scratch));  // waits for the device
        s.bf16_scratch = nullptr;
        s.bf16_scratch_elems = 0;
        FP8EMU_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.bf16_scratch), (b_at + kn) * sizeof(std::uint16_t)));
        s.bf16_scratch_elems = b_at + kn;
      }
      to_bf16_bits_kernel<<<blocks_1d(mk), kThreads1d, 0, s.stream>>>(A, s.bf16_scratch, mk);
      FP8EMU_CUDA_CHECK_LAUNCH("to_bf16_bits_kernel");
      to_bf16_bits_kernel<<<blocks_1d(kn), kThreads1d, 0, s.stream>>>(B, s.bf16_scratch + b_at, kn);
      FP8EMU_CUDA_CHECK_LAUNCH("to_bf16_bits_kernel");
      a = s.bf16_scratch;
      b = s.bf16_scratch + b_at;
    }
    if (!lt_context(s).gemm_nn(M, N, K, a, b, D, bf16)) {
      s.lt_refused.insert(key);  // no plan for this shape and alignment: the exact kernel computes D
      ++library_fallbacks;
      return false;
    }
    return true;
  }

  static void check_activation(ActivationOp act) {
    FP8EMU_CHECK(act == ActivationOp::kReLU || act == ActivationOp::kGELU, "activation: unknown ActivationOp ",
                 int(act));
  }
};

}  // namespace
}  // namespace fp8emu::cuda::detail

namespace fp8emu::cuda {

void set_library_gemms(bool on) { detail::library_flag.store(on ? 1 : 0); }

bool library_gemms() {
  if (detail::library_flag.load() < 0) {
    const char* env = std::getenv("FP8EMU_DEVICE_GEMM");
    int unread = -1;
    detail::library_flag.compare_exchange_strong(unread, env && std::string(env) == "library" ? 1 : 0);
  }
  return detail::library_flag.load() == 1;
}

unsigned long long library_gemm_fallbacks() { return detail::library_fallbacks.load(); }

const backend::Device& device() {
  static const detail::CudaDevice d;
  return d;
}

int device_index() { return detail::state().device; }

}  // namespace fp8emu::cuda
