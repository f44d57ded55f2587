// .npy reader/writer on files built byte by byte as NumPy writes them (numpy/lib/format.py).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <string>

#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include "support/idx_writer.hpp"

using namespace fp8emu;
namespace fs = std::filesystem;

namespace {
// A version-1.0 file as numpy.save writes it: header dict padded with spaces, ending in '\n', data
// starting at a multiple of 64.
std::vector<std::uint8_t> npy_v1(const std::string& dict, const std::vector<std::uint8_t>& data, int major = 1) {
  std::string header = dict;
  const std::size_t pre = major == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<std::uint8_t> b{0x93, 'N', 'U', 'M', 'P', 'Y', std::uint8_t(major), 0};
  b.push_back(std::uint8_t(header.size() & 0xFF));
  b.push_back(std::uint8_t(header.size() >> 8));
  if (major != 1) {
    b.push_back(0);
    b.push_back(0);
  }
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string tmp(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8emu-npy-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

std::vector<std::uint8_t> floats(std::initializer_list<float> v) {
  std::vector<std::uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}
}  // namespace

TEST_CASE("reads NumPy's float32 and uint8 arrays, versions 1.0 and 2.0", "[io][npy]") {
  const std::string p = tmp("a.npy");
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                 floats({1, 2, 3, 4, 5, 6.5f})));
  io::NpyArray a = io::read_npy(p);
  CHECK(a.dtype == "<f4");
  CHECK(a.shape == std::vector<std::size_t>{2, 3});
  float v[6];
  std::memcpy(v, a.data.data(), 24);
  CHECK(v[5] == 6.5f);
  testing::write_plain(p, npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", {0x38, 0x7E, 0x80, 0x01}, 2));
  a = io::read_npy(p);
  CHECK(a.dtype == "|u1");
  CHECK(a.shape == std::vector<std::size_t>{4});
  CHECK(a.data == std::vector<std::uint8_t>{0x38, 0x7E, 0x80, 0x01});
  // Round trip through the writer.
  io::write_npy(p, a);
  CHECK(io::read_npy(p).data == a.data);
  CHECK(testing::read_all(p).size() % 64 == 4);  // 64-byte aligned header + 4 data bytes
}

TEST_CASE("malformed .npy files give errors naming the file", "[io][npy]") {
  const std::string p = tmp("bad.npy");
  testing::write_plain(p, {'P', 'K', 3, 4});
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("bad.npy: not an .npy file"));
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }", floats({1})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("Fortran-order"));
  testing::write_plain(p, npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", floats({1})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("unsupported dtype '>f4'"));
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", floats({1, 2})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("truncated") && Catch::Contains("needs 24 data bytes"));
  CHECK_THROWS_WITH(io::read_npy(tmp("missing.npy")), Catch::Contains("missing.npy: cannot open"));
}

TEST_CASE("malformed .npy shapes are rejected", "[io][npy]") {
  const std::string p = tmp("shape.npy");
  testing::write_plain(p, npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", {}));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("implausible shape"));
  testing::write_plain(p, npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (2x, 3), }", std::vector<std::uint8_t>(6)));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("malformed shape"));
  testing::write_plain(p, npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (0, -1), }", {}));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("malformed shape"));
}

TEST_CASE(".npy: bytes after the data and folders are rejected by name", "[io][npy]") {
  const std::string p = tmp("trailing.npy");
  // Shape (2,) of float32 is 8 bytes; the file holds 12.
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", floats({1, 2, 3})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("trailing.npy: 4 bytes after the data"));
  const std::string dir = tmp("folder.npy");
  fs::create_directories(dir);
  CHECK_THROWS_WITH(io::read_npy(dir), Catch::Contains("folder.npy: is a folder"));
}

TEST_CASE(".npy writer: a header longer than 65535 bytes is written as version 2.0", "[io][npy]") {
  // 30000 dimensions of 1: the header alone is ~90 KB, beyond version 1.0's 16-bit length.
  const std::string p = tmp("many-dims.npy");
  io::NpyArray a{"<f4", std::vector<std::size_t>(30000, 1), floats({2.5f})};
  io::write_npy(p, a);
  const std::vector<std::uint8_t> bytes = testing::read_all(p);
  REQUIRE(bytes.size() > 12);
  CHECK(bytes[6] == 2);
  CHECK(bytes.size() % 64 == 4);
  const io::NpyArray b = io::read_npy(p);
  CHECK(b.shape == a.shape);
  CHECK(b.data == a.data);
  // A short header stays version 1.0.
  io::write_npy(p, io::NpyArray{"<f4", {1}, floats({2.5f})});
  CHECK(testing::read_all(p)[6] == 1);
}

TEST_CASE(".npy: header text quoted in an error stays one printable line", "[io][npy][bad-input]") {
  // Found by fuzz_convert: an unbalanced '(' made the shape run to the end of the header, newline
  // and all, and the message quoted it raw (two lines). Quoted header text is now escaped and cut.
  const std::string p = tmp("unbalanced.npy");
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape':((2, 4), }\x07", floats({1})));
  try {
    io::read_npy(p);
    FAIL("accepted");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find("malformed shape ((2, 4), }\\x07") != std::string::npos);
    CHECK(m.find("\\n") != std::string::npos);  // the header's newline, escaped
  }
  testing::write_plain(p, npy_v1("{'descr': '<f4', 'fortran_order': Flase, 'shape': (1,), }", floats({1})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("fortran_order is 'Flase', not True or False"));
  testing::write_plain(p, npy_v1("{'descr': '\x1b[31m', 'fortran_order': False, 'shape': (1,), }", floats({1})));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("unsupported dtype '\\x1b[31m'"));
}

TEST_CASE(".npy: ml_dtypes' void-record files read as bfloat16 bits and codes", "[io][npy]") {
  // numpy.save of an ml_dtypes.bfloat16 array writes descr '<V2'; of a float8 array '|V1'.
  const std::string p = tmp("v.npy");
  testing::write_plain(p, npy_v1("{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }", {0x80, 0x3F, 0x20, 0xC0}));
  io::NpyArray a = io::read_npy(p);
  CHECK(a.dtype == "<u2");
  CHECK(a.data == std::vector<std::uint8_t>{0x80, 0x3F, 0x20, 0xC0});  // bf16 1.0, -2.5
  testing::write_plain(p, npy_v1("{'descr': '|V1', 'fortran_order': False, 'shape': (3,), }", {0x38, 0x7E, 0x80}));
  a = io::read_npy(p);
  CHECK(a.dtype == "|u1");
  CHECK(a.count() == 3);
  // Other void records are still rejected by name.
  testing::write_plain(p, npy_v1("{'descr': '|V4', 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0}));
  CHECK_THROWS_WITH(io::read_npy(p), Catch::Contains("unsupported dtype '|V4'"));
}
