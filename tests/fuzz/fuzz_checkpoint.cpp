// libFuzzer target: the checkpoint readers of `fp8emu train --resume` and `fp8emu train-lm
// --resume` (experiments::inspect_checkpoint / inspect_lm_checkpoint). The first byte picks the
// reader (even: train, odd: train-lm); the rest is the checkpoint without its CRC-32, which the
// target appends so that inputs reach the structure behind the checksum.
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "char_lm/train_lm.hpp"
#include "fashion_mnist/train.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static fuzz::InputFile in("checkpoint");
  std::vector<std::uint8_t> b(data + 1, data + size);
  const std::uint32_t crc = std::uint32_t(crc32(0L, b.data(), uInt(b.size())));
  for (int i = 0; i < 4; ++i) b.push_back(std::uint8_t(crc >> (8 * i)));  // little-endian, as written
  in.set(b.data(), b.size());
  try {
    if (data[0] & 1) experiments::inspect_lm_checkpoint(in.path());
    else experiments::inspect_checkpoint(in.path());
  } catch (const Error& e) {
    fuzz::require_one_line(e.what());
  }
  return 0;
}
