// `fp8emu quantize`: one recipe quantizer on an .npy tensor, writing TE's tensor fields as .npy
// files, so that a GPU kernel's output can be compared with the emulator's byte for byte.
//
// Fields (TE's names; docs/cli.md §quantize):
//   rowwise_data.npy        uint8 codes of x [R, C]; NVFP4 packs two E2M1 codes per byte, element
//                           2j in the low nibble: [R, ceil(C / 2)]
//   rowwise_scale_inv.npy   per-tensor recipes: float32 [1]; MXFP8: uint8 E8M0 codes [R, C / 32];
//                           NVFP4: uint8 E4M3 codes [R, C / 16]; 128-block: float32 [R, C / 128]
//                           (with --mxfp8-gemms, TE's Blackwell conversion: uint8 E8M0 [R, C / 32])
//                           (unswizzled; with --swizzle also *_swizzled.npy in cuBLAS's layout)
//   columnwise_data.npy, columnwise_scale_inv.npy   the same for x^T [C, R] (NVFP4: after the
//                           Hadamard transform when it is on)
//   amax_rowwise.npy, amax_columnwise.npy   NVFP4: float32 [1], the tensor amax of each copy
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "fp8emu/backend/select.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/io/npy.hpp"
#include "fp8emu/scaling/nvfp4_quantizer.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::cli {
namespace {

struct QuantizeOptions {
  std::string recipe, role = "input", in, out, format, backend = "emulated", mxfp8_rule = "te";
  bool no_rht = false, no_sr = false, no_2d = false, swizzle = false, mxfp8_gemms = false, fnuz = false;
  std::string seed = "0", offset = "0";
};

// A 64-bit unsigned decimal, refused (not clamped) when it is out of range or not a number.
std::uint64_t parse_u64(const std::string& s, const char* flag) {
  const bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
  FP8EMU_CHECK(digits && errno != ERANGE, flag, " '", s, "' is not an integer in [0, 2^64 - 1]");
  return std::uint64_t(v);
}

scaling::TensorRole parse_role(const std::string& s) {
  if (s == "input") return scaling::TensorRole::kInput;
  if (s == "weight") return scaling::TensorRole::kWeight;
  if (s == "grad" || s == "grad_output") return scaling::TensorRole::kGradOutput;
  FP8EMU_FAIL("unknown --role '", s, "' (accepted: input, weight, grad or grad_output)");
}

// x as [rows, cols] fp32: float32 or bfloat16 (uint16 bits, as ml_dtypes writes it); a 1-D array
// is one row, more dimensions fold into rows (TE's [prod(shape[:-1]), shape[-1]]).
std::vector<float> read_input(const std::string& path, int& rows, int& cols) {
  const io::NpyArray a = io::read_npy(path);
  FP8EMU_CHECK(!a.shape.empty(), path, ": a scalar is not a tensor (expected 1 or more dimensions)");
  FP8EMU_CHECK(a.dtype == "<f4" || a.dtype == "<u2", path, ": dtype ", a.dtype,
               " is neither float32 nor bfloat16 (uint16 bits)");
  std::size_t r = 1;
  for (std::size_t i = 0; i + 1 < a.shape.size(); ++i) r *= a.shape[i];
  const std::size_t c = a.shape.back();
  FP8EMU_CHECK(r >= 1 && c >= 1 && r <= 0x7FFFFFFF && c <= 0x7FFFFFFF, path, ": shape [", r, ", ", c,
               "] (as 2-D) must have at least one element and dimensions below 2^31");
  rows = int(r);
  cols = int(c);
  std::vector<float> x(a.count());
  if (a.dtype == "<f4") {
    std::memcpy(x.data(), a.data.data(), a.data.size());
  } else {
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint16_t b;
      std::memcpy(&b, a.data.data() + 2 * i, 2);
      x[i] = core::bits_to_f32(core::bf16_to_f32_bits(b));
    }
  }
  return x;
}

io::NpyArray u8_array(std::vector<std::size_t> shape, std::vector<std::uint8_t> bytes) {
  io::NpyArray a;
  a.dtype = "|u1";
  a.shape = std::move(shape);
  a.data = std::move(bytes);
  return a;
}
io::NpyArray f32_array(std::vector<std::size_t> shape, const std::vector<float>& v) {
  io::NpyArray a;
  a.dtype = "<f4";
  a.shape = std::move(shape);
  a.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

// Two E2M1 codes per byte, element 2j in the low nibble (TE's NVFP4 data; a trailing odd element
// pairs with a zero nibble).
std::vector<std::uint8_t> pack_fp4(const std::vector<std::uint8_t>& codes, std::size_t n, std::size_t k) {
  const std::size_t kb = (k + 1) / 2;
  std::vector<std::uint8_t> p(n * kb, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < k; ++j)
      p[i * kb + j / 2] |= std::uint8_t((codes[i * k + j] & 0x0Fu) << (4 * (j % 2)));
  return p;
}

// [n, k] row-major -> [k, n].
std::vector<std::uint8_t> transposed(const std::vector<std::uint8_t>& a, std::size_t n, std::size_t k) {
  std::vector<std::uint8_t> t(a.size());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < k; ++j) t[j * n + i] = a[i * k + j];
  return t;
}

// cuBLAS's block-scale layout (its "1D block scaling factors layout"; TE cast/nvfp4/swizzle.cuh,
// torchao to_blocked): the [n, nb] scales padded with zeros to [roundup(n, 128), roundup(nb, 4)],
// stored in 512-byte blocks of 128 rows x 4 columns, (r, c) at
// ((r / 128 * ceil(nb / 4) + c / 4) * 32 + r % 32) * 16 + (r % 128) / 32 * 4 + c % 4.
std::vector<std::uint8_t> swizzle_scales(const std::vector<std::uint8_t>& s, std::size_t n, std::size_t nb,
                                         std::size_t& rows_padded, std::size_t& cols_padded) {
  rows_padded = (n + 127) / 128 * 128;
  cols_padded = (nb + 3) / 4 * 4;
  std::vector<std::uint8_t> out(rows_padded * cols_padded, 0);
  const std::size_t col_blocks = cols_padded / 4;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < nb; ++c)
      out[((r / 128 * col_blocks + c / 4) * 32 + r % 32) * 16 + (r % 128) / 32 * 4 + c % 4] = s[r * nb + c];
  return out;
}

int run_quantize(const QuantizeOptions& o, std::ostream& out, std::ostream& err) {
  try {
    scaling::RecipeSet set;
    if (!o.format.empty()) set.set_format(scaling::parse_recipe_format(o.format));
    auto& nv = set.get<scaling::NVFP4BlockScaling>();
    nv.disable_rht = o.no_rht;
    nv.disable_stochastic_rounding = o.no_sr;
    nv.disable_2d_quantization = o.no_2d;
    const std::uint64_t seed = parse_u64(o.seed, "--seed"), offset = parse_u64(o.offset, "--offset");
    nv.seed = seed;
    set.get<scaling::MXFP8BlockScaling>().rule = scaling::parse_e8m0_rule(o.mxfp8_rule, "--mxfp8-rule");
    set.get<scaling::Float8BlockScaling>().mxfp8_gemms = o.mxfp8_gemms;
    set.get<scaling::DelayedScaling>().fnuz = set.get<scaling::CurrentScaling>().fnuz = o.fnuz;
    const scaling::Recipe recipe = set.find(o.recipe);
    FP8EMU_CHECK(!o.mxfp8_gemms || o.recipe == "block", "--mxfp8-gemms is a switch of --recipe block (TE's ",
                 "Blackwell conversion of its scales), not of ", o.recipe);
    const bool e8m0_scales = o.recipe == "mxfp8" || o.mxfp8_gemms;
    FP8EMU_CHECK(!o.fnuz || scaling::scaling_mode(recipe) == scaling::ScalingMode::kPerTensor,
                 "--fnuz is a switch of the per-tensor recipes (delayed, current), not of ", o.recipe);
    const bool nvfp4 = std::holds_alternative<scaling::NVFP4BlockScaling>(recipe);
    FP8EMU_CHECK(!nvfp4 || o.format.empty() || o.format == "e4m3", "--format ", o.format,
                 " does not apply to --recipe nvfp4: its formats are TE's fixed ones (E2M1 elements, E4M3 block "
                 "scales)");
    FP8EMU_CHECK(nvfp4 || (!o.no_rht && !o.no_sr && !o.no_2d), "--no-rht, --no-sr and --no-2d are switches of ",
                 "--recipe nvfp4, not of ", o.recipe);
    FP8EMU_CHECK(!o.swizzle || nvfp4 || e8m0_scales,
                 "--swizzle writes cuBLAS's layout of E8M0 or E4M3 block scales: --recipe mxfp8, nvfp4, or block "
                 "with --mxfp8-gemms");
    const scaling::TensorRole role = parse_role(o.role);
    int rows = 0, cols = 0;
    const std::vector<float> x = read_input(o.in, rows, cols);
    FP8EMU_CHECK(o.backend == "emulated" || o.backend == "element" || o.backend == "cuda", "unknown --backend '",
                 o.backend, "' (accepted: emulated, element, cuda)");
    const backend::Device& device = o.backend == "element" ? backend::element_device()
                                    : o.backend == "cuda"  ? backend::cuda_device()
                                                           : backend::cpu_device();

    std::unique_ptr<scaling::Quantizer> q = scaling::make_quantizer(recipe, scaling::direction_of(role));
    if (auto* n4 = dynamic_cast<scaling::Nvfp4Quantizer*>(q.get())) n4->set_rounding_state(seed, offset);
    const scaling::QuantizedTensor t = q->quantize(device, x.data(), rows, cols, role, scaling::Usage::kBoth, nullptr);

    // The fields go into a fresh folder beside --out, renamed into place when all are written: an
    // error leaves nothing, and no field of an earlier run stays beside the new ones.
    std::error_code ec;
    const std::filesystem::path final_dir(o.out);
    FP8EMU_CHECK(!std::filesystem::exists(final_dir, ec) || std::filesystem::is_empty(final_dir, ec), "--out ",
                 o.out, " exists and is not empty (remove it or choose another folder)");
    const std::filesystem::path dir = final_dir.string() + ".partial";
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    FP8EMU_CHECK(!ec, "--out ", o.out, ": cannot create ", dir.string(), " (", ec.message(), ")");
    struct Cleanup {
      std::filesystem::path p;
      bool keep = false;
      ~Cleanup() {
        std::error_code e;
        if (!keep) std::filesystem::remove_all(p, e);
      }
    } cleanup{dir};
    auto put = [&](const char* name, const io::NpyArray& a) { io::write_npy((dir / name).string(), a); };
    const std::size_t R = std::size_t(rows), C = std::size_t(cols);
    if (t.mode() == scaling::ScalingMode::kPerTensor) {
      const scaling::PerTensorStorage& p = t.per_tensor();
      put("rowwise_data.npy", u8_array({R, C}, p.rowwise_data));
      put("columnwise_data.npy", u8_array({C, R}, p.columnwise_data));
      put("rowwise_scale_inv.npy", f32_array({1}, {p.scale_inv}));
      put("columnwise_scale_inv.npy", f32_array({1}, {p.scale_inv}));
    } else {
      const scaling::BlockStorage& b = t.blocks();
      auto copy = [&](const emu::BlockQuantized& v, const char* data_name, const char* scale_name,
                      const char* swizzled_name, const char* amax_name) {
        const std::size_t n = std::size_t(v.n), k = std::size_t(v.k), nb = std::size_t(v.blocks());
        // TE's MXFP8 column-wise copy keeps x's layout: data [R, C], scales [ceil(R / 32), C].
        const bool mx_col = o.recipe == "mxfp8" && &v == &b.columnwise;
        if (nvfp4) put(data_name, u8_array({n, (k + 1) / 2}, pack_fp4(v.codes, n, k)));
        else if (mx_col) put(data_name, u8_array({k, n}, transposed(v.codes, n, k)));
        else put(data_name, u8_array({n, k}, v.codes));
        std::vector<std::uint8_t> codes(v.scale_inv.size());
        if (nvfp4) {  // E4M3 block scales: exact E4M3 values, so their codes are exact
          for (std::size_t i = 0; i < codes.size(); ++i)
            codes[i] = core::f32_to_fp8(v.scale_inv[i], kSpecE4M3, Saturation::kSatFinite);
        } else if (e8m0_scales) {  // E8M0 scales: powers of two (or NaN)
          for (std::size_t i = 0; i < codes.size(); ++i)
            codes[i] = core::e8m0_from_f32_bits(core::f32_to_bits(v.scale_inv[i]), true, false);
        } else {
          put(scale_name, f32_array({n, nb}, v.scale_inv));
          return;
        }
        if (mx_col) put(scale_name, u8_array({nb, n}, transposed(codes, n, nb)));
        else put(scale_name, u8_array({n, nb}, codes));
        if (o.swizzle) {  // the scales of the operand as the GEMM reads it, K-major [n, nb]
          std::size_t rp = 0, cp = 0;
          std::vector<std::uint8_t> s = swizzle_scales(codes, n, nb, rp, cp);
          put(swizzled_name, u8_array({rp, cp}, std::move(s)));
        }
        if (nvfp4) put(amax_name, f32_array({1}, {*v.amax}));
      };
      copy(b.rowwise, "rowwise_data.npy", "rowwise_scale_inv.npy", "rowwise_scale_inv_swizzled.npy",
           "amax_rowwise.npy");
      copy(b.columnwise, "columnwise_data.npy", "columnwise_scale_inv.npy", "columnwise_scale_inv_swizzled.npy",
           "amax_columnwise.npy");
    }
    std::filesystem::rename(dir, final_dir, ec);
    if (ec) {  // an empty --out folder: replace it
      std::filesystem::remove(final_dir, ec);
      std::filesystem::rename(dir, final_dir, ec);
    }
    FP8EMU_CHECK(!ec, "--out ", o.out, ": cannot move the fields into place (", ec.message(), ")");
    cleanup.keep = true;
    out << o.recipe << " " << o.role << " quantizer on [" << rows << ", " << cols << "] from " << o.in
        << ": TE's fields written to " << o.out << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "fp8emu quantize: error: " << error_text(e) << "\n";
    return 2;
  }
}

Command add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* c = app.add_subcommand(
      "quantize", "One recipe's quantizer on an .npy tensor, writing TE's tensor fields (codes, scale_inv, amax) as .npy");
  c->add_option("--recipe", o->recipe, "Recipe: " + [] {
    std::string s;
    for (const std::string& n : scaling::recipe_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }())->required();
  c->add_option("--role", o->role, "Tensor role: input, weight, or grad (also grad_output)")->capture_default_str();
  c->add_option("--in", o->in, "X.npy: float32 or bfloat16 (uint16 bits), [rows, cols] (more dims fold into rows)")
      ->required();
  c->add_option("--out", o->out, "Folder to write the fields into (created, or empty; written atomically)")
      ->required();
  c->add_option("--format", o->format,
                "FP8 recipes' formats: hybrid (E4M3 forward, E5M2 grad) or e4m3 (default: TE's per recipe, hybrid "
                "for delayed/current, e4m3 for mxfp8/block; nvfp4's are fixed)");
  c->add_flag("--no-rht", o->no_rht, "nvfp4: no Hadamard transform of the column-wise copy (TE disable_rht)");
  c->add_flag("--no-sr", o->no_sr, "nvfp4: round gradients to nearest (TE disable_stochastic_rounding)");
  c->add_flag("--no-2d", o->no_2d, "nvfp4: weights in 1 x 16 blocks (TE disable_2d_quantization)");
  c->add_option("--seed", o->seed, "nvfp4 grad: Philox seed of stochastic rounding (TE's rng_state[0])")
      ->capture_default_str();
  c->add_option("--offset", o->offset,
                "nvfp4 grad: Philox offset of the row-wise cast (TE's rng_state[1]); the column-wise cast takes "
                "the next draw")
      ->capture_default_str();
  c->add_option("--mxfp8-rule", o->mxfp8_rule,
                "mxfp8: E8M0 scale rule: te (round up), ocp (floor) or even (torchao's EVEN)")
      ->capture_default_str();
  c->add_flag("--fnuz", o->fnuz,
              "delayed, current: ROCm TE's FP8 types on MI300 (E4M3FNUZ, E5M2FNUZ) and its cast");
  c->add_flag("--mxfp8-gemms", o->mxfp8_gemms,
              "block: TE's Blackwell conversion for its MXFP8 GEMMs: E8M0 scales on 1 x 32 blocks (uint8 codes)");
  c->add_flag("--swizzle", o->swizzle, "mxfp8, nvfp4, block --mxfp8-gemms: also write the scales in cuBLAS's swizzled layout");
  c->add_option("--backend", o->backend, "Where the cast runs: emulated (the CPU emulator), element (the per-element reference) or cuda (the GPU)")->capture_default_str();
  return {c, [o] { return run_quantize(*o, std::cout, std::cerr); }};
}

const CommandRegistrar registered{42, add_quantize};  // position in `fp8emu --help` (commands.hpp)

}  // namespace
}  // namespace fp8emu::cli
