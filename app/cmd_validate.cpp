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
#include "fp8emu/backend/kernels.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/nv.hpp"
#include "fp8emu_internal/kernel_check.hpp"

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

// Distance in units in the last place between two finite floats (ordered integer distance).
std::uint64_t ulp_distance(float a, float b) {
  auto ord = [](float x) {
    const std::uint32_t u = core::f32_to_bits(x);
    return (u & 0x80000000u) ? -std::int64_t(u & 0x7FFFFFFFu) : std::int64_t(u);
  };
  const std::int64_t d = ord(a) - ord(b);
  return std::uint64_t(d < 0 ? -d : d);
}

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

// Section 2: fp8emu's mma.sync kernel against the models.
void validate_mma(const ValidateOptions& opt, std::ostream& out, std::ostream& err) {
  out << "\n## 2. fp8emu's mma.sync m16n8k32 E4M3 GEMM vs the emulator's models (fast accumulation)\n\n"
      << "Expected on Ada: 0 bit mismatches against `ada`. On Hopper, mma.sync FP8 numerics are not publicly "
         "documented; the `hopper` column is the wgmma model, for comparison.\n\n";
  out << "| inputs | model " << kAgreementHeader << "\n|---|---" << kAgreementRule << "\n";
  const backend::CodeFamily fams[] = {backend::CodeFamily::kNormal, backend::CodeFamily::kWide,
                                      backend::CodeFamily::kSpecial};
  for (const backend::CodeFamily cf : fams) {
    Agreement ada, hopper, exact;
    for (const int s : opt.sizes) {
      err << "validate: mma.sync, size " << s << ", " << backend::to_string(cf) << "\n";
      const int M = s, N = s + 3, K = 2 * s + 1;
      float sa = 1.0f, sb = 1.0f;
      const auto A = backend::make_codes(cf, Format::kE4M3, std::size_t(M) * K, opt.seed * 31 + std::uint64_t(s), &sa);
      const auto B = backend::make_codes(cf, Format::kE4M3, std::size_t(N) * K, opt.seed * 37 + std::uint64_t(s), &sb);
      std::vector<float> D(std::size_t(M) * std::size_t(N));
      cuda::mma_gemm_e4m3_tn_host(M, N, K, A.data(), sa, B.data(), sb, D.data());
      const auto ra = emu_gemm(M, N, K, A, Format::kE4M3, sa, B, Format::kE4M3, sb, {emu::Accumulation::kAda, 0});
      const auto rh = emu_gemm(M, N, K, A, Format::kE4M3, sa, B, Format::kE4M3, sb, {emu::Accumulation::kHopper, 0});
      const auto rx = emu_gemm(M, N, K, A, Format::kE4M3, sa, B, Format::kE4M3, sb, {emu::Accumulation::kExact, 0});
      ada.add(D.data(), ra.data(), D.size());
      hopper.add(D.data(), rh.data(), D.size());
      exact.add(D.data(), rx.data(), D.size());
    }
    out << "| " << backend::to_string(cf) << " | ada | " << ada.row() << " |\n";
    out << "| " << backend::to_string(cf) << " | hopper | " << hopper.row() << " |\n";
    out << "| " << backend::to_string(cf) << " | exact | " << exact.row() << " |\n";
  }
}

// Section 3: cuBLASLt's FP8 GEMM against the models.
void validate_cublaslt(const ValidateOptions& opt, std::ostream& out, std::ostream& err) {
  out << "\n## 3. cuBLASLt FP8 GEMM (no bias, fp32 D) vs the emulator\n\n"
      << "Not bit-exact by design (cuBLASLt does not document its accumulation). Shapes: M = s, N and K rounded up "
         "to multiples of 16 from s + 3 and 2s + 1.\n\n";
  out << "| formats | inputs | FAST_ACCUM | reference " << kAgreementHeader << "\n|---|---|---|---"
      << kAgreementRule << "\n";
  const std::pair<Format, Format> pairs[] = {{Format::kE4M3, Format::kE4M3}, {Format::kE4M3, Format::kE5M2}};
  std::string failures;
  for (const auto& pr : pairs) {
    for (const backend::CodeFamily cf : {backend::CodeFamily::kNormal, backend::CodeFamily::kWide}) {
      for (const bool fast : {true, false}) {
        Agreement hop_fast, hop_128, exact;
        for (const int s : opt.sizes) {
          err << "validate: cuBLASLt, size " << s << ", " << backend::to_string(cf) << (fast ? ", fast" : "") << "\n";
          const int M = s, N = round_up16(s + 3), K = round_up16(2 * s + 1);
          float sa = 1.0f, sb = 1.0f;
          const auto A = backend::make_codes(cf, pr.first, std::size_t(M) * K, opt.seed * 41 + std::uint64_t(s), &sa);
          const auto B = backend::make_codes(cf, pr.second, std::size_t(N) * K, opt.seed * 43 + std::uint64_t(s), &sb);
          std::vector<float> D(std::size_t(M) * std::size_t(N));
          try {
            cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), pr.first, sa, B.data(), pr.second, sb, fast, nullptr,
                                      cuda::LtOutput::kFp32, D.data());
          } catch (const std::exception& e) {
            failures += "- M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                        (fast ? " fast" : "") + ": " + e.what() + "\n";
            continue;
          }
          hop_fast.add(D.data(), emu_gemm(M, N, K, A, pr.first, sa, B, pr.second, sb, {emu::Accumulation::kHopper, 0}).data(), D.size());
          hop_128.add(D.data(), emu_gemm(M, N, K, A, pr.first, sa, B, pr.second, sb, {emu::Accumulation::kHopper, 128}).data(), D.size());
          exact.add(D.data(), emu_gemm(M, N, K, A, pr.first, sa, B, pr.second, sb, {emu::Accumulation::kExact, 0}).data(), D.size());
        }
        const std::string head = std::string("| ") + (pr.second == Format::kE4M3 ? "e4m3 x e4m3" : "e4m3 x e5m2") +
                                 " | " + backend::to_string(cf) + " | " + (fast ? "1" : "0") + " | ";
        out << head << "hopper | " << hop_fast.row() << " |\n";
        out << head << "hopper promote 128 | " << hop_128.row() << " |\n";
        out << head << "exact | " << exact.row() << " |\n";
      }
    }
  }
  if (!failures.empty()) out << "\nFailed cuBLASLt calls (left out of the table):\n" << failures;

  // E4M3 output with a D scale and AMAX_D (cuBLASLt computes the amax only for FP8 outputs),
  // against the same GEMM with an fp32 D: amax vs max |D|, and the codes vs Q(RN(D * d_scale)).
  out << "\nE4M3 output with D_SCALE and AMAX_D (64 x 64 x 256, normal inputs), against the fp32-output run:\n\n"
      << "| FAST_ACCUM | AMAX_D | max abs D (fp32 run) | codes equal | codes one step apart | further apart |\n"
      << "|---|---|---|---:|---:|---:|\n";
  for (const bool fast : {true, false}) {
    try {
      const int M = 64, N = 64, K = 256;
      float sa = 1.0f, sb = 1.0f;
      const auto A = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(M) * K, 7, &sa);
      const auto B = backend::make_codes(backend::CodeFamily::kNormal, Format::kE4M3, std::size_t(N) * K, 8, &sb);
      std::vector<float> D32(std::size_t(M) * N);
      cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast, nullptr,
                                cuda::LtOutput::kFp32, D32.data());
      float mx = 0.0f;
      for (const float v : D32) mx = std::max(mx, std::fabs(v));
      const float d_scale = max_finite_f32(Format::kE4M3) / mx;
      std::vector<std::uint8_t> q(D32.size()), want(D32.size());
      float amax = -1.0f;
      cuda::lt_gemm_fp8_tn_host(M, N, K, A.data(), Format::kE4M3, sa, B.data(), Format::kE4M3, sb, fast, nullptr,
                                cuda::LtOutput::kE4M3, q.data(), d_scale, &amax);
      emu::quantize(D32.data(), D32.size(), d_scale, Format::kE4M3, want.data(), nullptr);
      std::uint64_t same = 0, one = 0, more = 0;
      for (std::size_t i = 0; i < q.size(); ++i) {
        const int ma = q[i] & 0x7F, mb = want[i] & 0x7F;
        const int steps = ((q[i] ^ want[i]) & 0x80) ? ma + mb : std::abs(ma - mb);
        (steps == 0 ? same : steps == 1 ? one : more) += 1;
      }
      out << "| " << (fast ? 1 : 0) << " | " << num(double(amax), "%.9g") << " | " << num(double(mx), "%.9g") << " | "
          << same << " | " << one << " | " << more << " |\n";
    } catch (const std::exception& e) {
      out << "| " << (fast ? 1 : 0) << " | failed: " << e.what() << " | | | | |\n";
    }
  }

  // Bias epilogue: D(bias) against RN(D(no bias) + bf16(bias)).
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
    out << "Bias epilogue (bf16 bias, fp32 D, 64 x 64 x 128): max ULP of D(bias) vs RN(D + bf16(bias)) = " << worst
        << "\n";
  } catch (const std::exception& e) {
    out << "Bias epilogue: failed: " << e.what() << "\n";
  }
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
          << (f == Format::kE4M3 ? "E4M3" : "E5M2") << " | " << s.mismatches << " | " << ex << " |\n";
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
  const backend::Kernels& reference = backend::emulated_kernels();
  const backend::Kernels& candidate = self_test ? backend::emulated_kernels() : backend::cuda_kernels();
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

  out << "\n## 1. GPU twins vs the emulator, bit for bit (" << candidate.name() << " vs " << reference.name()
      << ")\n\nTwo NaNs count as equal (an fp32 NaN's sign and payload are the FPU's choice: x86 returns the "
         "first NaN operand or 0xFFC00000, NVIDIA GPUs 0x7FFFFFFF); such pairs are counted in the last column.\n\n";
  backend::KernelCheckOptions ko;
  ko.sizes = opt.sizes;
  ko.seed = opt.seed;
  ko.progress = [&](const std::string& s) { err << "validate: " << s << "\n"; };
  std::vector<backend::KernelCheckRow> rows;
  try {
    rows = backend::check_kernels(reference, candidate, ko);
  } catch (const std::exception& e) {
    err << "fp8emu validate: error: " << e.what() << "\n";
    return 1;
  }
  out << backend::format_rows(rows);
  const std::uint64_t mismatches = backend::total_mismatches(rows);
  std::uint64_t values = 0;
  for (const auto& r : rows) values += r.values;

#if defined(FP8EMU_HAVE_CUDA)
  if (!self_test) {
    // Findings: an error here is reported and does not change the verdict on the twins.
    try {
      validate_mma(opt, out, err);
    } catch (const std::exception& e) {
      out << "\nmma.sync section failed: " << e.what() << "\n";
    }
    try {
      validate_cublaslt(opt, out, err);
    } catch (const std::exception& e) {
      out << "\ncuBLASLt section failed: " << e.what() << "\n";
    }
    try {
      validate_device_sweep(out, err);
    } catch (const std::exception& e) {
      out << "\nDevice sweep failed: " << e.what() << "\n";
    }
  }
#endif
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "\nvalidate: bit-exact kernels: " << mismatches << " mismatches in " << values << " values ("
      << num(secs, "%.1f") << " s): " << (mismatches == 0 ? "PASS" : "FAIL") << "\n";
  return mismatches == 0 ? 0 : 1;
}

Command add_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* validate = app.add_subcommand("validate", "GPU kernels vs the emulator, bit for bit (needs an sm_89+ GPU)");
  validate->add_option("--sizes", o->sizes, "Matrix sizes s (s x s+2 casts; GEMM M=s, N=s+3, K=2s+1)")
      ->delimiter(',')->capture_default_str();
  validate->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  return {validate, [o] { return run_validate(*o, std::cout, std::cerr); }};
}

}  // namespace fp8emu::cli
