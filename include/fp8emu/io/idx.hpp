/// \file idx.hpp
/// \brief Reader of IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain.
///
/// IDX layout (Y. LeCun, "THE MNIST DATABASE", file formats section): a 4-byte big-endian magic
/// 0x00 0x00 <type> <ndim>, then ndim big-endian uint32 dimensions, then the data. Only type 0x08
/// (unsigned byte) is read. gzip is detected and inflated transparently (zlib).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8emu::io {

/// An unsigned-byte IDX array. Shape: dims; data row-major.
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

/// Read an IDX file. \param expected_ndim  Required number of dimensions (1 labels, 3 images).
/// \throws fp8emu::Error naming the file and the problem: missing, not gzip/IDX (bad magic),
///         unsupported element type, wrong rank, truncated data, trailing bytes, corrupt gzip stream.
IdxArray read_idx(const std::string& path, int expected_ndim);

/// A labelled image set: images Shape [count, rows * cols] uint8, labels Shape [count].
struct ImageDataset {
  int count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;
};

/// Read an images file and its labels file; checks that the counts agree and labels are < classes.
/// \throws fp8emu::Error as read_idx, plus count mismatch and label out of range.
ImageDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              int classes);

}  // namespace fp8emu::io
