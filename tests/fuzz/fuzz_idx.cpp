// libFuzzer target: the IDX reader (io::read_idx), plain or gzip-compressed, on arbitrary bytes.
// The first byte picks the expected rank (even: 1, labels; odd: 3, images); the rest is the file.
// An accepted file holds exactly product(dims) bytes.
#include <cstdint>

#include "fp8emu/io/idx.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static fuzz::InputFile in("idx");
  const int ndim = (data[0] & 1) ? 3 : 1;
  in.set(data + 1, size - 1);
  try {
    const io::IdxArray a = io::read_idx(in.path(), ndim);
    std::uint64_t n = 1;
    for (std::uint32_t d : a.dims) n *= d;
    fuzz::require(a.dims.size() == std::size_t(ndim), "wrong rank accepted");
    fuzz::require(a.data.size() == n, "data size does not match the dimensions");
  } catch (const Error& e) {
    fuzz::require_one_line(e.what());
  }
  return 0;
}
