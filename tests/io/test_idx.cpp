// IDX reader on good and corrupt files written byte by byte here.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <string>

#include "fp8emu/io/idx.hpp"
#include "fp8emu/util/error.hpp"
#include "support/doc_table.hpp"
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

namespace {
using fp8emu::testing::kAsan;

// read_idx(path, ndim) in a child process whose address space is limited to what it uses now plus
// `extra_mb` (not under ASan, whose shadow memory needs a huge address space). Exit status 0: the
// read threw fp8emu::Error containing `message`; 3: it ran out of memory; 4: anything else.
int read_idx_in_limited_child(const std::string& path, int ndim, const std::string& message, long extra_mb) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!kAsan) {
      long pages = 0;
      if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
        std::fclose(f);
      }
      const rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + rlim_t(extra_mb) * 1024 * 1024;
      const rlimit rl{limit, limit};
      ::setrlimit(RLIMIT_AS, &rl);
    }
    try {
      io::read_idx(path, ndim);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find(message) != std::string::npos ? 0 : 4);
    } catch (const std::bad_alloc&) {
      ::_exit(3);
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(4);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace

TEST_CASE("a huge declared IDX shape is reported as truncated without allocating it", "[io][idx][bad-input]") {
  // 16384 x 1024 x 1024 = 2^34 bytes declared (the largest accepted), 100 present: the reader must
  // report the truncation without first allocating 16 GiB (it reads in bounded chunks).
  const std::string d = tmpdir();
  for (const bool gz : {false, true}) {
    const std::string p = d + (gz ? "/huge.gz" : "/huge");
    const std::vector<std::uint8_t> bytes = idx_bytes(0x08, {16384, 1024, 1024}, std::vector<std::uint8_t>(100, 1));
    gz ? write_gz(p, bytes) : write_plain(p, bytes);
    INFO(p);
    CHECK(read_idx_in_limited_child(p, 3, "truncated: expected 17179869184 bytes of data, got 100", 256) == 0);
  }
  // Beyond 2^34 elements: rejected from the header alone.
  write_plain(d + "/huger", idx_bytes(0x08, {16384, 1024, 1025}, {}));
  CHECK_THROWS_WITH(io::read_idx(d + "/huger", 3), Catch::Contains("implausible IDX dimensions"));
  fs::remove_all(d);
}

TEST_CASE("IDX image dimensions beyond int are rejected by name", "[io][idx][bad-input]") {
  // 0 images of 2^31 x 1 pixels: no data, but the size does not fit the dataset's int fields.
  const std::string d = tmpdir();
  write_plain(d + "/i", idx_bytes(0x08, {0, 0x80000000u, 0}, {}));
  write_plain(d + "/l", idx_bytes(0x08, {0}, {}));
  CHECK_THROWS_WITH(io::read_idx_dataset(d + "/i", d + "/l", 10),
                    Catch::Contains("implausible image count or size (0 images of 2147483648x0)"));
  fs::remove_all(d);
}
