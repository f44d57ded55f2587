// `fp8emu mma-check` (see cmd_mma_check.hpp).
#include "cmd_mma_check.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <vector>

#include "commands.hpp"
#include "fp8emu/core/dot.hpp"
#include "fp8emu/core/mma_model.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {
namespace {

struct Malformed {
  std::string message;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Malformed{path + ": not found or not a regular file"};
  std::ifstream f(path);
  if (!f) throw Malformed{path + ": cannot open"};
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().find_first_not_of(" \t") == std::string::npos) lines.pop_back();
  return lines;
}

std::string hex(std::uint32_t u) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << u;
  return os.str();
}

// W hex fp32 bit patterns per line, the same W on every line (the instruction's K).
std::vector<std::vector<std::uint32_t>> read_hex_rows(const std::string& path) {
  std::vector<std::vector<std::uint32_t>> rows;
  const std::vector<std::string> lines = read_lines(path);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string w;
    std::vector<std::uint32_t> row;
    while (in >> w) {
      if (w.size() != 8 || w.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        throw Malformed{path + ":" + std::to_string(i + 1) + ": '" + excerpt(w) +
                        "' is not a hex fp32 bit pattern (8 hex digits)"};
      row.push_back(std::uint32_t(std::stoul(w, nullptr, 16)));
    }
    if (row.empty()) throw Malformed{path + ":" + std::to_string(i + 1) + ": no values"};
    if (!rows.empty() && row.size() != rows[0].size())
      throw Malformed{path + ":" + std::to_string(i + 1) + ": " + std::to_string(row.size()) + " values, but line 1 has " +
                      std::to_string(rows[0].size())};
    rows.push_back(std::move(row));
  }
  return rows;
}

// Each value exactly one of the FP8 format -> codes.
std::vector<std::vector<std::uint8_t>> to_codes(const std::vector<std::vector<std::uint32_t>>& rows,
                                                const std::string& path, FormatSpec f, const std::string& fname) {
  std::vector<std::vector<std::uint8_t>> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::uint8_t> codes;
    for (std::uint32_t bits : rows[i]) {
      const std::uint8_t code = core::encode_f32_bits(bits, f, Saturation::kNoSat);
      if (core::decode_to_f32_bits(code, f) != bits)
        throw Malformed{path + ":" + std::to_string(i + 1) + ": " + hex(bits) + " is not exactly an " + fname + " value"};
      codes.push_back(code);
    }
    out.push_back(std::move(codes));
  }
  return out;
}

// One 32-character binary fp32 bit pattern per line.
std::vector<std::uint32_t> read_binary32(const std::string& path) {
  std::vector<std::uint32_t> v;
  const std::vector<std::string> lines = read_lines(path);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string s = lines[i];
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t") + 1);
    if (s.size() != 32 || s.find_first_not_of("01") != std::string::npos)
      throw Malformed{path + ":" + std::to_string(i + 1) + ": expected a 32-character binary fp32 bit pattern"};
    v.push_back(std::uint32_t(std::stoul(s, nullptr, 2)));
  }
  return v;
}

std::vector<std::uint8_t> read_binary(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Malformed{path + ": not found or not a regular file"};
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Malformed{path + ": cannot open"};
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// m16n8k32 tiles PREFIX_{A.u8,B.u8,C.f32,D.f32} (A 16 x 32 row-major codes, B 32 x 8 row-major
// codes B[k][n], C and D 16 x 8 row-major little-endian fp32) as rows of 32 products: one row per
// output element, in tile, row, column order.
struct TileRows {
  std::vector<std::vector<std::uint8_t>> a, b;
  std::vector<std::uint32_t> c, d;
};
TileRows read_tiles(const std::string& prefix) {
  const std::vector<std::uint8_t> A = read_binary(prefix + "_A.u8"), B = read_binary(prefix + "_B.u8"),
                                  C = read_binary(prefix + "_C.f32"), D = read_binary(prefix + "_D.f32");
  const std::size_t tiles = A.size() / 512;
  if (tiles == 0 || A.size() % 512 != 0)
    throw Malformed{prefix + "_A.u8: " + std::to_string(A.size()) + " bytes, not a whole number of 16 x 32 tiles"};
  auto same_tiles = [&](const std::vector<std::uint8_t>& v, std::size_t per_tile, const std::string& suffix) {
    if (v.size() != tiles * per_tile)
      throw Malformed{prefix + suffix + ": " + std::to_string(v.size()) + " bytes, but " + prefix + "_A.u8 has " +
                      std::to_string(tiles) + " tiles (" + std::to_string(per_tile) + " bytes each expected)"};
  };
  same_tiles(B, 256, "_B.u8");
  same_tiles(C, 512, "_C.f32");
  same_tiles(D, 512, "_D.f32");
  auto word = [](const std::vector<std::uint8_t>& v, std::size_t i) {
    return std::uint32_t(v[4 * i]) | std::uint32_t(v[4 * i + 1]) << 8 | std::uint32_t(v[4 * i + 2]) << 16 |
           std::uint32_t(v[4 * i + 3]) << 24;
  };
  TileRows t;
  for (std::size_t tile = 0; tile < tiles; ++tile)
    for (std::size_t m = 0; m < 16; ++m)
      for (std::size_t n = 0; n < 8; ++n) {
        std::vector<std::uint8_t> a(32), b(32);
        for (std::size_t k = 0; k < 32; ++k) {
          a[k] = A[tile * 512 + m * 32 + k];
          b[k] = B[tile * 256 + k * 8 + n];
        }
        t.a.push_back(a);
        t.b.push_back(b);
        t.c.push_back(word(C, tile * 128 + m * 8 + n));
        t.d.push_back(word(D, tile * 128 + m * 8 + n));
      }
  return t;
}

// An operand format of mma-check: an FP8 format (codes) or fp16, bf16, tf32 (values).
struct Input {
  core::MmaOperands kind = core::MmaOperands::kFp8;  // kFp8 for E4M3 / E5M2
  Format fp8 = Format::kE4M3;
  std::string label;
};

Input select_input(const std::string& specific, const std::string& both, const char* flag) {
  const std::string& name = specific.empty() ? both : specific;
  if (name.empty()) throw Malformed{std::string("no format for ") + flag + ": give --format, or " + flag};
  Input in;
  for (core::MmaOperands o : {core::MmaOperands::kFp16, core::MmaOperands::kBf16, core::MmaOperands::kTf32})
    if (name == core::operand_format_name(o)) {
      in.kind = o;
      in.label = name;
      return in;
    }
  if (!parse_fp8_format(name, &in.fp8))
    throw Malformed{"unknown " + std::string(specific.empty() ? "--format" : flag) + " '" + name +
                    "' (accepted: " + fp8_format_names() + ", fp16, bf16, tf32)"};
  in.label = format_label(in.fp8);
  return in;
}

// The tensor-core row of --arch for the input format, and --instruction (the first such row of the
// arch without --instruction).
const AccumulationModel& select_model(const std::string& arch, const std::string& instruction,
                                      core::MmaOperands input) {
  std::string archs, formats, instructions;
  const AccumulationModel* chosen = nullptr;
  bool arch_known = false, format_known = false;
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.datapath != Datapath::kTensorCore) continue;
    if (archs.find(m.arch) == std::string::npos) archs += (archs.empty() ? "" : ", ") + std::string(m.arch);
    if (arch != m.arch) continue;
    arch_known = true;
    const std::string fmt = m.input == core::MmaOperands::kFp8 ? "e4m3, e5m2" : core::operand_format_name(m.input);
    if (formats.find(fmt) == std::string::npos) formats += (formats.empty() ? "" : ", ") + fmt;
    if (m.input != input) continue;
    format_known = true;
    instructions += (instructions.empty() ? "" : ", ") + std::string(m.instruction);
    if (!chosen && (instruction.empty() || instruction == m.instruction)) chosen = &m;
  }
  if (!arch_known) throw Malformed{"unknown --arch '" + arch + "' (accepted: " + archs + ")"};
  if (!format_known)
    throw Malformed{"--arch " + arch + " has no " + (input == core::MmaOperands::kFp8 ? "FP8" : core::operand_format_name(input)) +
                    " tensor-core model (its formats: " + formats + ")"};
  if (!chosen)
    throw Malformed{"--arch " + arch + " has no --instruction '" + instruction + "' for this format (accepted: " +
                    instructions + ")"};
  return *chosen;
}

}  // namespace

int run_mma_check(const MmaCheckOptions& o, std::ostream& out, std::ostream& err) {
  try {
    const Input in_a = select_input(o.format_a, o.format, "--format-a");
    const Input in_b = select_input(o.format_b, o.format, "--format-b");
    if (in_a.kind != in_b.kind || (in_a.kind != core::MmaOperands::kFp8 && in_a.label != in_b.label))
      throw Malformed{"--format-a " + in_a.label + " and --format-b " + in_b.label +
                      ": only the FP8 formats mix (E4M3 x E5M2); fp16, bf16 and tf32 take both operands alike"};
    const bool fp8 = in_a.kind == core::MmaOperands::kFp8;
    // --arch, --format and --instruction name a tensor-core row of the accumulation-model table
    // (core/accumulation.hpp).
    const AccumulationModel& model = select_model(o.arch, o.instruction, in_a.kind);
    const FormatSpec& fa = spec_of(in_a.fp8);
    const FormatSpec& fb = spec_of(in_b.fp8);
    core::MmaAccumulator acc;
    if (o.output == "fp32") acc = core::MmaAccumulator::kFp32;
    else if (o.output == "fp16") acc = core::MmaAccumulator::kFp16;
    else throw Malformed{"unknown --output '" + o.output + "' (accepted: fp32, fp16)"};
    if (acc == core::MmaAccumulator::kFp16 && (in_a.kind == core::MmaOperands::kBf16 || in_a.kind == core::MmaOperands::kTf32))
      throw Malformed{"--output fp16: " + in_a.label + " tensor cores accumulate in fp32 only"};

    std::vector<std::vector<std::uint32_t>> va, vb;  // operand values (fp32 bits)
    std::vector<std::vector<std::uint8_t>> a, b;     // FP8 codes
    std::vector<std::uint32_t> c, d;
    const bool text = !o.a.empty() || !o.b.empty() || !o.c.empty() || !o.d.empty();
    if (!o.tiles.empty()) {
      if (text) throw Malformed{"--tiles replaces --a, --b, --c and --d: give one or the other"};
      if (!fp8) throw Malformed{"--tiles holds FP8 codes: --format must be e4m3 or e5m2"};
      if (acc != core::MmaAccumulator::kFp32) throw Malformed{"--tiles holds fp32 C and D: --output must be fp32"};
      TileRows t = read_tiles(o.tiles);
      a = std::move(t.a);
      b = std::move(t.b);
      c = std::move(t.c);
      d = std::move(t.d);
    } else {
      if (o.a.empty() || o.b.empty() || o.d.empty()) throw Malformed{"give --a, --b and --d (or --tiles)"};
      va = read_hex_rows(o.a);
      vb = read_hex_rows(o.b);
      d = read_binary32(o.d);
      if (!o.c.empty()) c = read_binary32(o.c);
      auto same_count = [&](std::size_t n, const std::string& path) {
        if (n != va.size())
          throw Malformed{path + ": " + std::to_string(n) + " rows, but " + o.a + " has " + std::to_string(va.size())};
      };
      if (va.empty()) throw Malformed{o.a + ": no rows"};
      same_count(vb.size(), o.b);
      same_count(d.size(), o.d);
      if (!o.c.empty()) same_count(c.size(), o.c);
      if (vb[0].size() != va[0].size())
        throw Malformed{o.b + ": " + std::to_string(vb[0].size()) + " values per row, but " + o.a + " has " +
                        std::to_string(va[0].size())};
      if (fp8) {
        a = to_codes(va, o.a, fa, in_a.label);
        b = to_codes(vb, o.b, fb, in_b.label);
      } else {
        for (const auto* side : {&va, &vb})
          for (std::size_t i = 0; i < side->size(); ++i)
            for (std::uint32_t bits : (*side)[i])
              if (!core::is_operand_value(bits, in_a.kind))
                throw Malformed{(side == &va ? o.a : o.b) + ":" + std::to_string(i + 1) + ": " + hex(bits) +
                                " is not exactly " + (in_a.label == "fp16" ? "an " : "a ") + in_a.label + " value"};
      }
    }

    AccumulationModel m = model;
    m.accumulator = acc;  // --output: the instruction's D type
    const core::MmaDatapath path = m.tensor_core();
    const std::size_t rows = fp8 ? a.size() : va.size();
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      std::uint32_t c0 = c.empty() ? 0u : c[i];
      if (acc == core::MmaAccumulator::kFp16) c0 = core::f32_bits_to_half_rne(c0);  // the GPU's C is fp16(c)
      const std::uint32_t got =
          fp8 ? core::mma_dot(core::MmaFp8Codes{a[i].data(), fa}, core::MmaFp8Codes{b[i].data(), fb},
                              int(a[i].size()), c0, path)
              : core::mma_dot(core::MmaValues{va[i].data()}, core::MmaValues{vb[i].data()}, int(va[i].size()), c0, path);
      if (got != d[i]) {
        if (++mismatches <= 10)
          out << "row " << i + 1 << ": recorded " << hex(d[i]) << ", model " << hex(got) << "\n";
      }
    }
    out << "model: " << model.name << " (" << model.hardware << ")\n";
    out << "mismatches: " << mismatches << " of " << rows << "\n";
    return mismatches == 0 ? 0 : 1;
  } catch (const Malformed& m) {
    err << "fp8emu mma-check: error: " << m.message << "\n";
    return 2;
  }
}

Command add_mma_check(CLI::App& app) {
  auto o = std::make_shared<MmaCheckOptions>();
  CLI::App* check = app.add_subcommand(
      "mma-check", "Replay recorded tensor-core dot products (one row per output element) through the model");
  std::string archs;  // the tensor-core rows of the accumulation-model table
  for (const AccumulationModel& m : kAccumulationModels)
    if (m.datapath == Datapath::kTensorCore && archs.find(m.arch) == std::string::npos)
      archs += (archs.empty() ? "" : ", ") + std::string(m.arch);
  check->add_option("--arch", o->arch, "GPU architecture: " + archs + " (each with its FP8, fp16, bf16 and tf32 rows; `fp8emu gemm --help` lists them)")->required();
  check->add_option("--instruction", o->instruction,
                    "MMA instruction of --arch (default: the architecture's first model for --format: wgmma "
                    "for hopper FP8)");
  check->add_option("--format", o->format, "e4m3, e5m2, fp16, bf16 or tf32: both operands");
  check->add_option("--format-a", o->format_a, "e4m3 or e5m2: operand a (overrides --format)");
  check->add_option("--format-b", o->format_b, "e4m3 or e5m2: operand b (overrides --format)");
  check->add_option("--output", o->output, "Accumulator/output: fp32 or fp16")->capture_default_str();
  check->add_option("--a", o->a, "a file: K hex fp32 values per line (K: the recorded instruction's, same on every line)");
  check->add_option("--b", o->b, "b file: K hex fp32 values per line");
  check->add_option("--c", o->c, "c file: binary fp32 per line; omit for an accumulator starting at 0");
  check->add_option("--d", o->d, "d file: the recorded results, binary fp32 per line");
  check->add_option("--tiles", o->tiles,
                    "instead of --a/--b/--c/--d: m16n8k32 tiles PREFIX_A.u8 (16 x 32 codes), PREFIX_B.u8 (32 x 8 "
                    "codes, B[k][n]), PREFIX_C.f32 and PREFIX_D.f32 (16 x 8 fp32), all row-major");
  o->output = "fp32";
  return {check, [o] { return run_mma_check(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{90, add_mma_check};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
