// The "Resource limits" table of docs/bad-input.md, row by row: a command that would work meets a
// limit of the machine (a file-size limit, a full disk, a read-only folder, a memory limit) or a
// corrupt dataset while its output folder already holds earlier results. For each row the command
// must exit with the row's status, print exactly one line with "error:" that contains the row's
// message, and leave the folder as it was: every earlier file byte for byte (train and train-lm
// remove an older summary.json and curves.png when they start writing into a folder, so that a
// folder never pairs an older summary with newer metrics: those two may be gone), no new file,
// no temporary file. The message and status come from the table, so it cannot drift; each row has
// one test case here ("resource limits: <id>") and a test checks that the two lists match.
//
// Full disks and read-only folders are mounts (a small tmpfs, a read-only bind mount) made in a
// private mount namespace (unshare -m), so that nothing outlives the command; that needs root or
// CAP_SYS_ADMIN, and where it is not permitted (an unprivileged container, most CI runners) the
// case prints "SKIPPED: <reason>" and CTest counts it as skipped. File-size and memory limits are
// prlimit's and run everywhere (the memory rows not under AddressSanitizer, whose shadow memory
// needs a huge address space).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fp8emu/io/npy.hpp"
#include "support/cli_runner.hpp"
#include "support/doc_table.hpp"
#include "support/idx_writer.hpp"
#include "support/result_files.hpp"

namespace fs = std::filesystem;
using fp8emu::testing::CliResult;

namespace {

using fp8emu::testing::kAsan;

using Row = fp8emu::testing::DocCase;


std::vector<Row> read_table() { return fp8emu::testing::read_bad_input_cases("<!-- resource-limits table"); }

const Row& row(const std::string& id) {
  static const std::vector<Row> rows = read_table();
  for (const Row& r : rows)
    if (r.id == id) return r;
  FAIL("docs/bad-input.md: the resource-limits table has no row " << id);
  return rows.front();
}

// The ids this file tests, in the table's order.
const std::vector<std::string> kIds{"efbig-convert",    "efbig-gemm",       "efbig-train",      "efbig-train-lm",
                                    "enospc-convert",   "enospc-train",     "enospc-train-lm",  "readonly-out",
                                    "readonly-new",     "readonly-convert", "corrupt-data",     "memory-train",
                                    "memory-train-lm",  "memory-gemm"};

// ------------------------------------------------------------------------------- files

const fs::path& root() {
  static const fs::path r = [] {
    const fs::path p = fs::temp_directory_path() / ("fp8emu-resource-limits-" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return r;
}

// Removes root() and the corpus file when the test program ends.
struct RemoveRoot {
  ~RemoveRoot() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("fp8emu-resource-limits-" + std::to_string(::getpid())), ec);
    fs::remove("/tmp/fp8emu-resource-limits-corpus-" + std::to_string(::getpid()) + ".txt", ec);  // word_salad_corpus
  }
} remove_root;

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

void write_npy(const fs::path& p, const char* dtype, std::vector<std::size_t> shape, std::size_t bytes) {
  fp8emu::io::NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.assign(bytes, 0x38);  // E4M3 1.0 codes; as float32 bytes 4.4e-5
  fp8emu::io::write_npy(p.string(), a);
}

// Inputs, built once: a Fashion-MNIST look-alike (4x4 images, 20 train, 10 test), one with a
// truncated image file, a text corpus, .npy operands.
fs::path input(const std::string& name) {
  const fs::path p = root() / "inputs" / name;
  if (fs::exists(p)) return p;
  fs::create_directories(p.parent_path());
  using fp8emu::testing::idx_bytes;
  if (name == "idx" || name == "idx-truncated") {
    fs::create_directories(p);
    for (const auto& [prefix, n] : std::vector<std::pair<std::string, std::uint32_t>>{{"train", 20}, {"t10k", 10}}) {
      std::vector<std::uint8_t> pixels(n * 16), labels(n);
      for (std::uint32_t i = 0; i < n * 16; ++i) pixels[i] = std::uint8_t(i * 37);
      for (std::uint32_t i = 0; i < n; ++i) labels[i] = std::uint8_t(i % 10);
      std::vector<std::uint8_t> im = idx_bytes(0x08, {n, 4, 4}, pixels);
      if (name == "idx-truncated" && prefix == "train") im.resize(im.size() - 10);
      fp8emu::testing::write_gz((p / (prefix + "-images-idx3-ubyte.gz")).string(), im);
      fp8emu::testing::write_gz((p / (prefix + "-labels-idx1-ubyte.gz")).string(), idx_bytes(0x08, {n}, labels));
    }
  } else if (name == "corpus.txt") {
    fs::copy_file(fp8emu::testing::word_salad_corpus("resource-limits"), p);
  } else if (name == "f32.npy") {
    write_npy(p, "<f4", {64, 4}, 1024);
  } else if (name == "codes.npy") {
    write_npy(p, "|u1", {16, 32}, 512);
  } else if (name == "empty-32768.npy") {  // a hostile header: 32768 rows of nothing
    write_npy(p, "|u1", {32768, 0}, 0);
  } else {
    FAIL("no input " << name);
  }
  return p;
}

const std::string kTrain = " --epochs 1 --hidden 8 --recipe delayed --quiet";
const std::string kTrainLm = " --steps 4 --batch-size 2 --seq-len 16 --d-model 16 --heads 2 --layers 1 --ffn 32 "
                             "--eval-every 2 --eval-batches 1 --sample-chars 8 --recipe delayed --quiet";

// Earlier results of kind `kind`, made once: "train" and "train-lm" (a complete run of each),
// "files" (an older x.npy and d.npy and a note of the user).
fs::path earlier(const std::string& kind) {
  const fs::path p = root() / ("earlier-" + kind);
  if (fs::exists(p)) return p;
  if (kind == "train") {
    const CliResult r = fp8emu::testing::run_cli("train --data-dir " + input("idx").string() + kTrain + " --out " + p.string());
    INFO(r.output);
    REQUIRE(r.code == 0);
  } else if (kind == "train-lm") {
    const CliResult r =
        fp8emu::testing::run_cli("train-lm --text " + input("corpus.txt").string() + kTrainLm + " --out " + p.string());
    INFO(r.output);
    REQUIRE(r.code == 0);
  } else {
    fs::create_directories(p);
    write_text(p / "x.npy", "an older x.npy");
    write_text(p / "d.npy", "an older d.npy");
  }
  write_text(p / "notes.txt", "the user's notes, next to the results\n");
  return p;
}

std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = fp8emu::testing::slurp(e.path());
  return files;
}

std::string quote(const std::string& s) {  // one shell word
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Mounts in a private mount namespace: whether this process may make them (once).
const std::string& mount_refusal() {
  static const std::string why = [] {
    const fs::path m = root() / "mount-probe";
    fs::create_directories(m);
    const CliResult r = fp8emu::testing::run_shell("unshare -m --propagation private sh -c " +
                                                   quote("mount -t tmpfs -o size=16k tmpfs " + m.string()));
    return r.code == 0 ? std::string() : "cannot mount in a private mount namespace (unshare -m, mount): " + r.output;
  }();
  return why;
}

// Runs the row: `earlier_kind` results are copied into a fresh folder, which becomes {out}; the
// mount `mount` ("", "tmpfs-full" or "readonly") is made over it; the command runs; then the folder
// is compared with the earlier results.
void run_row(const std::string& id, const std::string& earlier_kind, const std::string& mount,
             const std::map<std::string, std::string>& inputs = {}) {
  const Row& r = row(id);
  INFO("docs/bad-input.md:" << r.line << ": row " << id << ": " << r.command);
  if (!mount.empty() && !mount_refusal().empty()) {
    WARN("SKIPPED: " << mount_refusal());
    return;
  }
  if (r.command.rfind("prlimit ", 0) == 0 && fp8emu::testing::run_shell("command -v prlimit").code != 0) {
    WARN("SKIPPED: prlimit (util-linux) is not installed");
    return;
  }
  if (kAsan && r.command.find("prlimit --as") != std::string::npos) {
    WARN("SKIPPED: address-space limits do not work under AddressSanitizer");
    return;
  }
  const fs::path work = root() / id, out = work / "out", after = work / "after";
  fs::remove_all(work);
  fs::create_directories(work);
  const fs::path before = earlier(earlier_kind);
  fs::copy(before, out, fs::copy_options::recursive);
  const std::map<std::string, std::string> expected = snapshot(before);

  // {out}, {input}, and the leading `fp8emu` of the command.
  std::string command = r.command;
  for (std::size_t i; (i = command.find("{out}")) != std::string::npos;) command.replace(i, 5, out.string());
  for (const auto& [name, path] : inputs)
    for (std::size_t i; (i = command.find("{" + name + "}")) != std::string::npos;)
      command.replace(i, name.size() + 2, path);
  REQUIRE(command.find('{') == std::string::npos);
  const std::size_t at = command.find("fp8emu ");
  REQUIRE(at != std::string::npos);
  command.replace(at, 6, FP8EMU_CLI_PATH);

  CliResult res;
  if (mount.empty()) {
    res = fp8emu::testing::run_shell(command);
  } else {
    // The mount hides `out`; the earlier results are copied onto it, the command runs, and what it
    // left is copied to `after` before the namespace (and the mount) goes away.
    const fs::path stage = work / "stage";
    fs::rename(out, stage);
    fs::create_directories(out);
    fs::create_directories(after);
    std::string script = "set -e\n";
    if (mount == "tmpfs-full") {
      script += "mount -t tmpfs -o size=256k tmpfs " + quote(out.string()) + "\n";
      script += "cp -a " + quote(stage.string() + "/.") + " " + quote(out.string()) + "\n";
      script += "dd if=/dev/zero of=" + quote(out.string() + "/filler") + " bs=4096 2>/dev/null || true\n";
    } else {
      script += "mount --bind " + quote(stage.string()) + " " + quote(out.string()) + "\n";
      script += "mount -o remount,bind,ro " + quote(out.string()) + "\n";
      script += "if touch " + quote(out.string() + "/.probe") + " 2>/dev/null; then echo 'still writable'; exit 99; fi\n";
    }
    script += "set +e\n" + command + "\nrc=$?\n";
    if (mount == "tmpfs-full") script += "rm -f " + quote(out.string() + "/filler") + "\n";
    script += "cp -a " + quote(out.string() + "/.") + " " + quote(after.string()) + "\nexit $rc\n";
    res = fp8emu::testing::run_shell("unshare -m --propagation private sh -c " + quote(script));
  }
  const fs::path left = mount.empty() ? out : after;
  INFO("output:\n" << res.output);
  CHECK(res.code == r.exit);
  CHECK(res.output.find(r.message) != std::string::npos);
  std::istringstream lines(res.output);
  int error_lines = 0;
  for (std::string l; std::getline(lines, l);) error_lines += l.find("error:") != std::string::npos;
  CHECK(error_lines == 1);
  // The folder: the earlier files as they were (summary.json and curves.png may be gone), nothing else.
  const std::map<std::string, std::string> now = snapshot(left);
  for (const auto& [name, content] : expected) {
    INFO("earlier file " << name);
    const auto it = now.find(name);
    if (it == now.end()) CHECK((name == "summary.json" || name == "curves.png"));
    else CHECK(it->second == content);
  }
  for (const auto& [name, content] : now) {
    INFO("file left in the folder: " << name);
    CHECK(expected.count(name) == 1);
  }
  fs::remove_all(work);
}

}  // namespace

TEST_CASE("resource limits: the table lists exactly the cases tested here", "[cli][errors][resources]") {
  const std::vector<Row> rows = read_table();
  std::vector<std::string> ids;
  for (const Row& r : rows) {
    ids.push_back(r.id);
    CHECK(!r.what.empty());
    CHECK(!r.input.empty());
    CHECK(!r.message.empty());
  }
  CHECK(ids == kIds);
}

// A file-size limit (prlimit --fsize): fp8emu ignores SIGXFSZ, so the write fails with EFBIG and the
// atomic writer removes its temporary file; the older file of that name stays.
TEST_CASE("resource limits: efbig-convert", "[cli][errors][resources]") {
  run_row("efbig-convert", "files", "", {{"f32.npy", input("f32.npy").string()}});
}
TEST_CASE("resource limits: efbig-gemm", "[cli][errors][resources]") {
  run_row("efbig-gemm", "files", "", {{"codes.npy", input("codes.npy").string()}});
}
TEST_CASE("resource limits: efbig-train", "[cli][errors][resources]") {
  run_row("efbig-train", "train", "", {{"idx", input("idx").string()}});
}
TEST_CASE("resource limits: efbig-train-lm", "[cli][errors][resources]") {
  run_row("efbig-train-lm", "train-lm", "", {{"corpus.txt", input("corpus.txt").string()}});
}

// A full disk: a 256 KiB tmpfs filled up before the command.
TEST_CASE("resource limits: enospc-convert", "[cli][errors][resources]") {
  run_row("enospc-convert", "files", "tmpfs-full", {{"f32.npy", input("f32.npy").string()}});
}
TEST_CASE("resource limits: enospc-train", "[cli][errors][resources]") {
  run_row("enospc-train", "train", "tmpfs-full", {{"idx", input("idx").string()}});
}
TEST_CASE("resource limits: enospc-train-lm", "[cli][errors][resources]") {
  run_row("enospc-train-lm", "train-lm", "tmpfs-full", {{"corpus.txt", input("corpus.txt").string()}});
}

// A read-only folder (a read-only bind mount: root ignores permission bits, not a read-only mount).
TEST_CASE("resource limits: readonly-out", "[cli][errors][resources]") {
  run_row("readonly-out", "train", "readonly", {{"idx", input("idx").string()}});
}
TEST_CASE("resource limits: readonly-new", "[cli][errors][resources]") {
  run_row("readonly-new", "train", "readonly", {{"idx", input("idx").string()}});
}
TEST_CASE("resource limits: readonly-convert", "[cli][errors][resources]") {
  run_row("readonly-convert", "files", "readonly", {{"f32.npy", input("f32.npy").string()}});
}

// A corrupt dataset met by a run into a folder of earlier results: the data is checked before the
// folder is touched, so even the earlier summary.json stays.
TEST_CASE("resource limits: corrupt-data", "[cli][errors][resources]") {
  run_row("corrupt-data", "train", "", {{"idx-truncated", input("idx-truncated").string()}});
  CHECK(fs::exists(earlier("train") / "summary.json"));
}

// A memory limit (prlimit --as): the run's memory need is checked before it allocates.
TEST_CASE("resource limits: memory-train", "[cli][errors][resources]") {
  run_row("memory-train", "train", "", {{"idx", input("idx").string()}});
}
TEST_CASE("resource limits: memory-train-lm", "[cli][errors][resources]") {
  run_row("memory-train-lm", "train-lm", "", {{"corpus.txt", input("corpus.txt").string()}});
}
TEST_CASE("resource limits: memory-gemm", "[cli][errors][resources]") {
  run_row("memory-gemm", "files", "", {{"empty-32768.npy", input("empty-32768.npy").string()}});
}
