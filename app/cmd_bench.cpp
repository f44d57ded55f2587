// `fp8emu bench gemm`, `fp8emu bench convert` (see cmd_bench.hpp) and `fp8emu bench gpu` (bench_gpu.hpp).
#include "cmd_bench.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <tuple>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_gpu.hpp"
#include "bench_lm.hpp"
#include "bench_train.hpp"
#include "commands.hpp"
#include "cuda_host_baseline.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/emulation/bulk_convert.hpp"
#include "bench_blas.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "gemm_isa.hpp"  // emulation/: which kernels the models run

namespace fp8emu::cli {
namespace {

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs f with `threads` OpenMP threads (the kernels' parallel regions follow the ICV).
double seconds_with_threads(int threads, const std::function<void()>& f) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const double t = seconds(f);
  omp_set_num_threads(saved);
  return t;
#else
  (void)threads;
  return seconds(f);
#endif
}

}  // namespace

int run_bench_gemm(const std::vector<int>& sizes, int repeat, std::ostream& out) {
  for (int n : sizes)
    if (n < 1 || n > 16384) {
      out << "fp8emu bench gemm: error: --sizes must be in [1, 16384], got " << n << "\n";
      return 2;
    }
  if (repeat < 1 || sizes.empty()) {
    out << "fp8emu bench gemm: error: --repeat must be >= 1 and --sizes not empty\n";
    return 2;
  }
#ifdef _OPENMP
  Eigen::setNbThreads(omp_get_max_threads());
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
  char line[400];
  std::snprintf(line, sizeof line, "GEMM M = N = K, %d threads, best of %d; GFLOP/s = 2 M N K / seconds\n", threads,
                repeat);
  out << line;
  const bool blas = have_openblas();
  const std::string isa_level = eigen_isa_level();
  const bool eigen_isa = !isa_level.empty();
  out << "baselines: eigen_sgemm = Eigen " << EIGEN_WORLD_VERSION << '.' << EIGEN_MAJOR_VERSION << '.'
      << EIGEN_MINOR_VERSION << " built with fp8emu's flags (" << Eigen::SimdInstructionSetsInUse() << ")";
  if (eigen_isa) out << "; eigen_isa_sgemm = " << eigen_isa_description() << " built for " << isa_level;
  else out << "; eigen_isa_sgemm: " << eigen_isa_description();
  if (blas) out << "; openblas_sgemm = " << openblas_description();
  else out << "; openblas_sgemm: not in this build (install libopenblas-dev and reconfigure)";
  out << "\nmodels: fp8emu's " << emu::detail::to_string(emu::detail::gemm_isa())
      << " kernels (FP8EMU_GEMM_ISA=baseline|avx2|avx512 picks a lower path)";
  if (emu::detail::gemm_isa() == emu::detail::GemmIsa::kAvx512)
    out << "; hopper and ada on the " << (emu::detail::gemm_tc_fma512() ? "round-toward-zero FMA" : "int16")
        << " tensor-core kernel (FP8EMU_GEMM_TC=int16|fma)";
  out << "\nratios are against the best baseline of each size (best = the fastest of them); block = MXFP8 "
         "(E4M3, 1 x 32 E8M0 blocks) on the fp32 model; hopper_bf16 = the Hopper bf16 tensor core on bf16 values\n";
  // The models timed, in column order; the summary lines name them in reverse (fp32 last).
  const char* const model_names[] = {"fp32", "hopper", "ada", "block", "hopper_bf16"};
  constexpr int kModels = 5;
  const auto model_width = [&](int m) { return int(std::max<std::size_t>(11, std::strlen(model_names[m]) + 6)); };
  const auto ratio_width = [&](int m) { return int(std::max<std::size_t>(9, std::strlen(model_names[m]) + 5)); };
  out << "  size  openblas_sgemm  eigen_sgemm  eigen_isa_sgemm";
  for (int m = 0; m < kModels; ++m) out << ' ' << std::setw(model_width(m)) << (std::string(model_names[m]) + "_model");
  out << "       best";
  for (int m = 0; m < kModels; ++m) out << ' ' << std::setw(ratio_width(m)) << (std::string(model_names[m]) + "/best");
  out << "\n";
  double first_ratio[kModels] = {};
  std::string first_best = "eigen_sgemm";
  for (std::size_t si = 0; si < sizes.size(); ++si) {
    const int n = sizes[si];
    std::mt19937 g(1);
    Eigen::MatrixXf A = Eigen::MatrixXf::Random(n, n), B = Eigen::MatrixXf::Random(n, n), C(n, n), Cb(n, n), Ci(n, n);
    std::vector<std::uint8_t> qa(std::size_t(n) * n), qb(qa.size());
    for (auto& c : qa) c = std::uint8_t(g() & 0x77);  // finite E4M3 codes
    for (auto& c : qb) c = std::uint8_t(g() & 0x77);
    // The block-scaled operands: MXFP8 casts of the same fp32 matrices (row-major [n, n], K = cols).
    const emu::BlockQuantized xa = emu::quantize_mxfp8(A.data(), n, n, emu::BlockAxis::kRowwise, Format::kE4M3,
                                                       E8M0Rule::kTransformerEngine, nullptr);
    const emu::BlockQuantized xb = emu::quantize_mxfp8(B.data(), n, n, emu::BlockAxis::kRowwise, Format::kE4M3,
                                                       E8M0Rule::kTransformerEngine, nullptr);
    // The bf16 operands of the bf16 tensor core (the fp32 matrices with their low 16 bits cleared).
    std::vector<float> ba(A.data(), A.data() + qa.size()), bb(B.data(), B.data() + qa.size());
    for (std::vector<float>* v : {&ba, &bb})
      for (float& x : *v) x = core::bits_to_f32(core::f32_to_bits(x) & 0xFFFF0000u);
    std::vector<float> D(qa.size());
    const double flop = 2.0 * n * double(n) * n;
    const auto fp8 = [&](emu::Accumulation a) {
      return [&, a] {
        emu::gemm_fp8_tn(n, n, n, qa.data(), Format::kE4M3, 1, qb.data(), Format::kE4M3, 1, {a, 0}, D.data());
      };
    };
    const std::function<void()> model_runs[kModels] = {fp8(emu::Accumulation::kFp32), fp8(emu::Accumulation::kHopper),
                                                       fp8(emu::Accumulation::kAda),
                                                       [&] { emu::gemm_fp8_block_tn(xa, xb, D.data()); },
                                                       [&] {
                                                         emu::gemm_tc_nn(n, n, n, ba.data(), bb.data(),
                                                                         emu::Accumulation::kHopperBf16, D.data());
                                                       }};
    // Rounds interleave the baselines and the models, so that all of them see the same machine
    // conditions; the best time of each is kept.
    double t_eigen = 1e300, t_blas = 1e300, t_isa = 1e300, t_model[kModels];
    std::fill(t_model, t_model + kModels, 1e300);
    for (int r = 0; r < repeat; ++r) {
      t_eigen = std::min(t_eigen, seconds([&] { C.noalias() = A * B; }));
      if (blas) t_blas = std::min(t_blas, seconds([&] { openblas_sgemm(n, A.data(), B.data(), Cb.data(), threads); }));
      if (eigen_isa)
        t_isa = std::min(t_isa, seconds([&] { eigen_isa_sgemm(n, A.data(), B.data(), Ci.data(), threads); }));
      for (int m = 0; m < kModels; ++m) t_model[m] = std::min(t_model[m], seconds(model_runs[m]));
    }
    // The baselines compute the same product: a BLAS that is fast because it is wrong is no
    // baseline (fp32 sums in different orders differ by rounding only).
    const float scale = C.cwiseAbs().maxCoeff();
    for (const auto& [name, on, M] : {std::tuple<const char*, bool, const Eigen::MatrixXf*>{"OpenBLAS", blas, &Cb},
                                      {"Eigen's ISA module", eigen_isa, &Ci}}) {
      if (!on) continue;
      const float err = (C - *M).cwiseAbs().maxCoeff();
      if (!(err <= 1e-4f * std::max(scale, 1.0f) * float(n))) {
        out << "fp8emu bench gemm: error: " << name << " and Eigen disagree at n = " << n << " (max |diff| " << err
            << ")\n";
        return 1;
      }
    }
    const double ge = flop / t_eigen / 1e9, gb = blas ? flop / t_blas / 1e9 : 0.0,
                 gi = eigen_isa ? flop / t_isa / 1e9 : 0.0;
    const char* best_name = "eigen";
    double best = ge;
    if (blas && gb >= best) {
      best = gb;
      best_name = "openblas";
    }
    if (eigen_isa && gi > best) {
      best = gi;
      best_name = "eigen_isa";
    }
    char blas_col[32] = "-", isa_col[32] = "-";
    if (blas) std::snprintf(blas_col, sizeof blas_col, "%.2f", gb);
    if (eigen_isa) std::snprintf(isa_col, sizeof isa_col, "%.2f", gi);
    std::snprintf(line, sizeof line, "%6d %15s %12.2f %16s", n, blas_col, ge, isa_col);
    out << line;
    for (int m = 0; m < kModels; ++m) {
      std::snprintf(line, sizeof line, " %*.2f", model_width(m), flop / t_model[m] / 1e9);
      out << line;
    }
    std::snprintf(line, sizeof line, " %10s", best_name);
    out << line;
    for (int m = 0; m < kModels; ++m) {
      const double ratio = flop / t_model[m] / 1e9 / best;
      std::snprintf(line, sizeof line, " %*.3f", ratio_width(m), ratio);
      out << line;
      if (si == 0) first_ratio[m] = ratio;
    }
    out << "\n" << std::flush;
    if (si == 0) first_best = std::string(best_name) + "_sgemm";
  }
  out << "best_baseline: " << first_best << "\n";
  for (int m = kModels - 1; m >= 0; --m) {
    std::snprintf(line, sizeof line, "%s_vs_best_sgemm: %.3f\n", model_names[m], first_ratio[m]);
    out << line;
  }
  return 0;
}

int run_bench_convert(std::size_t elements, int repeat, std::ostream& out) {
  if (elements < 1 || elements > (std::size_t(1) << 32) || repeat < 1) {
    out << "fp8emu bench convert: error: --elements must be in [1, 2^32] and --repeat >= 1\n";
    return 2;
  }
  const std::size_t n = elements;
  const Format fmt = Format::kE4M3;
  const FormatSpec& spec = spec_of(fmt);
  // Input: N(0, 1) floats from a fixed seed per 64 Ki block (the same array for any thread count),
  // cast with scale fp8_max / 2, so the |x| > 2.07 tail (about 3.8 %) saturates.
  const float scale = max_finite_f32(fmt) / 2.0f;
  std::vector<float> x(n);
  const std::ptrdiff_t gen_blocks = std::ptrdiff_t((n + 0xFFFF) >> 16);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t b = 0; b < gen_blocks; ++b) {
    std::mt19937 g(std::uint32_t(b) * 2654435761u + 1u);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t i0 = std::size_t(b) << 16, i1 = std::min(n, i0 + 0x10000);
    for (std::size_t i = i0; i < i1; ++i) x[i] = normal(g);
  }
  const bool have_cuda = cuda_host_baseline_available();
  // One output per path, written before timing (page faults are not measured).
  std::vector<std::uint8_t> q_cuda(have_cuda ? n : 0, 1), q_scalar(n, 1), q_bulk1(n, 1), q_bulk2(n, 1), q_copy(n, 1);
  float a_cuda = 0, a_scalar = 0, a_bulk1 = 0, a_bulk2 = 0;
  double t_cuda = 1e300, t_scalar = 1e300, t_bulk1 = 1e300, t_bulk2 = 1e300, t_copy = 1e300;
  emu::QuantizeStats stats;
  // Rounds interleave all paths, so that each sees the same machine conditions; best time kept.
  for (int r = 0; r < repeat; ++r) {
    if (have_cuda) {
      t_cuda = std::min(t_cuda, seconds([&] {
        a_cuda = 0;
        cuda_host_cast(x.data(), n, scale, fmt, q_cuda.data(), &a_cuda);
      }));
    }
    t_scalar = std::min(t_scalar, seconds([&] {
      float m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        q_scalar[i] = core::encode_f32_bits(core::f32_to_bits(x[i] * scale), spec, Saturation::kSatFinite);
        m = std::fmax(m, std::fabs(x[i]));
      }
      a_scalar = m;
    }));
    t_bulk1 = std::min(t_bulk1, seconds_with_threads(1, [&] {
      a_bulk1 = 0;
      emu::quantize_f32(x.data(), n, scale, fmt, q_bulk1.data(), &a_bulk1);
    }));
    t_bulk2 = std::min(t_bulk2, seconds_with_threads(2, [&] {
      a_bulk2 = 0;
      emu::quantize_f32(x.data(), n, scale, fmt, q_bulk2.data(), &a_bulk2);
    }));
    t_copy = std::min(t_copy, seconds([&] {
      const float* in = x.data();
      std::uint8_t* o = q_copy.data();
      const std::ptrdiff_t count = std::ptrdiff_t(n);
#pragma omp parallel for schedule(static) num_threads(2)
      for (std::ptrdiff_t i = 0; i < count; ++i) {
        std::uint32_t u;
        std::memcpy(&u, in + i, sizeof u);
        o[i] = std::uint8_t(u >> 24);
      }
    }));
  }
  {  // The saturated fraction, for the header (counting is not part of the timed cast).
    std::vector<std::uint8_t> q_stats(n);
    emu::quantize_f32(x.data(), n, scale, fmt, q_stats.data(), nullptr, &stats);
  }
  // Every path must have computed the same thing.
  const auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  const bool ok = q_scalar == q_bulk1 && q_scalar == q_bulk2 && same(a_scalar, a_bulk1) && same(a_scalar, a_bulk2) &&
                  (!have_cuda || (q_cuda == q_scalar && same(a_cuda, a_scalar)));
  if (!ok) {
    out << "fp8emu bench convert: error: the paths disagree (bytes or amax differ between "
        << (have_cuda ? "cuda_host, " : "") << "core_scalar and bulk)\n";
    return 1;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "fp32 -> E4M3 (satfinite), scale %g, amax %.6g, %zu elements (%.2f %% saturate), best of %d\n",
                double(scale), double(a_bulk2), n, 100.0 * double(stats.saturated) / double(n), repeat);
  out << line << "  path         threads  ns/element      GB/s   M elem/s\n";
  const auto row = [&](const char* name, int threads, double t) {
    std::snprintf(line, sizeof line, "  %-12s %7d %11.3f %9.2f %10.1f\n", name, threads, t / double(n) * 1e9,
                  5.0 * double(n) / t / 1e9, double(n) / t / 1e6);
    out << line;
  };
  if (have_cuda) row("cuda_host", 1, t_cuda);
  else out << "  cuda_host    unavailable: cuda_fp8.h was not found at build time (no speedup line)\n";
  row("core_scalar", 1, t_scalar);
  row("bulk", 1, t_bulk1);
  row("bulk", 2, t_bulk2);
  row("copy", 2, t_copy);
  if (have_cuda) {
    std::snprintf(line, sizeof line, "speedup_vs_cuda_host_per_thread: %.2f\n", t_cuda / t_bulk1);
    out << line;
  }
  std::snprintf(line, sizeof line, "fraction_of_copy_bandwidth: %.3f\n", t_copy / t_bulk2);
  out << line << std::flush;
  return 0;
}

Command add_bench(CLI::App& app) {
  struct Options {
    std::vector<int> gemm_sizes{1024, 4096};
    int gemm_repeat = 5;
    std::size_t convert_elements = std::size_t(1) << 26;
    int convert_repeat = 5;
    BenchGpuOptions gpu;
    BenchTrainOptions train;
    BenchLmOptions lm;
  };
  auto o = std::make_shared<Options>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks against a baseline measured in the same run");
  CLI::App* bench_gemm = bench->add_subcommand("gemm", "FP8 GEMM accumulation models vs OpenBLAS's and Eigen's fp32 GEMMs");
  bench_gemm->add_option("--sizes", o->gemm_sizes, "M = N = K values")->delimiter(',')->capture_default_str();
  bench_gemm->add_option("--repeat", o->gemm_repeat, "Runs per measurement (best is kept)")->capture_default_str();
  CLI::App* bench_convert =
      bench->add_subcommand("convert", "fp32 -> E4M3 cast with scale and amax: bulk kernel vs CUDA's host code and a copy");
  bench_convert->add_option("--elements", o->convert_elements, "Array length")->capture_default_str();
  bench_convert->add_option("--repeat", o->convert_repeat, "Runs per measurement (best is kept)")->capture_default_str();
  CLI::App* bench_gpu = bench->add_subcommand("gpu", "GPU: cuBLASLt FP8/BF16/FP32 GEMM TFLOP/s, quantize GB/s, MLP step");
  bench_gpu->add_option("--sizes", o->gpu.sizes, "M = N = K values")->delimiter(',')->capture_default_str();
  bench_gpu->add_option("--repeat", o->gpu.repeat, "Timed runs per measurement")->capture_default_str();
  bench_gpu->add_option("--budget", o->gpu.budget_seconds,
                        "Seconds for the GEMM sweep, casts and MLP step (larger sizes are skipped; --lm-steps sizes the "
                        "train-lm table)")
      ->capture_default_str();
  bench_gpu->add_option("--lm-steps", o->gpu.lm_steps, "Steps per run of the train-lm table (0: no table; not bound by --budget)")
      ->capture_default_str();
  bench_gpu->add_option("--lm-text", o->gpu.lm_text, "Corpus of the train-lm table (default: train-lm's)");
  CLI::App* bench_train = bench->add_subcommand(
      "train", "One epoch of `fp8emu train` in FP32 and in FP8 on the same data: time per training step and the ratio");
  bench_train->add_option("--data-dir", o->train.data_dir, "Folder with the Fashion-MNIST IDX files")->capture_default_str();
  bench_train->add_option("--train-samples", o->train.train_samples, "Images in the timed epoch")->capture_default_str();
  bench_train->add_option("--test-samples", o->train.test_samples, "Images of the untimed evaluation")->capture_default_str();
  bench_train->add_option("--batch-size", o->train.batch_size, "Mini-batch size")->capture_default_str();
  bench_train->add_option("--threads", o->train.threads, "OpenMP threads (0: OpenMP default)")->capture_default_str();
  bench_train->add_option("--recipe", o->train.recipe, "FP8 recipe: " + recipe_list())->capture_default_str();
  bench_train->add_option("--accumulation", o->train.accumulation,
                          "FP8 GEMM accumulation (delayed/current): " + emu::accumulation_names())
      ->capture_default_str();
  bench_train->add_option("--repeat", o->train.repeat,
                          "FP32 + FP8 pairs, alternating; the best time per step of each run is kept")
      ->capture_default_str();
  CLI::App* bench_lm = bench->add_subcommand(
      "lm", "train-lm's training step in FP32, BF16 and every FP8 recipe: ms per step and the speed-ups");
  BenchLmOptions& lm = o->lm;
  bench_lm->add_option("--text", lm.text, "Text file or folder (default: train-lm's, Debian's fortunes)");
  bench_lm->add_option("--steps", lm.steps, "Training steps per run (the first is not timed)")->capture_default_str();
  bench_lm->add_option("--batch-size", lm.batch_size, "Sequences per step")->capture_default_str();
  bench_lm->add_option("--seq-len", lm.seq_len, "Tokens per sequence")->capture_default_str();
  bench_lm->add_option("--d-model", lm.d_model, "Hidden size")->capture_default_str();
  bench_lm->add_option("--heads", lm.heads, "Attention heads")->capture_default_str();
  bench_lm->add_option("--layers", lm.layers, "Transformer layers")->capture_default_str();
  bench_lm->add_option("--ffn", lm.ffn, "MLP hidden size")->capture_default_str();
  bench_lm->add_option("--activation-dtype", lm.activation_dtype, "fp32 or bf16")->capture_default_str();
  bench_lm->add_option("--backend", lm.backend, "emulated or cuda (device-resident)")->capture_default_str();
  bench_lm->add_flag("--library-gemms", lm.library_gemms,
                     "cuda: FP32 and BF16 GEMMs on cuBLASLt, as FP32/BF16 training would run them (not bit-identical)");
  bench_lm->add_option("--threads", lm.threads, "OpenMP threads (0: OpenMP default)")->capture_default_str();
  bench_lm->add_option("--repeat", lm.repeat, "Trainings of all the runs; each row keeps its best time per step")
      ->capture_default_str();
  bench->require_subcommand(1);
  return {bench, [o, bench_gemm, bench_convert, bench_gpu, bench_train, bench_lm] {
            if (*bench_lm) return run_bench_lm(o->lm, std::cout);
            if (*bench_train) return run_bench_train(o->train, std::cout);
            if (*bench_gemm) return run_bench_gemm(o->gemm_sizes, o->gemm_repeat, std::cout);
            if (*bench_convert) return run_bench_convert(o->convert_elements, o->convert_repeat, std::cout);
            if (*bench_gpu) return run_bench_gpu(o->gpu, std::cout, std::cerr);
            return 0;
          }};
}

const CommandRegistrar registered{70, add_bench};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
