// `fp8emu mma-check` end to end: recorded rows written back in the published text layout, corrupt
// files (exit 2 naming file and line), and the full recorded H100 files in that layout (rebuilt from
// tests/data/tensor-core-mma byte for byte: see the README there).
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <bitset>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/io/npy.hpp"
#include "support/cli_runner.hpp"
#include "support/mma_data.hpp"
#include <cmath>
#include <cstring>

namespace fs = std::filesystem;

namespace {
using Result = fp8emu::testing::CliResult;
using fp8emu::testing::run_cli;

// Rewrites the first `rows` rows of a recorded dataset (tests/data/tensor-core-mma) in the published
// text layout (a.txt, b.txt, c.txt, d.txt; d16.txt where the dataset has fp16 results).
fs::path write_published_layout(int rows, const char* gpu = "Ada", const char* format = "E4M3") {
  const fs::path d = fs::temp_directory_path() / ("fp8emu-mma-" + std::to_string(::getpid()));
  fs::create_directories(d);
  fp8emu::testing::MmaDataset ds{};
  ds.gpu = gpu;
  ds.format = format;
  const std::vector<fp8emu::testing::MmaRow> data = fp8emu::testing::load_mma_dataset(ds);
  std::ofstream a(d / "a.txt"), b(d / "b.txt"), c(d / "c.txt"), d32(d / "d.txt"), d16(d / "d16.txt");
  for (int r = 0; r < rows && r < int(data.size()); ++r) {
    const fp8emu::testing::MmaRow& row = data[std::size_t(r)];
    for (auto [values, out] : {std::pair<const std::vector<std::uint32_t>*, std::ofstream*>{&row.a, &a}, {&row.b, &b}}) {
      for (std::uint32_t v : *values) {
        char w[16];
        std::snprintf(w, sizeof w, "%08x ", v);
        *out << w;
      }
      *out << "\n";
    }
    c << std::bitset<32>(row.c) << "\n";
    d32 << std::bitset<32>(row.d) << "\n";
    if (row.has_d16) d16 << std::bitset<32>(row.d16) << "\n";
  }
  return d;
}
}  // namespace

TEST_CASE("mma-check reproduces recorded Ada rows and reports mismatches", "[cli][mma]") {
  const fs::path d = write_published_layout(300);
  const std::string files = " --a " + (d / "a.txt").string() + " --b " + (d / "b.txt").string() + " --c " +
                            (d / "c.txt").string();
  Result r = run_cli("mma-check --arch ada --format e4m3" + files + " --d " + (d / "d.txt").string());
  CHECK(r.code == 0);
  CHECK(r.output == "model: ada (Ada mma.sync m16n8k32 FP8 tensor core (sm_89))\nmismatches: 0 of 300\n");
  r = run_cli("mma-check --arch ada --format e4m3 --output fp16" + files + " --d " + (d / "d16.txt").string());
  CHECK(r.code == 0);
  CHECK(r.output.find("mismatches: 0 of 300") != std::string::npos);
  // The wrong architecture (blocks of 32) disagrees with the Ada recordings: exit 1, counted last.
  r = run_cli("mma-check --arch hopper --format e4m3" + files + " --d " + (d / "d.txt").string());
  CHECK(r.code == 1);
  CHECK(r.output.rfind("mismatches: ") != std::string::npos);
  CHECK(r.output.find(" of 300\n") == r.output.size() - 8);
  fs::remove_all(d);
}

TEST_CASE("mma-check names the file and line of malformed input and exits 2", "[cli][mma][errors]") {
  const fs::path d = write_published_layout(5);
  const std::string b = " --b " + (d / "b.txt").string(), dd = " --d " + (d / "d.txt").string();
  {
    std::ofstream bad(d / "bad_a.txt");
    bad << std::ifstream(d / "a.txt").rdbuf();
    bad << "3f800000 zz\n";
  }
  Result r = run_cli("mma-check --arch ada --format e4m3 --a " + (d / "bad_a.txt").string() + b + dd);
  CHECK(r.code == 2);
  CHECK(r.output.find("bad_a.txt:6: 'zz' is not a hex fp32 bit pattern") != std::string::npos);
  {
    std::ofstream bad(d / "notfp8.txt");
    for (int i = 0; i < 5; ++i) {
      for (int k = 0; k < 32; ++k) bad << (i == 2 && k == 3 ? "3f800001 " : "3f800000 ");
      bad << "\n";
    }
  }
  r = run_cli("mma-check --arch ada --format e4m3 --a " + (d / "notfp8.txt").string() + b + dd);
  CHECK(r.code == 2);
  CHECK(r.output.find("notfp8.txt:3: 0x3f800001 is not exactly an E4M3 value") != std::string::npos);
  {
    std::ofstream bad(d / "short_d.txt");
    bad << "0101\n";
  }
  r = run_cli("mma-check --arch ada --format e4m3 --a " + (d / "a.txt").string() + b + " --d " +
              (d / "short_d.txt").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("short_d.txt:1: expected a 32-character binary fp32 bit pattern") != std::string::npos);
  {
    std::ofstream few(d / "few_d.txt");
    few << "00111111100000000000000000000000\n";
  }
  r = run_cli("mma-check --arch ada --format e4m3 --a " + (d / "a.txt").string() + b + " --d " +
              (d / "few_d.txt").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("few_d.txt: 1 rows, but") != std::string::npos);
  r = run_cli("mma-check --arch ada --format e4m3 --a /nonexistent/a.txt" + b + dd);
  CHECK(r.code == 2);
  CHECK(r.output.find("/nonexistent/a.txt: not found or not a regular file") != std::string::npos);
  r = run_cli("mma-check --arch ada --format e4m3 --a " + d.string() + b + dd);  // a folder
  CHECK(r.code == 2);
  {
    std::ofstream(d / "empty.txt").flush();
  }
  const std::string e = (d / "empty.txt").string();
  r = run_cli("mma-check --arch ada --format e4m3 --a " + e + " --b " + e + " --d " + e);
  CHECK(r.code == 2);
  CHECK(r.output.find("empty.txt: no rows") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("mma-check reproduces every recorded tensor core (rebuilt from tests/data)", "[cli][mma][recorded]") {
  // Every dataset in the published layout, fp32 and (where recorded) fp16 output, through the row
  // that `--arch`, `--format` and `--instruction` select.
  for (const fp8emu::testing::MmaDataset& ds : fp8emu::testing::mma_datasets()) {
    const fs::path h = write_published_layout(1 << 30, ds.gpu, ds.format);
    std::string fmt = ds.format;
    for (char& ch : fmt) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const std::string ab = " --format " + fmt + " --a " + (h / "a.txt").string() + " --b " + (h / "b.txt").string();
    const std::string c = " --c " + (h / "c.txt").string();
    std::string cmd = "mma-check --arch " + std::string(ds.arch) +
                      (*ds.instruction ? " --instruction " + std::string(ds.instruction) : std::string()) + ab +
                      (ds.c_used ? c : std::string()) + " --d " + (h / "d.txt").string();
    Result r = run_cli(cmd);
    INFO(cmd << "\n" << r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find(std::string("model: ") + fp8emu::model_of(ds.fp32_model).name + " (") == 0);
    CHECK(r.output.find("mismatches: 0 of 3500\n") != std::string::npos);
    if (fs::file_size(h / "d16.txt") > 0) {
      cmd = "mma-check --arch " + std::string(ds.arch) +
            (*ds.fp16_instruction ? " --instruction " + std::string(ds.fp16_instruction) : std::string()) + ab + c +
            " --output fp16 --d " + (h / "d16.txt").string();
      r = run_cli(cmd);
      INFO(cmd << "\n" << r.output);
      CHECK(r.code == 0);
      CHECK(r.output.find(std::string("model: ") + fp8emu::model_of(ds.fp16_model).name + " (") == 0);
      CHECK(r.output.find("mismatches: 0 of 3500\n") != std::string::npos);
    }
    fs::remove_all(h);
  }
}

TEST_CASE("mma-check takes fp16, bf16 and tf32 values and refuses others", "[cli][mma][errors]") {
  const fs::path h = write_published_layout(20, "H100", "bf16");
  const std::string files = " --a " + (h / "a.txt").string() + " --b " + (h / "b.txt").string() + " --c " +
                            (h / "c.txt").string() + " --d " + (h / "d.txt").string();
  Result r = run_cli("mma-check --arch hopper --format bf16" + files);
  CHECK(r.code == 0);
  // 2^-30 is a bf16 value but not an fp16 one: the file and line of the first such value are named.
  {
    std::ofstream tiny(h / "tiny.txt");
    for (int i = 0; i < 20; ++i) tiny << (i == 4 ? "3f800000 30800000\n" : "3f800000 3f800000\n");
  }
  const std::string t = " --a " + (h / "tiny.txt").string() + " --b " + (h / "tiny.txt").string() + " --d " +
                        (h / "d.txt").string();
  r = run_cli("mma-check --arch hopper --format bf16" + t);
  CHECK(r.code == 1);  // valid bf16 input, other results
  r = run_cli("mma-check --arch hopper --format fp16" + t);
  CHECK(r.code == 2);
  CHECK(r.output.find("tiny.txt:5: 0x30800000 is not exactly an fp16 value") != std::string::npos);
  r = run_cli("mma-check --arch volta --format bf16" + files);
  CHECK(r.code == 2);
  CHECK(r.output.find("--arch volta has no bf16 tensor-core model (its formats: fp16)") != std::string::npos);
  r = run_cli("mma-check --arch hopper --format bf16 --output fp16" + files);
  CHECK(r.code == 2);
  CHECK(r.output.find("--output fp16: bf16 tensor cores accumulate in fp32 only") != std::string::npos);
  r = run_cli("mma-check --arch hopper --format-a bf16 --format-b fp16" + files);
  CHECK(r.code == 2);
  CHECK(r.output.find("only the FP8 formats mix") != std::string::npos);
  // Rows of different widths in one file.
  std::ofstream(h / "ragged.txt") << "3f800000 3f800000\n3f800000\n";
  r = run_cli("mma-check --arch hopper --format bf16 --a " + (h / "ragged.txt").string() + " --b " +
              (h / "ragged.txt").string() + " --d " + (h / "d.txt").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("ragged.txt:2: 1 values, but line 1 has 2") != std::string::npos);
  fs::remove_all(h);
}

TEST_CASE("gemm on bf16 and fp16 .npy operands reproduces recorded tensor-core rows", "[cli][gemm][recorded]") {
  // A = the first n recorded rows' a, B = their b, C their c on the diagonal: the diagonal of
  // D = A B^T + C is the recorded d (H100 bf16 as ml_dtypes' bfloat16 bits, B200 fp16 as float16,
  // once with B given as [K, N] for --layout nn).
  namespace io = fp8emu::io;
  const fs::path d = fs::temp_directory_path() / ("fp8emu-gemm-values-" + std::to_string(::getpid()));
  fs::create_directories(d);
  struct Case {
    const char* gpu;
    const char* format;
    const char* model;
  };
  for (const Case cs : {Case{"H100", "bf16", "hopper-bf16"}, Case{"B200", "fp16", "blackwell-fp16"}}) {
    fp8emu::testing::MmaDataset ds{};
    ds.gpu = cs.gpu;
    ds.format = cs.format;
    const std::vector<fp8emu::testing::MmaRow> rows = fp8emu::testing::load_mma_dataset(ds);
    const std::size_t n = 24, K = rows[0].a.size();
    const bool bf16 = std::string(cs.format) == "bf16";
    io::NpyArray A, B, Bt, C;
    A.dtype = B.dtype = Bt.dtype = bf16 ? "<u2" : "<f2";
    A.shape = B.shape = {n, K};
    Bt.shape = {K, n};
    C.dtype = "<f4";
    C.shape = {n, n};
    A.data.resize(n * K * 2);
    B.data.resize(n * K * 2);
    Bt.data.resize(n * K * 2);
    C.data.assign(n * n * 4, 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < K; ++k) {
        auto half_of = [&](std::uint32_t v) {
          return bf16 ? std::uint16_t(v >> 16) : fp8emu::core::f32_bits_to_half_rne(v);
        };
        const std::uint16_t ha = half_of(rows[i].a[k]), hb = half_of(rows[i].b[k]);
        std::memcpy(&A.data[(i * K + k) * 2], &ha, 2);
        std::memcpy(&B.data[(i * K + k) * 2], &hb, 2);
        std::memcpy(&Bt.data[(k * n + i) * 2], &hb, 2);
      }
      std::memcpy(&C.data[(i * n + i) * 4], &rows[i].c, 4);
    }
    io::write_npy((d / "A.npy").string(), A);
    io::write_npy((d / "B.npy").string(), B);
    io::write_npy((d / "Bt.npy").string(), Bt);
    io::write_npy((d / "C.npy").string(), C);
    for (const char* layout : {"tn", "nn"}) {
      const std::string b = std::string(layout) == "tn" ? "B.npy" : "Bt.npy";
      const Result r = run_cli("gemm --a " + (d / "A.npy").string() + " --b " + (d / b).string() + " --layout " +
                               layout + " --c " + (d / "C.npy").string() + " --accumulation " + cs.model + " --out " +
                               (d / "D.npy").string());
      INFO(cs.gpu << " " << cs.format << " " << layout << ": " << r.output);
      REQUIRE(r.code == 0);
      const io::NpyArray D = io::read_npy((d / "D.npy").string());
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t u;
        std::memcpy(&u, &D.data[(i * n + i) * 4], 4);
        bad += u != rows[i].d;
      }
      CHECK(bad == 0);
    }
  }
  // The FP8 epilogue's flags are refused by name; an FP8 .npy is not a bf16 operand.
  Result r = run_cli("gemm --a " + (d / "A.npy").string() + " --b " + (d / "B.npy").string() +
                     " --accumulation blackwell-fp16 --alpha 2 --out " + (d / "E.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("--accumulation blackwell-fp16 takes fp16 values") != std::string::npos);
  CHECK(!fs::exists(d / "E.npy"));
  io::NpyArray q;
  q.dtype = "|u1";
  q.shape = {2, 2};
  q.data.assign(4, 0x38);
  io::write_npy((d / "q.npy").string(), q);
  // FP8 codes with a bf16 row: the FP8 GEMM with the codes widened to bf16 (1 * 1 summed twice = 2).
  r = run_cli("gemm --a " + (d / "q.npy").string() + " --b " + (d / "q.npy").string() +
              " --accumulation hopper-bf16 --out " + (d / "E.npy").string());
  CHECK(r.code == 0);
  const io::NpyArray e = io::read_npy((d / "E.npy").string());
  float e00 = 0.0f;
  std::memcpy(&e00, e.data.data(), 4);
  CHECK(e00 == 2.0f);
  // A uint8 B with value A: B is no bf16 operand.
  r = run_cli("gemm --a " + (d / "A.npy").string() + " --b " + (d / "q.npy").string() +
              " --accumulation hopper-bf16 --out " + (d / "F.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("q.npy: dtype |u1 is not float16, bfloat16 (uint16 bits) or float32") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("gemm on .npy files and compare", "[cli][gemm]") {
  namespace io = fp8emu::io;
  const fs::path d = fs::temp_directory_path() / ("fp8emu-gemm-" + std::to_string(::getpid()));
  fs::create_directories(d);
  // A = [[1, 2]] and B = [[1, 1], [2, 0.5]] as E4M3 codes (1 = 0x38, 2 = 0x40, 0.5 = 0x30), with
  // scale_inv 0.5 and 4: D = A B^T * 0.5 * 4 = [[6, 6]], exactly, in every accumulation model.
  io::NpyArray A{"|u1", {1, 2}, {0x38, 0x40}}, B{"|u1", {2, 2}, {0x38, 0x38, 0x40, 0x30}};
  io::write_npy((d / "A.npy").string(), A);
  io::write_npy((d / "B.npy").string(), B);
  const std::string common = " --a " + (d / "A.npy").string() + " --b " + (d / "B.npy").string() +
                             " --scale-inv-a 0.5 --scale-inv-b 4";
  Result r = run_cli("gemm" + common + " --out " + (d / "D.npy").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const io::NpyArray D = io::read_npy((d / "D.npy").string());
  REQUIRE(D.shape == std::vector<std::size_t>{1, 2});
  float v[2];
  std::memcpy(v, D.data.data(), 8);
  CHECK(v[0] == 6.0f);
  CHECK(v[1] == 6.0f);
  // compare: identical -> exit 0; one element one ulp away -> exit 1 with max ulp 1.
  io::NpyArray E = D;
  io::write_npy((d / "E.npy").string(), E);
  r = run_cli("compare " + (d / "D.npy").string() + " " + (d / "E.npy").string());
  CHECK(r.code == 0);
  CHECK(r.output.find("bitwise mismatches: 0") != std::string::npos);
  const float next = std::nextafter(6.0f, 7.0f);
  std::memcpy(E.data.data() + 4, &next, 4);
  io::write_npy((d / "E.npy").string(), E);
  r = run_cli("compare " + (d / "D.npy").string() + " " + (d / "E.npy").string());
  CHECK(r.code == 1);
  CHECK(r.output.find("bitwise mismatches: 1") != std::string::npos);
  CHECK(r.output.find("max ulp: 1\n") != std::string::npos);
  // FP8 output with a D scale: 6 * 2 = 12 = 1.5 * 2^3 -> E4M3 0.1010.100 = 0x54; amax of D is 6.
  r = run_cli("gemm" + common + " --output e4m3 --d-scale 2 --out " + (d / "D8.npy").string());
  CHECK(r.code == 0);
  CHECK(r.output.find("amax of D 6") != std::string::npos);
  const io::NpyArray D8 = io::read_npy((d / "D8.npy").string());
  CHECK(D8.dtype == "|u1");
  CHECK(D8.data == std::vector<std::uint8_t>{0x54, 0x54});
  // --split-k reaches the model and is checked: one split is the plain GEMM, 0 is refused.
  r = run_cli("gemm" + common + " --split-k 2 --out " + (d / "S.npy").string());
  CHECK(r.code == 0);
  CHECK(r.output.find("split-K 2") != std::string::npos);
  {  // K = 2 fits in one 128-element split range: the plain product, [[6, 6]]
    const io::NpyArray S = io::read_npy((d / "S.npy").string());
    REQUIRE(S.data.size() == 8);
    float s[2];
    std::memcpy(s, S.data.data(), 8);
    CHECK(s[0] == 6.0f);
    CHECK(s[1] == 6.0f);
  }
  r = run_cli("gemm" + common + " --split-k 0 --out " + (d / "X.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("split_k must be >= 1, got 0") != std::string::npos);
  r = run_cli("gemm" + common + " --output int8 --out " + (d / "X.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown --output 'int8'") != std::string::npos);
  // Bad input: E5M2 x E5M2, shape mismatch.
  r = run_cli("gemm" + common + " --format-a e5m2 --format-b e5m2 --out " + (d / "X.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("E5M2 x E5M2 is not supported") != std::string::npos);
  r = run_cli("gemm" + common + " --layout nn --out " + (d / "N.npy").string());
  CHECK(r.code == 0);  // B [2, 2] is also a valid [K, N] for K = 2
  {  // D = A B (not B^T): [1*1 + 2*2, 1*1 + 2*0.5] * 0.5 * 4 = [[10, 4]]
    const io::NpyArray N = io::read_npy((d / "N.npy").string());
    REQUIRE(N.data.size() == 8);
    float n[2];
    std::memcpy(n, N.data.data(), 8);
    CHECK(n[0] == 10.0f);
    CHECK(n[1] == 4.0f);
  }
  io::NpyArray B3{"|u1", {3, 3}, std::vector<std::uint8_t>(9, 0x38)};
  io::write_npy((d / "B3.npy").string(), B3);
  r = run_cli("gemm --a " + (d / "A.npy").string() + " --b " + (d / "B3.npy").string() + " --out " + (d / "X.npy").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("shape mismatch") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("gemm --split-k reproduces cuBLASLt's split-K output recorded on an H200", "[cli][gemm][h200]") {
  // 16 x 16 x 65536, FAST_ACCUM = 1 forced to 25 splits (tests/data/h200/README.md): the Hopper model
  // with --split-k 25 gives the recorded bits; without it nearly every element differs.
  const std::string dir = std::string(FP8EMU_TEST_DATA_DIR) + "/h200/cublaslt-splitk/k65536_m16/";
  const fs::path d = fs::temp_directory_path() / ("fp8emu-splitk-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const std::string gemm = "gemm --a " + dir + "A.npy --b " + dir + "B.npy --accumulation hopper --promotion 0";
  Result r = run_cli(gemm + " --split-k 25 --out " + (d / "D.npy").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  r = run_cli("compare " + (d / "D.npy").string() + " " + dir + "D_f1_s25_r2.npy");
  CHECK(r.code == 0);
  CHECK(r.output.find("bitwise mismatches: 0") != std::string::npos);
  r = run_cli(gemm + " --out " + (d / "U.npy").string());
  REQUIRE(r.code == 0);
  r = run_cli("compare " + (d / "U.npy").string() + " " + dir + "D_f1_s25_r2.npy");
  CHECK(r.code == 1);
  CHECK(r.output.find("bitwise mismatches: 256") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("mma-check --arch hopper --instruction mma.sync reproduces every H200 mma.sync tile", "[cli][mma][h200]") {
  // tests/data/h200/mma-sync (768 tiles per pair) and mma-sync-edge (192 special-value tiles).
  const std::string dir = std::string(FP8EMU_TEST_DATA_DIR) + "/h200/";
  struct Pair {
    const char* name;
    const char* formats;
  };
  for (const Pair p : {Pair{"e4m3_e4m3", " --format e4m3"}, Pair{"e5m2_e5m2", " --format e5m2"},
                       Pair{"e4m3_e5m2", " --format-a e4m3 --format-b e5m2"}}) {
    for (const char* set : {"mma-sync/", "mma-sync-edge/"}) {
      const std::string tiles = " --tiles " + dir + set + p.name;
      INFO(set << p.name);
      Result r = run_cli(std::string("mma-check --arch hopper --instruction mma.sync") + p.formats + tiles);
      CHECK(r.code == 0);
      CHECK(r.output.find(std::string("mismatches: 0 of ") + (std::string(set) == "mma-sync/" ? "98304" : "24576") + "\n") !=
            std::string::npos);
      if (std::string(set) != "mma-sync/") continue;
      // Hopper's default instruction (wgmma) and Ada's mma.sync are other datapaths: exit 1.
      r = run_cli(std::string("mma-check --arch hopper") + p.formats + tiles);
      CHECK(r.code == 1);
      r = run_cli(std::string("mma-check --arch ada") + p.formats + tiles);
      CHECK(r.code == 1);
    }
  }
  // Errors name the problem and exit 2.
  const std::string tiles = " --tiles " + dir + "mma-sync/e4m3_e4m3";
  Result r = run_cli("mma-check --arch hopper --instruction mma.syn --format e4m3" + tiles);
  CHECK(r.code == 2);
  CHECK(r.output.find("--arch hopper has no --instruction 'mma.syn' for this format (accepted: wgmma, mma.sync)") != std::string::npos);
  r = run_cli("mma-check --arch pascal --format e4m3" + tiles);
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown --arch 'pascal' (accepted: hopper, ada, blackwell, volta, ampere)") != std::string::npos);
  r = run_cli("mma-check --arch volta --format e4m3" + tiles);
  CHECK(r.code == 2);
  CHECK(r.output.find("--arch volta has no FP8 tensor-core model (its formats: fp16)") != std::string::npos);
  r = run_cli("mma-check --arch hopper --instruction mma.sync --format e4m3 --output fp16" + tiles);
  CHECK(r.code == 2);
  CHECK(r.output.find("--tiles holds fp32 C and D: --output must be fp32") != std::string::npos);
  r = run_cli("mma-check --arch hopper --instruction mma.sync --format-a e4m3" + tiles);
  CHECK(r.code == 2);
  CHECK(r.output.find("no format for --format-b") != std::string::npos);
  r = run_cli("mma-check --arch hopper --format e4m3 --tiles " + dir + "mma-sync/e4m3_e4m3 --a x.txt");
  CHECK(r.code == 2);
  CHECK(r.output.find("--tiles replaces --a") != std::string::npos);
  r = run_cli("mma-check --arch hopper --format e4m3 --tiles " + dir + "mma-sync/nonexistent");
  CHECK(r.code == 2);
  CHECK(r.output.find("nonexistent_A.u8: not found") != std::string::npos);
}

TEST_CASE("gemm: shapes of empty .npy operands that would need terabytes are refused", "[cli][gemm][errors]") {
  // An operand with K = 0 holds no data whatever M and N its header declares: [10^6, 0] x [10^6, 0]
  // would be a 10^12-element output, and 2^31 rows do not fit the kernels' int.
  namespace io = fp8emu::io;
  const fs::path d = fs::temp_directory_path() / ("fp8emu-gemm-big-" + std::to_string(::getpid()));
  fs::create_directories(d);
  io::write_npy((d / "A.npy").string(), io::NpyArray{"|u1", {1000000, 0}, {}});
  io::write_npy((d / "B.npy").string(), io::NpyArray{"|u1", {1000000, 0}, {}});
  io::write_npy((d / "W.npy").string(), io::NpyArray{"|u1", {2147483648u, 0}, {}});
  io::write_npy((d / "S.npy").string(), io::NpyArray{"|u1", {2, 0}, {}});
  const std::string a = " --a " + (d / "A.npy").string(), out = " --out " + (d / "D.npy").string();
  Result r = run_cli("gemm" + a + " --b " + (d / "B.npy").string() + out);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("GEMM output [1000000, 1000000] from ") != std::string::npos);
  CHECK(r.output.find("has more than 1073741824 elements") != std::string::npos);
  r = run_cli("gemm --a " + (d / "W.npy").string() + " --b " + (d / "S.npy").string() + out);
  CHECK(r.code == 2);
  CHECK(r.output.find("every dimension must be at most 2147483647") != std::string::npos);
  CHECK(!fs::exists(d / "D.npy"));
  // An empty K is a valid product: D = 0. Also from float32 operands, and compare of empty arrays
  // (the asan preset: no memcpy from an empty vector's null data()).
  r = run_cli("gemm --a " + (d / "S.npy").string() + " --b " + (d / "S.npy").string() + out);
  CHECK(r.code == 0);
  CHECK(io::read_npy((d / "D.npy").string()).shape == std::vector<std::size_t>{2, 2});
  io::write_npy((d / "F.npy").string(), io::NpyArray{"<f4", {2, 0}, {}});
  r = run_cli("gemm --a " + (d / "F.npy").string() + " --b " + (d / "F.npy").string() + out);
  INFO(r.output);
  CHECK(r.code == 0);
  r = run_cli("compare " + (d / "F.npy").string() + " " + (d / "F.npy").string());
  CHECK(r.code == 0);
  CHECK(r.output.find("bitwise mismatches: 0") != std::string::npos);
  fs::remove_all(d);
}
