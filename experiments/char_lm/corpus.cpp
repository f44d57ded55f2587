// train-lm's corpus and batches (see corpus.hpp).
#include "char_lm/corpus.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::lm {

void check_seq_len(int seq_len) {
  FP8EMU_CHECK(seq_len >= 2 && seq_len <= kMaxDim, "--seq-len must be in [2, ", kMaxDim, "], got ", seq_len);
}
void check_val_fraction(double f) { FP8EMU_CHECK(f > 0.0 && f < 1.0, "--val-fraction must be in (0, 1)"); }

Corpus load_corpus(const std::string& path, int seq_len, double val_fraction) {
  namespace fs = std::filesystem;
  std::error_code ec;
  FP8EMU_CHECK(fs::exists(path, ec), path,
               ": no such text file or folder (the default corpus comes from Debian's fortunes package: "
               "apt-get install fortunes, or give a text file with --text)");
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    FP8EMU_CHECK(in.good(), f.string(), ": cannot be read");
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  FP8EMU_CHECK(!text.empty(), path, ": the corpus is empty");
  Corpus c;
  c.files = files.size();
  bool seen[256] = {};
  for (unsigned char ch : text) seen[ch] = true;
  std::uint8_t id_of[256] = {};
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    id_of[b] = std::uint8_t(c.vocab.size());
    c.vocab.push_back(std::uint8_t(b));
  }
  const std::size_t n = text.size();
  const std::size_t need = std::size_t(seq_len) + 1;
  std::size_t n_val = std::size_t(double(n) * val_fraction);
  n_val = std::max(n_val, need);
  FP8EMU_CHECK(n >= n_val + need, path, ": the corpus is too short (", n, " bytes; --seq-len ", seq_len,
               " needs at least ", n_val + need, " for a training and a validation split)");
  c.train.reserve(n - n_val);
  for (std::size_t i = 0; i < n; ++i) (i < n - n_val ? c.train : c.val).push_back(id_of[(unsigned char)text[i]]);
  return c;
}

Batch window_batch(const std::vector<std::uint8_t>& data, const std::vector<std::size_t>& starts, int T) {
  Batch b;
  for (std::size_t s : starts) {
    for (int t = 0; t < T; ++t) {
      b.input.push_back(data[s + std::size_t(t)]);
      b.target.push_back(data[s + std::size_t(t) + 1]);
    }
  }
  return b;
}

}  // namespace fp8emu::experiments::lm
