// `fp8emu table` (see cmd_table.hpp).
#include "cmd_table.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "small_formats.hpp"

namespace fp8emu::cli {

int run_table(const TableOptions& o, std::ostream& out, std::ostream& err) {
  try {
    const FormatInfo& f = find_format(o.format, "--format");
    struct Line {
      std::string code, fields, sign, exponent, mantissa, value, cls;
    };
    std::vector<Line> lines;
    for (std::uint32_t c = 0; c < code_count(f); ++c) {
      Line l;
      l.code = hex_code(c, f);
      l.fields = fields(c, f);
      if (f.spec) {
        const FormatSpec& s = *f.spec;
        l.sign = binary(c >> (s.bits() - 1), 1);
        l.exponent = binary((c >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1u), s.exponent_bits);
        l.mantissa = binary(c & ((1u << s.mantissa_bits) - 1u), s.mantissa_bits);
      } else {
        l.exponent = binary(c, 8);
      }
      l.value = code_value_text(c, f);
      if (o.csv) {
        if (l.value == "NaN" || l.value == "-NaN") l.value = "nan";
        if (l.value == "Inf") l.value = "inf";
        if (l.value == "-Inf") l.value = "-inf";
      }
      l.cls = code_class(c, f);
      lines.push_back(l);
    }
    std::ostringstream text;
    if (o.csv) {
      text << "code,sign,exponent,mantissa,value,class\n";
      for (const Line& l : lines)
        text << l.code << "," << l.sign << "," << l.exponent << "," << l.mantissa << "," << l.value << "," << l.cls
             << "\n";
    } else {
      std::size_t wv = 5;
      for (const Line& l : lines) wv = std::max(wv, l.value.size());
      text << describe(f) << "\n";
      const std::string fields_head = f.spec ? "s | " + std::string(std::size_t(f.spec->exponent_bits), 'e') + " | " +
                                                   std::string(std::size_t(f.spec->mantissa_bits), 'm')
                                             : "eeeeeeee";
      const std::size_t wc = lines[0].code.size(), wf = std::max(fields_head.size(), std::size_t(6));
      auto row = [&](const std::string& c, const std::string& fl, const std::string& v, const std::string& k) {
        text << c << std::string(wc + 2 - c.size(), ' ') << fl << std::string(wf + 2 - fl.size(), ' ')
             << std::string(wv - v.size(), ' ') << v << "  " << k << "\n";
      };
      row(std::string("code").substr(0, std::max<std::size_t>(wc, 4)), fields_head, "value", "class");
      for (const Line& l : lines) row(l.code, l.fields, l.value, l.cls);
    }
    out << text.str();
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu table: error: " << error_text(e) << "\n";
    return 2;
  }
}

Command add_table(CLI::App& app) {
  auto o = std::make_shared<TableOptions>();
  CLI::App* table_cmd = app.add_subcommand("table", "Every code of a small format: fields, exact value, class");
  table_cmd->add_option("--format", o->format, format_names())->required();
  table_cmd->add_flag("--csv", o->csv, "CSV with a header instead of aligned text");
  return {table_cmd, [o] { return run_table(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{110, add_table};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
