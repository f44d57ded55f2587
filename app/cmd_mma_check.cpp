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

// 32 hex fp32 values per line, each exactly a value of the FP8 format -> codes.
std::vector<std::vector<std::uint8_t>> read_operands(const std::string& path, FormatSpec f, const char* fname) {
  std::vector<std::vector<std::uint8_t>> rows;
  const std::vector<std::string> lines = read_lines(path);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string w;
    std::vector<std::uint8_t> row;
    while (in >> w) {
      if (w.size() != 8 || w.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        throw Malformed{path + ":" + std::to_string(i + 1) + ": '" + excerpt(w) +
                        "' is not a hex fp32 bit pattern (8 hex digits)"};
      const std::uint32_t bits = std::uint32_t(std::stoul(w, nullptr, 16));
      const std::uint8_t code = core::encode_f32_bits(bits, f, Saturation::kNoSat);
      if (core::decode_to_f32_bits(code, f) != bits)
        throw Malformed{path + ":" + std::to_string(i + 1) + ": 0x" + w + " is not exactly an " + fname + " value"};
      row.push_back(code);
    }
    if (row.size() != 32)
      throw Malformed{path + ":" + std::to_string(i + 1) + ": " + std::to_string(row.size()) +
                      " values, expected 32"};
    rows.push_back(row);
  }
  return rows;
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

std::string hex(std::uint32_t u) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << u;
  return os.str();
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

// The tensor-core row of --arch and --instruction (the arch's first row without --instruction).
const AccumulationModel& select_model(const std::string& arch, const std::string& instruction) {
  std::string archs, instructions;
  const AccumulationModel* chosen = nullptr;
  bool arch_known = false;
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.datapath != Datapath::kTensorCore) continue;
    if (archs.find(m.arch) == std::string::npos) archs += (archs.empty() ? "" : ", ") + std::string(m.arch);
    if (arch != m.arch) continue;
    arch_known = true;
    instructions += (instructions.empty() ? "" : ", ") + std::string(m.instruction);
    if (!chosen && (instruction.empty() || instruction == m.instruction)) chosen = &m;
  }
  if (!arch_known) throw Malformed{"unknown --arch '" + arch + "' (accepted: " + archs + ")"};
  if (!chosen)
    throw Malformed{"--arch " + arch + " has no --instruction '" + instruction + "' (accepted: " + instructions + ")"};
  return *chosen;
}

Format select_format(const std::string& specific, const std::string& both, const char* flag) {
  const std::string& name = specific.empty() ? both : specific;
  if (name.empty()) throw Malformed{std::string("no format for ") + flag + ": give --format, or " + flag};
  Format f = Format::kE4M3;
  if (!parse_fp8_format(name, &f))
    throw Malformed{"unknown " + std::string(specific.empty() ? "--format" : flag) + " '" + name +
                    "' (accepted: " + fp8_format_names() + ")"};
  return f;
}

}  // namespace

int run_mma_check(const MmaCheckOptions& o, std::ostream& out, std::ostream& err) {
  try {
    // --arch and --instruction name a tensor-core row of the accumulation-model table
    // (core/accumulation.hpp).
    const AccumulationModel& model = select_model(o.arch, o.instruction);
    const Format fmt_a = select_format(o.format_a, o.format, "--format-a");
    const Format fmt_b = select_format(o.format_b, o.format, "--format-b");
    const FormatSpec& fa = spec_of(fmt_a);
    const FormatSpec& fb = spec_of(fmt_b);
    const std::string label_a = format_label(fmt_a), label_b = format_label(fmt_b);
    core::MmaAccumulator acc;
    if (o.output == "fp32") acc = core::MmaAccumulator::kFp32;
    else if (o.output == "fp16") acc = core::MmaAccumulator::kFp16;
    else throw Malformed{"unknown --output '" + o.output + "' (accepted: fp32, fp16)"};
    if (acc == core::MmaAccumulator::kFp16 && !model.c_joins_first_block)
      throw Malformed{"--output fp16: the " + std::string(model.name) +
                      " model adds C with an fp32 add; only its fp32 output is modelled"};

    std::vector<std::vector<std::uint8_t>> a, b;
    std::vector<std::uint32_t> c, d;
    const bool text = !o.a.empty() || !o.b.empty() || !o.c.empty() || !o.d.empty();
    if (!o.tiles.empty()) {
      if (text) throw Malformed{"--tiles replaces --a, --b, --c and --d: give one or the other"};
      if (acc != core::MmaAccumulator::kFp32) throw Malformed{"--tiles holds fp32 C and D: --output must be fp32"};
      TileRows t = read_tiles(o.tiles);
      a = std::move(t.a);
      b = std::move(t.b);
      c = std::move(t.c);
      d = std::move(t.d);
    } else {
      if (o.a.empty() || o.b.empty() || o.d.empty()) throw Malformed{"give --a, --b and --d (or --tiles)"};
      a = read_operands(o.a, fa, label_a.c_str());
      b = read_operands(o.b, fb, label_b.c_str());
      d = read_binary32(o.d);
      if (!o.c.empty()) c = read_binary32(o.c);
      auto same_count = [&](std::size_t n, const std::string& path) {
        if (n != a.size())
          throw Malformed{path + ": " + std::to_string(n) + " rows, but " + o.a + " has " + std::to_string(a.size())};
      };
      if (a.empty()) throw Malformed{o.a + ": no rows"};
      same_count(b.size(), o.b);
      same_count(d.size(), o.d);
      if (!o.c.empty()) same_count(c.size(), o.c);
    }

    AccumulationModel m = model;
    m.accumulator = acc;  // --output: the instruction's D type
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::uint32_t c0 = c.empty() ? 0u : c[i];
      if (acc == core::MmaAccumulator::kFp16) c0 = core::f32_bits_to_half_rne(c0);  // the GPU's C is fp16(c)
      const std::uint32_t got = core::mma_dot_with_c(a[i].data(), fa, b[i].data(), fb, 32, m, c0);
      if (got != d[i]) {
        if (++mismatches <= 10)
          out << "row " << i + 1 << ": recorded " << hex(d[i]) << ", model " << hex(got) << "\n";
      }
    }
    out << "mismatches: " << mismatches << " of " << a.size() << "\n";
    return mismatches == 0 ? 0 : 1;
  } catch (const Malformed& m) {
    err << "fp8emu mma-check: error: " << m.message << "\n";
    return 2;
  }
}

Command add_mma_check(CLI::App& app) {
  auto o = std::make_shared<MmaCheckOptions>();
  CLI::App* check = app.add_subcommand(
      "mma-check", "Replay recorded FP8 tensor-core dot products (32 products per row) through the model");
  std::string archs;  // the tensor-core rows of the accumulation-model table
  for (const AccumulationModel& m : kAccumulationModels)
    if (m.datapath == Datapath::kTensorCore)
      archs += (archs.empty() ? "" : "; ") + std::string(m.arch) + " " + m.instruction + ": " + m.hardware;
  check->add_option("--arch", o->arch, "GPU architecture of the tensor-core model (" + archs + ")")->required();
  check->add_option("--instruction", o->instruction,
                    "MMA instruction of --arch (default: the architecture's first model: wgmma for hopper)");
  check->add_option("--format", o->format, "e4m3 or e5m2: both operands");
  check->add_option("--format-a", o->format_a, "e4m3 or e5m2: operand a (overrides --format)");
  check->add_option("--format-b", o->format_b, "e4m3 or e5m2: operand b (overrides --format)");
  check->add_option("--output", o->output, "Accumulator/output: fp32 or fp16")->capture_default_str();
  check->add_option("--a", o->a, "a file: 32 hex fp32 values per line");
  check->add_option("--b", o->b, "b file: 32 hex fp32 values per line");
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
