// Backend selection: the kinds of `--backend`, the CUDA probe's verdict, the per-layer spec and the
// fallback (see include/fp8emu/backend/select.hpp).
#include "fp8emu/backend/select.hpp"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/util/enum_names.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

namespace {
constexpr EnumName<Kind> kKindNames[] = {
    {Kind::kReference, "reference"}, {Kind::kEmulated, "emulated"}, {Kind::kCuda, "cuda"}};
}  // namespace

Kind parse_kind(const std::string& s) { return parse_enum(kKindNames, s, "backend"); }

const char* to_string(Kind k) { return enum_name(kKindNames, k); }

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

const Device& device_of(Kind k) {
  FP8EMU_CHECK(k != Kind::kReference, "the reference backend runs FP32 and has no FP8 device");
  return k == Kind::kCuda ? cuda_device() : cpu_device();
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
  std::vector<bool> named(layer_names.size(), false);
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
    FP8EMU_CHECK(!named[i], "--backend: layer '", name, "' is named twice");
    named[i] = true;
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
