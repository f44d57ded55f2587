// `fp8emu validate` (see cmd_validate.hpp).
#include "cmd_validate.hpp"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/nv.hpp"
#include "fp8emu_internal/device_check.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/cublaslt.hpp"
#include "fp8emu/cuda/mma_gemm.hpp"
#include "fp8emu_internal/device_probe.hpp"
#endif

namespace fp8emu::cli {
namespace {

std::string num(double v, const char* fmt = "%.3g") {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

#if defined(FP8EMU_HAVE_CUDA)

std::string hex32(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", unsigned(u));
  return b;
}
std::string hex8(unsigned u) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02X", u & 0xFFu);
  return b;
}

using emu::ulp_distance;

// A GPU result against a reference: bit mismatches (NaN = NaN), and over the pairs where both are
// finite, ULP and relative-error statistics.
struct Agreement {
  std::uint64_t values = 0, mismatches = 0, nonfinite = 0;
  std::uint64_t max_ulp = 0;
  double sum_ulp = 0.0, max_rel = 0.0, diff2 = 0.0, ref2 = 0.0;
  std::uint64_t finite = 0;
  void add(const float* gpu, const float* ref, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      ++values;
      if (!backend::same_f32(gpu[i], ref[i])) ++mismatches;
      if (!std::isfinite(gpu[i]) || !std::isfinite(ref[i])) {
        ++nonfinite;
        continue;
      }
      ++finite;
      const std::uint64_t u = ulp_distance(gpu[i], ref[i]);
      max_ulp = std::max(max_ulp, u);
      sum_ulp += double(u);
      const double d = double(gpu[i]) - double(ref[i]);
      if (ref[i] != 0.0f) max_rel = std::max(max_rel, std::fabs(d) / std::fabs(double(ref[i])));
      diff2 += d * d;
      ref2 += double(ref[i]) * double(ref[i]);
    }
  }
  std::string row() const {
    return std::to_string(values) + " | " + std::to_string(mismatches) + " | " + std::to_string(max_ulp) + " | " +
           num(finite ? sum_ulp / double(finite) : 0.0) + " | " + num(max_rel) + " | " +
           num(ref2 > 0.0 ? std::sqrt(diff2 / ref2) : 0.0) + " | " + std::to_string(nonfinite);
  }
};
const char* kAgreementHeader =
    "| values | bit mismatches | max ULP | mean ULP | max rel. error | normwise rel. error | non-finite |";
const char* kAgreementRule = "|---:|---:|---:|---:|---:|---:|---:|";

std::vector<float> emu_gemm(int M, int N, int K, const std::vector<std::uint8_t>& A, Format fa, float sa,
                            const std::vector<std::uint8_t>& B, Format fb, float sb, emu::GemmAccumulation acc) {
  std::vector<float> D(std::size_t(M) * std::size_t(N));
  emu::gemm_fp8_tn(M, N, K, A.data(), fa, sa, B.data(), fb, sb, acc, D.data());
  return D;
}

int round_up16(int v) { return (v + 15) / 16 * 16; }

// The outcome of a section whose results are expected to be bit-exact: compared values, bit
// mismatches, and calls that failed (each a failure of the section).
struct Expected {
  std::uint64_t values = 0, mismatches = 0, failed_calls = 0;
  void add(const Agreement& a) {
    values += a.values;
    mismatches += a.mismatches;
  }
  bool pass() const { return mismatches == 0 && failed_calls == 0; }
  std::string summary() const {
    return std::to_string(mismatches) + " mismatches in " + std::to_string(values) + " values" +
           (failed_calls ? ", " + std::to_string(failed_calls) + " failed calls" : "");
  }
};

// The compute capability (major * 10 + minor) of the GPU the kernels run on: the first with FP8 MMA,
// as cuda::detail::use_fp8_device picks it.
int fp8_device_cc() {
  for (const backend::GpuInfo& g : backend::cuda_status().gpus)
    if (g.fp8_mma()) return g.cc_major * 10 + g.cc_minor;
  return 0;
}

// Section 2: fp8emu's mma.sync kernel against the models. Expected bit-exact: the mma.sync row of
// the accumulation table for this GPU's architecture (ada on sm_89, hopper-mma-sync on sm_90).
Expected validate_mma(const ValidateOptions& opt, std::ostream& out, std::ostream& err) {
  const int cc = fp8_device_cc();
  const AccumulationModel* expected = nullptr;
  std::vector<const AccumulationModel*> models;  // every mma.sync row, wgmma for comparison, exact
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.datapath != Datapath::kTensorCore || m.input != core::MmaOperands::kFp8) continue;
    models.push_back(&m);
    if (std::string(m.instruction) == "mma.sync" && m.compute_capability == cc) expected = &m;
  }
  models.push_back(&model_of(Accumulation::kExact));
  out << "\n## 2. fp8emu's mma.sync m16n8k32 E4M3 GEMM vs the emulator's models (fast accumulation)\n\n"
      << "One mma.sync per 32 K-elements, each result the C of the next. Expected: 0 bit mismatches against the "
         "mma.sync model of this GPU's architecture (`ada` on sm_89, `hopper-mma-sync` on sm_90, where ptxas runs "
         "FP8 mma.sync on the fp16 tensor core); "
      << (expected ? std::string("here `") + expected->name + "`, marked *expected*."
                   : "none for sm_" + std::to_string(cc) + ": no row is expected here.")
      << " The other rows are for comparison.\n\n";
  out << "| inputs | model " << kAgreementHeader << "\n|---|---" << kAgreementRule << "\n";
  const backend::CodeFamily fams[] = {backend::CodeFamily::kNormal, backend::CodeFamily::kWide,
                                      backend::CodeFamily::kSpecial};
  Expected result;
  for (const backend::CodeFamily cf : fams) {
    std::vector<Agreement> agree(models.size());
    for (const int s : opt.sizes) {
      err << "validate: mma.sync, size " << s << ", " << backend::to_string(cf) << "\n";
      const int M = s, N = s + 3, K = 2 * s + 1;
      float sa = 1.0f, sb = 1.0f;
      const auto A = backend::make_codes(cf, Format::kE4M3, std::size_t(M) * K, opt.seed * 31 + std::uint64_t(s), &sa);
      const auto B = backend::make_codes(cf, Format::kE4M3, std::size_t(N) * K, opt.seed * 37 + std::uint64_t(s), &sb);
      std::vector<float> D(std::size_t(M) * std::size_t(N));
      cuda::mma_gemm_e4m3_tn_host(M, N, K, A.data(), sa, B.data(), sb, D.data());
      for (std::size_t i = 0; i < models.size(); ++i) {
        const auto r = emu_gemm(M, N, K, A, Format::kE4M3, sa, B, Format::kE4M3, sb, {models[i]->id, 0, 1});
        agree[i].add(D.data(), r.data(), D.size());
      }
    }
    for (std::size_t i = 0; i < models.size(); ++i) {
      const bool is_expected = models[i] == expected;
      out << "| " << backend::to_string(cf) << " | " << models[i]->name << (is_expected ? " *expected*" : "")
          << " | " << agree[i].row() << " |\n";
      if (is_expected) result.add(agree[i]);
    }
  }
  if (!expected) result = Expected{};
  return result;
}

// Section 3: cuBLASLt's FP8 GEMM against the models. Expected bit-exact: `hopper` (FAST_ACCUM = 1:
// no promotion, 0: every 128) with the split-K count of the algorithm cuBLASLt ran, on sm_90.
Expected validate_cublaslt(const ValidateOptions& opt, std::ostream& out, std::ostream& err) {
  const bool hopper = fp8_device_cc() == model_of(Accumulation::kHopper).compute_capability;
  Expected result;
  std::string failures;
  auto failed = [&](const std::string& what, const std::exception& e) {
    ++result.failed_calls;
    failures += "- " + what + ": " + e.what() + "\n";
  };
  auto promotion_of = [](bool fast) { return fast ? 0 : 128; };
  out << "\n## 3. cuBLASLt FP8 GEMM vs the emulator\n\n"
      << "Expected on sm_90: 0 bit mismatches against `hopper` (FAST_ACCUM = 1: no promotion; FAST_ACCUM = 0: "
         "promotion every 128) with split_k = the CUBLASLT_ALGO_CONFIG_SPLITK_NUM of the algorithm cuBLASLt ran "
         "(measured on an H200: docs/gpu.md)"
      << (hopper ? "." : "; this GPU is not sm_90, so the rows are findings, not expectations.")
      << " fp32 D, no bias. Shapes: M = s, N and K rounded up to multiples of 16 from s + 3 and 2s + 1.\n\n";
  out << "| formats | inputs | FAST_ACCUM | split-K run | reference " << kAgreementHeader << "\n|---|---|---|---|---"
      << kAgreementRule << "\n";
  const std::pair<Format, Format> pairs[] = {{Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}};
  for (const auto& pr : pairs) {
    for (const backend::CodeFamily cf : {backend::CodeFamily::kNormal, backend::CodeFamily::kWide}) {
      for (const bool fast : {true, false}) {
        Agreement model, exact;
        std::string splits;
        for (const int s : opt.sizes) {
          err << "validate: cuBLASLt, size " << s << ", " << backend::to_string(cf) << (fast ? ", fast" : "") << "\n";
          const int M = s, N = round_up16(s + 3), K = round_up16(2 * s + 1);
          float sa = 1.0f, sb = 1.0f;
          const auto A = backend::make_codes(cf, pr.first, std::size_t(M) * K, opt.seed * 41 + std::uint64_t(s), &sa);
          const auto B = backend::make_codes(cf, pr.second, std::size_t(N) * K, opt.seed * 43 + std::uint64_t(s), &sb);
          std::vector<float> D(std::size_t(M) * std::size_t(N));
          cuda::LtAlgo algo;
          try {
            cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), pr.first, sa, B.data(), pr.second, sb, fast, nullptr,
                                      cuda::LtOutput::kFp32, D.data(), 1.0f, nullptr, 0, &algo);
          } catch (const std::exception& e) {
            failed("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                       (fast ? " fast" : ""), e);
            continue;
          }
          const std::string sk = std::to_string(algo.split_k);
          if ((", " + splits + ",").find(", " + sk + ",") == std::string::npos) splits += (splits.empty() ? "" : ", ") + sk;
          model.add(D.data(),
                    emu_gemm(M, N, K, A, pr.first, sa, B, pr.second, sb,
                             {Accumulation::kHopper, promotion_of(fast), algo.split_k})
                        .data(),
                    D.size());
          exact.add(D.data(), emu_gemm(M, N, K, A, pr.first, sa, B, pr.second, sb, {Accumulation::kExact, 0, 1}).data(),
                    D.size());
        }
        const std::string head = std::string("| ") + format_label(pr.first) + " x " + format_label(pr.second) +
                                 " | " + backend::to_string(cf) + " | " + (fast ? "1" : "0") + " | " + splits + " | ";
        out << head << "hopper" << (fast ? "" : " promote 128") << " with that split-K" << (hopper ? " *expected*" : "")
            << " | " << model.row() << " |\n";
        out << head << "exact | " << exact.row() << " |\n";
        result.add(model);
      }
    }
  }

  // Long K with small M x N, where cuBLASLt's heuristic splits K: its own choice, and forced counts.
  out << "\nLong K (E4M3 x E4M3, normal inputs, fp32 D): the heuristic's algorithm as chosen (split-K asked: "
         "heuristic) and with CUBLASLT_ALGO_CONFIG_SPLITK_NUM forced (reduction scheme 2, compute-type workspace); "
         "mismatches against the model with the split-K count that ran, and against the un-split model:\n\n"
      << "| M x N x K | FAST_ACCUM | split-K asked | split-K run | reduction scheme | tile | stages | values | "
         "mismatches vs hopper with that split-K | vs un-split hopper |\n"
      << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  struct Shape {
    int M, N, K;
  };
  for (const Shape sh : {Shape{16, 16, 65536}, Shape{128, 128, 16384}}) {
    float sa = 1.0f, sb = 1.0f;
    const auto A = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.M) * sh.K,
                                       opt.seed * 47 + std::uint64_t(sh.K), &sa);
    const auto B = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.N) * sh.K,
                                       opt.seed * 53 + std::uint64_t(sh.K), &sb);
    const std::string shape = std::to_string(sh.M) + " x " + std::to_string(sh.N) + " x " + std::to_string(sh.K);
    for (const bool fast : {true, false}) {
      const auto unsplit =
          emu_gemm(sh.M, sh.N, sh.K, A, Format::kE4M3, sa, B, Format::kE4M3, sb, {Accumulation::kHopper, promotion_of(fast), 1});
      for (const int ask : {0, 2, 3, 25}) {
        err << "validate: cuBLASLt long K, " << shape << (fast ? ", fast" : "") << ", split-K " << ask << "\n";
        std::vector<float> D(std::size_t(sh.M) * std::size_t(sh.N));
        cuda::LtAlgo algo;
        try {
          cuda::lt_gemm_fp8_tn_host(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast,
                                    nullptr, cuda::LtOutput::kFp32, D.data(), 1.0f, nullptr, ask, &algo);
        } catch (const std::exception& e) {
          failed(shape + (fast ? " fast" : "") + " split-K " + std::to_string(ask), e);
          continue;
        }
        Agreement model, plain;
        model.add(D.data(),
                  emu_gemm(sh.M, sh.N, sh.K, A, Format::kE4M3, sa, B, Format::kE4M3, sb,
                           {Accumulation::kHopper, promotion_of(fast), algo.split_k})
                      .data(),
                  D.size());
        plain.add(D.data(), unsplit.data(), D.size());
        result.add(model);
        out << "| " << shape << " | " << (fast ? 1 : 0) << " | " << (ask ? std::to_string(ask) : "heuristic") << " | "
            << algo.split_k << " | " << algo.reduction << " | " << algo.tile << " | " << algo.stages << " | "
            << model.values << " | " << model.mismatches << (hopper ? " *expected 0*" : "") << " | " << plain.mismatches
            << " |\n";
      }
    }
  }

  // E4M3 output with D_SCALE and AMAX_D, against the emulator's epilogue (emu::GemmEpilogue, as
  // `fp8emu gemm --output e4m3 --d-scale`): the codes and the amax, bit for bit.
  out << "\nE4M3 output with D_SCALE and AMAX_D (normal inputs; C passed as null with beta = 0), against the "
         "emulator's epilogue with the same model and split-K (`fp8emu gemm --output e4m3 --d-scale`): D = "
         "Q_satfinite(RN(t * d_scale)), AMAX_D = max |t|, t the scaled fp32 result:\n\n"
      << "| M x N x K | FAST_ACCUM | split-K run | d_scale | AMAX_D | emulator amax | codes | code mismatches |\n"
      << "|---|---|---:|---|---|---|---:|---:|\n";
  for (const Shape sh : {Shape{64, 64, 256}, Shape{128, 128, 16384}}) {
    float sa = 1.0f, sb = 1.0f;
    const auto A = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.M) * sh.K, 7, &sa);
    const auto B = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(sh.N) * sh.K, 8, &sb);
    const std::string shape = std::to_string(sh.M) + " x " + std::to_string(sh.N) + " x " + std::to_string(sh.K);
    for (const bool fast : {true, false}) {
      err << "validate: cuBLASLt E4M3 output, " << shape << (fast ? ", fast" : "") << "\n";
      std::vector<std::uint8_t> q(std::size_t(sh.M) * std::size_t(sh.N)), want(q.size());
      cuda::LtAlgo algo;
      float amax = -1.0f, emu_amax = 0.0f, d_scale = 1.0f;
      try {
        // d_scale maps the largest |t| of the un-split model near the E4M3 maximum (some codes saturate
        // when split-K rounds differently: the epilogue's satfinite is part of the comparison).
        const auto t = emu_gemm(sh.M, sh.N, sh.K, A, Format::kE4M3, sa, B, Format::kE4M3, sb,
                                {Accumulation::kHopper, promotion_of(fast), 1});
        float mx = 0.0f;
        for (const float v : t) mx = std::max(mx, std::fabs(v));
        d_scale = max_finite_f32(Format::kE4M3) / mx;
        cuda::lt_gemm_fp8_tn_host(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast,
                                  nullptr, cuda::LtOutput::kE4M3, q.data(), d_scale, &amax, 0, &algo);
      } catch (const std::exception& e) {
        failed(shape + " E4M3 output" + (fast ? " fast" : ""), e);
        out << "| " << shape << " | " << (fast ? 1 : 0) << " | failed | | | | | |\n";
        continue;
      }
      emu::GemmEpilogue ep;
      ep.output = emu::GemmOutput::kFp8;
      ep.output_format = Format::kE4M3;
      ep.d_scale = d_scale;
      ep.amax_d = &emu_amax;
      emu::gemm_fp8_tn(sh.M, sh.N, sh.K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb,
                       {Accumulation::kHopper, promotion_of(fast), algo.split_k}, ep, want.data());
      std::uint64_t bad = 0;
      for (std::size_t i = 0; i < q.size(); ++i) bad += q[i] != want[i];
      const bool amax_same = core::f32_to_bits(amax) == core::f32_to_bits(emu_amax);
      result.values += q.size() + 1;
      result.mismatches += bad + (amax_same ? 0 : 1);
      out << "| " << shape << " | " << (fast ? 1 : 0) << " | " << algo.split_k << " | " << num(double(d_scale), "%.9g")
          << " | " << hex32(core::f32_to_bits(amax)) << (amax_same ? "" : " (differs)") << " | "
          << hex32(core::f32_to_bits(emu_amax)) << " | " << q.size() << " | " << bad << " |\n";
    }
  }
  if (!failures.empty()) out << "\nFailed cuBLASLt calls (each a failure of this section):\n" << failures;

  // Bias epilogue: D(bias) against RN(D(no bias) + bf16(bias)) (a finding: GPU against GPU).
  try {
    const int M = 64, N = 64, K = 128;
    float sa = 1.0f, sb = 1.0f;
    const auto A = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(M) * K, 5, &sa);
    const auto B = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(N) * K, 6, &sb);
    std::vector<float> bias(static_cast<std::size_t>(N));
    for (int j = 0; j < N; ++j) bias[std::size_t(j)] = 0.37f * float(j) - 3.1f;
    std::vector<float> D0(std::size_t(M) * N), D1(D0.size());
    cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, false, nullptr,
                              cuda::LtOutput::kFp32, D0.data());
    cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, false, bias.data(),
                              cuda::LtOutput::kFp32, D1.data());
    std::uint64_t worst = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const float b16 = core::bits_to_f32(std::uint32_t(core::f32_bits_to_bf16_rne(core::f32_to_bits(bias[std::size_t(j)]))) << 16);
        worst = std::max(worst, ulp_distance(D1[std::size_t(i) * N + j], D0[std::size_t(i) * N + j] + b16));
      }
    out << "\nBias epilogue (bf16 bias, fp32 D, 64 x 64 x 128): max ULP of D(bias) vs RN(D + bf16(bias)) = " << worst
        << "\n";
  } catch (const std::exception& e) {
    out << "\nBias epilogue: failed: " << e.what() << "\n";
  }
  if (!hopper) result = Expected{};
  return result;
}

// Section 4: device experiments on conversions and fmaxf.
void validate_device_sweep(std::ostream& out, std::ostream& err) {
  out << "\n## 4. Device conversions and fmaxf\n\n"
      << "`__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)` in a kernel (on sm_89+ cuda_fp8.h uses "
         "`cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` for it), the same PTX inline with (a, b) = (x, -x) "
         "(a's code in bits 15:8), and fp8emu's host mirror `nv::cvt_float_to_fp8` (CUDA's host code).\n\n";
  const std::uint32_t inputs[] = {0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu, 0x7F800001u, 0xFFFFFFFFu, 0x7F800000u,
                                  0xFF800000u, 0x00000000u, 0x80000000u, 0x43E00000u /*E4M3 max*/, 0x43E80000u /*its threshold*/,
                                  0xC3E80000u, 0x43E80001u, 0x43E88000u, 0x43F00000u /*first code above*/,
                                  0x47600000u /*E5M2 max*/, 0x476FFFFFu, 0x47700000u /*its threshold*/, 0xC7700000u,
                                  0x47800000u /*65536*/, 0x3A800000u /*2^-10*/, 0x3A800001u, 0x37000000u /*2^-17*/,
                                  0x7F7FFFFFu /*FLT_MAX*/, 0x00000001u};
  std::vector<float> x, negx;
  for (const std::uint32_t u : inputs) {
    x.push_back(core::bits_to_f32(u));
    negx.push_back(core::bits_to_f32(u ^ 0x80000000u));
  }
  out << "| input | value | E4M3 device | E4M3 PTX x2 (x, -x) | E4M3 host | E5M2 device | E5M2 PTX x2 (x, -x) | E5M2 host |\n"
      << "|---|---|---|---|---|---|---|---|\n";
  const auto d4 = cuda::device_cvt_float_to_fp8(x, Saturation::kSatFinite, Format::kE4M3);
  const auto d5 = cuda::device_cvt_float_to_fp8(x, Saturation::kSatFinite, Format::kE5M2);
  const auto p4 = cuda::device_cvt_x2_ptx(x, negx, Format::kE4M3);
  const auto p5 = cuda::device_cvt_x2_ptx(x, negx, Format::kE5M2);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const unsigned h4 = nv::cvt_float_to_fp8(x[i], nv::Saturation::kSatFinite, nv::Fp8Interpretation::kE4M3);
    const unsigned h5 = nv::cvt_float_to_fp8(x[i], nv::Saturation::kSatFinite, nv::Fp8Interpretation::kE5M2);
    char p4s[8], p5s[8];
    std::snprintf(p4s, sizeof p4s, "0x%04X", unsigned(p4[i]));
    std::snprintf(p5s, sizeof p5s, "0x%04X", unsigned(p5[i]));
    out << "| " << hex32(inputs[i]) << " | " << num(double(x[i]), "%.9g") << " | " << hex8(d4[i])
        << (d4[i] != h4 ? " (differs)" : "") << " | " << p4s << " | " << hex8(h4) << " | " << hex8(d5[i])
        << (d5[i] != h5 ? " (differs)" : "") << " | " << p5s << " | " << hex8(h5) << " |\n";
  }
  out << "\nAll 2^32 fp32 inputs, device `__nv_cvt_float_to_fp8` vs fp8emu's mirror compiled for the device:\n\n"
      << "| mode | format | mismatches | examples (input: device / mirror) |\n|---|---|---:|---|\n";
  for (const Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat})
    for (const Format f : {Format::kE4M3, Format::kE5M2}) {
      err << "validate: 2^32 sweep " << (sat == Saturation::kSatFinite ? "satfinite" : "nosat") << "\n";
      const cuda::CvtSweep s = cuda::sweep_cvt_float_to_fp8(sat, f);
      std::string ex;
      for (std::size_t i = 0; i < s.examples.size() && i < 6; ++i)
        ex += (ex.empty() ? "" : ", ") + hex32(s.examples[i]) + ": " + hex8(s.device[i]) + " / " + hex8(s.mirror[i]);
      out << "| " << (sat == Saturation::kSatFinite ? "SATFINITE" : "NOSAT") << " | "
          << format_label(f) << " | " << s.mismatches << " | " << ex << " |\n";
    }
  out << "\nDevice fmaxf(a, b) (the amax rule: TE's amax is fmaxf(fabsf(x), amax)):\n\n| a | b | fmaxf |\n|---|---|---|\n";
  const std::uint32_t fa[] = {0x3F800000u, 0x7FC00000u, 0x3F800000u, 0x7F800001u, 0x7F800000u, 0x80000000u, 0x00000000u};
  const std::uint32_t fb[] = {0x7FC00000u, 0x3F800000u, 0x7F800001u, 0x3F800000u, 0xFF800001u, 0x00000000u, 0x80000000u};
  std::vector<float> a, b;
  for (std::size_t i = 0; i < sizeof fa / sizeof fa[0]; ++i) {
    a.push_back(core::bits_to_f32(fa[i]));
    b.push_back(core::bits_to_f32(fb[i]));
  }
  const std::vector<float> m = cuda::device_fmaxf(a, b);
  for (std::size_t i = 0; i < m.size(); ++i)
    out << "| " << hex32(fa[i]) << " | " << hex32(fb[i]) << " | " << hex32(core::f32_to_bits(m[i])) << " |\n";
}

#endif  // FP8EMU_HAVE_CUDA

}  // namespace

int run_validate(const ValidateOptions& opt, std::ostream& out, std::ostream& err) {
  for (const int s : opt.sizes)
    if (s < 1 || s > 4096) {
      err << "fp8emu validate: error: --sizes must be in [1, 4096], got " << s << "\n";
      return 2;
    }
  if (opt.sizes.empty()) {
    err << "fp8emu validate: error: --sizes is empty\n";
    return 2;
  }
  const char* self = std::getenv("FP8EMU_VALIDATE_AGAINST_EMULATED");
  const bool self_test = self && std::strcmp(self, "1") == 0;
  const backend::CudaStatus& st = backend::cuda_status();
  if (!st.usable() && !self_test) {
    err << "fp8emu validate: the cuda backend cannot run: " << st.why_not() << "\n";
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const backend::Device& reference = backend::cpu_device();
  const backend::Device& candidate = self_test ? backend::cpu_device() : backend::cuda_device();
  out << "# fp8emu validate\n\n";
  if (self_test) {
    out << "FP8EMU_VALIDATE_AGAINST_EMULATED=1: the emulator stands in for the GPU (a check of this command "
           "itself; sections 2-4 need a GPU and are skipped).\n";
  } else {
    for (const backend::GpuInfo& g : st.gpus)
      out << "GPU " << g.index << ": " << g.name << ", sm_" << g.cc_major << g.cc_minor << "\n";
    out << "CUDA runtime " << st.runtime_version << ", driver " << st.driver_version << ", cuBLASLt "
        << st.cublaslt_version << "\n";
  }
  out << "sizes:";
  for (const int s : opt.sizes) out << " " << s;
  out << "; seed " << opt.seed << "\n";

  out << "\n## 1. The GPU's FP8 operations vs the emulator's, bit for bit (" << candidate.name() << " device vs "
      << reference.name() << " device)\n\nTwo NaNs count as equal (an fp32 NaN's sign and payload are the FPU's choice: x86 returns the "
         "first NaN operand or 0xFFC00000, NVIDIA GPUs 0x7FFFFFFF); such pairs are counted in the last column.\n\n";
  backend::DeviceCheckOptions ko;
  ko.sizes = opt.sizes;
  ko.seed = opt.seed;
  ko.progress = [&](const std::string& s) { err << "validate: " << s << "\n"; };
  std::vector<backend::DeviceCheckRow> rows;
  try {
    rows = backend::check_devices(reference, candidate, ko);
  } catch (const std::exception& e) {
    err << "fp8emu validate: error: " << e.what() << "\n";
    return 1;
  }
  out << backend::format_rows(rows);
  const std::uint64_t mismatches = backend::total_mismatches(rows);
  std::uint64_t values = 0;
  for (const auto& r : rows) values += r.values;

  bool pass = mismatches == 0;
  std::string verdict = "GPU FP8 operations " + std::to_string(mismatches) + " mismatches in " + std::to_string(values) +
                        " values";
#if defined(FP8EMU_HAVE_CUDA)
  if (!self_test) {
    // Sections 2 and 3 hold expected bit-exact rows (the model of this GPU's architecture); an error
    // in a section is reported and fails it. Section 4 holds findings.
    auto section = [&](const char* name, auto&& run) {
      try {
        const Expected e = run();
        if (e.values == 0 && e.failed_calls == 0) return;  // nothing expected on this GPU
        verdict += std::string("; ") + name + " " + e.summary();
        pass = pass && e.pass();
      } catch (const std::exception& ex) {
        out << "\n" << name << " section failed: " << ex.what() << "\n";
        verdict += std::string("; ") + name + " failed";
        pass = false;
      }
    };
    section("mma.sync", [&] { return validate_mma(opt, out, err); });
    section("cuBLASLt", [&] { return validate_cublaslt(opt, out, err); });
    try {
      validate_device_sweep(out, err);
    } catch (const std::exception& e) {
      out << "\nDevice sweep failed: " << e.what() << "\n";
    }
  }
#endif
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "\nvalidate: bit-exact sections: " << verdict << " (" << num(secs, "%.1f") << " s): "
      << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? 0 : 1;
}

Command add_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* validate = app.add_subcommand("validate", "GPU kernels vs the emulator, bit for bit (needs an sm_89+ GPU)");
  validate->add_option("--sizes", o->sizes, "Matrix sizes s (s x s+2 casts; GEMM M=s, N=s+3, K=2s+1)")
      ->delimiter(',')->capture_default_str();
  validate->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  return {validate, [o] { return run_validate(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{80, add_validate};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
