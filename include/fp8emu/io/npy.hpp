/// \file npy.hpp
/// \brief NumPy `.npy` files (format versions 1.0, 2.0 and 3.0; C order; little-endian or
/// byte-sized dtypes), read whole and written atomically.
///
/// Layout (numpy/lib/format.py, "NPY format"): magic "\x93NUMPY", version bytes, header length
/// (uint16 for 1.0, uint32 for 2.0/3.0), an ASCII Python dict literal with keys 'descr',
/// 'fortran_order' and 'shape', padded with spaces and a newline so that the data starts on a
/// 64-byte boundary, then the raw data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8emu::io {

/// A C-order array. dtype is NumPy's descr string: "<f4" (float32), "|u1" (uint8: FP8 codes),
/// "<f2" (float16), "<u2" (uint16, e.g. bfloat16 bits). read_npy also accepts the files ml_dtypes
/// writes for its types, whose descr is a void record: '<V2' (bfloat16) reads as "<u2" and '|V1'
/// (float8/float6/float4 codes) as "|u1".
struct NpyArray {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<std::uint8_t> data;  ///< product(shape) * itemsize bytes
  std::size_t count() const;
  std::size_t itemsize() const;
};

/// \throws fp8emu::Error naming the file: missing, not an .npy file (bad magic), unsupported version,
///         malformed header, Fortran order, unsupported dtype (big-endian or not in the list above),
///         truncated data.
NpyArray read_npy(const std::string& path);

/// Writes a version 1.0 file atomically. \throws fp8emu::Error when the shape does not match the data.
void write_npy(const std::string& path, const NpyArray& a);

}  // namespace fp8emu::io
