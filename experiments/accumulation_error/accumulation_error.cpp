// Accumulation-error experiment (see accumulation_error.hpp).
#include "accumulation_error.hpp"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu_internal/plot.hpp"
#include "fp8emu/nn/matrix.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments {
namespace {

struct ModelSpec {
  const char* name;
  emu::GemmAccumulation acc;
};
const ModelSpec kModels[] = {
    {"hopper_fast", {emu::Accumulation::kHopper, 0}},
    {"hopper_promote128", {emu::Accumulation::kHopper, 128}},
    {"ada_fast", {emu::Accumulation::kAda, 0}},
    {"fp32", {emu::Accumulation::kFp32, 0}},
};
const char* const kDistributions[] = {"normal", "abs_normal"};

// Bounds of the sizes: every buffer stays below 256 MiB, and K (doubling from 256) stays an int.
constexpr int kMaxSide = 4096;
constexpr int kMaxK = 1 << 24;
constexpr std::uint64_t kMaxOperand = std::uint64_t(1) << 26;

// Standard normal by Box-Muller from the project's deterministic uniforms.
float normal(nn::Rng& rng) {
  const double u1 = (double(rng.uniform()) + 0x1p-25), u2 = double(rng.uniform());
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Current-scaling E4M3 cast of a whole tensor; returns scale_inv.
float quantize_current(const std::vector<float>& x, std::vector<std::uint8_t>& q) {
  const float scale = core::compute_scale_from_amax(emu::compute_amax(x.data(), x.size()),
                                                    max_finite_f32(Format::kE4M3), false, 0.0f, FLT_MAX);
  q.resize(x.size());
  emu::quantize(x.data(), x.size(), scale, Format::kE4M3, q.data(), nullptr);
  return 1.0f / scale;
}

struct Errors {
  double mean_rel = 0, max_rel = 0, normwise = 0;
};

Errors compare(const std::vector<float>& d, const std::vector<float>& x) {
  Errors e;
  double num = 0, den = 0;
  std::size_t counted = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double diff = double(d[i]) - double(x[i]);
    num += diff * diff;
    den += double(x[i]) * double(x[i]);
    if (x[i] != 0.0f) {
      const double r = std::fabs(diff) / std::fabs(double(x[i]));
      e.mean_rel += r;
      e.max_rel = std::max(e.max_rel, r);
      ++counted;
    }
  }
  if (counted) e.mean_rel /= double(counted);
  e.normwise = den > 0 ? std::sqrt(num / den) : 0.0;
  return e;
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

void run_accumulation_error(AccumulationErrorConfig cfg) {
  FP8EMU_CHECK(cfg.m >= 1 && cfg.n >= 1 && cfg.m <= kMaxSide && cfg.n <= kMaxSide,
               "accumulation-error: --m and --n must be in [1, ", kMaxSide, "], got ", cfg.m, " and ", cfg.n);
  FP8EMU_CHECK(cfg.k_max >= 256 && cfg.k_max <= kMaxK, "accumulation-error: --k-max must be in [256, ", kMaxK,
               "], got ", cfg.k_max);
  FP8EMU_CHECK(std::uint64_t(std::max(cfg.m, cfg.n)) * std::uint64_t(cfg.k_max) <= kMaxOperand,
               "accumulation-error: --m x --k-max and --n x --k-max must be at most ", kMaxOperand,
               " elements (256 MiB of fp32 per operand), got ", std::max(cfg.m, cfg.n), " x ", cfg.k_max);
  if (cfg.out_dir.empty()) {
    char buf[64];
    const std::time_t t = std::time(nullptr);
    std::strftime(buf, sizeof buf, "results/accumulation-error-%Y%m%d-%H%M%S", std::localtime(&t));
    cfg.out_dir = buf;
  }
  io::ensure_writable_dir(cfg.out_dir);

  std::ostringstream csv, md;
  csv << "distribution,k,model,mean_rel_error,max_rel_error,normwise_rel_error\n";
  // Plot data: max relative error per (distribution, model) over K.
  std::vector<std::vector<std::vector<std::pair<int, double>>>> series(
      2, std::vector<std::vector<std::pair<int, double>>>(std::size(kModels)));
  std::vector<std::vector<std::vector<double>>> normwise(2, std::vector<std::vector<double>>(std::size(kModels)));
  for (int dist = 0; dist < 2; ++dist) {
    for (int K = 256; K <= cfg.k_max; K *= 2) {
      nn::Rng rng(cfg.seed * 1000003u + std::uint64_t(K) * 2u + std::uint64_t(dist));
      std::vector<float> a(std::size_t(cfg.m) * std::size_t(K)), b(std::size_t(cfg.n) * std::size_t(K));
      for (float& v : a) v = dist ? std::fabs(normal(rng)) : normal(rng);
      for (float& v : b) v = dist ? std::fabs(normal(rng)) : normal(rng);
      std::vector<std::uint8_t> qa, qb;
      const float sa = quantize_current(a, qa), sb = quantize_current(b, qb);
      std::vector<float> exact(std::size_t(cfg.m) * std::size_t(cfg.n)), d(exact.size());
      emu::gemm_fp8_tn(cfg.m, cfg.n, K, qa.data(), Format::kE4M3, sa, qb.data(), Format::kE4M3, sb,
                       {emu::Accumulation::kExact, 0}, exact.data());
      for (std::size_t mi = 0; mi < std::size(kModels); ++mi) {
        emu::gemm_fp8_tn(cfg.m, cfg.n, K, qa.data(), Format::kE4M3, sa, qb.data(), Format::kE4M3, sb,
                         kModels[mi].acc, d.data());
        const Errors e = compare(d, exact);
        csv << kDistributions[dist] << ',' << K << ',' << kModels[mi].name << ',' << g(e.mean_rel) << ','
            << g(e.max_rel) << ',' << g(e.normwise) << '\n';
        series[std::size_t(dist)][mi].push_back({K, e.max_rel});
        normwise[std::size_t(dist)][mi].push_back(e.normwise);
        if (cfg.progress)
          std::fprintf(stderr, "[%s K=%d] %-18s mean %.3g%%  max %.3g%%  normwise %.3g%%\n", kDistributions[dist],
                       K, kModels[mi].name, 100 * e.mean_rel, 100 * e.max_rel, 100 * e.normwise);
      }
    }
  }
  // table.md: per input distribution, one row per model and one column per K, "max / normwise".
  for (int dist = 0; dist < 2; ++dist) {
    md << "\n**Inputs " << kDistributions[dist] << "** (" << cfg.m << "x" << cfg.n
       << " outputs; max element-wise / normwise relative error against the exact product)\n\n| model |";
    for (const auto& [k, v] : series[std::size_t(dist)][0]) md << " K = " << k << " |";
    md << "\n|---|";
    for (std::size_t i = 0; i < series[std::size_t(dist)][0].size(); ++i) md << "---|";
    md << "\n";
    for (std::size_t mi = 0; mi < std::size(kModels); ++mi) {
      md << "| " << kModels[mi].name << " |";
      for (std::size_t i = 0; i < series[std::size_t(dist)][mi].size(); ++i) {
        char cell[64];
        std::snprintf(cell, sizeof cell, " %.3g %% / %.3g %% |", 100 * series[std::size_t(dist)][mi][i].second,
                      100 * normwise[std::size_t(dist)][mi][i]);
        md << cell;
      }
      md << "\n";
    }
  }
  io::write_file_atomic(cfg.out_dir + "/accumulation_error.csv", csv.str());
  io::write_file_atomic(cfg.out_dir + "/table.md", md.str());

  std::ostringstream gp;
  gp << "set terminal pngcairo noenhanced size 1200,480 font ',10'\nset output '@OUTPUT@'\n"
     << "set multiplot layout 1,2 title 'FP8 E4M3 GEMM, " << cfg.m << "x" << cfg.n
     << " outputs: normwise relative error vs the exact product (DeepSeek-V3: ~2 % at K = 4096)'\n"
     << "set logscale xy\nset grid\nset xlabel 'K'\nset ylabel '||D - exact|| / ||exact||'\nset key top left\n"
     << "set xrange [200:20000]\n"
     << "set format y '%g'\n";
  for (int dist = 0; dist < 2; ++dist) {
    gp << "set title 'inputs: " << kDistributions[dist] << "'\nplot ";
    for (std::size_t mi = 0; mi < std::size(kModels); ++mi)
      gp << (mi ? ", " : "") << "'-' using 1:2 with linespoints lw 2 title '" << kModels[mi].name << "'";
    gp << ", 0.02 with lines dt 2 lc 'black' title 'DeepSeek-V3 ~2 %'\n";
    for (std::size_t mi = 0; mi < std::size(kModels); ++mi) {
      for (std::size_t i = 0; i < series[std::size_t(dist)][mi].size(); ++i) {
        const double v = normwise[std::size_t(dist)][mi][i];
        gp << series[std::size_t(dist)][mi][i].first << ' ' << (v > 0 ? v : 1e-12) << '\n';
      }
      gp << "e\n";
    }
  }
  gp << "unset multiplot\n";
  const bool plot = io::render_png(gp.str(), cfg.out_dir + "/accumulation_error.png");
  std::fputs(md.str().c_str(), stdout);
  std::printf("results: %s (accumulation_error.csv, table.md%s)\n", cfg.out_dir.c_str(),
              plot ? ", accumulation_error.png" : "");
}

}  // namespace fp8emu::experiments
