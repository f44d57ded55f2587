// Test helpers for the experiments' result folders: whole files, CSV without the wall-clock column,
// and per-process scratch folders.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fp8emu::testing {

/// The whole file (empty if it does not exist).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A CSV file with the last column (the seconds) of every line removed.
inline std::string csv_without_seconds(const std::filesystem::path& p) {
  std::stringstream in(slurp(p)), out;
  std::string line;
  while (std::getline(in, line)) out << line.substr(0, line.rfind(',')) << '\n';
  return out.str();
}

/// <tmp>/<prefix>-<pid>/<name>, removed if it exists (and not created).
inline std::filesystem::path scratch_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace fp8emu::testing
