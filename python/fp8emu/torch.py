"""Transformer Engine's PyTorch API on fp8emu: a model written for TE runs on a CPU by changing one import.

    import fp8emu.torch as te                     # instead of: import transformer_engine.pytorch as te
    from fp8emu import DelayedScaling, Format     # instead of: transformer_engine.common.recipe

    layer = te.Linear(768, 3072, bias=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)):
        y = layer(x)
    y.sum().backward()

Imported only when PyTorch is importable (``import fp8emu.torch``; PyTorch is not a dependency of
fp8emu). :class:`Linear`, :class:`LayerNormLinear` and :class:`LayerNormMLP` are ``torch.nn.Module`` s with TE's constructor
arguments and parameter names, whose FP8 forward and backward are ``torch.autograd.Function`` s over
:mod:`fp8emu.layers`: inside :func:`fp8_autocast` every GEMM (fprop, dgrad, wgrad) runs on FP8
operands cast by fp8emu's quantizers under the recipe (E4M3 forward, E5M2 gradients under
``Format.HYBRID``), accumulated as TE runs them on Hopper (tensor-core model, fast accumulation in
fprop, fp32 promotion every 128 K-elements in dgrad and wgrad), bit for bit as fp8emu's C++
``nn::Linear`` / ``nn::LayerNormLinear``. Outside the context (or with ``enabled=False``) the modules
are plain fp32 ``torch.nn.functional.linear`` / ``layer_norm`` (the same bits as ``torch.nn.Linear``
and ``torch.nn.LayerNorm``).

Delayed scaling's state is updated where TE updates it: each module's forward amax history and
scales at the exit of the outermost ``fp8_autocast`` (TE ``reduce_and_update_fp8_tensors(forward=True)``),
its backward state at the end of the backward pass (the backward of the first FP8 module of the
autocast region, as TE's ``reduce_and_update_bwd_fp8_tensors``). The state is per module (no
distributed amax reduction: ``fp8_group`` is accepted and ignored on one process).

Tensors: any float dtype (float32, bfloat16, float16: widened exactly to float32 for the emulator;
results in the input's dtype) on any device (non-CPU tensors are copied to the host for the
emulator and the results copied back). Input shape (..., in_features), output (..., out_features).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, List, Optional

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("fp8emu.torch needs PyTorch (pip install torch); the rest of fp8emu works without it") from e

import numpy as np

from . import layers as _layers
from .recipe import DelayedScaling, Quantizer

__all__ = ["Linear", "LayerNormLinear", "LayerNormMLP", "fp8_autocast", "autocast", "is_fp8_enabled", "get_fp8_recipe"]


# ------------------------------------------------------------------------------------------ autocast

@dataclass
class _Region:
    enabled: bool
    calibrating: bool
    recipe: Any
    modules: List[Any] = field(default_factory=list)  # modules whose FP8 forward ran in the region
    first_module_seen: bool = False
    backward_group: Optional["_BackwardGroup"] = None


class _BackwardGroup:
    """The backward quantizers of one autocast region, updated together at the end of the backward."""

    def __init__(self):
        self.quantizers: List[Quantizer] = []

    def add(self, q: Quantizer) -> None:
        if not any(q is o for o in self.quantizers):
            self.quantizers.append(q)

    def update(self) -> None:
        for q in self.quantizers:
            q.update_scales()


_STACK: List[_Region] = []


def is_fp8_enabled() -> bool:
    """Whether FP8 is on here (inside an ``fp8_autocast(enabled=True)``), as TE's
    ``FP8GlobalStateManager.is_fp8_enabled``."""
    return bool(_STACK) and _STACK[-1].enabled


def get_fp8_recipe() -> Any:
    """The recipe of the innermost autocast (TE's default ``DelayedScaling()`` outside one)."""
    return _STACK[-1].recipe if _STACK else DelayedScaling()


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None, fp8_group: Any = None,
                 _graph: bool = False):
    """TE ``fp8_autocast``: FP8 execution of fp8emu.torch modules inside the block.

    Args:
        enabled: run the modules' GEMMs in FP8.
        calibrating: with ``enabled=False``, run in fp32 but record the amax of inputs and weights
            in the delayed-scaling histories (TE's calibration).
        fp8_recipe: a recipe (``fp8emu.DelayedScaling`` (default ``DelayedScaling()``),
            ``Float8CurrentScaling``, ``MXFP8BlockScaling``, ``Float8BlockScaling``).
        fp8_group: TE's amax reduction group; ignored (one process).
    Nesting: the innermost context decides; the forward scales are updated at the exit of the
    outermost one (TE's ``FP8_AUTOCAST_DEPTH == 0``).
    Raises:
        TypeError: a recipe that is not one of fp8emu's recipe classes.
    """
    recipe = DelayedScaling() if fp8_recipe is None else fp8_recipe
    if getattr(recipe, "_kind", None) is None:
        raise TypeError(f"fp8_recipe must be an fp8emu recipe (DelayedScaling, Float8CurrentScaling, "
                        f"MXFP8BlockScaling, Float8BlockScaling); got {type(recipe).__name__}")
    region = _Region(bool(enabled), bool(calibrating), recipe)
    _STACK.append(region)
    try:
        yield
    finally:
        _STACK.pop()
        if _STACK:  # nested: hand the modules to the enclosing region, which updates them at its exit
            _STACK[-1].modules.extend(region.modules)
        elif not _graph:
            seen = []
            for m in region.modules:
                if not any(m is o for o in seen):
                    seen.append(m)
                    m._fwd_quantizer.update_scales()


def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None, amax_reduction_group: Any = None):
    """TE 2.x's newer name for :func:`fp8_autocast` (``recipe`` for ``fp8_recipe``)."""
    return fp8_autocast(enabled=enabled, calibrating=calibrating, fp8_recipe=recipe, fp8_group=amax_reduction_group)


# ------------------------------------------------------------------------------------------ helpers

def _np(t: "torch.Tensor") -> np.ndarray:
    """A float32 C-contiguous host NumPy view (or copy) of t."""
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def _like(t: "torch.Tensor") -> SimpleNamespace:
    """What a result must match of t: dtype, device, shape (without keeping t alive)."""
    return SimpleNamespace(dtype=t.dtype, device=t.device, shape=tuple(t.shape))


def _back(a: Optional[np.ndarray], like: Any) -> Optional["torch.Tensor"]:
    if a is None:
        return None
    return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)


_IGNORED = {"sequence_parallel": False, "fuse_wgrad_accumulation": False, "tp_group": None, "tp_size": 1,
            "get_rng_state_tracker": None, "rng_tracker_name": None, "parallel_mode": None,
            "parameters_split": None, "name": None, "return_layernorm_output_gathered": False,
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
        if k == "tp_size" and v != 1 or k in ("tp_group", "parallel_mode", "parameters_split") and v is not None \
                or k in ("sequence_parallel", "fuse_wgrad_accumulation", "delay_wgrad_compute") and v:
            raise NotImplementedError(f"{cls}: {k}={v!r} is not supported by fp8emu.torch (one process, no "
                                      f"tensor parallelism)")


def _default_init(w: "torch.Tensor") -> None:
    """TE's ``get_default_init_method()``: normal, mean 0, std 0.023."""
    torch.nn.init.normal_(w, mean=0.0, std=0.023)


class _Fp8Module(torch.nn.Module):
    """State shared by the FP8 modules: the forward and backward quantizers of the recipe in use."""

    def _init_fp8(self) -> None:
        self._recipe = None
        self._fwd_quantizer: Optional[Quantizer] = None
        self._bwd_quantizer: Optional[Quantizer] = None
        self._weight_q = None

    def _quantizers(self, recipe: Any):
        # A new recipe (not equal to the one the state was made for) starts new state, as TE resets its
        # fp8_meta when the recipe changes.
        if self._fwd_quantizer is None or self._recipe != recipe or type(self._recipe) is not type(recipe):
            self._recipe = recipe
            self._fwd_quantizer = Quantizer(recipe, "forward")
            self._bwd_quantizer = Quantizer(recipe, "backward")
            self._weight_q = None
        return self._fwd_quantizer, self._bwd_quantizer

    def _region_enter(self, region: _Region, needs_grad: bool):
        """Registers this module's FP8 pass in the region; returns the backward group this call
        must update at the end of its backward (the first FP8 module of the region) or None."""
        region.modules.append(self)
        if region.backward_group is None:
            region.backward_group = _BackwardGroup()
        region.backward_group.add(self._bwd_quantizer)
        first = needs_grad and not region.first_module_seen
        if needs_grad:
            region.first_module_seen = True
        return region.backward_group if first else None

    @property
    def fp8_meta(self) -> dict:
        """TE's ``fp8_meta`` view of the delayed-scaling state: ``{"recipe", "scaling_fwd",
        "scaling_bwd"}``, each scaling entry with ``scale`` (slots,) and ``amax_history``
        (amax_history_len, slots) float32 tensors (copies). Slots: forward input 0, weight 1,
        output 2; backward grad_output 0, grad_input 1. Empty before the first FP8 forward and for
        recipes without state."""
        meta: dict = {"recipe": self._recipe}
        for key, q in (("scaling_fwd", self._fwd_quantizer), ("scaling_bwd", self._bwd_quantizer)):
            st = None if q is None else q._impl.state()
            if st is not None:
                meta[key] = SimpleNamespace(scale=torch.from_numpy(st[0].copy()),
                                            scale_inv=torch.from_numpy((np.float32(1) / st[0]).astype(np.float32)),
                                            amax_history=torch.from_numpy(st[1].copy()))
        return meta

    @property
    def quantizers(self) -> dict:
        """The :class:`fp8emu.Quantizer` objects of the recipe in use: ``{"forward", "backward"}``."""
        return {"forward": self._fwd_quantizer, "backward": self._bwd_quantizer}


# ------------------------------------------------------------------------------------------ Linear

class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, module, weight_q, group):
        ctx.set_materialize_grads(False)
        in_f = weight.shape[1]
        x2 = _np(x.reshape(-1, in_f))
        training = any(ctx.needs_input_grad[:3])
        if weight_q is None:
            weight_q = _layers.quantize_weight(_np(weight), module._fwd_quantizer)
        module._weight_q = weight_q
        b = None if bias is None else _np(bias)
        y, saved = _layers.linear_forward(x2, None, b, module._fwd_quantizer, training=training, weight_q=weight_q)
        ctx.saved, ctx.module, ctx.group = saved, module, group
        ctx.x_like, ctx.w_like = _like(x), _like(weight)
        ctx.has_bias = bias is not None
        return _back(y, ctx.x_like).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        out_f = ctx.saved.out_features
        dy2 = np.zeros((ctx.saved.rows, out_f), np.float32) if dy is None else _np(dy.reshape(-1, out_f))
        dx, dw, db = _layers.linear_backward(dy2, ctx.saved, ctx.module._bwd_quantizer,
                                             need_dgrad=ctx.needs_input_grad[0], need_wgrad=ctx.needs_input_grad[1])
        ctx.saved = None
        if ctx.group is not None:
            ctx.group.update()
        gx = None if dx is None else _back(dx, ctx.x_like).reshape(ctx.x_like.shape)
        gw = _back(dw, ctx.w_like)
        gb = _back(db, ctx.w_like) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb, None, None, None


def _weight_cache(module, fwd, is_first_microbatch):
    """TE's weight caching: None casts W every call, True casts and caches it, False reuses it."""
    if is_first_microbatch is False:
        if module._weight_q is None:
            raise RuntimeError("is_first_microbatch=False but no FP8 weight is cached (call with True first)")
        return module._weight_q
    return None


def _add_weight_and_bias(module, in_features, out_features, bias, dtype, device, init_method) -> None:
    """TE's ``weight`` (out_features, in_features), initialised by ``init_method`` (default: as
    torch.nn.Linear), and ``bias`` (out_features,) of zeros, or no bias."""
    module.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
    (init_method or _default_init)(module.weight.data)
    if bias:
        module.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device))
    else:
        module.register_parameter("bias", None)


class Linear(_Fp8Module):
    """TE ``transformer_engine.pytorch.Linear``: ``y = x W^T + b`` with FP8 GEMMs inside :func:`fp8_autocast`.

    Args (TE's names; the tensor-parallel and userbuffer ones are accepted at their defaults only):
        in_features, out_features: sizes.
        bias: learn an additive bias (zeros at start, as TE).
        init_method: callable initialising ``weight`` in place (default TE's normal(0, 0.023)).
        return_bias: return ``(y, bias)`` with the bias not added (TE's fusion hook).
        params_dtype: parameter dtype (default ``torch.get_default_dtype()``).
        device: where the parameters live (default "cpu"; TE's default is "cuda"). GEMMs run on the
            host emulator whatever the device.
    Parameters: ``weight`` (out_features, in_features), ``bias`` (out_features,) or None.
    forward(inp, is_first_microbatch=None, fp8_output=False): inp (..., in_features) -> (..., out_features)
        in inp's dtype. ``is_first_microbatch``: TE's weight caching (True casts and caches the FP8
        weight, False reuses it). ``fp8_output`` is accepted and ignored (the output is dequantized).
    Raises:
        NotImplementedError: tensor/sequence parallelism, userbuffers, fuse_wgrad_accumulation.
        TypeError: unknown keyword arguments.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, init_method: Optional[Callable] = None,
                 return_bias: bool = False, params_dtype: Optional["torch.dtype"] = None, device: Any = "cpu",
                 **kwargs: Any):
        super().__init__()
        _check_ignored(kwargs, "Linear")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.use_bias, self.return_bias = bool(bias), bool(return_bias)
        dtype = params_dtype or torch.get_default_dtype()
        self.params_dtype = dtype
        _add_weight_and_bias(self, in_features, out_features, bias, dtype, device, init_method)
        self._init_fp8()

    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        bias = None if (self.bias is None or self.return_bias) else self.bias
        if region is None or not region.enabled:
            if region is not None and region.calibrating:
                self._calibrate(region, inp)
            w = self.weight.to(inp.dtype)
            out = torch.nn.functional.linear(inp, w, None if bias is None else bias.to(inp.dtype))
        else:
            fwd, _ = self._quantizers(region.recipe)
            needs_grad = torch.is_grad_enabled() and (inp.requires_grad or self.weight.requires_grad or
                                                      (bias is not None and bias.requires_grad))
            group = self._region_enter(region, needs_grad)
            weight_q = _weight_cache(self, fwd, is_first_microbatch)
            out = _LinearFn.apply(inp, self.weight, bias, self, weight_q, group)
            if is_first_microbatch is None:
                self._weight_q = None
        return (out, self.bias) if self.return_bias else out

    def _calibrate(self, region: _Region, inp: "torch.Tensor") -> None:
        fwd, _ = self._quantizers(region.recipe)
        fwd.quantize(_np(inp.reshape(-1, self.in_features)), "input", "rowwise")
        fwd.quantize(_np(self.weight), "weight", "rowwise")
        region.modules.append(self)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


# ------------------------------------------------------------------------------------------ LayerNormLinear

class _LayerNormLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ln_weight, ln_bias, weight, bias, module, weight_q, group):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        in_f = weight.shape[1]
        x2 = _np(x.reshape(-1, in_f))
        training = any(ctx.needs_input_grad[:5])
        if weight_q is None:
            weight_q = _layers.quantize_weight(_np(weight), module._fwd_quantizer)
        module._weight_q = weight_q
        y, saved, ln = _layers.layernorm_linear_forward(
            x2, _np(ln_weight), None if ln_bias is None else _np(ln_bias),
            None, None if bias is None else _np(bias), module._fwd_quantizer,
            normalization=module.normalization, eps=module.eps, zero_centered_gamma=module.zero_centered_gamma,
            training=training, weight_q=weight_q)
        ctx.saved, ctx.module, ctx.group = saved, module, group
        ctx.x_like, ctx.g_like, ctx.w_like = _like(x), _like(ln_weight), _like(weight)
        ctx.has_ln_bias, ctx.has_bias = ln_bias is not None, bias is not None
        out = _back(y, ctx.x_like).reshape(*x.shape[:-1], weight.shape[0])
        ln_out = _back(ln, ctx.x_like).reshape(x.shape)
        return out, ln_out

    @staticmethod
    def backward(ctx, dy, d_ln_out):
        saved = ctx.saved
        out_f, in_f = saved.linear.out_features, saved.linear.in_features
        g_ln = None if d_ln_out is None else _np(d_ln_out.reshape(-1, in_f))
        dy2 = np.zeros((saved.linear.rows, out_f), np.float32) if dy is None else _np(dy.reshape(-1, out_f))
        dx, dgamma, dbeta, dw, db = _layers.layernorm_linear_backward(
            dy2, saved, ctx.module._bwd_quantizer, grad_ln_out=g_ln,
            need_wgrad=ctx.needs_input_grad[3])
        ctx.saved = None
        if ctx.group is not None:
            ctx.group.update()
        gx = _back(dx, ctx.x_like).reshape(ctx.x_like.shape)
        return (gx, _back(dgamma, ctx.g_like), _back(dbeta, ctx.g_like) if ctx.has_ln_bias else None,
                _back(dw, ctx.w_like), _back(db, ctx.w_like) if ctx.has_bias else None, None, None, None)


class LayerNormLinear(_Fp8Module):
    """TE ``transformer_engine.pytorch.LayerNormLinear``: ``y = Linear(Norm(x))``, FP8 GEMMs inside
    :func:`fp8_autocast`.

    Args (TE's names): in_features, out_features, eps (1e-5), bias, normalization ("LayerNorm" or
        "RMSNorm"), init_method, return_bias, return_layernorm_output (also return the norm output),
        params_dtype, zero_centered_gamma (scale by 1 + gamma; gamma starts at 0), device; the
        parallel and userbuffer arguments at their defaults only.
    Parameters: ``layer_norm_weight`` (in_features,), ``layer_norm_bias`` (in_features,; LayerNorm
        only), ``weight`` (out_features, in_features), ``bias`` (out_features,) or None.
    FP8: the norm is fp8emu's C++ LayerNorm/RMSNorm (statistics summed in double, rounded once to
    fp32: the same bits as ``nn::LayerNormLinear``, which can differ from ``torch.nn.LayerNorm`` in
    the last bit), its output cast to FP8 as TE does (see :func:`fp8emu.layers.layernorm_linear_forward`).
    Without FP8: ``torch.nn.functional.layer_norm`` (or the RMSNorm formula in fp32) and ``linear``.
    """

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5, bias: bool = True,
                 normalization: str = "LayerNorm", init_method: Optional[Callable] = None, return_bias: bool = False,
                 params_dtype: Optional["torch.dtype"] = None, return_layernorm_output: bool = False,
                 zero_centered_gamma: bool = False, device: Any = "cpu", **kwargs: Any):
        super().__init__()
        _check_ignored(kwargs, "LayerNormLinear")
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"unknown normalization {normalization!r} (accepted: LayerNorm, RMSNorm)")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.eps, self.normalization = float(eps), normalization
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self.return_bias, self.return_layernorm_output = bool(return_bias), bool(return_layernorm_output)
        self.use_bias = bool(bias)
        dtype = params_dtype or torch.get_default_dtype()
        self.params_dtype = dtype
        g0 = torch.zeros if zero_centered_gamma else torch.ones
        self.layer_norm_weight = torch.nn.Parameter(g0(in_features, dtype=dtype, device=device))
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(in_features, dtype=dtype, device=device))
        else:
            self.register_parameter("layer_norm_bias", None)
        _add_weight_and_bias(self, in_features, out_features, bias, dtype, device, init_method)
        self._init_fp8()

    def _norm_fp32(self, inp: "torch.Tensor") -> "torch.Tensor":
        g = self.layer_norm_weight.to(inp.dtype)
        if self.zero_centered_gamma:
            g = g + 1
        if self.normalization == "LayerNorm":
            return torch.nn.functional.layer_norm(inp, (self.in_features,), g, self.layer_norm_bias.to(inp.dtype),
                                                  self.eps)
        return inp * torch.rsqrt(inp.pow(2).mean(-1, keepdim=True) + self.eps) * g

    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        bias = None if (self.bias is None or self.return_bias) else self.bias
        if region is None or not region.enabled:
            ln = self._norm_fp32(inp)
            if region is not None and region.calibrating:
                fwd, _ = self._quantizers(region.recipe)
                fwd.quantize(_np(ln.reshape(-1, self.in_features)), "input", "rowwise")
                fwd.quantize(_np(self.weight), "weight", "rowwise")
                region.modules.append(self)
            out = torch.nn.functional.linear(ln, self.weight.to(inp.dtype),
                                             None if bias is None else bias.to(inp.dtype))
        else:
            fwd, _ = self._quantizers(region.recipe)
            params = [self.layer_norm_weight, self.weight] + [p for p in (self.layer_norm_bias, bias) if p is not None]
            needs_grad = torch.is_grad_enabled() and (inp.requires_grad or any(p.requires_grad for p in params))
            group = self._region_enter(region, needs_grad)
            weight_q = _weight_cache(self, fwd, is_first_microbatch)
            out, ln = _LayerNormLinearFn.apply(inp, self.layer_norm_weight, self.layer_norm_bias, self.weight, bias,
                                               self, weight_q, group)
            if is_first_microbatch is None:
                self._weight_q = None
        result = [out]
        if self.return_bias:
            result.append(self.bias)
        if self.return_layernorm_output:
            result.append(ln)
        return result[0] if len(result) == 1 else tuple(result)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"normalization={self.normalization}, bias={self.bias is not None}")


# ------------------------------------------------------------------------------------------ LayerNormMLP

_ACTIVATIONS = {
    "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),  # TE's gelu is the tanh form
    "relu": torch.nn.functional.relu,
}


class LayerNormMLP(torch.nn.Module):
    """TE ``transformer_engine.pytorch.LayerNormMLP``: ``y = FC2(act(FC1(Norm(x))))``, FP8 GEMMs inside
    :func:`fp8_autocast`.

    Args (TE's names): hidden_size, ffn_hidden_size, eps (1e-5), bias, normalization ("LayerNorm" or
        "RMSNorm"), activation ("gelu": tanh form, as TE; or "relu"), init_method (FC1's weight),
        output_layer_init_method (FC2's; default init_method), return_bias (return FC2's bias unadded),
        return_layernorm_output, params_dtype, zero_centered_gamma, device; the parallel and
        userbuffer arguments at their defaults only.
    Parameters (TE's names): ``layer_norm_weight`` (hidden_size,), ``layer_norm_bias`` (hidden_size,;
        LayerNorm only), ``fc1_weight`` (ffn_hidden_size, hidden_size), ``fc1_bias``
        (ffn_hidden_size,), ``fc2_weight`` (hidden_size, ffn_hidden_size), ``fc2_bias``
        (hidden_size,); no biases with ``bias=False``.
    FP8: the norm and FC1 are :class:`LayerNormLinear`'s path, FC2 is :class:`Linear`'s (its input,
    the activation output, cast to FP8 by FC2's forward quantizer); the activation runs in fp32 on
    the host (PyTorch's, which may differ from TE's CUDA gelu in the last bit). Each GEMM has its own
    delayed-scaling slots (TE keeps the same six forward slots in one ``fp8_meta``), so the scales
    and amax histories are TE's.
    forward(inp, is_first_microbatch=None): inp (..., hidden_size) -> (..., hidden_size).
    Raises:
        ValueError: unknown normalization or activation. NotImplementedError, TypeError: as Linear.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, eps: float = 1e-5, bias: bool = True,
                 normalization: str = "LayerNorm", activation: str = "gelu", init_method: Optional[Callable] = None,
                 output_layer_init_method: Optional[Callable] = None, return_bias: bool = False,
                 return_layernorm_output: bool = False, params_dtype: Optional["torch.dtype"] = None,
                 zero_centered_gamma: bool = False, device: Any = "cpu", **kwargs: Any):
        super().__init__()
        _check_ignored(kwargs, "LayerNormMLP")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} (accepted: {', '.join(_ACTIVATIONS)})")
        self.hidden_size, self.ffn_hidden_size = int(hidden_size), int(ffn_hidden_size)
        self.activation = activation
        self.return_bias, self.return_layernorm_output = bool(return_bias), bool(return_layernorm_output)
        fc1 = LayerNormLinear(hidden_size, ffn_hidden_size, eps=eps, bias=bias, normalization=normalization,
                              init_method=init_method, params_dtype=params_dtype, return_layernorm_output=True,
                              zero_centered_gamma=zero_centered_gamma, device=device)
        fc2 = Linear(ffn_hidden_size, hidden_size, bias=bias, init_method=output_layer_init_method or init_method,
                     return_bias=return_bias, params_dtype=params_dtype, device=device)
        # The two parts are not registered as submodules: their parameters are this module's, under
        # TE's names (the same Parameter objects, so .to(), load_state_dict and optimizers see one set).
        object.__setattr__(self, "_parts", (fc1, fc2))
        self.layer_norm_weight = fc1.layer_norm_weight
        if fc1.layer_norm_bias is not None:
            self.layer_norm_bias = fc1.layer_norm_bias
        else:
            self.register_parameter("layer_norm_bias", None)
        for name, p in (("fc1_weight", fc1.weight), ("fc1_bias", fc1.bias), ("fc2_weight", fc2.weight),
                        ("fc2_bias", fc2.bias)):
            if p is None:
                self.register_parameter(name, None)
            else:
                setattr(self, name, p)

    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None):
        fc1, fc2 = self._parts
        h, ln = fc1(inp, is_first_microbatch=is_first_microbatch)
        out = fc2(_ACTIVATIONS[self.activation](h), is_first_microbatch=is_first_microbatch)
        result = list(out) if self.return_bias else [out]
        if self.return_layernorm_output:
            result.append(ln)
        return result[0] if len(result) == 1 else tuple(result)

    @property
    def fp8_meta(self) -> dict:
        """The two GEMMs' :attr:`Linear.fp8_meta`: ``{"fc1": ..., "fc2": ...}``."""
        return {"fc1": self._parts[0].fp8_meta, "fc2": self._parts[1].fp8_meta}

    @property
    def quantizers(self) -> dict:
        """The two GEMMs' quantizers: ``{"fc1": {"forward", "backward"}, "fc2": {...}}``."""
        return {"fc1": self._parts[0].quantizers, "fc2": self._parts[1].quantizers}

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, ffn_hidden_size={self.ffn_hidden_size}, "
                f"activation={self.activation}, normalization={self._parts[0].normalization}")
