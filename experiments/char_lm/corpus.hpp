// train-lm's text: the corpus (bytes as tokens, a training and a validation split) and the
// windows a batch is made of.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8emu::experiments::lm {

/// The largest --seq-len (and model dimension) train-lm takes.
constexpr int kMaxDim = 4096;

struct Corpus {
  std::vector<std::uint8_t> vocab;  // byte value of each token id
  std::vector<std::uint8_t> train, val;
  std::size_t files = 0;
};

/// \throws fp8emu::Error unless 2 <= seq_len <= kMaxDim.
void check_seq_len(int seq_len);
/// \throws fp8emu::Error unless 0 < f < 1.
void check_val_fraction(double f);
/// A text file, or the regular files of a folder (sorted by name, `.dat` and symbolic links
/// skipped) concatenated; its bytes become token ids in byte order, the last `val_fraction` (at
/// least seq_len + 1 bytes) the validation split. \throws fp8emu::Error naming the path.
Corpus load_corpus(const std::string& path, int seq_len, double val_fraction);

struct Batch {
  std::vector<std::uint8_t> input, target;  // [B*T]
};
/// The windows of length T at `starts` (inputs) and the same shifted by one (targets).
Batch window_batch(const std::vector<std::uint8_t>& data, const std::vector<std::size_t>& starts, int T);

}  // namespace fp8emu::experiments::lm
