// Checkpoint files of the experiments: a flat little-endian byte stream ending in a CRC-32 (zlib)
// of what precedes it, written atomically. Shared by `fp8emu train` and `fp8emu train-lm`.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::common {

/// Appends values to a byte buffer.
class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    pod(std::uint64_t(v.size()));
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  void str(const std::string& s) { vec(std::vector<char>(s.begin(), s.end())); }
  std::vector<std::uint8_t> bytes;
};

/// Reads values back; every read is bounds-checked and a short or inconsistent file throws
/// fp8emu::Error naming the file ("corrupt checkpoint").
class Reader {
 public:
  Reader(const std::vector<std::uint8_t>& b, std::string path) : b_(b), path_(std::move(path)) {}
  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  template <class T>
  std::vector<T> vec() {
    const std::uint64_t n = pod<std::uint64_t>();
    FP8EMU_CHECK(n <= (b_.size() - at_) / sizeof(T), path_, ": corrupt checkpoint (bad length)");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), b_.data() + at_, n * sizeof(T));  // (an empty vector's data() may be null)
    at_ += n * sizeof(T);
    return v;
  }
  std::string str() {
    const std::vector<char> c = vec<char>();
    return std::string(c.begin(), c.end());
  }

 private:
  void need(std::size_t n) { FP8EMU_CHECK(b_.size() - at_ >= n, path_, ": corrupt checkpoint (truncated)"); }
  const std::vector<std::uint8_t>& b_;
  std::string path_;
  std::size_t at_ = 0;
};

/// The counts of a cast.
inline void put_stats(Writer& w, const emu::QuantizeStats& s) {
  w.pod(s.count);
  w.pod(s.saturated);
  w.pod(s.underflow);
  w.pod(s.nan);
}
inline emu::QuantizeStats get_stats(Reader& r) {
  emu::QuantizeStats s;
  s.count = r.pod<std::uint64_t>();
  s.saturated = r.pod<std::uint64_t>();
  s.underflow = r.pod<std::uint64_t>();
  s.nan = r.pod<std::uint64_t>();
  return s;
}

/// Appends the CRC-32 of w's bytes and writes them to `path` atomically.
inline void write_checksummed(const std::string& path, Writer& w) {
  const std::uint32_t crc = std::uint32_t(crc32(0L, w.bytes.data(), uInt(w.bytes.size())));
  w.pod(crc);
  io::write_file_atomic(path, std::string(w.bytes.begin(), w.bytes.end()));
}

/// The bytes of a checksummed file without the CRC. \throws fp8emu::Error if it is missing,
/// truncated or its checksum does not match.
inline std::vector<std::uint8_t> read_checksummed(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  FP8EMU_CHECK(f.good(), path, ": no checkpoint to resume from (run with --checkpoint-every N first)");
  std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  FP8EMU_CHECK(b.size() >= 4, path, ": corrupt checkpoint (truncated)");
  std::uint32_t crc;
  std::memcpy(&crc, b.data() + b.size() - 4, 4);
  FP8EMU_CHECK(crc == std::uint32_t(crc32(0L, b.data(), uInt(b.size() - 4))), path,
               ": corrupt checkpoint (checksum mismatch)");
  b.resize(b.size() - 4);
  return b;
}

}  // namespace fp8emu::experiments::common
