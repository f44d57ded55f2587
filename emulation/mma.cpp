// Tensor-core MMA tiles and the fp32 comparison (see include/fp8emu/emulation/mma.hpp).
#include "fp8emu/emulation/mma.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::emu {

void mma_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const std::uint8_t* B, Format fb,
            Accumulation model, const float* C, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma: negative shape M=", M, " N=", N, " K=", K);
  require_fp8(fa, "mma operand A");
  require_fp8(fb, "mma operand B");
  const AccumulationModel& m = model_of(model);
  FP8EMU_CHECK(m.datapath == Datapath::kTensorCore, "mma: '", m.name,
               "' is not a tensor-core model (an MMA tile needs one: ", "hopper, ada or hopper-mma-sync)");
  const FormatSpec& sa = spec_of(fa);
  const FormatSpec& sb = spec_of(fb);
#pragma omp parallel for schedule(static) if (double(M) * N * K >= 1e6)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const std::size_t at = std::size_t(i) * std::size_t(N) + std::size_t(j);
      const std::uint32_t c = C ? core::f32_to_bits(C[at]) : 0u;
      D[at] = core::bits_to_f32(core::mma_dot_with_c(A + std::size_t(i) * std::size_t(K), sa,
                                                     B + std::size_t(j) * std::size_t(K), sb, K, m, c));
    }
}

namespace {
// The row of a values GEMM: a tensor-core row whose input is fp16, bf16 or tf32.
const AccumulationModel& values_row(Accumulation model, const char* who) {
  const AccumulationModel& m = model_of(model);
  FP8EMU_CHECK(m.datapath == Datapath::kTensorCore && m.input != core::MmaOperands::kFp8, who, ": '", m.name,
               "' is not a tensor-core model of fp16, bf16 or tf32 inputs (e.g. hopper-bf16, ampere-fp16, ada-tf32)");
  return m;
}

const char* operand_format_name(core::MmaOperands o) {
  return o == core::MmaOperands::kFp16 ? "fp16" : o == core::MmaOperands::kBf16 ? "bf16" : "tf32";
}

// Every element of x [n] a value of the operand format.
void check_values(const float* x, std::size_t n, core::MmaOperands o, const char* who, const char* name) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = core::f32_to_bits(x[i]);
    FP8EMU_CHECK(core::is_operand_value(u, o), who, ": ", name, "[", i, "] = ", x[i], " (0x", std::hex, u, std::dec,
                 ") is not a ", operand_format_name(o), " value; round the operand to ", operand_format_name(o),
                 " first");
  }
}

// Decodes rows x rows of k values (element (r, t) at x[r * rs + t * ts]) into out [rows * k].
void decode_rows(const float* x, int rows, int k, std::size_t rs, std::size_t ts, core::MmaOperands o,
                 core::MmaDecoded* out) {
#pragma omp parallel for schedule(static) if (double(rows) * k >= 1e6)
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < k; ++t)
      out[std::size_t(r) * std::size_t(k) + std::size_t(t)] =
          core::decode_value(core::f32_to_bits(x[std::size_t(r) * rs + std::size_t(t) * ts]), o);
}

// D [M, N] from decoded A rows [M, K] and B rows [N, K], C [M, N] or null.
void gemm_decoded(int M, int N, int K, const core::MmaDecoded* a, const core::MmaDecoded* b,
                  const core::MmaDatapath& p, const float* C, float* D) {
#pragma omp parallel for schedule(static) if (double(M) * N * K >= 1e6)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const std::size_t at = std::size_t(i) * std::size_t(N) + std::size_t(j);
      const std::uint32_t c = C ? core::f32_to_bits(C[at]) : 0u;
      D[at] = core::bits_to_f32(core::mma_dot(core::MmaDecodedTerms{a + std::size_t(i) * std::size_t(K)},
                                              core::MmaDecodedTerms{b + std::size_t(j) * std::size_t(K)}, K, c, p));
    }
}
}  // namespace

void mma_tn_values(int M, int N, int K, const float* A, const float* B, Accumulation model, const float* C, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma: negative shape M=", M, " N=", N, " K=", K);
  const AccumulationModel& m = values_row(model, "mma");
  const std::size_t na = std::size_t(M) * std::size_t(K), nb = std::size_t(N) * std::size_t(K);
  check_values(A, na, m.operands, "mma", "A");
  check_values(B, nb, m.operands, "mma", "B");
  std::vector<core::MmaDecoded> a(na), b(nb);
  decode_rows(A, M, K, std::size_t(K), 1, m.operands, a.data());
  decode_rows(B, N, K, std::size_t(K), 1, m.operands, b.data());
  gemm_decoded(M, N, K, a.data(), b.data(), m.tensor_core(), C, D);
}

void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_tc_nn: negative shape M=", M, " N=", N, " K=", K);
  const AccumulationModel& m = values_row(model, "gemm_tc_nn");
  const std::size_t na = std::size_t(M) * std::size_t(K), nb = std::size_t(N) * std::size_t(K);
  check_values(A, na, m.operands, "gemm_tc_nn", "A");
  check_values(B, nb, m.operands, "gemm_tc_nn", "B");
  std::vector<core::MmaDecoded> a(na), b(nb);
  decode_rows(A, M, K, std::size_t(K), 1, m.operands, a.data());
  decode_rows(B, N, K, 1, std::size_t(N), m.operands, b.data());  // B's columns as rows
  gemm_decoded(M, N, K, a.data(), b.data(), m.tensor_core(), nullptr, D);
}

std::uint64_t ulp_distance(float a, float b) {
  const auto position = [](float x) {  // monotone in x; +0 and -0 both 0
    const std::uint32_t u = core::f32_to_bits(x);
    return (u & 0x80000000u) ? -std::int64_t(u & 0x7FFFFFFFu) : std::int64_t(u);
  };
  const std::int64_t d = position(a) - position(b);
  return std::uint64_t(d < 0 ? -d : d);
}

CompareStats compare_f32(const float* x, const float* y, std::size_t n) {
  CompareStats s;
  s.elements = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&x[i], &y[i], 4) == 0) continue;
    ++s.mismatches;
    if (std::isnan(x[i]) != std::isnan(y[i])) {
      ++s.nan_in_one;
      continue;
    }
    if (std::isnan(x[i])) {
      ++s.nan_payload;
      continue;
    }
    s.max_ulp = std::max(s.max_ulp, std::int64_t(ulp_distance(x[i], y[i])));
    const double diff = std::fabs(double(x[i]) - double(y[i]));
    s.max_abs_error = std::max(s.max_abs_error, diff);
    if (y[i] != 0.0f) s.max_rel_error = std::max(s.max_rel_error, diff / std::fabs(double(y[i])));
  }
  return s;
}

}  // namespace fp8emu::emu
