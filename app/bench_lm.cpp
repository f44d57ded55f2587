// `fp8emu bench lm` (see bench_lm.hpp).
#include "bench_lm.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_blas.hpp"
#include "char_lm/train_lm.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/util/error.hpp"
#include "temp_dir.hpp"

namespace fp8emu::cli {

int run_bench_lm(const BenchLmOptions& o, std::ostream& out) {
  FP8EMU_CHECK(o.steps >= 2, "bench lm: --steps must be at least 2 (the first step is not timed), got ", o.steps);
  FP8EMU_CHECK(o.repeat >= 1, "bench lm: --repeat must be at least 1, got ", o.repeat);
  FP8EMU_CHECK(o.backend == "emulated" || o.backend == "cuda", "bench lm: --backend must be emulated or cuda (every ",
               "layer; the reference backend would time FP32 under the FP8 runs' names), got '", o.backend, "'");
  FP8EMU_CHECK(!o.library_gemms || o.backend == "cuda",
               "bench lm: --library-gemms switches the GPU's fp32 and bf16 GEMMs to cuBLASLt; it needs --backend cuda");
  experiments::TrainLmConfig cfg;
  if (!o.text.empty()) cfg.text = o.text;
  cfg.steps = o.steps;
  cfg.eval_every = o.steps;
  cfg.batch_size = o.batch_size;
  cfg.seq_len = o.seq_len;
  cfg.d_model = o.d_model;
  cfg.heads = o.heads;
  cfg.layers = o.layers;
  cfg.ffn = o.ffn;
  cfg.activation_dtype = o.activation_dtype;
  cfg.backend = o.backend;
  cfg.strict = true;
  cfg.threads = o.threads;
  cfg.recipe = "all";
  cfg.bf16_baseline = true;
  cfg.evaluate = false;
  cfg.progress = false;
  TempDir tmp("fp8emu-bench-lm");
  cfg.out_dir = tmp.path() + "/results";

  // The switch is process-wide: set for these runs, then put back as found, a throw included.
  struct LibrarySwitch {
    bool was = backend::library_gemms();
    explicit LibrarySwitch(bool on) { backend::set_library_gemms(on); }
    ~LibrarySwitch() { backend::set_library_gemms(was); }
  } library(o.library_gemms);
  auto ms_of = [](const experiments::LmRunResult& r) {
    FP8EMU_CHECK(r.timed_steps >= 2, "bench lm: run ", r.name, " timed ", r.timed_steps,
                 " steps (it diverged?); need at least 2");
    return 1e3 * (r.step_seconds - r.first_step_seconds) / double(r.timed_steps - 1);
  };
  const unsigned long long fallbacks_before = backend::library_gemm_fallbacks();
  std::vector<experiments::LmRunResult> runs;
  std::vector<double> best;
  for (int rep = 0; rep < o.repeat; ++rep) {
    std::filesystem::remove_all(cfg.out_dir);
    const std::vector<experiments::LmRunResult> r = experiments::run_train_lm(cfg);
    FP8EMU_CHECK(r.size() >= 2 && r[0].name == "fp32" && r[1].name == "bf16",
                 "bench lm: expected the fp32 and bf16 runs first");
    if (runs.empty()) {
      runs = r;
      for (const experiments::LmRunResult& x : r) best.push_back(ms_of(x));
      continue;
    }
    for (std::size_t i = 0; i < r.size() && i < best.size(); ++i) best[i] = std::min(best[i], ms_of(r[i]));
  }
  const unsigned long long fallbacks = backend::library_gemm_fallbacks() - fallbacks_before;
  // The CPU's speed baseline: the FP32 and BF16 runs again with OpenBLAS's SGEMM for their fp32 and
  // bf16 GEMMs (backend::set_cpu_library_gemm; not bit-identical), as a user's CPU training would
  // run them. One FP8 recipe keeps the pass short; its row is not used.
  std::vector<double> blas_best;
  if (o.backend == "emulated" && have_openblas()) {
    struct BlasSwitch {
      backend::CpuLibraryGemm was = backend::cpu_library_gemm();
      BlasSwitch() { backend::set_cpu_library_gemm(openblas_sgemm_nn); }
      ~BlasSwitch() { backend::set_cpu_library_gemm(was); }
    } blas;
    experiments::TrainLmConfig bcfg = cfg;
    bcfg.recipe = "delayed";
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::filesystem::remove_all(bcfg.out_dir);
      const std::vector<experiments::LmRunResult> r = experiments::run_train_lm(bcfg);
      FP8EMU_CHECK(r.size() >= 2 && r[0].name == "fp32" && r[1].name == "bf16",
                   "bench lm: expected the fp32 and bf16 runs first");
      for (std::size_t i = 0; i < 2; ++i) {
        if (blas_best.size() <= i) blas_best.push_back(ms_of(r[i]));
        else blas_best[i] = std::min(blas_best[i], ms_of(r[i]));
      }
    }
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "bench lm: train-lm d-model %d, layers %d, heads %d, ffn %d, sequence %d, batch %d, %s activations, "
                "backend %s, %s GEMMs; mean of steps 2..%d of each run, best of %d\n\n",
                o.d_model, o.layers, o.heads, o.ffn, o.seq_len, o.batch_size, o.activation_dtype.c_str(),
                o.backend.c_str(), o.library_gemms ? "library (cuBLASLt) fp32/bf16" : "exact", o.steps, o.repeat);
  out << line << "| run | ms/step | speed-up vs fp32 | speed-up vs bf16 |\n|---|---:|---:|---:|\n";
  const double t32 = best[0], t16 = best[1];
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double t = best[i];
    std::snprintf(line, sizeof line, "| %s | %.3f | %.2f | %.2f |\n", runs[i].name.c_str(), t, t32 / t, t16 / t);
    out << line;
  }
  for (std::size_t i = 0; i < blas_best.size(); ++i) {
    const double t = blas_best[i];
    std::snprintf(line, sizeof line, "| %s_openblas | %.3f | %.2f | %.2f |\n", runs[i].name.c_str(), t, t32 / t,
                  t16 / t);
    out << line;
  }
  out << "\n";
  if (o.library_gemms && fallbacks > 0)
    out << "note: " << fallbacks << " fp32/bf16 GEMMs ran on the exact kernel (cuBLASLt refused their shape or "
        << "alignment), so those rows are slower than cuBLASLt would be\n";
  for (std::size_t i = 2; i < runs.size(); ++i) {
    std::snprintf(line, sizeof line, "lm_step_speedup_%s_vs_bf16: %.2f\n", runs[i].name.c_str(), t16 / best[i]);
    out << line;
  }
  for (std::size_t i = 2; i < runs.size() && !blas_best.empty(); ++i) {
    std::snprintf(line, sizeof line, "lm_step_%s_over_fp32_openblas: %.2f\n", runs[i].name.c_str(),
                  best[i] / blas_best[0]);
    out << line;
  }
  out << std::flush;
  return 0;
}

}  // namespace fp8emu::cli
