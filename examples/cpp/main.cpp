// fp8emu as a library: two steps of Transformer Engine's delayed scaling on a small tensor, then a
// scaled FP8 GEMM on the Hopper tensor-core model. Every expected value below is worked out by hand
// from the OCP FP8 E4M3 definition (OCP OFP8 r1.0), not copied from fp8emu's output:
//
//   E4M3: 1 sign, 4 exponent, 3 mantissa bits, bias 7. Code S.EEEE.MMM is
//     normal    (E > 0):  (-1)^S * 1.MMM * 2^(E - 7),
//     subnormal (E = 0):  (-1)^S * 0.MMM * 2^-6        (steps of 2^-9);
//   S.1111.111 is NaN and there is no Inf, so the largest finite value is S.1111.110 = 1.75 * 2^8.
//   In [2^e, 2^(e+1)) the values are 2^e * (1 + m/8), m = 0..7: a spacing of 2^(e-3).
//
// A cast is TE's: code = Q(RN_fp32(x * scale)), Q rounding to nearest (ties to even) with CUDA's
// __NV_SATFINITE (beyond the largest finite value -> +-1.75 * 2^8); scale_inv = RN(1 / scale).
//
// Exit status 0 when every check holds, 1 otherwise; prints what it computed, and last whether this
// fp8emu was built with CUDA and could run its GPU kernels here.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/scaling/delayed_quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace {

int failures = 0;

// Bitwise comparison (so -0 vs +0 and NaN payloads would count).
void check_float(const char* what, float got, float want) {
  std::uint32_t g, w;
  std::memcpy(&g, &got, 4);
  std::memcpy(&w, &want, 4);
  const bool ok = g == w;
  std::printf("  %-44s %-14.12g expected %-14.12g %s\n", what, got, want, ok ? "ok" : "MISMATCH");
  if (!ok) ++failures;
}

void check_count(const char* what, std::uint64_t got, std::uint64_t want) {
  const bool ok = got == want;
  std::printf("  %-44s %-14llu expected %-14llu %s\n", what, static_cast<unsigned long long>(got),
              static_cast<unsigned long long>(want), ok ? "ok" : "MISMATCH");
  if (!ok) ++failures;
}

void check_codes(const char* what, const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  bool ok = got == want;
  std::printf("  %-44s", what);
  for (std::uint8_t c : got) std::printf(" %02X", c);
  std::printf("  %s\n", ok ? "ok" : "MISMATCH");
  if (!ok) {
    std::printf("  %-44s", "  expected");
    for (std::uint8_t c : want) std::printf(" %02X", c);
    std::printf("\n");
    ++failures;
  }
}

}  // namespace

int main() {
  using namespace fp8emu;
  using scaling::TensorRole;
  using scaling::Usage;
  // ---- 1. Delayed scaling (TE DelayedScaling; HYBRID: the forward pass casts to E4M3) ----------
  // The README shows the lines between the [readme] markers, verbatim (tests/python/test_readme.py).
  // [readme]
  const backend::Device& cpu = backend::cpu_device();  // the casts run on the CPU emulator
  scaling::DelayedScaling recipe;  // TE's defaults: margin 0, amax_compute_algo "max", fused update
  recipe.amax_history_len = 4;     // a short window (TE's default is 1024)
  scaling::DelayedQuantizer quantizer(recipe, scaling::Direction::kForward);
  // A 2 x 4 activation, row-major. amax = 3.5.
  const std::vector<float> x = {3.5f, -1.0f, 0.3f, 0.01f, 0.0f, -2.0f, 1e-4f, 0.0625f};
  emu::QuantizeStats stats0;
  const scaling::QuantizedTensor q0 = quantizer.quantize(cpu, x.data(), 2, 4, TensorRole::kInput, Usage::kRowwise, &stats0);
  // [/readme]
  const int input_slot = scaling::slot_of(TensorRole::kInput);

  std::printf("delayed scaling, step 0 (every scale starts at 1):\n");
  check_float("scale", q0.per_tensor().scale, 1.0f);
  check_float("scale_inv", q0.per_tensor().scale_inv, 1.0f);
  // Scale 1, so each code is x rounded to E4M3:
  //   3.5    = 1.75 * 2^1: E = 1+7 = 1000, M = 110                         -> 0 1000 110 = 0x46
  //  -1      = 1.0 * 2^0:  E = 0111, M = 000, sign 1                        -> 1 0111 000 = 0xB8
  //   0.3    in [2^-2, 2^-1), spacing 2^-5: between 0.28125 and 0.3125, nearer 0.3125 = 1.25 * 2^-2
  //                                                                        -> 0 0101 010 = 0x2A
  //   0.01   below 2^-6, subnormal: 0.01 / 2^-9 = 5.12 -> 5                 -> 0 0000 101 = 0x05
  //   0                                                                    -> 0x00
  //  -2      = 1.0 * 2^1                                                    -> 1 1000 000 = 0xC0
  //   1e-4   / 2^-9 = 0.0512 -> 0: flushed to zero (one underflow)          -> 0x00
  //   0.0625 = 2^-4: E = -4+7 = 0011                                        -> 0 0011 000 = 0x18
  check_codes("codes", q0.per_tensor().rowwise_data, {0x46, 0xB8, 0x2A, 0x05, 0x00, 0xC0, 0x00, 0x18});
  check_count("underflow (1e-4 -> 0)", stats0.underflow, 1);
  check_count("saturated", stats0.saturated, 0);
  // The cast records the tensor's amax in its slot's staging row of the history.
  check_float("recorded amax", quantizer.amax_history_state()->history(0, input_slot), 3.5f);

  // TE's update after the forward pass: amax = max of the window = 3.5, margin 0, so
  // scale = (1.75 * 2^8) / 3.5 = 2^7 = 128 (exact).
  quantizer.update_scales();
  check_float("scale after update", quantizer.amax_history_state()->scale(input_slot), 128.0f);

  // Step 1: the next activation is twice as large (amax 7), but delayed scaling casts it with the
  // scale from step 0's amax, so its largest values now saturate.
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = 2.0f * x[i];  // exact (a power of two)
  std::printf("delayed scaling, step 1 (the amax doubled; the scale is step 0's):\n");
  emu::QuantizeStats stats1;
  const scaling::QuantizedTensor q1 = quantizer.quantize(cpu, y.data(), 2, 4, TensorRole::kInput, Usage::kRowwise, &stats1);
  check_float("scale", q1.per_tensor().scale, 128.0f);
  check_float("scale_inv = RN(1/128)", q1.per_tensor().scale_inv, 0.0078125f);
  // y * 128 = x * 256 (exact), then rounded to E4M3:
  //   7 * 128      = 896  > 1.75 * 2^8, saturates                          -> 0 1111 110 = 0x7E
  //  -2 * 128      = -256 = -2^8: E = 1111, M = 000                         -> 1 1111 000 = 0xF8
  //   0.6 * 128    = 76.8 in [2^6, 2^7), spacing 8: 72 or 80, nearer 80 = 1.25 * 2^6
  //                                                                        -> 0 1101 010 = 0x6A
  //   0.02 * 128   = 2.56 in [2, 4), spacing 0.25: 2.5 or 2.75, nearer 2.5 = 1.25 * 2^1
  //                                                                        -> 0 1000 010 = 0x42
  //   0                                                                    -> 0x00
  //  -4 * 128      = -512, saturates to -1.75 * 2^8                         -> 1 1111 110 = 0xFE
  //   2e-4 * 128   = 0.0256 in [2^-6, 2^-5), spacing 2^-9: 0.0256 / 2^-9 = 13.1 -> 13 * 2^-9
  //                = 1.625 * 2^-6: E = 0001, M = 101                        -> 0 0001 101 = 0x0D
  //   0.125 * 128  = 16 = 2^4: E = 1011                                     -> 0 1011 000 = 0x58
  check_codes("codes", q1.per_tensor().rowwise_data, {0x7E, 0xF8, 0x6A, 0x42, 0x00, 0xFE, 0x0D, 0x58});
  check_count("saturated (896 and -512)", stats1.saturated, 2);
  check_count("underflow", stats1.underflow, 0);
  // Dequantized, code * scale_inv: 0x7E is 1.75 * 2^8 * 2^-7 = 3.5, not y = 7.
  std::vector<float> y_deq(y.size());
  emu::dequantize(q1.per_tensor().rowwise_data.data(), y_deq.size(), q1.per_tensor().scale_inv, q1.format, y_deq.data());
  check_float("dequantized y[0] (y = 7)", y_deq[0], 3.5f);
  check_float("dequantized y[2] (y = 0.6)", y_deq[2], 0.625f);  // 80 / 128

  // The update after step 1: window {3.5, 7}, max 7, so scale = (1.75 * 2^8) / 7 = 2^6 = 64.
  quantizer.update_scales();
  check_float("scale after update", quantizer.amax_history_state()->scale(input_slot), 64.0f);

  // ---- 2. A scaled FP8 GEMM on the Hopper tensor-core model ------------------------------------
  // D[2, 1] = RN(acc(A[2, 32] . B[1, 32]^T) * RN(scale_inv_a * scale_inv_b)), TN layout, E4M3 x E4M3,
  // with TE's fprop accumulation on Hopper: the wgmma k32 model with fast accumulation (K = 32: one
  // block).
  const int M = 2, N = 1, K = 32;
  std::vector<std::uint8_t> A(std::size_t(M) * K), B(std::size_t(N) * K, 0x38);  // B: all 1.0 = 0 0111 000
  // Row 0: 256 = 2^8 (0 1111 000 = 0x78) then 31 x 0.046875 = 1.5 * 2^-5 (0 0010 100 = 0x14).
  A[0] = 0x78;
  for (int k = 1; k < K; ++k) A[std::size_t(k)] = 0x14;
  // Row 1: 16 x (1.0, -0.5): -0.5 = 1 0110 000 = 0xB0. Every model sums it exactly to 8.
  for (int k = 0; k < K; ++k) A[std::size_t(K + k)] = (k % 2 == 0) ? 0x38 : 0xB0;
  const float scale_inv_a = 0.5f, scale_inv_b = 0.25f;  // RN(0.5 * 0.25) = 0.125, exact

  // The Hopper model aligns every product to 13 fraction bits below the largest product exponent
  // (here 256 * 1: 2^8), truncating: a quantum of 2^(8-13) = 2^-5. Each 1.5 * 2^-5 product keeps one
  // quantum, so acc = 256 + 31 * 2^-5 = 256.96875 (14 significant bits: 100000000.11111b, kept), and
  // D[0] = 256.96875 * 0.125 = 32.12109375.
  // Summed exactly (or in fp32, exact here: 2^8 + 93 * 2^-6 needs 15 bits) it is 256 + 31 * 0.046875
  // = 257.453125, and D[0] = 32.181640625.
  std::printf("FP8 GEMM, E4M3 x E4M3, M=2 N=1 K=32:\n");
  float d_hopper[2], d_fp32[2];
  emu::gemm_fp8_tn(M, N, K, A.data(), Format::kE4M3, scale_inv_a, B.data(), Format::kE4M3, scale_inv_b,
                   emu::te_fprop(Accumulation::kHopper), d_hopper);
  emu::gemm_fp8_tn(M, N, K, A.data(), Format::kE4M3, scale_inv_a, B.data(), Format::kE4M3, scale_inv_b,
                   emu::GemmAccumulation{Accumulation::kFp32, 0}, d_fp32);
  check_float("D[0] hopper (truncated alignment)", d_hopper[0], 32.12109375f);
  check_float("D[0] fp32 accumulation", d_fp32[0], 32.181640625f);
  check_float("D[1] hopper (16 * 0.5 * 0.125)", d_hopper[1], 1.0f);
  check_float("D[1] fp32 accumulation", d_fp32[1], 1.0f);

  // ---- 3. Where the kernels could run ------------------------------------------------------------
  // A CUDA build of fp8emu defines FP8EMU_HAVE_CUDA for its users (fp8emu::fp8emu, fp8emu.pc) and
  // links the CUDA library, whose probe asks the runtime and cuBLASLt (a GPU is not needed).
  const backend::CudaStatus& cuda = backend::cuda_status();
  std::printf("CUDA backend: %s\n", cuda.usable() ? "usable" : cuda.why_not().c_str());
#if defined(FP8EMU_HAVE_CUDA)
  check_count("built with CUDA", cuda.built, 1);
  check_count("cuBLASLt loaded (version > 0)", cuda.cublaslt_version > 0, 1);
#else
  check_count("built with CUDA", cuda.built, 0);
#endif

  if (failures != 0) {
    std::printf("%d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
