// Bit-for-bit comparison of two devices' FP8 operations (see fp8emu_internal/device_check.hpp).
#include "fp8emu_internal/device_check.hpp"

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
#include "fp8emu/emulation/block_quantize.hpp"
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
  DeviceCheckRow& row(const std::string& kernel, const std::string& inputs) {
    const auto key = std::make_pair(kernel, inputs);
    auto it = index_.find(key);
    if (it == index_.end()) {
      it = index_.emplace(key, rows_.size()).first;
      DeviceCheckRow r;
      r.op = kernel;
      r.inputs = inputs;
      rows_.push_back(std::move(r));
    }
    return rows_[it->second];
  }
  std::vector<DeviceCheckRow> take() { return std::move(rows_); }

 private:
  std::vector<DeviceCheckRow> rows_;
  std::map<std::pair<std::string, std::string>, std::size_t> index_;
};

void note_mismatch(DeviceCheckRow& r, const std::string& what) {
  ++r.mismatches;
  if (r.first_mismatch.empty()) r.first_mismatch = what;
}

void cmp_f32(DeviceCheckRow& r, const std::string& where, const float* a, const float* b, std::size_t n) {
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

void cmp_codes(DeviceCheckRow& r, const std::string& where, const std::uint8_t* a, const std::uint8_t* b,
               std::size_t n) {
  r.values += n;
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) note_mismatch(r, where + "[" + std::to_string(i) + "]: " + hex8(a[i]) + " (reference) vs " + hex8(b[i]));
}

void cmp_u64(DeviceCheckRow& r, const std::string& where, std::uint64_t a, std::uint64_t b) {
  ++r.values;
  if (a != b) note_mismatch(r, where + ": " + std::to_string(a) + " (reference) vs " + std::to_string(b));
}

void cmp_counters(DeviceCheckRow& r, const std::string& where, const CastCounters& a, const CastCounters& b) {
  cmp_u64(r, where + " count", a.count, b.count);
  cmp_u64(r, where + " saturated", a.saturated, b.saturated);
  cmp_u64(r, where + " underflow", a.underflow, b.underflow);
  cmp_u64(r, where + " nan", a.nan, b.nan);
}

// Host data in a device's memory, and back.
template <class T>
DeviceTensor<T> put(const Device& d, const std::vector<T>& h) {
  DeviceTensor<T> t(d, 1, int(h.size()));
  if (!h.empty()) t.upload(h.data());
  return t;
}
template <class T>
std::vector<T> get(const DeviceTensor<T>& t) {
  std::vector<T> h(t.size());
  if (!h.empty()) t.download(h.data());
  return h;
}

// The outputs of one cast on one device, downloaded.
struct CastOut {
  std::vector<std::uint8_t> rowwise, columnwise;
  std::vector<float> rowwise_scale_inv, columnwise_scale_inv;
  float amax = 0.0f;
  float columnwise_amax = 0.0f;  ///< NVFP4 block casts: the column-wise view's tensor amax
  CastCounters counters;
};

void cmp_cast(DeviceCheckRow& r, const std::string& w, const CastOut& a, const CastOut& b) {
  cmp_codes(r, w + " rowwise", a.rowwise.data(), b.rowwise.data(), a.rowwise.size());
  cmp_codes(r, w + " columnwise", a.columnwise.data(), b.columnwise.data(), a.columnwise.size());
  cmp_f32(r, w + " rowwise scale_inv", a.rowwise_scale_inv.data(), b.rowwise_scale_inv.data(),
          a.rowwise_scale_inv.size());
  cmp_f32(r, w + " columnwise scale_inv", a.columnwise_scale_inv.data(), b.columnwise_scale_inv.data(),
          a.columnwise_scale_inv.size());
  cmp_f32(r, w + " amax", &a.amax, &b.amax, 1);
  cmp_f32(r, w + " columnwise amax", &a.columnwise_amax, &b.columnwise_amax, 1);
  cmp_counters(r, w + " counters", a.counters, b.counters);
}

// Runs the candidate's call; an exception becomes a mismatch of the row (false returned).
template <class F>
bool guarded(DeviceCheckRow& r, const std::string& where, F&& f) {
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
    if (!f.is_special_code(c)) return c;
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
        if (f.fnuz) {
          c = f.nan_code();  // the one NaN (the -0 code)
        } else {
          c = (f.has_inf && (g() & 1u)) ? f.inf_code() : f.top_code() - std::uint32_t(g() % std::uint64_t(f.nan_codes));
          if (g() & 1u) c |= f.sign_mask();
        }
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

// The rows the device check runs: the FP8 instructions' and, for the fp16, bf16 and tf32 operand
// decode of the others (every such row runs the same code with other numbers), hopper-bf16.
static bool device_checked(const AccumulationModel& m) {
  return m.input == core::MmaOperands::kFp8 || m.id == Accumulation::kHopperBf16;
}

// Every checked model of the accumulation table, with fast accumulation and, where the model takes one, a
// promotion interval of one block (50 for block-less models: ragged runs) and of 128 (TE's split),
// and cuBLASLt's split-K: 3 splits with fast accumulation (K = 2s + 1 > 256 gives three ranges of
// 128, the last one short; smaller K one or two ranges) and 2 splits with promotion every 128.
std::vector<emu::GemmAccumulation> device_check_accumulations() {
  std::vector<emu::GemmAccumulation> accs;
  for (const AccumulationModel& m : kAccumulationModels) {
    if (!device_checked(m)) continue;
    accs.push_back({m.id, 0, 1});
    if (!m.takes_promotion()) continue;
    accs.push_back({m.id, m.block > 1 ? m.block : 50, 1});
    if (128 % m.block == 0 && 128 != m.block) accs.push_back({m.id, 128, 1});
    accs.push_back({m.id, 0, 3});
    if (128 % m.block == 0) accs.push_back({m.id, 128, 2});
  }
  return accs;
}

std::vector<DeviceCheckRow> check_devices(const Device& ref, const Device& cand, const DeviceCheckOptions& opt) {
  FP8EMU_CHECK(opt.only.empty() || opt.only == "current_scale" || opt.only == "cast_transpose" ||
                   opt.only == "block_cast" || opt.only == "gemm_fp8_tn" || opt.only == "gemm_fp8_block_tn" ||
                   opt.only == "block_scales_to_mxfp8",
               "device check: unknown operation '", opt.only,
               "' (current_scale, cast_transpose, block_cast, gemm_fp8_tn, gemm_fp8_block_tn, block_scales_to_mxfp8)");
  Recorder rec;
  auto wants = [&](const char* op) { return opt.only.empty() || opt.only == op; };
  auto progress = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  // Runs `f` on the reference, then guarded on the candidate, and compares with `cmp`.
  auto compare = [&](DeviceCheckRow& r, const std::string& where, auto&& f, auto&& cmp) {
    const auto a = f(ref);
    decltype(f(ref)) b;
    ++r.calls;
    if (guarded(r, where, [&] { b = f(cand); })) cmp(a, b);
  };
  // Every FP8 format of the registry, and every operand pair a GEMM takes.
  std::vector<Format> kFp8Formats;
  for (const FormatRecord& r : kFormats)
    if (is_fp8(r.id) || (opt.fnuz && is_fp8_or_fnuz(r.id))) kFp8Formats.push_back(r.id);
  std::vector<std::pair<Format, Format>> kPairs;
  for (Format a : kFp8Formats)
    for (Format b : kFp8Formats)
      if (emu::gemm_operand_pair_supported(a, b)) kPairs.emplace_back(a, b);
  const std::vector<emu::GemmAccumulation> kAccs = device_check_accumulations();
  const CodeFamily kCodeFamilies[] = {CodeFamily::kNormal, CodeFamily::kWide, CodeFamily::kSpecial};
  const char* const kOutputs[] = {"", " rowwise", " columnwise", " both"};  // by bit mask

  // The block casts: TE's MXFP8 (both E8M0 rules), Float8BlockScaling's 1 x 128 (power-of-2 scales)
  // and its 128 x 128 weight tiles, NVFP4's 1 x 16 and 16 x 16 (E2M1 under E4M3 and tensor scales),
  // and other block and tile sizes and element formats (ragged blocks, MXFP4, the GPU's unfused
  // paths). Variants with own_format keep their element format; the others take each FP8 format.
  struct BlockVariant {
    const char* label;
    BlockCast cast;
    bool own_format = false;
  };
  using backend::BlockScaleFormat;
  const E8M0Rule te = E8M0Rule::kTransformerEngine;
  auto e8m0 = [](int block, E8M0Rule rule) {
    BlockCast c = BlockCast::mxfp8(Format::kE4M3, rule);
    c.block = block;
    return c;
  };
  auto fp32 = [](int block, bool tiles, bool pow2, float eps) {
    return BlockCast::fp32_blocks(Format::kE4M3, block, tiles, pow2, eps);
  };
  // NVFP4 with the Hadamard transform of the column-wise view and/or TE's stochastic rounding.
  auto nvfp4_cast = [](bool rht, bool sr, bool with_transpose) {
    BlockCast c = BlockCast::nvfp4(Format::kE2M1, 16, false);
    c.rht_columnwise = rht;
    c.stochastic_rounding = sr;
    c.sr_seed = 0x0123456789ABCDEFull;
    c.sr_offset_rowwise = 5 * 1024;
    c.sr_offset_columnwise = 6 * 1024;
    c.sr_with_transpose = with_transpose;
    return c;
  };
  const BlockVariant kBlockVariants[] = {
      {"block_cast mxfp8 te", e8m0(32, te)},
      {"block_cast mxfp8 ocp", e8m0(32, E8M0Rule::kOcp)},
      {"block_cast 1x16 e8m0", e8m0(16, te)},    // E8M0 scales on other blocks: the record's,
      {"block_cast 1x128 e8m0", e8m0(128, te)},  // no recipe's (the GPU: per copy, and fused)
      {"block_cast 1x128 pow2", fp32(128, false, true, 0.0f)},
      {"block_cast 1x32 eps", fp32(32, false, false, 1e-3f)},
      {"block_cast 1x48", fp32(48, false, false, 0.0f)},
      {"block_cast 128x128 pow2", fp32(128, true, true, 0.0f)},
      {"block_cast 16x16", fp32(16, true, false, 0.0f)},
      {"block_cast nvfp4 1x16", BlockCast::nvfp4(Format::kE2M1, 16, false), true},
      {"block_cast nvfp4 16x16", BlockCast::nvfp4(Format::kE2M1, 16, true), true},
      {"block_cast nvfp4 rht", nvfp4_cast(true, false, false), true},
      {"block_cast nvfp4 rht sr", nvfp4_cast(true, true, false), true},
      {"block_cast nvfp4 sr one launch", nvfp4_cast(false, true, true), true},
      {"block_cast 1x32 nvfp4 scales", BlockCast::nvfp4(Format::kE4M3, 32, false)},  // the GPU's fused kernel
      {"block_cast mxfp4 1x32", BlockCast::mxfp8(Format::kE2M1, te), true},
      {"block_cast mxfp6 e3m2 1x32 ocp", BlockCast::mxfp8(Format::kE3M2, E8M0Rule::kOcp), true},
      {"block_cast mxfp8 even", e8m0(32, E8M0Rule::kEven)},
      {"block_cast mxfp4 1x32 even", BlockCast::mxfp8(Format::kE2M1, E8M0Rule::kEven), true},
  };


  for (const int s : opt.sizes) {
    FP8EMU_CHECK(s >= 1, "device check: sizes must be >= 1, got ", s);
    const int rows = s, cols = s + 2;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    const std::string sz = "size " + std::to_string(s);
    // Shapes of the casts from the same n values: [rows, cols], the transposed one, one with both
    // sides multiples of 4 (the GPU's vectorised paths) and, from 512 values, one 128 wide (whole
    // 32 x 128 and 128 x 128 tiles of the fused kernels).
    std::vector<std::pair<int, int>> shapes{{rows, cols}, {cols, rows}};
    if (rows >= 4) shapes.emplace_back(rows / 4 * 4, int(n / std::size_t(rows / 4 * 4)) / 4 * 4);
    if (n >= 512) shapes.emplace_back(int(n / 128) / 4 * 4, 128);

    // ---- casts of fp32 inputs ----
    for (const InputFamily fam : all_input_families()) {
      const std::string in = to_string(fam);
      const std::vector<float> x = make_inputs(fam, n, mix(opt.seed, std::uint64_t(s), 1 + std::uint64_t(fam)));
      progress(sz + ", " + in + ": casts");
      for (const Format fmt : kFp8Formats) {
        const std::string w = sz + " " + short_name(fmt);
        if (wants("current_scale")) {
          struct V {
            const char* label;
            bool pow2;
            float eps;
          };
          for (const V v : {V{"current_scale", false, 0.0f}, V{"current_scale pow2", true, 0.0f},
                            V{"current_scale eps", false, 1e-3f}}) {
            for (const std::size_t count : {n, std::size_t(0)}) {  // no element: the scale of amax 0
              compare(
                  rec.row(v.label, in), w + " n " + std::to_string(count),
                  [&](const Device& d) {
                    const DeviceTensor<float> xs = put(d, x);
                    DeviceTensor<float> sc = put(d, std::vector<float>{-1.0f});
                    d.current_scale(xs.get(), count, fmt, v.pow2, v.eps, sc.get());
                    return get(sc);
                  },
                  [&](const std::vector<float>& a, const std::vector<float>& b) {
                    cmp_f32(rec.row(v.label, in), w + " scale", a.data(), b.data(), 1);
                  });
            }
          }
        }
        if (wants("cast_transpose")) {
          // Each output alone and both; the scales 1, current scaling's, a tiny one, and infinity.
          const float current = core::compute_scale_from_amax(emu::compute_amax(x.data(), n), max_finite_f32(fmt),
                                                              false, 0.0f, FLT_MAX);
          for (const float scale : {1.0f, current, 0x1p-20f, INFINITY}) {
            for (const int outputs : {3, 1, 2}) {
              for (const std::pair<int, int>& shape : shapes) {
                const int cr = shape.first, cc = shape.second;
                const std::string ws = w + " [" + std::to_string(cr) + "x" + std::to_string(cc) + "] scale " +
                                       hex32(core::f32_to_bits(scale)) + kOutputs[outputs];
                DeviceCheckRow& r = rec.row("cast_transpose", in);
                compare(
                    r, ws,
                    [&](const Device& d) {
                      const std::vector<std::uint8_t> fill(std::size_t(cr) * std::size_t(cc), 0xA5);
                      const DeviceTensor<float> xs = put(d, x), sc = put(d, std::vector<float>{scale});
                      DeviceTensor<std::uint8_t> qr = put(d, fill), qc = put(d, fill);
                      DeviceTensor<float> am = put(d, std::vector<float>{0.5f});
                      DeviceTensor<CastCounters> ct = put(d, std::vector<CastCounters>(1));
                      d.cast_transpose(xs.get(), cr, cc, sc.get(), fmt, outputs & 1 ? qr.get() : nullptr,
                                       outputs & 2 ? qc.get() : nullptr, am.get(), ct.get());
                      CastOut o;
                      o.rowwise = get(qr);
                      o.columnwise = get(qc);
                      o.amax = get(am)[0];
                      o.counters = get(ct)[0];
                      return o;
                    },
                    [&](const CastOut& a, const CastOut& b) { cmp_cast(r, ws, a, b); });
              }
            }
          }
        }
        if (wants("block_cast") && is_fp8(fmt)) {  // the block casts take the OCP formats
          for (const BlockVariant& v : kBlockVariants) {
            BlockCast c = v.cast;
            if (v.own_format && fmt != Format::kE4M3) continue;  // once, in its own format
            if (!v.own_format) c.fmt = fmt;
            DeviceCheckRow& r = rec.row(v.label, in);
            std::vector<std::pair<int, int>> vshapes = shapes;
            if (c.tiles && c.block == 128)  // whole tiles next to ragged edge tiles
              vshapes.emplace_back((rows + 3) / 4 * 4 + 4, (cols + 3) / 4 * 4 + 128);
            for (const std::pair<int, int>& shape : vshapes) {
              const int cr = shape.first, cc = shape.second;
              const std::size_t cn = std::size_t(cr) * std::size_t(cc);
              const std::vector<float> xv =
                  cn <= n ? x : make_inputs(fam, cn, mix(opt.seed, std::uint64_t(s), 100 + std::uint64_t(fam)));
              const std::size_t rb = std::size_t(cr) * std::size_t((cc + c.block - 1) / c.block),
                                cb = std::size_t(cc) * std::size_t((cr + c.block - 1) / c.block);
              for (const int outputs : {3, 1, 2}) {
                const std::string ws = w + " [" + std::to_string(cr) + "x" + std::to_string(cc) + "]" + kOutputs[outputs];
                compare(
                    r, ws,
                    [&](const Device& d) {
                      const DeviceTensor<float> xs = put(d, xv);
                      DeviceTensor<std::uint8_t> qr = put(d, std::vector<std::uint8_t>(cn, 0xA5)),
                                                 qc = put(d, std::vector<std::uint8_t>(cn, 0xA5));
                      DeviceTensor<float> sr = put(d, std::vector<float>(rb, -1.0f)),
                                          sc = put(d, std::vector<float>(cb, -1.0f));
                      DeviceTensor<CastCounters> ct = put(d, std::vector<CastCounters>(1));
                      DeviceTensor<float> am = put(d, std::vector<float>{-1.0f, -1.0f});
                      const BlockView none;
                      d.block_cast(c, xs.get(), cr, cc, outputs & 1 ? BlockView{qr.get(), sr.get(), am.get()} : none,
                                   outputs & 2 ? BlockView{qc.get(), sc.get(), am.get() + 1} : none, ct.get());
                      CastOut o;
                      o.rowwise = get(qr);
                      o.columnwise = get(qc);
                      o.rowwise_scale_inv = get(sr);
                      o.columnwise_scale_inv = get(sc);
                      const std::vector<float> amax = get(am);
                      o.amax = amax[0];
                      o.columnwise_amax = amax[1];
                      o.counters = get(ct)[0];
                      return o;
                    },
                    [&](const CastOut& a, const CastOut& b) { cmp_cast(r, ws, a, b); });
              }
            }
          }
        }
      }
    }

    // ---- GEMMs of FP8 codes, the scales in device memory ----
    if (wants("gemm_fp8_tn")) {
      const int M = s, N = s + 3, K = 2 * s + 1;
      for (const CodeFamily cf : kCodeFamilies) {
        const std::string in = to_string(cf);
        progress(sz + ", " + in + ": gemm_fp8_tn");
        for (const std::pair<Format, Format>& pair : kPairs) {
          const Format fa = pair.first, fb = pair.second;
          float sia = 1.0f, sib = 1.0f;
          const std::vector<std::uint8_t> A =
              make_codes(cf, fa, std::size_t(M) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 200 + std::uint64_t(cf)), &sia);
          const std::vector<std::uint8_t> B =
              make_codes(cf, fb, std::size_t(N) * std::size_t(K), mix(opt.seed, std::uint64_t(s), 300 + std::uint64_t(cf)), &sib);
          // The casts' scales (the GEMM takes RN(1 / scale)); for codes without a cast, scales whose
          // scale_inv product rounds.
          const float sa = cf == CodeFamily::kNormal ? 1.0f / sia : 81.3f, sb = cf == CodeFamily::kNormal ? 1.0f / sib : 0.4f;
          for (const emu::GemmAccumulation& acc : kAccs) {
            std::string label = std::string("gemm_fp8_tn ") + emu::to_string(acc.model);
            if (acc.promotion_interval > 0) label += " promote " + std::to_string(acc.promotion_interval);
            if (acc.split_k > 1) label += " split-k " + std::to_string(acc.split_k);
            DeviceCheckRow& r = rec.row(label, in);
            const std::string w = sz + " " + short_name(fa) + "x" + short_name(fb) + " D";
            compare(
                r, w,
                [&](const Device& d) {
                  const DeviceTensor<std::uint8_t> a = put(d, A), b = put(d, B);
                  const DeviceTensor<float> scales = put(d, std::vector<float>{sa, sb});
                  DeviceTensor<float> D = put(d, std::vector<float>(std::size_t(M) * std::size_t(N), -1.0f));
                  d.gemm_fp8_tn(M, N, K, a.get(), fa, scales.get(), b.get(), fb, scales.get() + 1, acc, D.get());
                  return get(D);
                },
                [&](const std::vector<float>& a, const std::vector<float>& b) { cmp_f32(r, w, a.data(), b.data(), a.size()); });
          }
        }
      }
    }

    // ---- block-scaled GEMM on block-quantized operands (quantized by the emulator) ----
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
        const core::BlockRule nvfp4 = core::BlockRule::nvfp4(kSpecE2M1, nullptr);
        const Pair pairs[] = {
            {"gemm_fp8_block_tn mxfp8",
             emu::quantize_mxfp8(xa.data(), M, K, rw, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr),
             emu::quantize_mxfp8(xb.data(), N, K, rw, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr)},
            {"gemm_fp8_block_tn 1x128 x 128x128",
             emu::quantize_block_1d(xa.data(), M, K, rw, Format::kE4M3, 128, true, 0.0f, nullptr),
             emu::quantize_block_2d(xb.data(), N, K, Format::kE4M3, 128, true, 0.0f, nullptr).rowwise},
            {"gemm_fp8_block_tn 1x32 e4m3 x e5m2",
             emu::quantize_block_1d(xa.data(), M, K, rw, Format::kE4M3, 32, false, 0.0f, nullptr),
             emu::quantize_block_1d(xb.data(), N, K, rw, Format::kE5M2, 32, false, 0.0f, nullptr)},
            {"gemm_fp8_block_tn nvfp4 1x16 x 16x16",
             emu::quantize_blocks(xa.data(), M, K, rw, Format::kE2M1, 16, nvfp4, nullptr),
             emu::quantize_tiles(xb.data(), N, K, Format::kE2M1, 16, nvfp4, nullptr).rowwise},
            {"gemm_fp8_block_tn mxfp4 x mxfp8",
             emu::quantize_blocks(xa.data(), M, K, rw, Format::kE2M1, 32, core::BlockRule::mxfp8(kSpecE2M1, E8M0Rule::kTransformerEngine), nullptr),
             emu::quantize_mxfp8(xb.data(), N, K, rw, Format::kE4M3, E8M0Rule::kTransformerEngine, nullptr)},
        };
        // Every checked model of the accumulation table for each scale block's partial.
        for (const Pair& p : pairs)
          for (const AccumulationModel& m : kAccumulationModels) {
            if (!device_checked(m)) continue;
            const emu::GemmAccumulation acc{m.id, 0, 1};
            DeviceCheckRow& r = rec.row(std::string(p.label) + " " + emu::to_string(m.id), in);
            compare(
                r, sz,
                [&](const Device& d) {
                  const DeviceTensor<std::uint8_t> a = put(d, p.a.codes), b = put(d, p.b.codes);
                  const DeviceTensor<float> sa = put(d, p.a.scale_inv), sb = put(d, p.b.scale_inv);
                  const DeviceTensor<float> amax = put(d, std::vector<float>{p.a.amax.value_or(0.0f), p.b.amax.value_or(0.0f)});
                  DeviceTensor<float> D = put(d, std::vector<float>(std::size_t(M) * std::size_t(N), -1.0f));
                  d.gemm_fp8_block_tn(M, N, K, p.a.block, a.get(), p.a.format, sa.get(), b.get(), p.b.format,
                                      sb.get(), p.a.amax ? amax.get() : nullptr, p.b.amax ? amax.get() + 1 : nullptr,
                                      acc, D.get());
                  return get(D);
                },
                [&](const std::vector<float>& a, const std::vector<float>& b) {
                  cmp_f32(r, sz + " D", a.data(), b.data(), a.size());
                });
          }
      }
    }
  }
  // Float8BlockScaling's scales turned into MXFP8 ones (TE on Blackwell): powers of two over the
  // whole E8M0 range (2^-127 a subnormal), values with a mantissa (dropped), ragged last blocks.
  if (wants("block_scales_to_mxfp8")) {
    DeviceCheckRow& r = rec.row("block_scales_to_mxfp8", "pow2 and other scale_inv");
    std::mt19937_64 g(mix(opt.seed, 77));
    for (const int out_blocks : {1, 4, 7, 33}) {
      const int rows = 5, in_blocks = (out_blocks + 3) / 4;
      std::vector<float> in(std::size_t(rows) * std::size_t(in_blocks));
      for (float& v : in)
        v = g() % 4 == 0 ? std::ldexp(1.0f + float(g() % 8) / 8.0f, int(g() % 254) - 126)
                         : std::ldexp(1.0f, int(g() % 255) - 127);
      const std::string w = "blocks " + std::to_string(out_blocks);
      compare(
          r, w,
          [&](const Device& d) {
            const DeviceTensor<float> src = put(d, in);
            DeviceTensor<float> out = put(d, std::vector<float>(std::size_t(rows) * std::size_t(out_blocks), -1.0f));
            d.block_scales_to_mxfp8(src.get(), rows, out_blocks, 4, out.get());
            return get(out);
          },
          [&](const std::vector<float>& a, const std::vector<float>& b) { cmp_f32(r, w, a.data(), b.data(), a.size()); });
    }
  }
  return rec.take();
}

std::uint64_t total_mismatches(const std::vector<DeviceCheckRow>& rows) {
  std::uint64_t t = 0;
  for (const DeviceCheckRow& r : rows) t += r.mismatches;
  return t;
}

std::string format_rows(const std::vector<DeviceCheckRow>& rows) {
  std::ostringstream os;
  os << "| operation | inputs | calls | values | mismatches | NaN payload differences |\n";
  os << "|---|---|---:|---:|---:|---:|\n";
  for (const DeviceCheckRow& r : rows)
    os << "| " << r.op << " | " << r.inputs << " | " << r.calls << " | " << r.values << " | " << r.mismatches
       << " | " << r.nan_payload_differences << " |\n";
  bool any = false;
  for (const DeviceCheckRow& r : rows)
    if (!r.first_mismatch.empty()) {
      if (!any) os << "\nFirst mismatch per row:\n";
      any = true;
      os << "- " << r.op << ", " << r.inputs << ": " << r.first_mismatch << "\n";
    }
  return os.str();
}

}  // namespace fp8emu::backend
