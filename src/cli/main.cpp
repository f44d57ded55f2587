// The fp8emu command-line tool: one executable, one subcommand per job.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "accumulation_error/accumulation_error.hpp"
#include "char_lm/train_lm.hpp"
#include "fashion_mnist/train.hpp"
#include "fp8emu/config.hpp"
#include "fp8emu/scaling/scale_trace.hpp"
#include "bench.hpp"
#include "bench_gpu.hpp"
#include "doctor.hpp"
#include "convert_tools.hpp"
#include "gemm_tools.hpp"
#include "mma_check.hpp"
#include "validate.hpp"
#include <iostream>
#include "fp8emu/util/error.hpp"

namespace {
// OpenMP threads that wait at a barrier spin for ~300k iterations by default (libgomp). On a machine
// whose cores are shared with other work, that spinning starves the threads that have work and made
// training 3-10x slower in our measurements (docs: README, "Performance"); a short spin costs ~5 %
// on idle cores. The runtime reads its settings when it loads, before main, so unless the user chose
// a policy, set a short spin count and re-execute once. Results never depend on it.
void prefer_short_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("FP8EMU_NO_REEXEC")) return;
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  ::setenv("FP8EMU_NO_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run with the defaults
}
}  // namespace

int main(int argc, char** argv) {
  using namespace fp8emu;
  prefer_short_openmp_spin(argv);
  CLI::App app{"fp8emu: bit-exact FP8 emulation and FP8-vs-FP32 training experiments"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FP8EMU_VERSION_STRING);

  experiments::TrainConfig cfg;
  std::string algo = "max", mx_rule = "te";
  bool quiet = false, unfused = false;
  CLI::App* train = app.add_subcommand(
      "train", "Train the same MLP on Fashion-MNIST in FP32 and in emulated FP8, side by side");
  train->add_option("--data-dir", cfg.data_dir, "Folder with the Fashion-MNIST IDX files")
      ->capture_default_str();
  train->add_option("--out", cfg.out_dir, "Output folder (default results/<timestamp>)");
  train->add_option("--epochs", cfg.epochs, "Epochs per run")->capture_default_str();
  train->add_option("--batch-size", cfg.batch_size, "Mini-batch size")->capture_default_str();
  train->add_option("--train-samples", cfg.train_samples, "Use the first N training images")
      ->capture_default_str();
  train->add_option("--test-samples", cfg.test_samples, "Use the first N test images")
      ->capture_default_str();
  train->add_option("--seed", cfg.seed, "Seed of the initial weights and batch order")
      ->capture_default_str();
  train->add_option("--threads", cfg.threads, "OpenMP threads (0: OpenMP default)")
      ->capture_default_str();
  train->add_option("--recipe", cfg.recipe, "FP8 recipe: delayed, current, mxfp8, block, or all (FP32 and every recipe)")
      ->capture_default_str();
  train->add_option("--format", cfg.format,
                    "FP8 formats for every recipe: hybrid (E4M3 fwd, E5M2 bwd) or e4m3 "
                    "(default: TE's per recipe, hybrid for delayed/current, e4m3 for mxfp8/block)");
  train->add_option("--amax-history-len", cfg.delayed.amax_history_len, "Delayed scaling amax_history_len")
      ->capture_default_str();
  train->add_option("--amax-compute-algo", algo, "Delayed scaling amax_compute_algo: max or most_recent")
      ->capture_default_str();
  train->add_option("--margin", cfg.delayed.margin, "Delayed scaling margin")->capture_default_str();
  train->add_flag("--unfused-update", unfused, "Delayed scaling: TE's unfused (Python) update path");
  train->add_flag("--pow2", cfg.current.use_power_2_scales, "Current scaling: power-of-2 scales");
  train->add_option("--amax-epsilon", cfg.current.amax_epsilon, "Current and block scaling amax_epsilon")
      ->capture_default_str();
  train->add_flag("--block-f32-scales", cfg.block.use_f32_scales,
                  "Block scaling: plain fp32 scales instead of powers of 2");
  train->add_option("--mxfp8-rule", mx_rule, "MXFP8 E8M0 scale rule: te (round up) or ocp (floor)")
      ->capture_default_str();
  train->add_option("--hidden", cfg.hidden, "Hidden layer widths")->delimiter(',')->capture_default_str();
  train->add_option("--activation", cfg.activation, "relu or gelu")->capture_default_str();
  train->add_option("--accumulation", cfg.accumulation,
                    "FP8 GEMM accumulation (delayed/current): fp32, exact, hopper or ada (TE's fast/split wrappers)")
      ->capture_default_str();
  train->add_option("--optimizer", cfg.optimizer, "adam or sgd (momentum 0.9)")->capture_default_str();
  train->add_option("--lr", cfg.lr, "Learning rate")->capture_default_str();
  train->add_flag("--quiet", quiet, "No progress output");
  train->add_option("--backend", cfg.backend,
                    "Where the Linear layers run: emulated, cuda (falls back to emulated without a usable GPU) or "
                    "reference (FP32); for all layers or per layer, e.g. fc1=cuda,fc3=reference")
      ->capture_default_str();
  train->add_flag("--strict", cfg.strict, "With --backend cuda: fail instead of falling back to the emulator");
  train->add_option("--checkpoint-every", cfg.checkpoint_every,
                    "Write <out>/checkpoint.bin every N epochs and at the end of each run (0: never)")
      ->capture_default_str();
  train->add_option("--resume", cfg.resume, "Continue the interrupted run in this folder (same flags as that run)");

  std::string st_recipe, st_format = "e4m3", st_algo = "max", st_amax;
  scaling::DelayedScaling st_delayed;
  scaling::CurrentScaling st_current;
  CLI::App* trace = app.add_subcommand(
      "scale-trace", "Feed an amax sequence to one per-tensor recipe and print how the scale evolves (CSV)");
  trace->add_option("--recipe", st_recipe, "delayed or current")->required();
  trace->add_option("--format", st_format, "Element format whose max the scale targets: e4m3 or e5m2")
      ->capture_default_str();
  trace->add_option("--history-len", st_delayed.amax_history_len, "Delayed: amax_history_len")
      ->capture_default_str();
  trace->add_option("--algo", st_algo, "Delayed: amax_compute_algo, max or most_recent")->capture_default_str();
  trace->add_option("--margin", st_delayed.margin, "Delayed: margin")->capture_default_str();
  trace->add_flag("--unfused", "Delayed: TE's unfused update path (always rolls)");
  trace->add_flag("--pow2", st_current.use_power_2_scales, "Current: power-of-2 scales");
  trace->add_option("--epsilon", st_current.amax_epsilon, "Current: amax_epsilon")->capture_default_str();
  trace->add_option("--amax", st_amax, "Comma-separated amax values (decimal, inf, nan, hex floats)")
      ->required();

  experiments::AccumulationErrorConfig ae;
  bool ae_quiet = false;
  CLI::App* accerr = app.add_subcommand(
      "accumulation-error", "FP8 GEMM relative error of each accumulation model vs the exact product, K = 256..k-max");
  accerr->add_option("--out", ae.out_dir, "Output folder (default results/accumulation-error-<timestamp>)");
  accerr->add_option("--m", ae.m, "Rows of A")->capture_default_str();
  accerr->add_option("--n", ae.n, "Rows of B (columns of D)")->capture_default_str();
  accerr->add_option("--k-max", ae.k_max, "Largest K (K doubles from 256)")->capture_default_str();
  accerr->add_option("--seed", ae.seed, "Seed of the random inputs")->capture_default_str();
  accerr->add_flag("--quiet", ae_quiet, "No progress output");

  cli::GemmOptions gemm;
  CLI::App* gemm_cmd = app.add_subcommand("gemm", "Scaled FP8 GEMM on .npy files with a chosen accumulation model");
  gemm_cmd->add_option("--a", gemm.a, "A.npy: [M, K] uint8 FP8 codes, or float32 (quantized with current scaling)")->required();
  gemm_cmd->add_option("--b", gemm.b, "B.npy: [N, K] (tn) or [K, N] (nn), uint8 codes or float32")->required();
  gemm_cmd->add_option("--out", gemm.out, "D.npy to write: [M, N] float32")->required();
  gemm_cmd->add_option("--layout", gemm.layout, "tn (D = A B^T, Hopper's FP8 layout) or nn (D = A B)")->capture_default_str();
  gemm_cmd->add_option("--format-a", gemm.format_a, "e4m3 or e5m2")->capture_default_str();
  gemm_cmd->add_option("--format-b", gemm.format_b, "e4m3 or e5m2 (E5M2 x E5M2 is rejected)")->capture_default_str();
  gemm_cmd->add_option("--scale-inv-a", gemm.scale_inv_a, "Dequantization scale of uint8 A")->capture_default_str();
  gemm_cmd->add_option("--scale-inv-b", gemm.scale_inv_b, "Dequantization scale of uint8 B")->capture_default_str();
  gemm_cmd->add_option("--accumulation", gemm.accumulation, "exact, fp32, hopper or ada")->capture_default_str();
  gemm_cmd->add_option("--promotion", gemm.promotion, "Promote to fp32 every N K-elements (0: fast accumulation)")
      ->capture_default_str();
  gemm_cmd->add_option("--output", gemm.output, "D type: fp32, bf16 (uint16 bits), fp16, e4m3, e5m2 (uint8 codes)")
      ->capture_default_str();
  gemm_cmd->add_option("--d-scale", gemm.d_scale, "FP8 outputs: D = Q(t * d_scale)")->capture_default_str();
  gemm_cmd->add_option("--alpha", gemm.alpha, "D = alpha * (A B) * scales + beta * C + bias")->capture_default_str();
  gemm_cmd->add_option("--beta", gemm.beta, "Weight of C (needs --c)")->capture_default_str();
  gemm_cmd->add_option("--c", gemm.c, "C.npy: [M, N] float32");
  gemm_cmd->add_option("--bias", gemm.bias, "bias.npy: [N] float32");
  std::string cmp_x, cmp_y;
  CLI::App* compare = app.add_subcommand("compare", "Compare two float32 .npy arrays bit for bit (ULP, errors)");
  compare->add_option("X", cmp_x, "First .npy (e.g. a GPU dump)")->required();
  compare->add_option("Y", cmp_y, "Second .npy (e.g. fp8emu gemm output)")->required();

  std::vector<int> bench_sizes{1024, 4096};
  int bench_repeat = 5;
  CLI::App* doctor = app.add_subcommand("doctor", "What this machine offers: CUDA, GPUs, FP8 features, backends");
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks against a baseline measured in the same run");
  CLI::App* bench_gemm = bench->add_subcommand("gemm", "FP8 GEMM accumulation models vs Eigen's fp32 GEMM");
  bench_gemm->add_option("--sizes", bench_sizes, "M = N = K values")->delimiter(',')->capture_default_str();
  bench_gemm->add_option("--repeat", bench_repeat, "Runs per measurement (best is kept)")->capture_default_str();
  std::size_t convert_elements = std::size_t(1) << 26;
  int convert_repeat = 5;
  CLI::App* bench_convert =
      bench->add_subcommand("convert", "fp32 -> E4M3 cast with scale and amax: bulk kernel vs CUDA's host code and a copy");
  bench_convert->add_option("--elements", convert_elements, "Array length")->capture_default_str();
  bench_convert->add_option("--repeat", convert_repeat, "Runs per measurement (best is kept)")->capture_default_str();
  cli::BenchGpuOptions bench_gpu_opt;
  CLI::App* bench_gpu = bench->add_subcommand("gpu", "GPU: cuBLASLt FP8/BF16/FP32 GEMM TFLOP/s, quantize GB/s, MLP step");
  bench_gpu->add_option("--sizes", bench_gpu_opt.sizes, "M = N = K values")->delimiter(',')->capture_default_str();
  bench_gpu->add_option("--repeat", bench_gpu_opt.repeat, "Timed runs per measurement")->capture_default_str();
  bench_gpu->add_option("--budget", bench_gpu_opt.budget_seconds, "Seconds for the whole benchmark (larger sizes are skipped)")
      ->capture_default_str();
  bench->require_subcommand(1);

  cli::ValidateOptions validate_opt;
  CLI::App* validate = app.add_subcommand("validate", "GPU kernels vs the emulator, bit for bit (needs an sm_89+ GPU)");
  validate->add_option("--sizes", validate_opt.sizes, "Matrix sizes s (s x s+2 casts; GEMM M=s, N=s+3, K=2s+1)")
      ->delimiter(',')->capture_default_str();
  validate->add_option("--seed", validate_opt.seed, "Seed of the random inputs")->capture_default_str();

  cli::MmaCheckOptions mma;
  CLI::App* check = app.add_subcommand(
      "mma-check", "Replay recorded FP8 tensor-core dot products (32 products per row) through the model");
  check->add_option("--arch", mma.arch, "hopper (wgmma k32) or ada (mma.sync m16n8k32)")->required();
  check->add_option("--format", mma.format, "e4m3 or e5m2")->required();
  check->add_option("--output", mma.output, "Accumulator/output: fp32 or fp16")->capture_default_str();
  check->add_option("--a", mma.a, "a file: 32 hex fp32 values per line")->required();
  check->add_option("--b", mma.b, "b file: 32 hex fp32 values per line")->required();
  check->add_option("--c", mma.c, "c file: binary fp32 per line; omit for an accumulator starting at 0");
  check->add_option("--d", mma.d, "d file: the recorded results, binary fp32 per line")->required();
  mma.output = "fp32";

  cli::ExplainOptions explain;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "Show how one value is stored in a small format: code, fields, error, and what each system stores");
  explain_cmd->add_option("VALUE", explain.value,
                          "Decimal, hex float (0x1.8p3), inf, -inf, nan, -nan; with --code, a raw code (0x38)")
      ->required();
  explain_cmd->add_option("--format", explain.format, "Format, or all: " + cli::format_names())->capture_default_str();
  explain_cmd->add_flag("--code", explain.code, "Read VALUE as a raw code of --format");

  cli::TableOptions table;
  CLI::App* table_cmd = app.add_subcommand("table", "Every code of a small format: fields, exact value, class");
  table_cmd->add_option("--format", table.format, cli::format_names())->required();
  table_cmd->add_flag("--csv", table.csv, "CSV with a header instead of aligned text");

  cli::ConvertOptions conv;
  CLI::App* convert_cmd = app.add_subcommand(
      "convert", "Convert raw binary or .npy files between float32, float16, bfloat16 and the small formats");
  convert_cmd->add_option("IN", conv.in, "Input: .npy (type from its descr) or raw little-endian (needs --from)")
      ->required();
  convert_cmd->add_option("OUT", conv.out, "Output: .npy (keeps the input's shape) or raw (flat)")->required();
  convert_cmd->add_option("--to", conv.to, "Output type: float32, float16, bfloat16 or a format name")->required();
  convert_cmd->add_option("--from", conv.from, "Input type (required for raw input)");
  convert_cmd->add_option("--format", conv.format, "Format of uint8 (|u1) .npy input codes");
  convert_cmd->add_option("--scale", conv.scale,
                          "To a small format: code = Q(x * scale); from one: value * fp32(1/scale) (default 1)");
  convert_cmd->add_option("--policy", conv.policy,
                          "cuda (default), cuda-nosat, ml_dtypes, ml_dtypes-saturate, pytorch, pytorch-2.12");
  convert_cmd->add_option("--rounding", conv.rounding,
                          "nearest (default; E8M0: up), zero, up, down, stochastic (needs --seed)");
  convert_cmd->add_option("--seed", conv.seed, "Seed of std::mt19937 for stochastic rounding (32 bits per element)");
  convert_cmd->add_flag("--amax", conv.amax, "Print the input's amax (max |x|, NaN ignored)");

  experiments::TrainLmConfig lm;
  bool lm_quiet = false;
  CLI::App* train_lm = app.add_subcommand(
      "train-lm", "Train a character-level transformer LM on real text in FP32 and FP8 side by side");
  train_lm->add_option("--text", lm.text, "Text file, or folder of text files (default: Debian's fortunes)")
      ->capture_default_str();
  train_lm->add_option("--out", lm.out_dir, "Output folder (default results/lm-<timestamp>)");
  train_lm->add_option("--steps", lm.steps, "Optimizer steps per run")->capture_default_str();
  train_lm->add_option("--batch-size", lm.batch_size, "Sequences per step")->capture_default_str();
  train_lm->add_option("--seq-len", lm.seq_len, "Tokens (bytes) per sequence")->capture_default_str();
  train_lm->add_option("--d-model", lm.d_model, "Hidden size")->capture_default_str();
  train_lm->add_option("--heads", lm.heads, "Attention heads")->capture_default_str();
  train_lm->add_option("--layers", lm.layers, "Transformer layers")->capture_default_str();
  train_lm->add_option("--ffn", lm.ffn, "MLP hidden size")->capture_default_str();
  train_lm->add_option("--norm", lm.norm, "layernorm or rmsnorm")->capture_default_str();
  train_lm->add_option("--mlp-activation", lm.mlp_activation, "gelu or swiglu")->capture_default_str();
  train_lm->add_option("--activation-dtype", lm.activation_dtype, "fp32 or bf16 (activations stored in bf16, as TE)")
      ->capture_default_str();
  train_lm->add_option("--recipe", lm.recipe, "FP8 recipe: delayed, current, mxfp8, block, or all")->capture_default_str();
  train_lm->add_option("--format", lm.format, "hybrid or e4m3 (default: each recipe's TE default)");
  train_lm->add_option("--accumulation", lm.accumulation, "fp32, exact, hopper or ada")->capture_default_str();
  train_lm->add_option("--backend", lm.backend,
                       "emulated, cuda or reference, for all or per layer (l0.qkv, l0.proj, l0.fc1, l0.fc2, ..., head)")
      ->capture_default_str();
  train_lm->add_option("--layer-recipe", lm.layer_recipe,
                       "Per-layer recipe of the FP8 runs, e.g. l0.qkv=current,l1.fc2=block");
  train_lm->add_option("--layer-accumulation", lm.layer_accumulation,
                       "Per-layer GEMM accumulation of the FP8 runs, e.g. l0.fc1=fp32 (per-tensor recipes)");
  train_lm->add_flag("--strict", lm.strict, "With --backend cuda: fail instead of falling back to the emulator");
  train_lm->add_flag("--fp8-head", lm.fp8_head, "Run the LM head in FP8 too (default: FP32, as TE practice)");
  train_lm->add_option("--lr", lm.lr, "Adam learning rate")->capture_default_str();
  train_lm->add_option("--seed", lm.seed, "Seed of the initial weights and the batches")->capture_default_str();
  train_lm->add_option("--eval-every", lm.eval_every, "Validation loss every N steps")->capture_default_str();
  train_lm->add_option("--eval-batches", lm.eval_batches, "Fixed validation batches")->capture_default_str();
  train_lm->add_option("--sample-chars", lm.sample_chars, "Length of each run's generated sample")->capture_default_str();
  train_lm->add_option("--threads", lm.threads, "OpenMP threads (0: default)")->capture_default_str();
  train_lm->add_option("--checkpoint-every", lm.checkpoint_every, "Write checkpoint.bin every N steps (0: never)")
      ->capture_default_str();
  train_lm->add_option("--resume", lm.resume, "Continue the run whose checkpoint.bin is in this folder");
  train_lm->add_flag("--quiet", lm_quiet, "No progress output");

  const std::vector<std::string> args = cli::protect_negative_values(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0 through CLI11; every other command-line error is bad input:
    // one line, exit 2 (as the tools' own input errors).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "fp8emu: error: %s (see fp8emu --help or fp8emu <command> --help)\n", e.what());
    return 2;
  }
  if (*explain_cmd) return cli::run_explain(explain, std::cout, std::cerr);
  if (*table_cmd) return cli::run_table(table, std::cout, std::cerr);
  if (*convert_cmd) return cli::run_convert(conv, std::cout, std::cerr);
  if (*check) return cli::run_mma_check(mma, std::cout, std::cerr);
  if (*gemm_cmd) return cli::run_gemm(gemm, std::cout, std::cerr);
  if (*doctor) return cli::run_doctor(std::cout);
  if (*bench_gemm) return cli::run_bench_gemm(bench_sizes, bench_repeat, std::cout);
  if (*bench_convert) return cli::run_bench_convert(convert_elements, convert_repeat, std::cout);
  if (*bench_gpu) return cli::run_bench_gpu(bench_gpu_opt, std::cout, std::cerr);
  if (*validate) return cli::run_validate(validate_opt, std::cout, std::cerr);
  if (*compare) return cli::run_compare(cmp_x, cmp_y, std::cout, std::cerr);
  try {
    if (*train) {
      cfg.delayed.fused_update = !unfused;
      cfg.block.amax_epsilon = cfg.current.amax_epsilon;
      if (mx_rule == "te") cfg.mxfp8.rule = scaling::E8M0Rule::kTransformerEngine;
      else if (mx_rule == "ocp") cfg.mxfp8.rule = scaling::E8M0Rule::kOcp;
      else FP8EMU_FAIL("unknown --mxfp8-rule '", mx_rule, "' (accepted: te, ocp)");
      if (algo == "max") cfg.delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMax;
      else if (algo == "most_recent") cfg.delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMostRecent;
      else FP8EMU_FAIL("unknown --amax-compute-algo '", algo, "' (accepted: max, most_recent)");
      cfg.progress = !quiet;
      experiments::run_train(cfg);
    }
    if (*train_lm) {
      lm.progress = !lm_quiet;
      experiments::run_train_lm(lm);
    }
    if (*accerr) {
      ae.progress = !ae_quiet;
      experiments::run_accumulation_error(ae);
    }
    if (*trace) {
      Format fmt;
      if (st_format == "e4m3") fmt = Format::kE4M3;
      else if (st_format == "e5m2") fmt = Format::kE5M2;
      else FP8EMU_FAIL("unknown --format '", st_format, "' (accepted: e4m3, e5m2)");
      const std::vector<float> amax = scaling::parse_amax_list(st_amax);
      std::vector<scaling::ScaleTraceRow> rows;
      if (st_algo == "max") st_delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMax;
      else if (st_algo == "most_recent") st_delayed.amax_compute_algo = scaling::AmaxComputeAlgo::kMostRecent;
      else FP8EMU_FAIL("unknown --algo '", st_algo, "' (accepted: max, most_recent)");
      st_delayed.fused_update = trace->count("--unfused") == 0;
      st_delayed.fp8_format = scaling::RecipeFormat::kE4M3;  // the trace's format is given by --format
      const std::optional<scaling::Recipe> picked = scaling::find_recipe(st_recipe, {st_delayed, st_current});
      FP8EMU_CHECK(picked && scaling::uses_per_tensor_scales(*picked), "scale-trace: unknown --recipe '", st_recipe,
                   "' (accepted: delayed, current; mxfp8 and block scales are per block)");
      rows = scaling::trace_scales(*picked, fmt, amax);
      std::fputs(scaling::trace_csv(rows).c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8emu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
