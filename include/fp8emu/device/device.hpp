/// \file device.hpp
/// \brief The one backend interface: the memory of a backend and the operations of a training step
/// on it (casts, GEMMs, the element work of layers and optimizers).
///
/// A `Device` owns memory (the host's for `cpu_device()` and `element_device()`, the GPU's for
/// `cuda_device()`) and runs every operation of an FP8 or FP32 training step on pointers into it:
/// weights, activations, gradients, amax histories, scales and optimizer state stay there between
/// steps, and only a batch goes in and the per-row losses come out. Each layer's step program
/// (nn::Linear, nn::Norm, the transformer layers, nn::Mlp) is written once on these operations:
/// `cpu_device()` runs it on the CPU, so the program is tested in CI, and `cuda_device()` runs the
/// same program on the GPU.
///
/// Same bits on every device: each operation is defined by the emulator function or the element
/// function of include/fp8emu/core it names, and every implementation computes exactly that
/// (cpu_device() calls them; the GPU kernels map threads onto the same core functions, one element,
/// row or column per thread where an order of additions is fixed).
///
/// Contract of every operation:
///   - Pointers are this device's memory (from `allocate`, or a DeviceTensor of this device), row
///     major and densely packed; outputs do not overlap inputs unless stated.
///   - Operations are ordered: each sees the results of the ones called before it on the same
///     device (the GPU enqueues them on one stream). `download` waits for them.
///   - Sizes: non-negative. A zero size writes nothing, except where the emulator gives an empty
///     reduction a value: a K = 0 GEMM writes D, a cast of no element max-accumulates +0 into
///     *amax, a column sum over no rows writes +0, the current scale of no element is that of
///     amax 0; pointers an operation does not read may then be null.
///   - Errors (bad sizes, a format that is not FP8, a failed CUDA call) throw fp8emu::Error before
///     anything is written.
///   - Determinism: results do not depend on the thread count or the GPU's launch configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/hadamard.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/format/format_spec.hpp"
#include "fp8emu/util/error.hpp"

namespace fp8emu::backend {

/// The nonlinearity of an MLP's hidden layers, as the element functions of core/nn_element.hpp
/// (nn::Activation names the same two).
enum class ActivationOp : std::uint8_t { kReLU, kGELU };

/// LayerNorm or RMSNorm (nn::NormKind names the same two).
enum class NormOp : std::uint8_t { kLayerNorm, kRMSNorm };
/// The activation of a LayerNormMLP (nn::MlpActivation): GELU on [rows, ffn], or SwiGLU on
/// [rows, 2 ffn] = [a | b] giving silu(a) * b.
enum class MlpActOp : std::uint8_t { kGelu, kSwiGlu };

/// The scale of a block-scaled cast: a power of two stored as an E8M0 code (MXFP8; BlockCast::rule
/// rounds it), an fp32 scale (Float8BlockScaling: compute_scale_from_amax with BlockCast::pow2
/// and epsilon), or an E4M3 scale under an fp32 tensor scale from the tensor's amax (NVFP4:
/// core::BlockRule::nvfp4; the views carry the amax).
enum class BlockScaleFormat : std::uint8_t { kE8M0, kFp32, kE4M3 };

/// A block-scaled cast as data: what Device::block_cast makes, whatever recipe asks (the MXFP8 and
/// Float8BlockScaling quantizers fill it in; a new block recipe is new values, or a new field read
/// by the element layer, not a new operation). Elements: `fmt` (an OCP MX element format: FP8, FP6
/// or FP4, one code per byte), satfinite, round to nearest even. One scale per 1 x `block` elements
/// along each view's K, or with `tiles` per `block` x `block` tile of x (one cast gives both views,
/// the column-wise view the transposed tiles; fp32 or E4M3 scales, as Float8BlockScaling's and
/// NVFP4's weights).
struct BlockCast {
  Format fmt = Format::kE4M3;
  int block = 32;      ///< elements per scale along K (1 x block), or the tile side
  bool tiles = false;  ///< block x block tiles instead of 1 x block
  BlockScaleFormat scale = BlockScaleFormat::kE8M0;
  E8M0Rule rule = E8M0Rule::kTransformerEngine;  ///< kE8M0: TE's round-up, OCP's floor or torchao's EVEN
  bool pow2 = true;                              ///< kFp32: power-of-2 scales
  float epsilon = 0.0f;                          ///< kFp32: amax_epsilon
  /// TE NVFP4's random Hadamard transform of the column-wise view (core::rht16_element): that view
  /// is cast from the bf16 RHT of x along its K axis (x's rows, 16 at a time), its amax the
  /// post-transform amax; the row-wise view is cast from x. 1 x block casts only. Rows past the
  /// last whole group of 16 are not transformed (TE requires a multiple of 16; a documented model
  /// choice, which keeps the wgrad product's cancellation: the transform stays orthogonal).
  bool rht_columnwise = false;
  std::uint16_t rht_sign_mask = core::kTeRhtSignMask;  ///< bit i set: sign -1 on row i of the group
  /// Stochastic rounding of the elements (E2M1 only) with TE's Philox stream and TE's map of random
  /// bits to elements (core/philox.hpp): each view from its own (seed, offset).
  bool stochastic_rounding = false;
  std::uint64_t sr_seed = 0, sr_offset_rowwise = 0, sr_offset_columnwise = 0;
  /// TE cast both views in one launch (no Hadamard transform, both copies asked for), so the
  /// row-wise view's stream interleaves the column-wise view's words.
  bool sr_with_transpose = false;

  /// TE's MXFP8: 1 x 32, E8M0 scales by `rule`.
  static BlockCast mxfp8(Format fmt, E8M0Rule rule) {
    BlockCast c;
    c.fmt = fmt;
    c.rule = rule;
    return c;
  }
  /// Float8BlockScaling's: 1 x `block` blocks, or `block` x `block` tiles, fp32 scales.
  static BlockCast fp32_blocks(Format fmt, int block, bool tiles, bool pow2, float epsilon) {
    BlockCast c;
    c.fmt = fmt;
    c.block = block;
    c.tiles = tiles;
    c.scale = BlockScaleFormat::kFp32;
    c.pow2 = pow2;
    c.epsilon = epsilon;
    return c;
  }
  /// TE's NVFP4: `fmt` (E2M1) elements, 1 x 16 blocks (or 16 x 16 tiles: the weights), E4M3 block
  /// scales under an fp32 tensor scale.
  static BlockCast nvfp4(Format fmt, int block, bool tiles) {
    BlockCast c;
    c.fmt = fmt;
    c.block = block;
    c.tiles = tiles;
    c.scale = BlockScaleFormat::kE4M3;
    return c;
  }
  /// The element layer's scale rule of one block (core::block_rule_scale): what every device's
  /// block kernels read. For E4M3 scales the rule's tensor_amax is null: the device points it at
  /// the amax it computes first.
  core::BlockRule block_rule() const {
    switch (scale) {
      case BlockScaleFormat::kE8M0:
        return core::BlockRule::mxfp8(spec_of(fmt), rule);
      case BlockScaleFormat::kE4M3: return core::BlockRule::nvfp4(spec_of(fmt), nullptr);
      case BlockScaleFormat::kFp32: break;
    }
    return core::BlockRule::fp32_scale(spec_of(fmt), pow2, epsilon);
  }
  /// The rule of one view of a cast of x [rows, cols]: block_rule(), with the stream of its
  /// stochastic rounding: the row-wise view (and without the transform the column-wise view, the
  /// launch's transposed copy) from (sr_seed, sr_offset_rowwise) over x; the transformed
  /// column-wise view from (sr_seed, sr_offset_columnwise) over the transformed x^T [cols, rows].
  core::BlockRule view_rule(bool columnwise, int rows, int cols) const {
    core::BlockRule r = block_rule();
    if (!stochastic_rounding) return r;
    r.stochastic = true;
    r.sr.seed = sr_seed;
    if (columnwise && rht_columnwise) {
      r.sr.offset = sr_offset_columnwise;
      r.sr.rows = cols;
      r.sr.cols = rows;
    } else {
      r.sr.offset = sr_offset_rowwise;
      r.sr.rows = rows;
      r.sr.cols = cols;
      r.sr.with_transpose = columnwise || sr_with_transpose;
      r.sr.transposed = columnwise;
    }
    return r;
  }
  /// How errors name the cast: "MXFP8 quantize" (E8M0 scales), "NVFP4 quantize" (E4M3 scales) or
  /// "block quantize".
  const char* what() const {
    return scale == BlockScaleFormat::kE8M0   ? "MXFP8 quantize"
           : scale == BlockScaleFormat::kE4M3 ? "NVFP4 quantize"
                                              : "block quantize";
  }
};

/// One view of a block-scaled operand in device memory, as emu::BlockQuantized holds it: codes
/// [n, k] row-major and scale_inv [n, ceil(k / block)]; null codes: no such view. With E4M3 (NVFP4)
/// scales, scale_inv holds each block's E4M3 scale and `amax` (one float, required then) the
/// tensor amax they sit under.
struct BlockView {
  std::uint8_t* codes = nullptr;
  float* scale_inv = nullptr;
  float* amax = nullptr;
};

/// The checks every device's block_cast makes before any work (same messages everywhere).
/// \throws fp8emu::Error with no view asked for, a block below 1, a negative shape, a format
///         that is not an MX element format, tiles with E8M0 scales, a view of an E4M3-scaled
///         cast without its amax slot, the Hadamard transform with tiles, or stochastic rounding
///         other than TE's (E2M1 in 1 x 16 blocks).
void check_block_cast(const BlockCast& c, int rows, int cols, const BlockView& rowwise, const BlockView& columnwise);

/// The counts of one or more FP8 casts, in device memory: elements cast, saturated (finite values
/// clipped to the format's max and infinities), underflows to zero, NaNs (emu::QuantizeStats).
struct CastCounters {
  std::uint64_t count = 0, saturated = 0, underflow = 0, nan = 0;
};
/// The same counts as emu::QuantizeStats, and back.
inline emu::QuantizeStats stats_of(const CastCounters& c) {
  emu::QuantizeStats s;
  s.count = c.count;
  s.saturated = c.saturated;
  s.underflow = c.underflow;
  s.nan = c.nan;
  return s;
}
inline CastCounters counters_of(const emu::QuantizeStats& s) { return {s.count, s.saturated, s.underflow, s.nan}; }

/// Adam's per-step constants (torch.optim.Adam, bias-corrected), computed on the host as
/// nn::Optimizer computes them: step = lr / (1 - b1^t), sqrt_bc2 = sqrt(1 - b2^t).
struct AdamStep {
  float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, step = 0.0f, sqrt_bc2 = 1.0f;
};

class Device {
 public:
  virtual ~Device() = default;
  /// "cpu", "element" or "cuda".
  virtual const char* name() const = 0;
  /// True when this device's memory is the host's (cpu_device(), element_device()): host pointers
  /// may be passed to every operation, and upload/download are copies within the host.
  virtual bool host_memory() const = 0;

  // ---- memory --------------------------------------------------------------------------------
  /// `bytes` of zero-filled memory (null for 0 bytes). \throws fp8emu::Error when it cannot.
  virtual void* allocate(std::size_t bytes) const = 0;
  /// Frees memory from allocate (null is ignored). Never throws.
  virtual void release(void* p) const noexcept = 0;
  /// Host -> device, device -> host (waits for the operations before it), device -> device.
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) const = 0;
  virtual void download(void* host_dst, const void* src, std::size_t bytes) const = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) const = 0;
  virtual void fill_zero(void* p, std::size_t bytes) const = 0;

  // ---- fp32 linear algebra -------------------------------------------------------------------
  /// emu::gemm_f32_nn: D [M, N] = A [M, K] * B [K, N], every element the fp32-sequential sum (products
  /// rounded to fp32, added in increasing k from 0, no FMA).
  virtual void gemm_f32_nn(int M, int N, int K, const float* A, const float* B, float* D) const = 0;
  /// The GEMM of a BF16 layer (nn::Precision::kBf16): A and B hold bf16 values in fp32 storage (as
  /// round_bf16 leaves them); D [M, N] = gemm_f32_nn(A, B), bit for bit, on every device. Only when
  /// the cuda device's library GEMMs are on (set_library_gemms) does it run cuBLASLt's bf16 GEMM
  /// instead (fp32 accumulation and output, in cuBLASLt's order: not bit-identical).
  virtual void gemm_bf16_nn(int M, int N, int K, const float* A, const float* B, float* D) const = 0;
  /// emu::gemm_tc_nn: D [M, N] = A [M, K] * B [K, N] on a tensor-core row of fp16, bf16 or tf32 input
  /// (A and B hold values of its format in fp32 storage): every element the row's chain of blocks
  /// along K from +0 (core::mma_dot), bit for bit on every device. The GEMM of a bf16 layer with
  /// nn::Linear::set_bf16_accumulation.
  virtual void gemm_tc_nn(int M, int N, int K, const float* A, const float* B, Accumulation model, float* D) const = 0;
  /// emu::transpose of fp32: out [cols, rows] = in [rows, cols]^T.
  virtual void transpose_f32(int rows, int cols, const float* in, float* out) const = 0;

  // ---- FP8 casts and GEMMs with their scales in device memory ---------------------------------
  /// emu::quantize_f32_2d (TE's cast_transpose, common/transpose/cast_transpose.cu: one pass over x
  /// casts each element once) with the scale read from device memory (*scale): codes of RN(x * s)
  /// under __NV_SATFINITE, row-wise [rows, cols] and/or column-wise [cols, rows] (either output may
  /// be null, not both). *amax (nullable) is max-accumulated with max |x| (NaN ignored), as a delayed
  /// scaling cast records into its history's staging row; *counters (nullable) adds this cast's
  /// counts (count = rows * cols).
  virtual void cast_transpose(const float* x, int rows, int cols, const float* scale, Format fmt,
                              std::uint8_t* q_rowwise, std::uint8_t* q_columnwise, float* amax,
                              CastCounters* counters) const = 0;
  /// Current scaling's scale (TE Float8CurrentScalingQuantizer): a = max |x| over n elements (NaN
  /// ignored, emu::compute_amax), *scale = core::compute_scale_from_amax(a, fp8_max, pow2, epsilon,
  /// FLT_MAX) with fp8_max the largest finite value of `fmt`.
  virtual void current_scale(const float* x, std::size_t n, Format fmt, bool pow2, float epsilon,
                             float* scale) const = 0;
  /// The fused delayed-scaling update (TE delayed_scaling.cu kernel_bulk) of every slot of one
  /// recipe state: history [history_len, num_slots] and scale [num_slots] in device memory, updated
  /// in place as core::delayed_update_slot_fused; `scaled_max` = RN(fp8_max * 2^-margin) (host).
  virtual void delayed_update(float* history, float* scale, int num_slots, int history_len, float scaled_max,
                              bool most_recent) const = 0;
  /// emu::gemm_fp8_tn with both scale_inv read from device memory as RN(1 / *scale) (the cast's
  /// scale, emu::scale_inv_of): D [M, N] = RN(acc(A[i, :], B[j, :]) * RN(sia * sib)), A [M, K] and
  /// B [N, K] FP8 codes, any accumulation model.
  virtual void gemm_fp8_tn(int M, int N, int K, const std::uint8_t* A, Format fa, const float* scale_a,
                           const std::uint8_t* B, Format fb, const float* scale_b, const emu::GemmAccumulation& acc,
                           float* D) const = 0;

  /// The block-scaled cast of x [rows, cols] into the row-wise view (n = rows, k = cols) and/or the
  /// column-wise view (n = cols, k = rows, codes transposed), exactly as the quantizers make them:
  /// emu::quantize_mxfp8 / quantize_block_1d with each axis (each view cast independently from x, as
  /// TE's two-axis kernels common/cast/mxfp8/quantize_mxfp8.cuh and
  /// common/transpose/quantize_transpose_vector_blockwise.cu write them; the GPU fuses the two in one
  /// read of x) or emu::quantize_block_2d (the column-wise view the transposed tiles). *counters (nullable) adds
  /// the counts of the row-wise cast when it is made, else the column-wise one's (tiles: the one
  /// cast), as the MXFP8 and block quantizers count. E4M3 (NVFP4) scales: the tensor's amax first
  /// (into each view's amax), then the blocks under it. \throws fp8emu::Error as check_block_cast.
  virtual void block_cast(const BlockCast& c, const float* x, int rows, int cols, BlockView rowwise,
                          BlockView columnwise, CastCounters* counters) const = 0;
  /// emu::gemm_fp8_block_tn: D [M, N] from A [M, K] with sa [M, ceil(K / block)] and B [N, K] with
  /// sb [N, ceil(K / block)], each block's partial (summed from zero under acc.model) added to the
  /// element's fp32 total times RN(sa * sb). NVFP4 operands (amax_a and amax_b, one float each in
  /// device memory; both null for one-level scales): then D = RN(alpha * total) with
  /// core::nvfp4_gemm_alpha. \throws fp8emu::Error for a format that is not an MX element format,
  /// one amax without the other, or as emu::check_block_accumulation (a promotion interval or split-K).
  virtual void gemm_fp8_block_tn(int M, int N, int K, int block, const std::uint8_t* A, Format fa, const float* sa,
                                 const std::uint8_t* B, Format fb, const float* sb, const float* amax_a,
                                 const float* amax_b, const emu::GemmAccumulation& acc, float* D) const = 0;

  /// TE's conversion of Float8BlockScaling's block scales for the MXFP8 GEMM it runs on Blackwell
  /// (pytorch/csrc/extensions/swizzle.cpp convert_block_scaling_to_mxfp8_tensor, kernels in
  /// common/swizzle/swizzle_block_scaling.cu): each power-of-two scale_inv becomes the E8M0 code of
  /// its fp32 exponent field, broadcast to `repeat` consecutive 1 x 32 blocks:
  /// out[r, j] = core::mxfp8_scale_from_block_scale_inv_bits(in[r, j / repeat]) for j < out_blocks,
  /// in [rows, ceil(out_blocks / repeat)], out [rows, out_blocks], fp32 (the GEMM's scale values).
  /// \throws fp8emu::Error for a negative shape or repeat < 1.
  virtual void block_scales_to_mxfp8(const float* in, int rows, int out_blocks, int repeat, float* out) const = 0;

  // ---- per-element work of an MLP step (core/nn_element.hpp) ----------------------------------
  /// y[i, j] += b[j] (fp32 add), y [rows, cols], b [cols].
  virtual void bias_add(float* y, const float* b, int rows, int cols) const = 0;
  /// out[j] = fp32 sum of x[i, j] over i = 0..rows-1 in row order from 0 (core::column_sum).
  virtual void column_sum(const float* x, int rows, int cols, float* out) const = 0;
  /// y[i] = act(x[i]) (core::relu_forward / gelu_tanh_forward); y may equal x.
  virtual void activation_forward(ActivationOp act, const float* x, float* y, std::size_t n) const = 0;
  /// dx[i] *= act'(pre[i]) (core::relu_grad / gelu_tanh_grad).
  virtual void activation_backward(ActivationOp act, const float* pre, float* dx, std::size_t n) const = 0;
  /// Softmax cross-entropy of each row (core::softmax_xent_row): logits [rows, classes], labels
  /// [rows] (each < classes, checked by the caller), loss[i] = the row's fp32 loss term
  /// log(sum exp(z - max)) - (z[y] - max); dlogits [rows, classes] (nullable) = (softmax - onehot) /
  /// divisor.
  virtual void softmax_xent(const float* logits, const std::uint8_t* labels, int rows, int classes, float divisor,
                            float* loss, float* dlogits) const = 0;
  /// Adam (core::adam_element) over n parameters: w, m, v updated in place from g.
  virtual void adam(float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& s) const = 0;
  /// SGD with momentum (core::sgd_momentum_element): m = momentum * m + g; w -= lr * m.
  virtual void sgd(float* w, const float* g, float* m, std::size_t n, float momentum, float lr) const = 0;

  // ---- per-element work of a transformer step (core/nn_element.hpp, core/attention.hpp) ------
  /// out[i] = a[i] + b[i] (fp32); out may be a or b.
  virtual void add(const float* a, const float* b, float* out, std::size_t n) const = 0;
  /// x[i] = x[i] rounded to bfloat16 (RNE, core::f32_bits_to_bf16_rne), kept as fp32.
  virtual void round_bf16(float* x, std::size_t n) const = 0;
  /// x[i] = x[i] rounded to tf32 (round to nearest, ties away: core::f32_bits_to_tf32_rna), kept as
  /// fp32: the operands of a layer on a tf32 tensor core (nn::Linear::set_fp32_accumulation).
  virtual void round_tf32(float* x, std::size_t n) const = 0;
  /// Norm::forward (training) of each row of x [rows, cols] (core::norm_forward_row): y [rows, cols]
  /// (may be x), xhat [rows, cols] and rsigma [rows] for the backward; gamma, beta [cols] (beta unread
  /// for RMSNorm).
  virtual void norm_forward(NormOp op, const float* x, int rows, int cols, const float* gamma, const float* beta,
                            float eps, bool zero_centered_gamma, float* y, float* xhat, float* rsigma) const = 0;
  /// Norm::backward: dx [rows, cols] per row (core::norm_backward_row) and the parameter gradients
  /// per column (core::norm_param_grad_column): grad_gamma [cols] and, for LayerNorm, grad_beta
  /// [cols] (RMSNorm writes zeros there, as nn::Norm).
  virtual void norm_backward(NormOp op, const float* dy, const float* xhat, const float* rsigma, int rows, int cols,
                             const float* gamma, bool zero_centered_gamma, float* dx, float* grad_gamma,
                             float* grad_beta) const = 0;
  /// LayerNormMLP's activation: act [rows, ffn] from h [rows, ffn] (GELU, core::gelu_tanh_forward)
  /// or h [rows, 2 ffn] (SwiGLU of h[:, j] and h[:, ffn + j], core::swiglu_forward).
  virtual void mlp_act_forward(MlpActOp op, const float* h, int rows, int ffn, float* act) const = 0;
  /// Its backward: dh (the shape of h) from h and da [rows, ffn] (core::gelu_tanh_grad times da;
  /// core::swiglu_backward).
  virtual void mlp_act_backward(MlpActOp op, const float* h, const float* da, int rows, int ffn, float* dh) const = 0;
  /// DotProductAttention::forward, causal (each query row sees the keys up to its own) or not (every
  /// key), per sequence b < B, head h < H and query row i < T (core::attention_row_forward): qkv
  /// [B*T, 3*H*d] ([Q | K | V], head h at columns h*d), out [B*T, H*d], probs [B*H*T, T] (row
  /// (b*H + h)*T + i) kept for the backward; scale 1/sqrt(d).
  virtual void attention_forward(const float* qkv, int B, int T, int H, int d, float scale, bool causal, float* out,
                                 float* probs) const = 0;
  /// DotProductAttention::backward: dqkv [B*T, 3*H*d] (overwritten) from dout [B*T, H*d], with ds
  /// [B*H*T, T] as scratch (core::attention_row_backward_q per query row, then
  /// core::attention_col_backward_kv per key row).
  virtual void attention_backward(const float* qkv, const float* probs, const float* dout, int B, int T, int H,
                                  int d, float scale, bool causal, float* ds, float* dqkv) const = 0;
  /// Token plus position embedding: x[r, :] = tok[tokens[r], :] + pos[r mod T, :], r < rows, width D.
  virtual void embed_forward(const std::uint8_t* tokens, int rows, int T, const float* tok, const float* pos, int D,
                             float* x) const = 0;
  /// Its backward: grad_tok [V, D] and grad_pos [P, D] set to zero, then each row r of dx [rows, D]
  /// added to grad_tok[tokens[r]] and grad_pos[r mod T], in row order (fp32).
  virtual void embed_backward(const std::uint8_t* tokens, int rows, int T, const float* dx, int D, int V, int P,
                              float* grad_tok, float* grad_pos) const = 0;
};

/// The argument checks of Device::cast_transpose (and of the CUDA library's) that every backend
/// shares: an FP8 format, a non-negative shape, at least one output; messages as emu::.
void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise);

/// The host: every operation runs the emulator (emulation/, SIMD and OpenMP) or the core element
/// functions on host memory. Always available.
const Device& cpu_device();

/// The reference: cpu_device() with its FP8 casts and GEMMs (cast_transpose, current_scale,
/// block_cast, gemm_fp8_tn, gemm_fp8_block_tn) run by the element layer of include/fp8emu/core on
/// one thread, in the decomposition the CUDA kernels use (per element, per block, per tile; amax as
/// a max of bits; counts as sums). The oracle against which the emulator's SIMD paths are tested.
/// Slow: for checks, not for training.
const Device& element_device();

/// The GPU of the `cuda` backend (the device chosen by set_cuda_device_slot), its operations on one
/// stream. \throws fp8emu::Error (with CudaStatus::why_not()) when the cuda backend cannot run.
const Device& cuda_device();

/// The speed-baseline switch of cuda_device(): on, its gemm_f32_nn runs cuBLASLt's fp32 GEMM
/// (CUBLAS_COMPUTE_32F) and gemm_bf16_nn cuBLASLt's bf16 GEMM (fp32 output), both NN on the
/// row-major operands as they are, instead of the exact
/// per-element kernel, as a user's FP32 or BF16 training would; their sums are in cuBLASLt's
/// undocumented order, so results are NOT bit-identical to the emulator. Used by `fp8emu bench gpu`
/// to time FP32 and BF16 steps against FP8 on the same library. FP8 GEMMs are unaffected (cuBLASLt
/// where it is exact, as always). Off by default; the environment variable
/// FP8EMU_DEVICE_GEMM=library turns it on at start. No effect on cpu_device(), nor without CUDA.
/// Thread-safe; takes effect for GEMMs enqueued after the call.
void set_library_gemms(bool on);
bool library_gemms();
/// How many GEMMs the switch could not send to cuBLASLt (it refused the shape or alignment) and the
/// exact kernel computed instead, since the process started. Always 0 without CUDA.
unsigned long long library_gemm_fallbacks();

/// An fp32 GEMM of another library for cpu_device()'s speed baseline: D [M, N] = A [M, K] B [K, N],
/// all row-major.
using CpuLibraryGemm = void (*)(int M, int N, int K, const float* A, const float* B, float* D);
/// The speed-baseline switch of cpu_device(): when set, its gemm_f32_nn and gemm_bf16_nn call `gemm`
/// (an optimized BLAS's SGEMM, as a user's FP32 or BF16 training on the CPU would) instead of the
/// exact kernel: its sums are in that library's order, so results are NOT bit-identical to the
/// emulator. Used by `fp8emu bench lm` (with OpenBLAS) to time FP32 and BF16 steps against FP8. FP8
/// and tensor-core GEMMs, element_device() and the cuda device are unaffected; nullptr (the
/// default) switches it off. Thread-safe; takes effect for GEMMs called after it.
void set_cpu_library_gemm(CpuLibraryGemm gemm);
CpuLibraryGemm cpu_library_gemm();

/// `count` elements of T in a Device's memory, freed on destruction; move-only. Shape [rows, cols]
/// (a vector is [1, n]). Zero-filled when made.
template <class T>
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const Device& d, int rows, int cols)
      : dev_(&d),
        rows_(rows),
        cols_(cols),
        p_(static_cast<T*>(d.allocate(std::size_t(rows) * std::size_t(cols) * sizeof(T)))) {}
  ~DeviceTensor() {
    if (dev_) dev_->release(p_);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& o) noexcept
      : dev_(std::exchange(o.dev_, nullptr)),
        rows_(std::exchange(o.rows_, 0)),
        cols_(std::exchange(o.cols_, 0)),
        p_(std::exchange(o.p_, nullptr)) {}
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    if (this != &o) {
      if (dev_) dev_->release(p_);
      dev_ = std::exchange(o.dev_, nullptr);
      rows_ = std::exchange(o.rows_, 0);
      cols_ = std::exchange(o.cols_, 0);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  T* get() const { return p_; }
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  std::size_t size() const { return std::size_t(rows_) * std::size_t(cols_); }
  std::size_t bytes() const { return size() * sizeof(T); }
  /// Copies size() elements from / to host memory.
  void upload(const T* host) const { dev_->upload(p_, host, bytes()); }
  void download(T* host) const { dev_->download(host, p_, bytes()); }
  /// Copies the first n <= size() elements from host memory. \throws fp8emu::Error when n > size().
  void upload(const T* host, std::size_t n) const {
    FP8EMU_CHECK(n <= size(), "device tensor: upload of ", n, " elements into ", size());
    dev_->upload(p_, host, n * sizeof(T));
  }

 private:
  const Device* dev_ = nullptr;
  int rows_ = 0, cols_ = 0;
  T* p_ = nullptr;
};

}  // namespace fp8emu::backend
