// `fp8emu convert` (see cmd_convert.hpp).
#include "cmd_convert.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/encode.hpp"
#include "fp8emu/emulation/cast_policy.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "small_formats.hpp"

namespace fp8emu::cli {
namespace {

// ------------------------------------------------------------------------------------ convert

enum class Kind { kF32, kF16, kBF16, kCodes };

struct Dtype {
  Kind kind;
  const FormatInfo* fmt;  ///< kCodes only
  std::string name() const {
    switch (kind) {
      case Kind::kF32: return "float32";
      case Kind::kF16: return "float16";
      case Kind::kBF16: return "bfloat16";
      default: return fmt ? fmt->name : "uint8 codes";
    }
  }
  std::size_t itemsize() const { return kind == Kind::kF32 ? 4 : kind == Kind::kCodes ? 1 : 2; }
  const char* descr() const {
    return kind == Kind::kF32 ? "<f4" : kind == Kind::kF16 ? "<f2" : kind == Kind::kBF16 ? "<u2" : "|u1";
  }
};

std::string dtype_names() { return "float32, float16, bfloat16, " + format_names(); }

Dtype parse_dtype(const std::string& s, const char* flag) {
  if (s == "float32") return {Kind::kF32, nullptr};
  if (s == "float16") return {Kind::kF16, nullptr};
  if (s == "bfloat16") return {Kind::kBF16, nullptr};
  const FormatInfo* f = lookup_format(s);
  FP8EMU_CHECK(f, "unknown ", flag, " '", s, "' (accepted: ", dtype_names(), ")");
  return {Kind::kCodes, f};
}

bool has_npy_suffix(const std::string& p) {
  return p.size() >= 4 && (p.compare(p.size() - 4, 4, ".npy") == 0 || p.compare(p.size() - 4, 4, ".NPY") == 0);
}

float parse_scale(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  FP8EMU_CHECK(!s.empty() && end != s.c_str() && *end == '\0', "--scale '", s, "' is not a number");
  const float f = float(d);
  FP8EMU_CHECK(std::isfinite(d) && std::isfinite(f), "--scale ", s, " is not finite",
               std::isfinite(d) ? " as fp32" : "", " (the scale must be a finite, non-zero fp32 number)");
  FP8EMU_CHECK(f != 0.0f, "--scale ", s, " is zero", d != 0 ? " as fp32" : "",
               " (the scale must be a finite, non-zero fp32 number)");
  return f;
}

std::uint32_t parse_seed(const std::string& s) {
  FP8EMU_CHECK(!s.empty() && s.size() <= 10 && s.find_first_not_of("0123456789") == std::string::npos,
               "--seed '", s, "' is not an integer in 0..4294967295");
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  FP8EMU_CHECK(v <= 0xFFFFFFFFull, "--seed '", s, "' is not an integer in 0..4294967295");
  return std::uint32_t(v);
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (a == b) return true;
  std::error_code e1, e2;
  const fs::path ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
  if (!e1 && !e2 && ca == cb) return true;
  std::error_code e3;
  return fs::exists(a, e3) && fs::exists(b, e3) && fs::equivalent(a, b, e3) && !e3;
}

std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::error_code ec;
  FP8EMU_CHECK(!std::filesystem::is_directory(path, ec), path, ": is a folder, not a file");
  std::ifstream f(path, std::ios::binary);
  FP8EMU_CHECK(f.good(), path, ": cannot open");
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int convert(const ConvertOptions& o, std::ostream& out) {
  // 1. Flags, before any file is read.
  FP8EMU_CHECK(!same_file(o.in, o.out), "OUT ", o.out, " is the input file; write the result to another file");
  const Dtype to = parse_dtype(o.to, "--to");
  const bool from_given = !o.from.empty(), format_given = !o.format.empty();
  Dtype from{Kind::kF32, nullptr};
  if (from_given) from = parse_dtype(o.from, "--from");
  const FormatInfo* format = format_given ? &find_format(o.format, "--format") : nullptr;
  const bool scale_given = !o.scale.empty();
  const float scale = scale_given ? parse_scale(o.scale) : 1.0f;

  // 2. The input and its type: the .npy descr, or --from for a raw file.
  const bool in_npy = has_npy_suffix(o.in), out_npy = has_npy_suffix(o.out);
  io::NpyArray a;
  Dtype in{Kind::kF32, nullptr};
  if (in_npy) {
    a = io::read_npy(o.in);
    if (a.dtype == "<f4") in = {Kind::kF32, nullptr};
    else if (a.dtype == "<f2") in = {Kind::kF16, nullptr};
    else if (a.dtype == "<u2") in = {Kind::kBF16, nullptr};
    else in = {Kind::kCodes, nullptr};  // |u1 (read_npy accepts no other descr)
    if (from_given) {
      FP8EMU_CHECK(from.kind == in.kind, o.in, " holds ", in.name(), " (descr ", a.dtype,
                   "), which contradicts --from ",
                   o.from, " (", from.name(), " is stored as ", from.descr(), ")");
      in.fmt = from.fmt;
    }
    if (in.kind == Kind::kCodes && !in.fmt) {
      FP8EMU_CHECK(format, o.in, " holds uint8 codes (descr |u1): name their format with --format or --from (",
                   format_names(), ")");
      in.fmt = format;
    }
  } else {
    FP8EMU_CHECK(from_given, o.in, " is a raw file (no .npy suffix): give its type with --from (", dtype_names(), ")");
    in = from;
    a.dtype = in.descr();
    a.data = read_raw(o.in);
    FP8EMU_CHECK(a.data.size() % in.itemsize() == 0, o.in, ": ", a.data.size(), " bytes is not a whole number of ",
                 in.name(), " items (", in.itemsize(), " bytes each)");
    a.shape = {a.data.size() / in.itemsize()};
  }

  // 3. Flags that must agree with the types.
  if (format) {
    const bool used = (in.kind == Kind::kCodes && in.fmt == format) || (to.kind == Kind::kCodes && to.fmt == format);
    FP8EMU_CHECK(used, "--format ", o.format, " contradicts the conversion ", in.name(), " -> ", to.name(),
                 (in.kind != Kind::kCodes && to.kind != Kind::kCodes) ? " (no side is a small format)" : "");
  }
  const bool enc_side = to.kind == Kind::kCodes, dec_side = in.kind == Kind::kCodes;
  FP8EMU_CHECK(!scale_given || enc_side != dec_side, "--scale applies when exactly one side is a small format (",
               in.name(), " -> ", to.name(), ")");
  FP8EMU_CHECK(enc_side || (o.policy.empty() && o.rounding.empty()),
               "--policy and --rounding apply to conversions to a small format, not to ", to.name(),
               " (float16 and bfloat16 outputs always round to nearest even)");
  emu::CastPolicy enc;
  if (enc_side) enc = emu::resolve_cast_policy(to.fmt->id, o.policy, o.rounding);
  FP8EMU_CHECK(!enc.stochastic() || !o.seed.empty(), "--rounding stochastic needs --seed N (results are reproducible "
               "for a given seed)");
  FP8EMU_CHECK(o.seed.empty() || enc.stochastic(), "--seed applies to --rounding stochastic only");
  const std::uint32_t seed = o.seed.empty() ? 0u : parse_seed(o.seed);
  const float scale_inv = 1.0f / scale;
  FP8EMU_CHECK(!dec_side || !scale_given || std::isfinite(scale_inv), "--scale ", o.scale,
               ": 1/scale overflows fp32, so the codes cannot be dequantized");

  // 4. Convert element by element, through fp32.
  const std::size_t n = a.count();
  const std::uint8_t* src = a.data.data();
  io::NpyArray r;
  r.dtype = to.descr();
  r.shape = a.shape;
  r.data.resize(n * to.itemsize());
  std::mt19937 rng(seed);
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b = 0;
    std::uint16_t h = 0;
    switch (in.kind) {
      case Kind::kF32: std::memcpy(&b, src + 4 * i, 4); break;
      case Kind::kF16:  // to a small format: NaN keeps its sign for the policies that read it
        std::memcpy(&h, src + 2 * i, 2);
        b = enc_side ? emu::widen_f16_bits(h) : core::half_to_f32_bits(h);
        break;
      case Kind::kBF16: std::memcpy(&h, src + 2 * i, 2); b = core::bf16_to_f32_bits(h); break;
      case Kind::kCodes:
        FP8EMU_CHECK(src[i] < code_count(*in.fmt), o.in, ": element ", i, " is ", hex_code(src[i], *in.fmt),
                     ", not a code of ", in.fmt->name, " (", code_bits(*in.fmt), " bits: ", hex_code(0, *in.fmt), "..",
                     hex_code(code_count(*in.fmt) - 1, *in.fmt), ")");
        b = decode_bits(src[i], *in.fmt);
        break;
    }
    float v = core::bits_to_f32(b);
    if (!std::isnan(v)) amax = std::fmax(amax, std::fabs(v));
    // NaNs pass the scale multiplies unchanged (sign and payload kept for the NaN encodings).
    if (scale_given && !std::isnan(v)) v = dec_side ? v * scale_inv : v * scale;
    b = core::f32_to_bits(v);
    std::uint8_t* dst = r.data.data() + i * to.itemsize();
    switch (to.kind) {
      case Kind::kF32: std::memcpy(dst, &b, 4); break;
      case Kind::kF16: h = core::f32_bits_to_half_rne(b); std::memcpy(dst, &h, 2); break;
      case Kind::kBF16: h = core::f32_bits_to_bf16_rne(b); std::memcpy(dst, &h, 2); break;
      case Kind::kCodes: {
        const std::uint32_t random = enc.stochastic() ? std::uint32_t(rng()) : 0u;
        *dst = emu::cast_f32_bits(enc, b, random);
        break;
      }
    }
  }

  // 5. Write once, atomically.
  if (out_npy) io::write_npy(o.out, r);
  else io::write_file_atomic(o.out, std::string(r.data.begin(), r.data.end()));
  if (o.amax) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", double(amax));
    out << "amax: " << b << "\n";
  }
  out << o.in << " (" << in.name() << ", shape " << shape_text(a.shape) << ") -> " << o.out << " (" << to.name()
      << (to.kind == Kind::kCodes ? " codes, " : ", ") << (out_npy ? std::string(".npy ") + r.dtype : "raw") << ")\n";
  return 0;
}

}  // namespace

int run_convert(const ConvertOptions& o, std::ostream& out, std::ostream& err) {
  try {
    return convert(o, out);
  } catch (const std::exception& e) {
    err << "fp8emu convert: error: " << error_text(e) << "\n";
    return 2;
  }
}

Command add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  ConvertOptions& conv = *o;
  CLI::App* convert_cmd = app.add_subcommand(
      "convert", "Convert raw binary or .npy files between float32, float16, bfloat16 and the small formats");
  convert_cmd->add_option("IN", conv.in, "Input: .npy (type from its descr) or raw little-endian (needs --from)")
      ->required();
  convert_cmd->add_option("OUT", conv.out, "Output: .npy (keeps the input's shape) or raw (flat)")->required();
  convert_cmd->add_option("--to", conv.to, "Output type: float32, float16, bfloat16 or a format name")->required();
  convert_cmd->add_option("--from", conv.from, "Input type (required for raw input)");
  convert_cmd->add_option("--format", conv.format, "Format of uint8 (|u1) .npy input codes");
  convert_cmd->add_option("--scale", conv.scale,
                          "To a small format: code = Q(x * scale); from one: value * fp32(1/scale) (default 1)");
  convert_cmd->add_option("--policy", conv.policy, emu::policy_names() + " (default: cuda)");
  convert_cmd->add_option("--rounding", conv.rounding,
                          emu::rounding_names() + " (default: nearest; E8M0: up; stochastic needs --seed)");
  convert_cmd->add_option("--seed", conv.seed, "Seed of std::mt19937 for stochastic rounding (32 bits per element)");
  convert_cmd->add_flag("--amax", conv.amax, "Print the input's amax (max |x|, NaN ignored)");
  return {convert_cmd, [o] { return run_convert(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{120, add_convert};  // position in `fp8emu --help` (commands.hpp)

}  // namespace fp8emu::cli
