// LayerNorm / RMSNorm forward against a double-precision evaluation of the formula, and backward
// (dx, dgamma, dbeta) against central finite differences of a random linear functional of y.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "fp8emu/nn/norm.hpp"
#include "support/nn_helpers.hpp"

using namespace fp8emu;
using nn::Matrix;

namespace {

// L = sum(y * w), evaluated in double from a float forward.
double functional(nn::Norm& norm, const Matrix& x, const Matrix& w) {
  Matrix y;
  norm.forward(x, y, false);
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += double(y.data[i]) * double(w.data[i]);
  return s;
}

void check_gradients(nn::NormKind kind, bool zero_centered) {
  nn::Rng rng(7);
  const int rows = 5, n = 24;
  nn::Norm norm(kind, n, 1e-5f, zero_centered);
  for (float& g : norm.gamma.data) g = (zero_centered ? 0.0f : 1.0f) + rng.uniform(0.5f);
  for (float& b : norm.beta.data) b = rng.uniform(0.5f);
  Matrix x = testing::random_matrix(rows, n, rng, 2.0f);
  for (int j = 0; j < n; ++j) x(1, j) += 3.0f;  // a row with a large mean
  const Matrix w = testing::random_matrix(rows, n, rng, 1.0f);
  Matrix y, dx;
  norm.forward(x, y, true);
  norm.backward(w, dx);  // dL/dy = w
  const float h = 1e-2f;
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(1e-2, std::abs(b)); };
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < n; ++j) {
      Matrix xp = x, xm = x;
      xp(i, j) += h;
      xm(i, j) -= h;
      const double fd = (functional(norm, xp, w) - functional(norm, xm, w)) / (double(xp(i, j)) - double(xm(i, j)));
      INFO("dx(" << i << ", " << j << ")");
      CHECK(rel(dx(i, j), fd) < 2e-2);
    }
  }
  for (int j = 0; j < n; ++j) {
    nn::Norm p = norm, m = norm;
    p.gamma.data[std::size_t(j)] += h;
    m.gamma.data[std::size_t(j)] -= h;
    const double fd = (functional(p, x, w) - functional(m, x, w)) / (2.0 * h);
    INFO("dgamma(" << j << ")");
    CHECK(rel(norm.grad_gamma.data[std::size_t(j)], fd) < 2e-2);
    if (kind == nn::NormKind::kLayerNorm) {
      nn::Norm pb = norm, mb = norm;
      pb.beta.data[std::size_t(j)] += h;
      mb.beta.data[std::size_t(j)] -= h;
      const double fdb = (functional(pb, x, w) - functional(mb, x, w)) / (2.0 * h);
      CHECK(rel(norm.grad_beta.data[std::size_t(j)], fdb) < 2e-2);
    }
  }
}

}  // namespace

TEST_CASE("LayerNorm and RMSNorm forward equal the formula evaluated in double", "[nn][norm]") {
  nn::Rng rng(3);
  const Matrix x = testing::random_matrix(4, 33, rng, 5.0f);
  for (nn::NormKind kind : {nn::NormKind::kLayerNorm, nn::NormKind::kRMSNorm}) {
    nn::Norm norm(kind, 33);
    for (float& g : norm.gamma.data) g = 1.0f + rng.uniform(0.5f);
    for (float& b : norm.beta.data) b = rng.uniform(0.5f);
    Matrix y;
    norm.forward(x, y, false);
    for (int i = 0; i < 4; ++i) {
      double mu = 0, var = 0;
      for (int j = 0; j < 33; ++j) mu += x(i, j);
      mu = kind == nn::NormKind::kLayerNorm ? mu / 33 : 0.0;
      for (int j = 0; j < 33; ++j) var += (x(i, j) - mu) * (x(i, j) - mu);
      const double rs = 1.0 / std::sqrt(var / 33 + 1e-5);
      for (int j = 0; j < 33; ++j) {
        const double want = (x(i, j) - mu) * rs * norm.gamma(0, j) + (kind == nn::NormKind::kLayerNorm ? norm.beta(0, j) : 0.0);
        CHECK(std::abs(y(i, j) - want) <= 1e-5 * (1 + std::abs(want)));
      }
    }
  }
}

TEST_CASE("LayerNorm backward matches finite differences", "[nn][norm]") { check_gradients(nn::NormKind::kLayerNorm, false); }
TEST_CASE("RMSNorm backward matches finite differences", "[nn][norm]") { check_gradients(nn::NormKind::kRMSNorm, false); }
TEST_CASE("zero-centred gamma: starts at 0, scales by 1 + gamma, gradients match", "[nn][norm]") {
  nn::Norm n0(nn::NormKind::kLayerNorm, 8, 1e-5f, true), n1(nn::NormKind::kLayerNorm, 8, 1e-5f, false);
  CHECK(n0.gamma(0, 3) == 0.0f);
  nn::Rng rng(1);
  const Matrix x = testing::random_matrix(2, 8, rng, 1.0f);
  Matrix y0, y1;
  n0.forward(x, y0, false);
  n1.forward(x, y1, false);
  CHECK(y0.data == y1.data);  // 1 + 0 == 1: the same function at initialisation
  check_gradients(nn::NormKind::kLayerNorm, true);
  check_gradients(nn::NormKind::kRMSNorm, true);
}

TEST_CASE("Norm rejects bad shapes and parameters", "[nn][norm]") {
  CHECK_THROWS_WITH(nn::Norm(nn::NormKind::kLayerNorm, 0), Catch::Contains("features must be positive"));
  CHECK_THROWS_WITH(nn::Norm(nn::NormKind::kLayerNorm, 4, -1.0f), Catch::Contains("eps"));
  nn::Norm n(nn::NormKind::kRMSNorm, 4);
  Matrix x(2, 5), y, dx;
  CHECK_THROWS_WITH(n.forward(x, y, true), Catch::Contains("input has 5 features, layer expects 4"));
  CHECK_THROWS_WITH(n.backward(Matrix(2, 4), dx), Catch::Contains("without a preceding training forward"));
}
