/// \file eigen.hpp
/// \brief Eigen integration of the value types (types.hpp): Eigen::NumTraits, zero-copy maps of
/// FP8 code buffers, and dequantization to float matrices.
///
/// Guard: an FP8 scalar never accumulates. The value types delete +, -, *, / (and the compound
/// forms), so any Eigen expression that would add or multiply FP8 scalars (a matrix product,
/// `.sum()`, `a + b`) fails to compile (tests/core/eigen_guard/ checks this). Dequantize first
/// (`dequantize(...)` or `.cast<float>()`), then compute in float, then quantize the result
/// explicitly.
///
/// Layout: maps are row-major [rows x cols] over a contiguous byte buffer of codes (one code per
/// byte, the layout of fp8emu's kernels and of TE's row-wise data), no copy.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "fp8emu/types.hpp"

namespace Eigen {

/// NumTraits from std::numeric_limits (types.hpp). Costs are those of a byte load and a decode.
template <const fp8emu::FormatSpec& F>
struct NumTraits<fp8emu::SmallFloat<F>> : GenericNumTraits<fp8emu::SmallFloat<F>> {
  using Real = fp8emu::SmallFloat<F>;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 0, ReadCost = 1, AddCost = 1, MulCost = 1 };
  static Real dummy_precision() { return std::numeric_limits<Real>::epsilon(); }
};

template <>
struct NumTraits<fp8emu::float8_e8m0fnu> : GenericNumTraits<fp8emu::float8_e8m0fnu> {
  using Real = fp8emu::float8_e8m0fnu;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 0, RequireInitialization = 0, ReadCost = 1, AddCost = 1, MulCost = 1 };
  static Real dummy_precision() { return std::numeric_limits<Real>::epsilon(); }
};

}  // namespace Eigen

namespace fp8emu::eigen {

/// Row-major dynamic matrix of a value type.
template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Read-only map of a code buffer.
template <class T>
using ConstMap = Eigen::Map<const Matrix<T>>;

/// Maps `rows * cols` codes at `codes` (row-major, contiguous) as a matrix of T, without copying.
/// The buffer must outlive the map. T is one of the value types (one byte, standard layout).
template <class T>
ConstMap<T> map_codes(const std::uint8_t* codes, Eigen::Index rows, Eigen::Index cols) {
  static_assert(sizeof(T) == 1 && std::is_standard_layout<T>::value && std::is_trivially_copyable<T>::value,
                "map_codes: T must be a one-byte fp8emu value type");
  return ConstMap<T>(reinterpret_cast<const T*>(codes), rows, cols);
}

/// y(i, j) = RN(float(m(i, j)) * scale_inv): one fp32 multiply per element (TE's dequantize).
/// NaN codes give NaN. Shapes: [rows x cols] in, [rows x cols] out (column-major MatrixXf).
template <class Derived>
Eigen::MatrixXf dequantize(const Eigen::MatrixBase<Derived>& m, float scale_inv) {
  Eigen::MatrixXf y(m.rows(), m.cols());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) y(i, j) = static_cast<float>(m(i, j)) * scale_inv;
  return y;
}

}  // namespace fp8emu::eigen
