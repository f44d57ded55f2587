/// \file linear.hpp
/// \brief Linear layer y = x W^T + b in FP32 or in emulated FP8 under any of TE's four recipes.
///
/// FP8 mode mirrors TE `pytorch/module/linear.py` (_Linear forward/backward); see
/// docs/transformer-engine.md §Delayed scaling to §Linear. All three GEMMs take FP8
/// operands: fprop y = x W^T + bf16(b) (TE casts an fp32 bias to bf16 for the FP8 GEMM's epilogue;
/// the add in fp32), dgrad dx = dy W, wgrad dW = dy^T x; db is the batch sum of the
/// fp32 dy (TE computes the bias grad from the unquantized gradient). Master weights, bias and all
/// gradients are fp32. Formats: x and W in the recipe's forward format (E4M3), dy in its backward
/// format (E5M2 under HYBRID). Every cast is CUDA __NV_SATFINITE with round-to-nearest-even.
///  - delayed: per-tensor scales from the layer's DelayedScalingState; casts max-accumulate amax into
///    the slot's history row 0; scale_inv = RN(1/scale). TE slots: forward {input 0, weight 1,
///    output 2}, backward {grad_output 0, grad_input 1}; output and grad_input are never cast, so
///    their amax stays 0 and they never roll. Scales change only in update_*_scales().
///  - current: per-tensor scale = compute_scale_from_amax(amax of this tensor) at cast time.
///  - mxfp8: 32-element E8M0 blocks along each GEMM's K dim, row- and column-wise copies quantized
///    independently from the fp32 tensor (x: row-wise for fprop, column-wise for wgrad; W: row-wise
///    for fprop, column-wise for dgrad; dy: row-wise for dgrad, column-wise for wgrad).
///  - block: 1x128 blocks for x and dy (both directions), one 128x128 tile grid for W; fp32 scales
///    (power of two by default).
/// Per-tensor GEMMs take an accumulation model each (emu::gemm_models.hpp; default TE's choice on
/// Hopper, see set_accumulation); block-scaled GEMMs: emu::gemm_fp8_block_tn (fp32 accumulation).
///
/// The layer holds a forward and a backward scaling::Quantizer made by scaling::make_quantizer
/// (TE's RecipeState: one for the forward pass, one for the backward) and asks them for every
/// cast; the GEMMs are scaling::gemm_tn of the quantized operands. It has no recipe-specific code:
/// a new recipe is a new quantizer (scaling/quantizer.hpp).
///
/// One step program, on one backend::Device (device(), cpu_device() by default): every cast, GEMM
/// and element operation of forward and backward is a Device operation, whatever the precision.
/// Where the parameters live is a property of the storage, not of the class: in the Matrix fields
/// (host memory) by default, or in the device's memory after to_device(), where device-resident
/// models (Mlp::to_device, the transformer layers, the char-LM) keep them between steps and call the
/// pointer form of forward/backward. A host layer on a device of its own memory (`--backend cuda`
/// per layer) uploads what each call reads and downloads what it writes.
///
/// Determinism: bit-identical results for any OpenMP thread count and on every device.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/backend/device.hpp"
#include "fp8emu/emulation/gemm_models.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/nn/device_param.hpp"
#include "fp8emu/nn/matrix.hpp"
#include "fp8emu/scaling/delayed_scaling.hpp"
#include "fp8emu/scaling/quantizer.hpp"
#include "fp8emu/scaling/recipe.hpp"

namespace fp8emu::nn {

/// Arithmetic of a layer.
enum class Precision : std::uint8_t {
  kFp32,  ///< Reference: fp32 GEMMs.
  kFp8,   ///< Emulated FP8 GEMMs under the layer's recipe.
  /// The BF16 baseline, as a bf16 autocast runs a Linear: the GEMM operands (x, W, dy) rounded to
  /// bf16 (round-to-nearest-even, core::f32_bits_to_bf16_rne), the products and sums of the fp32
  /// GEMM (emu::gemm_f32_nn's fp32-sequential order; bf16 products are exact in fp32 except at
  /// fp32's range limits), the bias added in fp32, then y and dx rounded to bf16; dW stays fp32 (TE's
  /// fp32 main_grad) and db is the fp32 column sum of the unrounded dy. fp8emu's own model of a bf16
  /// layer, bit-identical on every backend; a GPU library's bf16 GEMM sums in an order it does not
  /// document, so it is not claimed equal to cuBLAS.
  kBf16,
};
/// "fp32", "fp8" or "bf16".
const char* precision_name(Precision p);

/// Counts of what the FP8 casts of one layer did, per tensor role (for block recipes, the row-wise
/// cast of each tensor, the one fprop or dgrad uses).
struct LinearFp8Stats {
  emu::QuantizeStats input, weight, grad_output;
};

/// Output error of an FP8 layer against its FP32 twin fed the same input (see Linear::twin_error).
struct TwinError {
  double err = 0.0;  ///< sum((y - y_fp32)^2)
  double ref = 0.0;  ///< sum(y_fp32^2)
};

class Linear {
 public:
  static constexpr int kInput = 0, kWeight = 1, kOutput = 2;  ///< TE forward slots.
  static constexpr int kGradOutput = 0, kGradInput = 1;       ///< TE backward slots.

  /// \throws fp8emu::Error for non-positive sizes or an invalid recipe.
  Linear(int in_features, int out_features, Precision precision,
         const scaling::Recipe& recipe = scaling::DelayedScaling{});
  /// Copies weights, gradients, settings and the quantizers' state (the quantizers are cloned).
  Linear(const Linear& o);
  Linear& operator=(const Linear& o);
  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;
  ~Linear() = default;

  /// torch.nn.Linear's default init: W and b uniform in [-1/sqrt(in), 1/sqrt(in)). Also gives the
  /// quantizers their stochastic-rounding stream (Quantizer::seed_rounding) from rng's next output,
  /// peeked without drawing it, so W and b are the same for every recipe.
  void init(Rng& rng);

  /// y = x W^T + b. \param x Shape: [batch, in]. \param y Shape: [batch, out] (resized).
  /// \param training  true: keep what backward needs. Delayed-scaling casts record amax in both
  ///                  cases (as TE under no_grad); scales change only in update_*_scales().
  /// \param is_first_microbatch  TE's weight caching: nullopt re-casts W every call; true casts and
  ///                  caches it; false reuses the cached FP8 weight and its scale_inv without a cast
  ///                  (no weight amax is recorded, so its delayed-scaling slot does not roll).
  /// \throws fp8emu::Error on a shape mismatch, or false with no cached weight.
  void forward(const Matrix& x, Matrix& y, bool training,
               std::optional<bool> is_first_microbatch = std::nullopt);

  /// FP32 twin of forward: the same x, W and b through fp32 GEMMs; touches no FP8 state.
  void forward_fp32(const Matrix& x, Matrix& y) const;

  /// Gradients of the last training forward. \param dy Shape: [batch, out].
  /// \param dx If non-null, receives Shape: [batch, in]. grad_weight / grad_bias are overwritten.
  /// \throws fp8emu::Error on a shape mismatch or when no training forward preceded it.
  void backward(const Matrix& dy, Matrix* dx);

  /// Accumulation models of the three per-tensor FP8 GEMMs. Default: TE's choice on Hopper,
  /// {te_fprop(kHopper), te_dgrad(kHopper), te_wgrad(kHopper)}: the Hopper tensor-core model with
  /// fast accumulation in fprop, promoted to fp32 every 128 K-elements in dgrad and wgrad.
  /// Block recipes (!supports_accumulation_models()) default to fp32 and take any model for each
  /// scale block's partial.
  /// \throws fp8emu::Error for a promotion interval or split-K with a block recipe (its GEMMs
  ///         promote every scale block).
  void set_accumulation(const emu::GemmAccumulation& fprop, const emu::GemmAccumulation& dgrad,
                        const emu::GemmAccumulation& wgrad);

  /// How the GEMMs of a bf16 layer (Precision::kBf16) sum: Accumulation::kFp32 (default: the fp32
  /// sequential sum, emu::gemm_f32_nn's order) or a bf16 tensor-core row of the model table
  /// (`ampere-bf16`, `ada-bf16`, `hopper-bf16`, `blackwell-bf16`: blocks of the row's length aligned
  /// and truncated as the GPU's bf16 tensor cores do, Device::gemm_tc_nn; docs/tensor-core-model.md).
  /// Operands, bias and output rounding are unchanged. Takes effect in bf16 only.
  /// \throws fp8emu::Error for another model.
  void set_bf16_accumulation(Accumulation model);
  Accumulation bf16_accumulation() const { return bf16_acc_; }
  /// How the GEMMs of an fp32 layer (Precision::kFp32) run: Accumulation::kFp32 (default: fp32
  /// operands, the fp32 sequential sum) or a tf32 tensor-core row (`ampere-tf32`, `ada-tf32`,
  /// `hopper-tf32`, `blackwell-tf32`), as PyTorch's `allow_tf32` runs an fp32 layer: x, W and dy
  /// rounded to tf32 (core::f32_bits_to_tf32_rna, the rounding of PTX `cvt.rna.tf32.f32`: a model
  /// choice, cuBLAS's conversion is not published), the products summed as the row says
  /// (Device::gemm_tc_nn); outputs and gradients stay fp32, the bias is added in fp32.
  /// \throws fp8emu::Error for another model.
  void set_fp32_accumulation(Accumulation model);
  Accumulation fp32_accumulation() const { return fp32_acc_; }

  /// Where the FP8 casts and GEMMs of this layer run (backend/device.hpp): cpu_device() (default),
  /// or cuda_device(), which gets each operand uploaded and each result downloaded (this layer's
  /// storage is the host's); every device gives the same bits. The reference backend is
  /// Precision::kFp32.
  /// \throws fp8emu::Error on a device-resident layer.
  void set_device(const backend::Device& d);
  /// Replaces the recipe (before training: fresh scaling state, TE's default accumulation for it).
  /// \throws fp8emu::Error for invalid recipe parameters.
  void set_recipe(const scaling::Recipe& recipe);
  /// Runs this layer in FP32 (the `reference` backend), FP8 or BF16 from now on.
  /// \throws fp8emu::Error on a device-resident layer.
  void set_precision(Precision p);
  const backend::Device& device() const { return *device_; }

  /// TE forward update point (after the forward): the forward quantizer's update_scales()
  /// (delayed scaling: amax/scale update of slots 0..2; no-op for the other recipes and in FP32).
  void update_forward_scales();
  /// TE backward update point (after the backward): update of the backward slots.
  void update_backward_scales();

  // ---- device residency and the step on device pointers ------------------------------------------
  /// Why this layer cannot keep its state on a device (a phrase), or empty: a twin_error
  /// measurement, or a quantizer whose state update runs on the host (Quantizer::device_unsupported).
  std::string device_unsupported() const;
  /// Moves weight, bias, their gradients, the quantizers' state, the cast counts (stats) and the last
  /// scales into device()'s memory (a device of host memory keeps them in place); the Matrix fields,
  /// stats and the host state are then stale until to_host(). \throws fp8emu::Error with
  /// device_unsupported()'s phrase.
  void to_device();
  /// set_device(device) then to_device(), remembering the device it ran on: to_host() returns there.
  void move_to_device(const backend::Device& device);
  /// Brings everything back into the Matrix fields, stats and the host state (waits), and the layer
  /// back to the device it ran on before move_to_device().
  void to_host();
  bool resident() const { return resident_; }
  /// The forward on pointers where the parameters live (device()'s memory when resident or of host
  /// memory, else the host's, the call then staged): x [rows, in] to y [rows, out], as forward(x,
  /// y, training) with the weight cast every call. x must stay unchanged until backward() (an FP32
  /// layer reads it there).
  void forward(const float* x, int rows, float* y, bool training = true);
  /// The backward on pointers there: grad_bias, grad_weight, and dx [rows, in] when non-null.
  void backward(const float* dy, int rows, float* dx);
  /// update_forward_scales() then update_backward_scales().
  void update_scales();
  /// Zeroes the cast counts (stats).
  void reset_stats();
  /// The weight then the bias, with their gradients, in device()'s memory.
  void params(std::vector<DeviceParam>& out);
  /// Copies weight, bias, gradients, the quantizers' state, the cast counts and the last scales
  /// into `dst` (the same shape; waits). \throws fp8emu::Error when dst has another shape.
  void copy_to(Linear& dst) const;

  /// Per-tensor recipes: the scale of the last cast of x, W and dy. NaN for block recipes / FP32.
  float last_scale_input() const { return last_scale(0); }
  float last_scale_weight() const { return last_scale(1); }
  float last_scale_grad_output() const { return last_scale(2); }
  const scaling::Recipe& recipe() const { return recipe_; }

  int in_features() const { return weight.cols; }
  int out_features() const { return weight.rows; }
  Precision precision() const { return precision_; }
  /// The quantizers of the forward (input, weight) and backward (grad_output) casts.
  const scaling::Quantizer& forward_quantizer() const { return *fwd_q_; }
  const scaling::Quantizer& backward_quantizer() const { return *bwd_q_; }
  /// The forward/backward scale and amax_history state (checkpoint access): the quantizer's
  /// (delayed scaling: [history_len, 3] and [history_len, 2]), or, for recipes that keep none, an
  /// idle state of 3 / 2 slots and history length 1 that keeps its initial values (scale 1,
  /// amax 0), so checkpoints have one layout for every recipe.
  const scaling::DelayedScalingState& forward_state() const;
  const scaling::DelayedScalingState& backward_state() const;
  scaling::DelayedScalingState& forward_state();
  scaling::DelayedScalingState& backward_state();
  /// The checkpoint state of the forward or backward quantizer (Quantizer::save_state: empty for
  /// recipes that keep none), current wherever it lives; load_state restores it.
  /// \throws fp8emu::Error (load_state) when `state` is not a state of this layer's recipe; nothing
  ///         changes then.
  std::vector<float> save_state(scaling::Direction direction) const;
  void load_state(scaling::Direction direction, const std::vector<float>& state);
  /// supports_accumulation_models() of the recipe: its GEMMs take any accumulation model.
  bool supports_accumulation_models() const { return fwd_q_->supports_accumulation_models(); }

  Matrix weight;       ///< Shape: [out, in].
  Matrix bias;         ///< Shape: [1, out].
  Matrix grad_weight;  ///< Shape: [out, in].
  Matrix grad_bias;    ///< Shape: [1, out].
  LinearFp8Stats stats;  ///< Accumulated by FP8 casts; reset by the caller.
  /// When non-null, every FP8 or BF16 forward also runs the FP32 twin on the same input and accumulates
  /// the squared error and the squared reference here (costs one FP32 GEMM per forward).
  TwinError* twin_error = nullptr;

 private:
  template <class T>
  using Tensor = backend::DeviceTensor<T>;
  // The step program (linear.cpp), on device pointers.
  void step_forward(const float* x, int rows, float* y, bool training, std::optional<bool> is_first_microbatch,
                    bool keep_x);
  void step_backward(const float* dy, int rows, float* dx);
  void run_forward(const float* x, int rows, float* y, bool training, std::optional<bool> is_first_microbatch,
                   bool keep_x);
  void run_backward(const float* dy, int rows, float* dx);
  void cast_weight(std::optional<bool> is_first_microbatch);
  void accumulate_twin(const float* x, int rows, const float* y);
  void bf16_gemm(int M, int N, int K, const float* A, const float* B, float* D) const;
  bool rounds_operands() const;  // bf16, or fp32 on a tf32 tensor core: x, W, dy kept rounded
  void reserve(int rows);
  void make_buffers();
  void take_counts();  // host layers: the device counters into stats, then zeroed
  float last_scale(int role) const;
  bool staged() const { return !resident_ && !device_->host_memory(); }
  float* w() { return staged() || (resident_ && !device_->host_memory()) ? w_.get() : weight.data.data(); }
  float* b() { return staged() || (resident_ && !device_->host_memory()) ? b_.get() : bias.data.data(); }
  float* gw() { return staged() || (resident_ && !device_->host_memory()) ? gw_.get() : grad_weight.data.data(); }
  float* gb() { return staged() || (resident_ && !device_->host_memory()) ? gb_.get() : grad_bias.data.data(); }

  Precision precision_;
  const backend::Device* device_ = &backend::cpu_device();
  scaling::Recipe recipe_;
  std::unique_ptr<scaling::Quantizer> fwd_q_, bwd_q_;
  scaling::DelayedScalingState idle_fwd_state_{3, 1}, idle_bwd_state_{2, 1};
  emu::GemmAccumulation acc_fprop_, acc_dgrad_, acc_wgrad_;
  Accumulation bf16_acc_ = Accumulation::kFp32;  // the bf16 GEMMs' sum (set_bf16_accumulation)
  Accumulation fp32_acc_ = Accumulation::kFp32;  // the fp32 GEMMs' (set_fp32_accumulation)
  bool resident_ = false;
  const backend::Device* return_device_ = nullptr;  // move_to_device's previous device
  // Saved by a training forward.
  int forward_rows_ = -1;          // rows of the last training forward, -1: none
  const float* saved_x_ = nullptr;  // fp32: the input; bf16: x rounded (xb_)
  bool have_weight_cache_ = false;
  scaling::DeviceOperand x_op_, w_op_;     // fp8: the operands of the last forward (views of xq_, wq_)
  std::array<float, 3> carried_scales_;    // the last scales while no buffers hold them
  std::uint64_t rounding_stream_ = 0;      // the quantizers' stochastic-rounding stream (init)
  // Buffers of the step on device_ (made by make_buffers / reserve; rebuilt when the device changes).
  const backend::Device* buffers_on_ = nullptr;
  int capacity_ = 0;
  Tensor<float> w_, b_, gw_, gb_;          // parameters and gradients off the host (resident or staged)
  Tensor<float> last_scale_;               // [3]: the scales of the last casts of x, W, dy (NaN: none)
  Tensor<backend::CastCounters> counters_; // [3]: x, W, dy
  Tensor<float> wt_, wb_;                  // fp32/bf16: W^T [in, out]; bf16: W rounded [out, in]
  Tensor<float> xs_, dyt_, xb_, dyb_;      // x kept [cap, in]; dy^T [out, cap]; bf16 x, dy
  Tensor<float> twin_wt_, twin_y_;         // twin_error: W^T and the twin's output
  Tensor<float> io_x_, io_y_;              // staged host calls: x or dy in, y or dx out
  scaling::DeviceQuantizedTensor wq_;      // fp8: the weight, both copies (cached across calls)
  scaling::DeviceQuantizedTensor xq_, dyq_;  // fp8: x and dy, both copies, [capacity] rows
};

/// A copy of `src` kept on `device` (set_device, then to_device()): the Linear of device-resident
/// models. \throws fp8emu::Error with Linear::device_unsupported()'s phrase.
Linear resident_copy(const backend::Device& device, const Linear& src);

}  // namespace fp8emu::nn
