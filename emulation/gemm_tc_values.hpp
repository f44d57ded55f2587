// Private: the vectorised tensor-core GEMM of fp16, bf16 and tf32 values (the single-step rows of
// core/accumulation.hpp with C in the alignment and the fp32 accumulator: volta-fp16, ampere-,
// ada-, hopper-, blackwell-fp16|bf16|tf32), bit-identical to core::mma_dot for every element it
// computes. Used by emu::gemm_tc_nn and emu::mma_tn_values (emulation/mma.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/core/mma_model.hpp"

namespace fp8emu::emu::detail {

/// Whether gemm_tc_values implements the datapath: one step per block, C joining its alignment,
/// the fp32 accumulator, and a block's product terms summing below 2^31 in magnitude (true for every
/// fp16, bf16 and tf32 row of the table).
bool tc_values_fast_path(const core::MmaDatapath& p);

/// The operand exponents the kernel takes: a row of A or B qualifies when every non-zero element's
/// exponent (clamped at the operand format's emin, as core::decode_operand_term gives it) lies in
/// [tc_values_min_exponent(p), kTcValuesMaxExponent] and K <= kTcValuesMaxK. Within it every scale
/// factor, product and block result of the datapath is a normal fp32 (see the .cpp); the elements
/// of other rows are left to the caller.
int tc_values_min_exponent(const core::MmaDatapath& p);
inline constexpr int kTcValuesMaxExponent = 50;
inline constexpr int kTcValuesMaxK = 1 << 22;
/// The exponent of a zero element (never a block's maximum).
inline constexpr std::int32_t kTcValuesNoExponent = -100000;

/// D [M, N] (row-major) = core::mma_dot(row i of A, row j of B, K, C = +0, p) for every element.
/// a [M, K]: the elements' exact values (0 for zeros, and for every element of a row that does not
/// qualify); ea [M, K]: their clamped exponents (kTcValuesNoExponent for zeros); b, eb [N, K] the
/// same for B. Elements whose row of A or of B does not qualify come out as +0, for the caller to
/// overwrite. Same bits on every instruction-set path (gemm_isa()) and thread count. ea and eb may
/// be null where gemm_tc_values_avx512_takes(p) (that kernel reads the exponents from the values).
void gemm_tc_values(int M, int N, int K, const float* a, const std::int32_t* ea, const float* b,
                    const std::int32_t* eb, const core::MmaDatapath& p, float* D);

/// An operand of the AVX-512 kernel read in place: element (r, t) of row r at x[r * rs + t * ts],
/// rows contiguous (ts = 1) or, for B only, columns contiguous (rs = 1: the [K, N] B of an NN
/// GEMM). Rows with rows_ok[r] == 0 read as zeros (rows_ok null: every row is taken). A taken
/// row's non-zero elements must be finite with exponents in the kernel's range (as for
/// gemm_tc_values); each one's exponent is its fp32 exponent clamped at the format's emin.
struct TcValuesSource {
  const float* x;
  std::size_t rs, ts;
  const unsigned char* rows_ok;
};

/// Whether gemm_tc_values_avx512 takes the datapath on this processor and path: AVX-512 with
/// VPOPCNTDQ, gemm_isa() kAvx512 and gemm_tc_fma512() (FP8EMU_GEMM_TC=int16 picks the 16-lane
/// kernel instead), blocks of 4, 8 or 16.
bool gemm_tc_values_avx512_takes(const core::MmaDatapath& p);

/// gemm_tc_values's AVX-512 kernel (gemm_tc_values512.cpp: fp64 FMAs rounded toward zero, the FP8
/// kernels' method) on operands read in place; D [M, N] row-major, +0 where a row is not taken.
/// Same bits as gemm_tc_values. Throws (an internal error) where gemm_tc_values_avx512_takes is
/// false or a layout is not one of the above.
void gemm_tc_values_avx512(int M, int N, int K, const TcValuesSource& a, const TcValuesSource& b,
                           const core::MmaDatapath& p, float* D);

}  // namespace fp8emu::emu::detail
