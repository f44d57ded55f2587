"""TE's ``transformer_engine.pytorch.quantization`` (older name ``fp8``): the autocast, the
availability checks, the default recipe and the recipe helpers scripts import from it, on
fp8emu's emulated FP8 (every check is True, the reason saying it is emulated)."""

from __future__ import annotations

from typing import Any, Tuple

import torch

from ..recipe import Format
from .fp8 import (_EMULATED, _STACK, _reset_registered, _update_registered, autocast, fp8_autocast, fp8_model_init, get_default_recipe, get_fp8_recipe,
                  is_fp8_available, is_fp8_block_scaling_available, is_fp8_enabled, is_mxfp8_available,
                  is_nvfp4_available, quantized_model_init)
from .module.fp8_padding import _align_size

__all__ = ["autocast", "fp8_autocast", "fp8_model_init", "quantized_model_init", "is_fp8_available",
           "is_mxfp8_available", "is_fp8_block_scaling_available", "is_nvfp4_available", "check_fp8_support",
           "check_mxfp8_support", "check_nvfp4_support", "check_fp8_block_scaling_support", "check_recipe_support",
           "get_default_fp8_recipe", "get_default_recipe", "get_align_size_for_quantization", "get_fp8_torch_dtype",
           "get_fp8_max", "get_fp8_te_dtype", "get_fp4_te_dtype", "FP8GlobalStateManager", "QuantizerRole",
           "QuantizerRequest", "DelayedScalingRequest"]

from ._unsupported import unsupported as _unsupported  # noqa: E402

QuantizerRole = _unsupported("QuantizerRole", module=__name__)
QuantizerRequest = _unsupported("QuantizerRequest", module=__name__)
DelayedScalingRequest = _unsupported("DelayedScalingRequest", module=__name__)


def check_fp8_support() -> Tuple[bool, str]:
    """TE ``check_fp8_support``: ``(True, reason)``, FP8 being emulated."""
    return True, _EMULATED


check_mxfp8_support = check_nvfp4_support = check_fp8_block_scaling_support = check_fp8_support


def check_recipe_support(recipe: Any) -> None:
    """TE ``check_recipe_support``: every fp8emu recipe runs here (None too: nothing to check, as
    TE); anything else raises TypeError."""
    if recipe is not None and getattr(recipe, "_kind", None) is None:
        raise TypeError(f"not an fp8emu recipe: {type(recipe).__name__}")


def get_default_fp8_recipe() -> Any:
    """TE ``get_default_fp8_recipe``: the recipe TE picks on the modelled GPU (Hopper, compute
    capability 9.0): ``DelayedScaling()``."""
    return get_default_recipe()


def get_align_size_for_quantization(recipe: Any) -> int:
    """TE ``get_align_size_for_quantization``: 32 for MXFP8, 128 for NVFP4, 16 otherwise."""
    return _align_size(recipe)


def _fwd_format(recipe: Any, fprop_tensor: bool) -> bool:
    """True where the tensor is E4M3 (TE: E4M3 recipes everywhere, HYBRID forward tensors only)."""
    return recipe.fp8_format == Format.E4M3 or (recipe.fp8_format == Format.HYBRID and fprop_tensor)


def get_fp8_torch_dtype(fp8_recipe: Any, fprop_tensor: bool = True) -> "torch.dtype":
    """TE ``get_fp8_torch_dtype``: ``torch.float8_e4m3fn`` or ``torch.float8_e5m2`` for a forward
    (``fprop_tensor``) or backward tensor of the recipe; ``torch.float8_e4m3fnuz`` /
    ``torch.float8_e5m2fnuz`` for a recipe with ``fnuz=True``, as ROCm's TE on MI300."""
    fwd = _fwd_format(fp8_recipe, fprop_tensor)
    if getattr(fp8_recipe, "fnuz", False):
        return torch.float8_e4m3fnuz if fwd else torch.float8_e5m2fnuz
    return torch.float8_e4m3fn if fwd else torch.float8_e5m2


def get_fp8_max(fp8_recipe: Any, fprop_tensor: bool = True) -> float:
    """TE ``get_fp8_max``: the format's largest finite value (448 or 57344) for that tensor; 240 for
    E4M3 with ``fnuz=True`` (ROCm's TE on MI300: E5M2FNUZ's max is 57344 too)."""
    helper = fp8_recipe.fp8_format.value
    fmax = helper.max_fwd if fprop_tensor else helper.max_bwd
    return 240.0 if getattr(fp8_recipe, "fnuz", False) and fmax == 448 else fmax


def get_fp8_te_dtype(fp8_recipe: Any, fprop_tensor: bool = True) -> Any:
    """TE ``get_fp8_te_dtype`` returns TE's C++ ``DType`` enum, which fp8emu does not mirror: use
    :func:`get_fp8_torch_dtype`. Raises NotImplementedError."""
    raise NotImplementedError("transformer_engine.pytorch.quantization.get_fp8_te_dtype is not available in "
                              "fp8emu.torch: TE's C++ DType enum is not mirrored; use get_fp8_torch_dtype")


def get_fp4_te_dtype(fp4_recipe: Any) -> Any:
    """TE ``get_fp4_te_dtype``: as :func:`get_fp8_te_dtype`, NotImplementedError."""
    raise NotImplementedError("transformer_engine.pytorch.quantization.get_fp4_te_dtype is not available in "
                              "fp8emu.torch: TE's C++ DType enum is not mirrored")


class FP8GlobalStateManager:
    """TE's ``FP8GlobalStateManager``, the queries scripts make of it (the state lives in
    :func:`fp8_autocast`'s region stack): whether FP8 is on, calibrating, the recipe and group of
    the innermost autocast, the availability checks. TE's internal buffer methods are not mirrored."""

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return is_fp8_enabled()

    @classmethod
    def is_fp8_calibration(cls) -> bool:
        return bool(_STACK) and _STACK[-1].calibrating

    @classmethod
    def get_fp8_recipe(cls) -> Any:
        return get_fp8_recipe()

    @classmethod
    def get_fp8_group(cls) -> Any:
        return _STACK[-1].group if _STACK else None

    @classmethod
    def with_fp8_parameters(cls) -> bool:
        return False

    @classmethod
    def fp8_graph_capturing(cls) -> bool:
        """True inside ``autocast(_graph=True)`` (TE's CUDA-graph capture flag)."""
        return bool(_STACK) and _STACK[-1].graph

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward: bool = True) -> None:
        """TE's update of every registered delayed-scaling state of one direction (amaxes reduced
        over each fp8_group first): what a caller runs by hand after ``autocast(_graph=True)``."""
        _update_registered(bool(forward))

    @classmethod
    def reset(cls) -> None:
        """TE ``reset``: forget every registered module (they register again at their next FP8
        forward); the modules keep their scales and histories."""
        _reset_registered()

    @classmethod
    def is_fp8_available(cls) -> Tuple[bool, str]:
        return check_fp8_support()

    is_mxfp8_available = is_fp8_block_scaling_available = is_nvfp4_available = is_fp8_available
