// `fp8emu bench train` (see bench_train.hpp).
#include "bench_train.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fp8emu/util/error.hpp"
#include "temp_dir.hpp"

namespace fp8emu::cli {

int run_bench_train(const BenchTrainOptions& o, std::ostream& out) {
  FP8EMU_CHECK(o.recipe != "all", "bench train: --recipe takes one recipe (", "delayed, current, mxfp8 or block)");
  experiments::TrainConfig cfg;
  cfg.data_dir = o.data_dir;
  cfg.epochs = 1;
  cfg.train_samples = o.train_samples;
  cfg.test_samples = o.test_samples;
  cfg.batch_size = o.batch_size;
  cfg.threads = o.threads;
  cfg.recipe = o.recipe;
  cfg.accumulation = o.accumulation;
  cfg.progress = false;
  cfg.report = false;
  TempDir tmp("fp8emu-bench-train");
  cfg.out_dir = tmp.path() + "/results";
  FP8EMU_CHECK(o.repeat >= 1, "bench train: --repeat must be at least 1, got ", o.repeat);
  std::vector<experiments::RunResult> runs;
  for (int r = 0; r < o.repeat; ++r) {
    std::filesystem::remove_all(cfg.out_dir);
    const std::vector<experiments::RunResult> pair = experiments::run_train(cfg);
    FP8EMU_CHECK(pair.size() == 2 && pair[0].steps > 0 && pair[1].steps > 0,
                 "bench train: expected an FP32 and an FP8 run with steps");
    if (runs.empty()) {
      runs = pair;
      continue;
    }
    for (std::size_t i = 0; i < 2; ++i)
      if (pair[i].step_seconds < runs[i].step_seconds) runs[i] = pair[i];
  }
#ifdef _OPENMP
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
#else
  const int threads = 1;
#endif
  char line[256];
  std::snprintf(line, sizeof line,
                "bench train: one epoch, %ld steps of batch %d (Fashion-MNIST MLP), FP32 vs FP8 %s with %s "
                "accumulation, %d thread(s), best of %d\n",
                runs[0].steps, o.batch_size, o.recipe.c_str(), o.accumulation.c_str(), threads, o.repeat);
  out << line;
  std::snprintf(line, sizeof line, "%-14s %8s %10s %12s\n", "run", "steps", "ms/step", "step_seconds");
  out << line;
  for (const experiments::RunResult& r : runs) {
    std::snprintf(line, sizeof line, "%-14s %8ld %10.3f %12.3f\n", r.name.c_str(), r.steps,
                  1e3 * r.step_seconds / double(r.steps), r.step_seconds);
    out << line;
  }
  const double ratio = (runs[1].step_seconds / double(runs[1].steps)) / (runs[0].step_seconds / double(runs[0].steps));
  std::snprintf(line, sizeof line, "fp8_step_vs_fp32_step: %.3f\n", ratio);
  out << line << std::flush;
  return 0;
}

}  // namespace fp8emu::cli
