// fp8emu.nv's compiled entry: the one-element conversions of include/fp8emu/nv.hpp (the mirror of
// CUDA's cuda_fp8.h / cuda_fp6.h / cuda_fp4.h conversion API) over arrays. Private to the extension.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "arrays.hpp"
#include "fp8emu/nv.hpp"

namespace fp8emu::python {
namespace {

using namespace nb::literals;

template <class In, class Out, class F>
void nv_loop(const Array& x, OutArray& out, F f) {
  const std::size_t n = x.size();
  const In* p = static_cast<const In*>(x.data());
  Out* q = static_cast<Out*>(out.data());
  nb::gil_scoped_release release;
  for (std::size_t i = 0; i < n; ++i) q[i] = f(p[i]);
}

// out[i] = nv::cvt_<name>(x[i], a, b) for the one-element conversions of include/fp8emu/nv.hpp; a and b
// are the CUDA enum arguments in CUDA's order (saturation / interpretation / rounding mode), as ints.
void nv_convert(const std::string& name, const Array& x, int a, int b, OutArray out) {
  check_array(x, "x");
  check_array(out, "out");
  if (shape_of(out) != shape_of(x)) throw nb::value_error("out must have x's shape");
  namespace v = fp8emu::nv;
  const dl::dtype t = x.dtype();
  auto want = [&](dl::dtype_code code, int bits, const char* what) {
    if (!is(t, code, bits) && !(bits == 16 && t.bits == 16 && (t.code == std::uint8_t(dl::dtype_code::Float) ||
                                                              t.code == std::uint8_t(dl::dtype_code::Bfloat)) &&
                                code == dl::dtype_code::UInt) &&
        !(bits == 8 && code == dl::dtype_code::UInt && is_code_dtype(t)))
      throw nb::type_error(("x has dtype " + dtype_text(t) + "; " + name + " takes " + what).c_str());
  };
  auto want_out = [&](int bits) {
    if (out.dtype().bits != bits) throw nb::type_error("out has the wrong element size");
  };
  const auto sat = v::Saturation(a != 0);
  const auto r = v::RoundMode(b & 3);
  auto i8 = [](int i) { return v::Fp8Interpretation(i != 0); };
  auto i6 = [](int i) { return v::Fp6Interpretation(i != 0); };
  const v::Fp4Interpretation i4 = v::Fp4Interpretation::kE2M1;
  using u8 = std::uint8_t;
  using u16 = std::uint16_t;
  if (name == "float_to_fp8") { want(dl::dtype_code::Float, 32, "float32"); want_out(8);
    nv_loop<float, u8>(x, out, [&](float e) { return v::cvt_float_to_fp8(e, sat, i8(b)); }); }
  else if (name == "double_to_fp8") { want(dl::dtype_code::Float, 64, "float64"); want_out(8);
    nv_loop<double, u8>(x, out, [&](double e) { return v::cvt_double_to_fp8(e, sat, i8(b)); }); }
  else if (name == "halfraw_to_fp8") { want(dl::dtype_code::UInt, 16, "float16 or uint16 (__half_raw)"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_halfraw_to_fp8(e, sat, i8(b)); }); }
  else if (name == "bfloat16raw_to_fp8") { want(dl::dtype_code::UInt, 16, "bfloat16 or uint16 (__nv_bfloat16_raw)"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_bfloat16raw_to_fp8(e, sat, i8(b)); }); }
  else if (name == "fp8_to_halfraw") { want(dl::dtype_code::UInt, 8, "8-bit codes"); want_out(16);
    nv_loop<u8, u16>(x, out, [&](u8 e) { return v::cvt_fp8_to_halfraw(e, i8(a)); }); }
  else if (name == "float_to_fp6") { want(dl::dtype_code::Float, 32, "float32"); want_out(8);
    nv_loop<float, u8>(x, out, [&](float e) { return v::cvt_float_to_fp6(e, i6(a), r); }); }
  else if (name == "double_to_fp6") { want(dl::dtype_code::Float, 64, "float64"); want_out(8);
    nv_loop<double, u8>(x, out, [&](double e) { return v::cvt_double_to_fp6(e, i6(a), r); }); }
  else if (name == "halfraw_to_fp6") { want(dl::dtype_code::UInt, 16, "float16 or uint16"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_halfraw_to_fp6(e, i6(a), r); }); }
  else if (name == "bfloat16raw_to_fp6") { want(dl::dtype_code::UInt, 16, "bfloat16 or uint16"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_bfloat16raw_to_fp6(e, i6(a), r); }); }
  else if (name == "fp6_to_halfraw") { want(dl::dtype_code::UInt, 8, "8-bit codes"); want_out(16);
    nv_loop<u8, u16>(x, out, [&](u8 e) { return v::cvt_fp6_to_halfraw(e, i6(a)); }); }
  else if (name == "float_to_fp4") { want(dl::dtype_code::Float, 32, "float32"); want_out(8);
    nv_loop<float, u8>(x, out, [&](float e) { return v::cvt_float_to_fp4(e, i4, r); }); }
  else if (name == "double_to_fp4") { want(dl::dtype_code::Float, 64, "float64"); want_out(8);
    nv_loop<double, u8>(x, out, [&](double e) { return v::cvt_double_to_fp4(e, i4, r); }); }
  else if (name == "halfraw_to_fp4") { want(dl::dtype_code::UInt, 16, "float16 or uint16"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_halfraw_to_fp4(e, i4, r); }); }
  else if (name == "bfloat16raw_to_fp4") { want(dl::dtype_code::UInt, 16, "bfloat16 or uint16"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_bfloat16raw_to_fp4(e, i4, r); }); }
  else if (name == "fp4_to_halfraw") { want(dl::dtype_code::UInt, 8, "8-bit codes"); want_out(16);
    nv_loop<u8, u16>(x, out, [&](u8 e) { return v::cvt_fp4_to_halfraw(e, i4); }); }
  else if (name == "float_to_e8m0") { want(dl::dtype_code::Float, 32, "float32"); want_out(8);
    nv_loop<float, u8>(x, out, [&](float e) { return v::cvt_float_to_e8m0(e, sat, r); }); }
  else if (name == "double_to_e8m0") { want(dl::dtype_code::Float, 64, "float64"); want_out(8);
    nv_loop<double, u8>(x, out, [&](double e) { return v::cvt_double_to_e8m0(e, sat, r); }); }
  else if (name == "bfloat16raw_to_e8m0") { want(dl::dtype_code::UInt, 16, "bfloat16 or uint16"); want_out(8);
    nv_loop<u16, u8>(x, out, [&](u16 e) { return v::cvt_bfloat16raw_to_e8m0(e, sat, r); }); }
  else if (name == "e8m0_to_bf16raw") { want(dl::dtype_code::UInt, 8, "8-bit codes"); want_out(16);
    nv_loop<u8, u16>(x, out, [&](u8 e) { return v::cvt_e8m0_to_bf16raw(e); }); }
  else throw nb::value_error(("unknown nv conversion '" + name + "'").c_str());
}

}  // namespace

void bind_nv(nb::module_& m) {
  m.def("nv_convert", &nv_convert, "name"_a, "x"_a, "a"_a, "b"_a, "out"_a,
        "out[i] = fp8emu::nv::cvt_<name>(x[i], ...) elementwise; see fp8emu.nv.");
}

}  // namespace fp8emu::python
