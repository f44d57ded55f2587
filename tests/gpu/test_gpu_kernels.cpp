// GPU tests (CTest label `gpu`; CI runs `ctest -LE gpu` and skips them): every FP8 operation of
// backend::cuda_device() against cpu_device(), bit for bit, through backend::check_devices (two NaNs
// count as equal, see device_check.hpp); the device-pointer API of include/fp8emu/cuda/device.hpp
// (quantize, dequantize, transpose, amax) against the emulator; degenerate shapes, argument errors,
// and the cuBLASLt FP8 GEMM.
//
// Without a usable GPU each test prints "SKIPPED: no usable GPU ..." and passes (CTest shows it as
// skipped), unless the environment variable FP8EMU_REQUIRE_GPU is set (to anything but "" or "0"):
// then a missing GPU is a failure, so a GPU machine cannot pass these tests by skipping them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu_internal/gpu_bench.hpp"
#include "fp8emu_internal/device_check.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/cuda/cublaslt.hpp"
#include "fp8emu/cuda/device.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"
#include "support/gpu_skip.hpp"

using namespace fp8emu;

namespace {

std::uint32_t bits(float f) { return core::f32_to_bits(f); }

void check_op(const char* op, std::vector<int> sizes = {1, 17, 64, 131}) {
  if (!testing::have_gpu()) return;
  backend::DeviceCheckOptions opt;
  opt.sizes = std::move(sizes);
  opt.seed = 3;
  opt.only = op;
  const auto rows = backend::check_devices(backend::cpu_device(), backend::cuda_device(), opt);
  REQUIRE(!rows.empty());
  for (const backend::DeviceCheckRow& r : rows) {
    INFO(r.op << ", " << r.inputs << ": " << r.first_mismatch);
    CHECK(r.values > 0);
    CHECK(r.mismatches == 0);
  }
}

template <class T>
backend::DeviceTensor<T> on_gpu(const std::vector<T>& h) {
  backend::DeviceTensor<T> t(backend::cuda_device(), 1, int(h.size()));
  if (!h.empty()) t.upload(h.data());
  return t;
}
template <class T>
std::vector<T> to_host(const backend::DeviceTensor<T>& t) {
  std::vector<T> h(t.size());
  if (!h.empty()) t.download(h.data());
  return h;
}

}  // namespace

TEST_CASE("gpu: current_scale bit-identical to the emulator", "[gpu]") { check_op("current_scale"); }
TEST_CASE("gpu: cast_transpose bit-identical to the emulator (both copies, counters, amax)", "[gpu]") {
  check_op("cast_transpose");
}
TEST_CASE("gpu: gemm_fp8_tn bit-identical to the emulator, every model", "[gpu]") { check_op("gemm_fp8_tn"); }
// The block casts with both views (one fused kernel for MXFP8 and 1 x 128) and each alone, shapes with
// whole 32 x 128 and 128 x 128 tiles on the vectorised path, and ragged ones.
TEST_CASE("gpu: block_cast bit-identical to the emulator (MXFP8, 1D blocks, 2D tiles)", "[gpu]") {
  check_op("block_cast", {1, 17, 64, 131, 256});
}
TEST_CASE("gpu: gemm_fp8_block_tn bit-identical to the emulator", "[gpu]") { check_op("gemm_fp8_block_tn"); }

TEST_CASE("gpu: the device-pointer API (quantize, dequantize, transpose, amax) bit-identical to the emulator",
          "[gpu]") {
  if (!testing::have_gpu()) return;
  // Device memory of cuda_device() (its stream is a blocking one: the API's work on the legacy stream
  // is ordered with its copies).
  for (const backend::InputFamily fam : backend::all_input_families())
    for (const std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(70001)}) {
      const std::vector<float> x = backend::make_inputs(fam, n, 40u + std::uint64_t(fam));
      const backend::DeviceTensor<float> dx = on_gpu(x);
      for (const Format fmt : {Format::kE4M3, Format::kE5M2}) {
        INFO(backend::to_string(fam) << ", n " << n << ", " << format_name(fmt));
        // quantize: codes, counts and amax
        std::vector<std::uint8_t> want(n);
        float amax = 0.0f;
        const emu::QuantizeStats st = emu::quantize(x.data(), n, 3.0f, fmt, want.data(), &amax);
        backend::DeviceTensor<std::uint8_t> dq(backend::cuda_device(), 1, int(n));
        backend::DeviceTensor<cuda::DeviceCastStats> stats(backend::cuda_device(), 1, 1);
        cuda::zero_stats(stats.get(), nullptr);
        cuda::quantize(dx.get(), n, 3.0f, fmt, dq.get(), stats.get(), nullptr);
        const cuda::CastStats got = cuda::read_stats(stats.get(), nullptr);
        CHECK(to_host(dq) == want);
        CHECK(got.saturated == st.saturated);
        CHECK(got.underflow == st.underflow);
        CHECK(got.nan == st.nan);
        CHECK(bits(got.amax) == bits(amax));
        // amax alone
        backend::DeviceTensor<unsigned int> ab = on_gpu(std::vector<unsigned int>{0u});
        cuda::amax(dx.get(), n, ab.get(), nullptr);
        CHECK(bits(core::bits_to_f32(to_host(ab)[0])) == bits(emu::compute_amax(x.data(), n)));
        // dequantize of those codes, several scale_inv
        for (const float si : {1.0f, 0.0123f, 0x1p-30f, 1e30f, INFINITY, 0.0f}) {
          std::vector<float> y(n);
          emu::dequantize(want.data(), n, si, fmt, y.data());
          backend::DeviceTensor<float> dy(backend::cuda_device(), 1, int(n));
          cuda::dequantize(dq.get(), n, si, fmt, dy.get(), nullptr);
          const std::vector<float> g = to_host(dy);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) bad += !backend::same_f32(g[i], y[i]);
          INFO("scale_inv " << si);
          CHECK(bad == 0);
        }
      }
    }
  for (const auto& [rows, cols] : {std::pair{1, 5}, std::pair{37, 256}, std::pair{130, 67}, std::pair{256, 512}}) {
    std::vector<std::uint8_t> in(std::size_t(rows) * std::size_t(cols)), want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::uint8_t((i * 131 + 7) & 0xFF);
    emu::transpose(rows, cols, in.data(), want.data());
    const backend::DeviceTensor<std::uint8_t> din = on_gpu(in);
    backend::DeviceTensor<std::uint8_t> dout(backend::cuda_device(), 1, int(in.size()));
    cuda::transpose(rows, cols, din.get(), dout.get(), nullptr);
    INFO(rows << " x " << cols);
    CHECK(to_host(dout) == want);
  }
}

TEST_CASE("gpu: cast_transpose from bf16 (bench gpu's fused MLP step) bit-identical to the emulator", "[gpu]") {
  if (!testing::have_gpu()) return;
  // Full 32 x 128 tiles (the vectorised path) and ragged edges (element by element).
  // 68 x 260: whole tiles on the vectorised path next to ragged edge tiles.
  for (const auto& [rows, cols] :
       {std::pair{64, 256}, std::pair{68, 260}, std::pair{67, 260}, std::pair{1, 7}, std::pair{33, 129}}) {
    INFO(rows << " x " << cols);
    CHECK(cuda::check_bf16_cast_transpose(rows, cols) == "");
  }
}

TEST_CASE("gpu: degenerate shapes as the emulator", "[gpu]") {
  if (!testing::have_gpu()) return;
  const backend::Device& cpu = backend::cpu_device();
  const backend::Device& gpu = backend::cuda_device();
  // Each case runs on both devices from the same inputs; outputs downloaded.
  auto both = [&](auto&& f) { return std::make_pair(f(cpu), f(gpu)); };
  auto put = [](const backend::Device& d, auto h) {
    backend::DeviceTensor<typename decltype(h)::value_type> t(d, 1, int(h.size()));
    if (!h.empty()) t.upload(h.data());
    return t;
  };
  // Empty cast: count 0, and the amax still max-accumulates with 0 (a NaN initial amax becomes 0).
  const auto empty = both([&](const backend::Device& d) {
    backend::DeviceTensor<float> amax = put(d, std::vector<float>{NAN});
    backend::DeviceTensor<backend::CastCounters> k = put(d, std::vector<backend::CastCounters>(1));
    backend::DeviceTensor<std::uint8_t> q(d, 1, 1);
    d.cast_transpose(nullptr, 0, 5, nullptr, Format::kE4M3, q.get(), nullptr, amax.get(), k.get());
    std::vector<float> a(1);
    amax.download(a.data());
    std::vector<backend::CastCounters> c(1);
    k.download(c.data());
    return std::make_pair(a[0], c[0].count);
  });
  CHECK(bits(empty.first.first) == bits(empty.second.first));
  CHECK(empty.first.second == empty.second.second);
  // The current scale of no element: that of amax 0.
  const auto scale0 = both([&](const backend::Device& d) {
    backend::DeviceTensor<float> s = put(d, std::vector<float>{-1.0f});
    d.current_scale(nullptr, 0, Format::kE4M3, false, 0.0f, s.get());
    std::vector<float> h(1);
    s.download(h.data());
    return h[0];
  });
  CHECK(bits(scale0.first) == bits(scale0.second));
  // K = 0: D = 0 * s; with a zero scale (scale_inv = Inf) that is NaN on both sides.
  for (const float scale : {1.0f, 0.0f}) {
    const auto d0 = both([&](const backend::Device& d) {
      backend::DeviceTensor<float> sc = put(d, std::vector<float>{scale, 1.0f});
      backend::DeviceTensor<float> D = put(d, std::vector<float>(6, 1.0f));
      d.gemm_fp8_tn(2, 3, 0, nullptr, Format::kE4M3, sc.get(), nullptr, Format::kE4M3, sc.get() + 1, {}, D.get());
      std::vector<float> h(6);
      D.download(h.data());
      return h;
    });
    for (std::size_t i = 0; i < 6; ++i) CHECK(backend::same_f32(d0.first[i], d0.second[i]));
  }
  // A 1 x 1 GEMM with K = 1, E4M3 x E5M2.
  const std::vector<std::uint8_t> row{0x38, 0xC2, 0x7E, 0x01, 0x80};
  const auto d1 = both([&](const backend::Device& d) {
    backend::DeviceTensor<std::uint8_t> a = put(d, row);
    backend::DeviceTensor<float> sc = put(d, std::vector<float>{2.0f, 1.0f / 3.0f});
    backend::DeviceTensor<float> D = put(d, std::vector<float>{0.0f});
    d.gemm_fp8_tn(1, 1, 1, a.get(), Format::kE4M3, sc.get(), a.get() + 1, Format::kE5M2, sc.get() + 1,
                  {emu::Accumulation::kHopper, 0}, D.get());
    std::vector<float> h(1);
    D.download(h.data());
    return h[0];
  });
  CHECK(bits(d1.first) == bits(d1.second));
  // A block cast with zero columns: nothing written, count 0.
  const auto b0 = both([&](const backend::Device& d) {
    backend::DeviceTensor<std::uint8_t> q = put(d, std::vector<std::uint8_t>{0x5A});
    backend::DeviceTensor<float> s = put(d, std::vector<float>{-7.0f});
    backend::DeviceTensor<backend::CastCounters> k = put(d, std::vector<backend::CastCounters>(1));
    d.block_cast(backend::BlockCast{}, nullptr, 3, 0, {q.get(), s.get()}, {}, k.get());
    std::vector<std::uint8_t> hq(1);
    q.download(hq.data());
    std::vector<backend::CastCounters> hk(1);
    k.download(hk.data());
    return std::make_pair(hq[0], hk[0].count);
  });
  CHECK(b0.first == b0.second);
}

TEST_CASE("gpu: bad arguments throw the emulator's errors", "[gpu]") {
  if (!testing::have_gpu()) return;
  const backend::Device& cpu = backend::cpu_device();
  const backend::Device& gpu = backend::cuda_device();
  auto message = [&](const backend::Device& d, Format fb, emu::GemmAccumulation acc) {
    backend::DeviceTensor<std::uint8_t> a(d, 1, 64);
    backend::DeviceTensor<float> sc(d, 1, 1), D(d, 2, 2);
    try {
      d.gemm_fp8_tn(2, 2, 16, a.get(), Format::kE5M2, sc.get(), a.get(), fb, sc.get(), acc, D.get());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(cpu, Format::kE5M2, {}) == message(gpu, Format::kE5M2, {}));
  CHECK(message(cpu, Format::kE4M3, {emu::Accumulation::kHopper, 20}) ==
        message(gpu, Format::kE4M3, {emu::Accumulation::kHopper, 20}));
  CHECK(message(cpu, Format::kE4M3, {emu::Accumulation::kExact, 32}) ==
        message(gpu, Format::kE4M3, {emu::Accumulation::kExact, 32}));
  CHECK(message(gpu, Format::kE5M2, {}) != "no error");
}

namespace {
// Compute capability of the GPU the kernels use (the first with FP8 MMA), as major * 10 + minor.
int fp8_device_cc() {
  for (const backend::GpuInfo& g : backend::cuda_status().gpus)
    if (g.fp8_mma()) return g.cc_major * 10 + g.cc_minor;
  return 0;
}
}  // namespace

TEST_CASE("gpu: cuBLASLt FP8 GEMM equals the hopper model with its split-K, E4M3 output and AMAX_D included",
          "[gpu]") {
  if (!testing::have_gpu()) return;
  // On sm_90 the expectation is bit-exact (measured on an H200, docs/gpu.md): FAST_ACCUM = 1 is the
  // hopper model without promotion, 0 with promotion every 128, both with the algorithm's split-K.
  // On other GPUs cuBLASLt runs other kernels: only closeness to the exact product is checked.
  const bool hopper = fp8_device_cc() == model_of(Accumulation::kHopper).compute_capability;
  struct Shape {
    int M, N, K, split_k;  // split_k 0: the heuristic's choice
  };
  for (const Shape sh : {Shape{64, 48, 256, 0}, Shape{16, 16, 65536, 0}, Shape{128, 128, 16384, 3}}) {
    float sa = 1.0f, sb = 1.0f;
    const auto A = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.M) * sh.K, 11, &sa);
    const auto B = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.N) * sh.K, 12, &sb);
    std::vector<float> exact(std::size_t(sh.M) * sh.N);
    emu::gemm_fp8_tn(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb,
                     {emu::Accumulation::kExact, 0, 1}, exact.data());
    for (const bool fast : {true, false}) {
      INFO("M " << sh.M << " N " << sh.N << " K " << sh.K << " split-K asked " << sh.split_k << ", fast accumulation "
                << fast);
      std::vector<float> D(exact.size());
      cuda::LtAlgo algo;
      cuda::lt_gemm_fp8_tn_host(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast,
                                nullptr, cuda::LtOutput::kFp32, D.data(), 1.0f, nullptr, sh.split_k, &algo);
      if (sh.split_k > 0) CHECK(algo.split_k == sh.split_k);
      const emu::GemmAccumulation acc{emu::Accumulation::kHopper, fast ? 0 : 128, algo.split_k};
      std::vector<float> model(D.size());
      emu::gemm_fp8_tn(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, acc, model.data());
      double diff2 = 0.0, ref2 = 0.0;
      std::size_t mismatches = 0;
      float mx = 0.0f;
      for (std::size_t i = 0; i < D.size(); ++i) {
        diff2 += (double(D[i]) - exact[i]) * (double(D[i]) - exact[i]);
        ref2 += double(exact[i]) * exact[i];
        mismatches += bits(D[i]) != bits(model[i]);
        mx = std::max(mx, std::fabs(model[i]));
      }
      CHECK(std::sqrt(diff2 / ref2) < 1e-2);  // the 14-bit tensor-core chain stays far below this
      if (hopper) CHECK(mismatches == 0);
      // E4M3 output with a D scale and AMAX_D (C passed as null): on sm_90 the codes and the amax
      // equal the emulator's epilogue (emu::GemmEpilogue) bit for bit.
      const float d_scale = max_finite_f32(Format::kE4M3) / mx;
      std::vector<std::uint8_t> q(D.size()), want(D.size());
      float amax = -1.0f, emu_amax = 0.0f;
      cuda::LtAlgo algo8;
      cuda::lt_gemm_fp8_tn_host(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast,
                                nullptr, cuda::LtOutput::kE4M3, q.data(), d_scale, &amax, sh.split_k, &algo8);
      emu::GemmEpilogue ep;
      ep.output = emu::GemmOutput::kFp8;
      ep.output_format = Format::kE4M3;
      ep.d_scale = d_scale;
      ep.amax_d = &emu_amax;
      emu::gemm_fp8_tn(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb,
                       {emu::Accumulation::kHopper, fast ? 0 : 128, algo8.split_k}, ep, want.data());
      CHECK(std::fabs(amax - emu_amax) <= 1e-2f * emu_amax);
      if (hopper) {
        CHECK(bits(amax) == bits(emu_amax));
        CHECK(q == want);
      }
    }
  }
}

namespace {

// Two output buffers of `bytes_per` bytes per element compared as the epilogue's contract says: FP8
// codes byte for byte; fp32, bf16 and fp16 bit for bit except NaN payloads (an fp32 operation's NaN
// is the FPU's choice, docs/gpu.md §Exactness), whose positions must match.
void require_same_output(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                         emu::GemmOutput out) {
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0, nan_differ = 0;
  const std::size_t w = out == emu::GemmOutput::kFp32 ? 4 : out == emu::GemmOutput::kFp8 ? 1 : 2;
  for (std::size_t i = 0; i < got.size(); i += w) {
    std::uint32_t g = 0, r = 0;
    std::memcpy(&g, &got[i], w);
    std::memcpy(&r, &want[i], w);
    bool gn = false, rn = false;
    if (out == emu::GemmOutput::kFp32) {
      gn = (g & 0x7FFFFFFFu) > 0x7F800000u, rn = (r & 0x7FFFFFFFu) > 0x7F800000u;
    } else if (out == emu::GemmOutput::kBf16) {
      gn = (g & 0x7FFFu) > 0x7F80u, rn = (r & 0x7FFFu) > 0x7F80u;
    } else if (out == emu::GemmOutput::kFp16) {
      gn = (g & 0x7FFFu) > 0x7C00u, rn = (r & 0x7FFFu) > 0x7C00u;
    }
    nan_differ += gn != rn;
    differ += !gn && g != r;
  }
  CHECK(nan_differ == 0);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("gpu: the GEMM epilogue (alpha, beta C, bias, bf16/fp16/FP8 outputs, amax) bit-identical to the emulator",
          "[gpu]") {
  if (!testing::have_gpu()) return;
  const backend::Device& gpu = backend::cuda_device();  // its memory; the GEMM runs on the legacy stream
  const int M = 37, N = 45, K = 160;
  const std::size_t mn = std::size_t(M) * std::size_t(N);
  std::vector<std::uint8_t> a(std::size_t(M) * K), b(std::size_t(N) * K);
  std::uint32_t state = 12345u;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (auto& v : a) v = std::uint8_t(next() >> 24);  // every code, NaN included
  for (auto& v : b) v = std::uint8_t(next() >> 24);
  // A finite copy (E4M3's NaN codes 0x7F, 0xFF replaced by 0): with NaN codes most rows of D are
  // NaN, so the finite arithmetic (rounding, overflow, saturation, amax) is checked on these.
  std::vector<std::uint8_t> a_fin(a), b_fin(b);
  for (auto* v : {&a_fin, &b_fin})
    for (auto& q : *v)
      if ((q & 0x7F) == 0x7F) q = 0;
  std::vector<float> c = backend::make_inputs(backend::InputFamily::kNanInf, mn, 5u);
  std::vector<float> bias = backend::make_inputs(backend::InputFamily::kWide, std::size_t(N), 6u);
  backend::DeviceTensor<std::uint8_t> da(gpu, M, K), db(gpu, N, K);
  backend::DeviceTensor<float> dc(gpu, M, N), dbias(gpu, 1, N);
  dc.upload(c.data());
  dbias.upload(bias.data());
  struct Case {
    emu::GemmOutput out;
    Format fmt;
    float d_scale, alpha, beta;
    bool bias;
  };
  const Case cases[] = {{emu::GemmOutput::kFp32, Format::kE4M3, 1.0f, 1.0f, 0.0f, false},
                        {emu::GemmOutput::kFp32, Format::kE4M3, 1.0f, 0.5f, 1.0f, true},
                        {emu::GemmOutput::kBf16, Format::kE4M3, 1.0f, 1.0f, -2.0f, true},
                        {emu::GemmOutput::kFp16, Format::kE4M3, 1.0f, 3.0f, 0.0f, true},
                        {emu::GemmOutput::kFp8, Format::kE4M3, 16.0f, 1.0f, 1.0f, true},
                        {emu::GemmOutput::kFp8, Format::kE5M2, 0.25f, 2.0f, 0.0f, false}};
  for (const bool finite : {true, false})
  for (const emu::GemmAccumulation acc : {emu::te_fprop(emu::Accumulation::kHopper),
                                          emu::GemmAccumulation{emu::Accumulation::kFp32, 0, 2}})
    for (const Case& k : cases) {
      const std::vector<std::uint8_t>& ha = finite ? a_fin : a;
      const std::vector<std::uint8_t>& hb = finite ? b_fin : b;
      da.upload(ha.data());
      db.upload(hb.data());
      INFO((finite ? "finite operands, " : "every code, ")
           << "output " << int(k.out) << " format " << format_name(k.fmt) << " d_scale " << k.d_scale << " alpha "
           << k.alpha << " beta " << k.beta << " bias " << k.bias << " model " << int(acc.model));
      const std::size_t w = k.out == emu::GemmOutput::kFp32 ? 4 : k.out == emu::GemmOutput::kFp8 ? 1 : 2;
      emu::GemmEpilogue ep;
      ep.alpha = k.alpha;
      ep.beta = k.beta;
      ep.output = k.out;
      ep.output_format = k.fmt;
      ep.d_scale = k.d_scale;
      ep.C = k.beta != 0.0f ? c.data() : nullptr;
      ep.bias = k.bias ? bias.data() : nullptr;
      float amax_h = 0.0f;
      ep.amax_d = &amax_h;
      std::vector<std::uint8_t> want(mn * w), got(mn * w);
      emu::gemm_fp8_tn(M, N, K, ha.data(), Format::kE4M3, 0.5f, hb.data(), Format::kE4M3, 0.125f, acc, ep, want.data());
      ep.C = k.beta != 0.0f ? dc.get() : nullptr;
      ep.bias = k.bias ? dbias.get() : nullptr;
      ep.amax_d = nullptr;
      backend::DeviceTensor<std::uint8_t> dd(gpu, 1, int(mn * w));
      backend::DeviceTensor<unsigned int> amax_bits(gpu, 1, 1);
      cuda::gemm_fp8_tn(M, N, K, da.get(), Format::kE4M3, 0.5f, db.get(), Format::kE4M3, 0.125f, acc, ep, dd.get(),
                        amax_bits.get(), nullptr);
      dd.download(got.data());
      unsigned int amax_d = 0;
      amax_bits.download(&amax_d);
      require_same_output(got, want, k.out);
      CHECK(amax_d == bits(amax_h));
    }
  // C the same buffer as D (an in-place accumulate): C is read before D is written, as on the host.
  {
    emu::GemmEpilogue ep;
    ep.alpha = 0.5f;
    ep.beta = 1.0f;
    ep.C = c.data();
    const emu::GemmAccumulation acc = emu::te_dgrad(emu::Accumulation::kHopper);
    std::vector<float> want(mn), got(mn);
    emu::gemm_fp8_tn(M, N, K, a_fin.data(), Format::kE4M3, 0.5f, b_fin.data(), Format::kE4M3, 0.125f, acc, ep,
                     want.data());
    da.upload(a_fin.data());
    db.upload(b_fin.data());
    backend::DeviceTensor<float> acc_d(gpu, M, N);
    acc_d.upload(c.data());
    ep.C = acc_d.get();
    cuda::gemm_fp8_tn(M, N, K, da.get(), Format::kE4M3, 0.5f, db.get(), Format::kE4M3, 0.125f, acc, ep, acc_d.get(),
                      nullptr, nullptr);
    acc_d.download(got.data());
    std::vector<std::uint8_t> gb(mn * 4), wb(mn * 4);
    std::memcpy(gb.data(), got.data(), gb.size());
    std::memcpy(wb.data(), want.data(), wb.size());
    INFO("C aliases D");
    require_same_output(gb, wb, emu::GemmOutput::kFp32);
  }
  // The device keeps no host pointer: amax_d set is an error, before anything is enqueued.
  emu::GemmEpilogue bad;
  float host_amax = 0.0f;
  bad.amax_d = &host_amax;
  backend::DeviceTensor<float> dd(gpu, M, N);
  CHECK_THROWS_WITH(cuda::gemm_fp8_tn(M, N, K, da.get(), Format::kE4M3, 1.0f, db.get(), Format::kE4M3, 1.0f,
                                      emu::te_fprop(emu::Accumulation::kHopper), bad, dd.get(), nullptr, nullptr),
                    Catch::Contains("amax_d is a host pointer"));
}
