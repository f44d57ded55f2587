// docs/bad-input.md is the specification of this test: every row of its table is run here. For
// each row the command (with {fixture} names replaced by files built below, {out} and {tmp} by a
// fresh empty folder of the row) must exit with the row's status, print exactly one line with
// "error:" that contains the row's message, and write nothing ({tmp} stays empty). A row whose
// message, status or fixture drifts from the program fails, so the table cannot go stale.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/doc_table.hpp"
#include "support/idx_writer.hpp"
#include "support/result_files.hpp"

namespace fs = std::filesystem;
using fp8emu::testing::idx_bytes;

namespace {

using Bytes = std::vector<std::uint8_t>;

// ------------------------------------------------------------------------------- the table

using Row = fp8emu::testing::DocCase;


std::vector<Row> read_table() { return fp8emu::testing::read_bad_input_cases("<!-- bad-input table"); }

// ------------------------------------------------------------------------------- fixtures

void write(const fs::path& p, const Bytes& b) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void write(const fs::path& p, const std::string& s) { write(p, Bytes(s.begin(), s.end())); }

// An .npy file with a header dict given as text (padded as NumPy does) and raw data bytes.
Bytes npy(const std::string& dict, const Bytes& data, int version = 1) {
  std::string h = dict;
  const std::size_t pre = version == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  Bytes b{0x93, 'N', 'U', 'M', 'P', 'Y', std::uint8_t(version), 0};
  for (std::size_t i = 0; i < pre - 8; ++i) b.push_back(std::uint8_t(h.size() >> (8 * i)));
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}
Bytes f32s(std::initializer_list<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

// A Fashion-MNIST look-alike folder: 4x4 images, 20 for training and 10 for test; `edit` may
// replace any of the four files' bytes (before gzip).
void idx_folder(const fs::path& d, const std::function<void(const std::string&, Bytes&)>& edit = {}) {
  for (const auto& [prefix, n] : std::vector<std::pair<std::string, std::uint32_t>>{{"train", 20}, {"t10k", 10}}) {
    Bytes pixels(n * 16), labels(n);
    for (std::uint32_t i = 0; i < n * 16; ++i) pixels[i] = std::uint8_t(i * 37);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = std::uint8_t(i % 10);
    Bytes im = idx_bytes(0x08, {n, 4, 4}, pixels), lb = idx_bytes(0x08, {n}, labels);
    const std::string imn = prefix + "-images-idx3-ubyte.gz", lbn = prefix + "-labels-idx1-ubyte.gz";
    if (edit) edit(imn, im), edit(lbn, lb);
    fs::create_directories(d);
    fp8emu::testing::write_gz((d / imn).string(), im);
    fp8emu::testing::write_gz((d / lbn).string(), lb);
  }
}

// Checkpoint bytes: `body` followed by its CRC-32 (as the experiments write it).
Bytes checksummed(Bytes body) {
  const std::uint32_t crc = std::uint32_t(crc32(0L, body.data(), uInt(body.size())));
  for (int i = 0; i < 4; ++i) body.push_back(std::uint8_t(crc >> (8 * i)));
  return body;
}
void put_u64(Bytes& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(std::uint8_t(v >> (8 * i)));
}
void put_str(Bytes& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

std::string mma_row(const std::string& word, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + word;
  return s + "\n";
}

// Builds fixture `name` under `dir` (once) and returns its path.
class Fixtures {
 public:
  explicit Fixtures(fs::path dir) : dir_(std::move(dir)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Fixtures() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string get(const std::string& name) {
    const fs::path p = dir_ / name;
    if (made_.insert(name).second) build(name, p);
    return p.string();
  }

 private:
  void build(const std::string& name, const fs::path& p) {
    const std::string corpus_line = "the quick brown fox jumps over the lazy dog\n";
    std::string corpus;
    for (int i = 0; i < 40; ++i) corpus += corpus_line;
    // .npy files
    if (name == "text.npy") return write(p, std::string("hello, not numpy\n"));
    if (name == "v9.npy") {
      Bytes b = npy(dict("<f4", "(1,)"), f32s({1}));
      b[6] = 9;
      return write(p, b);
    }
    if (name == "header-cut.npy") {  // the header says 118 bytes; the file ends after 30 of them
      const Bytes b = npy(dict("<f4", "(1,)"), {});
      return write(p, Bytes(b.begin(), b.begin() + 40));
    }
    if (name == "no-descr.npy") return write(p, npy("{'fortran_order': False, 'shape': (1,), }", f32s({1})));
    if (name == "fortran.npy") return write(p, npy(dict("<f4", "(1, 2)", "True"), f32s({1, 2})));
    if (name == "fortran-typo.npy") return write(p, npy(dict("<f4", "(1, 2)", "Flase"), f32s({1, 2})));
    if (name == "shape-unbalanced.npy")  // the fuzz_convert finding: the shape runs to the newline
      return write(p, npy("{'descr': '<f4', 'fortran_order': False, 'shape':((2, 4), }", f32s({1})));
    if (name == "big-endian.npy") return write(p, npy(dict(">f4", "(1,)"), f32s({1})));
    if (name == "f8.npy") return write(p, npy(dict("<f8", "(1,)"), Bytes(8, 0)));
    if (name == "shape-text.npy") return write(p, npy(dict("<f4", "(2, a)"), f32s({1, 2})));
    if (name == "shape-negative.npy") return write(p, npy(dict("<f4", "(-1,)"), {}));
    if (name == "shape-huge.npy") return write(p, npy(dict("|u1", "(1099511627776, 2)"), {}));
    if (name == "short.npy") return write(p, npy(dict("<f4", "(4,)"), f32s({1, 2})));
    if (name == "long.npy") return write(p, npy(dict("<f4", "(1,)"), f32s({1, 2})));
    if (name == "folder.npy") return fs::create_directories(p), void();
    if (name == "f32.npy") return write(p, npy(dict("<f4", "(1, 2)"), f32s({1, 2})));
    if (name == "codes.npy") return write(p, npy(dict("|u1", "(1, 2)"), {0x38, 0x40}));
    if (name == "codes3d.npy") return write(p, npy(dict("|u1", "(1, 1, 2)"), {0x38, 0x40}));
    if (name == "f16.npy") return write(p, npy(dict("<f2", "(1, 2)"), {0, 0x3C, 0, 0x3C}));
    if (name == "codes3x3.npy") return write(p, npy(dict("|u1", "(3, 3)"), Bytes(9, 0x38)));
    if (name == "empty-1e6.npy") return write(p, npy(dict("|u1", "(1000000, 0)"), {}));
    if (name == "empty-2e31.npy") return write(p, npy(dict("|u1", "(2147483648, 0)"), {}));
    if (name == "empty-2.npy") return write(p, npy(dict("|u1", "(2, 0)"), {}));
    // raw files
    if (name == "five-bytes.bin") return write(p, Bytes{1, 2, 3, 4, 5});
    if (name == "e2m1-0x10.bin") return write(p, Bytes{0x01, 0x10});
    if (name == "f32.bin") return write(p, f32s({1, 2}));
    // IDX folders
    if (name == "idx") return idx_folder(p);
    if (name == "idx-empty-folder") return fs::create_directories(p), void();
    if (name == "idx-truncated") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b.resize(b.size() - 10);
      });
    if (name == "idx-magic") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b[0] = 0x1f;
      });
    if (name == "idx-type") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b[2] = 0x0D;
      });
    if (name == "idx-rank") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b = idx_bytes(0x08, {20, 16}, Bytes(320, 1));
      });
    if (name == "idx-trailing") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-labels-idx1-ubyte.gz") b.push_back(0);
      });
    if (name == "idx-count") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-labels-idx1-ubyte.gz") b = idx_bytes(0x08, {19}, Bytes(19, 1));
      });
    if (name == "idx-label") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-labels-idx1-ubyte.gz") b.back() = 12;
      });
    if (name == "idx-huge") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b = idx_bytes(0x08, {16384, 1024, 1024}, Bytes(100, 1));
      });
    if (name == "idx-too-many") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b = idx_bytes(0x08, {16384, 1024, 1025}, {});
      });
    if (name == "idx-int") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b = idx_bytes(0x08, {0, 0x80000000u, 0}, {});
        if (n == "train-labels-idx1-ubyte.gz") b = idx_bytes(0x08, {0}, {});
      });
    if (name == "idx-no-images") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "train-images-idx3-ubyte.gz") b = idx_bytes(0x08, {0, 4, 4}, {});
        if (n == "train-labels-idx1-ubyte.gz") b = idx_bytes(0x08, {0}, {});
      });
    if (name == "idx-test-size") return idx_folder(p, [](const std::string& n, Bytes& b) {
        if (n == "t10k-images-idx3-ubyte.gz") b = idx_bytes(0x08, {10, 3, 3}, Bytes(90, 1));
      });
    if (name == "idx-gzip-corrupt") {
      idx_folder(p);
      const std::string f = (p / "train-labels-idx1-ubyte.gz").string();
      Bytes raw = fp8emu::testing::read_all(f);
      for (std::size_t i = 10; i + 8 < raw.size(); ++i) raw[i] ^= 0xFF;  // the deflate data
      return fp8emu::testing::write_plain(f, raw);
    }
    if (name == "idx-gzip-cut") {  // the gzip file itself cut in half (a download that stopped)
      idx_folder(p);
      const std::string f = (p / "train-images-idx3-ubyte.gz").string();
      Bytes raw = fp8emu::testing::read_all(f);
      raw.resize(raw.size() / 2);
      return fp8emu::testing::write_plain(f, raw);
    }
    // checkpoints (train: FP8EMU-CHECKPOINT-4, train-lm: FP8EMU-LM-CHECKPOINT-4), each in a folder
    if (name == "ck-empty-folder") return fs::create_directories(p), void();
    if (name == "ck-checksum") return write(p / "checkpoint.bin", Bytes{1, 2, 3, 4, 5, 6, 7, 8});
    if (name == "ck-short") return write(p / "checkpoint.bin", Bytes{1, 2});
    Bytes body;
    if (name == "ck-magic") {
      put_str(body, "SOMETHING-ELSE-1");
      return write(p / "checkpoint.bin", checksummed(body));
    }
    if (name == "ck-train-magic-only") {
      put_str(body, "FP8EMU-CHECKPOINT-4");
      return write(p / "checkpoint.bin", checksummed(body));
    }
    if (name == "ck-length") {
      put_str(body, "FP8EMU-CHECKPOINT-4");
      put_u64(body, std::uint64_t(1) << 40);  // a fingerprint of 2^40 bytes
      return write(p / "checkpoint.bin", checksummed(body));
    }
    if (name == "ck-runs") {
      put_str(body, "FP8EMU-CHECKPOINT-4");
      put_str(body, "{}");
      put_u64(body, 17);
      return write(p / "checkpoint.bin", checksummed(body));
    }
    if (name == "ck-fingerprint") {  // a well-formed checkpoint of other settings
      put_str(body, "FP8EMU-CHECKPOINT-4");
      put_str(body, "{\"other\":1}");
      put_u64(body, 0);
      body.insert(body.end(), {0, 0, 0, 0, 0});  // current run 0, no state
      return write(p / "checkpoint.bin", checksummed(body));
    }
    // text corpora
    if (name == "corpus.txt") return write(p, corpus);
    if (name == "empty.txt") return write(p, std::string());
    if (name == "short.txt") return write(p, std::string("too short"));
    if (name == "empty-text-folder") return fs::create_directories(p), void();
    // mma-check rows (E4M3 1.0 = 0x3f800000; 0x3f880000 = 1.0625 is not an E4M3 value)
    if (name == "rows-ok.txt") return write(p, mma_row("3f800000", 32));
    if (name == "rows-not-hex.txt") return write(p, mma_row("3f80000g", 32));
    if (name == "rows-31.txt") return write(p, mma_row("3f800000", 31));
    if (name == "rows-inexact.txt") return write(p, mma_row("3f880000", 32));
    if (name == "rows-empty.txt") return write(p, std::string());
    if (name == "d-ok.txt") return write(p, std::string("01000010000000000000000000000000\n"));
    if (name == "d-short.txt") return write(p, std::string("0100001\n"));
    if (name == "d-two.txt") return write(p, std::string("01000010000000000000000000000000\n"
                                                         "01000010000000000000000000000000\n"));
    // a regular file where a folder is expected
    if (name == "file") return write(p, std::string("x"));
    FAIL("docs/bad-input.md names an unknown fixture {" << name << "}");
  }

  fs::path dir_;
  std::set<std::string> made_;
};

// The row's command with every {name} replaced.
std::string expand(const std::string& command, Fixtures& fx, const fs::path& tmp) {
  std::string out;
  for (std::size_t i = 0; i < command.size();) {
    if (command[i] != '{') {
      out += command[i++];
      continue;
    }
    const std::size_t end = command.find('}', i);
    REQUIRE(end != std::string::npos);
    const std::string name = command.substr(i + 1, end - i - 1);
    if (name == "out") out += (tmp / "out").string();
    else if (name == "tmp") out += tmp.string();
    else out += fx.get(name);
    i = end + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("docs/bad-input.md: every bad input gives its documented error and exit status, writing nothing",
          "[cli][errors][bad-input]") {
  const std::vector<Row> rows = read_table();
  REQUIRE(rows.size() >= 60);
  std::set<std::string> ids;
  Fixtures fx(fs::temp_directory_path() / ("fp8emu-bad-input-" + std::to_string(::getpid())));
  const fs::path scratch = fs::temp_directory_path() / ("fp8emu-bad-input-out-" + std::to_string(::getpid()));
  for (const Row& r : rows) {
    INFO("docs/bad-input.md:" << r.line << ": row " << r.id << ": " << r.command);
    CHECK(ids.insert(r.id).second);
    CHECK(!r.what.empty());
    CHECK(!r.input.empty());
    CHECK(!r.message.empty());
    const fs::path tmp = scratch / r.id;
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    const std::string command = expand(r.command, fx, tmp);
    const fp8emu::testing::CliResult res = fp8emu::testing::run_cli(command);
    INFO("output:\n" << res.output);
    CHECK(res.code == r.exit);
    CHECK(res.output.find(r.message) != std::string::npos);
    std::istringstream lines(res.output);
    int error_lines = 0;
    for (std::string l; std::getline(lines, l);) error_lines += l.find("error:") != std::string::npos;
    CHECK(error_lines == 1);
    CHECK(fs::is_empty(tmp));  // nothing written, not even a folder
  }
  fs::remove_all(scratch);
}
