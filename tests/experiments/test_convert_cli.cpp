// `fp8emu explain`, `fp8emu table` and `fp8emu convert` end to end: values worked by hand from the
// OCP specifications, every code of the tables, .npy and raw conversions with known values, and one
// test per rejected input (exit code, message, and no output file).
//
// Sources of the expected values:
//   - OCP 8-bit Floating Point Specification (OFP8) Revision 1.0 (2023), Tables 1 and 2: E4M3
//     S.EEEE.MMM bias 7, max 448 = S.1111.110, NaN S.1111.111, no Inf; E5M2 bias 15, max 57344,
//     Inf S.11111.00; the value formulas 2^(E-bias) x 1.M and 2^(1-bias) x 0.M.
//   - OCP Microscaling Formats (MX) v1.0, Tables 3-5 (FP6, FP4; E8M0 = 2^(E-127), 0xFF NaN).
//   - docs/conversion-policies.md §Where they differ: what CUDA, ml_dtypes and PyTorch store for
//     |x| > 464 and for -NaN (CUDA 0x7F, ml_dtypes 0xFF).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp8emu/io/npy.hpp"
#include "support/cli_runner.hpp"

namespace fs = std::filesystem;
using fp8emu::io::NpyArray;
using fp8emu::testing::run_cli;

namespace {

// This process's scratch folder, removed when the process exits.
fs::path scratch() {
  struct Folder {
    fs::path path = fs::temp_directory_path() / ("fp8emu-convert-" + std::to_string(::getpid()));
    ~Folder() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Folder folder;
  fs::create_directories(folder.path);
  return folder.path;
}

std::string path(const std::string& name) { return (scratch() / name).string(); }

// The line of `text` that starts with `prefix` (empty when none does).
std::string line_with(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.compare(0, prefix.size(), prefix) == 0) return l;
  return "";
}

int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

template <class T>
NpyArray array(const std::string& dtype, std::vector<std::size_t> shape, const std::vector<T>& v) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(v.size() * sizeof(T));
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

template <class T>
std::vector<T> values(const NpyArray& a) {
  std::vector<T> v(a.data.size() / sizeof(T));
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

// The file written by write_npy with `from` replaced by `to` (same length) in its header.
void write_patched_npy(const std::string& p, const NpyArray& a, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  fp8emu::io::write_npy(p, a);
  std::string b = slurp(p);
  const std::size_t at = b.find(from);
  REQUIRE(at != std::string::npos);
  b.replace(at, from.size(), to);
  write_bytes(p, b);
}

// A conversion that must fail: exit code 2, the message names the problem, OUT (and any
// temporary file beside it) does not exist afterwards.
void check_rejected(const std::string& args, const std::string& out, const std::string& message) {
  INFO("fp8emu convert " << args);
  const auto r = run_cli("convert " + args);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("fp8emu convert: error: ") != std::string::npos);
  CHECK(r.output.find(message) != std::string::npos);
  CHECK(count_lines(r.output) == 1);
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    CHECK(e.path().filename().string().rfind(fs::path(out).filename().string() + ".tmp", 0) != 0);
}

const std::vector<float> kRoundTripInput{1.0f, 0.1f, 465.0f, -3.0f, NAN, 1e-9f, 300.0f, -0.0f};

std::string round_trip_input() {
  const std::string p = path("x.npy");
  fp8emu::io::write_npy(p, array("<f4", {2, 4}, kRoundTripInput));
  return p;
}

}  // namespace

// ------------------------------------------------------------------------------------ explain

TEST_CASE("explain: values worked by hand from the OCP FP8 tables", "[cli][explain]") {
  // 1.0 = 2^(7-7) x 1.000: exponent field 0111, mantissa 000 (OFP8 Table 2).
  auto r = run_cli("explain 1.0");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x38 = 0 | 0111 | 000 = 1 ") != std::string::npos);
  CHECK(line_with(r.output, "exponent").find("0 = field 0111 (7) - bias 7") != std::string::npos);
  CHECK(line_with(r.output, "class") == "class         normal");
  // Neighbours 1 - 2^-4 (0x37: below 1 the ulp is 2^-4) and 1 + 2^-3 (0x39).
  CHECK(line_with(r.output, "neighbours") == "neighbours    next down 0.9375 (0x37), next up 1.125 (0x39)");
  CHECK(line_with(r.output, "error") == "error         0 (exact)");
  CHECK(r.output.find("  * ") == std::string::npos);  // every system stores 0x38

  // 464 = 448 + 16 is the midpoint between 448 (S.1111.110, even) and 480 (beyond the max): RNE
  // keeps 448 in every system, and only rounding up leaves the range.
  r = run_cli("explain 464");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x7E = 0 | 1111 | 110 = 448 ") != std::string::npos);
  CHECK(line_with(r.output, "class") == "class         max");
  CHECK(line_with(r.output, "    CUDA nosat").find("0x7E  448") != std::string::npos);
  CHECK(line_with(r.output, "    ml_dtypes (default cast)").find("0x7E  448") != std::string::npos);
  CHECK(line_with(r.output, "  * round up").find("0x7F  NaN") != std::string::npos);

  // 465 > 464 overflows: satfinite 448 (0x7E), nosat the NaN code 0x7F (conversion-policies.md).
  r = run_cli("explain 465 --format e4m3");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x7E") != std::string::npos);
  CHECK(line_with(r.output, "    CUDA satfinite (float entry)").find("0x7E  448") != std::string::npos);
  CHECK(line_with(r.output, "  * CUDA nosat (float entry)").find("0x7F  NaN") != std::string::npos);
  CHECK(line_with(r.output, "  * ml_dtypes (default cast)").find("0x7F  NaN") != std::string::npos);
  CHECK(line_with(r.output, "    ml_dtypes kSaturate").find("0x7E  448") != std::string::npos);
  CHECK(line_with(r.output, "  * PyTorch <= 2.12").find("0x7F  NaN") != std::string::npos);
  CHECK(line_with(r.output, "    PyTorch >= 2.13").find("0x7E  448") != std::string::npos);
  CHECK(line_with(r.output, "error").find("-17 (stored - fp32 input), relative -3.66 %") != std::string::npos);

  // 0.001 < 2^-6 (min normal) is subnormal: 0.001 / 2^-9 = 0.512 rounds to 1, code 0x01 = 2^-9.
  r = run_cli("explain 0.001");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x01 = 0 | 0000 | 001 = 0.001953125 ") != std::string::npos);
  CHECK(line_with(r.output, "class") == "class         subnormal");
  CHECK(line_with(r.output, "exponent").find("-6 (field 0000: subnormal, value = 0.001 x 2^-6)") != std::string::npos);
  CHECK(line_with(r.output, "input").find("0.001000000000000000020816681711721685132943093776702880859375") !=
        std::string::npos);  // the exact double
  CHECK(line_with(r.output, "fp32").find("0.001000000047497451305389404296875 (the double is not exact in fp32)") !=
        std::string::npos);
  CHECK(line_with(r.output, "  * round toward zero").find("0x00  0") != std::string::npos);

  // -NaN: CUDA's float entry drops the sign (0x7F); ml_dtypes, PyTorch and CUDA's double entry keep
  // it (0xFF) (conversion-policies.md). "-nan" needs no "--" before it.
  r = run_cli("explain -nan");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x7F = 0 | 1111 | 111 = NaN") != std::string::npos);
  CHECK(line_with(r.output, "    CUDA satfinite (float entry)").find("0x7F  NaN") != std::string::npos);
  CHECK(line_with(r.output, "    CUDA nosat (float entry)").find("0x7F  NaN") != std::string::npos);
  CHECK(line_with(r.output, "  * ml_dtypes (default cast)").find("0xFF  -NaN") != std::string::npos);
  CHECK(line_with(r.output, "  * PyTorch <= 2.12").find("0xFF  -NaN") != std::string::npos);
  CHECK(line_with(r.output, "  * CUDA double entry, satfinite").find("0xFF  -NaN") != std::string::npos);
}

TEST_CASE("explain: other formats, raw codes and --format all", "[cli][explain]") {
  // E5M2: +Inf is S.11111.00 = 0x7C; 1e9 overflows: satfinite 57344 (0x7B), nosat Inf.
  auto r = run_cli("explain 1e9 --format e5m2");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x7B = 0 | 11110 | 11 = 57344 ") != std::string::npos);
  CHECK(line_with(r.output, "  * CUDA nosat (float entry)").find("0x7C  Inf") != std::string::npos);

  // FP4 E2M1 (MX Table 5): max 6 = 0 11 1; -inf saturates to -6 (0xF); no nosat or PyTorch rows.
  r = run_cli("explain -inf --format fp4");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0xF = 1 | 11 | 1 = -6 ") != std::string::npos);
  CHECK(line_with(r.output, "    CUDA nosat").empty());
  CHECK(line_with(r.output, "    PyTorch").empty());
  CHECK(r.output.find("not shown: CUDA nosat (e2m1fn has no Inf or NaN") != std::string::npos);

  // E8M0: 3 lies between 2^1 (0x80) and 2^2 (0x81); CUDA rounds up, toward zero gives 2.
  r = run_cli("explain 3 --format e8m0");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("0x81 = 10000001 = 2^2 = 4 ") != std::string::npos);
  CHECK(line_with(r.output, "  * CUDA round toward zero, satfinite").find("0x80  2^1 = 2") != std::string::npos);
  CHECK(line_with(r.output, "neighbours") == "neighbours    next down 2^1 = 2 (0x80), next up 2^2 = 4 (0x81)");

  // --code reads a raw code; without it 0x38 is the hex number 56.
  r = run_cli("explain 0x38 --code");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "input") == "input         code 0x38 = 0 | 0111 | 000 = 1");
  r = run_cli("explain 0x38");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "stored").find("= 56 ") != std::string::npos);
  CHECK(r.output.find("add --code") != std::string::npos);
  r = run_cli("explain 0x7C --code --format e5m2");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "input") == "input         code 0x7C = 0 | 11111 | 00 = Inf");

  r = run_cli("explain 1 --format all");
  REQUIRE(r.code == 0);
  int blocks = 0;
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);) blocks += l.rfind("stored ", 0) == 0;
  CHECK(blocks == 8);
}

TEST_CASE("explain: bad input is named, exit 2", "[cli][explain][errors]") {
  auto r = run_cli("explain 1 --format e4m4");
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown --format 'e4m4' (accepted: e4m3fn (e4m3), e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu (e8m0), "
                      "e2m3fn (e2m3, fp6), e3m2fn, e2m1fn (e2m1, fp4))") != std::string::npos);
  r = run_cli("explain 1.5x");
  CHECK(r.code == 2);
  CHECK(r.output.find("VALUE '1.5x' is not a number") != std::string::npos);
  r = run_cli("explain 0x40 --code --format fp6");
  CHECK(r.code == 2);
  CHECK(r.output.find("0x40 is not a code of e2m3fn (6 bits: 0x00..0x3F)") != std::string::npos);
  r = run_cli("explain 0x1 --code --format all");
  CHECK(r.code == 2);
  CHECK(r.output.find("--code needs one format") != std::string::npos);
}

// ------------------------------------------------------------------------------------ table

TEST_CASE("table: every code, with the OCP values", "[cli][table]") {
  auto r = run_cli("table --format e4m3fn --csv");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 1 + 256);
  CHECK(line_with(r.output, "code,") == "code,sign,exponent,mantissa,value,class");
  CHECK(line_with(r.output, "0x00,") == "0x00,0,0000,000,0,zero");
  CHECK(line_with(r.output, "0x01,") == "0x01,0,0000,001,0.001953125,subnormal");  // 2^-9
  CHECK(line_with(r.output, "0x08,") == "0x08,0,0001,000,0.015625,normal");       // 2^-6
  CHECK(line_with(r.output, "0x7E,") == "0x7E,0,1111,110,448,max");
  CHECK(line_with(r.output, "0x7F,") == "0x7F,0,1111,111,nan,nan");
  CHECK(line_with(r.output, "0x80,") == "0x80,1,0000,000,-0,zero");
  CHECK(line_with(r.output, "0xFE,") == "0xFE,1,1111,110,-448,max");

  r = run_cli("table --format e5m2 --csv");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 1 + 256);
  CHECK(line_with(r.output, "0x7B,") == "0x7B,0,11110,11,57344,max");
  CHECK(line_with(r.output, "0x7C,") == "0x7C,0,11111,00,inf,inf");
  CHECK(line_with(r.output, "0x7D,") == "0x7D,0,11111,01,nan,nan");
  CHECK(line_with(r.output, "0xFC,") == "0xFC,1,11111,00,-inf,inf");
  CHECK(line_with(r.output, "0x01,") == "0x01,0,00000,01,0.0000152587890625,subnormal");  // 2^-16

  r = run_cli("table --format e2m1fn --csv");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 1 + 16);
  CHECK(line_with(r.output, "0x7,") == "0x7,0,11,1,6,max");
  CHECK(line_with(r.output, "0x1,") == "0x1,0,00,1,0.5,subnormal");

  r = run_cli("table --format fp6 --csv");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 1 + 64);
  CHECK(line_with(r.output, "0x1F,") == "0x1F,0,11,111,7.5,max");  // MX: E2M3 max 7.5

  r = run_cli("table --format e4m3fnuz --csv");
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "0x80,") == "0x80,1,0000,000,nan,nan");
  CHECK(line_with(r.output, "0x7F,") == "0x7F,0,1111,111,240,max");

  r = run_cli("table --format e8m0 --csv");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 1 + 256);
  CHECK(line_with(r.output, "0x7F,") == "0x7F,,01111111,,1,normal");
  CHECK(line_with(r.output, "0xFE,") == "0xFE,,11111110,,1.70141183460469231731687303715884105728e+38,max");
  CHECK(line_with(r.output, "0xFF,") == "0xFF,,11111111,,nan,nan");

  // Plain text: a description line, a header line and one line per code.
  r = run_cli("table --format e4m3");
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.output) == 2 + 256);
  CHECK(line_with(r.output, "0x7E ") == "0x7E  0 | 1111 | 110           448  max");
  CHECK(line_with(r.output, "0x7F ") == "0x7F  0 | 1111 | 111           NaN  nan");

  r = run_cli("table --format e4m3fx");
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown --format 'e4m3fx' (accepted: e4m3fn (e4m3), e5m2,") != std::string::npos);
}

// ------------------------------------------------------------------------------------ convert

TEST_CASE("convert: float32 -> e4m3fn -> float32 round trip with a scale, on .npy", "[cli][convert]") {
  const std::string x = round_trip_input(), q = path("q.npy"), y = path("y.npy");
  auto r = run_cli("convert " + x + " " + q + " --to e4m3fn --scale 2 --amax");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(line_with(r.output, "amax") == "amax: 465");  // NaN ignored
  NpyArray a = fp8emu::io::read_npy(q);
  CHECK(a.dtype == "|u1");
  CHECK(a.shape == std::vector<std::size_t>{2, 4});
  // x * 2 = 2, 0.2, 930, -6, NaN, 2e-9, 600, -0 rounded to nearest even, satfinite:
  // 2 = 0 1000 000; 0.2 / 2^-6 = 12.8 -> 13 = 1.101 x 2^-3 = 0 0100 101; 930, 600 -> 448;
  // -6 = -1.100 x 2^2 = 1 1001 100; NaN -> 0x7F; 2e-9 -> 0; -0 -> 0x80.
  CHECK(a.data == std::vector<std::uint8_t>{0x40, 0x25, 0x7E, 0xCC, 0x7F, 0x00, 0x7E, 0x80});

  r = run_cli("convert " + q + " " + y + " --format e4m3fn --to float32 --scale 2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  a = fp8emu::io::read_npy(y);
  CHECK(a.dtype == "<f4");
  CHECK(a.shape == std::vector<std::size_t>{2, 4});
  const std::vector<float> v = values<float>(a);
  REQUIRE(v.size() == 8);
  // Decoded value * RN(1/2): 1, 0.1015625, 224, -3, NaN, 0, 224, -0.
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == 0.1015625f);
  CHECK(v[2] == 224.0f);
  CHECK(v[3] == -3.0f);
  CHECK(std::isnan(v[4]));
  CHECK(v[5] == 0.0f);
  CHECK(v[6] == 224.0f);
  CHECK((v[7] == 0.0f && std::signbit(v[7])));

  // Other policies on the same input (no scale): 465 -> NaN code under nosat, saturates otherwise.
  r = run_cli("convert " + x + " " + q + " --to e4m3fn --policy cuda-nosat");
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q).data[2] == 0x7F);
  r = run_cli("convert " + x + " " + q + " --to e4m3fn --policy ml_dtypes-saturate");
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q).data[2] == 0x7E);
  r = run_cli("convert " + x + " " + q + " --to e4m3fn --rounding zero");  // 0.1 -> 0.09375 = 0x1C
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q).data[1] == 0x1C);
}

TEST_CASE("convert: bfloat16 and float16 .npy in, float16 and bfloat16 out", "[cli][convert]") {
  // bfloat16 bits (descr <u2): 1 (0x3F80), -2.5 (0xC020), 448 (0x43E0), 480 (0x43F0).
  const std::string b = path("b.npy"), q = path("bq.npy");
  fp8emu::io::write_npy(b, array<std::uint16_t>("<u2", {4}, {0x3F80, 0xC020, 0x43E0, 0x43F0}));
  auto r = run_cli("convert " + b + " " + q + " --to e4m3fn");
  INFO(r.output);
  REQUIRE(r.code == 0);
  // -2.5 = -1.010 x 2^1 = 1 1000 010; 480 > 464 saturates to 448.
  CHECK(fp8emu::io::read_npy(q).data == std::vector<std::uint8_t>{0x38, 0xC2, 0x7E, 0x7E});
  r = run_cli("convert " + b + " " + q + " --to e4m3fn --policy pytorch");
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q).data == std::vector<std::uint8_t>{0x38, 0xC2, 0x7E, 0x7F});

  // float16 (descr <f2): 1 (0x3C00), 0.333251953125 (0x3555), +Inf, -Inf -> e5m2.
  const std::string h = path("h.npy");
  fp8emu::io::write_npy(h, array<std::uint16_t>("<f2", {2, 2}, {0x3C00, 0x3555, 0x7C00, 0xFC00}));
  r = run_cli("convert " + h + " " + q + " --to e5m2");
  REQUIRE(r.code == 0);
  // 0.33325 / 2^-4 = 5.33 -> 5 = 1.01 x 2^-2 = 0 01101 01; satfinite +-Inf -> +-57344.
  NpyArray a = fp8emu::io::read_npy(q);
  CHECK(a.shape == std::vector<std::size_t>{2, 2});
  CHECK(a.data == std::vector<std::uint8_t>{0x3C, 0x35, 0x7B, 0xFB});
  r = run_cli("convert " + h + " " + q + " --to e5m2 --policy ml_dtypes");  // Inf stays Inf
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q).data == std::vector<std::uint8_t>{0x3C, 0x35, 0x7C, 0xFC});

  // float32 -> float16 and bfloat16, round to nearest even: 1 + 2^-8 ties to 1 in bfloat16,
  // 1 + 3 * 2^-8 ties to the even 1 + 2^-6; 65520 rounds to Inf and 65504 is the max in float16;
  // 1 + 2^-11 ties to 1 in float16.
  const std::string f = path("f.npy"), o = path("o16.npy");
  fp8emu::io::write_npy(f, array<float>("<f4", {5}, {1.00390625f, 1.01171875f, 65520.0f, 65504.0f, 1.00048828125f}));
  r = run_cli("convert " + f + " " + o + " --to bfloat16");
  REQUIRE(r.code == 0);
  a = fp8emu::io::read_npy(o);
  CHECK(a.dtype == "<u2");
  CHECK(values<std::uint16_t>(a) == std::vector<std::uint16_t>{0x3F80, 0x3F82, 0x4780, 0x4780, 0x3F80});
  r = run_cli("convert " + f + " " + o + " --to float16");
  REQUIRE(r.code == 0);
  a = fp8emu::io::read_npy(o);
  CHECK(a.dtype == "<f2");
  CHECK(values<std::uint16_t>(a) == std::vector<std::uint16_t>{0x3C04, 0x3C0C, 0x7C00, 0x7BFF, 0x3C00});
}

TEST_CASE("convert: raw files in and out", "[cli][convert]") {
  const std::string in = path("x.f32"), codes = path("x.e4m3"), back = path("back.npy");
  const std::vector<float> x{1.0f, -0x1.cp8f, 0.015625f, 3.5f};  // -0x1.cp8 = -max finite (0xFE)
  write_bytes(in, std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
  auto r = run_cli("convert " + in + " " + codes + " --from float32 --to e4m3fn");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(slurp(codes) == std::string("\x38\xFE\x08\x46", 4));  // 3.5 = 1.110 x 2^1 = 0 1000 110
  r = run_cli("convert " + codes + " " + back + " --from e4m3fn --to float32");
  REQUIRE(r.code == 0);
  const NpyArray a = fp8emu::io::read_npy(back);
  CHECK(a.shape == std::vector<std::size_t>{4});
  CHECK(values<float>(a) == x);
  // Raw float16 -> raw bfloat16: 1.5 (0x3E00) -> 0x3FC0.
  const std::string h = path("x.f16"), bf = path("x.bf16");
  write_bytes(h, std::string("\x00\x3E", 2));
  r = run_cli("convert " + h + " " + bf + " --from float16 --to bfloat16");
  REQUIRE(r.code == 0);
  CHECK(slurp(bf) == std::string("\xC0\x3F", 2));
  // E8M0 scales: CUDA rounds up (3 -> 2^2), toward zero gives 2^1; 0 -> 0x00 (2^-127).
  const std::string e = path("e8.npy");
  fp8emu::io::write_npy(e, array<float>("<f4", {3}, {3.0f, 4.0f, 0.0f}));
  r = run_cli("convert " + e + " " + codes + " --to e8m0");
  REQUIRE(r.code == 0);
  CHECK(slurp(codes) == std::string("\x81\x81\x00", 3));
  r = run_cli("convert " + e + " " + codes + " --to e8m0fnu --rounding zero");
  REQUIRE(r.code == 0);
  CHECK(slurp(codes) == std::string("\x80\x81\x00", 3));
}

TEST_CASE("convert: stochastic rounding draws 32 bits per element from mt19937(seed)", "[cli][convert]") {
  // 1.0625 lies halfway between 1 (0x38) and 1.125 (0x39): the discarded fraction is 2^31 / 2^32,
  // so element i rounds up exactly when the i-th draw is >= 2^31.
  const std::string x = path("half.npy"), q = path("sr.npy"), q2 = path("sr2.npy");
  fp8emu::io::write_npy(x, array<float>("<f4", {1000}, std::vector<float>(1000, 1.0625f)));
  auto r = run_cli("convert " + x + " " + q + " --to e4m3fn --rounding stochastic --seed 42");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::vector<std::uint8_t> got = fp8emu::io::read_npy(q).data;
  std::mt19937 rng(42);
  std::vector<std::uint8_t> expected;
  for (int i = 0; i < 1000; ++i) expected.push_back(rng() >= 0x80000000u ? 0x39 : 0x38);
  CHECK(got == expected);
  r = run_cli("convert " + x + " " + q2 + " --to e4m3fn --rounding stochastic --seed 42");
  REQUIRE(r.code == 0);
  CHECK(fp8emu::io::read_npy(q2).data == got);
}

TEST_CASE("convert: each bad input is rejected by name, with no output", "[cli][convert][errors]") {
  const std::string x = round_trip_input(), out = path("out.npy");
  const NpyArray f32 = array<float>("<f4", {2}, {1.0f, 2.0f});

  write_bytes(path("magic.npy"), "PK\x03\x04 this is a zip file, not an npy");
  check_rejected(path("magic.npy") + " " + out + " --to e4m3fn", out, "not an .npy file (bad magic)");

  std::string whole = (fp8emu::io::write_npy(path("t.npy"), f32), slurp(path("t.npy")));
  write_bytes(path("trunc.npy"), whole.substr(0, whole.size() - 3));
  check_rejected(path("trunc.npy") + " " + out + " --to e4m3fn", out,
                 "truncated: the header's shape needs 8 data bytes, the file has 5");

  write_patched_npy(path("fortran.npy"), f32, "'fortran_order': False", "'fortran_order': True ");
  check_rejected(path("fortran.npy") + " " + out + " --to e4m3fn", out, "Fortran-order arrays are not supported");

  write_patched_npy(path("f8.npy"), f32, "'<f4'", "'<f8'");
  check_rejected(path("f8.npy") + " " + out + " --to e4m3fn", out, "unsupported dtype '<f8'");

  check_rejected(x + " " + out + " --from bfloat16 --to e4m3fn", out,
                 "holds float32 (descr <f4), which contradicts --from bfloat16 (bfloat16 is stored as <u2)");

  check_rejected(x + " " + out + " --to e4m3fn --format e5m2", out,
                 "--format e5m2 contradicts the conversion float32 -> e4m3fn");
  check_rejected(x + " " + out + " --to float16 --format e4m3fn", out, "(no side is a small format)");

  check_rejected(x + " " + out + " --to e4m3fn --scale inf", out, "--scale inf is not finite");
  check_rejected(x + " " + out + " --to e4m3fn --scale nan", out, "--scale nan is not finite");
  check_rejected(x + " " + out + " --to e4m3fn --scale 1e39", out, "--scale 1e39 is not finite as fp32");
  check_rejected(x + " " + out + " --to e4m3fn --scale 0", out, "--scale 0 is zero");

  check_rejected(x + " " + out + " --to e4m3fn --rounding stochastic", out, "--rounding stochastic needs --seed N");

  const std::string before = slurp(x);
  const auto r = run_cli("convert " + x + " " + x + " --to e4m3fn");
  CHECK(r.code == 2);
  CHECK(r.output.find("is the input file") != std::string::npos);
  CHECK(slurp(x) == before);
  check_rejected(x + " " + (scratch() / "." / "x.npy").string() + " --to e4m3fn", path("nothing.npy"),
                 "is the input file");

  write_bytes(path("five.raw"), "abcde");
  check_rejected(path("five.raw") + " " + out + " --from float32 --to e4m3fn", out,
                 "five.raw: 5 bytes is not a whole number of float32 items (4 bytes each)");
  check_rejected(path("five.raw") + " " + out + " --to e4m3fn", out,
                 "is a raw file (no .npy suffix): give its type with --from");

  fp8emu::io::write_npy(path("codes.npy"), array<std::uint8_t>("|u1", {2}, {0x03, 0x1F}));
  check_rejected(path("codes.npy") + " " + out + " --to float32", out,
                 "holds uint8 codes (descr |u1): name their format with --format or --from");
  check_rejected(path("codes.npy") + " " + out + " --format fp4 --to float32", out,
                 "element 1 is 0x1F, not a code of e2m1fn (4 bits: 0x0..0xF)");

  check_rejected(x + " " + out + " --to e4m4", out,
                 "unknown --to 'e4m4' (accepted: float32, float16, bfloat16, e4m3fn");
  check_rejected(x + " " + out + " --to e2m1 --policy pytorch", out,
                 "--policy pytorch applies to e4m3fn and e5m2 only");
  check_rejected(x + " " + out + " --to e8m0 --rounding nearest", out, "does not apply to e8m0fnu");
  check_rejected(x + " " + out + " --to float16 --rounding zero", out,
                 "--policy and --rounding apply to conversions to a small format");
}

TEST_CASE("explain --code describes the code given, E8M0 error is against |x|", "[cli][explain]") {
  // OCP OFP8 r1.0: E5M2 0x7C is +Inf; converting Inf under CUDA satfinite would give 0x7B instead.
  auto r = run_cli("explain 0x7C --code --format e5m2");
  CHECK(r.code == 0);
  CHECK(r.output.find("stored        0x7C = 0 | 11111 | 00 = Inf   (the code given)") != std::string::npos);
  CHECK(r.output.find("class         inf") != std::string::npos);
  // E8M0 has no sign: -3 is stored as 2^2 = 4 (rounded up from |x| = 3), an error of 1 against |x|.
  r = run_cli("explain -3 --format e8m0");
  CHECK(r.code == 0);
  CHECK(r.output.find("1 (stored - |fp32 input|)") != std::string::npos);
}
