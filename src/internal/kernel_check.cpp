// Bit-for-bit comparison of two kernel sets (see fp8emu_internal/kernel_check.hpp).
#include "fp8emu_internal/kernel_check.hpp"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <random>
#include <sstream>
#include <utility>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/scale.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend {
namespace {

std::uint64_t mix(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + a * 0xBF58476D1CE4E5B9ull + b * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z * 0xD6E8FEB86659FD93ull;
}

std::string hex32(std::uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", unsigned(u));
  return buf;
}
std::string hex8(std::uint32_t u) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", unsigned(u & 0xFFu));
  return buf;
}

// Short labels of the rows ("e4m3", "e5m2"): the registry name without its "fn" suffix.
std::string short_name(Format f) {
  const std::string n = format_name(f);
  return n.size() > 2 && n.compare(n.size() - 2, 2, "fn") == 0 ? n.substr(0, n.size() - 2) : n;
}

// The rows, in order of first use, keyed by (kernel, inputs).
class Recorder {
 public:
  KernelCheckRow& row(const std::string& kernel, const std::string& inputs) {
    const auto key = std::make_pair(kernel, inputs);
    auto it = index_.find(key);
    if (it == index_.end()) {
      it = index_.emplace(key, rows_.size()).first;
      KernelCheckRow r;
      r.kernel = kernel;
      r.inputs = inputs;
      rows_.push_back(std::move(r));
    }
    return rows_[it->second];
  }
  std::vector<KernelCheckRow> take() { return std::move(rows_); }

 private:
  std::vector<KernelCheckRow> rows_;
  std::map<std::pair<std::string, std::string>, std::size_t> index_;
};

void note_mismatch(KernelCheckRow& r, const std::string& what) {
  ++r.mismatches;
  if (r.first_mismatch.empty()) r.first_mismatch = what;
}

void cmp_f32(KernelCheckRow& r, const std::string& where, const float* a, const float* b, std::size_t n) {
  r.values += n;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t ua = core::f32_to_bits(a[i]), ub = core::f32_to_bits(b[i]);
    if (ua == ub) continue;
    if (std::isnan(a[i]) && std::isnan(b[i])) {
      ++r.nan_payload_differences;
      continue;
    }
    note_mismatch(r, where + "[" + std::to_string(i) + "]: " + hex32(ua) + " (reference) vs " + hex32(ub));
  }
}

void cmp_codes(KernelCheckRow& r, const std::string& where, const std::uint8_t* a, const std::uint8_t* b,
               std::size_t n) {
  r.values += n;
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) note_mismatch(r, where + "[" + std::to_string(i) + "]: " + hex8(a[i]) + " (reference) vs " + hex8(b[i]));
}

void cmp_u64(KernelCheckRow& r, const std::string& where, std::uint64_t a, std::uint64_t b) {
  ++r.values;
  if (a != b) note_mismatch(r, where + ": " + std::to_string(a) + " (reference) vs " + std::to_string(b));
}

void cmp_stats(KernelCheckRow& r, const std::string& where, const emu::QuantizeStats& a, const emu::QuantizeStats& b) {
  cmp_u64(r, where + " stats.count", a.count, b.count);
  cmp_u64(r, where + " stats.saturated", a.saturated, b.saturated);
  cmp_u64(r, where + " stats.underflow", a.underflow, b.underflow);
  cmp_u64(r, where + " stats.nan", a.nan, b.nan);
}

template <class T>
bool same_size(KernelCheckRow& r, const std::string& where, const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() == b.size()) return true;
  ++r.values;
  note_mismatch(r, where + ": " + std::to_string(a.size()) + " elements (reference) vs " + std::to_string(b.size()));
  return false;
}

void cmp_block(KernelCheckRow& r, const std::string& where, const emu::BlockQuantized& a,
               const emu::BlockQuantized& b) {
  cmp_u64(r, where + " n", std::uint64_t(a.n), std::uint64_t(b.n));
  cmp_u64(r, where + " k", std::uint64_t(a.k), std::uint64_t(b.k));
  cmp_u64(r, where + " block", std::uint64_t(a.block), std::uint64_t(b.block));
  cmp_u64(r, where + " format", std::uint64_t(a.format), std::uint64_t(b.format));
  if (same_size(r, where + " codes", a.codes, b.codes))
    cmp_codes(r, where + " codes", a.codes.data(), b.codes.data(), a.codes.size());
  if (same_size(r, where + " scale_inv", a.scale_inv, b.scale_inv))
    cmp_f32(r, where + " scale_inv", a.scale_inv.data(), b.scale_inv.data(), a.scale_inv.size());
  if (same_size(r, where + " e8m0", a.e8m0, b.e8m0))
    cmp_codes(r, where + " e8m0", a.e8m0.data(), b.e8m0.data(), a.e8m0.size());
}

// Runs the candidate's call; an exception becomes a mismatch of the row (false returned).
template <class F>
bool guarded(KernelCheckRow& r, const std::string& where, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    note_mismatch(r, where + ": the candidate threw: " + e.what());
    return false;
  }
}

std::uint32_t random_finite_code(std::mt19937_64& g, FormatSpec f) {
  for (;;) {
    const std::uint32_t c = std::uint32_t(g() & 0xFFu);
    if ((c & f.top_code()) <= f.max_finite_code()) return c;
  }
}

}  // namespace

const char* to_string(InputFamily f) {
  switch (f) {
    case InputFamily::kNormal: return "normal";
    case InputFamily::kWide: return "wide (log-uniform)";
    case InputFamily::kNanInf: return "NaN/Inf/zeros";
    case InputFamily::kSubnormal: return "subnormal";
    case InputFamily::kOverflow: return "overflow";
  }
  return "?";
}

std::vector<InputFamily> all_input_families() {
  return {InputFamily::kNormal, InputFamily::kWide, InputFamily::kNanInf, InputFamily::kSubnormal,
          InputFamily::kOverflow};
}

std::vector<float> make_inputs(InputFamily family, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto sign = [&](float v) { return (g() & 1u) ? -v : v; };
  std::vector<float> x(n);
  static const std::uint32_t kSpecials[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu,
                                            0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u};
  // Around each format's max finite value and RNE overflow threshold (E4M3: 448 / 464; E5M2:
  // 57344 / 61440), from the format records.
  const float m4 = max_finite_f32(Format::kE4M3), t4 = float(kSpecE4M3.overflow_threshold());
  const float m5 = max_finite_f32(Format::kE5M2), t5 = float(kSpecE5M2.overflow_threshold());
  const float kOverflow[] = {m4, (m4 + t4) / 2, t4, t4 + 1.0f, std::nextafter(t4, 0.0f), std::nextafter(t4, FLT_MAX),
                             2 * t4 - m4, m5, t5, std::nextafter(t5, 0.0f), std::nextafter(t5, FLT_MAX),
                             2 * t5 - m5, FLT_MAX, 1e30f, 3.0e38f};
  for (std::size_t i = 0; i < n; ++i) {
    float v = 0.0f;
    switch (family) {
      case InputFamily::kNormal:
        v = normal(g);
        break;
      case InputFamily::kWide:
        v = sign(std::exp2(-40.0f + 80.0f * unit(g)));
        break;
      case InputFamily::kNanInf:
        v = unit(g) < 0.05f ? core::bits_to_f32(kSpecials[g() % (sizeof kSpecials / sizeof kSpecials[0])])
                            : normal(g);
        break;
      case InputFamily::kSubnormal: {
        const float u = unit(g);
        if (u < 0.6f) {
          v = sign(std::exp2(-24.0f + 20.0f * unit(g)));
        } else if (u < 0.8f) {  // midpoints between FP8 subnormals (ties of the cast)
          const float q = (g() & 1u) ? 0x1p-9f : 0x1p-16f;
          v = sign((float(g() % 8u) + 0.5f) * q);
        } else {  // fp32 subnormals
          v = sign(core::bits_to_f32(std::uint32_t(1u + g() % 0x7FFFFFu)));
        }
        break;
      }
      case InputFamily::kOverflow: {
        const float u = unit(g);
        if (u < 0.4f) v = kOverflow[g() % (sizeof kOverflow / sizeof kOverflow[0])];
        else if (u < 0.7f) v = 440.0f + 40.0f * unit(g);
        else v = 57000.0f + 9000.0f * unit(g);
        v = sign(v);
        break;
      }
    }
    x[i] = v;
  }
  return x;
}

const char* to_string(CodeFamily f) {
  switch (f) {
    case CodeFamily::kNormal: return "normal (quantized)";
    case CodeFamily::kWide: return "all finite codes";
    case CodeFamily::kSpecial: return "finite + NaN/Inf codes";
  }
  return "?";
}

std::vector<std::uint8_t> make_codes(CodeFamily family, Format fmt, std::size_t n, std::uint64_t seed,
                                     float* scale_inv) {
  const FormatSpec& f = spec_of(fmt);
  std::vector<std::uint8_t> q(n);
  float si = 1.0f;
  std::mt19937_64 g(seed);
  if (family == CodeFamily::kNormal) {
    const std::vector<float> x = make_inputs(InputFamily::kNormal, n, seed);
    const float amax = emu::compute_amax(x.data(), n);
    const float scale = core::compute_scale_from_amax(amax, max_finite_f32(fmt), false, 0.0f, FLT_MAX);
    emu::quantize(x.data(), n, scale, fmt, q.data(), nullptr);
    si = emu::scale_inv_of(scale);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t c = random_finite_code(g, f);
      if (family == CodeFamily::kSpecial && g() % 1000u == 0) {
        // A NaN code, or for E5M2 half of the time an Inf code; either sign.
        c = (f.has_inf && (g() & 1u)) ? f.inf_code() : f.top_code() - std::uint32_t(g() % std::uint64_t(f.nan_codes));
        if (g() & 1u) c |= f.sign_mask();
      }
      q[i] = std::uint8_t(c);
    }
  }
  if (scale_inv) *scale_inv = si;
  return q;
}

bool same_f32(float a, float b) {
  return core::f32_to_bits(a) == core::f32_to_bits(b) || (std::isnan(a) && std::isnan(b));
}

// Every model of the accumulation table, with fast accumulation and, where the model takes one, a
// promotion interval of one block (50 for block-less models: ragged runs) and of 128 (TE's split),
// and cuBLASLt's split-K: 3 splits with fast accumulation (K = 2s + 1 > 256 gives three ranges of
// 128, the last one short; smaller K one or two ranges) and 2 splits with promotion every 128.
std::vector<emu::GemmAccumulation> kernel_check_accumulations() {
  std::vector<emu::GemmAccumulation> accs;
  for (const AccumulationModel& m : kAccumulationModels) {
    accs.push_back({m.id, 0, 1});
    if (!m.takes_promotion()) continue;
    accs.push_back({m.id, m.block > 1 ? m.block : 50, 1});
    if (128 % m.block == 0 && 128 != m.block) accs.push_back({m.id, 128, 1});
    accs.push_back({m.id, 0, 3});
    if (128 % m.block == 0) accs.push_back({m.id, 128, 2});
  }
  return accs;
}

std::vector<KernelCheckRow> check_kernels(const Kernels& ref, const Kernels& cand, const KernelCheckOptions& opt) {
  Recorder rec;
  auto wants = [&](const char* method) { return opt.only.empty() || opt.only == method; };
  auto progress = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  // Every FP8 format of the registry, and every operand pair a GEMM takes.
  std::vector<Format> kFp8Formats;
  for (const FormatRecord& r : kFormats)
    if (is_fp8(r.id)) kFp8Formats.push_back(r.id);
  std::vector<std::pair<Format, Format>> kPairs;
  for (Format a : kFp8Formats)
    for (Format b : kFp8Formats)
      if (emu::gemm_operand_pair_supported(a, b)) kPairs.emplace_back(a, b);
  const std::vector<emu::GemmAccumulation> kAccs = kernel_check_accumulations();
  const CodeFamily kCodeFamilies[] = {CodeFamily::kNormal, CodeFamily::kWide, CodeFamily::kSpecial};

  for (const int s : opt.sizes) {
    FP8EMU_CHECK(s >= 1, "kernel check: sizes must be >= 1, got ", s);
    const int rows = s, cols = s + 2;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    const std::string sz = "size " + std::to_string(s);

    // ---- casts of fp32 inputs ----
    for (const InputFamily fam : all_input_families()) {
      const std::string in = to_string(fam);
      const std::vector<float> x = make_inputs(fam, n, mix(opt.seed, std::uint64_t(s), 1 + std::uint64_t(fam)));
      progress(sz + ", " + in + ": casts");
      if (wants("compute_amax")) {
        KernelCheckRow& r = rec.row("compute_amax", in);
        const float a = ref.compute_amax(x.data(), n);
        float b = 0.0f;
        ++r.calls;
        if (guarded(r, sz, [&] { b = cand.compute_amax(x.data(), n); })) cmp_f32(r, sz + " amax", &a, &b, 1);
      }
      for (const Format fmt : kFp8Formats) {
        const std::string w = sz + " " + short_name(fmt);
        if (wants("quantize")) {
          KernelCheckRow& r = rec.row("quantize", in);
          const float current = core::compute_scale_from_amax(emu::compute_amax(x.data(), n), max_finite_f32(fmt),
                                                              false, 0.0f, FLT_MAX);
          for (const float scale : {1.0f, 3.0f, current, 0x1p-20f, INFINITY}) {
            const std::string ws = w + " scale " + hex32(core::f32_to_bits(scale));
            std::vector<std::uint8_t> qa(n), qb(n);
            float amax_a = 0.5f, amax_b = 0.5f;
            const emu::QuantizeStats sa = ref.quantize(x.data(), n, scale, fmt, qa.data(), &amax_a);
            emu::QuantizeStats sb;
            ++r.calls;
            if (!guarded(r, ws, [&] { sb = cand.quantize(x.data(), n, scale, fmt, qb.data(), &amax_b); })) continue;
            cmp_codes(r, ws + " q", qa.data(), qb.data(), n);
            cmp_stats(r, ws, sa, sb);
            cmp_f32(r, ws + " amax", &amax_a, &amax_b, 1);
          }
        }
        if (wants("cast_transpose")) {
          // Both outputs, and each alone (the other null); shapes [rows, cols], the transposed
          // one, and one with both sides multiples of 4 (the GPU's vectorised path) from the same
          // values.
          KernelCheckRow& r = rec.row("cast_transpose", in);
          const float current = core::compute_scale_from_amax(emu::compute_amax(x.data(), n), max_finite_f32(fmt),
                                                              false, 0.0f, FLT_MAX);
          std::vector<std::pair<int, int>> shapes{{rows, cols}, {cols, rows}};
          if (rows >= 4) shapes.emplace_back(rows / 4 * 4, int(n / std::size_t(rows / 4 * 4)) / 4 * 4);
          for (const float scale : {1.0f, current, 0x1p-20f}) {
            for (const int outputs : {3, 1, 2}) {
              for (const std::pair<int, int>& shape : shapes) {
                const int cr = shape.first, cc = shape.second;
                const std::string ws = w + " [" + std::to_string(cr) + "x" + std::to_string(cc) + "] scale " +
                                       hex32(core::f32_to_bits(scale)) + (outputs == 3 ? " both" : outputs == 1 ? " rowwise" : " columnwise");
                std::vector<std::uint8_t> ra(n, 0xA5), ca(n, 0xA5), rb(n, 0xA5), cb(n, 0xA5);
                float amax_a = 0.5f, amax_b = 0.5f;
                const emu::QuantizeStats sa = ref.cast_transpose(x.data(), cr, cc, scale, fmt, outputs & 1 ? ra.data() : nullptr,
                                                                 outputs & 2 ? ca.data() : nullptr, &amax_a);
                emu::QuantizeStats sb;
                ++r.calls;
                if (!guarded(r, ws, [&] {
                      sb = cand.cast_transpose(x.data(), cr, cc, scale, fmt, outputs & 1 ? rb.data() : nullptr,
                                               outputs & 2 ? cb.data() : nullptr, &amax_b);
                    }))
                  continue;
                cmp_codes(r, ws + " rowwise", ra.data(), rb.data(), n);
                cmp_codes(r, ws + " columnwise", ca.data(), cb.data(), n);
                cmp_stats(r, ws, sa, sb);
                cmp_f32(r, ws + " amax", &amax_a, &amax_b, 1);
              }
            }
          }
        }
        for (const emu::BlockAxis axis : {emu::BlockAxis::kRowwise, emu::BlockAxis::kColumnwise}) {
          const std::string wa = w + (axis == emu::BlockAxis::kRowwise ? " rowwise" : " columnwise");
          if (wants("quantize_mxfp8")) {
            for (const E8M0Rule rule : {E8M0Rule::kTransformerEngine, E8M0Rule::kOcp}) {
              KernelCheckRow& r =
                  rec.row(rule == E8M0Rule::kOcp ? "quantize_mxfp8 ocp" : "quantize_mxfp8 te", in);
              emu::QuantizeStats sa, sb;
              const emu::BlockQuantized a = ref.quantize_mxfp8(x.data(), rows, cols, axis, fmt, rule, &sa);
              emu::BlockQuantized b;
              ++r.calls;
              if (!guarded(r, wa, [&] { b = cand.quantize_mxfp8(x.data(), rows, cols, axis, fmt, rule, &sb); }))
                continue;
              cmp_block(r, wa, a, b);
              cmp_stats(r, wa, sa, sb);
            }
          }
          if (wants("quantize_block_1d")) {
            struct V {
              const char* label;
              int block;
              bool pow2;
              float eps;
            };
            for (const V v : {V{"quantize_block_1d 1x128 pow2", 128, true, 0.0f},
                              V{"quantize_block_1d 1x32 eps", 32, false, 1e-3f}}) {
              KernelCheckRow& r = rec.row(v.label, in);
              emu::QuantizeStats sa, sb;
              const emu::BlockQuantized a =
                  ref.quantize_block_1d(x.data(), rows, cols, axis, fmt, v.block, v.pow2, v.eps, &sa);
              emu::BlockQuantized b;
              ++r.calls;
              if (!guarded(r, wa, [&] {
                    b = cand.quantize_block_1d(x.data(), rows, cols, axis, fmt, v.block, v.pow2, v.eps, &sb);
                  }))
                continue;
              cmp_block(r, wa, a, b);
              cmp_stats(r, wa, sa, sb);
            }
          }
        }
        if (wants("quantize_mxfp8_both") || wants("quantize_block_1d_both")) {
          // The fused two-axis casts against the reference's two single-axis calls (codes, scales,
          // E8M0 codes and each copy's counts): both copies and each alone; shapes [rows, cols], the
          // transposed one, and from the same values shapes with both sides multiples of 4 (the
          // GPU's vectorised path; one at least 128 wide, so that whole 32 x 128 tiles occur).
          std::vector<std::pair<int, int>> shapes{{rows, cols}, {cols, rows}};
          if (rows >= 4) shapes.emplace_back(rows / 4 * 4, int(n / std::size_t(rows / 4 * 4)) / 4 * 4);
          if (n >= 512) shapes.emplace_back(int(n / 128) / 4 * 4, 128);
          struct V {
            std::string label;
            bool mx;
            E8M0Rule rule;
            int block;
            bool pow2;
            float eps;
          };
          std::vector<V> variants;
          if (wants("quantize_mxfp8_both"))
            for (const E8M0Rule rule : {E8M0Rule::kTransformerEngine, E8M0Rule::kOcp})
              variants.push_back({rule == E8M0Rule::kOcp ? "quantize_mxfp8_both ocp" : "quantize_mxfp8_both te", true,
                                  rule, 32, false, 0.0f});
          if (wants("quantize_block_1d_both")) {
            variants.push_back({"quantize_block_1d_both 1x128 pow2", false, E8M0Rule::kTransformerEngine, 128, true, 0.0f});
            variants.push_back({"quantize_block_1d_both 1x32 eps", false, E8M0Rule::kTransformerEngine, 32, false, 1e-3f});
            variants.push_back({"quantize_block_1d_both 1x48", false, E8M0Rule::kTransformerEngine, 48, false, 0.0f});
          }
          for (const V& v : variants) {
            KernelCheckRow& r = rec.row(v.label, in);
            for (const std::pair<int, int>& shape : shapes) {
              const int cr = shape.first, cc = shape.second;
              auto single = [&](emu::BlockAxis axis, emu::QuantizeStats* st) {
                return v.mx ? ref.quantize_mxfp8(x.data(), cr, cc, axis, fmt, v.rule, st)
                            : ref.quantize_block_1d(x.data(), cr, cc, axis, fmt, v.block, v.pow2, v.eps, st);
              };
              emu::QuantizeStats sra, sca;
              const emu::BlockQuantized ra = single(emu::BlockAxis::kRowwise, &sra);
              const emu::BlockQuantized ca = single(emu::BlockAxis::kColumnwise, &sca);
              for (const int outputs : {3, 1, 2}) {
                const std::string ws = w + " [" + std::to_string(cr) + "x" + std::to_string(cc) + "]" +
                                       (outputs == 3 ? " both" : outputs == 1 ? " rowwise" : " columnwise");
                emu::BlockQuantized rb, cb;
                emu::QuantizeStats srb, scb;
                emu::BlockQuantized* pr = outputs & 1 ? &rb : nullptr;
                emu::BlockQuantized* pc = outputs & 2 ? &cb : nullptr;
                ++r.calls;
                if (!guarded(r, ws, [&] {
                      if (v.mx)
                        cand.quantize_mxfp8_both(x.data(), cr, cc, fmt, v.rule, pr, pc, &srb, &scb);
                      else
                        cand.quantize_block_1d_both(x.data(), cr, cc, fmt, v.block, v.pow2, v.eps, pr, pc, &srb, &scb);
                    }))
                  continue;
                if (pr) {
                  cmp_block(r, ws + " rowwise", ra, rb);
                  cmp_stats(r, ws + " rowwise", sra, srb);
                } else {
                  cmp_stats(r, ws + " rowwise (not made)", emu::QuantizeStats{}, srb);
                }
                if (pc) {
                  cmp_block(r, ws + " columnwise", ca, cb);
                  cmp_stats(r, ws + " columnwise", sca, scb);
                } else {
                  cmp_stats(r, ws + " columnwise (not made)", emu::QuantizeStats{}, scb);
                }
              }
            }
          }
        }
        if (wants("quantize_block_2d")) {
          struct V {
            const char* label;
            int tile;
            bool pow2;
          };
          for (const V v : {V{"quantize_block_2d 128x128 pow2", 128, true}, V{"quantize_block_2d 16x16", 16, false}}) {
            KernelCheckRow& r = rec.row(v.label, in);
            emu::QuantizeStats sa, sb;
            const emu::BlockQuantized2D a = ref.quantize_block_2d(x.data(), rows, cols, fmt, v.tile, v.pow2, 0.0f, &sa);
            emu::BlockQuantized2D b;
            ++r.calls;
            if (!guarded(r, w, [&] { b = cand.quantize_block_2d(x.data(), rows, cols, fmt, v.tile, v.pow2, 0.0f, &sb); }))
              continue;
            cmp_block(r, w + " rowwise", a.rowwise, b.rowwise);
            cmp_block(r, w + " columnwise", a.columnwise, b.columnwise);
            cmp_stats(r, w, sa, sb);
          }
          {  // 128 x 128 tiles with rows and cols multiples of 4 (the GPU's vectorised one-pass path),
             // whole tiles next to ragged edge tiles
            const int r4 = (rows + 3) / 4 * 4 + 4, c4 = (cols + 3) / 4 * 4 + 128;
            const std::vector<float> x4 =
                make_inputs(fam, std::size_t(r4) * std::size_t(c4), mix(opt.seed, std::uint64_t(s), 100 + std::uint64_t(fam)));
            KernelCheckRow& r = rec.row("quantize_block_2d 128x128 pow2, rows and cols multiples of 4", in);
            emu::QuantizeStats sa, sb;
            const emu::BlockQuantized2D a4 = ref.quantize_block_2d(x4.data(), r4, c4, fmt, 128, true, 0.0f, &sa);
            emu::BlockQuantized2D b4;
            ++r.calls;
            if (guarded(r, w, [&] { b4 = cand.quantize_block_2d(x4.data(), r4, c4, fmt, 128, true, 0.0f, &sb); })) {
              cmp_block(r, w + " rowwise", a4.rowwise, b4.rowwise);
              cmp_block(r, w + " columnwise", a4.columnwise, b4.columnwise);
              cmp_stats(r, w, sa, sb);
            }
          }
        }
      }
    }

    // ---- FP8 code inputs: dequantize, transpose, GEMM ----
    for (const CodeFamily cf : kCodeFamilies) {
      const std::string in = to_string(cf);
      if (wants("dequantize") || wants("transpose")) {
        progress(sz + ", " + in + ": dequantize, transpose");
        for (const Format fmt : kFp8Formats) {
          const std::string w = sz + " " + short_name(fmt);
          float si = 1.0f;
          std::vector<std::uint8_t> q = make_codes(cf, fmt, n, mix(opt.seed, std::uint64_t(s), 100 + std::uint64_t(cf)), &si);
          if (wants("dequantize")) {
            KernelCheckRow& r = rec.row("dequantize", in);
            for (const float scale_inv : {si, 1.0f, 0.0123f, 0x1p-30f, 1e30f, INFINITY, 0.0f, NAN}) {
              const std::string ws = w + " scale_inv " + hex32(core::f32_to_bits(scale_inv));
              std::vector<float> ya(n), yb(n);
              ref.dequantize(q.data(), n, scale_inv, fmt, ya.data());
              ++r.calls;
              if (guarded(r, ws, [&] { cand.dequantize(q.data(), n, scale_inv, fmt, yb.data()); }))
                cmp_f32(r, ws + " y", ya.data(), yb.data(), n);
            }
          }
          if (wants("transpose")) {
            KernelCheckRow& r = rec.row("transpose", in);
            std::vector<std::uint8_t> ta(n), tb(n);
            ref.transpose(rows, cols, q.data(), ta.data());
            ++r.calls;
            if (guarded(r, w, [&] { cand.transpose(rows, cols, q.data(), tb.data()); }))
              cmp_codes(r, w + " out", ta.data(), tb.data(), n);
          }
        }
      }
      if (wants("gemm_fp8_tn")) {
        progress(sz + ", " + in + ": gemm_fp8_tn");
        const int M = s, N = s + 3, K = 2 * s + 1;
        for (const std::pair<Format, Format>& pair : kPairs) {
          const Format fa = pair.first, fb = pair.second;
          float sia = 1.0f, sib = 1.0f;
          const std::vector<std::uint8_t> A =
              make_codes(cf, fa, std::size_t(M) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 200 + std::uint64_t(cf)), &sia);
          const std::vector<std::uint8_t> B =
              make_codes(cf, fb, std::size_t(N) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 300 + std::uint64_t(cf)), &sib);
          if (cf != CodeFamily::kNormal) {
            sia = 0.0123f;  // a scale product that rounds
            sib = 2.5f;
          }
          for (const emu::GemmAccumulation& acc : kAccs) {
            std::string label = std::string("gemm_fp8_tn ") + emu::to_string(acc.model);
            if (acc.promotion_interval > 0) label += " promote " + std::to_string(acc.promotion_interval);
            if (acc.split_k > 1) label += " split-k " + std::to_string(acc.split_k);
            KernelCheckRow& r = rec.row(label, in);
            const std::string w = sz + " " + short_name(fa) + "x" + short_name(fb) + " D";
            std::vector<float> da(std::size_t(M) * std::size_t(N)), db(da.size());
            ref.gemm_fp8_tn(M, N, K, A.data(), fa, sia, B.data(), fb, sib, acc, da.data());
            ++r.calls;
            if (guarded(r, w, [&] { cand.gemm_fp8_tn(M, N, K, A.data(), fa, sia, B.data(), fb, sib, acc, db.data()); }))
              cmp_f32(r, w, da.data(), db.data(), da.size());
          }
        }
      }
    }

    // ---- block-scaled GEMM on block-quantized operands (quantized by the reference) ----
    if (wants("gemm_fp8_block_tn")) {
      const int M = s, N = s + 3, K = 2 * s + 1;
      for (const InputFamily fam : {InputFamily::kNormal, InputFamily::kWide, InputFamily::kNanInf}) {
        const std::string in = to_string(fam);
        progress(sz + ", " + in + ": gemm_fp8_block_tn");
        const std::vector<float> xa = make_inputs(fam, std::size_t(M) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 400 + std::uint64_t(fam)));
        const std::vector<float> xb = make_inputs(fam, std::size_t(N) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 500 + std::uint64_t(fam)));
        struct Pair {
          const char* label;
          emu::BlockQuantized a, b;
        };
        const emu::BlockAxis rw = emu::BlockAxis::kRowwise;
        const Pair pairs[] = {
            {"gemm_fp8_block_tn mxfp8",
             ref.quantize_mxfp8(xa.data(), M, K, rw, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr),
             ref.quantize_mxfp8(xb.data(), N, K, rw, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr)},
            {"gemm_fp8_block_tn 1x128 x 128x128",
             ref.quantize_block_1d(xa.data(), M, K, rw, Format::kE4M3, 128, true, 0.0f, nullptr),
             ref.quantize_block_2d(xb.data(), N, K, Format::kE4M3, 128, true, 0.0f, nullptr).rowwise},
            {"gemm_fp8_block_tn 1x32 e4m3 x e5m2",
             ref.quantize_block_1d(xa.data(), M, K, rw, Format::kE4M3, 32, false, 0.0f, nullptr),
             ref.quantize_block_1d(xb.data(), N, K, rw, Format::kE5M2, 32, false, 0.0f, nullptr)},
        };
        for (const Pair& p : pairs) {
          KernelCheckRow& r = rec.row(p.label, in);
          std::vector<float> da(std::size_t(M) * std::size_t(N)), db(da.size());
          ref.gemm_fp8_block_tn(p.a, p.b, da.data());
          ++r.calls;
          if (guarded(r, sz, [&] { cand.gemm_fp8_block_tn(p.a, p.b, db.data()); }))
            cmp_f32(r, sz + " D", da.data(), db.data(), da.size());
        }
      }
    }
  }
  return rec.take();
}

std::uint64_t total_mismatches(const std::vector<KernelCheckRow>& rows) {
  std::uint64_t t = 0;
  for (const KernelCheckRow& r : rows) t += r.mismatches;
  return t;
}

std::string format_rows(const std::vector<KernelCheckRow>& rows) {
  std::ostringstream os;
  os << "| kernel | inputs | calls | values | mismatches | NaN payload differences |\n";
  os << "|---|---|---:|---:|---:|---:|\n";
  for (const KernelCheckRow& r : rows)
    os << "| " << r.kernel << " | " << r.inputs << " | " << r.calls << " | " << r.values << " | " << r.mismatches
       << " | " << r.nan_payload_differences << " |\n";
  bool any = false;
  for (const KernelCheckRow& r : rows)
    if (!r.first_mismatch.empty()) {
      if (!any) os << "\nFirst mismatch per row:\n";
      any = true;
      os << "- " << r.kernel << ", " << r.inputs << ": " << r.first_mismatch << "\n";
    }
  return os.str();
}

}  // namespace fp8emu::backend
