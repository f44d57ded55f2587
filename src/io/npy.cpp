// .npy reader and writer (see include/fp8emu/io/npy.hpp).
#include "fp8emu/io/npy.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::io {
namespace {

std::size_t itemsize_of(const std::string& d) {
  if (d == "<f4") return 4;
  if (d == "|u1" || d == "<u1") return 1;
  if (d == "<f2" || d == "<u2") return 2;
  return 0;
}

// Value of `key` in the header dict: the text after "'key':" up to the next top-level comma.
std::string field(const std::string& header, const std::string& key, const std::string& path) {
  const std::string k = "'" + key + "'";
  std::size_t at = header.find(k);
  if (at == std::string::npos) at = header.find("\"" + key + "\"");
  FP8EMU_CHECK(at != std::string::npos, path, ": malformed .npy header (no '", key, "')");
  at = header.find(':', at);
  FP8EMU_CHECK(at != std::string::npos, path, ": malformed .npy header near '", key, "'");
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  std::size_t end = at;
  int depth = 0;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  while (end > at && header[end - 1] == ' ') --end;  // "True ," is True
  return header.substr(at, end - at);
}

}  // namespace

std::size_t NpyArray::count() const {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return n;
}

std::size_t NpyArray::itemsize() const { return itemsize_of(dtype); }

NpyArray read_npy(const std::string& path) {
  std::error_code ec;
  FP8EMU_CHECK(!std::filesystem::is_directory(path, ec), path, ": is a folder, not an .npy file");
  std::ifstream f(path, std::ios::binary);
  FP8EMU_CHECK(f.good(), path, ": cannot open");
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  FP8EMU_CHECK(bytes.size() >= 10 && bytes[0] == 0x93 && std::string(bytes.begin() + 1, bytes.begin() + 6) == "NUMPY",
               path, ": not an .npy file (bad magic)");
  const int major = bytes[6];
  FP8EMU_CHECK(major >= 1 && major <= 3, path, ": unsupported .npy version ", major, ".", int(bytes[7]));
  std::size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = std::size_t(bytes[8]) | (std::size_t(bytes[9]) << 8);
    start = 10;
  } else {
    FP8EMU_CHECK(bytes.size() >= 12, path, ": truncated .npy header");
    hlen = std::size_t(bytes[8]) | (std::size_t(bytes[9]) << 8) | (std::size_t(bytes[10]) << 16) |
           (std::size_t(bytes[11]) << 24);
    start = 12;
  }
  FP8EMU_CHECK(bytes.size() >= start + hlen, path, ": truncated .npy header");
  const std::string header(bytes.begin() + long(start), bytes.begin() + long(start + hlen));
  NpyArray a;
  std::string descr = field(header, "descr", path);
  FP8EMU_CHECK(descr.size() >= 2, path, ": malformed dtype ", excerpt(descr));
  a.dtype = descr.substr(1, descr.size() - 2);
  // ml_dtypes saves its types as opaque void records: bfloat16 as '<V2', the 8-bit formats as '|V1'.
  // Their bytes are the bfloat16 bits and the codes, so they read as uint16 and uint8.
  if (a.dtype == "<V2" || a.dtype == "|V2") a.dtype = "<u2";
  else if (a.dtype == "|V1" || a.dtype == "<V1") a.dtype = "|u1";
  FP8EMU_CHECK(itemsize_of(a.dtype) != 0, path, ": unsupported dtype '", excerpt(a.dtype),
               "' (supported: <f4 float32, |u1 uint8 FP8 codes, <f2 float16, <u2 uint16)");
  const std::string fortran = field(header, "fortran_order", path);
  FP8EMU_CHECK(fortran != "True", path,
               ": Fortran-order arrays are not supported (save with numpy.ascontiguousarray)");
  FP8EMU_CHECK(fortran == "False", path, ": malformed .npy header (fortran_order is '", excerpt(fortran),
               "', not True or False)");
  std::string shape = field(header, "shape", path);
  FP8EMU_CHECK(shape.size() >= 2 && shape.front() == '(' && shape.back() == ')', path, ": malformed shape ", excerpt(shape));
  std::stringstream ss(shape.substr(1, shape.size() - 2));
  std::size_t elements = 1;
  for (std::string tok; std::getline(ss, tok, ',');) {
    const std::size_t b = tok.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    const std::size_t e = tok.find_last_not_of(' ');
    const std::string num = tok.substr(b, e - b + 1);
    FP8EMU_CHECK(!num.empty() && num.size() <= 18 && num.find_first_not_of("0123456789") == std::string::npos, path,
                 ": malformed shape ", excerpt(shape));
    const std::size_t v = std::size_t(std::stoull(num));
    FP8EMU_CHECK(v == 0 || elements <= (std::size_t(1) << 40) / v, path, ": implausible shape ", excerpt(shape));
    elements *= v;
    a.shape.push_back(v);
  }
  const std::size_t need = a.count() * a.itemsize();
  const std::size_t have = bytes.size() - start - hlen;
  FP8EMU_CHECK(have >= need, path, ": truncated: the header's shape needs ", need, " data bytes, the file has ", have);
  FP8EMU_CHECK(have == need, path, ": ", have - need, " bytes after the data that the header's shape describes "
               "(corrupt file or wrong shape)");
  a.data.assign(bytes.begin() + long(start + hlen), bytes.begin() + long(start + hlen + need));
  return a;
}

void write_npy(const std::string& path, const NpyArray& a) {
  FP8EMU_CHECK(a.itemsize() != 0, "write_npy: unsupported dtype '", a.dtype, "'");
  FP8EMU_CHECK(a.data.size() == a.count() * a.itemsize(), "write_npy: ", a.data.size(),
               " data bytes do not match the shape");
  std::string shape = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : (i + 1 < a.shape.size() ? ", " : ""));
  shape += ")";
  std::string header = "{'descr': '" + a.dtype + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Version 1.0 stores the header length in 16 bits; a longer header (thousands of dimensions)
  // needs version 2.0 and its 32-bit length, as numpy.save does.
  const bool v2 = 10 + header.size() + 1 + 63 > 0xFFFF;
  const std::size_t prefix = v2 ? 12 : 10;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  FP8EMU_CHECK(header.size() <= 0xFFFFFFFFu, "write_npy: ", a.shape.size(), " dimensions do not fit an .npy header");
  std::string out = "\x93NUMPY";
  out += char(v2 ? 2 : 1);
  out += char(0);
  for (std::size_t i = 0; i < prefix - 8; ++i) out += char((header.size() >> (8 * i)) & 0xFF);
  out += header;
  out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  write_file_atomic(path, out);
}

}  // namespace fp8emu::io
