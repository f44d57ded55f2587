// `fp8emu gemm` (see cmd_gemm.hpp).
#include "cmd_gemm.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include "fp8emu_internal/resources.hpp"

namespace fp8emu::cli {
namespace {

Format parse_format(const std::string& s, const char* flag) {
  Format f = Format::kE4M3;
  FP8EMU_CHECK(parse_fp8_format(s, &f), "unknown ", flag, " '", s, "' (accepted: ", fp8_format_names(), ")");
  return f;
}

// Bounds of the shapes read from .npy headers: int dimensions for the kernels, and at most 2^30
// output elements (4 GiB of fp32).
constexpr std::size_t kMaxGemmDim = 0x7FFFFFFF;
constexpr std::size_t kMaxGemmOutput = std::size_t(1) << 30;

// FP8 codes of a 2-D operand: uint8 arrays are codes as given; float32 arrays are quantized with
// current scaling (scale = fp8_max / amax), which sets scale_inv.
std::vector<std::uint8_t> operand(const io::NpyArray& a, const std::string& path, Format f, float& scale_inv,
                                  std::ostream& out) {
  FP8EMU_CHECK(a.shape.size() == 2, path, ": expected a 2-D array, got ", a.shape.size(), " dimensions");
  if (a.dtype == "|u1" || a.dtype == "<u1") return a.data;
  FP8EMU_CHECK(a.dtype == "<f4", path, ": dtype ", a.dtype, " is neither uint8 (FP8 codes) nor float32");
  if (scale_inv != 1.0f) out << "note: " << path << " is float32, so its --scale-inv is replaced by the current-scaling one\n";
  std::vector<float> x(a.count());
  if (!x.empty()) std::memcpy(x.data(), a.data.data(), a.data.size());  // (empty: data() may be null)
  const float amax = emu::compute_amax(x.data(), x.size());
  const float scale = core::compute_scale_from_amax(amax, max_finite_f32(f), false, 0.0f, FLT_MAX);
  std::vector<std::uint8_t> q(x.size());
  emu::quantize(x.data(), x.size(), scale, f, q.data(), nullptr);
  scale_inv = 1.0f / scale;
  out << path << ": float32 quantized with current scaling, amax " << amax << ", scale_inv " << scale_inv << "\n";
  return q;
}

// Operand values of an fp16, bf16 or tf32 tensor-core row from a 2-D .npy: float16 ("<f2"),
// bfloat16 (ml_dtypes' files and "<u2" bits) or float32 ("<f4"), as fp32 values.
std::vector<float> values_operand(const io::NpyArray& a, const std::string& path) {
  FP8EMU_CHECK(a.shape.size() == 2, path, ": expected a 2-D array, got ", a.shape.size(), " dimensions");
  std::vector<float> x(a.count());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (a.dtype == "<f4") {
      std::memcpy(&x[i], a.data.data() + 4 * i, 4);
      continue;
    }
    FP8EMU_CHECK(a.dtype == "<f2" || a.dtype == "<u2", path, ": dtype ", a.dtype,
                 " is not float16, bfloat16 (uint16 bits) or float32, the operands of fp16, bf16 and tf32 tensor cores");
    std::uint16_t h;
    std::memcpy(&h, a.data.data() + 2 * i, 2);
    x[i] = core::bits_to_f32(a.dtype == "<f2" ? core::half_to_f32_bits(h) : std::uint32_t(h) << 16);
  }
  return x;
}

// `gemm` on a tensor-core row of fp16, bf16 or tf32 inputs: D = A B^T (or A B) + C as chained MMA
// instructions compute it (emu::mma_tn_values), fp32 output; the FP8 flags are refused.
int run_values_gemm(const GemmOptions& o, const AccumulationModel& row, const io::NpyArray& A, std::ostream& out) {
  const GemmOptions defaults;
  FP8EMU_CHECK(o.scale_inv_a == defaults.scale_inv_a && o.scale_inv_b == defaults.scale_inv_b &&
                   o.format_a == defaults.format_a && o.format_b == defaults.format_b &&
                   o.promotion == 0 && o.split_k == 1 && o.output == "fp32" && o.d_scale == 1.0f &&
                   o.alpha == 1.0f && o.beta == 0.0f && o.bias.empty(),
               "--accumulation ", row.name, " takes ",
               core::operand_format_name(row.input),
               " values and computes D = A B^T + C (C: --c, always added, as an MMA's accumulator) in fp32: "
               "--format-a/-b, --scale-inv-a/-b, --promotion, --split-k, --output, --d-scale, --alpha, --beta and "
               "--bias apply to FP8 operands only");
  const emu::GemmLayout layout = emu::parse_gemm_layout(o.layout, "--layout");
  const io::NpyArray B = io::read_npy(o.b);
  const std::vector<float> a = values_operand(A, o.a);
  std::vector<float> b = values_operand(B, o.b);
  const std::size_t M = A.shape[0], K = A.shape[1];
  std::size_t N = 0;
  if (layout == emu::GemmLayout::kTn) {
    FP8EMU_CHECK(B.shape[1] == K, "shape mismatch: A is [", M, ", ", K, "], B is [", B.shape[0], ", ", B.shape[1],
                 "]; the tn layout needs B as [N, ", K, "]");
    N = B.shape[0];
  } else {
    FP8EMU_CHECK(B.shape[0] == K, "shape mismatch: A is [", M, ", ", K, "], B is [", B.shape[0], ", ", B.shape[1],
                 "]; the nn layout needs B as [", K, ", N]");
    N = B.shape[1];
  }
  FP8EMU_CHECK(M <= kMaxGemmDim && N <= kMaxGemmDim && K <= kMaxGemmDim, "GEMM shape [", M, ", ", N, "], K = ", K,
               " from ", o.a, " and ", o.b, ": every dimension must be at most ", kMaxGemmDim);
  FP8EMU_CHECK(M * N <= kMaxGemmOutput, "GEMM output [", M, ", ", N, "] from ", o.a, " and ", o.b,
               " has more than ", kMaxGemmOutput, " elements");
  if (layout == emu::GemmLayout::kNn) {
    std::vector<float> t(b.size());
    for (std::size_t k = 0; k < K; ++k)
      for (std::size_t j = 0; j < N; ++j) t[j * K + k] = b[k * N + j];
    b.swap(t);
  }
  std::vector<float> c;
  if (!o.c.empty()) {
    const io::NpyArray x = io::read_npy(o.c);
    FP8EMU_CHECK(x.dtype == "<f4" && (x.shape == std::vector<std::size_t>{M, N}), o.c, ": C must be float32 of shape [",
                 M, ", ", N, "]");
    c.resize(x.count());
    if (!c.empty()) std::memcpy(c.data(), x.data.data(), x.data.size());
  }
  io::NpyArray D;
  D.shape = {M, N};
  D.dtype = "<f4";
  io::check_memory(2 * M * N * 4 + 4 * (a.size() + b.size() + c.size()),
                   "GEMM output [" + std::to_string(M) + ", " + std::to_string(N) + "] from " + o.a + " and " + o.b);
  std::vector<float> d(M * N);
  emu::mma_tn_values(int(M), int(N), int(K), a.data(), b.data(), row.id, c.empty() ? nullptr : c.data(), d.data());
  D.data.resize(M * N * 4);
  if (!d.empty()) std::memcpy(D.data.data(), d.data(), D.data.size());
  io::write_npy(o.out, D);
  out << "D = A" << (layout == emu::GemmLayout::kTn ? " B^T" : " B") << (c.empty() ? "" : " + C") << ": [" << M << ", "
      << N << "], K = " << K << ", " << row.name << " (blocks of " << row.block << "), fp32 written to " << o.out
      << "\n";
  return 0;
}

}  // namespace

int run_gemm(const GemmOptions& o, std::ostream& out, std::ostream& err) {
  try {
    {
      const AccumulationModel& row = model_of(emu::parse_accumulation(o.accumulation));
      // Value operands (not uint8 FP8 codes) with an fp16, bf16 or tf32 row: that tensor core's GEMM;
      // FP8 codes with such a row: the FP8 GEMM, its codes widened to the row's format.
      if (row.datapath == Datapath::kTensorCore && row.input != core::MmaOperands::kFp8) {
        const io::NpyArray A = io::read_npy(o.a);
        if (A.dtype != "|u1" && A.dtype != "<u1") return run_values_gemm(o, row, A, out);
      }
    }
    const Format fa = parse_format(o.format_a, "--format-a"), fb = parse_format(o.format_b, "--format-b");
    const emu::GemmLayout layout = emu::parse_gemm_layout(o.layout, "--layout");
    const emu::GemmAccumulation acc{emu::parse_accumulation(o.accumulation), o.promotion, o.split_k};
    const io::NpyArray A = io::read_npy(o.a), B = io::read_npy(o.b);
    float sa = o.scale_inv_a, sb = o.scale_inv_b;
    std::vector<std::uint8_t> qa = operand(A, o.a, fa, sa, out), qb = operand(B, o.b, fb, sb, out);
    const std::size_t M = A.shape[0], K = A.shape[1];
    std::size_t N = 0;
    if (layout == emu::GemmLayout::kTn) {
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
    // Shapes come from .npy headers: an empty operand may declare any size, so the output's size
    // and the kernels' int dimensions are checked before anything is allocated.
    FP8EMU_CHECK(M <= kMaxGemmDim && N <= kMaxGemmDim && K <= kMaxGemmDim, "GEMM shape [", M, ", ", N, "], K = ", K,
                 " from ", o.a, " and ", o.b, ": every dimension must be at most ", kMaxGemmDim);
    FP8EMU_CHECK(M * N <= kMaxGemmOutput, "GEMM output [", M, ", ", N, "] from ", o.a, " and ", o.b,
                 " has more than ", kMaxGemmOutput, " elements");
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
      if (!dst.empty()) std::memcpy(dst.data(), x.data.data(), x.data.size());
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
    else if (parse_fp8_format(o.output, &ep.output_format)) ep.output = emu::GemmOutput::kFp8, D.dtype = "|u1";
    else FP8EMU_FAIL("unknown --output '", o.output, "' (accepted: fp32, bf16, fp16, ", fp8_format_names(), ")");
    // D and the .npy file's bytes written from it, beside the operands already read.
    io::check_memory(2 * M * N * D.itemsize() + qa.size() + qb.size() + 4 * (cbuf.size() + biasbuf.size()),
                     "GEMM output [" + std::to_string(M) + ", " + std::to_string(N) + "] (" + o.output + ") from " +
                         o.a + " and " + o.b);
    D.data.resize(M * N * D.itemsize());
    emu::gemm_fp8_tn(int(M), int(N), int(K), qa.data(), fa, sa, qb.data(), fb, sb, acc, ep, D.data.data());
    io::write_npy(o.out, D);
    out << "D = A" << (layout == emu::GemmLayout::kTn ? " B^T" : " B") << ": [" << M << ", " << N << "], K = " << K << ", "
        << emu::to_string(acc.model)
        << (acc.promotion_interval ? " promoted every " + std::to_string(acc.promotion_interval) : std::string(" fast"))
        << (acc.split_k > 1 ? ", split-K " + std::to_string(acc.split_k) : std::string()) << ", " << o.output << " written to " << o.out << "; amax of D " << amax_d << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu gemm: error: " << error_text(e) << "\n";
    return 2;
  }
}

Command add_gemm(CLI::App& app) {
  auto o = std::make_shared<GemmOptions>();
  GemmOptions& gemm = *o;
  CLI::App* gemm_cmd = app.add_subcommand(
      "gemm", "Scaled FP8 GEMM on .npy files with a chosen accumulation model (or an fp16/bf16/tf32 tensor-core GEMM)");
  gemm_cmd->add_option("--a", gemm.a,
                       "A.npy: [M, K] uint8 FP8 codes, or float32 (quantized with current scaling); with an fp16, bf16 "
                       "or tf32 --accumulation (hopper-bf16, ...): float16, bfloat16 or float32 values of that format")
      ->required();
  gemm_cmd->add_option("--b", gemm.b, "B.npy: [N, K] (tn) or [K, N] (nn), uint8 codes or float32")->required();
  gemm_cmd->add_option("--out", gemm.out, "D.npy to write: [M, N] float32")->required();
  gemm_cmd->add_option("--layout", gemm.layout, "tn (D = A B^T, Hopper's FP8 layout) or nn (D = A B)")->capture_default_str();
  gemm_cmd->add_option("--format-a", gemm.format_a, "e4m3 or e5m2")->capture_default_str();
  gemm_cmd->add_option("--format-b", gemm.format_b, "e4m3 or e5m2 (E5M2 x E5M2 is rejected)")->capture_default_str();
  gemm_cmd->add_option("--scale-inv-a", gemm.scale_inv_a, "Dequantization scale of uint8 A")->capture_default_str();
  gemm_cmd->add_option("--scale-inv-b", gemm.scale_inv_b, "Dequantization scale of uint8 B")->capture_default_str();
  gemm_cmd->add_option("--accumulation", gemm.accumulation, "Accumulation model: " + emu::accumulation_names())->capture_default_str();
  gemm_cmd->add_option("--promotion", gemm.promotion, "Promote to fp32 every N K-elements (0: fast accumulation)")
      ->capture_default_str();
  gemm_cmd->add_option("--split-k", gemm.split_k,
                       "cuBLASLt split-K: K cut into S ranges of whole 128-element tiles, each accumulated from zero, "
                       "the partials summed in fp32 (1: no split)")
      ->capture_default_str();
  gemm_cmd->add_option("--output", gemm.output, "D type: fp32, bf16 (uint16 bits), fp16, or an FP8 format (uint8 codes): " + fp8_format_names())
      ->capture_default_str();
  gemm_cmd->add_option("--d-scale", gemm.d_scale, "FP8 outputs: D = Q(t * d_scale)")->capture_default_str();
  gemm_cmd->add_option("--alpha", gemm.alpha, "D = alpha * (A B) * scales + beta * C + bias")->capture_default_str();
  gemm_cmd->add_option("--beta", gemm.beta, "Weight of C (needs --c)")->capture_default_str();
  gemm_cmd->add_option("--c", gemm.c, "C.npy: [M, N] float32");
  gemm_cmd->add_option("--bias", gemm.bias, "bias.npy: [N] float32");
  return {gemm_cmd, [o] { return run_gemm(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{40, add_gemm};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
