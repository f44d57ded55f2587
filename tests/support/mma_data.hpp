// Loader of the recorded tensor-core datasets of tests/data/tensor-core-mma (layout: its README and
// scripts/pack-mma-data), and the table of which accumulation-model row each recording is checked
// against (docs/tensor-core-model.md §Evidence).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"

namespace fp8emu::testing {

/// One recorded row: K operands each side as fp32 bit patterns (and FP8 codes for FP8 datasets),
/// c, the fp32 result and, where recorded, the fp16 result widened to fp32.
struct MmaRow {
  std::vector<std::uint32_t> a, b;
  std::vector<std::uint8_t> a_codes, b_codes;
  std::uint32_t c = 0, d = 0, d16 = 0;
  bool has_d16 = false;
};

/// A dataset: one GPU and input format; `format` as in the file name: fp16, bf16, tf32, E4M3, E5M2.
struct MmaDataset {
  const char* gpu;
  const char* format;
  const char* arch;         ///< `mma-check --arch`
  const char* instruction;  ///< `mma-check --instruction` for the fp32 result ("" = the default row)
  Accumulation fp32_model;  ///< the row that reproduces d
  bool c_used;              ///< d: false when recorded from a zero accumulator (H100/H200 FP8 wgmma);
                            ///< every fp16 result was recorded with C
  Accumulation fp16_model;  ///< the row that reproduces d_fp16 (with C = fp16(c)), where recorded
  const char* fp16_instruction;
};

/// Every recording and the row that reproduces it (A2 is an Ampere GPU outside the authors'
/// validation list; the FP8 fp16-output files of H100, H200 and B200 are too).
inline const std::vector<MmaDataset>& mma_datasets() {
  using A = Accumulation;
  static const std::vector<MmaDataset> v = {
      {"V100", "fp16", "volta", "", A::kVoltaFp16, true, A::kVoltaFp16, ""},
      {"A100", "fp16", "ampere", "", A::kAmpereFp16, true, A::kAmpereFp16, ""},
      {"A100", "bf16", "ampere", "", A::kAmpereBf16, true, A::kAmpereBf16, ""},
      {"A100", "tf32", "ampere", "", A::kAmpereTf32, true, A::kAmpereTf32, ""},
      {"A2", "fp16", "ampere", "", A::kAmpereFp16, true, A::kAmpereFp16, ""},
      {"A2", "bf16", "ampere", "", A::kAmpereBf16, true, A::kAmpereBf16, ""},
      {"A2", "tf32", "ampere", "", A::kAmpereTf32, true, A::kAmpereTf32, ""},
      {"Ada", "fp16", "ada", "", A::kAdaFp16, true, A::kAdaFp16, ""},
      {"Ada", "bf16", "ada", "", A::kAdaBf16, true, A::kAdaBf16, ""},
      {"Ada", "tf32", "ada", "", A::kAdaTf32, true, A::kAdaTf32, ""},
      {"Ada", "E4M3", "ada", "", A::kAda, true, A::kAda, ""},
      {"Ada", "E5M2", "ada", "", A::kAda, true, A::kAda, ""},
      {"L40S", "fp16", "ada", "", A::kAdaFp16, true, A::kAdaFp16, ""},
      {"L40S", "bf16", "ada", "", A::kAdaBf16, true, A::kAdaBf16, ""},
      {"L40S", "tf32", "ada", "", A::kAdaTf32, true, A::kAdaTf32, ""},
      {"L40S", "E4M3", "ada", "", A::kAda, true, A::kAda, ""},
      {"L40S", "E5M2", "ada", "", A::kAda, true, A::kAda, ""},
      {"H100", "fp16", "hopper", "", A::kHopperFp16, true, A::kHopperFp16, ""},
      {"H100", "bf16", "hopper", "", A::kHopperBf16, true, A::kHopperBf16, ""},
      {"H100", "tf32", "hopper", "", A::kHopperTf32, true, A::kHopperTf32, ""},
      {"H100", "E4M3", "hopper", "wgmma", A::kHopper, false, A::kHopperMmaSync, "mma.sync"},
      {"H100", "E5M2", "hopper", "wgmma", A::kHopper, false, A::kHopperMmaSync, "mma.sync"},
      {"H200", "fp16", "hopper", "", A::kHopperFp16, true, A::kHopperFp16, ""},
      {"H200", "bf16", "hopper", "", A::kHopperBf16, true, A::kHopperBf16, ""},
      {"H200", "tf32", "hopper", "", A::kHopperTf32, true, A::kHopperTf32, ""},
      {"H200", "E4M3", "hopper", "wgmma", A::kHopper, false, A::kHopperMmaSync, "mma.sync"},
      {"H200", "E5M2", "hopper", "wgmma", A::kHopper, false, A::kHopperMmaSync, "mma.sync"},
      {"B200", "fp16", "blackwell", "", A::kBlackwellFp16, true, A::kBlackwellFp16, ""},
      {"B200", "bf16", "blackwell", "", A::kBlackwellBf16, true, A::kBlackwellBf16, ""},
      {"B200", "tf32", "blackwell", "", A::kBlackwellTf32, true, A::kBlackwellTf32, ""},
      {"B200", "E4M3", "blackwell", "", A::kBlackwell, true, A::kBlackwell, ""},
      {"B200", "E5M2", "blackwell", "", A::kBlackwell, true, A::kBlackwell, ""},
  };
  return v;
}

inline bool mma_dataset_is_fp8(const MmaDataset& ds) {
  return std::string(ds.format) == "E4M3" || std::string(ds.format) == "E5M2";
}
inline const FormatSpec& mma_dataset_fp8_spec(const MmaDataset& ds) {
  return std::string(ds.format) == "E4M3" ? kSpecE4M3 : kSpecE5M2;
}

/// Reads tests/data/tensor-core-mma/<gpu>_<format>.txt.gz (3500 rows).
inline std::vector<MmaRow> load_mma_dataset(const MmaDataset& ds) {
  const std::string path =
      std::string(FP8EMU_TEST_DATA_DIR) + "/tensor-core-mma/" + ds.gpu + "_" + ds.format + ".txt.gz";
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, std::size_t(n));
  gzclose(f);
  const std::string fmt = ds.format;
  const bool fp8 = mma_dataset_is_fp8(ds);
  const std::size_t width = fp8 ? 2 : (fmt == "tf32" ? 8 : 4);
  auto value = [&](const std::string& hex) -> std::uint32_t {
    const auto u = std::uint32_t(std::stoul(hex, nullptr, 16));
    if (fp8) return core::decode_to_f32_bits(std::uint8_t(u), mma_dataset_fp8_spec(ds));
    if (fmt == "fp16") return core::half_to_f32_bits(std::uint16_t(u));
    if (fmt == "bf16") return u << 16;
    return u;
  };
  std::vector<MmaRow> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string a, b, c, d, d16;
    ls >> a >> b >> c >> d >> d16;
    MmaRow r;
    for (std::size_t i = 0; i + width <= a.size(); i += width) {
      r.a.push_back(value(a.substr(i, width)));
      r.b.push_back(value(b.substr(i, width)));
      if (fp8) {
        r.a_codes.push_back(std::uint8_t(std::stoul(a.substr(i, 2), nullptr, 16)));
        r.b_codes.push_back(std::uint8_t(std::stoul(b.substr(i, 2), nullptr, 16)));
      }
    }
    r.c = std::uint32_t(std::stoul(c, nullptr, 16));
    r.d = std::uint32_t(std::stoul(d, nullptr, 16));
    if (!d16.empty()) {
      r.d16 = std::uint32_t(std::stoul(d16, nullptr, 16));
      r.has_d16 = true;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

/// The model's result for a row: fp32 bits (the fp16 result widened for the kFp16 accumulator, whose
/// C is fp16(c) as the GPU's was). `use_c` false: the accumulator starts at +0.
inline std::uint32_t mma_row_result(const MmaDataset& ds, const MmaRow& r, const core::MmaDatapath& p, bool use_c) {
  std::uint32_t c = use_c ? r.c : 0u;
  if (p.accumulator == core::MmaAccumulator::kFp16) c = core::f32_bits_to_half_rne(c);
  if (mma_dataset_is_fp8(ds)) {
    const FormatSpec& f = mma_dataset_fp8_spec(ds);
    return core::mma_dot(core::MmaFp8Codes{r.a_codes.data(), f}, core::MmaFp8Codes{r.b_codes.data(), f},
                         int(r.a_codes.size()), c, p);
  }
  return core::mma_dot(core::MmaValues{r.a.data()}, core::MmaValues{r.b.data()}, int(r.a.size()), c, p);
}

}  // namespace fp8emu::testing
