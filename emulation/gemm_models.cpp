// Scaled FP8 GEMM with selectable accumulation (see include/fp8emu/emulation/gemm_models.hpp).
#include "fp8emu/emulation/gemm_models.hpp"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <vector>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"

namespace fp8emu::emu {

Accumulation parse_accumulation(const std::string& s) {
  for (const AccumulationModel& m : kAccumulationModels)
    if (s == m.name) return m.id;
  FP8EMU_FAIL("unknown accumulation model '", s, "' (accepted: ", accumulation_names(), ")");
}

const char* to_string(Accumulation a) { return model_of(a).name; }

std::string accumulation_names() {
  std::string out;
  for (const AccumulationModel& m : kAccumulationModels) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

void check_gemm_tn(int M, int N, int K, Format fa, Format fb, const GemmAccumulation& acc) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "GEMM: negative shape M=", M, " N=", N, " K=", K);
  require_fp8(fa, "GEMM operand A");
  require_fp8(fb, "GEMM operand B");
  // Both are FP8 here, so the pair the tensor cores lack is E5M2 x E5M2.
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

// Vectorised tensor-core GEMM (Hopper/Ada models, fp32 accumulator), bit-identical to dot_fp8:
// for each K-block the alignment exponent E of every output column is the max of e_a + e_b over
// the block's non-zero products and the running sum's exponent; each exact product p = a*b is
// scaled by 2^(13-E) (exact) and truncated toward zero by the float->int conversion, which is
// the model's per-term magnitude truncation; the integer sum is cut to 14 significant bits by
// masking the low 10 mantissa bits of its (exact) fp32 value, then scaled back by 2^(E-13).
// Columns run in the innermost loops so the compiler vectorises them. Split-K ranges of `range`
// K-elements (core::split_k_range) each restart the chain and the promotion total from zero, and
// their values are summed in fp32 in K order (core::dot_split_k). Operands with NaN/Inf take the
// scalar path.
constexpr int kColumnChunk = 128;

struct Decoded {
  std::vector<float> value;             // exact value
  std::vector<std::int32_t> exponent;   // unnormalised exponent, kNoExponentInt for zero
};
constexpr std::int32_t kNoExponentInt = -100000;  // never the maximum

Decoded decode_for_model(const std::uint8_t* codes, std::size_t n, FormatSpec f) {
  Decoded d;
  d.value.resize(n);
  d.exponent.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const core::MmaTerm t = core::decode_fp8_term(codes[i], f);
    d.value[i] = core::fp8_to_f32(codes[i], f);
    d.exponent[i] = t.sig ? t.exp : kNoExponentInt;
  }
  return d;
}

bool all_finite(const std::uint8_t* codes, std::size_t n, FormatSpec f) {
  for (std::size_t i = 0; i < n; ++i)
    if ((codes[i] & f.top_code()) > f.max_finite_code()) return false;
  return true;
}


// R rows of D (i0 .. i0+R-1) share every load of B (R = 8 measured fastest on the dev machine).
// Columns are processed 8 at a time in vector registers (GCC vector extensions; two SSE halves in
// the baseline clone): for each K-block the exponent maximum and the integer sum of one row and
// 8 columns stay in registers across the block's k. B is stored in 8-column panels, padded with
// zeros (value 0, exponent kNoExponentInt), which never change a result.
#pragma GCC diagnostic ignored "-Wpsabi"  // the 32-byte vectors never cross a non-inlined call
typedef float v8f __attribute__((vector_size(32)));
typedef std::int32_t v8i __attribute__((vector_size(32)));
constexpr int kLanes = 8;

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

template <int R>
__attribute__((always_inline)) inline void gemm_tensor_core_rows(int i0, int N, int Npad, int K, const Decoded& a,
                                                                const Decoded& bt, int block, int promotion, int range,
                                                                float s, float* D) {
  constexpr int kVecPerChunk = kColumnChunk / kLanes;
  alignas(32) float chain[R][kColumnChunk], total[R][kColumnChunk], sum[R][kColumnChunk];
  const v8i no_exp = {kNoExponentInt, kNoExponentInt, kNoExponentInt, kNoExponentInt,
                      kNoExponentInt, kNoExponentInt, kNoExponentInt, kNoExponentInt};
  const v8i exp_mask = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  for (int j0 = 0; j0 < Npad; j0 += kColumnChunk) {
    const int nv = std::min(kColumnChunk, Npad - j0) / kLanes;
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < kColumnChunk; ++j) chain[r][j] = total[r][j] = sum[r][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += block) {
      if (k0 > 0 && k0 % range == 0)
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < kColumnChunk; ++j) {  // a split-K range ends: its value joins the fp32 sum
            const float v = promotion > 0 ? total[r][j] + chain[r][j] : chain[r][j];
            sum[r][j] = k0 == range ? v : sum[r][j] + v;
            chain[r][j] = total[r][j] = 0.0f;
          }
      if (promotion > 0 && k0 % range > 0 && (k0 % range) % promotion == 0)
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < kColumnChunk; ++j) {  // promote: one RN fp32 add, the chain restarts from zero
            total[r][j] += chain[r][j];
            chain[r][j] = 0.0f;
          }
      const int k1 = std::min(K, k0 + block);  // split-K ranges hold whole blocks (checked by the caller)
      for (int r = 0; r < R; ++r) {
        const float* av = a.value.data() + std::size_t(i0 + r) * std::size_t(K);
        const std::int32_t* ae = a.exponent.data() + std::size_t(i0 + r) * std::size_t(K);
        for (int v = 0; v < nv && v < kVecPerChunk; ++v) {
          const int j = j0 + v * kLanes;
          const v8f c = load8(&chain[r][v * kLanes]);
          // Exponent of the running sum (clamped at -126), or kNoExponentInt when it is zero.
          const v8i cb = (v8i)(c) & 0x7FFFFFFF;
          const v8i ce = (cb >> 23) & exp_mask;
          v8i E = cb == 0 ? no_exp : (ce > 0 ? ce - 127 : ce * 0 - 126);
          for (int k = k0; k < k1; ++k) {
            v8i eb;
            std::memcpy(&eb, bt.exponent.data() + (std::size_t(j / kLanes) * std::size_t(K) + std::size_t(k)) * kLanes,
                        sizeof eb);
            const v8i t = ae[k] + eb;
            E = t > E ? t : E;
          }
          const v8i any = E > kNoExponentInt / 2;
          const v8i Ei = any ? E : E * 0;
          const v8i sc_bits = (127 + 13 - Ei) << 23;   // 2^(13 - E)
          const v8i inv_bits = (127 - 13 + Ei) << 23;  // 2^(E - 13)
          const v8f sc = (v8f)(sc_bits);
          v8i S = __builtin_convertvector(c * sc, v8i);  // the running sum joins the alignment, truncated
          for (int k = k0; k < k1; ++k) {
            const v8f vb = load8(bt.value.data() + (std::size_t(j / kLanes) * std::size_t(K) + std::size_t(k)) * kLanes);
            S += __builtin_convertvector((av[k] * vb) * sc, v8i);
          }
          const v8f f = __builtin_convertvector(S, v8f);  // exact: |S| < 2^21
          const v8i cut_bits = (v8i)(f) & static_cast<std::int32_t>(0xFFFFFC00u);
          const v8f cut = (v8f)(cut_bits);
          const v8f next = cut * (v8f)(inv_bits);
          const v8i next_bits = (v8i)(next) & any;  // no term at all: +0
          store8(&chain[r][v * kLanes], (v8f)(next_bits));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float* d = D + std::size_t(i0 + r) * std::size_t(N);
      for (int j = j0; j < std::min(N, j0 + kColumnChunk); ++j) {
        const int jj = j - j0;
        const float v = promotion > 0 ? total[r][jj] + chain[r][jj] : chain[r][jj];
        d[j] = (K > range ? sum[r][jj] + v : v) * s;
      }
    }
  }
}

// AVX2 and baseline clones (see gemm_kernel.hpp): the same IEEE operations and truncating
// conversions in both, so the same bits.
FP8EMU_TARGET_CLONES void tensor_core_rows8(int i0, int N, int Npad, int K, const Decoded& a, const Decoded& bt,
                                            int block, int promotion, int range, float s, float* D) {
  gemm_tensor_core_rows<8>(i0, N, Npad, K, a, bt, block, promotion, range, s, D);
}
FP8EMU_TARGET_CLONES void tensor_core_rows1(int i0, int N, int Npad, int K, const Decoded& a, const Decoded& bt,
                                            int block, int promotion, int range, float s, float* D) {
  gemm_tensor_core_rows<1>(i0, N, Npad, K, a, bt, block, promotion, range, s, D);
}

}  // namespace

void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                 Format fb, float scale_inv_b, const GemmAccumulation& acc, float* D) {
  check_gemm_tn(M, N, K, fa, fb, acc);
  const AccumulationModel& model = model_of(acc.model);
  const float s = scale_inv_a * scale_inv_b;
  const FormatSpec& sa = spec_of(fa);
  const FormatSpec& sb = spec_of(fb);
  const std::size_t na = std::size_t(M) * std::size_t(K), nb = std::size_t(N) * std::size_t(K);
  // The vectorised path implements one-step blocks of the fp32-accumulator block FMA on FP8 fields
  // with F = 13 and 14 bits kept (its 14-bit cut is the 0xFFFFFC00 mask), C in the alignment; other
  // tensor-core rows take the per-element path.
  const bool vectorised_tensor_core =
      model.datapath == Datapath::kTensorCore && model.accumulator == core::MmaAccumulator::kFp32 &&
      model.fraction_bits == core::kMmaFractionBits && model.significant_bits == core::kMmaSignificantBits &&
      model.steps == 1 && model.operands == core::MmaOperands::kFp8 && model.c_joins_first_block &&
      core::kSplitKTile % model.block == 0;
  if (vectorised_tensor_core && all_finite(A, na, sa) && all_finite(B, nb, sb)) {
    const Decoded a = decode_for_model(A, na, sa);
    const int Npad = (N + kLanes - 1) / kLanes * kLanes;
    // B in 8-column panels, [Npad / 8][K][8]: for one panel the K-loop reads consecutive vectors.
    std::vector<std::uint8_t> b_t(std::size_t(K) * std::size_t(Npad), 0);
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k)
        b_t[(std::size_t(j / kLanes) * std::size_t(K) + std::size_t(k)) * kLanes + std::size_t(j % kLanes)] =
            B[std::size_t(j) * std::size_t(K) + std::size_t(k)];
    const Decoded bt = decode_for_model(b_t.data(), b_t.size(), sb);
    const int block = model.block;
    const int range = std::max(core::split_k_range(K, acc.split_k), 1);  // K itself without split-K
    const int promotion = acc.promotion_interval >= std::min(K, range) ? 0 : acc.promotion_interval;
    const double work = double(M) * N * K;
    const int groups = (M + 7) / 8;
#pragma omp parallel for schedule(dynamic, 1) if (work >= detail::kParallelMinMacs)
    for (int g = 0; g < groups; ++g) {
      const int i0 = 8 * g;
      if (i0 + 8 <= M) {
        tensor_core_rows8(i0, N, Npad, K, a, bt, block, promotion, range, s, D);
      } else {
        for (int i = i0; i < M; ++i) tensor_core_rows1(i, N, Npad, K, a, bt, block, promotion, range, s, D);
      }
    }
    return;
  }
  if (model.datapath == Datapath::kFp32Sequential && (acc.promotion_interval == 0 || acc.promotion_interval >= K) &&
      core::split_k_range(K, acc.split_k) >= K) {
    // The same sums as dot_fp32 (k ascending, fp32, IEEE specials), through the vectorised NN kernel.
    std::vector<std::uint8_t> b_kn(nb);
    transpose(N, K, B, b_kn.data());
    gemm_fp8_nn(M, N, K, A, fa, scale_inv_a, b_kn.data(), fb, scale_inv_b, D);
    return;
  }
  // Every other case: the per-element body the CUDA kernels run (core/dot.hpp).
  const double work = double(M) * N * K * (model.datapath == Datapath::kFp32Sequential ? 1.0 : 8.0);
#pragma omp parallel for schedule(dynamic, 4) if (work >= detail::kParallelMinMacs)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] =
          core::gemm_tn_element(A + std::size_t(i) * std::size_t(K), sa, B + std::size_t(j) * std::size_t(K), sb, K,
                                model, acc.promotion_interval, acc.split_k, s);
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
      float v = t[idx];
      if (ep.alpha != 1.0f) v = ep.alpha * v;
      if (ep.beta != 0.0f) v = v + ep.beta * ep.C[idx];
      if (ep.bias) v = v + ep.bias[j];
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
