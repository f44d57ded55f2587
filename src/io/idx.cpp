// IDX reader (see include/fp8emu/io/idx.hpp).
#include "fp8emu/io/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "fp8emu/util/error.hpp"

namespace fp8emu::io {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads exactly n bytes or reports how many were there.
std::size_t read_bytes(gzFile f, const std::string& path, std::uint8_t* dst, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = unsigned(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, dst + got, chunk);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      if (errnum == Z_BUF_ERROR) break;  // truncated stream: reported by the caller's count
      FP8EMU_FAIL(path, ": corrupt gzip stream (", msg ? msg : "unknown zlib error", ")");
    }
    if (r == 0) break;
    got += std::size_t(r);
  }
  // gzread returns a short count at a truncated gzip stream and sets Z_BUF_ERROR.
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum != Z_OK && errnum != Z_BUF_ERROR)
    FP8EMU_FAIL(path, ": corrupt gzip stream (", msg ? msg : "unknown zlib error", ")");
  return got;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_ndim) {
  FP8EMU_CHECK(std::filesystem::exists(path), path, ": file not found");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  FP8EMU_CHECK(f != nullptr, path, ": cannot open");
  std::uint8_t head[4];
  FP8EMU_CHECK(read_bytes(f.get(), path, head, 4) == 4, path, ": truncated: shorter than the 4-byte IDX header");
  FP8EMU_CHECK(head[0] == 0 && head[1] == 0, path, ": not an IDX file (magic bytes ", int(head[0]), ",",
               int(head[1]), " instead of 0,0)");
  FP8EMU_CHECK(head[2] == 0x08, path, ": unsupported IDX element type 0x", std::hex, int(head[2]),
               " (only 0x08, unsigned byte, is read)");
  FP8EMU_CHECK(head[3] == expected_ndim, path, ": IDX array has ", int(head[3]),
               " dimensions, expected ", expected_ndim);
  IdxArray a;
  std::uint64_t total = 1;
  for (int d = 0; d < expected_ndim; ++d) {
    std::uint8_t b[4];
    FP8EMU_CHECK(read_bytes(f.get(), path, b, 4) == 4, path, ": truncated in the dimension header");
    a.dims.push_back(be32(b));
    total *= a.dims.back();
    FP8EMU_CHECK(total <= (std::uint64_t(1) << 34), path, ": implausible IDX dimensions (",
                 total, "+ elements)");
  }
  // Read in bounded chunks: a header that declares more data than the file holds costs no more
  // memory than the data that is there (plus one chunk) before the truncation is reported.
  constexpr std::size_t kChunk = std::size_t(1) << 24;
  std::size_t got = 0;
  while (got < total) {
    const std::size_t want = std::size_t(std::min<std::uint64_t>(total - got, kChunk));
    a.data.resize(got + want);
    const std::size_t n = read_bytes(f.get(), path, a.data.data() + got, want);
    got += n;
    if (n < want) break;
  }
  a.data.resize(got);
  FP8EMU_CHECK(got == total, path, ": truncated: expected ", total, " bytes of data, got ", got);
  std::uint8_t extra;
  FP8EMU_CHECK(read_bytes(f.get(), path, &extra, 1) == 0, path,
               ": corrupt: trailing bytes after the ", a.data.size(), " data bytes its header declares");
  return a;
}

ImageDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              int classes) {
  IdxArray im = read_idx(images_path, 3);
  IdxArray lb = read_idx(labels_path, 1);
  FP8EMU_CHECK(im.dims[0] <= 0x7FFFFFFFu && im.dims[1] <= 0x7FFFFFFFu && im.dims[2] <= 0x7FFFFFFFu &&
                   std::uint64_t(im.dims[1]) * im.dims[2] <= 0x7FFFFFFFu,
               images_path, ": implausible image count or size (", im.dims[0], " images of ", im.dims[1], "x",
               im.dims[2], ")");
  FP8EMU_CHECK(im.dims[0] == lb.dims[0], images_path, " holds ", im.dims[0], " images but ",
               labels_path, " holds ", lb.dims[0], " labels");
  for (std::size_t i = 0; i < lb.data.size(); ++i)
    FP8EMU_CHECK(lb.data[i] < classes, labels_path, ": corrupt: label ", int(lb.data[i]),
                 " at index ", i, " is not below ", classes);
  ImageDataset ds;
  ds.count = int(im.dims[0]);
  ds.rows = int(im.dims[1]);
  ds.cols = int(im.dims[2]);
  ds.images = std::move(im.data);
  ds.labels = std::move(lb.data);
  return ds;
}

}  // namespace fp8emu::io
