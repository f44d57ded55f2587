// Fashion-MNIST as fp8emu's experiments read it: the IDX files of one split (images scaled to
// [0, 1], labels), from a folder holding them plain or gzipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8emu/nn/matrix.hpp"

namespace fp8emu::experiments::fmnist {

/// The ten classes of Fashion-MNIST.
constexpr int kClasses = 10;

struct Split {
  nn::Matrix x;                      // Shape [n, 784], pixel / 255
  std::vector<std::uint8_t> labels;  // Shape [n]
};

/// `dir/stem.gz`, else `dir/stem`. \throws fp8emu::Error saying how to install the data.
std::string find_idx(const std::string& dir, const std::string& stem);
/// The first `limit` images and labels of a split ("train" or "t10k"). \throws fp8emu::Error
/// naming the file on a bad or empty IDX file.
Split load_split(const std::string& dir, const std::string& prefix, int limit);
/// x [count, 784] and y [count] from the rows idx[begin .. begin + count) of s.
void gather(const Split& s, const std::vector<int>& idx, std::size_t begin, int count, nn::Matrix& x,
            std::vector<std::uint8_t>& y);

}  // namespace fp8emu::experiments::fmnist
