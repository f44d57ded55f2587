/// \file device_check.hpp
/// \brief Bit-for-bit comparison of the FP8 operations of two backend::Device on the same random
/// inputs: what `fp8emu validate` runs for the GPU (cuda_device() against cpu_device()), what the
/// `gpu`-labelled tests assert, and what the CPU tests run between the emulator's fast paths
/// (cpu_device()) and the per-element reference (element_device()).
///
/// Every FP8 operation of Device (current_scale, cast_transpose, block_cast, gemm_fp8_tn,
/// gemm_fp8_block_tn) is called on both devices with identical inputs (uploaded to each device's
/// memory, outputs downloaded), over several sizes (odd ones included), both FP8 formats (and the
/// mixed GEMM pairs), the accumulation models with and without promotion and split-K, and input
/// families (see InputFamily). Each output value is compared by its bits: FP8 codes, fp32 values
/// (signed zeros and infinities included), scales and scale_inv, the amax, and every field of the
/// cast counters; outputs an operation was not asked for must stay as they were. The one exception: two NaNs
/// count as equal, whatever their sign and payload, because an fp32 operation's NaN result is the
/// FPU's choice (x86 returns the first NaN operand or 0xFFC00000; NVIDIA GPUs always 0x7FFFFFFF);
/// such pairs are counted apart (nan_payload_differences) and reported, never as mismatches.
///
/// Inputs are deterministic for a seed (std::mt19937_64, independent of thread counts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::backend {

/// Families of fp32 inputs of the casts.
enum class InputFamily : std::uint8_t {
  kNormal,     ///< N(0, 1).
  kWide,       ///< Random sign, magnitude 2^U(-40, 40) (log-uniform): FP8 subnormals to overflow.
  kNanInf,     ///< N(0, 1) with 5 % +-NaN (several payloads), +-Inf and +-0.
  kSubnormal,  ///< Magnitudes 2^U(-24, -4), FP8 subnormal midpoints, and fp32 subnormals.
  kOverflow,   ///< Magnitudes around the E4M3 and E5M2 max finite values and overflow thresholds
               ///< (from format_spec.hpp), FLT_MAX, mixed signs.
};
const char* to_string(InputFamily f);
/// All families, in the order above.
std::vector<InputFamily> all_input_families();

/// n fp32 inputs of a family.
std::vector<float> make_inputs(InputFamily family, std::size_t n, std::uint64_t seed);

/// Families of FP8 code inputs of the GEMMs.
enum class CodeFamily : std::uint8_t {
  kNormal,   ///< N(0, 1) quantized to the format with current scaling (typical tensors).
  kWide,     ///< Uniformly random finite codes: every exponent, subnormals and zeros included.
  kSpecial,  ///< kWide with rare NaN (and, for E5M2, +-Inf) codes, about one per 300 codes.
};
const char* to_string(CodeFamily f);

/// n FP8 codes of a family in a format; `scale_inv` receives the matching dequantization scale
/// (kNormal: RN(1 / scale) of the current-scaling cast; otherwise 1).
std::vector<std::uint8_t> make_codes(CodeFamily family, Format fmt, std::size_t n, std::uint64_t seed,
                                     float* scale_inv);

/// Whether two fp32 values agree for the comparison: same bits, or both NaN.
bool same_f32(float a, float b);

/// One line of the comparison: an operation (with its variant) on one family of inputs, summed
/// over the sizes, formats and parameters tried.
struct DeviceCheckRow {
  std::string op;                   ///< e.g. "cast_transpose", "gemm_fp8_tn hopper promote 128".
  std::string inputs;               ///< the input family.
  std::uint64_t calls = 0;          ///< calls compared.
  std::uint64_t values = 0;         ///< output values compared.
  std::uint64_t mismatches = 0;     ///< values whose bits differ (a NaN against a NaN never does).
  std::uint64_t nan_payload_differences = 0;  ///< NaN on both sides with different bits.
  std::string first_mismatch;       ///< where and how the first mismatch showed, if any.
};

struct DeviceCheckOptions {
  std::vector<int> sizes{1, 17, 64, 131};  ///< Each size s gives matrices of s x (s + 2) for the
                                           ///< casts and GEMMs of M = s, N = s + 3, K = 2s + 1.
  std::uint64_t seed = 1;
  /// If non-empty, only the operation of this name ("current_scale", "cast_transpose",
  /// "block_cast", "gemm_fp8_tn", "gemm_fp8_block_tn", "block_scales_to_mxfp8").
  std::string only;
  /// Also the FNUZ formats in the per-tensor casts and GEMMs (the CPU devices take them, the GPU's
  /// kernels refuse them).
  bool fnuz = false;
  /// Called before each group of calls with a short description (progress), if set.
  std::function<void(const std::string&)> progress;
};

/// The GEMM accumulation variants every GEMM comparison runs: each model of the accumulation table
/// with fast accumulation and, where the model takes promotion, an interval of one block (50 for
/// block-less models), of 128, and split-K 3 (fast) and 2 (promoted every 128).
std::vector<emu::GemmAccumulation> device_check_accumulations();

/// Calls every FP8 operation of `reference` and `candidate` on the same inputs and compares the
/// outputs (see the file comment). An exception thrown by the candidate is recorded as one mismatch
/// of its row (with its message) and the checks go on; exceptions of the reference propagate.
/// \throws fp8emu::Error for a size below 1 or an unknown `only`.
std::vector<DeviceCheckRow> check_devices(const Device& reference, const Device& candidate,
                                          const DeviceCheckOptions& options);

/// Total mismatches over rows.
std::uint64_t total_mismatches(const std::vector<DeviceCheckRow>& rows);

/// The rows as a Markdown table: operation | inputs | calls | values | mismatches | NaN payload differences.
std::string format_rows(const std::vector<DeviceCheckRow>& rows);

}  // namespace fp8emu::backend
