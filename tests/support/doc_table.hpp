// Test support: the numbered Markdown tables of docs/ that tests run row by row (docs/bad-input.md's
// bad-input and resource-limits tables), and whether this build runs under AddressSanitizer.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace fp8emu::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
#else
inline constexpr bool kAsan = false;
#endif

inline std::string trim_blanks(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Cells of a Markdown table row; `\|` is a literal bar; one pair of backticks around a cell is removed.
inline std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (line[i] == '|') {
      out.push_back(trim_blanks(cur));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  for (std::string& c : out)
    if (c.size() >= 2 && c.front() == '`' && c.back() == '`') c = c.substr(1, c.size() - 2);
  return out;
}

// One data row of a numbered table: its line in the file and its cells (cell 0 is the row number).
struct DocRow {
  int line = 0;
  std::vector<std::string> cells;
};

// The data rows of the table that follows the line containing `marker` in `path` (the header and
// its --- line skipped), each with `columns` cells, numbered 1, 2, ... in order (else the test fails).
inline std::vector<DocRow> read_doc_table(const std::string& path, const std::string& marker, std::size_t columns) {
  std::ifstream f(path);
  REQUIRE(f.good());
  std::vector<DocRow> rows;
  std::string line;
  bool in_table = false;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find(marker) != std::string::npos) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|", 0) != 0) {
      if (!rows.empty()) break;  // the blank line after the table
      continue;
    }
    std::vector<std::string> c = table_cells(line);
    INFO(path << ":" << n << ": " << line);
    REQUIRE(c.size() == columns);
    if (c[0] == "#" || c[0].rfind("---", 0) == 0) continue;
    REQUIRE(std::to_string(rows.size() + 1) == c[0]);
    rows.push_back({n, std::move(c)});
  }
  return rows;
}

// A row of docs/bad-input.md's tables (# | id | what | input or how | command | message | exit).
struct DocCase {
  int line = 0;
  std::string id;
  std::string what;   ///< the parser (bad-input table) or the limit (resource-limits table)
  std::string input;  ///< the bad input, or how the limit is imposed
  std::string command, message;
  int exit = -1;
};

#ifdef FP8EMU_SOURCE_DIR
// The cases of the table after `marker` in docs/bad-input.md.
inline std::vector<DocCase> read_bad_input_cases(const std::string& marker) {
  std::vector<DocCase> cases;
  for (const DocRow& d : read_doc_table(std::string(FP8EMU_SOURCE_DIR) + "/docs/bad-input.md", marker, 7)) {
    const std::vector<std::string>& c = d.cells;
    cases.push_back({d.line, c[1], c[2], c[3], c[4], c[5], std::stoi(c[6])});
  }
  return cases;
}
#endif

}  // namespace fp8emu::testing
