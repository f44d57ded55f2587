// `fp8emu bench convert` and `bench gemm` end to end on small sizes: they run, their paths agree
// (else they exit 1), and they end with their ratio lines (the values depend on the machine and are
// not checked beyond being positive).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// The number after "key: ", parsed in full; fails the test if the line is not exactly that.
double value_of(const std::string& line, const std::string& key) {
  INFO("line: " << line);
  REQUIRE(line.rfind(key + ": ", 0) == 0);
  const std::string num = line.substr(key.size() + 2);
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  REQUIRE(!num.empty());
  CHECK(*end == '\0');
  return v;
}

}  // namespace

TEST_CASE("bench convert prints the table and ends with the two ratio lines", "[cli][bench]") {
  const fp8emu::testing::CliResult r = fp8emu::testing::run_cli("bench convert --elements 100000 --repeat 1");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
  REQUIRE(lines.size() >= 2);
  CHECK(r.output.find("bulk") != std::string::npos);
  CHECK(r.output.find("copy") != std::string::npos);
  CHECK(value_of(lines.back(), "fraction_of_copy_bandwidth") > 0.0);
#ifdef FP8EMU_BENCH_CUDA_BASELINE
  CHECK(value_of(lines[lines.size() - 2], "speedup_vs_cuda_host_per_thread") > 0.0);
#else
  CHECK(r.output.find("cuda_host    unavailable") != std::string::npos);
  CHECK(r.output.find("speedup_vs_cuda_host_per_thread") == std::string::npos);
#endif
}

TEST_CASE("bench convert rejects bad arguments with exit 2", "[cli][bench][errors]") {
  for (const char* args : {"bench convert --elements 0", "bench convert --repeat 0"}) {
    const fp8emu::testing::CliResult r = fp8emu::testing::run_cli(args);
    INFO(args << ": " << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("error") != std::string::npos);
  }
}

TEST_CASE("bench gemm times the baselines and ends with the best-baseline ratios", "[cli][bench]") {
  const fp8emu::testing::CliResult r = fp8emu::testing::run_cli("bench gemm --sizes 96,64 --repeat 1");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
  // Last: the best baseline, then each model's ratio (fp32 last).
  REQUIRE(lines.size() >= 7);
  CHECK(value_of(lines.back(), "fp32_vs_best_sgemm") > 0.0);
  CHECK(value_of(lines[lines.size() - 2], "hopper_vs_best_sgemm") > 0.0);
  CHECK(value_of(lines[lines.size() - 3], "ada_vs_best_sgemm") > 0.0);
  CHECK(value_of(lines[lines.size() - 4], "block_vs_best_sgemm") > 0.0);
  CHECK(value_of(lines[lines.size() - 5], "hopper_bf16_vs_best_sgemm") > 0.0);
  const std::string best = lines[lines.size() - 6];
  // The Eigen module for the processor's ISA level, or a line saying why there is none.
  const bool isa = r.output.find("eigen_isa_sgemm = Eigen") != std::string::npos;
  CHECK((isa || r.output.find("eigen_isa_sgemm: ") != std::string::npos));
#ifdef FP8EMU_BENCH_EIGEN_MODULES
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    CHECK(isa);
    CHECK(r.output.find("built for x86-64-v") != std::string::npos);
  }
#endif
  CHECK(r.output.find("models: fp8emu's ") != std::string::npos);
#ifdef FP8EMU_BENCH_OPENBLAS
  CHECK(r.output.find("openblas_sgemm = OpenBLAS") != std::string::npos);
  CHECK((best == "best_baseline: openblas_sgemm" || best == "best_baseline: eigen_sgemm" ||
         (isa && best == "best_baseline: eigen_isa_sgemm")));
#else
  CHECK(r.output.find("openblas_sgemm: not in this build") != std::string::npos);
  CHECK((best == "best_baseline: eigen_sgemm" || (isa && best == "best_baseline: eigen_isa_sgemm")));
#endif
}

TEST_CASE("bench gemm rejects bad sizes by name", "[cli][bench]") {
  const fp8emu::testing::CliResult r = fp8emu::testing::run_cli("bench gemm --sizes 0");
  CHECK(r.code == 2);
  CHECK(r.output.find("--sizes must be in [1, 16384], got 0") != std::string::npos);
}

TEST_CASE("bench train times one epoch of FP32 and FP8 and ends with the step ratio", "[cli][bench]") {
  INFO("Fashion-MNIST is missing: run scripts/setup (apt-get install dataset-fashion-mnist)");
  const fp8emu::testing::CliResult r =
      fp8emu::testing::run_cli("bench train --train-samples 640 --test-samples 100 --threads 1 --repeat 2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
  // Header, column names, one row per run, the ratio; nothing of train's own summary.
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].find("10 steps of batch 64") != std::string::npos);
  CHECK(lines[0].find("best of 2") != std::string::npos);
  for (const auto& [row, name] : {std::pair{2, "fp32"}, std::pair{3, "fp8_delayed"}}) {
    std::istringstream in(lines[std::size_t(row)]);
    std::string run;
    long steps = 0;
    double ms = 0, seconds = 0;
    in >> run >> steps >> ms >> seconds;
    CHECK(run == name);
    CHECK(steps == 10);
    CHECK(ms > 0.0);
    CHECK(seconds == Approx(ms * steps / 1e3).epsilon(0.01).margin(0.002));
  }
  CHECK(value_of(lines.back(), "fp8_step_vs_fp32_step") > 0.0);
  CHECK(r.output.find("results:") == std::string::npos);
}

TEST_CASE("bench train rejects bad options by name", "[cli][bench][errors]") {
  for (const auto& [args, message] :
       {std::pair{"bench train --recipe all", "--recipe takes one recipe"},
        std::pair{"bench train --accumulation nope --train-samples 64", "nope"},
        std::pair{"bench train --repeat 0 --train-samples 64", "--repeat must be at least 1"},
        std::pair{"bench train --data-dir /nonexistent/fmnist", "apt-get install dataset-fashion-mnist"}}) {
    const fp8emu::testing::CliResult r = fp8emu::testing::run_cli(args);
    INFO(args << ": " << r.output);
    CHECK(r.code != 0);
    CHECK(r.output.find(message) != std::string::npos);
  }
}

TEST_CASE("bench lm times train-lm's step in FP32, BF16 and every FP8 recipe", "[cli][bench][lm]") {
  const std::string corpus = fp8emu::testing::word_salad_corpus("bench-lm");
  const fp8emu::testing::CliResult r = fp8emu::testing::run_cli(
      "bench lm --steps 3 --repeat 2 --d-model 16 --heads 2 --layers 1 --ffn 32 --seq-len 16 --batch-size 4 "
      "--threads 1 --text " + corpus);
  std::remove(corpus.c_str());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.output);
#ifdef FP8EMU_BENCH_OPENBLAS
  // header, blank, table head (2 lines), 7 runs, the 2 OpenBLAS-GEMM runs, blank, 5 + 5 ratios
  REQUIRE(lines.size() == 24);
  for (int i = 0; i < 2; ++i) {
    const std::string& row = lines[std::size_t(11 + i)];
    INFO(row);
    REQUIRE(row.rfind(std::string("| ") + (i == 0 ? "fp32" : "bf16") + "_openblas | ", 0) == 0);
    CHECK(std::stod(row.substr(row.find(" | ") + 3)) > 0.0);
  }
  const std::size_t ratios = 14;
#else
  REQUIRE(lines.size() == 17);  // header, blank, table head (2 lines), 7 runs, blank, 5 ratios
  const std::size_t ratios = 12;
#endif
  CHECK(lines[0].find("d-model 16, layers 1") != std::string::npos);
  CHECK(lines[0].find("mean of steps 2..3 of each run, best of 2") != std::string::npos);
  const char* runs[] = {"fp32", "bf16", "fp8_delayed", "fp8_current", "fp8_mxfp8", "fp8_block", "fp8_nvfp4"};
  for (int i = 0; i < 7; ++i) {
    const std::string& row = lines[std::size_t(4 + i)];
    INFO(row);
    REQUIRE(row.rfind(std::string("| ") + runs[i] + " | ", 0) == 0);
    const double ms = std::stod(row.substr(row.find(" | ") + 3));
    CHECK(ms > 0.0);
  }
  CHECK(lines[4].find("| 1.00 |") != std::string::npos);  // fp32 against itself
  CHECK(lines[5].rfind("| 1.00 |") == lines[5].size() - 8);  // bf16 against itself
  for (int i = 0; i < 5; ++i)
    CHECK(value_of(lines[ratios + std::size_t(i)], std::string("lm_step_speedup_") + runs[2 + i] + "_vs_bf16") > 0.0);
#ifdef FP8EMU_BENCH_OPENBLAS
  for (int i = 0; i < 5; ++i)
    CHECK(value_of(lines[ratios + 5 + std::size_t(i)], std::string("lm_step_") + runs[2 + i] + "_over_fp32_openblas") >
          0.0);
#endif
}

TEST_CASE("bench lm and bench gpu reject bad options by name", "[cli][bench][errors]") {
  for (const auto& [args, message] :
       {std::pair{"bench lm --steps 1", "--steps must be at least 2"},
        std::pair{"bench lm --repeat 0", "--repeat must be at least 1"},
        std::pair{"bench lm --backend reference", "--backend must be emulated or cuda"},
        std::pair{"bench lm --library-gemms", "it needs --backend cuda"},
        std::pair{"bench gpu --lm-steps 1", "--lm-steps must be 0"},
        std::pair{"bench gpu --lm-text /nonexistent/corpus", "does not exist"}}) {
    const fp8emu::testing::CliResult r = fp8emu::testing::run_cli(args);
    INFO(args << ": " << r.output);
    CHECK(r.code != 0);
    CHECK(r.output.find(message) != std::string::npos);
  }
}
