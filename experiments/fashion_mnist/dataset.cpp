// Fashion-MNIST's IDX files (see dataset.hpp).
#include "fashion_mnist/dataset.hpp"

#include <algorithm>
#include <filesystem>

#include "fp8emu/io/idx.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::fmnist {

using nn::Matrix;

std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    const std::string p = dir + "/" + stem + ext;
    if (std::filesystem::exists(p)) return p;
  }
  FP8EMU_FAIL("Fashion-MNIST not found: ", dir, " has no ", stem, ".gz. Install the data with "
              "`apt-get install dataset-fashion-mnist` (as root, or run scripts/setup), or point "
              "--data-dir at a folder holding the four IDX files.");
}

Split load_split(const std::string& dir, const std::string& prefix, int limit) {
  const std::string images = find_idx(dir, prefix + "-images-idx3-ubyte");  // images first: named first
  const std::string labels = find_idx(dir, prefix + "-labels-idx1-ubyte");
  const io::ImageDataset ds = io::read_idx_dataset(images, labels, kClasses);
  FP8EMU_CHECK(ds.count >= 1, images, ": holds no images");
  FP8EMU_CHECK(ds.rows >= 1 && ds.cols >= 1, images, ": images of size ", ds.rows, "x", ds.cols);
  const int n = std::min(limit, ds.count);
  const int d = ds.rows * ds.cols;
  Split s;
  s.x = Matrix(n, d);
  for (std::size_t i = 0; i < s.x.size(); ++i) s.x.data[i] = float(ds.images[i]) / 255.0f;
  s.labels.assign(ds.labels.begin(), ds.labels.begin() + n);
  return s;
}

void gather(const Split& s, const std::vector<int>& idx, std::size_t begin, int count, Matrix& x,
            std::vector<std::uint8_t>& y) {
  x.resize(count, s.x.cols);
  y.resize(std::size_t(count));
  for (int i = 0; i < count; ++i) {
    const int src = idx[begin + std::size_t(i)];
    std::copy(s.x.row(src), s.x.row(src) + s.x.cols, x.row(i));
    y[std::size_t(i)] = s.labels[std::size_t(src)];
  }
}

}  // namespace fp8emu::experiments::fmnist
