// IDX reader on good and corrupt files written byte by byte here.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>

#include "fp8emu/io/idx.hpp"
#include "support/idx_writer.hpp"

using namespace fp8emu;
using namespace fp8emu::testing;
namespace fs = std::filesystem;

namespace {
std::string tmpdir() {
  const fs::path d = fs::temp_directory_path() / ("fp8emu-idx-test-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}
}  // namespace

TEST_CASE("reads gzip and plain IDX images and labels", "[io][idx]") {
  const std::string d = tmpdir();
  const std::vector<std::uint8_t> pixels{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  write_gz(d + "/img.gz", idx_bytes(0x08, {3, 2, 2}, pixels));
  write_plain(d + "/lab", idx_bytes(0x08, {3}, {0, 9, 4}));
  const io::ImageDataset ds = io::read_idx_dataset(d + "/img.gz", d + "/lab", 10);
  CHECK(ds.count == 3);
  CHECK(ds.rows == 2);
  CHECK(ds.cols == 2);
  CHECK(ds.images == pixels);
  CHECK(ds.labels == std::vector<std::uint8_t>{0, 9, 4});
  fs::remove_all(d);
}

TEST_CASE("corrupt IDX files give errors naming the file and the problem", "[io][idx]") {
  const std::string d = tmpdir();
  const std::string p = d + "/bad.gz";
  SECTION("missing file") {
    CHECK_THROWS_WITH(io::read_idx(d + "/nope.gz", 1), Catch::Contains("nope.gz") && Catch::Contains("not found"));
  }
  SECTION("truncated data") {
    write_gz(p, idx_bytes(0x08, {2, 28, 28}, std::vector<std::uint8_t>(1000, 7)));
    CHECK_THROWS_WITH(io::read_idx(p, 3), Catch::Contains("bad.gz") && Catch::Contains("truncated") &&
                                              Catch::Contains("expected 1568 bytes of data, got 1000"));
  }
  SECTION("bad magic") {
    write_gz(p, {0x1f, 0x00, 0x08, 0x01, 0, 0, 0, 1, 5});
    CHECK_THROWS_WITH(io::read_idx(p, 1), Catch::Contains("not an IDX file"));
  }
  SECTION("unsupported element type") {
    write_gz(p, idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
    CHECK_THROWS_WITH(io::read_idx(p, 1), Catch::Contains("unsupported IDX element type"));
  }
  SECTION("wrong rank") {
    write_gz(p, idx_bytes(0x08, {2, 2}, {1, 2, 3, 4}));
    CHECK_THROWS_WITH(io::read_idx(p, 3), Catch::Contains("2 dimensions, expected 3"));
  }
  SECTION("trailing bytes") {
    write_gz(p, idx_bytes(0x08, {2}, {1, 2, 3}));
    CHECK_THROWS_WITH(io::read_idx(p, 1), Catch::Contains("trailing bytes"));
  }
  SECTION("truncated gzip stream") {
    write_gz(p, idx_bytes(0x08, {4000}, std::vector<std::uint8_t>(4000, 3)));
    std::vector<std::uint8_t> raw = read_all(p);
    raw.resize(raw.size() / 2);
    write_plain(p, raw);
    CHECK_THROWS_WITH(io::read_idx(p, 1), Catch::Contains("bad.gz") &&
                                              (Catch::Contains("truncated") || Catch::Contains("corrupt")));
  }
  SECTION("corrupt gzip stream") {
    write_gz(p, idx_bytes(0x08, {4000}, std::vector<std::uint8_t>(4000, 3)));
    std::vector<std::uint8_t> raw = read_all(p);
    for (std::size_t i = 12; i < raw.size() - 8; ++i) raw[i] ^= 0x5A;
    write_plain(p, raw);
    CHECK_THROWS_WITH(io::read_idx(p, 1), Catch::Contains("bad.gz") &&
                                              (Catch::Contains("corrupt") || Catch::Contains("truncated") ||
                                               Catch::Contains("IDX")));
  }
  SECTION("image / label count mismatch and label out of range") {
    write_gz(d + "/i.gz", idx_bytes(0x08, {2, 1, 1}, {1, 2}));
    write_gz(d + "/l.gz", idx_bytes(0x08, {3}, {1, 2, 3}));
    CHECK_THROWS_WITH(io::read_idx_dataset(d + "/i.gz", d + "/l.gz", 10), Catch::Contains("holds 2 images but"));
    write_gz(d + "/l.gz", idx_bytes(0x08, {2}, {1, 12}));
    CHECK_THROWS_WITH(io::read_idx_dataset(d + "/i.gz", d + "/l.gz", 10), Catch::Contains("label 12"));
  }
  fs::remove_all(d);
}
