// See gemm_isa.hpp.
#include "gemm_isa.hpp"

#include "gemm_tc_chain.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace fp8emu::emu::detail {
namespace {

GemmIsa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    return GemmIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::kAvx2;  // the kernels use FMAs
#endif
  return GemmIsa::kBaseline;
}

GemmIsa cap(GemmIsa isa) { return int(isa) < int(gemm_isa_supported()) ? isa : gemm_isa_supported(); }

GemmIsa initial() {
  const char* env = std::getenv("FP8EMU_GEMM_ISA");
  if (env) {
    if (std::strcmp(env, "baseline") == 0) return cap(GemmIsa::kBaseline);
    if (std::strcmp(env, "avx2") == 0) return cap(GemmIsa::kAvx2);
  }
  return gemm_isa_supported();  // also for "avx512" and anything else
}

std::atomic<int>& current() {
  static std::atomic<int> isa{int(initial())};
  return isa;
}

}  // namespace

GemmIsa gemm_isa_supported() {
  static const GemmIsa supported = detect();
  return supported;
}

namespace {
bool vbmi_supported() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool v = [] {
    __builtin_cpu_init();
    return gemm_isa_supported() == GemmIsa::kAvx512 && __builtin_cpu_supports("avx512vbmi");
  }();
  return v;
#else
  return false;
#endif
}
std::atomic<bool>& pack_vbmi() {
  static std::atomic<bool> on{vbmi_supported()};
  return on;
}
}  // namespace

bool gemm_pack_vbmi() { return pack_vbmi().load(std::memory_order_relaxed); }

bool set_gemm_pack_vbmi(bool on) {
  pack_vbmi().store(on && vbmi_supported(), std::memory_order_relaxed);
  return gemm_pack_vbmi();
}

namespace {
std::atomic<bool>& tc_fma512() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("FP8EMU_GEMM_TC");
    return !(env && std::strcmp(env, "int16") == 0) && gemm_tc_fma_avx512_supported();
  }()};
  return on;
}
}  // namespace

bool gemm_tc_fma512() {
  return gemm_isa_supported() == GemmIsa::kAvx512 && tc_fma512().load(std::memory_order_relaxed);
}

bool set_gemm_tc_fma512(bool on) {
  tc_fma512().store(on && gemm_tc_fma_avx512_supported(), std::memory_order_relaxed);
  return gemm_tc_fma512();
}

GemmIsa gemm_isa() { return GemmIsa(current().load(std::memory_order_relaxed)); }

GemmIsa set_gemm_isa(GemmIsa isa) {
  current().store(int(cap(isa)), std::memory_order_relaxed);
  return gemm_isa();
}

const char* to_string(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kBaseline: return "baseline";
    case GemmIsa::kAvx2: return "avx2";
    case GemmIsa::kAvx512: return "avx512";
  }
  return "baseline";
}

}  // namespace fp8emu::emu::detail
