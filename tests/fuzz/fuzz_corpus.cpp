// libFuzzer target: the text-corpus loader of `fp8emu train-lm` (experiments::inspect_lm_corpus).
// Byte 0 gives --seq-len (2..65), byte 1 --val-fraction ((b + 1) / 258); the rest is the text.
// An accepted corpus has both splits at least seq_len + 1 bytes long and at most 256 symbols.
#include <cstdint>

#include "char_lm/train_lm.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static fuzz::InputFile in("corpus");
  const int seq_len = 2 + data[0] % 64;
  const double val_fraction = (double(data[1]) + 1.0) / 258.0;
  in.set(data + 2, size - 2);
  try {
    const experiments::LmCorpusInfo c = experiments::inspect_lm_corpus(in.path(), seq_len, val_fraction);
    fuzz::require(c.train_bytes + c.val_bytes == size - 2, "bytes lost");
    fuzz::require(c.train_bytes > std::size_t(seq_len) && c.val_bytes > std::size_t(seq_len), "split too short");
    fuzz::require(c.vocab >= 1 && c.vocab <= 256, "vocabulary");
  } catch (const Error& e) {
    fuzz::require_one_line(e.what());
  }
  return 0;
}
