// Compiles the shared integer-only core (include/fp8emu/core) as device code, so every build with
// nvcc proves that the CPU emulator's arithmetic is also valid CUDA. The kernel converts a buffer
// with the same function the CPU kernels call; GPU-vs-emulator tests come with the CUDA backend.
#include <cstdint>

#include "fp8emu/core/convert.hpp"

namespace fp8emu::cuda {

__global__ void core_encode_decode_kernel(const float* x, std::uint8_t* q4, std::uint8_t* q5,
                                          float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  q4[i] = core::f32_to_fp8(x[i], kSpecE4M3, Saturation::kSatFinite);
  q5[i] = core::f32_to_fp8(x[i], kSpecE5M2, Saturation::kNoSat);
  back[i] = core::fp8_to_f32(q4[i], kSpecE4M3);
}

}  // namespace fp8emu::cuda

// The CUDA mirror API and the general encoder (nv.hpp, core/encode.hpp, core/e8m0.hpp,
// core/half.hpp) as device code: one conversion of each family per element.
#include "fp8emu/nv.hpp"

namespace fp8emu::cuda {

__global__ void nv_mirror_kernel(const float* x, const double* d, std::uint8_t* out, std::uint16_t* half,
                                 int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  namespace m = fp8emu::nv;
  out[6 * i + 0] = m::cvt_double_to_fp8(d[i], m::Saturation::kNoSat, m::Fp8Interpretation::kE5M2);
  out[6 * i + 1] = m::cvt_float_to_fp6(x[i], m::Fp6Interpretation::kE2M3, m::RoundMode::kZero);
  out[6 * i + 2] = m::cvt_double_to_fp4(d[i], m::Fp4Interpretation::kE2M1, m::RoundMode::kNearest);
  out[6 * i + 3] = m::cvt_double_to_e8m0(d[i], m::Saturation::kSatFinite, m::RoundMode::kPosInf);
  out[6 * i + 4] = core::encode_f32_bits_with(core::f32_to_bits(x[i]), kSpecE4M3FNUZ,
                                              Policy{Rounding::kStochastic, Overflow::kNoSat, NanEncoding::kSigned},
                                              std::uint32_t(i) * 2654435761u);
  out[6 * i + 5] = m::cvt_bfloat16raw_to_fp8(half[i], m::Saturation::kSatFinite, m::Fp8Interpretation::kE4M3);
  half[i] = m::cvt_fp6_to_halfraw(out[6 * i + 1], m::Fp6Interpretation::kE2M3);
}

}  // namespace fp8emu::cuda

// The correctly rounded fp32 exp, log and tanh (core/fp32_math.hpp) as device code: the functions
// the nn layers' softmax, sigmoid, GELU and cross-entropy call, so a GPU twin of those layers gives
// the CPU's bits. Binary64 arithmetic only (no FMA under --fmad=false) and the double -> float
// conversion __double2float_rn: the same operations, rounded the same way, as on the host.
#include "fp8emu/core/fp32_math.hpp"

namespace fp8emu::cuda {

__global__ void core_fp32_math_kernel(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[3 * i + 0] = core::exp_rn(x[i]);
  out[3 * i + 1] = core::log_rn(x[i]);
  out[3 * i + 2] = core::tanh_rn(x[i]);
}

}  // namespace fp8emu::cuda

// The nn layers' element functions (core/nn_element.hpp) as device code: activations, SwiGLU, the
// cross-entropy row, the optimizer steps, the bias column sum, the fused delayed-scaling update and
// the norms' rows, the functions the CPU layers call, so a GPU kernel of a layer gives the CPU's bits.
#include "fp8emu/core/nn_element.hpp"

namespace fp8emu::cuda {

// scaled_max: the fused update's RN(fp8_max * 2^-margin), from the host (scaling::fused_scaled_max).
__global__ void core_nn_element_kernel(const float* x, float* out, int n, float scaled_max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float w = x[i], m = 0.0f, v = 0.0f, da = 0.0f, db = 0.0f;
  out[8 * i + 0] = core::relu_forward(x[i]) + core::relu_grad(x[i]);
  out[8 * i + 1] = core::gelu_tanh_forward(x[i]) + core::gelu_tanh_grad(x[i]);
  core::swiglu_backward(x[i], 0.5f, 1.0f, da, db);
  out[8 * i + 2] = core::swiglu_forward(x[i], 0.5f) + da + db;
  core::adam_element(w, 0.1f, m, v, 0.9f, 0.999f, 0.01f, 0.0316f, 1e-8f);
  core::sgd_momentum_element(w, 0.1f, m, 0.9f, 0.01f);
  out[8 * i + 3] = w;
  if (i == 0) {
    out[8 * i + 4] = core::softmax_xent_row(x, n, 0, float(n), out + 8 * n);
    out[8 * i + 5] = core::column_sum(x, n, 1, 0);
    float scale = 1.0f;
    core::delayed_update_slot_fused(out + 8 * n, 1, n, 0, &scale, scaled_max, false);
    out[8 * i + 6] = scale;
    float* row = out + 9 * n;
    const float rs = core::norm_forward_row(x, n, true, 1e-5f, x, x, true, row, row + n);
    core::norm_backward_row(x, row + n, rs, n, false, x, false, row + 2 * n);
    float dg = 0.0f, db = 0.0f;
    core::norm_param_grad_column(x, row + n, n, 1, 0, dg, db);
    out[8 * i + 7] = dg + db + core::bias_add(rs, 1.0f);
  }
}

}  // namespace fp8emu::cuda
