// Private: which instruction-set path the CPU GEMM kernels take (gemm_models.cpp, gemm.cpp).
//
// Every path computes the same bits (the tests force each one and compare them with the scalar
// element model, core/dot.hpp); they differ in speed only. The path is picked at run time from what
// the processor supports; FP8EMU_GEMM_ISA=baseline|avx2|avx512 in the environment (read once) or
// set_gemm_isa() (tests) can choose a lower one, never one the processor lacks.
#pragma once

namespace fp8emu::emu::detail {

enum class GemmIsa : int {
  kBaseline = 0,  ///< x86-64 baseline (SSE2), or any non-x86 target: GCC vector extensions.
  kAvx2 = 1,      ///< AVX2 with FMA (the fp32 GEMM's sums stay one rounding per operation; FMAs
                  ///< only where a product is exact: the FP8 GEMMs, the tensor-core kernel).
  kAvx512 = 2,    ///< AVX-512 F/BW/VL/VNNI: the int16 tensor-core kernel and 16-lane fp32 kernel.
};

/// The best path this processor supports.
GemmIsa gemm_isa_supported();
/// The path the kernels take now: FP8EMU_GEMM_ISA or set_gemm_isa(), capped at gemm_isa_supported().
GemmIsa gemm_isa();
/// Chooses the path (capped at what the processor supports); returns the path now in force. Not
/// thread-safe: for tests and benchmarks, between GEMMs.
GemmIsa set_gemm_isa(GemmIsa isa);
/// Whether the AVX-512 tensor-core GEMM packs its operands with AVX-512 VBMI byte permutes (the
/// default where the processor has VBMI) or with per-code tables, one element at a time. Both give
/// the same packed operands; set_gemm_pack_vbmi(false) (tests) forces the tables, and true is capped
/// at what the processor supports. Returns the choice now in force. Not thread-safe, like set_gemm_isa.
bool gemm_pack_vbmi();
bool set_gemm_pack_vbmi(bool on);
/// Which AVX-512 tensor-core kernels run: the FMAs rounded toward zero (needs AVX512_VPOPCNTDQ; the
/// default where the processor has it: gemm_tc_fma512.cpp for the Hopper and Ada models,
/// gemm_tc_values512.cpp for the fp16, bf16 and tf32 rows) or the int16 significand kernel
/// (gemm_tensor_core.cpp) and the 16-lane values kernel (gemm_tc_values.cpp). Same bits;
/// FP8EMU_GEMM_TC=int16|fma in the
/// environment (read once) or set_gemm_tc_fma512() (tests) chooses; true is capped at what the
/// processor supports. Not thread-safe, like set_gemm_isa.
bool gemm_tc_fma512();
bool set_gemm_tc_fma512(bool on);
/// "baseline", "avx2", "avx512".
const char* to_string(GemmIsa isa);

}  // namespace fp8emu::emu::detail
