// GPU tests of backend::cuda_device() (CTest label `gpu`; CI skips them): every operation of
// backend::Device run on cpu_device() and on cuda_device() from the same inputs, the results compared
// bit for bit (fp32 values by their bits, two NaNs counting as equal as in device_check.hpp: an fp32
// operation's NaN is the FPU's choice; FP8 codes, counters, amax and scales exactly). Inputs: the
// device check's families (normal, wide, NaN/Inf/zeros, subnormal, overflow), shapes of 1, 7, 33 and
// 300 in every role, both FP8 formats and every GEMM operand pair and accumulation variant.
//
// Without a usable GPU each test prints "SKIPPED: no usable GPU ..." and passes (CTest shows it as
// skipped) unless FP8EMU_REQUIRE_GPU is set. The last test case ([device-check]) needs no GPU: it
// runs the same comparisons of cpu_device() against itself (no mismatch) and against a cpu_device()
// with one operation changed (reordered sums, a fused multiply-add, ...), which they must catch; the
// CPU executable fp8emu_test_device_check runs it in every build (CI included).
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/fp32_math.hpp"
#include "fp8emu/core/fp32_ops.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/util/error.hpp"
#include "support/device_quantize_check.hpp"
#include "support/forward_device.hpp"
#include "support/gpu_skip.hpp"
#include "fp8emu_internal/device_check.hpp"

using namespace fp8emu;
using backend::ActivationOp;
using backend::AdamStep;
using backend::CastCounters;
using backend::Device;
using backend::DeviceTensor;

namespace {


const int kSizes[] = {1, 7, 33, 300};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull;
}

std::vector<float> inputs(backend::InputFamily fam, std::size_t n, std::uint64_t seed) {
  return backend::make_inputs(fam, n, seed);
}

// The comparison of one operation: values compared, mismatches, and where the first one was.
struct Report {
  std::uint64_t values = 0, mismatches = 0, nan_payloads = 0;
  std::string first;

  void miss(const std::string& where, std::size_t i, const std::string& what) {
    if (mismatches++ == 0) {
      std::ostringstream os;
      os << where << " [" << i << "]: " << what;
      first = os.str();
    }
  }
  void f32(const std::string& where, const std::vector<float>& ref, const std::vector<float>& cand) {
    REQUIRE(ref.size() == cand.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ++values;
      const std::uint32_t a = core::f32_to_bits(ref[i]), b = core::f32_to_bits(cand[i]);
      if (a == b) continue;
      if (std::isnan(ref[i]) && std::isnan(cand[i])) {
        ++nan_payloads;
        continue;
      }
      std::ostringstream os;
      os << "ref " << ref[i] << " (0x" << std::hex << a << ") cand " << cand[i] << " (0x" << b << ")";
      miss(where, i, os.str());
    }
  }
  void bytes(const std::string& where, const std::vector<std::uint8_t>& ref, const std::vector<std::uint8_t>& cand) {
    REQUIRE(ref.size() == cand.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ++values;
      if (ref[i] != cand[i]) miss(where, i, "ref " + std::to_string(ref[i]) + " cand " + std::to_string(cand[i]));
    }
  }
  void counters(const std::string& where, const CastCounters& a, const CastCounters& b) {
    const std::uint64_t ra[4] = {a.count, a.saturated, a.underflow, a.nan};
    const std::uint64_t rb[4] = {b.count, b.saturated, b.underflow, b.nan};
    for (std::size_t i = 0; i < 4; ++i) {
      ++values;
      if (ra[i] != rb[i]) miss(where + " counters (count, saturated, underflow, nan)", i,
                               "ref " + std::to_string(ra[i]) + " cand " + std::to_string(rb[i]));
    }
  }
};

// A tensor with the same contents on two devices.
template <class T>
struct Twin {
  DeviceTensor<T> r, c;
  Twin(const Device& ref, const Device& cand, int rows, int cols) : r(ref, rows, cols), c(cand, rows, cols) {}
  Twin(const Device& ref, const Device& cand, const std::vector<T>& host)
      : Twin(ref, cand, 1, int(host.size())) {
    r.upload(host.data());
    c.upload(host.data());
  }
  void set(const std::vector<T>& host) const {
    REQUIRE(host.size() == r.size());
    r.upload(host.data());
    c.upload(host.data());
  }
  std::vector<T> ref() const {
    std::vector<T> h(r.size());
    r.download(h.data());
    return h;
  }
  std::vector<T> cand() const {
    std::vector<T> h(c.size());
    c.download(h.data());
    return h;
  }
};

void compare(Report& rep, const std::string& where, const Twin<float>& t) { rep.f32(where, t.ref(), t.cand()); }
void compare(Report& rep, const std::string& where, const Twin<std::uint8_t>& t) {
  rep.bytes(where, t.ref(), t.cand());
}

std::string shape(int a, int b) { return std::to_string(a) + " x " + std::to_string(b); }

std::string fstr(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// ---- the operations ---------------------------------------------------------------------------

void check_memory(const Device& ref, const Device& cand, Report& rep) {
  CHECK(ref.allocate(0) == nullptr);
  CHECK(cand.allocate(0) == nullptr);
  ref.release(nullptr);
  cand.release(nullptr);
  for (const std::size_t bytes : {std::size_t(1), std::size_t(7), std::size_t(33), std::size_t(300 * 300 * 4 + 3)}) {
    // Zero-filled when made.
    Twin<std::uint8_t> t(ref, cand, 1, int(bytes));
    rep.bytes("allocate " + std::to_string(bytes), t.ref(), std::vector<std::uint8_t>(bytes, 0));
    rep.bytes("allocate " + std::to_string(bytes), t.cand(), std::vector<std::uint8_t>(bytes, 0));
    // upload, copy (into another tensor), fill_zero of a middle range, download.
    std::mt19937_64 g(bytes);
    std::vector<std::uint8_t> h(bytes);
    for (auto& b : h) b = std::uint8_t(g());
    t.set(h);
    Twin<std::uint8_t> u(ref, cand, 1, int(bytes));
    ref.copy(u.r.get(), t.r.get(), bytes);
    cand.copy(u.c.get(), t.c.get(), bytes);
    const std::size_t lo = bytes / 3, len = bytes - lo - bytes / 4;
    ref.fill_zero(u.r.get() + lo, len);
    cand.fill_zero(u.c.get() + lo, len);
    std::vector<std::uint8_t> want = h;
    std::fill(want.begin() + std::ptrdiff_t(lo), want.begin() + std::ptrdiff_t(lo + len), std::uint8_t(0));
    rep.bytes("upload/copy/fill_zero " + std::to_string(bytes), u.ref(), want);
    rep.bytes("upload/copy/fill_zero " + std::to_string(bytes), u.cand(), want);
    compare(rep, "upload " + std::to_string(bytes), t);
  }
  // Zero-byte transfers do nothing (null pointers allowed).
  ref.upload(nullptr, nullptr, 0);
  cand.upload(nullptr, nullptr, 0);
  cand.download(nullptr, nullptr, 0);
  cand.copy(nullptr, nullptr, 0);
  cand.fill_zero(nullptr, 0);
}

void check_gemm_f32(const Device& ref, const Device& cand, Report& rep) {
  const backend::InputFamily fams[] = {backend::InputFamily::kNormal, backend::InputFamily::kWide,
                                       backend::InputFamily::kNanInf, backend::InputFamily::kSubnormal};
  std::uint64_t seed = 11;
  for (const int M : kSizes)
    for (const int N : kSizes)
      for (const int K : {0, 1, 7, 33, 300}) {
        if (M * N * K > 300 * 33 * 300) continue;  // the largest: 300 x 33 x 300 and permutations
        for (const backend::InputFamily fam : fams) {
          if (fam != backend::InputFamily::kNormal && fam != backend::InputFamily::kWide && (M + N + K) % 2) continue;
          const std::string where = "gemm_f32_nn " + std::to_string(M) + " x " + std::to_string(N) + " x " +
                                    std::to_string(K) + " " + backend::to_string(fam);
          Twin<float> a(ref, cand, inputs(fam, std::size_t(M) * std::size_t(K), mix(++seed, 1)));
          Twin<float> b(ref, cand, inputs(fam, std::size_t(K) * std::size_t(N), mix(++seed, 2)));
          Twin<float> d(ref, cand, std::vector<float>(std::size_t(M) * std::size_t(N), 12345.0f));  // overwritten
          ref.gemm_f32_nn(M, N, K, a.r.get(), b.r.get(), d.r.get());
          cand.gemm_f32_nn(M, N, K, a.c.get(), b.c.get(), d.c.get());
          compare(rep, where, d);
        }
      }
}

// Inputs of a family rounded to bf16 on the host (the bf16 GEMMs' contract: bf16 values).
std::vector<float> bf16_inputs(backend::InputFamily fam, std::size_t n, std::uint64_t s) {
  std::vector<float> v = inputs(fam, n, s);
  backend::cpu_device().round_bf16(v.data(), v.size());
  return v;
}

// The BF16 layer's GEMM: operands rounded to bf16 on the host (the contract: bf16 values), then
// gemm_bf16_nn on each device.
void check_gemm_bf16(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 17;
  for (const int M : kSizes)
    for (const int N : kSizes)
      for (const int K : {1, 7, 33, 300}) {
        if (M * N * K > 300 * 33 * 300) continue;
        for (const backend::InputFamily fam : {backend::InputFamily::kNormal, backend::InputFamily::kWide}) {
          const std::string where = "gemm_bf16_nn " + std::to_string(M) + " x " + std::to_string(N) + " x " +
                                    std::to_string(K) + " " + backend::to_string(fam);
          Twin<float> a(ref, cand, bf16_inputs(fam, std::size_t(M) * std::size_t(K), mix(++seed, 1)));
          Twin<float> b(ref, cand, bf16_inputs(fam, std::size_t(K) * std::size_t(N), mix(++seed, 2)));
          Twin<float> d(ref, cand, std::vector<float>(std::size_t(M) * std::size_t(N), 12345.0f));
          ref.gemm_bf16_nn(M, N, K, a.r.get(), b.r.get(), d.r.get());
          cand.gemm_bf16_nn(M, N, K, a.c.get(), b.c.get(), d.c.get());
          compare(rep, where, d);
        }
      }
}

// The bf16 layer's tensor-core GEMM (Linear::set_bf16_accumulation): gemm_tc_nn on bf16 operands
// (NaN and Inf included: the per-element special-value path) for a bf16 and a tf32 row.
void check_gemm_tc(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 19;
  for (const Accumulation model : {Accumulation::kHopperBf16, Accumulation::kAmpereTf32})
    for (const int M : kSizes)
      for (const int N : kSizes)
        for (const int K : {1, 7, 33, 300}) {
          if (M * N * K > 300 * 33 * 300) continue;
          for (const backend::InputFamily fam : {backend::InputFamily::kNormal, backend::InputFamily::kWide,
                                                 backend::InputFamily::kNanInf}) {
            const std::string where = std::string("gemm_tc_nn ") + model_of(model).name + " " + std::to_string(M) +
                                      " x " + std::to_string(N) + " x " + std::to_string(K) + " " +
                                      backend::to_string(fam);
            Twin<float> a(ref, cand, bf16_inputs(fam, std::size_t(M) * std::size_t(K), mix(++seed, 1)));
            Twin<float> b(ref, cand, bf16_inputs(fam, std::size_t(K) * std::size_t(N), mix(++seed, 2)));
            Twin<float> d(ref, cand, std::vector<float>(std::size_t(M) * std::size_t(N), 12345.0f));
            ref.gemm_tc_nn(M, N, K, a.r.get(), b.r.get(), model, d.r.get());
            cand.gemm_tc_nn(M, N, K, a.c.get(), b.c.get(), model, d.c.get());
            compare(rep, where, d);
          }
        }
}

void check_transpose_f32(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 21;
  for (const int rows : kSizes)
    for (const int cols : kSizes) {
      Twin<float> x(ref, cand, inputs(backend::InputFamily::kNanInf, std::size_t(rows) * std::size_t(cols), ++seed));
      Twin<float> y(ref, cand, rows, cols);
      ref.transpose_f32(rows, cols, x.r.get(), y.r.get());
      cand.transpose_f32(rows, cols, x.c.get(), y.c.get());
      compare(rep, "transpose_f32 " + shape(rows, cols), y);
    }
}

void check_cast_transpose(const Device& ref, const Device& cand, Report& rep) {
  const std::pair<int, int> shapes[] = {{1, 1}, {1, 300}, {300, 1}, {7, 33}, {33, 7}, {33, 300}, {300, 33},
                                        {300, 300}, {64, 128}, {256, 384}, {4, 4}};
  const float scales[] = {1.0f, 100.0f, 0.0123f, 3.0e-7f, 4.0e5f};
  std::uint64_t seed = 31;
  int variant = 0;
  for (const auto& [rows, cols] : shapes)
    for (const backend::InputFamily fam : backend::all_input_families())
      for (const Format fmt : {Format::kE4M3, Format::kE5M2}) {
        ++variant;
        const std::size_t n = std::size_t(rows) * std::size_t(cols);
        const float sv = scales[std::size_t(variant) % (sizeof scales / sizeof scales[0])];
        const int outs = variant % 3;  // 0: both copies, 1: row-wise only, 2: column-wise only
        const bool with_amax = variant % 4 != 3, with_counters = variant % 5 != 4;
        const std::string where = "cast_transpose " + shape(rows, cols) + " " + backend::to_string(fam) + " " +
                                  format_name(fmt) + " scale " + fstr(sv) + " outputs " +
                                  std::to_string(outs);
        Twin<float> x(ref, cand, inputs(fam, n, mix(++seed, 3)));
        Twin<float> scale(ref, cand, std::vector<float>{sv});
        // amax starts as a history's staging value (0 or an earlier cast's amax).
        Twin<float> amax(ref, cand, std::vector<float>{variant % 2 ? 0.0f : 0.75f});
        Twin<std::uint8_t> qr(ref, cand, rows, cols), qc(ref, cand, cols, rows);
        // counters start non-zero: the cast adds to them.
        CastCounters c0{5, 4, 3, 2};
        Twin<std::uint8_t> cnt(ref, cand, 1, int(sizeof(CastCounters)));
        {
          std::vector<std::uint8_t> h(sizeof(CastCounters));
          std::memcpy(h.data(), &c0, sizeof c0);
          cnt.set(h);
        }
        auto run = [&](const Device& d, const DeviceTensor<float>& xs, const DeviceTensor<float>& s,
                       const DeviceTensor<float>& a, const DeviceTensor<std::uint8_t>& r,
                       const DeviceTensor<std::uint8_t>& c, const DeviceTensor<std::uint8_t>& k) {
          d.cast_transpose(xs.get(), rows, cols, s.get(), fmt, outs != 2 ? r.get() : nullptr,
                           outs != 1 ? c.get() : nullptr, with_amax ? a.get() : nullptr,
                           with_counters ? reinterpret_cast<CastCounters*>(k.get()) : nullptr);
        };
        run(ref, x.r, scale.r, amax.r, qr.r, qc.r, cnt.r);
        run(cand, x.c, scale.c, amax.c, qr.c, qc.c, cnt.c);
        compare(rep, where + " row-wise codes", qr);
        compare(rep, where + " column-wise codes", qc);
        compare(rep, where + " amax", amax);
        CastCounters a{}, b{};
        const std::vector<std::uint8_t> ha = cnt.ref(), hb = cnt.cand();
        std::memcpy(&a, ha.data(), sizeof a);
        std::memcpy(&b, hb.data(), sizeof b);
        rep.counters(where, a, b);
      }
}

void check_current_scale(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 41;
  int variant = 0;
  for (const std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(33), std::size_t(300), std::size_t(90007)})
    for (const backend::InputFamily fam : backend::all_input_families())
      for (const Format fmt : {Format::kE4M3, Format::kE5M2})
        for (const bool pow2 : {false, true})
          for (const float eps : {0.0f, 1e-12f, 3.0f}) {
            ++variant;
            std::vector<float> h = inputs(fam, n, mix(++seed, 4));
            if (variant % 7 == 0) std::fill(h.begin(), h.end(), 0.0f);  // amax 0: scale 1 (or from epsilon)
            Twin<float> x(ref, cand, h);
            Twin<float> scale(ref, cand, std::vector<float>{-7.0f});
            ref.current_scale(x.r.get(), n, fmt, pow2, eps, scale.r.get());
            cand.current_scale(x.c.get(), n, fmt, pow2, eps, scale.c.get());
            compare(rep,
                    "current_scale n " + std::to_string(n) + " " + backend::to_string(fam) + " " + format_name(fmt) +
                        (pow2 ? " pow2" : "") + " epsilon " + fstr(eps),
                    scale);
          }
}

// A history column: zeros, ordinary amaxes, and the values TE's update meets (Inf, NaN, subnormal,
// FLT_MAX), row 0 (this step's amax) zero in some slots.
std::vector<float> history_values(int L, int slots, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float specials[] = {0.0f, INFINITY, NAN, 1e-40f, FLT_MAX, 448.0f, 57344.0f, 1e-3f, 3.5f};
  std::vector<float> h(std::size_t(L) * std::size_t(slots));
  for (float& v : h) {
    const float p = u(g);
    v = p < 0.25f ? 0.0f : p < 0.35f ? specials[g() % 9] : std::exp2(-20.0f + 40.0f * u(g));
  }
  return h;
}

void check_delayed_update(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 51;
  for (const int L : {1, 2, 7, 33, 1024})
    for (const int slots : kSizes)
      for (const bool most_recent : {false, true})
        for (const Format fmt : {Format::kE4M3, Format::kE5M2})
          for (const int margin : {0, 2}) {
            const float scaled_max = max_finite_f32(fmt) * std::pow(2.0f, float(-margin));
            const std::string where = "delayed_update L " + std::to_string(L) + " slots " + std::to_string(slots) +
                                      (most_recent ? " most_recent " : " max ") + format_name(fmt) + " margin " +
                                      std::to_string(margin);
            Twin<float> hist(ref, cand, history_values(L, slots, mix(++seed, 5)));
            std::vector<float> s0(static_cast<std::size_t>(slots));
            for (std::size_t j = 0; j < s0.size(); ++j) s0[j] = j % 3 == 0 ? 1.0f : 0.5f * float(j + 1);
            Twin<float> scale(ref, cand, s0);
            for (int round = 0; round < 3; ++round) {  // the history rolls; row 0 refilled in between
              ref.delayed_update(hist.r.get(), scale.r.get(), slots, L, scaled_max, most_recent);
              cand.delayed_update(hist.c.get(), scale.c.get(), slots, L, scaled_max, most_recent);
              compare(rep, where + " round " + std::to_string(round) + " history", hist);
              compare(rep, where + " round " + std::to_string(round) + " scale", scale);
              std::vector<float> h = hist.ref();
              const std::vector<float> fresh = history_values(1, slots, mix(seed, 100 + std::uint64_t(round)));
              std::copy(fresh.begin(), fresh.end(), h.begin());
              hist.set(h);
            }
          }
}

// A delayed-scaling step as the step program runs it: casts reading their scale from the state and
// recording their amax into row 0 of the history, the GEMM reading both scales, then the update.
void check_delayed_pipeline(const Device& ref, const Device& cand, Report& rep) {
  const int L = 16, slots = 2, rows = 33, cols = 300, outc = 7;
  Twin<float> hist(ref, cand, std::vector<float>(std::size_t(L) * slots, 0.0f));
  Twin<float> scale(ref, cand, std::vector<float>(slots, 1.0f));
  Twin<std::uint8_t> qx(ref, cand, rows, cols), qw(ref, cand, outc, cols), qxt(ref, cand, cols, rows);
  Twin<float> d(ref, cand, rows, outc);
  Twin<std::uint8_t> cnt(ref, cand, 1, int(sizeof(CastCounters)));
  for (int step = 0; step < 5; ++step) {
    const auto fam = backend::all_input_families()[std::size_t(step) % 5];
    Twin<float> x(ref, cand, inputs(fam, std::size_t(rows) * cols, mix(61, std::uint64_t(step))));
    Twin<float> w(ref, cand,
                  inputs(backend::InputFamily::kNormal, std::size_t(outc) * cols, mix(62, std::uint64_t(step))));
    for (int side = 0; side < 2; ++side) {
      const Device& dev = side ? cand : ref;
      const auto& X = side ? x.c : x.r;
      const auto& W = side ? w.c : w.r;
      float* H = (side ? hist.c : hist.r).get();
      float* S = (side ? scale.c : scale.r).get();
      auto* C = reinterpret_cast<CastCounters*>((side ? cnt.c : cnt.r).get());
      dev.cast_transpose(X.get(), rows, cols, S + 0, Format::kE4M3, (side ? qx.c : qx.r).get(),
                         (side ? qxt.c : qxt.r).get(), H + 0, C);
      dev.cast_transpose(W.get(), outc, cols, S + 1, Format::kE4M3, (side ? qw.c : qw.r).get(), nullptr, H + 1, C);
      dev.gemm_fp8_tn(rows, outc, cols, (side ? qx.c : qx.r).get(), Format::kE4M3, S + 0, (side ? qw.c : qw.r).get(),
                      Format::kE4M3, S + 1, {Accumulation::kHopper, 0}, (side ? d.c : d.r).get());
      dev.delayed_update(H, S, slots, L, max_finite_f32(Format::kE4M3), false);
    }
    const std::string where = "delayed pipeline step " + std::to_string(step);
    compare(rep, where + " x codes", qx);
    compare(rep, where + " x^T codes", qxt);
    compare(rep, where + " w codes", qw);
    compare(rep, where + " D", d);
    compare(rep, where + " history", hist);
    compare(rep, where + " scales", scale);
    compare(rep, where + " counters", cnt);
  }
}

void check_gemm_fp8(const Device& ref, const Device& cand, Report& rep) {
  std::vector<std::pair<Format, Format>> pairs;
  for (const Format a : {Format::kE4M3, Format::kE5M2})
    for (const Format b : {Format::kE4M3, Format::kE5M2})
      if (emu::gemm_operand_pair_supported(a, b)) pairs.emplace_back(a, b);
  // The device check's variants: every model, fast accumulation, a promotion interval of one block
  // (50 without blocks) and of 128, split-K 3 and split-K 2 with promotion every 128.
  const std::vector<emu::GemmAccumulation> accs = backend::device_check_accumulations();
  // Scales as a recipe's state holds them: ordinary, large and small (1 / s subnormal for FLT_MAX),
  // and 0 and Inf (s = Inf or 0: D Inf/NaN/0).
  const std::pair<float, float> scales[] = {{1.0f, 1.0f},     {0.37f, 1.9f},   {3.3f, 0.011f}, {max_finite_f32(Format::kE4M3) / 3.1f, 2.0e-5f},
                                            {FLT_MAX, 7.0f},  {1e-30f, 1e-9f}, {0.0f, 2.0f},   {INFINITY, 0.5f}};
  const int shapes[][3] = {{1, 1, 1}, {7, 1, 33}, {1, 7, 300}, {33, 33, 7}, {300, 7, 33}, {7, 300, 300},
                           {33, 300, 1}, {33, 7, 0}, {64, 64, 256},
                           // cuBLASLt's shapes on sm_90 (K and N multiples of 16): the training step's
                           {64, 256, 784}, {300, 16, 64}};
  std::uint64_t seed = 71;
  int variant = 0;
  // What cuBLASLt takes on sm_90 (K and N multiples of 16, the hopper model without split-K, fast or
  // promoted every 128) runs every pair with each of the first three (ordinary) scale pairs, as a
  // training step has them: scale products outside fp32's normal range were never measured on
  // cuBLASLt, so the extreme ones stay with the per-element kernel. The large shapes run only
  // cuBLASLt's models (the per-element core model is slow on the CPU side of the comparison).
  for (const auto& sh : shapes)
    for (const auto& [fa, fb] : pairs)
      for (const emu::GemmAccumulation& acc : accs)
        for (int ordinary = 0; ordinary < 3; ++ordinary) {
          const int M = sh[0], N = sh[1], K = sh[2];
          const bool lt_acc = acc.model == emu::Accumulation::kHopper && acc.split_k == 1 &&
                              (acc.promotion_interval == 0 || acc.promotion_interval == 128);
          const bool lt_shape = K > 0 && K % 16 == 0 && N % 16 == 0 && lt_acc;
          if (!lt_shape && ordinary > 0) break;
          if (!lt_acc && std::size_t(M) * N * K > (std::size_t(1) << 20)) break;  // the large shapes are cuBLASLt's
          ++variant;
          const auto fam = static_cast<backend::CodeFamily>(variant % 3);
          float si = 1.0f;
          Twin<std::uint8_t> A(ref, cand, backend::make_codes(fam, fa, std::size_t(M) * K, mix(++seed, 7), &si));
          Twin<std::uint8_t> B(ref, cand, backend::make_codes(fam, fb, std::size_t(N) * K, mix(++seed, 8), &si));
          const auto [sa, sb] =
              lt_shape ? scales[ordinary] : scales[std::size_t(variant) % (sizeof scales / sizeof scales[0])];
          Twin<float> scale(ref, cand, std::vector<float>{sa, sb});
          Twin<float> D(ref, cand, std::vector<float>(std::size_t(M) * N, -1.0f));
          std::string where = "gemm_fp8_tn " + std::to_string(M) + " x " + std::to_string(N) + " x " +
                              std::to_string(K) + " " + format_name(fa) + " x " + format_name(fb) + " " +
                              emu::to_string(acc.model) + " promote " + std::to_string(acc.promotion_interval) +
                              " split-k " + std::to_string(acc.split_k) + " scales " + fstr(sa) + ", " + fstr(sb) +
                              " codes " + backend::to_string(fam);
          ref.gemm_fp8_tn(M, N, K, A.r.get(), fa, scale.r.get(), B.r.get(), fb, scale.r.get() + 1, acc, D.r.get());
          cand.gemm_fp8_tn(M, N, K, A.c.get(), fa, scale.c.get(), B.c.get(), fb, scale.c.get() + 1, acc, D.c.get());
          compare(rep, where, D);
        }
}

void check_bias_and_columns(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 81;
  for (const int rows : kSizes)
    for (const int cols : kSizes)
      for (const auto fam :
           {backend::InputFamily::kNormal, backend::InputFamily::kWide, backend::InputFamily::kNanInf}) {
        const std::string where = shape(rows, cols) + " " + backend::to_string(fam);
        Twin<float> y(ref, cand, inputs(fam, std::size_t(rows) * cols, mix(++seed, 9)));
        Twin<float> b(ref, cand, inputs(fam, std::size_t(cols), mix(++seed, 10)));
        ref.bias_add(y.r.get(), b.r.get(), rows, cols);
        cand.bias_add(y.c.get(), b.c.get(), rows, cols);
        compare(rep, "bias_add " + where, y);
        Twin<float> out(ref, cand, std::vector<float>(std::size_t(cols), 99.0f));
        ref.column_sum(y.r.get(), rows, cols, out.r.get());
        cand.column_sum(y.c.get(), rows, cols, out.c.get());
        compare(rep, "column_sum " + where, out);
      }
}

void check_activations(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 91;
  for (const std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(33), std::size_t(300), std::size_t(70001)})
    for (const ActivationOp act : {ActivationOp::kReLU, ActivationOp::kGELU})
      for (const backend::InputFamily fam : backend::all_input_families()) {
        const std::string where = std::string(act == ActivationOp::kReLU ? "relu " : "gelu ") + std::to_string(n) +
                                  " " + backend::to_string(fam);
        const std::vector<float> hx = inputs(fam, n, mix(++seed, 11));
        Twin<float> x(ref, cand, hx), y(ref, cand, 1, int(n));
        ref.activation_forward(act, x.r.get(), y.r.get(), n);
        cand.activation_forward(act, x.c.get(), y.c.get(), n);
        compare(rep, "activation_forward " + where, y);
        compare(rep, "activation_forward (input kept) " + where, x);
        // In place (y = x).
        ref.activation_forward(act, x.r.get(), x.r.get(), n);
        cand.activation_forward(act, x.c.get(), x.c.get(), n);
        compare(rep, "activation_forward in place " + where, x);
        // dx *= act'(pre), pre the inputs above.
        Twin<float> pre(ref, cand, hx);
        Twin<float> dx(ref, cand, inputs(backend::InputFamily::kWide, n, mix(++seed, 12)));
        ref.activation_backward(act, pre.r.get(), dx.r.get(), n);
        cand.activation_backward(act, pre.c.get(), dx.c.get(), n);
        compare(rep, "activation_backward " + where, dx);
      }
}

void check_softmax_xent(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 101;
  for (const int rows : kSizes)
    for (const int classes : kSizes)
      for (const backend::InputFamily fam : backend::all_input_families())
        for (const bool with_d : {true, false}) {
          if (!with_d && fam != backend::InputFamily::kNormal) continue;
          std::vector<float> z = inputs(fam, std::size_t(rows) * classes, mix(++seed, 13));
          if (fam == backend::InputFamily::kNormal)  // logits of a trained model: a few large
            for (std::size_t i = 0; i < z.size(); i += 5) z[i] *= 20.0f;
          std::vector<std::uint8_t> labels(static_cast<std::size_t>(rows));
          std::mt19937_64 g(seed);
          for (auto& l : labels) l = std::uint8_t(g() % std::uint64_t(std::min(classes, 256)));
          const float divisor = float(rows + int(seed % 3));
          Twin<float> logits(ref, cand, z);
          Twin<std::uint8_t> lab(ref, cand, labels);
          Twin<float> loss(ref, cand, std::vector<float>(std::size_t(rows), -3.0f));
          Twin<float> d(ref, cand, std::vector<float>(std::size_t(rows) * classes, -3.0f));
          ref.softmax_xent(logits.r.get(), lab.r.get(), rows, classes, divisor, loss.r.get(),
                           with_d ? d.r.get() : nullptr);
          cand.softmax_xent(logits.c.get(), lab.c.get(), rows, classes, divisor, loss.c.get(),
                            with_d ? d.c.get() : nullptr);
          const std::string where = "softmax_xent " + shape(rows, classes) + " " + backend::to_string(fam) +
                                    (with_d ? "" : " (no dlogits)");
          compare(rep, where + " loss", loss);
          compare(rep, where + " dlogits", d);
        }
}

void check_optimizers(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 111;
  for (const std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(33), std::size_t(300), std::size_t(100003)})
    for (const backend::InputFamily fam : backend::all_input_families()) {
      const std::string where = std::to_string(n) + " " + backend::to_string(fam);
      // Adam: three steps with the host's per-step constants (nn::Optimizer), lr 1e-3 and 3e-2.
      Twin<float> w(ref, cand, inputs(backend::InputFamily::kNormal, n, mix(++seed, 14)));
      Twin<float> m(ref, cand, 1, int(n)), v(ref, cand, 1, int(n));
      for (int t = 1; t <= 3; ++t) {
        Twin<float> g(ref, cand, inputs(fam, n, mix(++seed, 15)));
        const float lr = t == 2 ? 3e-2f : 1e-3f;
        AdamStep s;
        s.step = lr / (1.0f - std::pow(s.b1, float(t)));
        s.sqrt_bc2 = std::sqrt(1.0f - std::pow(s.b2, float(t)));
        ref.adam(w.r.get(), g.r.get(), m.r.get(), v.r.get(), n, s);
        cand.adam(w.c.get(), g.c.get(), m.c.get(), v.c.get(), n, s);
        const std::string at = "adam step " + std::to_string(t) + " " + where;
        compare(rep, at + " w", w);
        compare(rep, at + " m", m);
        compare(rep, at + " v", v);
      }
      // SGD with momentum.
      Twin<float> w2(ref, cand, inputs(backend::InputFamily::kNormal, n, mix(++seed, 16)));
      Twin<float> m2(ref, cand, 1, int(n));
      for (int t = 1; t <= 3; ++t) {
        Twin<float> g(ref, cand, inputs(fam, n, mix(++seed, 17)));
        const float momentum = t == 3 ? 0.0f : 0.9f, lr = 0.01f * float(t);
        ref.sgd(w2.r.get(), g.r.get(), m2.r.get(), n, momentum, lr);
        cand.sgd(w2.c.get(), g.c.get(), m2.c.get(), n, momentum, lr);
        const std::string at = "sgd step " + std::to_string(t) + " " + where;
        compare(rep, at + " w", w2);
        compare(rep, at + " m", m2);
      }
    }
}

// Zero sizes, and the emulator's meaning of empty reductions: K = 0 GEMMs write D = +0 (gemm_f32_nn)
// and RN(0 * s) (gemm_fp8_tn); a cast of no element max-accumulates +0 into the amax and adds
// nothing; a column sum over no rows is +0; the current scale of no element is that of amax 0.
// Operations with nothing to write leave their outputs alone.
void check_degenerate(const Device& ref, const Device& cand, Report& rep) {
  Twin<float> d(ref, cand, std::vector<float>(12, 5.0f));
  ref.gemm_f32_nn(3, 4, 0, nullptr, nullptr, d.r.get());
  cand.gemm_f32_nn(3, 4, 0, nullptr, nullptr, d.c.get());
  compare(rep, "gemm_f32_nn K = 0", d);
  d.set(std::vector<float>(12, 5.0f));
  ref.gemm_f32_nn(0, 4, 3, nullptr, nullptr, d.r.get());
  cand.gemm_f32_nn(0, 4, 3, nullptr, nullptr, d.c.get());
  compare(rep, "gemm_f32_nn M = 0 (D untouched)", d);
  for (const float sa : {1.0f, 0.0f}) {  // s = 1, and s = Inf: 0 * Inf = NaN
    Twin<float> sc(ref, cand, std::vector<float>{sa, 3.0f});
    Twin<float> D(ref, cand, std::vector<float>(6, 5.0f));
    ref.gemm_fp8_tn(2, 3, 0, nullptr, Format::kE4M3, sc.r.get(), nullptr, Format::kE5M2, sc.r.get() + 1, {},
                    D.r.get());
    cand.gemm_fp8_tn(2, 3, 0, nullptr, Format::kE4M3, sc.c.get(), nullptr, Format::kE5M2, sc.c.get() + 1, {},
                     D.c.get());
    compare(rep, "gemm_fp8_tn K = 0 scale_a " + fstr(sa), D);
  }
  // cast of no element (both outputs given: the shape is empty, the outputs are null tensors).
  {
    Twin<float> sc(ref, cand, std::vector<float>{2.0f});
    Twin<float> amax(ref, cand, std::vector<float>{0.25f});
    Twin<std::uint8_t> cnt(ref, cand, 1, int(sizeof(CastCounters)));
    std::uint8_t dummy = 0;
    for (const std::pair<int, int>& rc : {std::pair<int, int>{0, 5}, {5, 0}, {0, 0}}) {
      for (int side = 0; side < 2; ++side) {
        const Device& dev = side ? cand : ref;
        dev.cast_transpose(nullptr, rc.first, rc.second, (side ? sc.c : sc.r).get(), Format::kE4M3, &dummy, nullptr,
                           (side ? amax.c : amax.r).get(),
                           reinterpret_cast<CastCounters*>((side ? cnt.c : cnt.r).get()));
      }
      compare(rep, "cast_transpose of no element amax", amax);
      compare(rep, "cast_transpose of no element counters", cnt);
    }
  }
  {
    Twin<float> out(ref, cand, std::vector<float>(5, 7.0f));
    ref.column_sum(nullptr, 0, 5, out.r.get());
    cand.column_sum(nullptr, 0, 5, out.c.get());
    compare(rep, "column_sum of 0 rows", out);
  }
  for (const Format fmt : {Format::kE4M3, Format::kE5M2})
    for (const float eps : {0.0f, 1e-6f}) {
      Twin<float> s(ref, cand, std::vector<float>{-7.0f});
      ref.current_scale(nullptr, 0, fmt, false, eps, s.r.get());
      cand.current_scale(nullptr, 0, fmt, false, eps, s.c.get());
      compare(rep, std::string("current_scale of no element ") + format_name(fmt), s);
    }
  {
    Twin<float> y(ref, cand, std::vector<float>{1.0f, -2.0f, 3.0f});
    for (int side = 0; side < 2; ++side) {
      const Device& dev = side ? cand : ref;
      float* p = (side ? y.c : y.r).get();
      dev.bias_add(p, p, 0, 3);
      dev.bias_add(p, p, 3, 0);
      dev.activation_forward(ActivationOp::kGELU, p, p, 0);
      dev.activation_backward(ActivationOp::kGELU, p, p, 0);
      dev.adam(p, p, p, p, 0, AdamStep{});
      dev.sgd(p, p, p, 0, 0.9f, 0.1f);
      dev.softmax_xent(p, nullptr, 0, 3, 1.0f, p, p);
      dev.delayed_update(p, p, 0, 4, 448.0f, false);
      dev.transpose_f32(0, 3, p, p);
    }
    compare(rep, "zero-size operations (untouched)", y);
  }
}

// Argument errors throw fp8emu::Error on both devices before anything runs.
void check_errors(const Device& dev) {
  std::uint8_t q = 0;
  float f = 0.0f;
  CHECK_THROWS_AS(dev.cast_transpose(&f, 1, 1, &f, Format::kE4M3, nullptr, nullptr, nullptr, nullptr), Error);
  CHECK_THROWS_AS(dev.cast_transpose(&f, -1, 1, &f, Format::kE4M3, &q, nullptr, nullptr, nullptr), Error);
  CHECK_THROWS_AS(dev.cast_transpose(&f, 1, 1, &f, Format::kBFloat16, &q, nullptr, nullptr, nullptr), Error);
  CHECK_THROWS_AS(dev.current_scale(&f, 1, Format::kBinary16, false, 0.0f, &f), Error);
  CHECK_THROWS_AS(dev.gemm_fp8_tn(1, 1, 1, &q, Format::kE5M2, &f, &q, Format::kE5M2, &f, {}, &f), Error);
  CHECK_THROWS_AS(dev.gemm_fp8_tn(-1, 1, 1, &q, Format::kE4M3, &f, &q, Format::kE4M3, &f, {}, &f), Error);
  CHECK_THROWS_AS(dev.gemm_fp8_tn(1, 1, 1, &q, Format::kE4M3, &f, &q, Format::kE4M3, &f,
                                  {Accumulation::kHopper, -4}, &f),
                  Error);
  CHECK_THROWS_AS(dev.gemm_f32_nn(1, -1, 1, &f, &f, &f), Error);
  CHECK_THROWS_AS(dev.delayed_update(&f, &f, 1, 0, 1.0f, false), Error);
}

// The operations of a transformer step: add, bf16 rounding, both norms (with zero-centered gamma),
// GELU and SwiGLU, causal attention forward and backward, the embedding and its backward.
void check_transformer_ops(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 401;
  for (const int rows : {1, 7, 33, 300})
    for (const int cols : {1, 7, 33, 130}) {
      const std::size_t n = std::size_t(rows) * std::size_t(cols);
      const std::string at = shape(rows, cols);
      for (const backend::InputFamily fam : backend::all_input_families()) {
        const std::vector<float> a = inputs(fam, n, mix(++seed, 1));
        const std::vector<float> b = inputs(backend::InputFamily::kNormal, n, mix(seed, 2));
        Twin<float> ta(ref, cand, a), tb(ref, cand, b), out(ref, cand, std::vector<float>(n, -3.0f));
        ref.add(ta.r.get(), tb.r.get(), out.r.get(), n);
        cand.add(ta.c.get(), tb.c.get(), out.c.get(), n);
        compare(rep, "add " + at + " " + backend::to_string(fam), out);
        ref.round_bf16(ta.r.get(), n);
        cand.round_bf16(ta.c.get(), n);
        compare(rep, "round_bf16 " + at + " " + backend::to_string(fam), ta);
        Twin<float> tt(ref, cand, a);
        ref.round_tf32(tt.r.get(), n);
        cand.round_tf32(tt.c.get(), n);
        compare(rep, "round_tf32 " + at + " " + backend::to_string(fam), tt);
      }
      for (const backend::NormOp op : {backend::NormOp::kLayerNorm, backend::NormOp::kRMSNorm})
        for (const bool zc : {false, true}) {
          const std::string where = std::string(op == backend::NormOp::kLayerNorm ? "layernorm " : "rmsnorm ") + at +
                                    (zc ? " zero-centered" : "");
          std::vector<float> x = inputs(backend::InputFamily::kNormal, n, mix(++seed, 3));
          for (std::size_t i = 0; i < x.size(); i += 7) x[i] = x[i] * 50.0f + 3.0f;  // a shifted, wide row
          const std::vector<float> g = inputs(backend::InputFamily::kNormal, std::size_t(cols), mix(seed, 4));
          const std::vector<float> be = inputs(backend::InputFamily::kNormal, std::size_t(cols), mix(seed, 5));
          const std::vector<float> dyv = inputs(backend::InputFamily::kNormal, n, mix(seed, 6));
          Twin<float> tx(ref, cand, x), tg(ref, cand, g), tbeta(ref, cand, be), tdy(ref, cand, dyv);
          Twin<float> y(ref, cand, rows, cols), xhat(ref, cand, rows, cols), rs(ref, cand, 1, rows),
              dx(ref, cand, rows, cols), gg(ref, cand, 1, cols), gb(ref, cand, 1, cols);
          ref.norm_forward(op, tx.r.get(), rows, cols, tg.r.get(), tbeta.r.get(), 1e-5f, zc, y.r.get(), xhat.r.get(),
                           rs.r.get());
          cand.norm_forward(op, tx.c.get(), rows, cols, tg.c.get(), tbeta.c.get(), 1e-5f, zc, y.c.get(), xhat.c.get(),
                            rs.c.get());
          ref.norm_backward(op, tdy.r.get(), xhat.r.get(), rs.r.get(), rows, cols, tg.r.get(), zc, dx.r.get(),
                            gg.r.get(), gb.r.get());
          cand.norm_backward(op, tdy.c.get(), xhat.c.get(), rs.c.get(), rows, cols, tg.c.get(), zc, dx.c.get(),
                             gg.c.get(), gb.c.get());
          compare(rep, where + " y", y);
          compare(rep, where + " xhat", xhat);
          compare(rep, where + " rsigma", rs);
          compare(rep, where + " dx", dx);
          compare(rep, where + " grad_gamma", gg);
          compare(rep, where + " grad_beta", gb);
        }
      for (const backend::MlpActOp op : {backend::MlpActOp::kGelu, backend::MlpActOp::kSwiGlu}) {
        const int w = op == backend::MlpActOp::kSwiGlu ? 2 * cols : cols;
        const std::string where = std::string(op == backend::MlpActOp::kGelu ? "gelu " : "swiglu ") + at;
        for (const backend::InputFamily fam : backend::all_input_families()) {
          const std::vector<float> h = inputs(fam, std::size_t(rows) * std::size_t(w), mix(++seed, 7));
          const std::vector<float> da = inputs(backend::InputFamily::kNormal, n, mix(seed, 8));
          Twin<float> th(ref, cand, h), tda(ref, cand, da), act(ref, cand, rows, cols), dh(ref, cand, rows, w);
          ref.mlp_act_forward(op, th.r.get(), rows, cols, act.r.get());
          cand.mlp_act_forward(op, th.c.get(), rows, cols, act.c.get());
          ref.mlp_act_backward(op, th.r.get(), tda.r.get(), rows, cols, dh.r.get());
          cand.mlp_act_backward(op, th.c.get(), tda.c.get(), rows, cols, dh.c.get());
          compare(rep, where + " " + backend::to_string(fam) + " act", act);
          compare(rep, where + " " + backend::to_string(fam) + " dh", dh);
        }
      }
    }
  // Attention: B sequences of T tokens, H heads of d.
  const std::array<int, 4> attention_shapes[] = {{1, 1, 1, 1}, {2, 7, 3, 5}, {3, 33, 4, 8}, {2, 64, 2, 32}};
  for (const auto& s : attention_shapes) {
    const int B = s[0], T = s[1], H = s[2], d = s[3], D = H * d, rows = B * T;
    const std::string where = "attention B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) +
                              " d" + std::to_string(d);
    std::vector<float> qkv = inputs(backend::InputFamily::kNormal, std::size_t(rows) * 3 * D, mix(++seed, 9));
    for (std::size_t i = 0; i < qkv.size(); i += 11) qkv[i] *= 8.0f;  // some peaked rows
    const std::vector<float> dout = inputs(backend::InputFamily::kNormal, std::size_t(rows) * D, mix(seed, 10));
    const float scale = 1.0f / std::sqrt(float(d));
    for (const bool causal : {true, false}) {
      const std::string w = where + (causal ? " causal" : " no mask");
      Twin<float> tq(ref, cand, qkv), tdo(ref, cand, dout), out(ref, cand, rows, D), probs(ref, cand, B * H * T, T),
          ds(ref, cand, B * H * T, T), dqkv(ref, cand, rows, 3 * D);
      ref.attention_forward(tq.r.get(), B, T, H, d, scale, causal, out.r.get(), probs.r.get());
      cand.attention_forward(tq.c.get(), B, T, H, d, scale, causal, out.c.get(), probs.c.get());
      ref.attention_backward(tq.r.get(), probs.r.get(), tdo.r.get(), B, T, H, d, scale, causal, ds.r.get(),
                             dqkv.r.get());
      cand.attention_backward(tq.c.get(), probs.c.get(), tdo.c.get(), B, T, H, d, scale, causal, ds.c.get(),
                              dqkv.c.get());
      compare(rep, w + " out", out);
      compare(rep, w + " probs", probs);
      compare(rep, w + " dqkv", dqkv);
    }
  }
  // Embedding: rows of T positions, vocabulary V, width D, P = T + 2 position rows.
  const std::array<int, 4> embed_shapes[] = {{1, 1, 1, 1}, {14, 7, 5, 3}, {300, 30, 97, 33}};
  for (const auto& s : embed_shapes) {
    const int rows = s[0], T = s[1], V = s[2], D = s[3], P = T + 2;
    const std::string where = "embedding " + shape(rows, D) + " V" + std::to_string(V);
    std::vector<std::uint8_t> tokens(static_cast<std::size_t>(rows));
    std::mt19937_64 g(++seed);
    for (auto& t : tokens) t = std::uint8_t(g() % std::uint64_t(V));
    Twin<std::uint8_t> tt(ref, cand, tokens);
    Twin<float> tok(ref, cand, inputs(backend::InputFamily::kNormal, std::size_t(V) * D, mix(seed, 11)));
    Twin<float> pos(ref, cand, inputs(backend::InputFamily::kNormal, std::size_t(P) * D, mix(seed, 12)));
    Twin<float> dx(ref, cand, inputs(backend::InputFamily::kNormal, std::size_t(rows) * D, mix(seed, 13)));
    Twin<float> x(ref, cand, rows, D), gt(ref, cand, std::vector<float>(std::size_t(V) * D, -3.0f)),
        gp(ref, cand, std::vector<float>(std::size_t(P) * D, -3.0f));
    ref.embed_forward(tt.r.get(), rows, T, tok.r.get(), pos.r.get(), D, x.r.get());
    cand.embed_forward(tt.c.get(), rows, T, tok.c.get(), pos.c.get(), D, x.c.get());
    ref.embed_backward(tt.r.get(), rows, T, dx.r.get(), D, V, P, gt.r.get(), gp.r.get());
    cand.embed_backward(tt.c.get(), rows, T, dx.c.get(), D, V, P, gt.c.get(), gp.c.get());
    compare(rep, where + " x", x);
    compare(rep, where + " grad_tok", gt);
    compare(rep, where + " grad_pos", gp);
  }
}

// The block-scaled casts (MXFP8 with both E8M0 rules, 1 x 128 with pow2 and fp32 scales, 128 x 128
// tiles) into both views and into one, with their counts, and the block-scaled GEMM of the views.
void check_block_ops(const Device& ref, const Device& cand, Report& rep) {
  std::uint64_t seed = 901;
  std::vector<backend::BlockCast> casts;
  for (const E8M0Rule r : {E8M0Rule::kTransformerEngine, E8M0Rule::kOcp})
    casts.push_back(backend::BlockCast::mxfp8(Format::kE4M3, r));
  for (const bool pow2 : {true, false})
    for (const bool tiles : {false, true})
      casts.push_back(backend::BlockCast::fp32_blocks(Format::kE4M3, 128, tiles, pow2, pow2 ? 0.0f : 1e-3f));
  // 132 x 260: rows and cols multiples of 4 (the one-pass tile kernel's vectorised path) with ragged tiles.
  const int shapes[][2] = {{1, 1}, {7, 33}, {33, 7}, {130, 300}, {132, 260}};
  for (const backend::BlockCast& base : casts)
    for (const Format fmt : {Format::kE4M3, Format::kE5M2})
      for (const auto& sh : shapes)
        for (const backend::InputFamily fam : backend::all_input_families())
          for (const int views : {3, 1, 2}) {  // both, row-wise only, column-wise only
            if (views != 3 && fam != backend::InputFamily::kNormal) continue;
            backend::BlockCast c = base;
            c.fmt = fmt;
            const int rows = sh[0], cols = sh[1], blk = c.block;
            const int rb = (cols + blk - 1) / blk, cb = (rows + blk - 1) / blk;
            const std::string where = std::string(c.scale == backend::BlockScaleFormat::kE8M0 ? "mxfp8 "
                                                  : !c.tiles                                ? "block 1x128 "
                                                                                            : "block 128x128 ") +
                                      format_name(fmt) + " " + shape(rows, cols) + " " + backend::to_string(fam) +
                                      " views " + std::to_string(views);
            Twin<float> x(ref, cand, inputs(fam, std::size_t(rows) * cols, mix(++seed, 21)));
            Twin<std::uint8_t> rc(ref, cand, rows, cols), cc(ref, cand, cols, rows);
            Twin<float> rs(ref, cand, rows, rb), cs(ref, cand, cols, cb);
            Twin<CastCounters> k(ref, cand, 1, 1);
            auto view = [&](bool on, const DeviceTensor<std::uint8_t>& codes, const DeviceTensor<float>& s) {
              return on ? backend::BlockView{codes.get(), s.get()} : backend::BlockView{};
            };
            ref.block_cast(c, x.r.get(), rows, cols, view(views & 1, rc.r, rs.r), view(views & 2, cc.r, cs.r), k.r.get());
            cand.block_cast(c, x.c.get(), rows, cols, view(views & 1, rc.c, rs.c), view(views & 2, cc.c, cs.c),
                            k.c.get());
            if (views & 1) {
              compare(rep, where + " row-wise codes", rc);
              compare(rep, where + " row-wise scale_inv", rs);
            }
            if (views & 2) {
              compare(rep, where + " column-wise codes", cc);
              compare(rep, where + " column-wise scale_inv", cs);
            }
            const std::vector<CastCounters> kr = k.ref(), kc = k.cand();
            ++rep.values;
            if (std::memcmp(kr.data(), kc.data(), sizeof(CastCounters)) != 0) rep.miss(where + " counts", 0, "differ");
            if (views != 3 || fam != backend::InputFamily::kNormal) continue;
            // The GEMM of the two views as wgrad reads them: D [rows, rows] = x . x^T over K = cols,
            // and as fprop: D [cols, cols] over K = rows (each view with itself).
            Twin<float> d1(ref, cand, rows, rows), d2(ref, cand, cols, cols);
            // fp32 partials (the default) for the first, the hopper tensor-core chain per block for
            // the second.
            const emu::GemmAccumulation fp32{}, hopper{emu::Accumulation::kHopper, 0, 1};
            ref.gemm_fp8_block_tn(rows, rows, cols, blk, rc.r.get(), fmt, rs.r.get(), rc.r.get(), fmt, rs.r.get(), nullptr, nullptr,
                                  fp32, d1.r.get());
            cand.gemm_fp8_block_tn(rows, rows, cols, blk, rc.c.get(), fmt, rs.c.get(), rc.c.get(), fmt, rs.c.get(), nullptr, nullptr,
                                   fp32, d1.c.get());
            ref.gemm_fp8_block_tn(cols, cols, rows, blk, cc.r.get(), fmt, cs.r.get(), cc.r.get(), fmt, cs.r.get(), nullptr, nullptr,
                                  hopper, d2.r.get());
            cand.gemm_fp8_block_tn(cols, cols, rows, blk, cc.c.get(), fmt, cs.c.get(), cc.c.get(), fmt, cs.c.get(), nullptr, nullptr,
                                   hopper, d2.c.get());
            compare(rep, where + " gemm row-wise", d1);
            compare(rep, where + " gemm column-wise", d2);
          }
}

using CheckFn = void (*)(const Device&, const Device&, Report&);

void expect_equal(const char* what, CheckFn fn, const Device& ref, const Device& cand) {
  Report rep;
  fn(ref, cand, rep);
  INFO(what << ": " << rep.values << " values, " << rep.mismatches << " mismatches, " << rep.nan_payloads
            << " NaN payload differences; first: " << rep.first);
  CHECK(rep.values > 0);
  CHECK(rep.mismatches == 0);
}

void gpu_check(const char* what, CheckFn fn) {
  if (!testing::have_gpu()) return;
  expect_equal(what, fn, backend::cpu_device(), backend::cuda_device());
}

// ---- a cpu_device() with one operation changed, for the self-check ------------------------------

using Forward = testing::ForwardDevice;

// MXFP8 casts that ignore the E8M0 rule (always TE's).
class TeRuleOnly final : public Forward {
 public:
  void block_cast(const backend::BlockCast& c, const float* x, int r, int cl, backend::BlockView rv,
                  backend::BlockView cv, CastCounters* k) const override {
    backend::BlockCast t = c;
    t.rule = E8M0Rule::kTransformerEngine;
    b.block_cast(t, x, r, cl, rv, cv, k);
  }
};

// Attention's dK summed over the query rows in decreasing order (a kernel that split the rows).
class ReversedAttention final : public Forward {
 public:
  void attention_backward(const float* q, const float* p, const float* go, int B, int T, int H, int d, float s,
                          bool causal, float* ds, float* dq) const override {
    b.attention_backward(q, p, go, B, T, H, d, s, causal, ds, dq);
    const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D, TT = std::size_t(T) * std::size_t(T);
    for (int bb = 0; bb < B; ++bb)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < T; ++j)
          for (int c = 0; c < d; ++c) {
            float acc = 0.0f;
            for (int i = T; i-- > j;)
              acc += ds[std::size_t(bb * H + h) * TT + std::size_t(i) * std::size_t(T) + std::size_t(j)] *
                     q[(std::size_t(bb) * std::size_t(T) + std::size_t(i)) * ld + std::size_t(h) * std::size_t(d) +
                       std::size_t(c)];
            dq[(std::size_t(bb) * std::size_t(T) + std::size_t(j)) * ld + D + std::size_t(h) * std::size_t(d) +
               std::size_t(c)] = acc;
          }
  }
};


// The fp32 GEMM summed in decreasing k (a GPU kernel that split or reversed k would look like this).
class ReversedGemm final : public Forward {
 public:
  void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        float c = 0.0f;
        for (int k = K; k-- > 0;) c += A[std::size_t(i) * K + k] * B[std::size_t(k) * N + j];
        D[std::size_t(i) * N + j] = c;
      }
  }
};
// The tensor-core GEMM summed as the fp32-sequential bf16 GEMM.
class SequentialTcGemm final : public Forward {
 public:
  void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation, float* D) const override {
    backend::cpu_device().gemm_f32_nn(M, N, K, A, B, D);
  }
};
// The bf16 GEMM summed in decreasing k.
class ReversedBf16Gemm final : public Forward {
 public:
  void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    ReversedGemm{}.gemm_f32_nn(M, N, K, A, B, D);
  }
};
// The GEMM's scale product from the reciprocal of the product of the scales (one rounding fewer).
class FusedScaleGemm final : public Forward {
 public:
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* sa, const std::uint8_t* B,
                   Format fb, const float* sb, const emu::GemmAccumulation& acc, float* D) const override {
    emu::check_gemm_tn(M, N, K, fa, fb, acc);
    if (M == 0 || N == 0) return;
    emu::gemm_fp8_tn(M, N, K, A, fa, 1.0f / (*sa * *sb), B, fb, 1.0f, acc, D);
  }
};
// Adam with the bias-corrected denominator fused into one FMA.
class FmaAdam final : public Forward {
 public:
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) const override {
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = std::fma(s.b1, m[i], (1.0f - s.b1) * g[i]);
      v[i] = s.b2 * v[i] + (1.0f - s.b2) * g[i] * g[i];
      w[i] -= s.step * m[i] / (std::sqrt(v[i]) / s.sqrt_bc2 + s.eps);
    }
  }
};
// Column sums in pairs (a tree reduction would look like this).
class PairwiseColumnSum final : public Forward {
 public:
  void column_sum(const float* x, int rows, int cols, float* out) const override {
    for (int j = 0; j < cols; ++j) {
      float a = 0.0f, c = 0.0f;
      for (int i = 0; i < rows; ++i) (i % 2 ? c : a) += x[std::size_t(i) * cols + j];
      out[j] = a + c;
    }
  }
};
// The amax recorded as the last cast's amax instead of max-accumulated.
class OverwrittenAmax final : public Forward {
 public:
  void cast_transpose(const float* x, int r, int c, const float* s, Format f, std::uint8_t* qr, std::uint8_t* qc,
                      float* amax, CastCounters* k) const override {
    if (amax) *amax = 0.0f;
    b.cast_transpose(x, r, c, s, f, qr, qc, amax, k);
  }
};
// The softmax's sum of exponentials in reverse order.
class ReversedSoftmax final : public Forward {
 public:
  void softmax_xent(const float* z, const std::uint8_t* l, int rows, int c, float dv, float* loss,
                    float* d) const override {
    b.softmax_xent(z, l, rows, c, dv, loss, d);
    for (int i = 0; i < rows; ++i) {
      const float* r = z + std::size_t(i) * c;
      float mx = r[0];
      for (int j = 1; j < c; ++j) mx = std::fmax(mx, r[j]);
      float sum = 0.0f;
      for (int j = c; j-- > 0;) sum += core::exp_rn(r[j] - mx);
      loss[i] = core::log_rn(sum) - (r[l[i]] - mx);
    }
  }
};

}  // namespace

TEST_CASE("gpu: device memory (allocate zero-filled, upload, download, copy, fill_zero)", "[gpu][device]") {
  gpu_check("memory", check_memory);
}
TEST_CASE("gpu: device gemm_f32_nn bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("gemm_f32_nn", check_gemm_f32);
}
TEST_CASE("gpu: device gemm_bf16_nn bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("gemm_bf16_nn", check_gemm_bf16);
}
TEST_CASE("gpu: device gemm_tc_nn (bf16 and tf32 tensor-core rows) bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("gemm_tc_nn", check_gemm_tc);
}
TEST_CASE("gpu: library GEMMs (set_library_gemms) agree with the exact ones to fp32 accuracy", "[gpu][device]") {
  if (!testing::have_gpu()) return;
  const Device& gpu = backend::cuda_device();
  struct Restore {
    bool was = backend::library_gemms();
    ~Restore() { backend::set_library_gemms(was); }
  } restore;
  for (const bool bf16 : {false, true})
    for (const auto& [M, N, K] : {std::array<int, 3>{64, 48, 300}, std::array<int, 3>{300, 33, 7},
                                  std::array<int, 3>{1, 7, 33}, std::array<int, 3>{256, 1024, 512}}) {
      INFO((bf16 ? "bf16 " : "fp32 ") << M << " x " << N << " x " << K);
      std::vector<float> a = inputs(backend::InputFamily::kNormal, std::size_t(M) * std::size_t(K), mix(M, K));
      std::vector<float> b = inputs(backend::InputFamily::kNormal, std::size_t(K) * std::size_t(N), mix(K, N));
      if (bf16) {
        backend::cpu_device().round_bf16(a.data(), a.size());
        backend::cpu_device().round_bf16(b.data(), b.size());
      }
      DeviceTensor<float> da(gpu, 1, int(a.size())), db(gpu, 1, int(b.size())), exact(gpu, M, N), lib(gpu, M, N);
      da.upload(a.data());
      db.upload(b.data());
      backend::set_library_gemms(false);
      (bf16 ? gpu.gemm_bf16_nn(M, N, K, da.get(), db.get(), exact.get())
            : gpu.gemm_f32_nn(M, N, K, da.get(), db.get(), exact.get()));
      backend::set_library_gemms(true);
      const unsigned long long fallbacks = backend::library_gemm_fallbacks();
      (bf16 ? gpu.gemm_bf16_nn(M, N, K, da.get(), db.get(), lib.get())
            : gpu.gemm_f32_nn(M, N, K, da.get(), db.get(), lib.get()));
      backend::set_library_gemms(false);
      // cuBLASLt computed it, not the exact kernel, where the operands are 16-byte aligned throughout
      // (it may refuse the odd shapes; then the exact kernel's values must still agree below).
      if (M % 16 == 0 && N % 16 == 0 && K % 16 == 0) CHECK(backend::library_gemm_fallbacks() == fallbacks);
      std::vector<float> e(exact.size()), l(lib.size());
      exact.download(e.data());
      lib.download(l.data());
      // Any summation order is within K ulps of the magnitude sum of the exact products.
      std::size_t far = 0;
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double mag = 0.0;
          for (int k = 0; k < K; ++k)
            mag += std::fabs(double(a[std::size_t(i) * K + k]) * double(b[std::size_t(k) * N + j]));
          const double d = std::fabs(double(e[std::size_t(i) * N + j]) - double(l[std::size_t(i) * N + j]));
          far += d > double(K + 1) * 0x1p-23 * mag + 1e-30;
        }
      CHECK(far == 0);
    }
}
TEST_CASE("gpu: device transpose_f32 bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("transpose_f32", check_transpose_f32);
}
TEST_CASE("gpu: device cast_transpose bit-identical to cpu_device (codes, amax, counters)", "[gpu][device]") {
  gpu_check("cast_transpose", check_cast_transpose);
}
TEST_CASE("gpu: device current_scale bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("current_scale", check_current_scale);
}
TEST_CASE("gpu: device delayed_update bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("delayed_update", check_delayed_update);
}
TEST_CASE("gpu: device delayed-scaling pipeline bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("delayed pipeline", check_delayed_pipeline);
}
TEST_CASE("gpu: device gemm_fp8_tn bit-identical to cpu_device, every model", "[gpu][device]") {
  gpu_check("gemm_fp8_tn", check_gemm_fp8);
}
TEST_CASE("gpu: device casts of every recipe (Quantizer::quantize_device) equal the host quantizers", "[gpu][device]") {
  if (!fp8emu::testing::have_gpu()) return;
  fp8emu::testing::check_device_quantizers(backend::cuda_device());
}
TEST_CASE("gpu: GEMMs of device operands (scaling::gemm_tn on the GPU) equal the host gemm_tn", "[gpu][device]") {
  if (!fp8emu::testing::have_gpu()) return;
  fp8emu::testing::check_device_operand_gemms(backend::cuda_device());
}
TEST_CASE("gpu: device bias_add and column_sum bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("bias_add, column_sum", check_bias_and_columns);
}
TEST_CASE("gpu: device activations bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("activations", check_activations);
}
TEST_CASE("gpu: device softmax_xent bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("softmax_xent", check_softmax_xent);
}
TEST_CASE("gpu: device adam and sgd bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("adam, sgd", check_optimizers);
}
TEST_CASE("gpu: device transformer operations bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("norms, MLP activations, attention, embedding, add, bf16", check_transformer_ops);
}
TEST_CASE("gpu: device block casts and block-scaled GEMM bit-identical to cpu_device", "[gpu][device]") {
  gpu_check("block casts, block GEMM", check_block_ops);
}
TEST_CASE("gpu: device degenerate sizes as cpu_device", "[gpu][device]") {
  gpu_check("degenerate sizes", check_degenerate);
}
TEST_CASE("gpu: device argument errors", "[gpu][device]") {
  check_errors(backend::cpu_device());
  if (!testing::have_gpu()) return;
  check_errors(backend::cuda_device());
  CHECK(std::string(backend::cuda_device().name()) == "cuda");
}

// Needs no GPU: the comparisons find nothing between cpu_device() and itself, and catch an
// operation computed in another order or with another rounding.
TEST_CASE("device comparison: cpu_device against itself and against changed operations", "[device-check]") {
  const Device& cpu = backend::cpu_device();
  const std::pair<const char*, CheckFn> all[] = {
      {"memory", check_memory},
      {"gemm_f32_nn", check_gemm_f32},
      {"gemm_bf16_nn", check_gemm_bf16},
      {"gemm_tc_nn", check_gemm_tc},
      {"transpose_f32", check_transpose_f32},
      {"cast_transpose", check_cast_transpose},
      {"current_scale", check_current_scale},
      {"delayed_update", check_delayed_update},
      {"delayed pipeline", check_delayed_pipeline},
      {"gemm_fp8_tn", check_gemm_fp8},
      {"bias_add, column_sum", check_bias_and_columns},
      {"activations", check_activations},
      {"softmax_xent", check_softmax_xent},
      {"adam, sgd", check_optimizers},
      {"degenerate sizes", check_degenerate},
      {"transformer operations", check_transformer_ops},
      {"block casts and GEMM", check_block_ops}};
  for (const auto& [what, fn] : all) expect_equal(what, fn, cpu, cpu);

  auto caught = [&](const char* what, CheckFn fn, const Device& mutant) {
    Report rep;
    fn(cpu, mutant, rep);
    INFO(what << ": " << rep.mismatches << " of " << rep.values << "; first: " << rep.first);
    CHECK(rep.mismatches > 0);
  };
  caught("gemm_f32_nn summed in decreasing k", check_gemm_f32, ReversedGemm{});
  caught("gemm_bf16_nn summed in decreasing k", check_gemm_bf16, ReversedBf16Gemm{});
  caught("gemm_tc_nn summed as fp32-sequential", check_gemm_tc, SequentialTcGemm{});
  caught("gemm_fp8_tn with RN(1 / (sa * sb))", check_gemm_fp8, FusedScaleGemm{});
  caught("adam with an FMA", check_optimizers, FmaAdam{});
  caught("column_sum in two partial sums", check_bias_and_columns, PairwiseColumnSum{});
  caught("cast_transpose overwriting the amax", check_cast_transpose, OverwrittenAmax{});
  caught("softmax_xent summing in reverse", check_softmax_xent, ReversedSoftmax{});
  caught("attention's dK summed over decreasing query rows", check_transformer_ops, ReversedAttention{});
  caught("MXFP8 casts ignoring the E8M0 rule", check_block_ops, TeRuleOnly{});
}
