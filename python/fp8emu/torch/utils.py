"""Tensor helpers of the modules: PyTorch tensors to fp8emu arrays and back, TE's ignored arguments."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace
from typing import Any, Optional, Tuple

import torch
import numpy as np

from .. import _cuda, _fp8emu


def _np(t: "torch.Tensor") -> np.ndarray:
    """A float32 C-contiguous host NumPy view (or copy) of t."""
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def _on_gpu(*tensors: Optional["torch.Tensor"]) -> bool:
    """True when the tensors (None ignored) are all CUDA tensors on fp8emu's GPU and its GPU path can
    run: the layer's FP8 work then stays on the GPU (fp8emu.layers' GPU path)."""
    ts = [t for t in tensors if t is not None]
    if not ts or not all(t.is_cuda for t in ts) or not _cuda.available():
        return False
    index = _fp8emu.cuda_device_index()
    return all(t.device.index == index for t in ts)


def _arr(t: "torch.Tensor", gpu: bool) -> Any:
    """A float32 C-contiguous array of t: on the GPU path the CUDA tensor itself (or a float32 copy
    on the GPU), otherwise a host NumPy array (:func:`_np`)."""
    if gpu:
        return t.detach().to(dtype=torch.float32).contiguous()
    return _np(t)


def _check_cached_side(weight_q: Any, gpu: bool) -> None:
    """A cached FP8 weight (is_first_microbatch=False) must be where this call runs."""
    if weight_q is not None and weight_q.is_cuda != gpu:
        raise RuntimeError(f"the FP8 weight cached by is_first_microbatch=True is on {weight_q.device}, but this "
                           f"call runs on {'the GPU' if gpu else 'the host'}: call with is_first_microbatch=True "
                           f"again after moving the module or its input")


def _zeros_or_arr(g: Optional["torch.Tensor"], shape: Tuple[int, int], ctx: Any) -> Any:
    """A backward's incoming gradient as a float32 2-D array on the forward's side (zeros when the
    output was unused: set_materialize_grads(False) passes None)."""
    if g is None:
        if ctx.gpu:
            return torch.zeros(shape, dtype=torch.float32, device=ctx.x_like.device)
        return np.zeros(shape, np.float32)
    return _arr(g.reshape(-1, shape[1]), ctx.gpu)


def _like(t: "torch.Tensor") -> SimpleNamespace:
    """What a result must match of t: dtype, device, shape (without keeping t alive)."""
    return SimpleNamespace(dtype=t.dtype, device=t.device, shape=tuple(t.shape))


def _param_grad(a: Any, ctx: Any) -> Optional["torch.Tensor"]:
    """A weight or bias gradient in the parameter's dtype; under ``torch.autocast`` (the activation
    dtype differs from the parameters') first rounded to the activation dtype, as TE's wgrad GEMM
    and bias gradient come out in it."""
    if a is None:
        return None
    if ctx.x_like.dtype != ctx.w_like.dtype:
        return _back(a, ctx.x_like).to(ctx.w_like.dtype)
    return _back(a, ctx.w_like)


def _back(a: Any, like: Any) -> Optional["torch.Tensor"]:
    if a is None:
        return None
    if isinstance(a, torch.Tensor):  # a GPU-path result: already on like's device
        return a.to(device=like.device, dtype=like.dtype)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)


_IGNORED = {"sequence_parallel": False, "fuse_wgrad_accumulation": False, "tp_group": None, "tp_size": 1,
            "get_rng_state_tracker": None, "rng_tracker_name": None, "parallel_mode": None,
            "name": None, "return_layernorm_output_gathered": False,
            "symmetric_ar_type": None, "delay_wgrad_compute": False, "save_original_input": False,
            "ub_name": None}


def _check_ignored(kwargs: dict, cls: str) -> None:
    for k, v in kwargs.items():
        if k.startswith("ub_"):
            if v not in (False, None):
                raise NotImplementedError(f"{cls}: {k}={v!r} (userbuffers overlap) has no meaning in the emulator")
            continue
        if k not in _IGNORED:
            raise TypeError(f"{cls}() got an unexpected keyword argument '{k}'")
        if k == "tp_size" and v != 1 or k in ("tp_group", "parallel_mode") and v is not None \
                or k in ("sequence_parallel", "fuse_wgrad_accumulation", "delay_wgrad_compute") and v:
            raise NotImplementedError(f"{cls}: {k}={v!r} is not supported by fp8emu.torch (one process, no "
                                      f"tensor parallelism)")


def _torch_type_name(dtype: "torch.dtype") -> str:
    """PyTorch's scalar type name of a dtype, as its error messages print it ("Float", "Long", "BFloat16")."""
    return torch.empty(0, dtype=dtype).type().rsplit(".", 1)[-1].replace("Tensor", "")


def _check_float_input(inp: "torch.Tensor", weight: "torch.Tensor") -> None:
    """A GEMM input must be floating point: otherwise the error ``torch.nn.functional.linear`` gives
    (torch's own RuntimeError naming both dtypes), never a silent cast of the weight to the input's
    dtype."""
    if inp.is_floating_point():
        return
    torch.nn.functional.linear(inp, weight.detach())  # raises torch's dtype error
    raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {_torch_type_name(inp.dtype)} and "
                       f"{_torch_type_name(weight.dtype)}")


ANY_SHAPE_ENV = "FP8EMU_TORCH_ANY_FP8_SHAPE"


def _check_fp8_dims(*tensors: "torch.Tensor") -> None:
    """TE's ``assert_dim_for_fp8_exec`` under FP8: the product of all dimensions but the last must be
    divisible by 8 and the last by 16 (the FP8 tensor cores' TN GEMM), with TE's AssertionError and
    message, so a script that runs here runs on a GPU too. ``FP8EMU_TORCH_ANY_FP8_SHAPE=1`` in the
    environment lifts the rule (the emulator computes any shape; TE would refuse it)."""
    if os.environ.get(ANY_SHAPE_ENV, "0") == "1":
        return
    for t in tensors:
        assert math.prod(t.shape[:-1]) % 8 == 0 and t.shape[-1] % 16 == 0, (
            "FP8 execution requires the product of all dimensions except the last to be divisible"
            " by 8 and the last dimension to be divisible by 16, but got tensor with"
            f" dims={list(t.size())}")


def _autocast_dtype(inp: "torch.Tensor") -> Optional["torch.dtype"]:
    """The dtype of an active ``torch.autocast`` on inp's device (TE's activation dtype then), or None."""
    kind = inp.device.type
    try:
        if torch.is_autocast_enabled(kind):
            return torch.get_autocast_dtype(kind)
    except (TypeError, AttributeError, RuntimeError):  # older PyTorch: the CUDA and CPU entry points
        if kind == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        if kind == "cpu" and torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
    return None


def _check_activation_dtype(module: "torch.nn.Module", inp: "torch.Tensor") -> None:
    """TE's ``set_activation_dtype`` outside ``torch.autocast``: every parameter must have the input's
    dtype (TE's AssertionError and message); under autocast the activation dtype is autocast's."""
    if _autocast_dtype(inp) is not None or not inp.is_floating_point():
        return
    for name, param in module.named_parameters():
        if param is not None:
            assert inp.dtype == param.dtype, (
                "Data types for parameters must match when outside of autocasted region. "
                f" Found input dtype: {inp.dtype} and {name!r} dtype: {param.dtype}")


def _no_dynamo(fn):
    """TE's ``no_torch_dynamo``: torch.compile runs this function eagerly (a graph break around it)
    instead of tracing into fp8emu's extension; the compiled model then gives the eager bits."""
    dynamo = getattr(torch, "_dynamo", None)
    return dynamo.disable(fn, recursive=True) if dynamo is not None and hasattr(dynamo, "disable") else fn


class _NoQuantizerState:
    """TE's ``_extra_state`` of a module that holds no FP8 state here (DotProductAttention without
    FP8 attention, the standalone norms): an empty uint8 tensor, as TE writes when its module ran
    no FP8, so ``state_dict`` has TE's keys and a checkpoint round trip is exact."""

    def get_extra_state(self) -> "torch.Tensor":
        return torch.empty(0, dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        if state is None or (isinstance(state, torch.Tensor) and state.numel() == 0):
            return
        raise NotImplementedError(f"{type(self).__name__}: this checkpoint holds FP8 state (TE's FP8 attention or "
                                  f"a quantized norm), which fp8emu.torch does not model")


def _default_init(w: "torch.Tensor") -> None:
    """TE's ``get_default_init_method()``: normal, mean 0, std 0.023."""
    torch.nn.init.normal_(w, mean=0.0, std=0.023)


def is_bf16_available(return_reason: bool = False) -> Any:
    """TE ``is_bf16_available``: True (PyTorch computes bfloat16 on every device fp8emu.torch runs
    on); with ``return_reason`` the pair ``(True, "")``."""
    return (True, "") if return_reason else True


def get_device_compute_capability() -> Tuple[int, int]:
    """TE ``get_device_compute_capability``: the compute capability of the GPU whose FP8 datapath
    fp8emu.torch models, Hopper's (9, 0), whatever the machine has (scripts gate FP8 on it)."""
    return (9, 0)
