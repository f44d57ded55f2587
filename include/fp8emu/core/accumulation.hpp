/// \file accumulation.hpp
/// \brief The accumulation models of an FP8 GEMM as records: one constexpr row per model, from which
/// parsing, names, the datapath and its checks are derived (as format_spec.hpp does for formats).
///
/// A model says how one output element's dot product of K FP8 x FP8 products is summed:
///   exact   the exact sum of the exact products, rounded once to fp32 (RNE);
///   fp32    fp32 sequential: c = RN(c + a_k * b_k) for k = 0..K-1 (products exact);
///   hopper  the Hopper `wgmma` k32 tensor-core block FMA: blocks of 32 products chained along K;
///   ada     the Ada `mma.sync.m16n8k32` block FMA: blocks of 16 products chained along K.
/// The tensor-core block FMA (core/mma_model.hpp; docs/tensor-core-model.md has the evidence): the
/// block's products and addend are aligned to `fraction_bits` bits below the largest exponent by
/// truncation, summed exactly, and the sum is cut to 1 + fraction_bits significant bits (fp32
/// accumulator) or rounded to fp16 (fp16 accumulator).
///
/// Adding a model: one row in kAccumulationModels (and an enumerator, in the same order); a model
/// whose datapath is new adds a Datapath and its case in core/dot.hpp (switches there have no
/// `default:`, so the compiler names every place to extend). The GEMM-level promotion wrapper (TE's
/// split accumulator) is not part of the model: see emu::GemmAccumulation.
#pragma once

#include <cstdint>

#include "fp8emu/config.hpp"
#include "fp8emu/core/mma_model.hpp"

namespace fp8emu {

/// Run-time selector of an accumulation model: an index into kAccumulationModels.
enum class Accumulation : std::uint8_t { kExact, kFp32, kHopper, kAda };

/// How a model sums a run of products.
enum class Datapath : std::uint8_t {
  kExactSum,        ///< Exact integer sum of the exact products, one RNE rounding to fp32.
  kFp32Sequential,  ///< One RN fp32 add per product, in increasing k, from +0.
  kTensorCore,      ///< Block FMA of `block` products (core::mma_block), chained along K.
};

/// One accumulation model (see the file comment).
struct AccumulationModel {
  Accumulation id;
  const char* name;         ///< The name of `--accumulation` and of result files: "hopper".
  const char* hardware;     ///< What it models, for help texts.
  Datapath datapath;
  int block;                ///< Products fused per block step (1 for non-tensor-core datapaths).
  int fraction_bits;        ///< kTensorCore: bits kept below the block's largest exponent (F).
  core::MmaAccumulator accumulator;  ///< kTensorCore: the accumulator type between blocks.
  /// kTensorCore: true when an addend C joins the first block's alignment (the Ada mma.sync
  /// recordings with C confirm it); false when the chain starts from zero and C is added last with
  /// one RN fp32 add. Inside fp8emu's GEMMs (beta = 0) C is zero and both give the same bits; it
  /// matters to `fp8emu mma-check --c`. For `hopper` it is fp8emu's convention, not a measurement:
  /// the H100 recordings were made without C (docs/tensor-core-model.md).
  bool c_joins_first_block;

  /// Whether a GEMM promotion interval is allowed (every model but the exact sum, which would no
  /// longer be exact) and must be a multiple of `block`.
  FP8EMU_HD constexpr bool takes_promotion() const { return datapath != Datapath::kExactSum; }
};

/// The models, indexed by Accumulation.
inline constexpr AccumulationModel kAccumulationModels[] = {
    {Accumulation::kExact, "exact", "exact sum, one rounding (reference)", Datapath::kExactSum, 1, 0,
     core::MmaAccumulator::kFp32, true},
    {Accumulation::kFp32, "fp32", "fp32 sequential sum (CUDA cores, CPU BLAS order)", Datapath::kFp32Sequential, 1, 0,
     core::MmaAccumulator::kFp32, true},
    {Accumulation::kHopper, "hopper", "Hopper wgmma k32 FP8 tensor core (sm_90)", Datapath::kTensorCore, 32,
     core::kMmaFractionBits, core::MmaAccumulator::kFp32, true},
    {Accumulation::kAda, "ada", "Ada mma.sync m16n8k32 FP8 tensor core (sm_89)", Datapath::kTensorCore, 16,
     core::kMmaFractionBits, core::MmaAccumulator::kFp32, true},
};
inline constexpr int kAccumulationModelCount = int(sizeof(kAccumulationModels) / sizeof(kAccumulationModels[0]));

/// The record of a model (host code; device code receives records by value).
constexpr const AccumulationModel& model_of(Accumulation a) { return kAccumulationModels[int(a)]; }

namespace detail {
constexpr bool accumulation_table_in_order() {
  for (int i = 0; i < kAccumulationModelCount; ++i)
    if (int(kAccumulationModels[i].id) != i) return false;
  return true;
}
}  // namespace detail
static_assert(detail::accumulation_table_in_order(), "kAccumulationModels must be indexed by Accumulation");
static_assert(model_of(Accumulation::kHopper).block == 32 && model_of(Accumulation::kAda).block == 16,
              "wgmma k32 FP8 fuses 32 products per block, mma.sync m16n8k32 16 per step");

}  // namespace fp8emu
