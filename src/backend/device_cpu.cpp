// backend::cpu_device(): the host-memory Device running the emulator (cpu_device.hpp), and its
// speed-baseline switch (set_cpu_library_gemm).
#include <atomic>

#include "cpu_device.hpp"

namespace fp8emu::backend {
namespace {

std::atomic<CpuLibraryGemm> library_gemm{nullptr};

// The emulator's device, whose fp32 and bf16 GEMMs another library may run (set_cpu_library_gemm).
class EmulatedDevice final : public detail::CpuDevice {
 public:
  EmulatedDevice() : CpuDevice("cpu") {}
  void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    const CpuLibraryGemm gemm = library_gemm.load(std::memory_order_relaxed);
    if (gemm && M > 0 && N > 0 && K > 0) return gemm(M, N, K, A, B, D);
    CpuDevice::gemm_f32_nn(M, N, K, A, B, D);
  }
  void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const override {
    gemm_f32_nn(M, N, K, A, B, D);
  }
};

}  // namespace

void set_cpu_library_gemm(CpuLibraryGemm gemm) { library_gemm.store(gemm); }
CpuLibraryGemm cpu_library_gemm() { return library_gemm.load(); }

const Device& cpu_device() {
  static const EmulatedDevice d;
  return d;
}

}  // namespace fp8emu::backend
