// GPU timings for `fp8emu bench gpu` (see src/internal/fp8emu_internal/gpu_bench.hpp).
#include <cuda_runtime.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "device_buffer.hpp"
#include "fp8emu/cuda/cublaslt.hpp"
#include "fp8emu_internal/gpu_bench.hpp"
#include "fp8emu/cuda/mma_gemm.hpp"
#include "fp8emu/device/device.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "launch.hpp"

namespace fp8emu::cuda {
namespace {

using detail::DeviceBuffer;

__device__ __forceinline__ std::uint32_t hash32(std::uint64_t i, std::uint32_t seed) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return std::uint32_t(z >> 32);
}

// Finite codes of magnitude below 0x70 (E4M3: |v| < 256; E5M2: |v| < 2^13), either sign.
__global__ void fill_codes_kernel(std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const std::uint32_t h = hash32(i, seed);
    p[i] = std::uint8_t((h % 0x70u) | (h & 0x80u));
  }
}
// Uniform in [-1, 1).
__global__ void fill_f32_kernel(float* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = float(hash32(i, seed) >> 8) * 0x1p-23f - 1.0f;
}
__global__ void fill_bf16_kernel(std::uint16_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = std::uint16_t(__float_as_uint(float(hash32(i, seed) >> 8) * 0x1p-23f - 1.0f) >> 16);
}

constexpr unsigned kFillBlocks = 4096, kFillThreads = 256;

DeviceBuffer<std::uint8_t> random_codes(std::size_t n, std::uint32_t seed) {
  DeviceBuffer<std::uint8_t> b(n);
  fill_codes_kernel<<<kFillBlocks, kFillThreads>>>(b.get(), n, seed);
  FP8EMU_CUDA_CHECK_LAUNCH("fill_codes_kernel");
  return b;
}
DeviceBuffer<float> random_f32(std::size_t n, std::uint32_t seed) {
  DeviceBuffer<float> b(n);
  fill_f32_kernel<<<kFillBlocks, kFillThreads>>>(b.get(), n, seed);
  FP8EMU_CUDA_CHECK_LAUNCH("fill_f32_kernel");
  return b;
}
DeviceBuffer<std::uint16_t> random_bf16(std::size_t n, std::uint32_t seed) {
  DeviceBuffer<std::uint16_t> b(n);
  fill_bf16_kernel<<<kFillBlocks, kFillThreads>>>(b.get(), n, seed);
  FP8EMU_CUDA_CHECK_LAUNCH("fill_bf16_kernel");
  return b;
}

class Events {
 public:
  Events() {
    FP8EMU_CUDA_CHECK(cudaEventCreate(&start_));
    FP8EMU_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// One warm-up run, then `reps` runs between two events; rate = work / mean seconds.
Timing time_runs(const std::function<void()>& run, int reps, double work) {
  Timing t;
  run();
  FP8EMU_CUDA_CHECK(cudaDeviceSynchronize());
  Events ev;
  FP8EMU_CUDA_CHECK(cudaEventRecord(ev.start_));
  for (int r = 0; r < reps; ++r) run();
  FP8EMU_CUDA_CHECK(cudaEventRecord(ev.stop_));
  FP8EMU_CUDA_CHECK(cudaEventSynchronize(ev.stop_));
  float ms = 0.0f;
  FP8EMU_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start_, ev.stop_));
  t.seconds = double(ms) / 1000.0 / double(reps);
  t.rate = t.seconds > 0.0 ? work / t.seconds : 0.0;
  return t;
}

// Runs a measurement, turning an exception into Timing::error.
Timing guarded(const std::function<Timing()>& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    cudaGetLastError();  // clear a non-sticky error so that later measurements can run
    Timing t;
    t.error = e.what();
    return t;
  }
}

// One FP8 GEMM of the MLP step: both operands with the scale_inv at `scale_inv`; an E4M3 output with
// its D scale and the amax of D.
void step_gemm(LtContext& ctx, const float* scale_inv, int M, int N, int K, const std::uint8_t* A, Format fa,
               const std::uint8_t* B, Format fb, bool fast, LtOutput out, void* D, const float* d_scale,
               float* amax_d) {
  LtFp8Gemm g = lt_fp8_gemm(M, N, K, A, fa, scale_inv, B, fb, scale_inv, fast, out, D);
  g.d_scale = d_scale;
  g.amax_d = amax_d;
  ctx.gemm_fp8_tn(g);
}

}  // namespace

const char* to_string(BenchGemm g) {
  switch (g) {
    case BenchGemm::kFp8FastAccum: return "fp8 fast-accum";
    case BenchGemm::kFp8: return "fp8";
    case BenchGemm::kBf16: return "bf16";
    case BenchGemm::kTf32: return "tf32";
    case BenchGemm::kFp32: return "fp32";
    case BenchGemm::kMmaSync: return "mma.sync e4m3 (fp8emu)";
  }
  return "?";
}

std::string bench_gpu_name() {
  const int dev = detail::use_fp8_device();
  cudaDeviceProp p{};
  FP8EMU_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return p.name;
}

Timing bench_gemm(BenchGemm kind, int n, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    const std::size_t nn = std::size_t(n) * std::size_t(n);
    const double flops = 2.0 * double(n) * double(n) * double(n) / 1e12;
    LtContext ctx;
    switch (kind) {
      case BenchGemm::kFp8FastAccum:
      case BenchGemm::kFp8: {
        DeviceBuffer<std::uint8_t> A = random_codes(nn, 1), B = random_codes(nn, 2);
        const float one = 1.0f;
        DeviceBuffer<float> sa(&one, 1), sb(&one, 1);
        DeviceBuffer<std::uint16_t> D(nn);
        LtFp8Gemm g;
        g.M = g.N = g.K = n;
        g.A = A.get();
        g.B = B.get();
        g.scale_inv_a = sa.get();
        g.scale_inv_b = sb.get();
        g.fast_accum = kind == BenchGemm::kFp8FastAccum;
        g.output = LtOutput::kBf16;
        g.D = D.get();
        return time_runs([&] { ctx.gemm_fp8_tn(g); }, reps, flops);
      }
      case BenchGemm::kBf16: {
        DeviceBuffer<std::uint16_t> A = random_bf16(nn, 1), B = random_bf16(nn, 2), D(nn);
        return time_runs([&] { ctx.gemm_bf16_tn(n, n, n, A.get(), B.get(), D.get()); }, reps, flops);
      }
      case BenchGemm::kTf32:
      case BenchGemm::kFp32: {
        DeviceBuffer<float> A = random_f32(nn, 1), B = random_f32(nn, 2), D(nn);
        const bool tf32 = kind == BenchGemm::kTf32;
        return time_runs([&] { ctx.gemm_f32_tn(n, n, n, A.get(), B.get(), D.get(), tf32); }, reps, flops);
      }
      case BenchGemm::kMmaSync: {
        DeviceBuffer<std::uint8_t> A = random_codes(nn, 1), B = random_codes(nn, 2);
        DeviceBuffer<float> D(nn);
        return time_runs([&] { mma_gemm_e4m3_tn(n, n, n, A.get(), B.get(), 1.0f, D.get()); }, reps, flops);
      }
    }
    FP8EMU_FAIL("unknown GEMM kind");
  });
}

Timing bench_quantize(std::size_t n, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    DeviceBuffer<float> x = random_f32(n, 3);
    DeviceBuffer<std::uint8_t> q(n);
    DeviceBuffer<detail::CastTotals> totals(1);
    totals.zero();
    return time_runs([&] { detail::launch_quantize(x.get(), n, 100.0f, Format::kE4M3, q.get(), totals.get(), nullptr); },
                     reps, 5.0 * double(n) / 1e9);
  });
}

Timing bench_cast_transpose(int rows, int cols, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    DeviceBuffer<float> x = random_f32(n, 3);
    DeviceBuffer<std::uint8_t> qr(n), qc(n);
    DeviceBuffer<detail::CastTotals> totals(1);
    totals.zero();
    return time_runs(
        [&] { detail::launch_cast_transpose(x.get(), rows, cols, 100.0f, Format::kE4M3, qr.get(), qc.get(), totals.get(), nullptr); },
        reps, 6.0 * double(n) / 1e9);
  });
}

Timing bench_block_cast_both(int rows, int cols, bool mxfp8, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    const int block = mxfp8 ? 32 : 128;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    const std::size_t nsr = std::size_t(rows) * std::size_t((cols + block - 1) / block);
    const std::size_t nsc = std::size_t(cols) * std::size_t((rows + block - 1) / block);
    DeviceBuffer<float> x = random_f32(n, 3), sr(nsr), sc(nsc);
    DeviceBuffer<std::uint8_t> qr(n), qc(n), er(mxfp8 ? nsr : 0), ec(mxfp8 ? nsc : 0);
    DeviceBuffer<detail::CastTotals> totals(2);
    totals.zero();
    const core::BlockRule rule = mxfp8 ? core::BlockRule::mxfp8(kSpecE4M3, E8M0Rule::kTransformerEngine)
                                       : core::BlockRule::fp32_scale(kSpecE4M3, true, 0.0f);
    const detail::BlockCastOut ro{qr.get(), sr.get(), mxfp8 ? er.get() : nullptr, totals.get()};
    const detail::BlockCastOut co{qc.get(), sc.get(), mxfp8 ? ec.get() : nullptr, totals.get() + 1};
    const double bytes = 6.0 * double(n) + double(nsr + nsc) * (mxfp8 ? 5.0 : 4.0);
    return time_runs([&] { detail::launch_block_cast_both(x.get(), rows, cols, block, Format::kE4M3, rule, ro, co, nullptr); },
                     reps, bytes / 1e9);
  });
}

Timing bench_tile_cast_both(int rows, int cols, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    const std::size_t tiles = std::size_t((rows + 127) / 128) * std::size_t((cols + 127) / 128);
    DeviceBuffer<float> x = random_f32(n, 3), ts(tiles), tsi(tiles);
    DeviceBuffer<std::uint8_t> qr(n), qc(n);
    DeviceBuffer<detail::CastTotals> totals(1);
    totals.zero();
    const core::BlockRule rule = core::BlockRule::fp32_scale(kSpecE4M3, true, 0.0f);
    const double bytes = 6.0 * double(n) + 8.0 * double(tiles);
    return time_runs([&] {
      detail::launch_tile_cast_both(x.get(), rows, cols, 128, Format::kE4M3, rule, ts.get(), tsi.get(), qr.get(),
                                    qc.get(), totals.get(), nullptr);
    }, reps, bytes / 1e9);
  });
}

Timing bench_memcpy(std::size_t n, int reps) {
  return guarded([&] {
    detail::use_fp8_device();
    DeviceBuffer<float> x = random_f32(n, 3), y(n);
    return time_runs(
        [&] {
          FP8EMU_CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, nullptr));
        },
        reps, 8.0 * double(n) / 1e9);
  });
}

StepTiming bench_mlp_step(int batch, int width, int layers, int reps) {
  StepTiming st;
  const double flops = double(layers) * 3.0 * 2.0 * double(batch) * double(width) * double(width) / 1e12;
  const std::size_t bw = std::size_t(batch) * std::size_t(width), ww = std::size_t(width) * std::size_t(width);
  st.fp8 = guarded([&] {
    detail::use_fp8_device();
    LtContext ctx;
    DeviceBuffer<float> x = random_f32(bw, 4), w = random_f32(ww, 5), dy = random_f32(bw, 6);
    DeviceBuffer<std::uint8_t> xq(bw), xqt(bw), wq(ww), wqt(ww), dyq(bw), dyqt(bw);
    DeviceBuffer<std::uint16_t> y(bw), dx(bw), dw(ww);
    DeviceBuffer<detail::CastTotals> totals(3);
    totals.zero();
    const float one = 1.0f;
    DeviceBuffer<float> s1(&one, 1);
    auto gemm = [&](int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb, bool fast,
                    std::uint16_t* D) {
      step_gemm(ctx, s1.get(), M, N, K, A, fa, B, fb, fast, LtOutput::kBf16, D, nullptr, nullptr);
    };
    auto step = [&] {
      for (int l = 0; l < layers; ++l) {
        // Casts (delayed scaling: the scale is known; amax recorded by the cast), each writing the
        // row-wise codes and the K-major (transposed) copy dgrad and wgrad need in one pass (TE's
        // cast_transpose).
        detail::launch_cast_transpose(x.get(), batch, width, 1.0f, Format::kE4M3, xq.get(), xqt.get(), totals.get() + 0,
                                      nullptr);
        detail::launch_cast_transpose(w.get(), width, width, 1.0f, Format::kE4M3, wq.get(), wqt.get(), totals.get() + 1,
                                      nullptr);
        detail::launch_cast_transpose(dy.get(), batch, width, 1.0f, Format::kE5M2, dyq.get(), dyqt.get(),
                                      totals.get() + 2, nullptr);
        gemm(batch, width, width, xq.get(), Format::kE4M3, wq.get(), Format::kE4M3, true, y.get());      // fprop
        gemm(batch, width, width, dyq.get(), Format::kE5M2, wqt.get(), Format::kE4M3, false, dx.get());  // dgrad
        gemm(width, width, batch, dyqt.get(), Format::kE5M2, xqt.get(), Format::kE4M3, false, dw.get()); // wgrad
      }
    };
    return time_runs(step, reps, flops);
  });
  st.fp8_fused = guarded([&] {
    detail::use_fp8_device();
    LtContext ctx;
    DeviceBuffer<std::uint16_t> x0 = random_bf16(bw, 4), dy_top = random_bf16(bw, 6);
    DeviceBuffer<float> w = random_f32(ww, 5);  // every layer's fp32 master weight (the same values)
    std::vector<DeviceBuffer<std::uint8_t>> xq, xqt, wq, wqt;
    for (int l = 0; l < layers; ++l) {
      xq.emplace_back(bw);
      xqt.emplace_back(bw);
      wq.emplace_back(ww);
      wqt.emplace_back(ww);
    }
    DeviceBuffer<std::uint8_t> dyq(bw), dyqt(bw);
    DeviceBuffer<std::uint16_t> y(bw), g0(bw), g1(bw), dw(ww);
    DeviceBuffer<detail::CastTotals> totals(3);
    totals.zero();
    const float one = 1.0f;
    DeviceBuffer<float> s1(&one, 1), d_scale(&one, 1), amax_d(1);
    amax_d.zero();
    auto gemm = [&](int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb, bool fast,
                    LtOutput out, void* D) {
      const bool fp8_out = out == LtOutput::kE4M3;
      step_gemm(ctx, s1.get(), M, N, K, A, fa, B, fb, fast, out, D, fp8_out ? d_scale.get() : nullptr,
                fp8_out ? amax_d.get() : nullptr);
    };
    auto step = [&] {
      detail::launch_cast_transpose(x0.get(), batch, width, 1.0f, Format::kE4M3, xq[0].get(), xqt[0].get(),
                                    totals.get() + 0, nullptr);
      for (int l = 0; l < layers; ++l) {
        detail::launch_cast_transpose(w.get(), width, width, 1.0f, Format::kE4M3, wq[std::size_t(l)].get(),
                                      wqt[std::size_t(l)].get(), totals.get() + 1, nullptr);
        if (l + 1 < layers) {  // fprop writes the next layer's E4M3 input and its amax; then its transpose
          gemm(batch, width, width, xq[std::size_t(l)].get(), Format::kE4M3, wq[std::size_t(l)].get(), Format::kE4M3,
               true, LtOutput::kE4M3, xq[std::size_t(l) + 1].get());
          detail::launch_transpose(batch, width, xq[std::size_t(l) + 1].get(), xqt[std::size_t(l) + 1].get(), nullptr);
        } else {
          gemm(batch, width, width, xq[std::size_t(l)].get(), Format::kE4M3, wq[std::size_t(l)].get(), Format::kE4M3,
               true, LtOutput::kBf16, y.get());
        }
      }
      const std::uint16_t* dy = dy_top.get();
      for (int l = layers - 1; l >= 0; --l) {
        detail::launch_cast_transpose(dy, batch, width, 1.0f, Format::kE5M2, dyq.get(), dyqt.get(), totals.get() + 2,
                                      nullptr);
        gemm(width, width, batch, dyqt.get(), Format::kE5M2, xqt[std::size_t(l)].get(), Format::kE4M3, false,
             LtOutput::kBf16, dw.get());  // wgrad
        std::uint16_t* dx = (l % 2) ? g0.get() : g1.get();
        gemm(batch, width, width, dyq.get(), Format::kE5M2, wqt[std::size_t(l)].get(), Format::kE4M3, false,
             LtOutput::kBf16, dx);  // dgrad: the gradient of the layer below
        dy = dx;
      }
    };
    return time_runs(step, reps, flops);
  });
  st.bf16 = guarded([&] {
    detail::use_fp8_device();
    LtContext ctx;
    DeviceBuffer<std::uint16_t> x = random_bf16(bw, 4), w = random_bf16(ww, 5), dy = random_bf16(bw, 6);
    DeviceBuffer<std::uint16_t> wt = random_bf16(ww, 7), xt = random_bf16(bw, 8), dyt = random_bf16(bw, 9);
    DeviceBuffer<std::uint16_t> y(bw), dx(bw), dw(ww);
    auto step = [&] {
      for (int l = 0; l < layers; ++l) {
        ctx.gemm_bf16_tn(batch, width, width, x.get(), w.get(), y.get());     // fprop
        ctx.gemm_bf16_tn(batch, width, width, dy.get(), wt.get(), dx.get());  // dgrad (same shape)
        ctx.gemm_bf16_tn(width, width, batch, dyt.get(), xt.get(), dw.get()); // wgrad (same shape)
      }
    };
    return time_runs(step, reps, flops);
  });
  return st;
}

std::string check_bf16_cast_transpose(int rows, int cols) {
  try {
    detail::use_fp8_device();
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    // bf16 bit patterns: a hash spread over every exponent, plus zeros, infinities and NaNs.
    std::vector<std::uint16_t> h(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
      h[i] = std::uint16_t(z >> 48);
      if (i % 97 == 0) h[i] = 0x0000;
      if (i % 89 == 0) h[i] = 0x7F80;
      if (i % 83 == 0) h[i] = 0xFFC1;
      if (i % 5 == 0) h[i] = std::uint16_t((h[i] & 0x807Fu) | (((h[i] >> 7) % 24u + 115u) << 7));  // near 1
    }
    std::vector<float> wide(n);
    for (std::size_t i = 0; i < n; ++i) wide[i] = core::bits_to_f32(std::uint32_t(h[i]) << 16);
    for (const Format fmt : {Format::kE4M3, Format::kE5M2}) {
      const float scale = fmt == Format::kE4M3 ? 3.0f : 0.75f;
      std::vector<std::uint8_t> er(n), ec(n), gr(n), gc(n);
      float eamax = 0.0f;
      emu::QuantizeStats es;
      emu::quantize_f32_2d(wide.data(), std::size_t(rows), std::size_t(cols), scale, fmt, er.data(), ec.data(), &eamax,
                           &es);
      DeviceBuffer<std::uint16_t> x(h.data(), n);
      DeviceBuffer<std::uint8_t> qr(n), qc(n);
      DeviceBuffer<detail::CastTotals> totals(1);
      totals.zero();
      detail::launch_cast_transpose(x.get(), rows, cols, scale, fmt, qr.get(), qc.get(), totals.get(), nullptr);
      FP8EMU_CUDA_CHECK(cudaDeviceSynchronize());
      qr.download(gr.data(), n);
      qc.download(gc.data(), n);
      detail::CastTotals t{};
      totals.download(&t, 1);
      const char* name = fmt == Format::kE4M3 ? "E4M3" : "E5M2";
      for (std::size_t i = 0; i < n; ++i) {
        if (gr[i] != er[i]) return std::string(name) + ": row-wise code " + std::to_string(i) + " differs";
        if (gc[i] != ec[i]) return std::string(name) + ": column-wise code " + std::to_string(i) + " differs";
      }
      if (core::bits_to_f32(t.amax_bits) != eamax) return std::string(name) + ": amax differs";
      if (t.saturated != es.saturated || t.underflow != es.underflow || t.nan != es.nan)
        return std::string(name) + ": counts differ";
    }
    return {};
  } catch (const std::exception& e) {
    cudaGetLastError();
    return e.what();
  }
}

}  // namespace fp8emu::cuda
