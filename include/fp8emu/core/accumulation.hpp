/// \file accumulation.hpp
/// \brief The accumulation models of the GEMMs and MMA instructions as records: one constexpr row per
/// model, from which parsing, names, the datapath and its checks are derived (as format_spec.hpp does
/// for formats).
///
/// A model says how one output element's dot product of K products is summed:
///   exact            the exact sum of the exact products, rounded once to fp32 (RNE);
///   fp32             fp32 sequential: c = RN(c + a_k * b_k) for k = 0..K-1 (products exact);
///   hopper           the Hopper `wgmma` k32 FP8 block FMA: blocks of 32 products chained along K;
///   ada              the Ada `mma.sync.m16n8k32` FP8 block FMA: blocks of 16 products chained along K;
///   hopper-mma-sync  Hopper's `mma.sync.m16n8k32` FP8 (sm_90 runs it on the fp16 tensor core): per
///                    32 products, FP8 widened to fp16, two block FMAs of 16 (k mod 4 in {0, 1}, then
///                    {2, 3}), then C added with one RN fp32 add;
///   blackwell        the B200 FP8 block FMA: blocks of 32, F = 25, 24 bits kept;
///   <arch>-<fmt>     the fp16, bf16 and tf32 tensor cores of Volta, Ampere, Ada, Hopper and
///                    Blackwell (`hopper-bf16`: blocks of 16 bf16 products, F = 25, 24 bits kept).
/// Every row's operands are FP8 codes in the FP8 GEMMs (widened exactly to the row's operand format);
/// the fp16, bf16 and tf32 rows also take values of their own format (core::MmaValues, `mma-check`,
/// emu::mma_tn_values).
/// The tensor-core block FMA (core/mma_model.hpp; docs/tensor-core-model.md has the evidence): a
/// step's products and accumulator are aligned to `fraction_bits` bits below the largest exponent by
/// truncation, summed exactly, and the sum is cut to `significant_bits` (fp32 accumulator) or
/// rounded to fp16 (fp16 accumulator).
///
/// Adding a model: one row in kAccumulationModels (and an enumerator, in the same order); a model
/// whose datapath is new adds a Datapath and its case in core/dot.hpp (switches there have no
/// `default:`, so the compiler names every place to extend). The GEMM-level wrappers (TE's split
/// accumulator, cuBLASLt's split-K) are not part of the model: see emu::GemmAccumulation.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/mma_model.hpp"

namespace fp8emu {

/// Run-time selector of an accumulation model: an index into kAccumulationModels.
enum class Accumulation : std::uint8_t {
  kExact,
  kFp32,
  kHopper,
  kAda,
  kHopperMmaSync,
  kBlackwell,
  kVoltaFp16,
  kAmpereFp16,
  kAmpereBf16,
  kAmpereTf32,
  kAdaFp16,
  kAdaBf16,
  kAdaTf32,
  kHopperFp16,
  kHopperBf16,
  kHopperTf32,
  kBlackwellFp16,
  kBlackwellBf16,
  kBlackwellTf32,
};

/// How a model sums a run of products.
enum class Datapath : std::uint8_t {
  kExactSum,        ///< Exact integer sum of the exact products, one RNE rounding to fp32.
  kFp32Sequential,  ///< One RN fp32 add per product, in increasing k, from +0.
  kTensorCore,      ///< Blocks of `block` products (core::mma_instruction), chained along K.
};

/// One accumulation model (see the file comment). The tensor-core fields are meaningful for
/// kTensorCore only; the other rows carry neutral values (block 1, one step, no fraction bits).
struct AccumulationModel {
  Accumulation id;
  const char* name;         ///< The name of `--accumulation` and of result files: "hopper".
  const char* hardware;     ///< What it models, for help texts.
  const char* arch;         ///< kTensorCore: the GPU architecture (`mma-check --arch`): "hopper", "ada"; else "".
  const char* instruction;  ///< kTensorCore: the MMA instruction (`mma-check --instruction`): "wgmma",
                            ///< "mma.sync"; else "". The first row of an arch is its default.
  int compute_capability;   ///< kTensorCore: the architecture's sm number (90, 89); else 0.
  Datapath datapath;
  int block;                ///< Products per block (one instruction's K, or one block FMA), chained along K;
                            ///< 1 for non-tensor-core datapaths. A promotion interval is a multiple of it.
  int steps;                ///< kTensorCore: block FMAs per block, chained through the accumulator.
  int step_interleave;      ///< kTensorCore: product i of a block is in step (i / step_interleave) % steps.
  int fraction_bits;        ///< kTensorCore: bits kept below a step's largest exponent (F).
  int significant_bits;     ///< kTensorCore, fp32 accumulator: bits kept (truncated) after each step.
  core::MmaAccumulator accumulator;  ///< kTensorCore: the accumulator type between steps and blocks.
  core::MmaOperands input;           ///< kTensorCore: the instruction's input format (kFp8: E4M3 and E5M2
                                     ///< codes; else fp16, bf16 or tf32 values); `mma-check --format`.
  core::MmaOperands operands;        ///< kTensorCore: the fields the block FMA reads (FP8 codes of any
                                     ///< row are widened exactly to them).
  /// kTensorCore: true when C (and, along K, the previous block's result) joins the alignment of a
  /// block's first step (the Ada mma.sync recordings with C confirm it; for `hopper` it is fp8emu's
  /// convention: the H100 recordings were made without C, though the chain along K is measured);
  /// false when a block's steps start from +0 and C is added last with one RN fp32 add (Hopper
  /// mma.sync's FADD, measured on an H200). Inside fp8emu's GEMMs the first C is +0; along K it
  /// decides how blocks chain.
  bool c_joins_first_block;
  int exponent_floor;       ///< kTensorCore: a step's alignment exponent is at least this (fp32 output).
  int exponent_floor_f16;   ///< kTensorCore: the same with the fp16 accumulator.

  /// Whether a GEMM promotion interval (or a split-K) is allowed (every model but the exact sum,
  /// which would no longer be exact); an interval must be a multiple of `block`.
  FP8EMU_HD constexpr bool takes_promotion() const { return datapath != Datapath::kExactSum; }
  /// The tensor-core datapath of the row (kTensorCore rows), as core/mma_model.hpp takes it.
  FP8EMU_HD constexpr core::MmaDatapath tensor_core() const {
    return core::MmaDatapath{block,       steps,    step_interleave,     fraction_bits,  significant_bits,
                             accumulator, operands, c_joins_first_block, exponent_floor, exponent_floor_f16};
  }
};

/// The models, indexed by Accumulation. Columns: id, name, hardware, arch, instruction, sm, datapath,
/// block, steps, step interleave, fraction bits, significant bits, accumulator, input, operands,
/// C joins, exponent floor (fp32 output, fp16 output). The tensor-core rows restate the models of
/// MATLAB-tensor-core (`models/*TC.m`, commit b12b5a7: block = `fma`, F = 23 + `neab`, the floor =
/// `min_exp_limit`), except hopper-mma-sync (measured here on an H200); docs/tensor-core-model.md.
namespace detail {
using core::MmaAccumulator;
using core::MmaOperands;
inline constexpr int kNoFloor = core::kNoExponentFloor;
inline constexpr MmaAccumulator kF32 = MmaAccumulator::kFp32;
// A tensor-core row of fp16, bf16 or tf32 inputs: one step, C in the alignment, F = 23 + neab,
// 24 bits kept (RZ), or RNE to fp16 for the fp16 accumulator.
constexpr AccumulationModel wide_row(Accumulation id, const char* name, const char* hardware, const char* arch,
                                     int sm, int block, int neab, MmaOperands in, int floor, int floor_f16) {
  return AccumulationModel{id,  name, hardware, arch, "wmma",     sm,        Datapath::kTensorCore, block, 1, 1, 23 + neab,
                           24, kF32, in,       in,   true, floor, floor_f16};
}
}  // namespace detail

inline constexpr AccumulationModel kAccumulationModels[] = {
    {Accumulation::kExact, "exact", "exact sum, one rounding (reference)", "", "", 0, Datapath::kExactSum, 1, 1, 1, 0,
     0, detail::kF32, core::MmaOperands::kFp8, core::MmaOperands::kFp8, true, detail::kNoFloor, detail::kNoFloor},
    {Accumulation::kFp32, "fp32", "fp32 sequential sum (CUDA cores, CPU BLAS order)", "", "", 0,
     Datapath::kFp32Sequential, 1, 1, 1, 0, 0, detail::kF32, core::MmaOperands::kFp8, core::MmaOperands::kFp8, true,
     detail::kNoFloor, detail::kNoFloor},
    {Accumulation::kHopper, "hopper", "Hopper wgmma k32 FP8 tensor core (sm_90)", "hopper", "wgmma", 90,
     Datapath::kTensorCore, 32, 1, 1, core::kMmaFractionBits, core::kMmaSignificantBits, detail::kF32,
     core::MmaOperands::kFp8, core::MmaOperands::kFp8, true, -133, -133},
    {Accumulation::kAda, "ada", "Ada mma.sync m16n8k32 FP8 tensor core (sm_89)", "ada", "mma.sync", 89,
     Datapath::kTensorCore, 16, 1, 1, core::kMmaFractionBits, core::kMmaSignificantBits, detail::kF32,
     core::MmaOperands::kFp8, core::MmaOperands::kFp8, true, -132, -132},
    {Accumulation::kHopperMmaSync, "hopper-mma-sync", "Hopper mma.sync m16n8k32 FP8 (sm_90: fp16 HMMA steps, C added last)",
     "hopper", "mma.sync", 90, Datapath::kTensorCore, 32, 2, 2, core::kHmmaFractionBits, core::kHmmaSignificantBits,
     detail::kF32, core::MmaOperands::kFp8, core::MmaOperands::kFp16, false, -133, -133},
    {Accumulation::kBlackwell, "blackwell", "Blackwell B200 mma.sync m16n8k32 FP8 (sm_100: fp16 HMMA steps, C added last)",
     "blackwell", "mma.sync", 100, Datapath::kTensorCore, 32, 2, 2, core::kHmmaFractionBits, core::kHmmaSignificantBits,
     detail::kF32, core::MmaOperands::kFp8, core::MmaOperands::kFp16, false, -133, -133},
    detail::wide_row(Accumulation::kVoltaFp16, "volta-fp16", "Volta V100 fp16 tensor core, k4 (sm_70)", "volta", 70, 4, 0,
                     core::MmaOperands::kFp16, detail::kNoFloor, -19),
    detail::wide_row(Accumulation::kAmpereFp16, "ampere-fp16", "Ampere A100 fp16 tensor core, k8 (sm_80)", "ampere", 80,
                     8, 1, core::MmaOperands::kFp16, -132, -20),
    detail::wide_row(Accumulation::kAmpereBf16, "ampere-bf16", "Ampere A100 bf16 tensor core, k8 (sm_80)", "ampere", 80,
                     8, 1, core::MmaOperands::kBf16, -132, -20),
    detail::wide_row(Accumulation::kAmpereTf32, "ampere-tf32", "Ampere A100 tf32 tensor core, k4 (sm_80)", "ampere", 80,
                     4, 1, core::MmaOperands::kTf32, -132, -20),
    detail::wide_row(Accumulation::kAdaFp16, "ada-fp16", "Ada fp16 tensor core, k8 (sm_89)", "ada", 89, 8, 1,
                     core::MmaOperands::kFp16, -132, -20),
    detail::wide_row(Accumulation::kAdaBf16, "ada-bf16", "Ada bf16 tensor core, k8 (sm_89)", "ada", 89, 8, 1,
                     core::MmaOperands::kBf16, -132, -20),
    detail::wide_row(Accumulation::kAdaTf32, "ada-tf32", "Ada tf32 tensor core, k4 (sm_89)", "ada", 89, 4, 1,
                     core::MmaOperands::kTf32, -132, -20),
    detail::wide_row(Accumulation::kHopperFp16, "hopper-fp16", "Hopper fp16 tensor core, k16 (sm_90)", "hopper", 90, 16,
                     2, core::MmaOperands::kFp16, -133, -21),
    detail::wide_row(Accumulation::kHopperBf16, "hopper-bf16", "Hopper bf16 tensor core, k16 (sm_90)", "hopper", 90, 16,
                     2, core::MmaOperands::kBf16, -133, -21),
    detail::wide_row(Accumulation::kHopperTf32, "hopper-tf32", "Hopper tf32 tensor core, k8 (sm_90)", "hopper", 90, 8, 2,
                     core::MmaOperands::kTf32, -133, -21),
    detail::wide_row(Accumulation::kBlackwellFp16, "blackwell-fp16", "Blackwell B200 fp16 tensor core, k16 (sm_100)",
                     "blackwell", 100, 16, 2, core::MmaOperands::kFp16, -133, -21),
    detail::wide_row(Accumulation::kBlackwellBf16, "blackwell-bf16", "Blackwell B200 bf16 tensor core, k16 (sm_100)",
                     "blackwell", 100, 16, 2, core::MmaOperands::kBf16, -133, -21),
    detail::wide_row(Accumulation::kBlackwellTf32, "blackwell-tf32", "Blackwell B200 tf32 tensor core, k8 (sm_100)",
                     "blackwell", 100, 8, 2, core::MmaOperands::kTf32, -133, -21),
};
inline constexpr int kAccumulationModelCount = int(sizeof(kAccumulationModels) / sizeof(kAccumulationModels[0]));

/// The record of a model (host code; device code receives records by value).
constexpr const AccumulationModel& model_of(Accumulation a) { return kAccumulationModels[int(a)]; }

/// Whether a layer whose GEMM operands are values of `input` (bf16, tf32) can sum with `a`: the
/// fp32 sequential sum, or a tensor-core row of that input format (nn::Linear's
/// set_bf16_accumulation / set_fp32_accumulation, --bf16-accumulation, --fp32-accumulation).
constexpr bool layer_accumulation_fits(Accumulation a, core::MmaOperands input) {
  return a == Accumulation::kFp32 ||
         (model_of(a).datapath == Datapath::kTensorCore && model_of(a).input == input);
}

namespace detail {
constexpr bool accumulation_table_in_order() {
  for (int i = 0; i < kAccumulationModelCount; ++i)
    if (int(kAccumulationModels[i].id) != i) return false;
  return true;
}
constexpr bool accumulation_rows_consistent() {
  for (const AccumulationModel& m : kAccumulationModels) {
    if (m.block < 1 || m.steps < 1 || m.step_interleave < 1) return false;
    if (m.datapath != Datapath::kTensorCore) continue;
    if (m.block % (m.steps * m.step_interleave) != 0) return false;  // every step has block / steps products
    if (m.significant_bits < 1 || m.significant_bits > 24) return false;  // the result is an fp32
    if (m.input != core::MmaOperands::kFp8 && m.input != m.operands) return false;  // values enter as they are
  }
  return true;
}
}  // namespace detail
static_assert(detail::accumulation_table_in_order(), "kAccumulationModels must be indexed by Accumulation");
static_assert(detail::accumulation_rows_consistent(),
              "kAccumulationModels: a tensor-core row's block must hold whole steps, at most 24 significant bits are kept, and a non-FP8 input is the operand format");
static_assert(model_of(Accumulation::kHopper).block == 32 && model_of(Accumulation::kAda).block == 16 &&
                  model_of(Accumulation::kHopperMmaSync).block == 32 &&
                  model_of(Accumulation::kHopperMmaSync).block / model_of(Accumulation::kHopperMmaSync).steps == 16,
              "wgmma k32 FP8 fuses 32 products per block, mma.sync m16n8k32 16 per step");

}  // namespace fp8emu
