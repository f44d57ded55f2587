// `fp8emu bench gpu` (see bench_gpu.hpp).
#include "bench_gpu.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <sstream>
#include <string>

#include "bench_lm.hpp"
#include "char_lm/train_lm.hpp"
#include "fp8emu/backend/select.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu_internal/gpu_bench.hpp"
#endif

namespace fp8emu::cli {

int run_bench_gpu(const BenchGpuOptions& opt, std::ostream& out, std::ostream& err) {
  for (const int n : opt.sizes)
    if (n < 16 || n > 32768 || n % 16 != 0) {
      err << "fp8emu bench gpu: error: --sizes must be multiples of 16 in [16, 32768], got " << n << "\n";
      return 2;
    }
  if (opt.repeat < 1 || opt.sizes.empty()) {
    err << "fp8emu bench gpu: error: --repeat must be >= 1 and --sizes not empty\n";
    return 2;
  }
  if (opt.lm_steps == 1 || opt.lm_steps < 0) {
    err << "fp8emu bench gpu: error: --lm-steps must be 0 (no train-lm table) or at least 2, got " << opt.lm_steps
        << "\n";
    return 2;
  }
  const backend::CudaStatus& st = backend::cuda_status();
  // The train-lm table's corpus, checked before minutes of GEMMs: a missing --lm-text is an error;
  // without Debian's fortunes (the default) the table is left out with a note.
  int lm_steps = opt.lm_steps;
  std::string lm_note;
  if (lm_steps > 0) {
    const std::string text = opt.lm_text.empty() ? experiments::TrainLmConfig{}.text : opt.lm_text;
    std::error_code ec;
    if (!std::filesystem::exists(text, ec)) {
      if (!opt.lm_text.empty()) {
        err << "fp8emu bench gpu: error: --lm-text " << text << " does not exist\n";
        return 2;
      }
      lm_note = "(left out: train-lm's default corpus " + text +
                " is missing; install Debian's fortunes or give --lm-text)\n";
      lm_steps = 0;
    }
  }
  if (!st.usable()) {
    err << "fp8emu bench gpu: no usable GPU, nothing to measure: " << st.why_not() << "\n";
    return 2;
  }
#if defined(FP8EMU_HAVE_CUDA)
  using cuda::BenchGemm;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto fmt = [](double v, const char* f) {
    char b[32];
    std::snprintf(b, sizeof b, f, v);
    return std::string(b);
  };
  int ok = 0, failed = 0;
  out << "# fp8emu bench gpu\n\nGPU: " << cuda::bench_gpu_name() << "\n";
  out << "\n## GEMM throughput, TFLOP/s (M = N = K, TN, mean of " << opt.repeat
      << " runs after a warm-up; FP8: E4M3 x E4M3 -> bf16 with per-tensor scales)\n\n";
  const BenchGemm kinds[] = {BenchGemm::kFp8FastAccum, BenchGemm::kFp8, BenchGemm::kBf16,
                             BenchGemm::kTf32,         BenchGemm::kFp32, BenchGemm::kMmaSync};
  out << "| size |";
  for (const BenchGemm k : kinds) out << " " << cuda::to_string(k) << " |";
  out << "\n|---:|";
  for (std::size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) out << "---:|";
  out << "\n";
  double last_seconds[6] = {0, 0, 0, 0, 0, 0};
  bool stopped[6] = {false, false, false, false, false, false};
  double fp8_fast = 0.0, bf16 = 0.0;  // at the largest size where both ran
  int ratio_size = 0;
  std::string notes;
  int prev_n = 0;
  for (const int n : opt.sizes) {
    out << "| " << n << " |";
    double fp8_this = 0.0;
    for (std::size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k) {
      // Stop a kind when this size (cubic growth from the last one) would overrun the budget.
      const double scale = prev_n ? double(n) * n * n / (double(prev_n) * prev_n * prev_n) : 1.0;
      const double predicted = last_seconds[k] * scale * double(opt.repeat + 1);
      if (stopped[k] || elapsed() + predicted > opt.budget_seconds) {
        stopped[k] = true;
        out << " skipped |";
        continue;
      }
      err << "bench gpu: " << cuda::to_string(kinds[k]) << " " << n << "\n";
      const cuda::Timing t = cuda::bench_gemm(kinds[k], n, opt.repeat);
      if (!t.error.empty()) {
        ++failed;
        stopped[k] = true;
        out << " failed |";
        notes += "- " + std::string(cuda::to_string(kinds[k])) + " at " + std::to_string(n) + ": " + t.error + "\n";
        continue;
      }
      ++ok;
      last_seconds[k] = t.seconds;
      out << " " << fmt(t.rate, "%.1f") << " |";
      if (kinds[k] == BenchGemm::kFp8FastAccum) fp8_this = t.rate;
      if (kinds[k] == BenchGemm::kBf16 && fp8_this > 0.0) {
        fp8_fast = fp8_this;
        bf16 = t.rate;
        ratio_size = n;
      }
    }
    out << "\n";
    prev_n = n;
  }
  if (!notes.empty()) out << "\n" << notes;
  out << "\nSkipped: the size was predicted to run past the time budget (" << fmt(opt.budget_seconds, "%.0f")
      << " s for the whole command).\n";

  out << "\n## Cast kernels vs device-to-device copy (2^28 floats)\n\n| kernel | GB/s | ms |\n|---|---:|---:|\n";
  const std::size_t n = std::size_t(1) << 28;
  err << "bench gpu: quantize and memcpy\n";
  const cuda::Timing q = cuda::bench_quantize(n, opt.repeat), c = cuda::bench_memcpy(n, opt.repeat);
  const cuda::Timing ct = cuda::bench_cast_transpose(1 << 14, 1 << 14, opt.repeat);
  const cuda::Timing mx = cuda::bench_block_cast_both(1 << 14, 1 << 14, true, opt.repeat);
  const cuda::Timing b1 = cuda::bench_block_cast_both(1 << 14, 1 << 14, false, opt.repeat);
  const cuda::Timing t2 = cuda::bench_tile_cast_both(1 << 14, 1 << 14, opt.repeat);
  for (const auto& [name, t] :
       {std::pair<const char*, cuda::Timing>{"quantize fp32 -> E4M3 (amax, counts): 5 bytes/element", q},
        std::pair<const char*, cuda::Timing>{"cast_transpose fp32 -> E4M3 row-wise + column-wise, 16384 x 16384 (amax, counts): 6 bytes/element", ct},
        std::pair<const char*, cuda::Timing>{"MXFP8 fused cast fp32 -> E4M3 row-wise + column-wise, 16384 x 16384 (1x32 and 32x1 E8M0 blocks, scale_inv, counts): 6 + 10/32 bytes/element", mx},
        std::pair<const char*, cuda::Timing>{"1x128 fused cast fp32 -> E4M3 row-wise + column-wise, 16384 x 16384 (1x128 and 128x1 blocks, pow2 scale_inv, counts): 6 + 8/128 bytes/element", b1},
        std::pair<const char*, cuda::Timing>{"128x128 tile cast fp32 -> E4M3 row-wise + column-wise in one pass, 16384 x 16384 (pow2 tile scales, counts): 6 + 8/16384 bytes/element", t2},
        std::pair<const char*, cuda::Timing>{"cudaMemcpy device to device: 8 bytes/element", c}}) {
    if (t.error.empty()) {
      ++ok;
      out << "| " << name << " | " << fmt(t.rate, "%.0f") << " | " << fmt(t.seconds * 1e3, "%.3f") << " |\n";
    } else {
      ++failed;
      out << "| " << name << " | failed: " << t.error << " | |\n";
    }
  }
  if (q.error.empty() && c.error.empty() && c.rate > 0.0)
    out << "\nquantize_vs_memcpy_bandwidth: " << fmt(q.rate / c.rate, "%.2f") << "\n";
  if (ct.error.empty() && c.error.empty() && c.rate > 0.0)
    out << "cast_transpose_vs_memcpy_bandwidth: " << fmt(ct.rate / c.rate, "%.2f") << "\n";
  if (mx.error.empty() && c.error.empty() && c.rate > 0.0)
    out << "mxfp8_cast_both_vs_memcpy_bandwidth: " << fmt(mx.rate / c.rate, "%.2f") << "\n";
  if (b1.error.empty() && c.error.empty() && c.rate > 0.0)
    out << "block_1x128_cast_both_vs_memcpy_bandwidth: " << fmt(b1.rate / c.rate, "%.2f") << "\n";
  if (t2.error.empty() && c.error.empty() && c.rate > 0.0)
    out << "block_128x128_cast_both_vs_memcpy_bandwidth: " << fmt(t2.rate / c.rate, "%.2f") << "\n";

  out << "\n## One MLP training step, GEMMs and casts (4 layers 4096 x 4096, batch 8192)\n\n"
      << "Per layer fprop (FP8: fast accumulation), dgrad and wgrad GEMMs; no activation, loss or optimizer work in "
         "any row.\n"
         "- fp8, casts from fp32: x, W and dy each cast from fp32 into row-wise and transposed codes by the fused "
         "cast_transpose kernel (amax recorded; E4M3, dy E5M2); bf16 outputs.\n"
         "- fp8, bf16 activations, casts fused into producers (as TE): the first input cast once from bf16; every "
         "fprop but the last writes the next layer's E4M3 input itself (cuBLASLt FP8 output with the amax of D), "
         "transposed for wgrad by an FP8 transpose; W cast from fp32 once per layer; each bf16 gradient from the "
         "dgrad above cast once (cast_transpose from bf16, E5M2).\n"
         "- bf16: the same GEMMs on bf16 operands, bf16 outputs.\n\n";
  const std::string bf16_check = cuda::check_bf16_cast_transpose(68, 260);
  out << "cast_transpose from bf16 against the emulator (68 x 260: whole and ragged tiles, E4M3 and E5M2): "
      << (bf16_check.empty() ? std::string("identical") : "DIFFERENT: " + bf16_check) << "\n\n";
  if (bf16_check.empty()) ++ok;
  else ++failed;
  out << "| step | ms | effective TFLOP/s |\n|---|---:|---:|\n";
  err << "bench gpu: MLP step\n";
  if (elapsed() < opt.budget_seconds) {
    const cuda::StepTiming s = cuda::bench_mlp_step(8192, 4096, 4, opt.repeat);
    for (const auto& [name, t] : {std::pair<const char*, cuda::Timing>{"fp8, casts from fp32 (TE delayed scaling)", s.fp8},
                                  std::pair<const char*, cuda::Timing>{"fp8, bf16 activations, casts fused into producers",
                                                                       s.fp8_fused},
                                  std::pair<const char*, cuda::Timing>{"bf16", s.bf16}}) {
      if (t.error.empty()) {
        ++ok;
        out << "| " << name << " | " << fmt(t.seconds * 1e3, "%.2f") << " | " << fmt(t.rate, "%.0f") << " |\n";
      } else {
        ++failed;
        out << "| " << name << " | failed: " << t.error << " | |\n";
      }
    }
    if (s.fp8.error.empty() && s.bf16.error.empty() && s.fp8.seconds > 0.0)
      out << "\nmlp_step_fp8_speedup_vs_bf16: " << fmt(s.bf16.seconds / s.fp8.seconds, "%.2f") << "\n";
    if (s.fp8_fused.error.empty() && s.bf16.error.empty() && s.fp8_fused.seconds > 0.0)
      out << "mlp_step_fp8_fused_speedup_vs_bf16: " << fmt(s.bf16.seconds / s.fp8_fused.seconds, "%.2f") << "\n";
  } else {
    out << "| (skipped: time budget spent) | | |\n";
  }

  // train-lm's step, device-resident, in FP32, BF16 and every FP8 recipe (bench lm).
  if (!lm_note.empty())
    out << "\n## train-lm training step on the GPU\n\n" << lm_note;
  if (lm_steps > 0) {
    out << "\n## train-lm training step on the GPU (device-resident; FP32 and BF16 GEMMs on cuBLASLt)\n\n";
    err << "bench gpu: train-lm steps\n";
    {  // not bound by the budget: --lm-steps sizes it
      BenchLmOptions lm;
      lm.text = opt.lm_text;
      lm.steps = lm_steps;
      lm.batch_size = 32;
      lm.seq_len = 512;
      lm.d_model = 1024;
      lm.heads = 8;
      lm.layers = 8;
      lm.ffn = 4096;
      lm.activation_dtype = "bf16";
      lm.backend = "cuda";
      lm.library_gemms = true;
      try {
        std::ostringstream table;
        run_bench_lm(lm, table);
        out << table.str();
        ++ok;
      } catch (const std::exception& e) {
        ++failed;
        out << "failed: " << e.what() << "\n";
      }
    }
  }
  if (bf16 > 0.0) out << "fp8_fast_accum_vs_bf16_gemm_at_" << ratio_size << ": " << fmt(fp8_fast / bf16, "%.2f") << "\n";
  out << "bench gpu: " << ok << " measurements, " << failed << " failed, " << fmt(elapsed(), "%.0f") << " s\n";
  return ok == 0 ? 1 : 0;
#else
  (void)out, (void)lm_steps;
  return 2;  // unreachable: without CUDA, usable() is false
#endif
}

}  // namespace fp8emu::cli
