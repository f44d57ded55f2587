"""Transformer Engine's PyTorch API on fp8emu: a model written for TE runs on a CPU by changing one import.

    import fp8emu.torch as te                     # instead of: import transformer_engine.pytorch as te
    from fp8emu import DelayedScaling, Format     # instead of: transformer_engine.common.recipe

    layer = te.Linear(768, 3072, bias=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)):
        y = layer(x)
    y.sum().backward()

Imported only when PyTorch is importable (``import fp8emu.torch``; PyTorch is not a dependency of
fp8emu). :class:`TransformerLayer` (with :class:`MultiheadAttention`, :class:`DotProductAttention`,
:class:`LayerNorm`, :class:`RMSNorm`) composes them with TE's structure and parameter names, the
attention core in fp32 PyTorch. :class:`Linear`, :class:`LayerNormLinear` and :class:`LayerNormMLP` are ``torch.nn.Module`` s with TE's constructor
arguments and parameter names, whose FP8 forward and backward are ``torch.autograd.Function`` s over
:mod:`fp8emu.layers`: inside :func:`fp8_autocast` every GEMM (fprop, dgrad, wgrad) runs on FP8
operands cast by fp8emu's quantizers under the recipe (E4M3 forward, E5M2 gradients under
``Format.HYBRID``), accumulated as TE runs them on Hopper (tensor-core model, fast accumulation in
fprop, fp32 promotion every 128 K-elements in dgrad and wgrad), bit for bit as fp8emu's C++
``nn::Linear`` / ``nn::LayerNormLinear``. Outside the context (or with ``enabled=False``) the modules
are plain fp32 ``torch.nn.functional.linear`` / ``layer_norm`` (the same bits as ``torch.nn.Linear``
and ``torch.nn.LayerNorm``).

Delayed scaling's state is updated where and when TE updates it: the forward amax histories and
scales at the exit of the outermost ``fp8_autocast`` with FP8 on and gradients enabled (TE
``reduce_and_update_fp8_tensors(forward=True)``), the backward state at the end of the backward
pass (TE's ``reduce_and_update_bwd_fp8_tensors``), each time for every module that has run an FP8
forward (TE's global buffers), not only those of the region. With torch.distributed initialized,
each update first reduces this step's amaxes (MAX) over ``fp8_group`` (None: the default group), as
TE, so every rank holds the same scales.

Checkpoints and copies, as TE: ``state_dict()`` holds each module's ``_extra_state`` in TE's layout
(the recipe and, for delayed scaling, the scales and amax histories), so ``load_state_dict``
resumes bit for bit; modules deep-copy, pickle (``torch.save``) and average
(``torch.optim.swa_utils``) with their FP8 state; ``torch.compile`` runs the FP8 modules eagerly (a
graph break, TE's ``no_torch_dynamo``) with the eager bits; a retained graph backs up again.

Tensors: float32, bfloat16 or float16 (widened exactly to float32 for the emulator; results in the
input's dtype) on any device, in the parameters' dtype outside ``torch.autocast`` (TE's rule and
message); under ``torch.autocast`` TE's activation dtype (the input cast to autocast's dtype first,
outputs and parameter gradients in it). A non-float input raises torch's own dtype error. Input shape (..., in_features), output (..., out_features).
Where the FP8 work runs: ``Linear`` and ``LayerNormLinear`` with their input and parameters on
fp8emu's GPU (a build with CUDA where ``fp8emu.cuda_available()``) run their casts, GEMMs, bias
add, bias grad and norm there (:mod:`fp8emu.layers`' GPU path: the same bits as the emulator);
otherwise they copy non-CPU tensors to the host for the emulator and the results back. The rest of
every module (activations, attention, softmax, dropout, the standalone norms) is PyTorch's own
arithmetic on the tensors' device, so its bits are PyTorch's on that device.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("fp8emu.torch needs PyTorch (pip install torch); the rest of fp8emu works without it") from e

from .attention import DotProductAttention, MultiheadAttention, RotaryPositionEmbedding
from .fp8 import (autocast, fp8_autocast, fp8_model_init, get_default_recipe, get_fp8_recipe, is_fp8_available,
                  is_fp8_block_scaling_available, is_fp8_enabled, is_mxfp8_available, is_nvfp4_available,
                  quantized_model_init)
from .distributed import checkpoint
from .module import Fp8Padding, Fp8Unpadding, GroupedLinear, LayerNorm, LayerNormLinear, LayerNormMLP, Linear, RMSNorm
from .module.layernorm_mlp import _ACTIVATIONS  # noqa: F401 (TE's activation table, read by tests)
from .transformer import TransformerLayer
from .utils import get_device_compute_capability, is_bf16_available
from . import optimizers
from . import _unsupported
from . import quantization

# TE's public names that are not modelled: present, raising NotImplementedError with the reason.
for _name in _unsupported.REASONS:
    globals()[_name] = _unsupported.unsupported(_name)
for _name in _unsupported.NAMESPACES:
    globals()[_name] = _unsupported.namespace(_name)
del _name

__all__ = ["Linear", "GroupedLinear", "Fp8Padding", "Fp8Unpadding", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm", "DotProductAttention", "MultiheadAttention",
           "RotaryPositionEmbedding",
           "TransformerLayer", "fp8_autocast", "autocast", "is_fp8_enabled", "get_fp8_recipe", "fp8_model_init",
           "quantized_model_init", "is_fp8_available", "is_mxfp8_available", "is_fp8_block_scaling_available",
           "is_nvfp4_available", "is_bf16_available", "get_default_recipe", "get_device_compute_capability",
           "checkpoint", "optimizers"]
