// Tensor-core MMA tiles and the fp32 comparison (see include/fp8emu/emulation/mma.hpp).
#include "fp8emu/emulation/mma.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "fp8emu/core/dot.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"
#include "gemm_tc_values.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

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

// Every element of x [n] a value of the operand format: a parallel pass that finds whether any is
// not, then (only then) the first one, for the error.
// For bf16 and tf32 the pass is core::is_operand_value's test written for vectors (the low fraction
// bits clear, or a NaN); fp16's round trip is core::is_operand_value itself.
void check_values(const float* x, std::size_t n, core::MmaOperands o, const char* who, const char* name) {
  unsigned bad = 0;
  if (o == core::MmaOperands::kFp16) {
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= std::size_t(detail::kParallelMinElements) / 4)
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(n); ++i) bad |= core::is_operand_value(core::f32_to_bits(x[i]), o) ? 0u : 1u;
  } else {
    const std::uint32_t low = (1u << (23 - core::operand_fraction_bits(o))) - 1u;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= std::size_t(detail::kParallelMinElements))
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(n); ++i) {
      const std::uint32_t u = core::f32_to_bits(x[i]);
      bad |= ((u & low) != 0u ? 1u : 0u) & ((u & 0x7FFFFFFFu) <= 0x7F800000u ? 1u : 0u);
    }
  }
  if (!bad) return;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = core::f32_to_bits(x[i]);
    FP8EMU_CHECK(core::is_operand_value(u, o), who, ": ", name, "[", i, "] = ", x[i], " (0x", std::hex, u, std::dec,
                 ") is not a ", core::operand_format_name(o), " value; round the operand to ", core::operand_format_name(o),
                 " first");
  }
}

// Operands of a values GEMM decoded once, row by row ([rows, k]): the signed significand and the
// exponent of each value (zero: significand 0, exponent kZeroExp), and per row whether it holds a
// NaN or an Inf (such rows take the per-element core path). For the vector kernel
// (detail::gemm_tc_values) also the value and exponent of each element of the rows it takes (`vec`:
// finite, non-zero exponents in the kernel's range), zeros elsewhere.
constexpr int kZeroExp = -30000;
struct DecodedRows {
  int rows = 0, k = 0;
  // Left uninitialised (no page is touched) where the vector kernel takes the row.
  std::unique_ptr<std::int32_t[]> sig, exp;
  std::unique_ptr<core::MmaDecoded[]> terms;  // the core path's form, for rows with specials
  std::vector<unsigned char> special;
  const float* vval = nullptr;  // per-thread scratch (detail::grow), valid until the next decode
  const std::int32_t* vexp = nullptr;
  std::vector<unsigned char> vec;
  // direct: the AVX-512 kernel reads the rows it takes in place (detail::TcValuesSource), no arrays.
  bool direct = false;
  detail::TcValuesSource source{};
};

// Per-thread scratch of the vector kernel's operands, A's and B's, reused across calls.
struct VectorScratch {
  std::vector<float> val;
  std::vector<std::int32_t> exp;
};
thread_local VectorScratch vector_scratch[2];

// Whether the vector kernel takes every row (flags as DecodedRows::vec).
bool all_taken(const std::vector<unsigned char>& vec) {
  return std::all_of(vec.begin(), vec.end(), [](unsigned char v) { return v != 0; });
}

// The element loop's arrays of d (rows x k), allocated uninitialised where not yet there.
void element_arrays(DecodedRows& d) {
  if (d.sig) return;
  const std::size_t n = std::size_t(d.rows) * std::size_t(d.k);
  d.sig.reset(new std::int32_t[n]);
  d.exp.reset(new std::int32_t[n]);
  d.terms.reset(new core::MmaDecoded[n]);
}

// Decodes rows x k values (element (r, t) at x[r * rs + t * ts]); with `vector` (into
// vector_scratch[slot]) the kernel's arrays too, rows qualifying with exponents in
// [lo, detail::kTcValuesMaxExponent], and the element loop's arrays only for the other rows.
DecodedRows decode_rows(const float* x, int rows, int k, std::size_t rs, std::size_t ts, core::MmaOperands o,
                        bool vector, int lo, int slot, bool direct) {
  DecodedRows d;
  d.rows = rows;
  d.k = k;
  const std::size_t n = std::size_t(rows) * std::size_t(k);
  if (!direct) element_arrays(d);  // the direct path allocates them only for a row it leaves
  d.special.assign(std::size_t(rows), 0);
  d.vec.assign(std::size_t(rows), 0);
  float* vval = nullptr;
  std::int32_t* vexp = nullptr;
  if (vector && direct) {
    d.direct = true;
    d.source = detail::TcValuesSource{x, rs, ts, nullptr};  // rows_ok: d.vec, set by the caller
  } else if (vector) {
    vval = detail::grow(vector_scratch[slot].val, n);
    vexp = detail::grow(vector_scratch[slot].exp, n);
    d.vval = vval;
    d.vexp = vexp;
  }
  const auto element = [&](int r, int t) {
    const std::size_t at = std::size_t(r) * std::size_t(k) + std::size_t(t);
    const core::MmaDecoded v = core::decode_value(core::f32_to_bits(x[std::size_t(r) * rs + std::size_t(t) * ts]), o);
    d.terms[at] = v;
    d.sig[at] = v.term.sig == 0u ? 0 : (v.term.sign ? -std::int32_t(v.term.sig) : std::int32_t(v.term.sig));
    d.exp[at] = v.term.sig == 0u ? kZeroExp : v.term.exp;
    return v;
  };
  if (!vector) {
#pragma omp parallel for schedule(static) if (double(rows) * k >= 1e6)
    for (int r = 0; r < rows; ++r)
      for (int t = 0; t < k; ++t)
        if (element(r, t).cls != 0u) d.special[std::size_t(r)] = 1;
    return d;
  }
  // The exponent is core::decode_value's for finite non-zero values (the fp32 exponent, clamped at
  // the format's emin); NaN, Inf and exponents outside [lo, 50] put the row out of range.
  const int emin = core::operand_emin(o);
  // On the fp32 exponent field f: the clamped exponent max(f - 127, emin) is below lo exactly when
  // emin < lo and f < lo + 127, above 50 exactly when f > 50 + 127 (branch-free, for vectors).
  const std::uint32_t field_lo = emin < lo ? std::uint32_t(lo + 127) : 0u;
  const std::uint32_t field_hi = std::uint32_t(detail::kTcValuesMaxExponent + 127);
  const auto out_of_range = [field_lo, field_hi](float xv) -> unsigned char {
    const std::uint32_t mag = core::f32_to_bits(xv) & 0x7FFFFFFFu, f = mag >> 23;
    return static_cast<unsigned char>((mag >= 0x7F800000u ? 1u : 0u) |
                                      ((mag != 0u ? 1u : 0u) & ((f < field_lo ? 1u : 0u) | (f > field_hi ? 1u : 0u))));
  };
  const auto element_row = [&](int r) {
    for (int t = 0; t < k; ++t)
      if (element(r, t).cls != 0u) d.special[std::size_t(r)] = 1;
  };
  if (direct) {  // the row flags only: rows contiguous (ts = 1) or columns contiguous (rs = 1)
    std::vector<unsigned char> out(std::size_t(rows), 0);
    const bool parallel = double(rows) * k >= double(detail::kParallelMinElements);
    if (ts == 1) {
#pragma omp parallel for schedule(static) if (parallel)
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + std::size_t(r) * rs;
        unsigned char o_r = 0;
        for (int t = 0; t < k; ++t) o_r |= out_of_range(xr[t]);
        out[std::size_t(r)] = o_r;
      }
    } else {
      constexpr int kSpan = 64;  // columns per task
#pragma omp parallel for schedule(static) if (parallel)
      for (int r0 = 0; r0 < rows; r0 += kSpan) {
        const int span = std::min(kSpan, rows - r0);
        unsigned char o_r[kSpan] = {};
        for (int t = 0; t < k; ++t) {
          const float* xt = x + std::size_t(t) * ts + std::size_t(r0);
          for (int j = 0; j < span; ++j) o_r[j] |= out_of_range(xt[j]);
        }
        std::copy(o_r, o_r + span, out.begin() + r0);
      }
    }
    for (int r = 0; r < rows; ++r) {
      d.vec[std::size_t(r)] = out[std::size_t(r)] ? 0 : 1;
      if (!out[std::size_t(r)]) continue;
      element_arrays(d);
      element_row(r);  // the element loop computes this row's elements
    }
    return d;
  }
  // The kernel's arrays, in tiles of 16 rows x 16 elements read through a buffer (B's rows are the
  // source's columns: its reads stay within 16 cache lines per tile).
  constexpr int kGroup = 16;
#pragma omp parallel for schedule(static) if (double(rows) * k >= 1e6)
  for (int r0 = 0; r0 < rows; r0 += kGroup) {
    const int group = std::min(kGroup, rows - r0);
    int out[kGroup] = {};
    float buf[kGroup][kGroup];
    for (int t0 = 0; t0 < k; t0 += kGroup) {
      const int m = std::min(kGroup, k - t0);
      for (int j = 0; j < group; ++j)
        for (int tt = 0; tt < m; ++tt) buf[j][tt] = x[std::size_t(r0 + j) * rs + std::size_t(t0 + tt) * ts];
      for (int j = 0; j < group; ++j) {
        const std::size_t at = std::size_t(r0 + j) * std::size_t(k) + std::size_t(t0);
        int o_j = 0;
        for (int tt = 0; tt < m; ++tt) {
          const float xv = buf[j][tt];
          const std::uint32_t mag = core::f32_to_bits(xv) & 0x7FFFFFFFu;
          const bool zero = mag == 0u;
          o_j |= out_of_range(xv);
          vval[at + std::size_t(tt)] = zero ? 0.0f : xv;
          vexp[at + std::size_t(tt)] = zero ? detail::kTcValuesNoExponent : std::max(int(mag >> 23) - 127, emin);
        }
        out[j] |= o_j;
      }
    }
    for (int j = 0; j < group; ++j) {
      const int r = r0 + j;
      const std::size_t row = std::size_t(r) * std::size_t(k);
      if (!out[j]) {
        d.vec[std::size_t(r)] = 1;
        continue;
      }
      // The kernel sees zeros; the element loop recomputes this row's elements.
      std::fill(vval + row, vval + row + std::size_t(k), 0.0f);
      std::fill(vexp + row, vexp + row + std::size_t(k), detail::kTcValuesNoExponent);
      element_row(r);
    }
  }
  return d;
}

// The element loop's arrays of the rows decode_rows left to the vector kernel (needed when the other
// operand has a row the kernel does not take): the same x, strides and format.
void complete_rows(DecodedRows& d, const float* x, std::size_t rs, std::size_t ts, core::MmaOperands o) {
  bool any = false;
  for (unsigned char v : d.vec) any = any || v;
  if (!any) return;
  element_arrays(d);
  const int k = d.k;
#pragma omp parallel for schedule(static) if (double(d.rows) * k >= 1e6)
  for (int r = 0; r < d.rows; ++r) {
    if (!d.vec[std::size_t(r)]) continue;
    for (int t = 0; t < k; ++t) {
      const std::size_t at = std::size_t(r) * std::size_t(k) + std::size_t(t);
      const core::MmaDecoded v = core::decode_value(core::f32_to_bits(x[std::size_t(r) * rs + std::size_t(t) * ts]), o);
      d.terms[at] = v;
      d.sig[at] = v.term.sig == 0u ? 0 : (v.term.sign ? -std::int32_t(v.term.sig) : std::int32_t(v.term.sig));
      d.exp[at] = v.term.sig == 0u ? kZeroExp : v.term.exp;
    }
  }
}

// Decodes A (rows of x, stride ras / tas) and B (rbs / tbs) for gemm_decoded: with the vector
// kernel, each operand's element arrays in full when the other has a row the kernel does not take.
std::pair<DecodedRows, DecodedRows> decode_operands(const float* A, int M, std::size_t ras, std::size_t tas,
                                                    const float* B, int N, std::size_t rbs, std::size_t tbs, int K,
                                                    core::MmaOperands o, bool vector, int lo,
                                                    const core::MmaDatapath& p) {
  // The AVX-512 kernel reads both operands in place where it takes the row and the layouts.
  const bool direct = vector && detail::gemm_tc_values_avx512_takes(p) && tas == 1 && (tbs == 1 || rbs == 1);
  std::pair<DecodedRows, DecodedRows> d{decode_rows(A, M, K, ras, tas, o, vector, lo, 0, direct),
                                        decode_rows(B, N, K, rbs, tbs, o, vector, lo, 1, direct)};
  if (!vector) return d;
  if (!all_taken(d.second.vec)) complete_rows(d.first, A, ras, tas, o);
  if (!all_taken(d.first.vec)) complete_rows(d.second, B, rbs, tbs, o);
  return d;
}

// Whether a values GEMM without C runs the vector kernel (detail::gemm_tc_values).
bool vector_kernel(const core::MmaDatapath& p, int K, const float* C) {
  return C == nullptr && K <= detail::kTcValuesMaxK && detail::tc_values_fast_path(p);
}

// One output element on a single-step row with C in the alignment and the fp32 accumulator (every
// fp16, bf16 and tf32 row), without NaN or Inf operands: core::mma_step's arithmetic on the decoded
// significands and exponents, block after block along K (tested equal to the core path).
std::uint32_t dot_fast(const std::int32_t* sa, const std::int32_t* ea, const std::int32_t* sb, const std::int32_t* eb,
                       int K, std::uint32_t c, const core::MmaDatapath& p, int frac2) {
  for (int k0 = 0; k0 < K; k0 += p.block) {
    const int n = K - k0 < p.block ? K - k0 : p.block;
    if ((c & 0x7FFFFFFFu) >= 0x7F800000u) return (c & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFFFFFFu : c;
    const core::MmaTerm ct = core::decode_f32_term(c);
    int E = ct.sig ? ct.exp : kZeroExp;
    for (int t = k0; t < k0 + n; ++t) {
      const int e = ea[t] + eb[t];
      if (e > E) E = e;  // a zero operand's kZeroExp keeps its product out
    }
    if (E <= kZeroExp / 2) {  // no non-zero term
      c = 0u;
      continue;
    }
    if (E < p.exponent_floor) E = p.exponent_floor;
    std::int64_t S = 0;
    if (ct.sig) {
      const int sh = p.fraction_bits - 23 - (E - ct.exp);
      const std::uint64_t m = sh >= 0 ? (std::uint64_t(ct.sig) << sh) : (-sh >= 64 ? 0u : (std::uint64_t(ct.sig) >> -sh));
      S = ct.sign ? -std::int64_t(m) : std::int64_t(m);
    }
    const int base = p.fraction_bits - frac2 - E;
    for (int t = k0; t < k0 + n; ++t) {
      const std::int64_t prod = std::int64_t(sa[t]) * sb[t];
      if (prod == 0) continue;
      const int sh = base + ea[t] + eb[t];
      const std::uint64_t mag = std::uint64_t(prod < 0 ? -prod : prod);
      const std::uint64_t m = sh >= 0 ? (mag << sh) : (-sh >= 64 ? 0u : (mag >> -sh));
      S += prod < 0 ? -std::int64_t(m) : std::int64_t(m);
    }
    if (S == 0) {
      c = 0u;
      continue;
    }
    const std::uint32_t sign = S < 0 ? 1u : 0u;
    std::uint64_t T = std::uint64_t(S < 0 ? -S : S);
    const int nbits = core::bit_length(T), keep = p.significant_bits;
    if (nbits > keep) T = (T >> (nbits - keep)) << (nbits - keep);
    c = core::scaled_int_to_f32_rz(sign, T, E - p.fraction_bits);
  }
  return c;
}

// D [M, N] from decoded A rows [M, K] and B rows [N, K], C [M, N] or null: the vector kernel where
// both were decoded for it, then the elements of the rows it does not take element by element.
void gemm_decoded(const DecodedRows& a, const DecodedRows& b, const core::MmaDatapath& p, const float* C, float* D) {
  const int M = a.rows, N = b.rows, K = a.k;
  const bool fast = p.steps == 1 && p.c_joins_first_step && p.accumulator == core::MmaAccumulator::kFp32;
  const int frac2 = 2 * core::operand_fraction_bits(p.operands);
  const bool direct = a.direct && b.direct;
  const bool vector = direct || (a.vval != nullptr && b.vval != nullptr);
  if (direct) {
    detail::TcValuesSource sa = a.source, sb = b.source;
    sa.rows_ok = a.vec.data();
    sb.rows_ok = b.vec.data();
    detail::gemm_tc_values_avx512(M, N, K, sa, sb, p, D);
  } else if (vector) {
    detail::gemm_tc_values(M, N, K, a.vval, a.vexp, b.vval, b.vexp, p, D);
  }
  if (vector && all_taken(a.vec) && all_taken(b.vec)) return;  // the kernel took every element
#pragma omp parallel for schedule(static) if (double(M) * N * K >= 1e6)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      if (vector && a.vec[std::size_t(i)] && b.vec[std::size_t(j)]) continue;
      const std::size_t at = std::size_t(i) * std::size_t(N) + std::size_t(j);
      const std::size_t ra = std::size_t(i) * std::size_t(K), rb = std::size_t(j) * std::size_t(K);
      const std::uint32_t c = C ? core::f32_to_bits(C[at]) : 0u;
      if (fast && !a.special[std::size_t(i)] && !b.special[std::size_t(j)])
        D[at] = core::bits_to_f32(dot_fast(&a.sig[ra], &a.exp[ra], &b.sig[rb], &b.exp[rb], K, c, p, frac2));
      else
        D[at] = core::bits_to_f32(
            core::mma_dot(core::MmaDecodedTerms{&a.terms[ra]}, core::MmaDecodedTerms{&b.terms[rb]}, K, c, p));
    }
}
}  // namespace

void mma_tn_values(int M, int N, int K, const float* A, const float* B, Accumulation model, const float* C, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "mma: negative shape M=", M, " N=", N, " K=", K);
  const AccumulationModel& m = values_row(model, "mma");
  const std::size_t na = std::size_t(M) * std::size_t(K), nb = std::size_t(N) * std::size_t(K);
  check_values(A, na, m.operands, "mma", "A");
  check_values(B, nb, m.operands, "mma", "B");
  const core::MmaDatapath p = m.tensor_core();
  const bool vec = vector_kernel(p, K, C);
  const int lo = detail::tc_values_min_exponent(p);
  const auto d = decode_operands(A, M, std::size_t(K), 1, B, N, std::size_t(K), 1, K, m.operands, vec, lo, p);
  gemm_decoded(d.first, d.second, p, C, D);
  for (VectorScratch& v : vector_scratch) {
    detail::trim(v.val);
    detail::trim(v.exp);
  }
}

void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) {
  FP8EMU_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_tc_nn: negative shape M=", M, " N=", N, " K=", K);
  const AccumulationModel& m = values_row(model, "gemm_tc_nn");
  const std::size_t na = std::size_t(M) * std::size_t(K), nb = std::size_t(N) * std::size_t(K);
  check_values(A, na, m.operands, "gemm_tc_nn", "A");
  check_values(B, nb, m.operands, "gemm_tc_nn", "B");
  const core::MmaDatapath p = m.tensor_core();
  const bool vec = vector_kernel(p, K, nullptr);
  const int lo = detail::tc_values_min_exponent(p);
  const auto d = decode_operands(A, M, std::size_t(K), 1, B, N, 1, std::size_t(N), K, m.operands, vec, lo,
                                 p);  // B's columns as rows
  gemm_decoded(d.first, d.second, p, nullptr, D);
  for (VectorScratch& v : vector_scratch) {
    detail::trim(v.val);
    detail::trim(v.exp);
  }
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
