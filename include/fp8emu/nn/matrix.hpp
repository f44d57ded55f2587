/// \file matrix.hpp
/// \brief Row-major fp32 matrix and the deterministic random source used by the NN layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp8emu::nn {

/// Dense row-major fp32 matrix. Shape: [rows, cols]; element (i, j) at data[i * cols + j].
struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;

  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), data(std::size_t(r) * std::size_t(c), 0.0f) {}
  /// Reshape to [r, c]; contents unspecified afterwards (kept where the size allows).
  void resize(int r, int c) {
    rows = r;
    cols = c;
    data.resize(std::size_t(r) * std::size_t(c));
  }
  std::size_t size() const { return data.size(); }
  float* row(int i) { return data.data() + std::size_t(i) * std::size_t(cols); }
  const float* row(int i) const { return data.data() + std::size_t(i) * std::size_t(cols); }
  float& operator()(int i, int j) { return data[std::size_t(i) * std::size_t(cols) + std::size_t(j)]; }
  float operator()(int i, int j) const { return data[std::size_t(i) * std::size_t(cols) + std::size_t(j)]; }
};

/// Deterministic random source: std::mt19937_64 (its output sequence is fixed by the C++
/// standard), with uniform floats built from its bits so results do not depend on the standard
/// library's distribution implementations.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  /// Uniform in [0, 1) with 24 random bits.
  float uniform() { return float(gen_() >> 40) * 0x1p-24f; }
  /// Uniform in [-bound, bound).
  float uniform(float bound) { return (2.0f * uniform() - 1.0f) * bound; }
  /// The generator's next 64-bit output, without drawing it (the state is unchanged).
  std::uint64_t peek() const {
    std::mt19937_64 g = gen_;
    return g();
  }
  /// Uniform integer in [0, n), unbiased (rejection sampling).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
    std::uint64_t v;
    do v = gen_(); while (v >= limit);
    return v % n;
  }
  /// The generator's state as text (std::mt19937_64's standard stream format), for checkpoints.
  std::string state() const {
    std::ostringstream os;
    os << gen_;
    return os.str();
  }
  /// Restore a state from state(). \throws std::runtime_error when the text is not a state.
  void set_state(const std::string& s) {
    std::istringstream is(s);
    is >> gen_;
    if (!is) throw std::runtime_error("corrupt random-generator state");
  }
  /// Fisher-Yates shuffle.
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace fp8emu::nn
