"""TE's public names that fp8emu.torch does not model: each exists (no AttributeError in a TE
script) and raises NotImplementedError, naming the feature and why, when it is called, instantiated
or (for TE's submodules and enums) read. docs/python.md has the table of every TE name."""

from __future__ import annotations

from typing import Any, Dict

_MULTI_GPU = "tensor/context/expert parallelism and multi-GPU communication are not modelled (one process)"
_FP8_TENSORS = ("FP8 tensors as torch.Tensor subclasses (TE's quantized parameters and activations) are not "
                "modelled; fp8emu.recipe.QuantizedTensor holds a quantized operand")
_CUDA_ONLY = "a CUDA-runtime feature with no meaning in emulation"

#: name -> why it is not available.
REASONS: Dict[str, str] = {
    "initialize_ub": "userbuffers (communication overlap) are not modelled: " + _MULTI_GPU,
    "destroy_ub": "userbuffers (communication overlap) are not modelled: " + _MULTI_GPU,
    "UserBufferQuantizationMode": "userbuffers (communication overlap) are not modelled: " + _MULTI_GPU,
    "GatedDeltaNetAttention": "linear-attention variants are not modelled",
    "FusedMLAQUpProjFunction": "fused multi-head latent attention kernels are not modelled",
    "FusedMLAQUpProjRopeQuant": "fused multi-head latent attention kernels are not modelled",
    "InferenceParams": "KV-cache inference is not modelled (TransformerLayer refuses inference_params)",
    "moe_permute": "MoE token permutation is not modelled",
    "moe_permute_with_probs": "MoE token permutation is not modelled",
    "moe_permute_and_pad_with_probs": "MoE token permutation is not modelled",
    "moe_unpermute": "MoE token permutation is not modelled",
    "moe_sort_chunks_by_index": "MoE token permutation is not modelled",
    "moe_sort_chunks_by_index_with_probs": "MoE token permutation is not modelled",
    "apply_recipe": "per-module recipes are not modelled; use fp8_autocast(fp8_recipe=...)",
    "QuantizerRole": "custom quantizer factories (CustomRecipe) are not modelled",
    "QuantizerRequest": "custom quantizer factories (CustomRecipe) are not modelled",
    "DelayedScalingRequest": "custom quantizer factories (CustomRecipe) are not modelled",
    "quantizer_factory": "custom quantizer factories (CustomRecipe) are not modelled",
    "get_cudnn_version": _CUDA_ONLY,
    "deinterleave_glu_tensor": "interleaved GLU weight layouts are not modelled (LayerNormMLP's gated "
                               "activations take TE's default [gate; linear] halves)",
    "interleave_glu_tensor": "interleaved GLU weight layouts are not modelled (LayerNormMLP's gated "
                             "activations take TE's default [gate; linear] halves)",
    "make_graphed_callables": "CUDA graphs: " + _CUDA_ONLY,
    "CudaRNGStatesTracker": "per-region CUDA RNG states serve tensor parallelism: " + _MULTI_GPU,
    "get_cpu_offload_context": "activation offloading: " + _CUDA_ONLY,
    "mark_not_offload": "activation offloading: " + _CUDA_ONLY,
    "ManualOffloadSynchronizer": "activation offloading: " + _CUDA_ONLY,
    "onnx_export": "ONNX export of FP8 graphs is not modelled",
    "parallel_cross_entropy": "vocabulary-parallel cross entropy: " + _MULTI_GPU,
    "CusolverMpCtx": "distributed Newton-Schulz (Muon): " + _MULTI_GPU,
    "newton_schulz": "distributed Newton-Schulz (Muon): " + _MULTI_GPU,
    "newton_schulz_tp": "distributed Newton-Schulz (Muon): " + _MULTI_GPU,
    "prepare_for_saving": _FP8_TENSORS,
    "restore_from_saved": _FP8_TENSORS,
    "restore_from_func_ctx": _FP8_TENSORS,
}
for _n in ("QuantizedTensorStorage", "QuantizedTensor", "Quantizer", "Float8Quantizer", "Float8CurrentScalingQuantizer",
           "MXFP8Quantizer", "Float8BlockQuantizer", "NVFP4Quantizer", "Float8TensorStorage", "MXFP8TensorStorage",
           "Float8BlockwiseQTensorStorage", "NVFP4TensorStorage", "Float8Tensor", "MXFP8Tensor",
           "Float8BlockwiseQTensor", "NVFP4Tensor", "HybridQuantizer", "HybridQuantizedTensorStorage",
           "IdentityQuantizer", "IdentityTensorStorage", "HybridQuantizedTensor", "IdentityTensor"):
    REASONS[_n] = _FP8_TENSORS

#: TE's submodules and enums: reading any attribute raises.
NAMESPACES: Dict[str, str] = {
    "ops": "TE's fusible operations API (te.ops) is not modelled; use the modules",
    "constants": "TE's constants module is not mirrored",
    "DType": "TE's C++ dtype enum has no meaning here (formats are fp8emu.Format / format names)",
    "CPLoadBalancingStrategy": "context parallelism: " + _MULTI_GPU,
}


def _message(name: str, why: str) -> str:
    return f"transformer_engine.pytorch.{name} is not available in fp8emu.torch: {why}"


def unsupported(name: str, why: str = "", module: str = "fp8emu.torch", te_module: str = "pytorch") -> Any:
    """A class named `name` whose construction (or call) raises NotImplementedError with the reason
    (REASONS[name] unless `why` is given)."""
    msg = f"transformer_engine.{te_module}.{name} is not available in fp8emu.torch: {why or REASONS[name]}"

    def refuse(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(msg)

    return type(name, (), {"__new__": refuse, "__doc__": msg, "__module__": module})


class Unavailable(NotImplementedError, AttributeError):
    """What reading an attribute of a stand-in raises: a NotImplementedError naming the feature,
    and an AttributeError too, so ``hasattr(te.ops, "Sequential")`` is False instead of raising."""


class _Namespace:
    """A stand-in for a TE submodule or enum: every attribute read raises :class:`Unavailable`."""

    def __init__(self, name: str, why: str):
        object.__setattr__(self, "_msg", _message(name, why))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise Unavailable(self._msg)

    def __repr__(self) -> str:
        return f"<unsupported: {self._msg}>"


def namespace(name: str) -> Any:
    return _Namespace(name, NAMESPACES[name])
