// The Python extension `fp8emu._fp8emu` (nanobind): the array entry points of the Python module
// fp8emu (python/fp8emu/__init__.py wraps them with ml_dtypes dtypes and docstrings).
//
// Arrays arrive as nanobind ndarrays (DLPack or the buffer protocol): NumPy, JAX, PyTorch and
// CuPy arrays are accepted without copies. Every entry point checks, in this order, and raises:
//   TypeError   an array that is not on the CPU (this build has no GPU path), or of a dtype the
//               argument does not take;
//   ValueError  a non-C-contiguous array, a wrong number of dimensions or a shape mismatch, and any
//               fp8emu::Error of the library (unknown names, unsupported combinations).
// The GIL is released while the library's kernels run.
#include <cstdlib>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "fp8emu/core/accumulation.hpp"
#include "fp8emu/emulation/cast_policy.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/mma.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/nn/linear.hpp"
#include "fp8emu/nn/norm.hpp"
#include "fp8emu/nn/transformer.hpp"
#include "fp8emu/nv.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"
#include "fp8emu/util/error.hpp"

#include "arrays.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8emu::python {
namespace {

// The record of one format, as a dict for fp8emu.FormatInfo.
nb::dict format_dict(const FormatRecord& r) {
  const FormatSpec& s = *r.spec;
  nb::dict d;
  d["name"] = s.name;
  nb::list aliases;
  for (const char* a : r.aliases)
    if (a) aliases.append(a);
  d["aliases"] = nb::tuple(aliases);
  d["title"] = r.title;
  const char* family = "fp8";
  switch (r.family) {
    case FormatFamily::kFp8: family = "fp8"; break;
    case FormatFamily::kFp8Fnuz: family = "fp8_fnuz"; break;
    case FormatFamily::kFp6: family = "fp6"; break;
    case FormatFamily::kFp4: family = "fp4"; break;
    case FormatFamily::kScale: family = "scale"; break;
    case FormatFamily::kWide: family = "wide"; break;
  }
  d["family"] = family;
  d["bits"] = s.bits();
  d["exponent_bits"] = s.exponent_bits;
  d["mantissa_bits"] = s.mantissa_bits;
  d["bias"] = s.bias;
  d["signed"] = s.has_sign;
  d["has_inf"] = s.has_inf;
  d["has_nan"] = s.has_nan();
  d["fnuz"] = s.fnuz;
  d["subnormals"] = s.subnormals;
  d["emin"] = s.emin();
  d["emax"] = s.emax();
  d["max"] = s.max_finite();
  d["min_normal"] = s.min_normal();
  d["min_subnormal"] = s.min_subnormal();
  d["max_code"] = s.max_finite_code();
  d["nan_code"] = s.has_nan() ? nb::object(nb::int_(s.nan_code())) : nb::none();
  d["inf_code"] = s.has_inf ? nb::object(nb::int_(s.inf_code())) : nb::none();
  return d;
}

void host_cast(const Array& x, const std::string& format, float scale, const std::string& policy,
          const std::string& rounding, std::uint32_t seed, bool bf16_bits, OutArray out) {
  const std::size_t n = check_array(x, "x");
  emu::CastSource src = emu::CastSource::kF32;
  const dl::dtype t = x.dtype();
  if (is(t, dl::dtype_code::Float, 32)) src = emu::CastSource::kF32;
  else if (is(t, dl::dtype_code::Float, 64)) src = emu::CastSource::kF64;
  else if (is(t, dl::dtype_code::Float, 16)) src = emu::CastSource::kF16;
  else if (is(t, dl::dtype_code::Bfloat, 16) || (bf16_bits && is(t, dl::dtype_code::UInt, 16))) src = emu::CastSource::kBF16;
  else
    throw nb::type_error(("x has dtype " + dtype_text(t) +
                          "; cast takes float32, float64, float16 or bfloat16 arrays")
                             .c_str());
  const Format f = format_of(format, "format");
  const emu::CastPolicy p = emu::resolve_cast_policy(f, policy, rounding, "policy", "rounding");
  check_array(out, "out");
  if (!is_code_dtype(out.dtype()))
    throw nb::type_error(("out has dtype " + dtype_text(out.dtype()) + "; it must hold 8-bit codes (uint8 or the "
                          "format's ml_dtypes dtype)")
                             .c_str());
  if (shape_of(out) != shape_of(x))
    throw nb::value_error(("out has shape " + shape_text(shape_of(out)) + ", x has shape " +
                           shape_text(shape_of(x)) + "; they must be equal")
                              .c_str());
  const void* xp = x.data();
  std::uint8_t* q = static_cast<std::uint8_t*>(out.data());
  nb::gil_scoped_release release;
  emu::cast_array(xp, src, n, scale, p, seed, q);
}

void host_decode(const Array& codes, const std::string& format, float scale_inv, OutArray out) {
  const std::size_t n = check_array(codes, "codes");
  if (!is_code_dtype(codes.dtype()))
    throw nb::type_error(("codes has dtype " + dtype_text(codes.dtype()) +
                          "; decode takes 8-bit codes (uint8 or an ml_dtypes float8/6/4 dtype)")
                             .c_str());
  const Format f = format_of(format, "format");
  check_array(out, "out");
  if (!is(out.dtype(), dl::dtype_code::Float, 32))
    throw nb::type_error(("out has dtype " + dtype_text(out.dtype()) + "; decode writes float32").c_str());
  if (shape_of(out) != shape_of(codes))
    throw nb::value_error(("out has shape " + shape_text(shape_of(out)) + ", codes has shape " +
                           shape_text(shape_of(codes)) + "; they must be equal")
                              .c_str());
  const std::uint8_t* q = static_cast<const std::uint8_t*>(codes.data());
  float* y = static_cast<float*>(out.data());
  nb::gil_scoped_release release;
  emu::decode_array(q, n, f, scale_inv, y);
}

// D = A B^T (tn) or A B (nn) on the GEMM models; see fp8emu.gemm. Returns the amax of D (before d_scale).
float host_gemm(const Array& a, const Array& b, const std::string& format_a, const std::string& format_b,
           float scale_inv_a, float scale_inv_b, const std::string& accumulation, int promotion, int split_k,
           const std::string& layout, const std::string& out_kind, float d_scale, float alpha, float beta,
           std::optional<Array> c, std::optional<Array> bias, OutArray out) {
  check_array(a, "a");
  check_array(b, "b");
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&a, "a"}, {&b, "b"}}) {
    if (!is_code_dtype(arr->dtype()))
      throw nb::type_error((std::string(name) + " has dtype " + dtype_text(arr->dtype()) +
                            "; gemm takes FP8 codes (uint8 with format_" + name +
                            ", or an ml_dtypes float8_e4m3fn / float8_e5m2 array): quantize it first, e.g. "
                            "fp8emu.cast(x, 'e4m3fn', scale=...)")
                               .c_str());
    if (arr->ndim() != 2)
      throw nb::value_error((std::string(name) + " has " + std::to_string(arr->ndim()) +
                             " dimensions; gemm takes 2-D operands")
                                .c_str());
  }
  const Format fa = format_of(format_a, "format_a"), fb = format_of(format_b, "format_b");
  if (!is_fp8(fa) || !is_fp8(fb))
    throw nb::value_error(("gemm takes OCP FP8 operands (e4m3fn, e5m2); got format_a " + std::string(format_name(fa)) +
                           ", format_b " + format_name(fb))
                              .c_str());
  const bool tn = emu::parse_gemm_layout(layout, "layout") == emu::GemmLayout::kTn;
  const std::int64_t M = std::int64_t(a.shape(0)), K = std::int64_t(a.shape(1));
  const std::int64_t b0 = std::int64_t(b.shape(0)), b1 = std::int64_t(b.shape(1));
  std::int64_t N = 0;
  if (tn) {
    if (b1 != K)
      throw nb::value_error(("shape mismatch: a is (" + std::to_string(M) + ", " + std::to_string(K) + "), b is (" +
                             std::to_string(b0) + ", " + std::to_string(b1) +
                             "); layout 'tn' needs b as (N, " + std::to_string(K) + ")")
                                .c_str());
    N = b0;
  } else {
    if (b0 != K)
      throw nb::value_error(("shape mismatch: a is (" + std::to_string(M) + ", " + std::to_string(K) + "), b is (" +
                             std::to_string(b0) + ", " + std::to_string(b1) +
                             "); layout 'nn' needs b as (" + std::to_string(K) + ", N)")
                                .c_str());
    N = b1;
  }
  const std::int64_t kMax = 0x7FFFFFFF;
  if (M > kMax || N > kMax || K > kMax) throw nb::value_error("gemm: a dimension exceeds 2^31 - 1");
  emu::GemmAccumulation acc{emu::parse_accumulation(accumulation), promotion, split_k};
  emu::check_gemm_tn(int(M), int(N), int(K), fa, fb, acc);

  emu::GemmEpilogue ep;
  ep.alpha = alpha;
  ep.beta = beta;
  ep.d_scale = d_scale;
  float amax_d = 0.0f;
  ep.amax_d = &amax_d;
  dl::dtype want{};
  if (out_kind == "float32") ep.output = emu::GemmOutput::kFp32, want = nb::dtype<float>();
  else if (out_kind == "bfloat16") ep.output = emu::GemmOutput::kBf16, want = nb::dtype<std::uint16_t>();
  else if (out_kind == "float16") ep.output = emu::GemmOutput::kFp16, want = nb::dtype<std::uint16_t>();
  else if (find_format(out_kind.data(), out_kind.size(), &ep.output_format) && is_fp8(ep.output_format))
    ep.output = emu::GemmOutput::kFp8, want = nb::dtype<std::uint8_t>();
  else
    throw nb::value_error(("unknown out_dtype '" + out_kind + "' (accepted: float32, bfloat16, float16, e4m3fn, e5m2)")
                              .c_str());
  auto check_f32 = [](const Array& x, const char* name, const std::vector<std::int64_t>& shape) {
    check_array(x, name);
    if (!is(x.dtype(), dl::dtype_code::Float, 32))
      throw nb::type_error((std::string(name) + " has dtype " + dtype_text(x.dtype()) + "; it must be float32").c_str());
    if (shape_of(x) != shape)
      throw nb::value_error((std::string(name) + " has shape " + shape_text(shape_of(x)) + "; expected " +
                             shape_text(shape))
                                .c_str());
    return static_cast<const float*>(x.data());
  };
  if (c) ep.C = check_f32(*c, "c", {M, N});
  if (beta != 0.0f && !c) throw nb::value_error("beta != 0 needs c (an (M, N) float32 array)");
  if (bias) ep.bias = check_f32(*bias, "bias", {N});
  check_array(out, "out");
  if (out.dtype().bits != want.bits || (out.dtype().code != want.code && !is_code_dtype(out.dtype())))
    throw nb::type_error(("out has dtype " + dtype_text(out.dtype()) + ", which does not hold out_dtype " + out_kind)
                             .c_str());
  if (shape_of(out) != std::vector<std::int64_t>{M, N})
    throw nb::value_error(("out has shape " + shape_text(shape_of(out)) + "; expected " + shape_text({M, N}))
                              .c_str());
  const std::uint8_t* pa = static_cast<const std::uint8_t*>(a.data());
  const std::uint8_t* pb = static_cast<const std::uint8_t*>(b.data());
  void* d = out.data();
  nb::gil_scoped_release release;
  std::vector<std::uint8_t> bt;
  if (!tn) {
    bt.resize(std::size_t(K) * std::size_t(N));
    emu::transpose(int(K), int(N), pb, bt.data());
    pb = bt.data();
  }
  emu::gemm_fp8_tn(int(M), int(N), int(K), pa, fa, scale_inv_a, pb, fb, scale_inv_b, acc, ep, d);
  return amax_d;
}


// ----------------------------------------------------------------------------- recipes

using scaling::Direction;
using scaling::QuantizedTensor;
using scaling::TensorRole;
using scaling::Usage;

TensorRole parse_role(const std::string& s) {
  if (s == "input") return TensorRole::kInput;
  if (s == "weight") return TensorRole::kWeight;
  if (s == "output") return TensorRole::kOutput;
  if (s == "grad_output") return TensorRole::kGradOutput;
  if (s == "grad_input") return TensorRole::kGradInput;
  throw nb::value_error(("unknown role '" + s + "' (accepted: input, weight, output, grad_output, grad_input)").c_str());
}

Usage parse_usage(const std::string& s) {
  if (s == "rowwise") return Usage::kRowwise;
  if (s == "columnwise") return Usage::kColumnwise;
  if (s == "both") return Usage::kBoth;
  throw nb::value_error(("unknown usage '" + s + "' (accepted: rowwise, columnwise, both)").c_str());
}

const char* usage_name(Usage u) {
  return u == Usage::kRowwise ? "rowwise" : u == Usage::kColumnwise ? "columnwise" : "both";
}

// A read-only NumPy view of a vector owned by the Python object `owner` (a QuantizedTensor).
template <class T>
nb::object view_of(const std::vector<T>& v, std::initializer_list<std::size_t> shape, nb::handle owner) {
  if (v.empty()) return nb::none();
  return nb::cast(nb::ndarray<nb::numpy, const T>(v.data(), shape.size(), shape.begin(), owner),
                  nb::rv_policy::reference);
}

// A block operand's scale_inv (or E8M0 codes) of one copy as a view (n, ceil(k / block)); None for
// a copy that was not made and for per-tensor operands (no blocks).
nb::object block_scales(nb::handle h, bool rowwise, bool e8m0) {
  const QuantizedTensor& t = nb::cast<const QuantizedTensor&>(h);
  const auto* s = std::get_if<scaling::BlockStorage>(&t.storage);
  if (!s) return nb::none();
  const emu::BlockQuantized& b = rowwise ? s->rowwise : s->columnwise;
  if (b.block < 1) return nb::none();
  return e8m0 ? view_of(b.e8m0, {std::size_t(b.n), std::size_t(b.blocks())}, h)
              : view_of(b.scale_inv, {std::size_t(b.n), std::size_t(b.blocks())}, h);
}

// The tensor amax a copy's NVFP4 block scales sit under (TE's amax_rowwise / amax_columnwise); None
// for one-level scales and copies not made.
nb::object tensor_amax(const QuantizedTensor& t, bool rowwise) {
  const auto* s = std::get_if<scaling::BlockStorage>(&t.storage);
  if (!s) return nb::none();
  const emu::BlockQuantized& b = rowwise ? s->rowwise : s->columnwise;
  return b.amax ? nb::object(nb::float_(*b.amax)) : nb::none();
}

QuantizedTensor quantize_with(PyQuantizer& self, const Array& x, const std::string& role, const std::string& usage,
                              emu::QuantizeStats& stats) {
  check_array(x, "x");
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    throw nb::type_error(("x has dtype " + dtype_text(x.dtype()) + "; quantizers take float32 (TE casts fp32 "
                          "master values)")
                             .c_str());
  if (x.ndim() != 2)
    throw nb::value_error(("x has " + std::to_string(x.ndim()) + " dimensions; quantizers take 2-D (rows, cols) "
                           "tensors")
                              .c_str());
  if (x.shape(0) > 0x7FFFFFFF || x.shape(1) > 0x7FFFFFFF) throw nb::value_error("x: a dimension exceeds 2^31 - 1");
  const TensorRole r = parse_role(role);
  const Usage u = parse_usage(usage);
  const float* p = static_cast<const float*>(x.data());
  const int rows = int(x.shape(0)), cols = int(x.shape(1));
  nb::gil_scoped_release release;
  return self.q->quantize(backend::cpu_device(), p, rows, cols, r, u, &stats);
}

// The garbage collector's view of a Quantizer: the Python callables its recipe's hooks hold (a
// callable that refers back to its quantizer, or to a module holding it, makes a cycle only the
// collector can break). Clearing drops them; the hooks then hold None.
int quantizer_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  for (const auto& c : nb::inst_ptr<PyQuantizer>(self)->callables)
    if (c && c->ptr()) Py_VISIT(c->ptr());
  return 0;
}
int quantizer_clear(PyObject* self) {
  if (!nb::inst_ready(self)) return 0;
  for (auto& c : nb::inst_ptr<PyQuantizer>(self)->callables)
    if (c) *c = nb::none();
  return 0;
}
PyType_Slot kQuantizerSlots[] = {{Py_tp_traverse, (void*)quantizer_traverse},
                                 {Py_tp_clear, (void*)quantizer_clear},
                                 {0, nullptr}};

void bind_recipes(nb::module_& m) {
  // One class for every scaling mode's storage: the attributes a mode does not have are None (NaN
  // for the per-tensor scales), as fp8emu.recipe.QuantizedTensor documents.
  nb::class_<QuantizedTensor>(m, "QuantizedTensor", "A recipe's FP8 operand; see fp8emu.recipe.QuantizedTensor.")
      .def_prop_ro("mode", [](const QuantizedTensor& t) {
        return t.mode() == scaling::ScalingMode::kPerTensor ? "per_tensor" : "block";
      })
      .def_prop_ro("format", [](const QuantizedTensor& t) { return std::string(format_name(t.format)); })
      .def_ro("rows", &QuantizedTensor::rows)
      .def_ro("cols", &QuantizedTensor::cols)
      .def_prop_ro("usage", [](const QuantizedTensor& t) { return usage_name(t.usage); })
      .def_prop_ro("scale", [](const QuantizedTensor& t) {
        const auto* p = std::get_if<scaling::PerTensorStorage>(&t.storage);
        return p ? p->scale : std::numeric_limits<float>::quiet_NaN();
      })
      .def_prop_ro("scale_inv", [](const QuantizedTensor& t) {
        const auto* p = std::get_if<scaling::PerTensorStorage>(&t.storage);
        return p ? p->scale_inv : std::numeric_limits<float>::quiet_NaN();
      })
      .def_prop_ro("rowwise_data", [](nb::handle h) {
        const QuantizedTensor& t = nb::cast<const QuantizedTensor&>(h);
        if (const auto* b = std::get_if<scaling::BlockStorage>(&t.storage))
          return view_of(b->rowwise.codes, {std::size_t(b->rowwise.n), std::size_t(b->rowwise.k)}, h);
        return view_of(t.per_tensor().rowwise_data, {std::size_t(t.rows), std::size_t(t.cols)}, h);
      })
      .def_prop_ro("columnwise_data", [](nb::handle h) {
        const QuantizedTensor& t = nb::cast<const QuantizedTensor&>(h);
        if (const auto* b = std::get_if<scaling::BlockStorage>(&t.storage))
          return view_of(b->columnwise.codes, {std::size_t(b->columnwise.n), std::size_t(b->columnwise.k)}, h);
        return view_of(t.per_tensor().columnwise_data, {std::size_t(t.cols), std::size_t(t.rows)}, h);
      })
      .def_prop_ro("rowwise_scale_inv", [](nb::handle h) { return block_scales(h, true, false); })
      .def_prop_ro("columnwise_scale_inv", [](nb::handle h) { return block_scales(h, false, false); })
      .def_prop_ro("rowwise_e8m0", [](nb::handle h) { return block_scales(h, true, true); })
      .def_prop_ro("columnwise_e8m0", [](nb::handle h) { return block_scales(h, false, true); })
      .def_prop_ro("amax_rowwise", [](const QuantizedTensor& t) { return tensor_amax(t, true); })
      .def_prop_ro("amax_columnwise", [](const QuantizedTensor& t) { return tensor_amax(t, false); })
      .def_prop_ro("block", [](const QuantizedTensor& t) {
        const auto* b = std::get_if<scaling::BlockStorage>(&t.storage);
        return b ? (b->rowwise.block ? b->rowwise.block : b->columnwise.block) : 0;
      });

  nb::class_<PyQuantizer>(m, "Quantizer", "One direction's casts of a recipe; see fp8emu.recipe.Quantizer.",
                          nb::type_slots(kQuantizerSlots))
      .def("__init__",
           [](PyQuantizer* self, const scaling::Recipe& recipe, const std::string& direction) {
             if (direction != "forward" && direction != "backward")
               throw nb::value_error(("unknown direction '" + direction + "' (accepted: forward, backward)").c_str());
             new (self) PyQuantizer{scaling::make_quantizer(
                 recipe, direction == "forward" ? Direction::kForward : Direction::kBackward),
                 recipe_callables(recipe)};
           },
           "recipe"_a, "direction"_a)
      .def_prop_ro("recipe", [](const PyQuantizer& q) { return std::string(q.q->recipe_name()); })
      .def_prop_ro("format", [](const PyQuantizer& q) { return std::string(format_name(q.q->format())); })
      .def_prop_ro("supports_accumulation_models", [](const PyQuantizer& q) { return q.q->supports_accumulation_models(); })
      .def_prop_ro("reads_bf16_norm_output", [](const PyQuantizer& q) { return q.q->reads_bf16_norm_output(); })
      .def("quantize",
           [](PyQuantizer& self, const Array& x, const std::string& role, const std::string& usage,
              std::uintptr_t stream, const std::string& framework) -> nb::tuple {
             if (x.device_type() == nb::device::cuda::value) {  // the device cast on x's GPU
               const TensorRole r = parse_role(role);
               const Usage u = parse_usage(usage);
               const bool fwd = self.q->direction() == Direction::kForward;
               if (scaling::direction_of(r) != self.q->direction())  // the quantizer's check, before device work
                 throw nb::value_error((std::string(self.q->recipe_name()) + " quantizer: the " +
                                        (fwd ? "forward" : "backward") + " quantizer casts only " +
                                        (fwd ? "input and weight" : "grad_output") + " tensors (got role '" + role +
                                        "')")
                                           .c_str());
               return cuda_quantize(*self.q, x, r, u, stream, framework);
             }
             emu::QuantizeStats st;
             QuantizedTensor t = quantize_with(self, x, role, usage, st);
             return nb::make_tuple(nb::cast(std::move(t)), counts_dict(st));
           },
           "x"_a, "role"_a, "usage"_a, "stream"_a = 0, "framework"_a = "",
           "Quantizer.quantize on x's device: (QuantizedTensor or CudaQuantizedTensor, counts); a CUDA x is "
           "cast on its GPU after `stream` (python/src/cuda_recipes.cpp).")
      .def("update_scales", [](PyQuantizer& self) { self.q->update_scales(); })
      .def("set_state",
           [](PyQuantizer& self, const Array& scales, const Array& history) {
             scaling::DelayedScalingState* s = self.q->amax_history_state();
             if (!s) throw nb::value_error("set_state: this recipe keeps no amax history (delayed scaling only)");
             const std::size_t n = std::size_t(s->num_slots()), L = std::size_t(s->history_len());
             for (const auto& [arr, name, count] : {std::tuple<const Array*, const char*, std::size_t>{&scales, "scales", n},
                                                    {&history, "history", n * L}}) {
               if (check_array(*arr, name) != count || !is(arr->dtype(), dl::dtype_code::Float, 32))
                 throw nb::value_error((std::string("set_state: ") + name + " must be float32 with " +
                                        std::to_string(count) + " elements")
                                           .c_str());
             }
             const float* ps = static_cast<const float*>(scales.data());
             const float* ph = static_cast<const float*>(history.data());
             s->restore(std::vector<float>(ps, ps + n), std::vector<float>(ph, ph + n * L));
           },
           "scales"_a, "history"_a,
           "Replace the delayed-scaling state: scales (slots,), history (amax_history_len, slots), float32.")
      .def("state", [](PyQuantizer& self) -> nb::object {
        const scaling::DelayedScalingState* s = self.q->amax_history_state();
        if (!s) return nb::none();
        const std::size_t n = std::size_t(s->num_slots()), L = std::size_t(s->history_len());
        auto* scales = new std::vector<float>(s->scales());
        auto* hist = new std::vector<float>(s->history_values());
        nb::capsule own_s(scales, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        nb::capsule own_h(hist, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        std::size_t shape_s[1] = {n}, shape_h[2] = {L, n};
        return nb::make_tuple(nb::ndarray<nb::numpy, float>(scales->data(), 1, shape_s, own_s),
                              nb::ndarray<nb::numpy, float>(hist->data(), 2, shape_h, own_h));
      });

  m.def("slot_of", [](const std::string& role) { return scaling::slot_of(parse_role(role)); }, "role"_a);
  m.def("gemm_tn",
        [](nb::handle a, const std::string& a_usage, nb::handle b, const std::string& b_usage,
           const std::string& accumulation, int promotion) -> nb::object {
          const Usage ua = parse_usage(a_usage), ub = parse_usage(b_usage);
          if (ua == Usage::kBoth || ub == Usage::kBoth) throw nb::value_error("gemm_tn reads one copy of each operand: "
                                                                              "'rowwise' or 'columnwise'");
          const emu::GemmAccumulation acc{emu::parse_accumulation(accumulation), promotion};
          if (!nb::isinstance<QuantizedTensor>(a))  // GPU operands (or a TypeError naming them there)
            return cuda_gemm_tn(a, ua, b, ub, acc);
          if (!nb::isinstance<QuantizedTensor>(b))
            throw nb::type_error("fp8emu.recipe.gemm: b is not a quantized tensor in host memory, a is");
          const QuantizedTensor& qa = nb::cast<const QuantizedTensor&>(a);
          const QuantizedTensor& qb = nb::cast<const QuantizedTensor&>(b);
          const bool arow = ua == Usage::kRowwise, brow = ub == Usage::kRowwise;
          const std::size_t M = std::size_t(arow ? qa.rows : qa.cols), N = std::size_t(brow ? qb.rows : qb.cols);
          auto* d = new std::vector<float>(M * N);
          nb::capsule own(d, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
          {
            nb::gil_scoped_release release;
            scaling::gemm_tn(backend::cpu_device(), qa, ua, qb, ub, acc, d->data());
          }
          std::size_t shape[2] = {M, N};
          return nb::cast(nb::ndarray<nb::numpy, float>(d->data(), 2, shape, own));
        },
        "a"_a.none(), "a_usage"_a, "b"_a.none(), "b_usage"_a, "accumulation"_a, "promotion"_a,
        "D = A B^T of two quantized operands (scaling::gemm_tn) on their device: host operands on the CPU, GPU "
        "operands on the GPU (a new CUDA array of a's framework); see fp8emu.recipe.gemm.");
  m.def("column_sum",
        [](const Array& dy, std::uintptr_t stream, const std::string& framework) -> nb::object {
          if (dy.device_type() == nb::device::cuda::value) return cuda_column_sum(dy, stream, framework);
          check_array(dy, "dy");
          if (!is(dy.dtype(), dl::dtype_code::Float, 32) || dy.ndim() != 2)
            throw nb::type_error(("fp8emu.layers.bias_grad: dy must be a 2-D float32 array, got " +
                                  dtype_text(dy.dtype()) + " with " + std::to_string(dy.ndim()) + " dimensions")
                                     .c_str());
          if (dy.shape(0) > 0x7FFFFFFF || dy.shape(1) > 0x7FFFFFFF)
            throw nb::value_error("fp8emu.layers.bias_grad: dy: a dimension exceeds 2^31 - 1");
          const int rows = int(dy.shape(0)), cols = int(dy.shape(1));
          auto* out = new std::vector<float>(std::size_t(cols));
          nb::capsule own(out, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
          const float* p = static_cast<const float*>(dy.data());
          {
            nb::gil_scoped_release release;
            backend::cpu_device().column_sum(p, rows, cols, out->data());
          }
          std::size_t shape[1] = {std::size_t(cols)};
          return nb::cast(nb::ndarray<nb::numpy, float>(out->data(), 1, shape, own));
        },
        "dy"_a, "stream"_a = 0, "framework"_a = "",
        "out[j] = sum over rows of dy[i, j] in row order from +0, fp32 (backend::Device::column_sum) on dy's "
        "device; see fp8emu.layers.bias_grad.");
}


// ----------------------------------------------------------------------------- layers

// A float32 2-D array as an nn::Matrix (copied).
nn::Matrix matrix_of(const Array& x, const char* what) {
  check_array(x, what);
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    throw nb::type_error((std::string(what) + " has dtype " + dtype_text(x.dtype()) + "; it must be float32").c_str());
  if (x.ndim() != 2)
    throw nb::value_error((std::string(what) + " has " + std::to_string(x.ndim()) + " dimensions; expected 2 (rows, cols)")
                              .c_str());
  if (x.shape(0) > 0x7FFFFFFF || x.shape(1) > 0x7FFFFFFF)
    throw nb::value_error((std::string(what) + ": a dimension exceeds 2^31 - 1").c_str());
  nn::Matrix m(int(x.shape(0)), int(x.shape(1)));
  const float* p = static_cast<const float*>(x.data());
  std::copy(p, p + m.size(), m.data.begin());
  return m;
}

// Copies a float32 array of exactly `rows` x `cols` elements (any number of dimensions) into m.
void fill_matrix(nn::Matrix& m, const Array& x, const char* what) {
  check_array(x, what);
  if (!is(x.dtype(), dl::dtype_code::Float, 32))
    throw nb::type_error((std::string(what) + " has dtype " + dtype_text(x.dtype()) + "; it must be float32").c_str());
  if (x.size() != m.size())
    throw nb::value_error((std::string(what) + " has " + std::to_string(x.size()) + " elements; expected " +
                           std::to_string(m.rows) + " x " + std::to_string(m.cols))
                              .c_str());
  const float* p = static_cast<const float*>(x.data());
  std::copy(p, p + m.size(), m.data.begin());
}

// A NumPy float32 array owning a copy of m: shape (rows, cols), or (cols,) when `vector`.
nb::ndarray<nb::numpy, float> numpy_of(const nn::Matrix& m, bool vector = false) {
  auto* v = new std::vector<float>(m.data);
  nb::capsule own(v, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  if (vector) {
    std::size_t shape[1] = {m.size()};
    return nb::ndarray<nb::numpy, float>(v->data(), 1, shape, own);
  }
  std::size_t shape[2] = {std::size_t(m.rows), std::size_t(m.cols)};
  return nb::ndarray<nb::numpy, float>(v->data(), 2, shape, own);
}

nb::tuple state_of(const scaling::DelayedScalingState& s) {
  nn::Matrix sc(1, s.num_slots()), h(s.history_len(), s.num_slots());
  sc.data = s.scales();
  h.data = s.history_values();
  return nb::make_tuple(numpy_of(sc, true), numpy_of(h));
}

nn::NormKind norm_kind_of(const std::string& s) {
  if (s == "LayerNorm") return nn::NormKind::kLayerNorm;
  if (s == "RMSNorm") return nn::NormKind::kRMSNorm;
  throw nb::value_error(("unknown normalization '" + s + "' (accepted: LayerNorm, RMSNorm)").c_str());
}

void bind_layers(nb::module_& m) {
  // The C++ layers themselves (nn::Linear, nn::LayerNormLinear), as test oracles of fp8emu.torch: the
  // same inputs through the C++ layer's own forward/backward, a different path from the Python one.
  nb::class_<nn::Linear>(m, "CppLinear", "fp8emu's C++ nn::Linear (a test oracle of fp8emu.torch.Linear).")
      .def("__init__",
           [](nn::Linear* self, int in, int out, bool fp8, const scaling::Recipe& recipe) {
             new (self) nn::Linear(in, out, fp8 ? nn::Precision::kFp8 : nn::Precision::kFp32, recipe);
           },
           "in_features"_a, "out_features"_a, "fp8"_a, "recipe"_a)
      .def("set_params",
           [](nn::Linear& self, const Array& w, const Array& b) {
             fill_matrix(self.weight, w, "weight");
             fill_matrix(self.bias, b, "bias");
           },
           "weight"_a, "bias"_a)
      .def("forward",
           [](nn::Linear& self, const Array& x, bool training) {
             nn::Matrix xm = matrix_of(x, "x"), y;
             self.forward(xm, y, training);
             return numpy_of(y);
           },
           "x"_a, "training"_a)
      .def("backward",
           [](nn::Linear& self, const Array& dy) {
             nn::Matrix dym = matrix_of(dy, "dy"), dx;
             self.backward(dym, &dx);
             return nb::make_tuple(numpy_of(dx), numpy_of(self.grad_weight), numpy_of(self.grad_bias, true));
           },
           "dy"_a)
      .def("update_forward_scales", &nn::Linear::update_forward_scales)
      .def("update_backward_scales", &nn::Linear::update_backward_scales)
      .def("forward_state", [](const nn::Linear& self) { return state_of(self.forward_state()); })
      .def("backward_state", [](const nn::Linear& self) { return state_of(self.backward_state()); });

  nb::class_<nn::LayerNormLinear>(m, "CppLayerNormLinear",
                                  "fp8emu's C++ nn::LayerNormLinear (a test oracle of fp8emu.torch.LayerNormLinear).")
      .def("__init__",
           [](nn::LayerNormLinear* self, const std::string& normalization, int in, int out, bool fp8,
              const scaling::Recipe& recipe, float eps, bool zero_centered_gamma) {
             nn::LinearSpec spec{fp8 ? nn::Precision::kFp8 : nn::Precision::kFp32, recipe};
             new (self) nn::LayerNormLinear(norm_kind_of(normalization), in, out, spec, eps, zero_centered_gamma);
           },
           "normalization"_a, "in_features"_a, "out_features"_a, "fp8"_a, "recipe"_a, "eps"_a, "zero_centered_gamma"_a)
      .def("set_params",
           [](nn::LayerNormLinear& self, const Array& gamma, std::optional<Array> beta, const Array& w, const Array& b) {
             fill_matrix(self.norm.gamma, gamma, "gamma");
             if (beta) fill_matrix(self.norm.beta, *beta, "beta");
             fill_matrix(self.linear.weight, w, "weight");
             fill_matrix(self.linear.bias, b, "bias");
           },
           "gamma"_a, "beta"_a.none(), "weight"_a, "bias"_a)
      .def("forward",
           [](nn::LayerNormLinear& self, const Array& x, bool training) {
             nn::Matrix xm = matrix_of(x, "x"), y;
             self.forward(xm, y, training);
             return numpy_of(y);
           },
           "x"_a, "training"_a)
      .def("backward",
           [](nn::LayerNormLinear& self, const Array& dy) {
             nn::Matrix dym = matrix_of(dy, "dy"), dx;
             self.backward(dym, dx);
             return nb::make_tuple(numpy_of(dx), numpy_of(self.norm.grad_gamma, true),
                                   numpy_of(self.norm.grad_beta, true), numpy_of(self.linear.grad_weight),
                                   numpy_of(self.linear.grad_bias, true));
           },
           "dy"_a)
      .def("update_forward_scales", [](nn::LayerNormLinear& self) { self.linear.update_forward_scales(); })
      .def("update_backward_scales", [](nn::LayerNormLinear& self) { self.linear.update_backward_scales(); })
      .def("forward_state", [](const nn::LayerNormLinear& self) { return state_of(self.linear.forward_state()); })
      .def("backward_state", [](const nn::LayerNormLinear& self) { return state_of(self.linear.backward_state()); });
}

}  // namespace
}  // namespace fp8emu::python

NB_MODULE(_fp8emu, m) {
  using namespace fp8emu;
  using namespace fp8emu::python;
  m.doc() = "fp8emu's compiled entry points; use the fp8emu package, which wraps them.";
  m.attr("__version__") = FP8EMU_PYTHON_VERSION;
  // Objects a script holds at exit are finalized after this extension: nanobind's leak report would
  // be noise there; FP8EMU_LEAK_WARNINGS=1 keeps it for finding real leaks.
  const char* leak_warnings = std::getenv("FP8EMU_LEAK_WARNINGS");
  nb::set_leak_warnings(leak_warnings != nullptr && std::string(leak_warnings) == "1");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fp8emu::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def("formats", [] {
    nb::list l;
    for (const FormatRecord& r : kFormats) l.append(format_dict(r));
    return l;
  }, "The format registry (include/fp8emu/format/format_spec.hpp) as a list of dicts.");
  m.def("canonical_format", [](const std::string& name) { return std::string(format_name(format_of(name, "format"))); },
        "name"_a, "The canonical name of a format name or alias; ValueError if unknown.");
  m.def("policies", [] {
    std::vector<std::tuple<std::string, std::string>> v;
    for (const emu::PolicyPreset& p : emu::kPolicyPresets) v.emplace_back(p.name, p.reproduces);
    return v;
  }, "The named conversion policies: (name, what it reproduces).");
  m.def("roundings", [] {
    std::vector<std::string> v;
    for (const emu::RoundingName& r : emu::kRoundingNames) v.emplace_back(r.name);
    return v;
  }, "The rounding names of element formats.");
  m.def("accumulations", [] {
    std::vector<std::tuple<std::string, std::string, int>> v;
    for (const AccumulationModel& a : kAccumulationModels) v.emplace_back(a.name, a.hardware, a.block);
    return v;
  }, "The GEMM accumulation models: (name, hardware, block).");
  // One entry each for the array functions: a CUDA array runs on its GPU (python/src/cuda_arrays.cpp),
  // returning new arrays of `framework` (or writing `out`); host arrays are written into `out`.
  const auto on_cuda = [](const Array& a) { return a.device_type() == nb::device::cuda::value; };
  const auto need_out = [](std::optional<OutArray>& out, const char* fn) -> OutArray& {
    if (!out) throw nb::value_error((std::string(fn) + ": host arrays need `out`").c_str());
    return *out;
  };
  m.def("cast",
        [on_cuda, need_out](const Array& x, const std::string& format, float scale, const std::string& policy,
                            const std::string& rounding, std::uint32_t seed, bool bf16_bits,
                            std::optional<OutArray> out, std::uintptr_t stream, const std::string& framework) -> nb::object {
          if (on_cuda(x)) return cuda_cast(x, format, scale, policy, rounding, stream, framework, out);
          host_cast(x, format, scale, policy, rounding, seed, bf16_bits, need_out(out, "cast"));
          return nb::none();
        },
        "x"_a, "format"_a, "scale"_a, "policy"_a, "rounding"_a, "seed"_a, "bf16_bits"_a, "out"_a.none(),
        "stream"_a = 0, "framework"_a = "",
        "Cast x on its device: into out (host), or (codes, stats) on the GPU; see fp8emu.cast.");
  m.def("decode",
        [on_cuda, need_out](const Array& codes, const std::string& format, float scale_inv, std::optional<OutArray> out,
                            std::uintptr_t stream, const std::string& framework) -> nb::object {
          if (on_cuda(codes)) return cuda_decode(codes, format, scale_inv, stream, framework, out);
          host_decode(codes, format, scale_inv, need_out(out, "decode"));
          return nb::none();
        },
        "codes"_a, "format"_a, "scale_inv"_a, "out"_a.none(), "stream"_a = 0, "framework"_a = "",
        "Decode codes on their device: into out (host), or a new array / out on the GPU; see fp8emu.decode.");
  m.def("gemm",
        [on_cuda, need_out](const Array& a, const Array& b, const std::string& format_a, const std::string& format_b,
                            float scale_inv_a, float scale_inv_b, const std::string& accumulation, int promotion,
                            int split_k, const std::string& layout, const std::string& out_dtype, float d_scale,
                            float alpha, float beta, std::optional<Array> c, std::optional<Array> bias,
                            std::optional<OutArray> out, bool return_amax, std::uintptr_t stream,
                            const std::string& framework) -> nb::object {
          if (on_cuda(a) || on_cuda(b))
            return cuda_gemm(a, b, format_a, format_b, scale_inv_a, scale_inv_b, accumulation, promotion, split_k,
                             layout, out_dtype, d_scale, alpha, beta, c, bias, return_amax, stream, framework, out);
          return nb::float_(host_gemm(a, b, format_a, format_b, scale_inv_a, scale_inv_b, accumulation, promotion,
                                      split_k, layout, out_dtype, d_scale, alpha, beta, c, bias, need_out(out, "gemm")));
        },
        "a"_a, "b"_a, "format_a"_a, "format_b"_a, "scale_inv_a"_a, "scale_inv_b"_a, "accumulation"_a, "promotion"_a,
        "split_k"_a, "layout"_a, "out_dtype"_a, "d_scale"_a, "alpha"_a, "beta"_a, "c"_a.none(), "bias"_a.none(),
        "out"_a.none(), "return_amax"_a = false, "stream"_a = 0, "framework"_a = "",
        "D = A B^T or A B on the operands' device: into out returning the amax of D (host), or (D, amax or None) on "
        "the GPU; see fp8emu.gemm.");
  bind_mma_compare(m);  // python/src/mma_compare.cpp
  bind_recipe_records(m);  // python/src/recipe_records.cpp
  bind_recipes(m);
  bind_layer_steps(m);  // python/src/layer_steps.cpp
  bind_layers(m);
  bind_cuda(m);  // python/src/cuda_arrays.cpp
  bind_nv(m);  // python/src/nv_binding.cpp
  m.def("data_pointer", [](const Array& x) { return reinterpret_cast<std::uintptr_t>(x.data()); }, "x"_a,
        "The address of x's first element as this module sees it (no copy is made): for zero-copy checks.");
}
