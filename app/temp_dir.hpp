// A fresh private folder under the system's temporary directory, removed with everything in it when
// the object goes out of scope (the benchmarks' throw-away results).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {

class TempDir {
 public:
  /// \throws fp8emu::Error when the folder cannot be made.
  explicit TempDir(const std::string& prefix = "fp8emu-bench") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    FP8EMU_CHECK(::mkdtemp(buf.data()) != nullptr, "cannot create a temporary folder from ", pattern);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fp8emu::cli
