// `fp8emu gemm` and `fp8emu compare` (see gemm_tools.hpp).
#include "gemm_tools.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {
namespace {

Format parse_format(const std::string& s, const char* flag) {
  if (s == "e4m3") return Format::kE4M3;
  if (s == "e5m2") return Format::kE5M2;
  FP8EMU_FAIL("unknown ", flag, " '", s, "' (accepted: e4m3, e5m2)");
}

// FP8 codes of a 2-D operand: uint8 arrays are codes as given; float32 arrays are quantized with
// current scaling (scale = fp8_max / amax), which sets scale_inv.
std::vector<std::uint8_t> operand(const io::NpyArray& a, const std::string& path, Format f, float& scale_inv,
                                  std::ostream& out) {
  FP8EMU_CHECK(a.shape.size() == 2, path, ": expected a 2-D array, got ", a.shape.size(), " dimensions");
  if (a.dtype == "|u1" || a.dtype == "<u1") return a.data;
  FP8EMU_CHECK(a.dtype == "<f4", path, ": dtype ", a.dtype, " is neither uint8 (FP8 codes) nor float32");
  if (scale_inv != 1.0f) out << "note: " << path << " is float32, so its --scale-inv is replaced by the current-scaling one\n";
  std::vector<float> x(a.count());
  std::memcpy(x.data(), a.data.data(), a.data.size());
  const float amax = emu::compute_amax(x.data(), x.size());
  const float scale = core::compute_scale_from_amax(amax, max_finite_f32(f), false, 0.0f, FLT_MAX);
  std::vector<std::uint8_t> q(x.size());
  emu::quantize(x.data(), x.size(), scale, f, q.data(), nullptr);
  scale_inv = 1.0f / scale;
  out << path << ": float32 quantized with current scaling, amax " << amax << ", scale_inv " << scale_inv << "\n";
  return q;
}

std::int64_t ordered(float v) {  // monotone integer image of a float, for ULP distances
  std::int32_t i;
  std::memcpy(&i, &v, 4);
  return i < 0 ? std::int64_t(std::int32_t(0x80000000u)) - i : i;
}

}  // namespace

int run_gemm(const GemmOptions& o, std::ostream& out, std::ostream& err) {
  try {
    const Format fa = parse_format(o.format_a, "--format-a"), fb = parse_format(o.format_b, "--format-b");
    FP8EMU_CHECK(o.layout == "tn" || o.layout == "nn", "unknown --layout '", o.layout, "' (accepted: tn, nn)");
    const emu::GemmAccumulation acc{emu::parse_accumulation(o.accumulation), o.promotion};
    const io::NpyArray A = io::read_npy(o.a), B = io::read_npy(o.b);
    float sa = o.scale_inv_a, sb = o.scale_inv_b;
    std::vector<std::uint8_t> qa = operand(A, o.a, fa, sa, out), qb = operand(B, o.b, fb, sb, out);
    const std::size_t M = A.shape[0], K = A.shape[1];
    std::size_t N = 0;
    if (o.layout == "tn") {
      FP8EMU_CHECK(B.shape[1] == K, "shape mismatch: A is [", M, ", ", K, "], B is [", B.shape[0], ", ",
                   B.shape[1], "]; the tn layout needs B as [N, ", K, "]");
      N = B.shape[0];
    } else {
      FP8EMU_CHECK(B.shape[0] == K, "shape mismatch: A is [", M, ", ", K, "], B is [", B.shape[0], ", ",
                   B.shape[1], "]; the nn layout needs B as [", K, ", N]");
      N = B.shape[1];
      std::vector<std::uint8_t> t(qb.size());
      emu::transpose(int(K), int(N), qb.data(), t.data());
      qb.swap(t);
    }
    emu::GemmEpilogue ep;
    ep.alpha = o.alpha;
    ep.beta = o.beta;
    ep.d_scale = o.d_scale;
    float amax_d = 0.0f;
    ep.amax_d = &amax_d;
    std::vector<float> cbuf, biasbuf;
    auto load_f32 = [](const std::string& path, const std::vector<std::size_t>& shape, const char* what,
                       std::vector<float>& dst) {
      const io::NpyArray x = io::read_npy(path);
      FP8EMU_CHECK(x.dtype == "<f4" && x.shape == shape, path, ": ", what, " must be float32 of shape ",
                   shape.size() == 1 ? "[" + std::to_string(shape[0]) + "]"
                                     : "[" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]");
      dst.resize(x.count());
      std::memcpy(dst.data(), x.data.data(), x.data.size());
    };
    if (!o.c.empty()) {
      load_f32(o.c, {M, N}, "C", cbuf);
      ep.C = cbuf.data();
      if (o.beta == 0.0f) out << "note: --c is not read with --beta 0 (as cuBLAS)\n";
    }
    if (!o.bias.empty()) {
      load_f32(o.bias, {N}, "bias", biasbuf);
      ep.bias = biasbuf.data();
    }
    io::NpyArray D;
    D.shape = {M, N};
    if (o.output == "fp32") ep.output = emu::GemmOutput::kFp32, D.dtype = "<f4";
    else if (o.output == "bf16") ep.output = emu::GemmOutput::kBf16, D.dtype = "<u2";
    else if (o.output == "fp16") ep.output = emu::GemmOutput::kFp16, D.dtype = "<f2";
    else if (o.output == "e4m3") ep.output = emu::GemmOutput::kE4M3, D.dtype = "|u1";
    else if (o.output == "e5m2") ep.output = emu::GemmOutput::kE5M2, D.dtype = "|u1";
    else FP8EMU_FAIL("unknown --output '", o.output, "' (accepted: fp32, bf16, fp16, e4m3, e5m2)");
    D.data.resize(M * N * D.itemsize());
    emu::gemm_fp8_tn(int(M), int(N), int(K), qa.data(), fa, sa, qb.data(), fb, sb, acc, ep, D.data.data());
    io::write_npy(o.out, D);
    out << "D = A" << (o.layout == "tn" ? " B^T" : " B") << ": [" << M << ", " << N << "], K = " << K << ", "
        << emu::to_string(acc.model)
        << (acc.promotion_interval ? " promoted every " + std::to_string(acc.promotion_interval) : std::string(" fast"))
        << ", " << o.output << " written to " << o.out << "; amax of D " << amax_d << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu gemm: error: " << e.what() << "\n";
    return 2;
  }
}

int run_compare(const std::string& x, const std::string& y, std::ostream& out, std::ostream& err) {
  try {
    const io::NpyArray X = io::read_npy(x), Y = io::read_npy(y);
    FP8EMU_CHECK(X.dtype == "<f4" && Y.dtype == "<f4", "compare: both arrays must be float32, got ", X.dtype,
                 " and ", Y.dtype);
    auto shape_str = [](const std::vector<std::size_t>& s) {
      std::string r = "[";
      for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + "]";
    };
    FP8EMU_CHECK(X.shape == Y.shape, "compare: shapes differ: ", shape_str(X.shape), " vs ", shape_str(Y.shape));
    const std::size_t n = X.count();
    std::vector<float> a(n), b(n);
    std::memcpy(a.data(), X.data.data(), n * 4);
    std::memcpy(b.data(), Y.data.data(), n * 4);
    std::size_t mismatches = 0, nan_mismatch = 0;
    std::int64_t max_ulp = 0;
    double max_abs = 0, max_rel = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::memcmp(&a[i], &b[i], 4) == 0) continue;
      ++mismatches;
      if (std::isnan(a[i]) != std::isnan(b[i])) {
        ++nan_mismatch;
        continue;
      }
      if (std::isnan(a[i])) continue;  // two different NaN payloads
      const std::int64_t ulp = ordered(a[i]) - ordered(b[i]);
      max_ulp = std::max(max_ulp, ulp < 0 ? -ulp : ulp);
      const double diff = std::fabs(double(a[i]) - double(b[i]));
      max_abs = std::max(max_abs, diff);
      if (b[i] != 0.0f) max_rel = std::max(max_rel, diff / std::fabs(double(b[i])));
    }
    out << "elements: " << n << "\nbitwise mismatches: " << mismatches << "\nNaN in one only: " << nan_mismatch
        << "\nmax ulp: " << max_ulp << "\nmax abs error: " << max_abs << "\nmax rel error (vs second): " << max_rel
        << "\n";
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    err << "fp8emu compare: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace fp8emu::cli
