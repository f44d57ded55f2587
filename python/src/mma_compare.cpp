// The Python module's tensor-core MMA (fp8emu.mma) and bitwise comparison (fp8emu.compare).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/mma.hpp"

namespace fp8emu::python {
namespace {

// D = A B^T + C through chained tensor-core MMA instructions (emu::mma_tn on FP8 codes,
// emu::mma_tn_values on float32 arrays of fp16, bf16 or tf32 values); see fp8emu.mma.
void mma(const Array& a, const Array& b, const std::string& format_a, const std::string& format_b,
         const std::string& accumulation, std::optional<Array> c, OutArray out) {
  const bool values = is(a.dtype(), dl::dtype_code::Float, 32) && is(b.dtype(), dl::dtype_code::Float, 32);
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&a, "a"}, {&b, "b"}}) {
    check_array(*arr, name);
    if (!values && !is_code_dtype(arr->dtype()))
      throw nb::type_error((std::string(name) + " has dtype " + dtype_text(arr->dtype()) +
                            "; mma takes FP8 codes (uint8 with format_" + name +
                            ", or an ml_dtypes float8_e4m3fn / float8_e5m2 array), or both operands as float32 "
                            "values of an fp16, bf16 or tf32 model's format")
                               .c_str());
    if (arr->ndim() != 2)
      throw nb::value_error((std::string(name) + " has " + std::to_string(arr->ndim()) + " dimensions; mma takes 2-D operands")
                                .c_str());
  }
  const std::int64_t M = std::int64_t(a.shape(0)), K = std::int64_t(a.shape(1)), N = std::int64_t(b.shape(0));
  if (std::int64_t(b.shape(1)) != K)
    throw nb::value_error(("shape mismatch: a is " + shape_text(shape_of(a)) + ", b is " + shape_text(shape_of(b)) +
                           "; mma needs b as (N, " + std::to_string(K) + ") (D = A B^T + C)")
                              .c_str());
  const std::int64_t kMax = 0x7FFFFFFF;
  if (M > kMax || N > kMax || K > kMax) throw nb::value_error("mma: a dimension exceeds 2^31 - 1");
  const float* pc = nullptr;
  if (c) {
    check_array(*c, "c");
    if (!is(c->dtype(), dl::dtype_code::Float, 32))
      throw nb::type_error(("c has dtype " + dtype_text(c->dtype()) + "; it must be float32").c_str());
    if (shape_of(*c) != std::vector<std::int64_t>{M, N})
      throw nb::value_error(("c has shape " + shape_text(shape_of(*c)) + "; expected " + shape_text({M, N})).c_str());
    pc = static_cast<const float*>(c->data());
  }
  check_array(out, "out");
  if (!is(out.dtype(), dl::dtype_code::Float, 32) || shape_of(out) != std::vector<std::int64_t>{M, N})
    throw nb::value_error(("out must be float32 of shape " + shape_text({M, N})).c_str());
  const emu::Accumulation model = emu::parse_accumulation(accumulation);
  float* d = static_cast<float*>(out.data());
  if (values) {
    const float* pa = static_cast<const float*>(a.data());
    const float* pb = static_cast<const float*>(b.data());
    nb::gil_scoped_release release;
    emu::mma_tn_values(int(M), int(N), int(K), pa, pb, model, pc, d);
    return;
  }
  const Format fa = format_of(format_a, "format_a"), fb = format_of(format_b, "format_b");
  const std::uint8_t* pa = static_cast<const std::uint8_t*>(a.data());
  const std::uint8_t* pb = static_cast<const std::uint8_t*>(b.data());
  nb::gil_scoped_release release;
  emu::mma_tn(int(M), int(N), int(K), pa, fa, pb, fb, model, pc, d);
}

// emu::compare_f32 of two float32 arrays of one shape; see fp8emu.compare.
nb::dict compare(const Array& x, const Array& y) {
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&x, "x"}, {&y, "y"}}) {
    check_array(*arr, name);
    if (!is(arr->dtype(), dl::dtype_code::Float, 32))
      throw nb::type_error((std::string(name) + " has dtype " + dtype_text(arr->dtype()) +
                            "; compare takes float32 arrays").c_str());
  }
  if (shape_of(x) != shape_of(y))
    throw nb::value_error(("shapes differ: " + shape_text(shape_of(x)) + " vs " + shape_text(shape_of(y))).c_str());
  emu::CompareStats st;
  {
    nb::gil_scoped_release release;
    st = emu::compare_f32(static_cast<const float*>(x.data()), static_cast<const float*>(y.data()), x.size());
  }
  nb::dict r;
  r["elements"] = st.elements;
  r["mismatches"] = st.mismatches;
  r["nan_in_one"] = st.nan_in_one;
  r["nan_payload"] = st.nan_payload;
  r["max_ulp"] = st.max_ulp;
  r["max_abs_error"] = st.max_abs_error;
  r["max_rel_error"] = st.max_rel_error;
  return r;
}

}  // namespace

void bind_mma_compare(nb::module_& m) {
  using namespace nb::literals;
  m.def("mma", &mma, "a"_a, "b"_a, "format_a"_a, "format_b"_a, "accumulation"_a, "c"_a.none(), "out"_a,
        "D = A B^T + C as chained tensor-core MMA instructions into out; see fp8emu.mma.");
  m.def("compare", &compare, "x"_a, "y"_a, "Bitwise comparison of two float32 arrays; see fp8emu.compare.");
}

}  // namespace fp8emu::python
