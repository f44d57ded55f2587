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

Delayed scaling's state is updated where TE updates it: each module's forward amax history and
scales at the exit of the outermost ``fp8_autocast`` (TE ``reduce_and_update_fp8_tensors(forward=True)``),
its backward state at the end of the backward pass (the backward of the first FP8 module of the
autocast region, as TE's ``reduce_and_update_bwd_fp8_tensors``). The state is per module (no
distributed amax reduction: ``fp8_group`` is accepted and ignored on one process).

Tensors: any float dtype (float32, bfloat16, float16: widened exactly to float32 for the emulator;
results in the input's dtype) on any device. Input shape (..., in_features), output (..., out_features).
Where the FP8 work runs: ``Linear`` and ``LayerNormLinear`` with their input and parameters on
fp8emu's GPU (a build with CUDA where ``fp8emu.cuda_available()``) run their casts, GEMMs, bias
add, bias grad and norm there (:mod:`fp8emu.layers`' GPU path: the same bits as the emulator);
otherwise they copy non-CPU tensors to the host for the emulator and the results back. The rest of
every module (activations, attention, softmax, dropout, the standalone norms) is PyTorch's own
arithmetic on the tensors' device, so its bits are PyTorch's on that device.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, List, Optional, Tuple

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("fp8emu.torch needs PyTorch (pip install torch); the rest of fp8emu works without it") from e

import numpy as np

from . import _cuda, _fp8emu
from . import layers as _layers
from .recipe import DelayedScaling, Quantizer

__all__ = ["Linear", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm", "DotProductAttention", "MultiheadAttention",
           "TransformerLayer", "fp8_autocast", "autocast", "is_fp8_enabled", "get_fp8_recipe"]


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
        gpu = _on_gpu(x, weight, bias)
        _check_cached_side(weight_q, gpu)
        x2 = _arr(x.reshape(-1, in_f), gpu)
        training = any(ctx.needs_input_grad[:3])
        if weight_q is None:
            weight_q = _layers.quantize_weight(_arr(weight, gpu), module._fwd_quantizer)
        module._weight_q = weight_q
        b = None if bias is None else _arr(bias, gpu)
        y, saved = _layers.linear_forward(x2, None, b, module._fwd_quantizer, training=training, weight_q=weight_q)
        ctx.saved, ctx.module, ctx.group, ctx.gpu = saved, module, group, gpu
        ctx.x_like, ctx.w_like = _like(x), _like(weight)
        ctx.has_bias = bias is not None
        return _back(y, ctx.x_like).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        out_f = ctx.saved.out_features
        dy2 = _zeros_or_arr(dy, (ctx.saved.rows, out_f), ctx)
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


def _split_sizes(parameters_split, out_features: int):
    """TE's ``parameters_split``: None (one ``weight``/``bias``), names (equal parts) or a dict of
    name -> rows. Returns ``[(prefix, rows)]`` with prefix "" for no split, "query_" etc. otherwise."""
    if parameters_split is None:
        return [("", out_features)]
    if isinstance(parameters_split, str) or not parameters_split:
        raise ValueError(f"parameters_split must be a non-empty tuple of names or dict of name -> rows; "
                         f"got {parameters_split!r}")
    if isinstance(parameters_split, dict):
        parts = [(f"{k.rstrip('_')}_", int(v)) for k, v in parameters_split.items()]
    elif all(isinstance(k, str) for k in parameters_split):
        parts = [(f"{k.rstrip('_')}_", out_features // len(parameters_split)) for k in parameters_split]
    else:
        raise TypeError(f"parameters_split must be a tuple of names or a dict of name -> rows; got {parameters_split!r}")
    if sum(r for _, r in parts) != out_features:
        raise ValueError(f"parameters_split {parameters_split!r} does not add up to out_features={out_features}")
    return parts


def _add_weight_and_bias(module, in_features, out_features, bias, dtype, device, init_method,
                         parameters_split=None) -> None:
    """TE's ``weight`` (out_features, in_features), initialised by ``init_method`` (default TE's
    normal(0, 0.023)), and ``bias`` (out_features,) of zeros, or no bias. With TE's
    ``parameters_split`` the rows are separate parameters ``<name>_weight`` / ``<name>_bias`` (all
    weights registered first, then the biases, as TE), each initialised by ``init_method``; the GEMM
    runs on their concatenation (exact), so the bits are those of one weight."""
    parts = _split_sizes(parameters_split, out_features)
    module.weight_names = [f"{p}weight" for p, _ in parts]
    module.bias_names = [f"{p}bias" for p, _ in parts]
    for name, (_, rows) in zip(module.weight_names, parts):
        w = torch.nn.Parameter(torch.empty(rows, in_features, dtype=dtype, device=device))
        (init_method or _default_init)(w.data)
        setattr(module, name, w)
    for name, (_, rows) in zip(module.bias_names, parts):
        if bias:
            setattr(module, name, torch.nn.Parameter(torch.zeros(rows, dtype=dtype, device=device)))
        else:
            module.register_parameter(name, None)


def _full_weight(module) -> "torch.Tensor":
    """The (out_features, in_features) weight: the parameter, or the concatenation of its splits."""
    ws = [getattr(module, n) for n in module.weight_names]
    return ws[0] if len(ws) == 1 else torch.cat(ws, 0)


def _full_bias(module) -> Optional["torch.Tensor"]:
    bs = [getattr(module, n) for n in module.bias_names]
    if bs[0] is None:
        return None
    return bs[0] if len(bs) == 1 else torch.cat(bs, 0)


class Linear(_Fp8Module):
    """TE ``transformer_engine.pytorch.Linear``: ``y = x W^T + b`` with FP8 GEMMs inside :func:`fp8_autocast`.

    Args (TE's names; the tensor-parallel and userbuffer ones are accepted at their defaults only):
        in_features, out_features: sizes.
        bias: learn an additive bias (zeros at start, as TE).
        init_method: callable initialising ``weight`` in place (default TE's normal(0, 0.023)).
        return_bias: return ``(y, bias)`` with the bias not added (TE's fusion hook).
        params_dtype: parameter dtype (default ``torch.get_default_dtype()``).
        device: where the parameters live (default "cpu"; TE's default is "cuda"). On fp8emu's GPU
            (a build with CUDA, ``fp8emu.cuda_available()``), with the input there too, the FP8 casts
            and GEMMs run on the GPU with the emulator's bits; otherwise on the host emulator.
        parameters_split: TE's split of the weight rows into named parameters (names for equal
            parts, or a dict name -> rows): ``<name>_weight``/``<name>_bias`` instead of
            ``weight``/``bias``; the GEMM runs on their concatenation (same bits as one weight).
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
                 parameters_split: Any = None, **kwargs: Any):
        super().__init__()
        _check_ignored(kwargs, "Linear")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.use_bias, self.return_bias = bool(bias), bool(return_bias)
        dtype = params_dtype or torch.get_default_dtype()
        self.params_dtype = dtype
        _add_weight_and_bias(self, in_features, out_features, bias, dtype, device, init_method, parameters_split)
        self._init_fp8()

    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        weight, full_bias = _full_weight(self), _full_bias(self)
        bias = None if self.return_bias else full_bias
        if region is None or not region.enabled:
            if region is not None and region.calibrating:
                self._calibrate(region, inp, weight)
            w = weight.to(inp.dtype)
            out = torch.nn.functional.linear(inp, w, None if bias is None else bias.to(inp.dtype))
        else:
            fwd, _ = self._quantizers(region.recipe)
            needs_grad = torch.is_grad_enabled() and (inp.requires_grad or weight.requires_grad or
                                                      (bias is not None and bias.requires_grad))
            group = self._region_enter(region, needs_grad)
            weight_q = _weight_cache(self, fwd, is_first_microbatch)
            out = _LinearFn.apply(inp, weight, bias, self, weight_q, group)
            if is_first_microbatch is None:
                self._weight_q = None
        return (out, full_bias) if self.return_bias else out

    def _calibrate(self, region: _Region, inp: "torch.Tensor", weight: "torch.Tensor") -> None:
        fwd, _ = self._quantizers(region.recipe)
        fwd.quantize(_np(inp.reshape(-1, self.in_features)), "input", "rowwise")
        fwd.quantize(_np(weight), "weight", "rowwise")
        region.modules.append(self)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.use_bias}"


# ------------------------------------------------------------------------------------------ LayerNormLinear

def _norm_torch(inp: "torch.Tensor", normalization: str, weight: "torch.Tensor", bias: Optional["torch.Tensor"],
                eps: float, zero_centered_gamma: bool) -> "torch.Tensor":
    """LayerNorm (``torch.nn.functional.layer_norm``) or RMSNorm (``x * rsqrt(mean(x^2) + eps) * g``)
    over the last dimension in inp's dtype, with TE's ``zero_centered_gamma`` (scale by 1 + g)."""
    g = weight.to(inp.dtype)
    if zero_centered_gamma:
        g = g + 1
    if normalization == "LayerNorm":
        return torch.nn.functional.layer_norm(inp, (inp.shape[-1],), g, bias.to(inp.dtype), eps)
    return inp * torch.rsqrt(inp.pow(2).mean(-1, keepdim=True) + eps) * g


class _LayerNormLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ln_weight, ln_bias, weight, bias, module, weight_q, group):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        in_f = weight.shape[1]
        gpu = _on_gpu(x, ln_weight, ln_bias, weight, bias)
        _check_cached_side(weight_q, gpu)
        x2 = _arr(x.reshape(-1, in_f), gpu)
        training = any(ctx.needs_input_grad[:5])
        if weight_q is None:
            weight_q = _layers.quantize_weight(_arr(weight, gpu), module._fwd_quantizer)
        module._weight_q = weight_q
        y, saved, ln = _layers.layernorm_linear_forward(
            x2, _arr(ln_weight, gpu), None if ln_bias is None else _arr(ln_bias, gpu),
            None, None if bias is None else _arr(bias, gpu), module._fwd_quantizer,
            normalization=module.normalization, eps=module.eps, zero_centered_gamma=module.zero_centered_gamma,
            training=training, weight_q=weight_q)
        ctx.saved, ctx.module, ctx.group, ctx.gpu = saved, module, group, gpu
        ctx.x_like, ctx.g_like, ctx.w_like = _like(x), _like(ln_weight), _like(weight)
        ctx.has_ln_bias, ctx.has_bias = ln_bias is not None, bias is not None
        out = _back(y, ctx.x_like).reshape(*x.shape[:-1], weight.shape[0])
        ln_out = _back(ln, ctx.x_like).reshape(x.shape)
        return out, ln_out

    @staticmethod
    def backward(ctx, dy, d_ln_out):
        saved = ctx.saved
        out_f, in_f = saved.linear.out_features, saved.linear.in_features
        g_ln = None if d_ln_out is None else _arr(d_ln_out.reshape(-1, in_f), ctx.gpu)
        dy2 = _zeros_or_arr(dy, (saved.linear.rows, out_f), ctx)
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
        params_dtype, zero_centered_gamma (scale by 1 + gamma; gamma starts at 0), device,
        parameters_split (as :class:`Linear`); the parallel and userbuffer arguments at their
        defaults only.
    Parameters: ``layer_norm_weight`` (in_features,), ``layer_norm_bias`` (in_features,; LayerNorm
        only), ``weight`` (out_features, in_features), ``bias`` (out_features,) or None (or the
        ``parameters_split`` parts).
    FP8: the norm is fp8emu's C++ LayerNorm/RMSNorm (statistics summed in double, rounded once to
    fp32: the same bits as ``nn::LayerNormLinear``, which can differ from ``torch.nn.LayerNorm`` in
    the last bit), its output cast to FP8 as TE does (see :func:`fp8emu.layers.layernorm_linear_forward`).
    Without FP8: ``torch.nn.functional.layer_norm`` (or the RMSNorm formula in fp32) and ``linear``.
    """

    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5, bias: bool = True,
                 normalization: str = "LayerNorm", init_method: Optional[Callable] = None, return_bias: bool = False,
                 params_dtype: Optional["torch.dtype"] = None, return_layernorm_output: bool = False,
                 zero_centered_gamma: bool = False, device: Any = "cpu", parameters_split: Any = None,
                 **kwargs: Any):
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
        _add_weight_and_bias(self, in_features, out_features, bias, dtype, device, init_method, parameters_split)
        self._init_fp8()

    def _norm_fp32(self, inp: "torch.Tensor") -> "torch.Tensor":
        return _norm_torch(inp, self.normalization, self.layer_norm_weight, self.layer_norm_bias, self.eps,
                           self.zero_centered_gamma)

    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        weight, full_bias = _full_weight(self), _full_bias(self)
        bias = None if self.return_bias else full_bias
        if region is None or not region.enabled:
            ln = self._norm_fp32(inp)
            if region is not None and region.calibrating:
                fwd, _ = self._quantizers(region.recipe)
                fwd.quantize(_np(ln.reshape(-1, self.in_features)), "input", "rowwise")
                fwd.quantize(_np(weight), "weight", "rowwise")
                region.modules.append(self)
            out = torch.nn.functional.linear(ln, weight.to(inp.dtype),
                                             None if bias is None else bias.to(inp.dtype))
        else:
            fwd, _ = self._quantizers(region.recipe)
            params = [self.layer_norm_weight, weight] + [p for p in (self.layer_norm_bias, bias) if p is not None]
            needs_grad = torch.is_grad_enabled() and (inp.requires_grad or any(p.requires_grad for p in params))
            group = self._region_enter(region, needs_grad)
            weight_q = _weight_cache(self, fwd, is_first_microbatch)
            out, ln = _LayerNormLinearFn.apply(inp, self.layer_norm_weight, self.layer_norm_bias, weight, bias,
                                               self, weight_q, group)
            if is_first_microbatch is None:
                self._weight_q = None
        result = [out]
        if self.return_bias:
            result.append(full_bias)
        if self.return_layernorm_output:
            result.append(ln)
        return result[0] if len(result) == 1 else tuple(result)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"normalization={self.normalization}, bias={self.use_bias}")


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
    the activation output, cast to FP8 by FC2's forward quantizer); the activation is PyTorch's, in
    fp32 on the tensors' device (it may differ from TE's CUDA gelu, and between devices, in the last
    bit). Each GEMM has its own
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


# ------------------------------------------------------------------------------------------ LayerNorm, RMSNorm

class LayerNorm(torch.nn.Module):
    """TE ``transformer_engine.pytorch.LayerNorm`` (high precision, no FP8 cast): fp32 PyTorch
    ``layer_norm`` over the last dimension, TE's ``zero_centered_gamma`` (scale by 1 + weight).

    Args (TE's names): normalized_shape (int; ``hidden_size`` is TE's deprecated spelling), eps (1e-5),
        sequence_parallel (TE's legacy flag; stored, no effect), params_dtype or dtype, zero_centered_gamma,
        device (default "cpu").
    Parameters: ``weight`` (normalized_shape,) ones (zeros with zero_centered_gamma), ``bias`` zeros.
    forward(inp): (..., normalized_shape) -> same shape and dtype. TE's CUDA kernel may differ from
    PyTorch's in the last bit.
    """

    _normalization = "LayerNorm"

    def __init__(self, normalized_shape: Optional[int] = None, eps: float = 1e-5, sequence_parallel: Optional[bool] = None,
                 params_dtype: Optional["torch.dtype"] = None, zero_centered_gamma: bool = False,
                 hidden_size: Optional[int] = None, device: Any = "cpu", dtype: Optional["torch.dtype"] = None):
        super().__init__()
        if normalized_shape is None:
            normalized_shape = hidden_size
        elif hidden_size is not None:
            raise ValueError("both normalized_shape and hidden_size (its deprecated name) are given")
        if normalized_shape is None:
            raise ValueError("normalized_shape (or hidden_size) is required")
        if isinstance(normalized_shape, (tuple, list)):
            if len(normalized_shape) != 1:
                raise NotImplementedError(f"{type(self).__name__}: normalized_shape={normalized_shape!r}: only the "
                                          f"last dimension can be normalized")
            normalized_shape = normalized_shape[0]
        if params_dtype is not None and dtype is not None:
            raise ValueError("both dtype and params_dtype (its deprecated name) are given")
        dtype = dtype or params_dtype or torch.get_default_dtype()
        self.normalized_shape, self.eps = int(normalized_shape), float(eps)
        self.zero_centered_gamma, self.sequence_parallel = bool(zero_centered_gamma), sequence_parallel
        g0 = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = torch.nn.Parameter(g0(self.normalized_shape, dtype=dtype, device=device))
        if self._normalization == "LayerNorm":
            self.bias = torch.nn.Parameter(torch.zeros(self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)

    def forward(self, inp: "torch.Tensor") -> "torch.Tensor":
        return _norm_torch(inp, self._normalization, self.weight, self.bias, self.eps, self.zero_centered_gamma)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, zero_centered_gamma={self.zero_centered_gamma}"


class RMSNorm(LayerNorm):
    """TE ``transformer_engine.pytorch.RMSNorm``: ``x * rsqrt(mean(x^2) + eps) * weight`` in fp32
    PyTorch; parameter ``weight`` only. Arguments as :class:`LayerNorm`."""

    _normalization = "RMSNorm"


# ------------------------------------------------------------------------------------------ attention

_MASK_TYPES = ("no_mask", "padding", "causal", "padding_causal", "causal_bottom_right",
               "padding_causal_bottom_right", "arbitrary")
_SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")
_TE_ACTIVATIONS = ("gelu", "geglu", "glu", "qgelu", "qgeglu", "relu", "reglu", "srelu", "sreglu", "silu", "swiglu",
                   "clamped_swiglu")


def _check_mask_type(mask_type: str, what: str) -> str:
    mask_type = mask_type.replace(",", "_")
    if mask_type == "causal_padding":
        mask_type = "padding_causal"
    if mask_type not in _MASK_TYPES:
        raise ValueError(f"{what} {mask_type!r} is not a TE mask type (accepted: {', '.join(_MASK_TYPES)})")
    return mask_type


def _window(mask_type: str, window_size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    """TE's ``check_set_window_size``: (-1, 0)-style windows for causal masks, (-1, -1) otherwise."""
    causal = "causal" in mask_type
    if window_size is None:
        return (-1, 0) if causal else (-1, -1)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        if (left, right) == (-1, -1) or left >= 0 and right != 0:
            return (left, 0)
        if left < -1 or right != 0:
            raise ValueError(f"window_size {window_size!r} must be (-1, 0) or (>=0, 0) for mask type {mask_type!r}")
        return (left, 0)
    if (left, right) == (-1, 0):
        return (-1, -1)
    if (left, right) != (-1, -1) and (left < 0 or right < 0):
        raise ValueError(f"window_size {window_size!r} must be (-1, -1) or (>=0, >=0) for mask type {mask_type!r}")
    return (left, right)


def _full_mask(mask_type: str, attention_mask: Any, sq: int, sk: int, window: Tuple[int, int],
               bottom_right: bool, attention_type: str, device: Any) -> Optional["torch.Tensor"]:
    """The boolean mask (True: masked out) over the [b or 1, 1, sq, sk] scores, or None (no mask):
    TE ``dot_product_attention/utils.py get_full_mask`` with the causal part of ``FusedScaleMaskSoftmax``.
    Query i may attend key j iff ``i + off - left <= j <= i + off + right`` (left/right -1: unbounded),
    off = 0 for top-left alignment, sk - sq for bottom-right, per sequence the actual lengths' difference
    for padded bottom-right masks."""
    pad = None
    lens_q = lens_kv = None
    if "padding" in mask_type:
        if attention_mask is None:
            raise ValueError(f"mask type {mask_type!r} needs attention_mask (bool, [b, 1, 1, s], True = padding; "
                             f"cu_seqlens are not supported)")
        if attention_type == "self":
            mq = mkv = attention_mask
        else:
            if not isinstance(attention_mask, (tuple, list)) or len(attention_mask) != 2:
                raise ValueError("cross-attention padding masks are a pair (mask_q [b, 1, 1, sq], mask_kv [b, 1, 1, sk])")
            mq, mkv = attention_mask
        pad = torch.logical_or(mq.squeeze(1).unsqueeze(3), mkv)
        keep = pad.logical_not()
        lens_q, lens_kv = keep[:, 0, :, 0].sum(dim=1), keep[:, 0, 0, :].sum(dim=1)
    elif mask_type == "arbitrary":
        if attention_mask is None:
            raise ValueError("mask type 'arbitrary' needs attention_mask (bool, broadcastable to [b, h, sq, sk])")
        pad = attention_mask
    if mask_type == "no_mask" and window == (-1, -1):
        return None  # TE computes a band here but does not apply it
    # TE bounds an unlimited window by the lengths (left sk, right sq), which can mask keys of a
    # top-left aligned cross attention with sk > sq + 1: kept, as TE does it.
    left = sk if window[0] == -1 else window[0]
    right = sq if window[1] == -1 else window[1]
    diff = (torch.arange(sq, device=device).view(1, 1, sq, 1) - torch.arange(sk, device=device).view(1, 1, 1, sk))
    if mask_type == "causal_bottom_right" or (mask_type in ("no_mask", "arbitrary") and bottom_right):
        off = sk - sq
    elif mask_type in ("causal", "padding_causal") or not bottom_right:
        off = 0
    else:  # padding_causal_bottom_right, or padding aligned bottom-right: per sequence
        off = (lens_kv - lens_q).view(-1, 1, 1, 1)
    band = ~((diff + off - left <= 0) & (diff + off + right >= 0))
    return band if pad is None else torch.logical_or(band, pad)


class DotProductAttention(torch.nn.Module):
    """TE ``transformer_engine.pytorch.DotProductAttention`` in its unfused, non-FP8 form (TE
    ``dot_product_attention/backends.py UnfusedDotProductAttention``), in fp32 PyTorch:
    ``S = softmax_scale * Q K^T`` (``torch.baddbmm``, alpha = softmax_scale), masked positions set to
    -10000 (TE's ``attention_mask_func``), ``P = softmax(S)`` (rows of padded queries then zeroed),
    attention dropout on P, ``O = P V`` (``torch.bmm``). GQA/MQA by repeating K and V heads.
    Under :func:`fp8_autocast` nothing here is cast to FP8 (TE's ``fp8_dpa=False`` default); the
    GEMMs around it (QKV, projection) are the FP8 ones.

    Args (TE's names): num_attention_heads, kv_channels (head size d), num_gqa_groups (default
        num_attention_heads), attention_dropout (0.0), qkv_format ("sbhd" or "bshd"), attn_mask_type
        ("causal" default; "no_mask", "padding", "padding_causal", "causal_bottom_right",
        "padding_causal_bottom_right", "arbitrary"), window_size (sliding window, TE's convention),
        bottom_right_diagonal, layer_number, attention_type ("self"/"cross"), softmax_scale (default
        1/sqrt(d)), softmax_type ("vanilla" only); tp_size=1, tp_group/cp_group=None,
        sequence_parallel, get_rng_state_tracker=None accepted at those values.
    forward(query_layer, key_layer, value_layer, attention_mask=None, qkv_format=None,
        attn_mask_type=None, window_size=None, bottom_right_diagonal=None, ...): q [sq, b, h, d]
        ("sbhd") or [b, sq, h, d] ("bshd"), k and v [sk, b, g, d] / [b, sk, g, d]; returns
        [sq, b, h*d] / [b, sq, h*d] in q's dtype (computed in fp32). ``attention_mask``: bool, True
        = masked out; [b, 1, 1, s] for padding masks (a pair (q, kv) for cross attention),
        broadcastable to [b, h, sq, sk] for "arbitrary".
    Raises:
        ValueError: unknown mask types or formats, bad window sizes, a padding mask without
            ``attention_mask``. TypeError: a non-bool mask. NotImplementedError: "thd", cu_seqlens,
            attention biases/ALiBi, inference_params, non-vanilla softmax, parallelism.
    """

    def __init__(self, num_attention_heads: int, kv_channels: Any, num_gqa_groups: Optional[int] = None,
                 attention_dropout: float = 0.0, qkv_format: str = "sbhd", attn_mask_type: str = "causal",
                 window_size: Optional[Tuple[int, int]] = None, bottom_right_diagonal: Optional[bool] = None,
                 sequence_parallel: bool = False, tp_size: int = 1, get_rng_state_tracker: Optional[Callable] = None,
                 tp_group: Any = None, layer_number: Optional[int] = None, attention_type: str = "self",
                 cp_group: Any = None, cp_global_ranks: Any = None, cp_stream: Any = None, cp_comm_type: str = "p2p",
                 softmax_scale: Optional[float] = None, softmax_type: str = "vanilla",
                 return_max_logit: bool = False, name: Optional[str] = None):
        super().__init__()
        _check_parallel("DotProductAttention", tp_size=tp_size, tp_group=tp_group,
                        get_rng_state_tracker=get_rng_state_tracker, cp_group=cp_group)
        if isinstance(kv_channels, (tuple, list)):
            if kv_channels[0] != kv_channels[1]:
                raise NotImplementedError("DotProductAttention: different head sizes for K and V (kv_channels "
                                          f"{tuple(kv_channels)!r}) are not supported")
            kv_channels = kv_channels[0]
        self.num_attention_heads, self.kv_channels = int(num_attention_heads), int(kv_channels)
        self.num_gqa_groups = _gqa_groups(self.num_attention_heads, num_gqa_groups)
        self.qkv_format = _check_format(qkv_format, "qkv_format")
        self.attn_mask_type = _check_mask_type(attn_mask_type, "attn_mask_type")
        self.window_size = _window(self.attn_mask_type, window_size)
        self.bottom_right_diagonal = bottom_right_diagonal
        if attention_type not in ("self", "cross"):
            raise ValueError(f"attention_type {attention_type!r} (accepted: self, cross)")
        self.attention_type = attention_type
        if layer_number is not None and layer_number <= 0:
            raise ValueError(f"layer_number must be a positive integer; got {layer_number!r}")
        self.layer_number = 1 if layer_number is None else int(layer_number)
        _check_softmax_type(softmax_type)
        self.softmax_type = softmax_type
        if return_max_logit:
            raise NotImplementedError("DotProductAttention: return_max_logit=True is not supported by fp8emu.torch")
        self.softmax_scale = 1.0 / math.sqrt(self.kv_channels) if softmax_scale is None else float(softmax_scale)
        self.attention_dropout = float(attention_dropout)
        self.name = name

    def forward(self, query_layer: "torch.Tensor", key_layer: "torch.Tensor", value_layer: "torch.Tensor",
                attention_mask: Any = None, qkv_format: Optional[str] = None, cu_seqlens_q: Any = None,
                cu_seqlens_kv: Any = None, cu_seqlens_q_padded: Any = None, cu_seqlens_kv_padded: Any = None,
                max_seqlen_q: Optional[int] = None, max_seqlen_kv: Optional[int] = None,
                attn_mask_type: Optional[str] = None, window_size: Optional[Tuple[int, int]] = None,
                bottom_right_diagonal: Optional[bool] = None, checkpoint_core_attention: bool = False,
                core_attention_bias_type: str = "no_bias", core_attention_bias: Any = None, alibi_slopes: Any = None,
                fast_zero_fill: bool = True, inference_params: Any = None, pad_between_seqs: Any = None,
                fp8_output: bool = False) -> "torch.Tensor":
        _check_unsupported_forward("DotProductAttention", cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                                   cu_seqlens_q_padded=cu_seqlens_q_padded, cu_seqlens_kv_padded=cu_seqlens_kv_padded,
                                   inference_params=inference_params, alibi_slopes=alibi_slopes,
                                   core_attention_bias=core_attention_bias)
        if core_attention_bias_type != "no_bias":
            raise NotImplementedError(f"DotProductAttention: core_attention_bias_type={core_attention_bias_type!r} "
                                      f"(only 'no_bias' is supported)")
        fmt = self.qkv_format if qkv_format is None else _check_format(qkv_format, "qkv_format")
        mask_type = self.attn_mask_type if attn_mask_type is None else _check_mask_type(attn_mask_type,
                                                                                        "attn_mask_type")
        window = _window(mask_type, self.window_size if window_size is None else window_size)
        if bottom_right_diagonal is None:
            bottom_right_diagonal = self.bottom_right_diagonal
        if mask_type in ("causal", "padding_causal"):
            bottom_right_diagonal = False
        elif bottom_right_diagonal is None or "bottom_right" in mask_type:
            bottom_right_diagonal = True
        if "padding" in mask_type or mask_type == "arbitrary":
            _check_bool_mask(attention_mask, "attention_mask")
        return _attention(query_layer, key_layer, value_layer, fmt, mask_type, attention_mask, window,
                          bottom_right_diagonal, self.attention_type, self.softmax_scale, self.attention_dropout,
                          self.training)

    def extra_repr(self) -> str:
        return (f"num_attention_heads={self.num_attention_heads}, kv_channels={self.kv_channels}, "
                f"num_gqa_groups={self.num_gqa_groups}, qkv_format={self.qkv_format}, "
                f"attn_mask_type={self.attn_mask_type}")


def _attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", fmt: str, mask_type: str, attention_mask: Any,
               window: Tuple[int, int], bottom_right: bool, attention_type: str, scale: float, dropout: float,
               training: bool) -> "torch.Tensor":
    """The unfused attention core in fp32 (see :class:`DotProductAttention`)."""
    if fmt == "bshd":  # TE runs bshd through its sbhd code
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D ({fmt}); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    sq, b, h, d = q.shape
    sk = k.shape[0]
    if k.shape[1] != b or v.shape[:3] != k.shape[:3] or k.shape[3] != d or v.shape[3] != d:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match ({fmt})")
    if h % k.shape[2]:
        raise ValueError(f"{h} query heads are not a multiple of {k.shape[2]} key/value heads")
    if k.shape[2] != h:
        k = k.repeat_interleave(h // k.shape[2], dim=2)
        v = v.repeat_interleave(h // v.shape[2], dim=2)
    dtype = q.dtype
    q, k, v = (t.to(torch.float32) for t in (q, k, v))
    q2 = q.reshape(sq, b * h, d).transpose(0, 1)                      # [b*h, sq, d]
    k2 = k.reshape(sk, b * h, d).transpose(0, 1).transpose(1, 2)      # [b*h, d, sk]
    scores = torch.baddbmm(torch.empty(b * h, sq, sk, dtype=torch.float32, device=q.device), q2, k2,
                           beta=0.0, alpha=scale).view(b, h, sq, sk)
    mask = _full_mask(mask_type, attention_mask, sq, sk, window, bottom_right, attention_type, q.device)
    if window[0] != -1 or window[1] not in (-1, 0):
        mask_type = "arbitrary"  # TE: a sliding window turns the mask "arbitrary" (no zeroing of padded rows)
    if mask is not None:
        scores = scores.masked_fill(mask, -10000.0)
    probs = torch.nn.functional.softmax(scores, dim=-1)
    if "padding" in mask_type:
        probs = probs.masked_fill(mask, 0.0)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=training)
    ctx = torch.bmm(probs.view(b * h, sq, sk), v.reshape(sk, b * h, d).transpose(0, 1))  # [b*h, sq, d]
    ctx = ctx.view(b, h, sq, d)
    if fmt == "sbhd":
        ctx = ctx.permute(2, 0, 1, 3).contiguous().view(sq, b, h * d)
    else:
        ctx = ctx.permute(0, 2, 1, 3).contiguous().view(b, sq, h * d)
    return ctx.to(dtype)


def _gqa_groups(num_attention_heads: int, num_gqa_groups: Optional[int]) -> int:
    """TE's num_gqa_groups: None means one group per head; it must divide the head count (ValueError)."""
    groups = num_attention_heads if num_gqa_groups is None else int(num_gqa_groups)
    if groups <= 0 or num_attention_heads % groups:
        raise ValueError(f"num_attention_heads ({num_attention_heads}) must be a multiple of "
                         f"num_gqa_groups ({groups})")
    return groups


def _check_format(fmt: str, what: str) -> str:
    if fmt == "thd":
        raise NotImplementedError(f"{what}='thd' (packed sequences with cu_seqlens) is not supported by fp8emu.torch; "
                                  f"use 'sbhd' or 'bshd'")
    if fmt not in ("sbhd", "bshd"):
        raise ValueError(f"{what} {fmt!r} (accepted: sbhd, bshd; TE also has thd)")
    return fmt


def _check_softmax_type(softmax_type: str) -> None:
    if softmax_type not in _SOFTMAX_TYPES:
        raise ValueError(f"softmax_type {softmax_type!r} (TE's: {', '.join(_SOFTMAX_TYPES)})")
    if softmax_type != "vanilla":
        raise NotImplementedError(f"softmax_type={softmax_type!r} (attention sinks) is not supported by fp8emu.torch")


def _check_bool_mask(mask: Any, what: str) -> None:
    if mask is None:
        return
    for m in (mask if isinstance(mask, (tuple, list)) else (mask,)):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise TypeError(f"{what} must be a bool tensor (or a pair of them); got "
                            f"{getattr(m, 'dtype', type(m).__name__)}")


def _check_parallel(cls: str, tp_size: int = 1, tp_group: Any = None, get_rng_state_tracker: Any = None,
                    cp_group: Any = None, fuse_wgrad_accumulation: bool = False, ub_tp_comm_overlap: bool = False) -> None:
    for name, value, ok in (("tp_size", tp_size, tp_size == 1), ("tp_group", tp_group, tp_group is None),
                            ("cp_group", cp_group, cp_group is None),
                            ("get_rng_state_tracker", get_rng_state_tracker, get_rng_state_tracker is None),
                            ("fuse_wgrad_accumulation", fuse_wgrad_accumulation, not fuse_wgrad_accumulation),
                            ("ub_tp_comm_overlap", ub_tp_comm_overlap, not ub_tp_comm_overlap)):
        if not ok:
            raise NotImplementedError(f"{cls}: {name}={value!r} is not supported by fp8emu.torch (one process: no "
                                      f"tensor/context parallelism, userbuffers, RNG trackers or main_grad fusion)")


def _check_unsupported_forward(cls: str, **kwargs: Any) -> None:
    for name, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"{cls}.forward: {name} is not supported by fp8emu.torch (got a value; "
                                      f"only None)")


class MultiheadAttention(torch.nn.Module):
    """TE ``transformer_engine.pytorch.MultiheadAttention``: QKV projection (FP8 GEMM), attention core
    (:class:`DotProductAttention`, fp32), output projection ``proj`` (FP8 GEMM).

    Submodules (TE's names): self attention: ``layernorm_qkv`` (:class:`LayerNormLinear`,
    input_layernorm=True) or ``qkv`` (:class:`Linear`), hidden_size -> (h + 2 g) d; cross attention:
    ``layernorm_query``/``query_layer`` (-> h d) and ``key_value`` (:class:`Linear` on
    ``encoder_output``, -> 2 g d); ``core_attention``; ``proj`` (:class:`Linear`, h d -> hidden_size).
    Without ``fuse_qkv_params`` the QKV weight is split into TE's parameters ``query_weight``,
    ``key_weight``, ``value_weight`` (and ``_bias``) and laid out [q heads; k heads; v heads];
    with it one ``weight``, per head group interleaved [g, (h/g + 2), d] when
    ``qkv_weight_interleaved`` (TE's default), else [(h/g + 2), g, d].

    Args: TE's (hidden_size, num_attention_heads, kv_channels, attention_dropout, layernorm_epsilon,
        init_method, output_layer_init_method, layer_number, attn_mask_type, window_size,
        bottom_right_diagonal, num_gqa_groups, params_dtype, return_bias, return_layernorm_output,
        input_layernorm, attention_type, fuse_qkv_params, zero_centered_gamma,
        qkv_weight_interleaved, bias, normalization, device, qkv_format, name, seq_length,
        micro_batch_size, softmax_type); parallelism, userbuffers, rotary and QK-norm arguments at
        their no-op values only (else NotImplementedError).
    forward(hidden_states, attention_mask=None, encoder_output=None, attn_mask_type=None,
        window_size=None, bottom_right_diagonal=None, is_first_microbatch=None, ...):
        hidden_states [s, b, hidden] (sbhd) or [b, s, hidden] (bshd) -> the same shape; returns
        ``out``, or ``(out, proj_bias)`` with return_bias, plus the norm output with
        return_layernorm_output (as TE).
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, kv_channels: Optional[int] = None,
                 attention_dropout: float = 0.1, layernorm_epsilon: float = 1e-5, init_method: Optional[Callable] = None,
                 output_layer_init_method: Optional[Callable] = None, layer_number: Optional[int] = None,
                 attn_mask_type: str = "causal", window_size: Optional[Tuple[int, int]] = None,
                 bottom_right_diagonal: Optional[bool] = None, tp_group: Any = None, tp_size: int = 1,
                 num_gqa_groups: Optional[int] = None, fuse_wgrad_accumulation: bool = False,
                 get_rng_state_tracker: Optional[Callable] = None, sequence_parallel: bool = False,
                 params_dtype: Optional["torch.dtype"] = None, return_bias: bool = False,
                 return_layernorm_output: bool = False, input_layernorm: bool = False, attention_type: str = "self",
                 set_parallel_mode: bool = False, fuse_qkv_params: bool = False, zero_centered_gamma: bool = False,
                 qkv_weight_interleaved: bool = True, rotary_pos_interleaved: bool = False, ub_overlap_ag: bool = False,
                 ub_overlap_rs: bool = False, ub_overlap_rs_dgrad: bool = False, ub_bulk_dgrad: bool = False,
                 ub_bulk_wgrad: bool = False, bias: bool = True, normalization: str = "LayerNorm", device: Any = "cpu",
                 qkv_format: str = "sbhd", name: Optional[str] = None, qk_norm_type: Optional[str] = None,
                 qk_norm_eps: float = 1e-6, qk_norm_before_rope: bool = False, seq_length: Optional[int] = None,
                 micro_batch_size: Optional[int] = None, softmax_type: str = "vanilla"):
        super().__init__()
        _check_parallel("MultiheadAttention", tp_size=tp_size, tp_group=tp_group,
                        get_rng_state_tracker=get_rng_state_tracker, fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        for ub, v in (("ub_overlap_ag", ub_overlap_ag), ("ub_overlap_rs", ub_overlap_rs),
                      ("ub_overlap_rs_dgrad", ub_overlap_rs_dgrad), ("ub_bulk_dgrad", ub_bulk_dgrad),
                      ("ub_bulk_wgrad", ub_bulk_wgrad)):
            if v:
                raise NotImplementedError(f"MultiheadAttention: {ub}=True (userbuffers overlap) has no meaning in the "
                                          f"emulator")
        if qk_norm_type is not None:
            raise NotImplementedError(f"MultiheadAttention: qk_norm_type={qk_norm_type!r} is not supported by "
                                      f"fp8emu.torch (only None)")
        if attention_type not in ("self", "cross"):
            raise ValueError(f"attention_type {attention_type!r} (accepted: self, cross)")
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"unknown normalization {normalization!r} (accepted: LayerNorm, RMSNorm)")
        if layer_number is not None and layer_number <= 0:
            raise ValueError(f"layer_number must be a positive integer; got {layer_number!r}")
        if num_attention_heads <= 0 or (kv_channels is None and hidden_size % num_attention_heads):
            raise ValueError(f"hidden_size ({hidden_size}) must be a multiple of num_attention_heads "
                             f"({num_attention_heads}) unless kv_channels is given")
        self.hidden_size, self.num_attention_heads = int(hidden_size), int(num_attention_heads)
        self.hidden_size_per_attention_head = int(kv_channels) if kv_channels else hidden_size // num_attention_heads
        self.num_gqa_groups = _gqa_groups(self.num_attention_heads, num_gqa_groups)
        self.qkv_format = _check_format(qkv_format, "qkv_format")
        self.attn_mask_type = _check_mask_type(attn_mask_type, "attn_mask_type")
        self.window_size, self.bottom_right_diagonal = window_size, bottom_right_diagonal
        self.layer_number = 1 if layer_number is None else int(layer_number)
        self.input_layernorm, self.attention_type = bool(input_layernorm), attention_type
        self.return_bias, self.return_layernorm_output = bool(return_bias), bool(return_layernorm_output)
        self.qkv_weight_interleaved = bool(qkv_weight_interleaved) and bool(fuse_qkv_params)
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.name = name
        init_method = init_method or _default_init
        output_layer_init_method = output_layer_init_method or _default_init
        d, hq = self.hidden_size_per_attention_head, self.num_attention_heads * self.hidden_size_per_attention_head
        hkv = self.num_gqa_groups * d
        common = dict(params_dtype=params_dtype, device=device, bias=bias, init_method=init_method)
        norm = dict(eps=layernorm_epsilon, normalization=normalization, zero_centered_gamma=zero_centered_gamma,
                    return_layernorm_output=return_layernorm_output)
        if attention_type == "self":
            split = None if fuse_qkv_params else {"query": hq, "key": hkv, "value": hkv}
            if self.input_layernorm:
                self.layernorm_qkv = LayerNormLinear(hidden_size, hq + 2 * hkv, parameters_split=split, **norm, **common)
            else:
                self.qkv = Linear(hidden_size, hq + 2 * hkv, parameters_split=split, **common)
        else:
            if self.input_layernorm:
                self.layernorm_query = LayerNormLinear(hidden_size, hq, parameters_split=None if fuse_qkv_params
                                                       else ("query",), **norm, **common)
            else:
                self.query_layer = Linear(hidden_size, hq, **common)
            self.key_value = Linear(hidden_size, 2 * hkv, parameters_split=None if fuse_qkv_params else ("key", "value"),
                                    **common)
        self.core_attention = DotProductAttention(num_attention_heads, d, num_gqa_groups=self.num_gqa_groups,
                                                  attention_dropout=attention_dropout, qkv_format=qkv_format,
                                                  attn_mask_type=self.attn_mask_type, layer_number=self.layer_number,
                                                  attention_type=attention_type, softmax_type=softmax_type)
        self.proj = Linear(hq, hidden_size, bias=bias, init_method=output_layer_init_method, return_bias=return_bias,
                           params_dtype=params_dtype, device=device)

    def _split_heads(self, mixed: "torch.Tensor", n_q_per_group: int) -> Tuple["torch.Tensor", ...]:
        """[s0, s1, g (n + 2) d] -> q [s0, s1, g n, d] and k, v [s0, s1, g, d] (n = 0: only k, v),
        in the layout of the fused weight (TE MultiheadAttention.forward)."""
        g, d = self.num_gqa_groups, self.hidden_size_per_attention_head
        parts = (n_q_per_group, 1, 1) if n_q_per_group else (1, 1)
        if self.qkv_weight_interleaved:
            x = mixed.view(*mixed.shape[:-1], g, sum(parts), d)
            pieces = torch.split(x, parts, dim=-2)
        else:
            x = mixed.view(*mixed.shape[:-1], sum(parts), g, d)
            pieces = torch.split(x, parts, dim=-3)
        return tuple(p.reshape(p.shape[0], p.shape[1], -1, d) for p in pieces)

    def forward(self, hidden_states: "torch.Tensor", attention_mask: Any = None, encoder_output: Any = None,
                attn_mask_type: Optional[str] = None, window_size: Optional[Tuple[int, int]] = None,
                bottom_right_diagonal: Optional[bool] = None, is_first_microbatch: Optional[bool] = None,
                checkpoint_core_attention: bool = False, inference_params: Any = None, rotary_pos_emb: Any = None,
                core_attention_bias_type: str = "no_bias", core_attention_bias: Any = None, alibi_slopes: Any = None,
                cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None, cu_seqlens_q_padded: Any = None,
                cu_seqlens_kv_padded: Any = None, max_seqlen_q: Optional[int] = None,
                max_seqlen_kv: Optional[int] = None, fast_zero_fill: bool = True, pad_between_seqs: Any = None):
        _check_unsupported_forward("MultiheadAttention", inference_params=inference_params,
                                   rotary_pos_emb=rotary_pos_emb, cu_seqlens_q=cu_seqlens_q,
                                   cu_seqlens_kv=cu_seqlens_kv, cu_seqlens_q_padded=cu_seqlens_q_padded,
                                   cu_seqlens_kv_padded=cu_seqlens_kv_padded)
        mask_type = self.attn_mask_type if attn_mask_type is None else attn_mask_type
        window_size = self.window_size if window_size is None else window_size
        bottom_right_diagonal = self.bottom_right_diagonal if bottom_right_diagonal is None else bottom_right_diagonal
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(f"hidden_states must be 3-D ({self.qkv_format}) with last dimension {self.hidden_size}; "
                             f"got {tuple(hidden_states.shape)}")
        ln_out = None
        n = self.num_attention_heads // self.num_gqa_groups
        if self.attention_type == "self":
            if self.input_layernorm:
                outs = self.layernorm_qkv(hidden_states, is_first_microbatch=is_first_microbatch)
                mixed, ln_out = outs if self.return_layernorm_output else (outs, None)
            else:
                mixed = self.qkv(hidden_states, is_first_microbatch=is_first_microbatch)
            q, k, v = self._split_heads(mixed, n)
        else:
            if encoder_output is None:
                raise ValueError("cross attention needs encoder_output")
            kv = self.key_value(encoder_output, is_first_microbatch=is_first_microbatch)
            k, v = self._split_heads(kv, 0)
            if self.input_layernorm:
                outs = self.layernorm_query(hidden_states, is_first_microbatch=is_first_microbatch)
                q, ln_out = outs if self.return_layernorm_output else (outs, None)
            else:
                q = self.query_layer(hidden_states, is_first_microbatch=is_first_microbatch)
            q = q.reshape(q.shape[0], q.shape[1], -1, self.hidden_size_per_attention_head)
        context = self.core_attention(q, k, v, attention_mask=attention_mask, qkv_format=self.qkv_format,
                                      attn_mask_type=mask_type, window_size=window_size,
                                      bottom_right_diagonal=bottom_right_diagonal,
                                      checkpoint_core_attention=checkpoint_core_attention,
                                      core_attention_bias_type=core_attention_bias_type,
                                      core_attention_bias=core_attention_bias, alibi_slopes=alibi_slopes)
        out = self.proj(context, is_first_microbatch=is_first_microbatch)
        outputs = tuple(out) if self.return_bias else (out,)
        if self.input_layernorm and self.return_layernorm_output:
            outputs += (ln_out,)
        return outputs if len(outputs) > 1 else outputs[0]


# ------------------------------------------------------------------------------------------ TransformerLayer

class _DropPath(torch.nn.Module):
    """TE's ``DropPath`` (stochastic depth): in training, zero whole slices along dim 0 with
    probability p and scale the rest by 1/(1-p) (dim 0 is the sequence in sbhd, as in TE)."""

    def __init__(self, drop_prob: float):
        super().__init__()
        self.drop_prob = float(drop_prob)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1 - self.drop_prob
        r = (keep + torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype, device=x.device)).floor_()
        return x.div(keep) * r


class TransformerLayer(torch.nn.Module):
    """TE ``transformer_engine.pytorch.TransformerLayer`` (TE ``pytorch/transformer.py``): one
    attention block and one MLP with residual connections, FP8 GEMMs inside :func:`fp8_autocast`.

    Structure and parameter names are TE's::

        self_attention: MultiheadAttention
            layernorm_qkv: LayerNormLinear  (qkv: Linear with output_layernorm=True)
                layer_norm_weight, layer_norm_bias, query_weight, key_weight, value_weight,
                query_bias, key_bias, value_bias    (weight, bias with fuse_qkv_params=True)
            core_attention: DotProductAttention  (no parameters)
            proj: Linear                             weight, bias
        inter_attention: MultiheadAttention     (layer_type="decoder": layernorm_query, key_value,
                                                  core_attention, proj)
        layernorm_mlp: LayerNormMLP             layer_norm_weight, layer_norm_bias, fc1_weight,
                                                  fc1_bias, fc2_weight, fc2_bias
        layernorm: LayerNorm / RMSNorm          (output_layernorm=True) weight, bias

    Forward (TE's order; x the input, ``bda(y, b, r) = r + dropout(y + b, hidden_dropout)``)::

        a, a_bias[, ln1] = self_attention(x)              # norm -> QKV GEMM -> attention -> proj GEMM
        h = bda(a, a_bias, ln1 if apply_residual_connection_post_layernorm else x)
        h = bda(inter_attention(h, encoder_output))       # decoder only, same rule
        m, m_bias[, ln2] = layernorm_mlp(h)               # norm -> FC1 GEMM -> act -> FC2 GEMM
        out = bda(m, m_bias, ln2 if apply_residual_connection_post_layernorm else h)
        out = layernorm(out)                              # output_layernorm only
    with ``parallel_attention_mlp``: ``out = x + dropout(self_attention(x) + layernorm_mlp(x))``.
    The projection and FC2 biases are added outside their GEMMs (TE's ``return_bias`` fusion), so
    their gradients are PyTorch's sums of the incoming gradient, as in TE.

    Emulated: every GEMM (QKV, proj, FC1, FC2, and the decoder's query/key-value) is an fp8emu.torch
    module, so inside :func:`fp8_autocast` they are fp8emu's FP8 GEMMs under the recipe, each module
    with its own delayed-scaling state (updated at the autocast exit and at the end of the backward,
    as TE). The attention core (QK^T, mask, softmax, dropout, PV) runs in fp32 PyTorch as TE's
    unfused ``DotProductAttention`` does without FP8 attention (``fp8_dpa=False``, TE's default);
    norms, activation, dropouts and residual adds in PyTorch.

    Args (TE's names and defaults, except ``device="cpu"``): hidden_size, ffn_hidden_size,
        num_attention_heads, num_gqa_groups, layernorm_epsilon (1e-5), hidden_dropout (0.1),
        attention_dropout (0.1), init_method and output_layer_init_method (default TE's
        normal(0, 0.023) for both), layer_number (> 0), kv_channels (default hidden/heads),
        self_attn_mask_type ("causal"; "no_mask", "padding", "padding_causal",
        "causal_bottom_right", "padding_causal_bottom_right", "arbitrary"), window_size,
        bottom_right_diagonal, enc_dec_attn_mask_type ("no_mask"), enc_dec_window_size,
        enc_dec_bottom_right_diagonal, params_dtype, seq_length and micro_batch_size (TE's JIT
        warm-up sizes: accepted, no effect), apply_residual_connection_post_layernorm,
        output_layernorm, parallel_attention_mlp, layer_type ("encoder"/"decoder"),
        drop_path_rate, fuse_qkv_params, zero_centered_gamma, qkv_weight_interleaved, bias,
        activation ("gelu": tanh form, or "relu"), normalization ("LayerNorm"/"RMSNorm"),
        attn_input_format ("sbhd" or "bshd"), name, softmax_type ("vanilla").
        Accepted at their no-op values only: tp_group=None, tp_size=1, get_rng_state_tracker=None,
        fuse_wgrad_accumulation=False, ub_tp_comm_overlap=False (the other ub_* flags are then no-ops,
        as in TE), activation_params=None, qk_norm_type=None; sequence_parallel and
        set_parallel_mode are no-ops at tp_size=1 (as in TE) and rotary_pos_interleaved without
        rotary embeddings.
    forward(hidden_states, attention_mask=None, self_attn_mask_type=None, window_size=None,
        bottom_right_diagonal=None, encoder_output=None, enc_dec_attn_mask=None,
        enc_dec_attn_mask_type=None, ..., is_first_microbatch=None, checkpoint_core_attention=False):
        hidden_states [s, b, hidden_size] ("sbhd") or [b, s, hidden_size] ("bshd"), any float dtype
        (the GEMMs are fp8emu's, the attention core fp32, the result in the input's dtype) ->
        the same shape. ``attention_mask``: bool, True = masked out, [b, 1, 1, s] for padding masks.
        ``checkpoint_core_attention`` is accepted (recomputation does not change values).
    Raises:
        ValueError: inconsistent sizes, unknown mask types / formats / normalizations /
            activations, TE's incompatible flag combinations. TypeError: unknown keyword arguments,
            non-bool masks. NotImplementedError: the TE features listed above as not modelled
            (named in the message), e.g. "thd", rotary embeddings, inference_params, attention
            biases/ALiBi, GLU activations, parallelism.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_attention_heads: int,
                 num_gqa_groups: Optional[int] = None, layernorm_epsilon: float = 1e-5, hidden_dropout: float = 0.1,
                 attention_dropout: float = 0.1, init_method: Optional[Callable] = None,
                 output_layer_init_method: Optional[Callable] = None, layer_number: Optional[int] = None,
                 kv_channels: Optional[int] = None, self_attn_mask_type: str = "causal",
                 window_size: Optional[Tuple[int, int]] = None, bottom_right_diagonal: Optional[bool] = None,
                 enc_dec_attn_mask_type: str = "no_mask", enc_dec_bottom_right_diagonal: Optional[bool] = None,
                 enc_dec_window_size: Optional[Tuple[int, int]] = None, tp_group: Any = None, tp_size: int = 1,
                 params_dtype: Optional["torch.dtype"] = None, get_rng_state_tracker: Optional[Callable] = None,
                 fuse_wgrad_accumulation: bool = False, seq_length: Optional[int] = None,
                 micro_batch_size: Optional[int] = None, sequence_parallel: bool = False,
                 apply_residual_connection_post_layernorm: bool = False, output_layernorm: bool = False,
                 parallel_attention_mlp: bool = False, layer_type: str = "encoder", drop_path_rate: float = 0.0,
                 set_parallel_mode: bool = False, fuse_qkv_params: bool = False, rotary_pos_interleaved: bool = False,
                 zero_centered_gamma: bool = False, qkv_weight_interleaved: bool = True,
                 ub_tp_comm_overlap: bool = False, ub_overlap_ag: bool = True, ub_overlap_rs: bool = True,
                 ub_overlap_rs_dgrad: bool = False, ub_bulk_dgrad: bool = True, ub_bulk_wgrad: bool = True,
                 bias: bool = True, activation: str = "gelu", activation_params: Optional[dict] = None,
                 normalization: str = "LayerNorm", device: Any = "cpu", attn_input_format: str = "sbhd",
                 name: Optional[str] = None, qk_norm_type: Optional[str] = None, qk_norm_eps: float = 1e-6,
                 qk_norm_before_rope: bool = False, softmax_type: str = "vanilla"):
        super().__init__()
        _check_parallel("TransformerLayer", tp_size=tp_size, tp_group=tp_group,
                        get_rng_state_tracker=get_rng_state_tracker, fuse_wgrad_accumulation=fuse_wgrad_accumulation,
                        ub_tp_comm_overlap=ub_tp_comm_overlap)
        if layer_type not in ("encoder", "decoder"):
            raise ValueError(f"layer_type {layer_type!r} (accepted: encoder, decoder)")
        if parallel_attention_mlp:
            if layer_type != "encoder":
                raise ValueError("parallel_attention_mlp=True needs layer_type='encoder'")
            if apply_residual_connection_post_layernorm:
                raise ValueError("parallel_attention_mlp and apply_residual_connection_post_layernorm cannot be "
                                 "combined (as in TE)")
            if output_layernorm:
                raise ValueError("parallel_attention_mlp and output_layernorm cannot be combined (as in TE)")
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"unknown normalization {normalization!r} (accepted: LayerNorm, RMSNorm)")
        if activation not in _ACTIVATIONS:
            if activation in _TE_ACTIVATIONS:
                raise NotImplementedError(f"TransformerLayer: activation={activation!r} is a TE activation "
                                          f"fp8emu.torch does not model (accepted: {', '.join(_ACTIVATIONS)})")
            raise ValueError(f"unknown activation {activation!r} (accepted: {', '.join(_ACTIVATIONS)})")
        if activation_params is not None:
            raise NotImplementedError("TransformerLayer: activation_params (clamped_swiglu's) is not supported")
        if qk_norm_type is not None:
            raise NotImplementedError(f"TransformerLayer: qk_norm_type={qk_norm_type!r} is not supported by "
                                      f"fp8emu.torch (only None)")
        _check_softmax_type(softmax_type)
        for what, v in (("hidden_size", hidden_size), ("ffn_hidden_size", ffn_hidden_size),
                        ("num_attention_heads", num_attention_heads)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{what} must be a positive int; got {v!r}")
        for what, p in (("hidden_dropout", hidden_dropout), ("attention_dropout", attention_dropout),
                        ("drop_path_rate", drop_path_rate)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{what} must be in [0, 1); got {p!r}")
        self.self_attn_mask_type = _check_mask_type(self_attn_mask_type, "self_attn_mask_type")
        self.enc_dec_attn_mask_type = _check_mask_type(enc_dec_attn_mask_type, "enc_dec_attn_mask_type")
        self.window_size, self.bottom_right_diagonal = window_size, bottom_right_diagonal
        self.enc_dec_window_size, self.enc_dec_bottom_right_diagonal = enc_dec_window_size, enc_dec_bottom_right_diagonal
        _window(self.self_attn_mask_type, window_size)
        _window(self.enc_dec_attn_mask_type, enc_dec_window_size)
        self.attn_input_format = _check_format(attn_input_format, "attn_input_format")
        self.hidden_size, self.ffn_hidden_size = hidden_size, ffn_hidden_size
        self.layer_number, self.layer_type = layer_number, layer_type
        self.output_layernorm = bool(output_layernorm)
        self.apply_residual_connection_post_layernorm = bool(apply_residual_connection_post_layernorm)
        self.parallel_attention_mlp = bool(parallel_attention_mlp)
        self.hidden_dropout = float(hidden_dropout)
        self.kv_channels = kv_channels if kv_channels else hidden_size // num_attention_heads
        self.seq_length, self.micro_batch_size = seq_length, micro_batch_size
        self.sequence_parallel = False  # TE: (tp_size > 1) and sequence_parallel
        self.softmax_type, self.name = softmax_type, name
        self.params_dtype = params_dtype or torch.get_default_dtype()
        init_method = init_method or _default_init
        output_layer_init_method = output_layer_init_method or _default_init
        attention = dict(layer_number=layer_number, num_gqa_groups=num_gqa_groups, params_dtype=params_dtype,
                         return_layernorm_output=apply_residual_connection_post_layernorm,
                         fuse_qkv_params=fuse_qkv_params, zero_centered_gamma=zero_centered_gamma,
                         qkv_weight_interleaved=qkv_weight_interleaved, qkv_format=attn_input_format,
                         softmax_type=softmax_type, bias=bias, normalization=normalization, device=device)
        args = (hidden_size, num_attention_heads, self.kv_channels, attention_dropout, layernorm_epsilon, init_method,
                output_layer_init_method)
        self.self_attention = MultiheadAttention(*args, attn_mask_type=self.self_attn_mask_type,
                                                 input_layernorm=not output_layernorm, attention_type="self",
                                                 return_bias=not self.parallel_attention_mlp, **attention)
        if layer_type == "decoder":
            self.inter_attention = MultiheadAttention(*args, attn_mask_type=self.enc_dec_attn_mask_type,
                                                      input_layernorm=True, attention_type="cross", return_bias=True,
                                                      **attention)
        self.layernorm_mlp = LayerNormMLP(hidden_size, ffn_hidden_size, eps=layernorm_epsilon, bias=bias,
                                          normalization=normalization, activation=activation, init_method=init_method,
                                          output_layer_init_method=output_layer_init_method,
                                          return_bias=not self.parallel_attention_mlp,
                                          return_layernorm_output=apply_residual_connection_post_layernorm,
                                          params_dtype=params_dtype, zero_centered_gamma=zero_centered_gamma,
                                          device=device)
        self.drop_path = _DropPath(drop_path_rate) if drop_path_rate > 0.0 else None
        if self.output_layernorm:
            norm_cls = LayerNorm if normalization == "LayerNorm" else RMSNorm
            self.layernorm = norm_cls(hidden_size, eps=layernorm_epsilon, params_dtype=params_dtype,
                                      zero_centered_gamma=zero_centered_gamma, device=device)

    def _bias_dropout_add(self, x: "torch.Tensor", bias: Optional["torch.Tensor"], residual: "torch.Tensor",
                          drop_path: Optional[torch.nn.Module] = None) -> "torch.Tensor":
        """TE's bias-dropout-add: ``residual + drop_path(dropout(x + bias))``."""
        if bias is not None and bias.numel() != 0:
            x = x + bias
        out = torch.nn.functional.dropout(x, p=self.hidden_dropout, training=self.training)
        if drop_path is not None:
            out = drop_path(out)
        return residual + out

    def forward(self, hidden_states: "torch.Tensor", attention_mask: Any = None,
                self_attn_mask_type: Optional[str] = None, window_size: Optional[Tuple[int, int]] = None,
                bottom_right_diagonal: Optional[bool] = None, encoder_output: Optional["torch.Tensor"] = None,
                enc_dec_attn_mask: Any = None, enc_dec_attn_mask_type: Optional[str] = None,
                enc_dec_window_size: Optional[Tuple[int, int]] = None,
                enc_dec_bottom_right_diagonal: Optional[bool] = None, is_first_microbatch: Optional[bool] = None,
                checkpoint_core_attention: bool = False, inference_params: Any = None, rotary_pos_emb: Any = None,
                core_attention_bias_type: str = "no_bias", core_attention_bias: Any = None, alibi_slopes: Any = None,
                cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None, cu_seqlens_q_padded: Any = None,
                cu_seqlens_kv_padded: Any = None, max_seqlen_q: Optional[int] = None,
                max_seqlen_kv: Optional[int] = None, fast_zero_fill: bool = True,
                pad_between_seqs: Any = None) -> "torch.Tensor":
        mask_type = _check_mask_type(self.self_attn_mask_type if self_attn_mask_type is None else self_attn_mask_type,
                                     "self_attn_mask_type")
        ed_mask_type = _check_mask_type(self.enc_dec_attn_mask_type if enc_dec_attn_mask_type is None
                                        else enc_dec_attn_mask_type, "enc_dec_attn_mask_type")
        window_size = _window(mask_type, self.window_size if window_size is None else window_size)
        enc_dec_window_size = _window(ed_mask_type, self.enc_dec_window_size if enc_dec_window_size is None
                                      else enc_dec_window_size)
        if bottom_right_diagonal is None:
            bottom_right_diagonal = self.bottom_right_diagonal
        if enc_dec_bottom_right_diagonal is None:
            enc_dec_bottom_right_diagonal = self.enc_dec_bottom_right_diagonal
        if ("padding" in mask_type or mask_type == "arbitrary"):
            _check_bool_mask(attention_mask, "attention_mask")
        if ("padding" in ed_mask_type or ed_mask_type == "arbitrary"):
            _check_bool_mask(enc_dec_attn_mask, "enc_dec_attn_mask")
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(f"hidden_states must be [s, b, {self.hidden_size}] (sbhd) or [b, s, {self.hidden_size}] "
                             f"(bshd); got {tuple(hidden_states.shape)}")
        hidden_states = hidden_states.contiguous()
        unsupported = dict(inference_params=inference_params, rotary_pos_emb=rotary_pos_emb,
                           core_attention_bias=core_attention_bias, alibi_slopes=alibi_slopes,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                           cu_seqlens_q_padded=cu_seqlens_q_padded, cu_seqlens_kv_padded=cu_seqlens_kv_padded)
        _check_unsupported_forward("TransformerLayer", **unsupported)
        attn_kwargs = dict(is_first_microbatch=is_first_microbatch, checkpoint_core_attention=checkpoint_core_attention,
                           core_attention_bias_type=core_attention_bias_type)
        self_out = self.self_attention(hidden_states, attention_mask=attention_mask, attn_mask_type=mask_type,
                                       window_size=window_size, bottom_right_diagonal=bottom_right_diagonal,
                                       **attn_kwargs)
        if self.apply_residual_connection_post_layernorm and not self.output_layernorm:
            attn_out, attn_bias, residual = self_out
            hidden_states = self._bias_dropout_add(attn_out, attn_bias, residual, self.drop_path)
        elif not self.parallel_attention_mlp:
            attn_out, attn_bias = self_out
            hidden_states = self._bias_dropout_add(attn_out, attn_bias, hidden_states, self.drop_path)
        if self.layer_type == "decoder":
            inter_out = self.inter_attention(hidden_states, attention_mask=enc_dec_attn_mask,
                                             encoder_output=encoder_output, attn_mask_type=ed_mask_type,
                                             window_size=enc_dec_window_size,
                                             bottom_right_diagonal=enc_dec_bottom_right_diagonal, **attn_kwargs)
            if self.apply_residual_connection_post_layernorm:
                attn_out, attn_bias, residual = inter_out
            else:
                (attn_out, attn_bias), residual = inter_out, hidden_states
            hidden_states = self._bias_dropout_add(attn_out, attn_bias, residual)
        mlp_out = self.layernorm_mlp(hidden_states, is_first_microbatch=is_first_microbatch)
        if self.apply_residual_connection_post_layernorm:
            out, out_bias, residual = mlp_out
            output = self._bias_dropout_add(out, out_bias, residual, self.drop_path)
        elif self.parallel_attention_mlp:
            output = self._bias_dropout_add(self_out, mlp_out, hidden_states, self.drop_path)
        else:
            out, out_bias = mlp_out
            output = self._bias_dropout_add(out, out_bias, hidden_states, self.drop_path)
        if self.output_layernorm:
            output = self.layernorm(output)
        return output

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, ffn_hidden_size={self.ffn_hidden_size}, "
                f"layer_type={self.layer_type}, attn_input_format={self.attn_input_format}, "
                f"self_attn_mask_type={self.self_attn_mask_type}")
