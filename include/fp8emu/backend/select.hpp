/// \file select.hpp
/// \brief Where a layer runs: the backend kinds of `--backend`, what the machine offers for the
/// `cuda` one, and the selection and fallback rules.
///
/// Backends (per layer, or for the whole model):
///   - `reference`: FP32, no quantization (the layer's FP32 twin);
///   - `emulated`: FP8 on the CPU, the bit-exact emulator (backend::cpu_device());
///   - `cuda`: FP8 on the GPU (backend::cuda_device()); every kernel calls the same integer-only
///     core functions (include/fp8emu/core) as the emulator, so results are bit-identical to
///     `emulated` (checked on a GPU by `fp8emu validate` and the gpu tests).
/// When `cuda` is requested but cannot run (no CUDA in this build, no driver, no GPU, compute
/// capability below 8.9), the layer falls back to `emulated` and one line says why and how to fix
/// it; with `strict` it is an error instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "fp8emu/device/probe.hpp"

namespace fp8emu::backend {

class Device;

/// Where a layer runs.
enum class Kind : std::uint8_t { kReference, kEmulated, kCuda };
/// "reference" | "emulated" | "cuda". \throws fp8emu::Error naming the accepted values.
Kind parse_kind(const std::string& s);
const char* to_string(Kind k);

/// What the machine offers for the `cuda` backend (device/probe.hpp): probed once, then cached;
/// never throws.
const CudaStatus& cuda_status();

/// Which GPU the cuda kernels use, to be called before the first of them runs: the GPUs with
/// compute capability >= 8.9 in CUDA's order, the (slot mod their count)-th (default slot 0, the
/// first). Data-parallel training passes each rank's local rank, so the ranks of a node share its
/// GPUs round-robin. No effect in a build without CUDA.
void set_cuda_device_slot(int slot);

/// Per-layer backends from a spec: one kind for all ("cuda"), or "name=kind" pairs separated by
/// commas ("fc1=cuda,fc2=emulated"); layers not named get `fallback_default`.
/// \throws fp8emu::Error on an unknown layer name or kind, naming the valid ones.
std::vector<Kind> parse_layer_backends(const std::string& spec, const std::vector<std::string>& layer_names,
                                       Kind fallback_default);

/// Replaces `cuda` by `emulated` when the GPU cannot run it, writing one line to `log` that says
/// why and how to fix it; with `strict` throws fp8emu::Error instead. Returns the kinds to use.
std::vector<Kind> resolve(std::vector<Kind> kinds, bool strict, std::ostream& log);

/// "name=kind,..." of resolved kinds (what ran), for result files.
std::string describe(const std::vector<Kind>& kinds, const std::vector<std::string>& layer_names);

/// The device of a resolved kind: cpu_device() for kEmulated, cuda_device() for kCuda (kReference
/// has none: the layer runs FP32). A host-storage layer on cuda_device() copies its operands to the
/// GPU and its results back per call; a device-resident model keeps them there.
/// \throws fp8emu::Error for kReference, or kCuda where the cuda backend cannot run.
const Device& device_of(Kind k);

}  // namespace fp8emu::backend
