// Backend selection and the emulated kernel set (see include/fp8emu/backend/kernels.hpp).
#include "fp8emu/backend/kernels.hpp"

#include <ostream>
#include <sstream>

#include "fp8emu/emulation/bulk_convert.hpp"
#include "fp8emu/emulation/gemm.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

Kind parse_kind(const std::string& s) {
  if (s == "reference") return Kind::kReference;
  if (s == "emulated") return Kind::kEmulated;
  if (s == "cuda") return Kind::kCuda;
  FP8EMU_FAIL("unknown backend '", s, "' (expected reference, emulated or cuda)");
}

const char* to_string(Kind k) {
  switch (k) {
    case Kind::kReference: return "reference";
    case Kind::kEmulated: return "emulated";
    case Kind::kCuda: return "cuda";
  }
  return "?";
}

namespace {

class EmulatedKernels final : public Kernels {
 public:
  const char* name() const override { return "emulated"; }
  float compute_amax(const float* x, std::size_t n) const override { return emu::compute_amax(x, n); }
  emu::QuantizeStats quantize(const float* x, std::size_t n, float scale, Format fmt, std::uint8_t* q,
                              float* amax) const override {
    return emu::quantize(x, n, scale, fmt, q, amax);
  }
  void dequantize(const std::uint8_t* q, std::size_t n, float scale_inv, Format fmt, float* y) const override {
    emu::dequantize(q, n, scale_inv, fmt, y);
  }
  void transpose(int rows, int cols, const std::uint8_t* in, std::uint8_t* out) const override {
    emu::transpose(rows, cols, in, out);
  }
  emu::QuantizeStats cast_transpose(const float* x, int rows, int cols, float scale, Format fmt,
                                    std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax) const override {
    check_cast_transpose(rows, cols, fmt, q_rowwise, q_columnwise);
    emu::QuantizeStats st;
    emu::quantize_f32_2d(x, std::size_t(rows), std::size_t(cols), scale, fmt, q_rowwise, q_columnwise, amax, &st);
    return st;
  }
  void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a, const std::uint8_t* B,
                   Format fb, float scale_inv_b, const emu::GemmAccumulation& acc, float* D) const override {
    emu::gemm_fp8_tn(M, N, K, A, fa, scale_inv_a, B, fb, scale_inv_b, acc, D);
  }
  emu::BlockQuantized quantize_mxfp8(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                     E8M0Rule rule, emu::QuantizeStats* stats) const override {
    return emu::quantize_mxfp8(x, rows, cols, axis, fmt, rule, stats);
  }
  emu::BlockQuantized quantize_block_1d(const float* x, int rows, int cols, emu::BlockAxis axis, Format fmt,
                                        int block, bool pow2, float epsilon,
                                        emu::QuantizeStats* stats) const override {
    return emu::quantize_block_1d(x, rows, cols, axis, fmt, block, pow2, epsilon, stats);
  }

  emu::BlockQuantized2D quantize_block_2d(const float* x, int rows, int cols, Format fmt, int tile, bool pow2,
                                          float epsilon, emu::QuantizeStats* stats) const override {
    return emu::quantize_block_2d(x, rows, cols, fmt, tile, pow2, epsilon, stats);
  }
  void gemm_fp8_block_tn(const emu::BlockQuantized& A, const emu::BlockQuantized& B, float* D) const override {
    emu::gemm_fp8_block_tn(A, B, D);
  }
};

}  // namespace

void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise) {
  emu::require_fp8(fmt, "cast_transpose");
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "cast_transpose: negative shape [", rows, ", ", cols, "]");
  FP8EMU_CHECK(q_rowwise || q_columnwise, "cast_transpose: both the row-wise and the column-wise output are null");
}

// The two single-axis casts: the definition of the fused casts' result (the emulated set's, each
// one cache-friendly pass of the emulator, and the element set's, the reference the GPU's fused
// kernels are checked against).
void Kernels::quantize_mxfp8_both(const float* x, int rows, int cols, Format fmt, E8M0Rule rule,
                                  emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                  emu::QuantizeStats* rowwise_stats, emu::QuantizeStats* columnwise_stats) const {
  check_block_both("MXFP8 quantize", rowwise, columnwise);
  if (rowwise) *rowwise = quantize_mxfp8(x, rows, cols, emu::BlockAxis::kRowwise, fmt, rule, rowwise_stats);
  if (columnwise)
    *columnwise = quantize_mxfp8(x, rows, cols, emu::BlockAxis::kColumnwise, fmt, rule, columnwise_stats);
}

void Kernels::quantize_block_1d_both(const float* x, int rows, int cols, Format fmt, int block, bool pow2,
                                     float epsilon, emu::BlockQuantized* rowwise, emu::BlockQuantized* columnwise,
                                     emu::QuantizeStats* rowwise_stats, emu::QuantizeStats* columnwise_stats) const {
  check_block_both("block quantize", rowwise, columnwise);
  if (rowwise)
    *rowwise = quantize_block_1d(x, rows, cols, emu::BlockAxis::kRowwise, fmt, block, pow2, epsilon, rowwise_stats);
  if (columnwise)
    *columnwise =
        quantize_block_1d(x, rows, cols, emu::BlockAxis::kColumnwise, fmt, block, pow2, epsilon, columnwise_stats);
}

void check_block_both(const char* what, const emu::BlockQuantized* rowwise, const emu::BlockQuantized* columnwise) {
  FP8EMU_CHECK(rowwise || columnwise, what, ": both the row-wise and the column-wise output are null");
}

const Kernels& emulated_kernels() {
  static const EmulatedKernels k;
  return k;
}

bool CudaStatus::usable() const {
  if (!built) return false;
  for (const GpuInfo& g : gpus)
    if (g.fp8_mma()) return true;
  return false;
}

std::string CudaStatus::why_not() const {
  if (usable()) return "";
  if (!built)
    return "this fp8emu was built without CUDA (nvcc was not found when it was configured); install the CUDA "
           "toolkit (12.1 or newer) and reconfigure with -DFP8EMU_ENABLE_CUDA=ON";
  if (driver_version == 0)
    return "no NVIDIA driver was found (" + (error.empty() ? std::string("cudaDriverGetVersion gave 0") : error) +
           "); install the NVIDIA driver and run on a machine with an sm_89+ GPU";
  if (gpus.empty())
    return "the NVIDIA driver sees no GPU (" + (error.empty() ? std::string("cudaGetDeviceCount gave 0") : error) +
           "); check CUDA_VISIBLE_DEVICES and nvidia-smi";
  std::ostringstream os;
  os << "no GPU supports FP8 (compute capability 8.9 or newer is needed; found";
  for (const GpuInfo& g : gpus) os << " " << g.name << " sm_" << g.cc_major << g.cc_minor;
  os << "); run on an Ada (sm_89), Hopper (sm_90) or newer GPU";
  return os.str();
}

const CudaStatus& cuda_status() {
#if defined(FP8EMU_HAVE_CUDA)
  static const CudaStatus s = cuda::probe();
#else
  static const CudaStatus s;  // built = false: why_not() says how to get a CUDA build
#endif
  return s;
}

const Kernels& cuda_kernels() {
  const CudaStatus& s = cuda_status();
  FP8EMU_CHECK(s.usable(), "the cuda backend cannot run: ", s.why_not());
#if defined(FP8EMU_HAVE_CUDA)
  return cuda::kernels();
#else
  FP8EMU_FAIL("this fp8emu was built without CUDA");  // unreachable: usable() is false
#endif
}

void set_cuda_device_slot(int slot) {
#if defined(FP8EMU_HAVE_CUDA)
  cuda::set_device_slot(slot);
#else
  (void)slot;
#endif
}

std::string describe(const std::vector<Kind>& kinds, const std::vector<std::string>& layer_names) {
  std::string out;
  for (std::size_t i = 0; i < kinds.size() && i < layer_names.size(); ++i)
    out += (out.empty() ? "" : ",") + layer_names[i] + "=" + to_string(kinds[i]);
  return out;
}

const Kernels& kernels_of(Kind k) {
  FP8EMU_CHECK(k != Kind::kReference, "the reference backend runs FP32 and has no FP8 kernels");
  return k == Kind::kCuda ? cuda_kernels() : emulated_kernels();
}

std::vector<Kind> parse_layer_backends(const std::string& spec, const std::vector<std::string>& layer_names,
                                       Kind fallback_default) {
  std::vector<Kind> kinds(layer_names.size(), fallback_default);
  if (spec.find('=') == std::string::npos) {
    std::fill(kinds.begin(), kinds.end(), parse_kind(spec));
    return kinds;
  }
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t eq = item.find('=');
    FP8EMU_CHECK(eq != std::string::npos && eq > 0, "--backend: expected name=kind, got '", item, "'");
    const std::string name = item.substr(0, eq);
    std::size_t i = 0;
    while (i < layer_names.size() && layer_names[i] != name) ++i;
    if (i == layer_names.size()) {
      std::string valid;
      for (const std::string& n : layer_names) valid += (valid.empty() ? "" : ", ") + n;
      FP8EMU_FAIL("--backend: unknown layer '", name, "' (this model's layers are ", valid, ")");
    }
    kinds[i] = parse_kind(item.substr(eq + 1));
  }
  return kinds;
}

std::vector<Kind> resolve(std::vector<Kind> kinds, bool strict, std::ostream& log) {
  bool wants_cuda = false;
  for (Kind k : kinds) wants_cuda |= k == Kind::kCuda;
  if (!wants_cuda || cuda_status().usable()) return kinds;
  const std::string why = cuda_status().why_not();
  FP8EMU_CHECK(!strict, "--backend cuda cannot run (--strict): ", why);
  log << "fp8emu: the cuda backend cannot run, using the bit-exact CPU emulator (emulated) instead: " << why
      << " (`fp8emu doctor` shows the details; --strict makes this an error)\n";
  for (Kind& k : kinds)
    if (k == Kind::kCuda) k = Kind::kEmulated;
  return kinds;
}

}  // namespace fp8emu::backend
