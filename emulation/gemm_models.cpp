// Scaled FP8 GEMM with selectable accumulation (see include/fp8emu/emulation/gemm_models.hpp).
#include "fp8emu/emulation/gemm_models.hpp"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <vector>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/core/epilogue.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"
#include "gemm_kernel.hpp"
#include "gemm_tc_values.hpp"
#include "gemm_tensor_core.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {

Accumulation parse_accumulation(const std::string& s) {
  for (const AccumulationModel& m : kAccumulationModels)
    if (s == m.name) return m.id;
  FP8EMU_FAIL("unknown accumulation model '", s, "' (accepted: ", accumulation_names(), ")");
}

const char* to_string(Accumulation a) { return model_of(a).name; }

namespace {
constexpr EnumName<GemmLayout> kLayoutNames[] = {{GemmLayout::kTn, "tn"}, {GemmLayout::kNn, "nn"}};
}  // namespace

GemmLayout parse_gemm_layout(const std::string& s, const char* what) { return parse_enum(kLayoutNames, s, what); }

std::string accumulation_names() {
  std::string out;
  for (const AccumulationModel& m : kAccumulationModels) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

void check_gemm_tn(int M, int N, int K, Format fa, Format fb, const GemmAccumulation& acc) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "GEMM: negative shape M=", M, " N=", N, " K=", K);
  require_fp8(fa, "GEMM operand A");
  require_fp8(fb, "GEMM operand B");
  FP8EMU_CHECK(is_fp8(fa) == is_fp8(fb), "GEMM: operands ", format_name(fa), " and ", format_name(fb),
               " mix OCP and FNUZ FP8 (no GPU multiplies the two)");
  // Both are FP8 of one family here, so the pair the tensor cores lack is E5M2 x E5M2.
  FP8EMU_CHECK(gemm_operand_pair_supported(fa, fb),
               "GEMM: E5M2 x E5M2 is not supported (cuBLASLt rejects it); use E4M3 for one operand");
  const AccumulationModel& m = model_of(acc.model);
  FP8EMU_CHECK(m.takes_promotion() || acc.promotion_interval == 0,
               "GEMM: the exact model takes no promotion interval (it would no longer be exact)");
  FP8EMU_CHECK(acc.promotion_interval >= 0, "GEMM: promotion interval must be >= 0, got ", acc.promotion_interval);
  FP8EMU_CHECK(acc.promotion_interval % m.block == 0, "GEMM: promotion interval ", acc.promotion_interval,
               " is not a multiple of the ", m.name, " block (", m.block, ")");
  FP8EMU_CHECK(acc.split_k >= 1, "GEMM: split_k must be >= 1, got ", acc.split_k);
  FP8EMU_CHECK(m.takes_promotion() || acc.split_k == 1,
               "GEMM: the exact model takes no split_k (it would no longer be exact)");
}

float dot_fp8(const std::uint8_t* a, Format fa, const std::uint8_t* b, Format fb, int K, const GemmAccumulation& acc) {
  return core::dot_split_k(a, spec_of(fa), b, spec_of(fb), K, model_of(acc.model), acc.promotion_interval,
                           acc.split_k);
}

namespace {
// FP8 codes on a tensor-core row of fp16, bf16 or tf32 inputs (the codes widened exactly to that
// format) without promotion or split-K: detail::gemm_tc_values on the decoded values, times s (RN),
// and the element model for the elements of rows that hold NaN or Inf. Returns false, with D
// untouched, where that kernel does not apply.
bool gemm_wide_row(int M, int N, int K, const std::uint8_t* A, const FormatSpec& sa, const std::uint8_t* B,
                   const FormatSpec& sb, const AccumulationModel& model, const GemmAccumulation& acc, float s,
                   float* D) {
  const core::MmaDatapath p = model.tensor_core();
  if (model.datapath != Datapath::kTensorCore || model.input == core::MmaOperands::kFp8 ||
      !detail::tc_values_fast_path(p) || K > detail::kTcValuesMaxK || M == 0 || N == 0)
    return false;
  const int range = std::max(core::split_k_range(K, acc.split_k), 1);
  if (range < K || (acc.promotion_interval > 0 && acc.promotion_interval < K)) return false;
  // Every finite FP8 value's exponent, clamped at the operand format's emin, lies in [-16, 15],
  // inside the kernel's range: only NaN and Inf send a row to the element model.
  struct Code {
    float value;
    std::int32_t exp;
    bool special;
  };
  const auto table = [&](const FormatSpec& f, Code* t) {
    for (int c = 0; c < 256; ++c) {
      const std::uint32_t bits = core::decode_to_f32_bits(std::uint8_t(c), f);
      const core::MmaDecoded d = core::decode_value(bits, p.operands);
      const bool zero = d.cls != 0u || d.term.sig == 0u;
      t[c] = Code{zero ? 0.0f : core::bits_to_f32(bits), zero ? detail::kTcValuesNoExponent : d.term.exp, d.cls != 0u};
    }
  };
  Code ta[256], tb[256];
  table(sa, ta);
  table(sb, tb);
  std::vector<float> av(std::size_t(M) * std::size_t(K)), bv(std::size_t(N) * std::size_t(K));
  // The AVX-512 kernel takes each exponent from its value's bits: the arrays only for the others.
  const bool exponents = !detail::gemm_tc_values_avx512_takes(p);
  std::vector<std::int32_t> ae(exponents ? av.size() : 0), be(exponents ? bv.size() : 0);
  std::vector<char> bad_a(static_cast<std::size_t>(M)), bad_b(static_cast<std::size_t>(N));
  const auto decode = [&](const std::uint8_t* X, int rows, const Code* t, float* v, std::int32_t* e, char* bad) {
#pragma omp parallel for schedule(static) if (double(rows) * K >= double(detail::kParallelMinElements))
    for (int r = 0; r < rows; ++r) {
      bool special = false;
      for (int k = 0; k < K; ++k) {
        const std::size_t x = std::size_t(r) * std::size_t(K) + std::size_t(k);
        special = special || t[X[x]].special;
        v[x] = t[X[x]].value;
        if (e) e[x] = t[X[x]].exp;
      }
      bad[r] = special;  // its elements are recomputed below
    }
  };
  decode(A, M, ta, av.data(), exponents ? ae.data() : nullptr, bad_a.data());
  decode(B, N, tb, bv.data(), exponents ? be.data() : nullptr, bad_b.data());
  detail::gemm_tc_values(M, N, K, av.data(), exponents ? ae.data() : nullptr, bv.data(),
                         exponents ? be.data() : nullptr, p, D);
  const double work = double(M) * N * K;
#pragma omp parallel for schedule(dynamic, 4) if (work >= detail::kParallelMinMacs)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float& d = D[std::size_t(i) * std::size_t(N) + std::size_t(j)];
      if (bad_a[std::size_t(i)] || bad_b[std::size_t(j)])
        d = core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), sa, B + std::size_t(j) * std::size_t(K), sb, K,
                                  model, acc.promotion_interval, acc.split_k, s);
      else
        d = d * s;  // RN(result * s), as the element model
    }
  return true;
}
}  // namespace

void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const GemmAccumulation& acc, float* D) {
  check_gemm_tn(M, N, K, fa, fb, acc);
  const AccumulationModel& model = model_of(acc.model);
  const float s = scale_inv_a * scale_inv_b;
  const FormatSpec& sa = spec_of(fa);
  const FormatSpec& sb = spec_of(fb);
  if (detail::tensor_core_fast_path(model)) {
    detail::gemm_tensor_core(M, N, K, A, sa, B, sb, model, acc.promotion_interval, acc.split_k, s, D);
    return;
  }
  if (gemm_wide_row(M, N, K, A, sa, B, sb, model, acc, s, D)) return;
  if (model.datapath == Datapath::kFp32Sequential &&
      detail::gemm_fp8_tn_fp32(M, N, K, A, fa, scale_inv_a, B, fb, scale_inv_b, acc.promotion_interval,
                               core::split_k_range(K, acc.split_k), D))
    return;  // the same sums as core::dot_split_k (k ascending, fp32, IEEE specials), vectorised
  // Every other case: the per-element body the CUDA kernels run (core/dot.hpp).
  const double work = double(M) * N * K * (model.datapath == Datapath::kFp32Sequential ? 1.0 : 8.0);
#pragma omp parallel for schedule(dynamic, 4) if (work >= detail::kParallelMinMacs)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
          core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), sa, B + std::size_t(j) * std::size_t(K), sb, K,
                                model, acc.promotion_interval, acc.split_k, s);
  // The fp32 model's NaNs as its vectorised kernels give them, whichever path ran.
  if (model.datapath == Datapath::kFp32Sequential) detail::canonical_nans(D, std::size_t(M) * std::size_t(N));
}

std::uint16_t f32_to_bf16_bits(float x) {
  return core::f32_bits_to_bf16_rne(core::f32_to_bits(x), core::Bf16Nan::kQuietKeepSign);
}

void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const GemmAccumulation& acc, const GemmEpilogue& ep, void* D) {
  FP8EMU_CHECK(ep.beta == 0.0f || ep.C != nullptr, "GEMM: beta = ", ep.beta, " needs a C matrix");
  std::vector<float> t(std::size_t(M) * std::size_t(N));
  gemm_fp8_tn(M, N, K, A, fa, scale_inv_a, B, fb, scale_inv_b, acc, t.data());
  std::uint32_t amax = 0;  // max over core::amax_bits: NaN ignored (signaling NaNs too), exact
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const std::size_t idx = std::size_t(i) * std::size_t(N) + std::size_t(j);
      const float v = core::gemm_epilogue_element(t[idx], ep.alpha, ep.beta, ep.beta != 0.0f ? ep.C[idx] : 0.0f,
                                                  ep.bias != nullptr, ep.bias ? ep.bias[j] : 0.0f);
      amax = core::max_u32(amax, core::amax_bits(v));
      t[idx] = v;
    }
  if (ep.amax_d) *ep.amax_d = std::fmax(*ep.amax_d, core::bits_to_f32(amax));
  const std::size_t n = t.size();
  switch (ep.output) {
    case GemmOutput::kFp32:
      std::copy(t.begin(), t.end(), static_cast<float*>(D));
      break;
    case GemmOutput::kBf16:
      for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(D)[i] = f32_to_bf16_bits(t[i]);
      break;
    case GemmOutput::kFp16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(D)[i] = core::f32_bits_to_half_rne(core::f32_to_bits(t[i]));
      break;
    case GemmOutput::kFp8:
      quantize(t.data(), n, ep.d_scale, ep.output_format, static_cast<std::uint8_t*>(D), nullptr);
      break;
  }
}

}  // namespace fp8emu::emu
