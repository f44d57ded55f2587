// `fp8emu mma-check` (see cmd_mma_check.hpp).
#include "cmd_mma_check.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
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

}  // namespace

int run_mma_check(const MmaCheckOptions& o, std::ostream& out, std::ostream& err) {
  try {
    // --arch names a tensor-core row of the accumulation-model table (core/accumulation.hpp).
    const AccumulationModel* model = nullptr;
    std::string archs;
    for (const AccumulationModel& m : kAccumulationModels) {
      if (m.datapath != Datapath::kTensorCore) continue;
      archs += (archs.empty() ? "" : ", ") + std::string(m.name);
      if (o.arch == m.name) model = &m;
    }
    if (!model) throw Malformed{"unknown --arch '" + o.arch + "' (accepted: " + archs + ")"};
    Format fmt = Format::kE4M3;
    if (!parse_fp8_format(o.format, &fmt))
      throw Malformed{"unknown --format '" + o.format + "' (accepted: e4m3, e5m2)"};
    const FormatSpec* f = &spec_of(fmt);
    const char* format_label = fmt == Format::kE4M3 ? "E4M3" : "E5M2";
    core::MmaAccumulator acc;
    if (o.output == "fp32") acc = core::MmaAccumulator::kFp32;
    else if (o.output == "fp16") acc = core::MmaAccumulator::kFp16;
    else throw Malformed{"unknown --output '" + o.output + "' (accepted: fp32, fp16)"};

    const auto a = read_operands(o.a, *f, format_label);
    const auto b = read_operands(o.b, *f, format_label);
    const auto d = read_binary32(o.d);
    std::vector<std::uint32_t> c;
    if (!o.c.empty()) c = read_binary32(o.c);
    auto same_count = [&](std::size_t n, const std::string& path) {
      if (n != a.size())
        throw Malformed{path + ": " + std::to_string(n) + " rows, but " + o.a + " has " + std::to_string(a.size())};
    };
    if (a.empty()) throw Malformed{o.a + ": no rows"};
    same_count(b.size(), o.b);
    same_count(d.size(), o.d);
    if (!o.c.empty()) same_count(c.size(), o.c);

    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::uint32_t c0 = c.empty() ? 0u : c[i];
      if (acc == core::MmaAccumulator::kFp16) c0 = core::f32_bits_to_half_rne(c0);  // the GPU's C is fp16(c)
      AccumulationModel m = *model;
      m.accumulator = acc;  // --output: the instruction's D type
      const std::uint32_t got = core::mma_dot_with_c(a[i].data(), *f, b[i].data(), *f, 32, m, c0);
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
      archs += (archs.empty() ? "" : ", ") + std::string(m.name) + " (" + m.hardware + ")";
  check->add_option("--arch", o->arch, "Tensor-core model: " + archs)->required();
  check->add_option("--format", o->format, "e4m3 or e5m2")->required();
  check->add_option("--output", o->output, "Accumulator/output: fp32 or fp16")->capture_default_str();
  check->add_option("--a", o->a, "a file: 32 hex fp32 values per line")->required();
  check->add_option("--b", o->b, "b file: 32 hex fp32 values per line")->required();
  check->add_option("--c", o->c, "c file: binary fp32 per line; omit for an accumulator starting at 0");
  check->add_option("--d", o->d, "d file: the recorded results, binary fp32 per line")->required();
  o->output = "fp32";
  return {check, [o] { return run_mma_check(*o, std::cout, std::cerr); }};
}

}  // namespace fp8emu::cli
