"""TE's ``Linear`` (``module/linear.py``) over fp8emu.layers."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ... import layers as _layers
from ..fp8 import _Region, _STACK
from .base import _Fp8Module, _promotions
from ..utils import (_arr, _autocast_dtype, _back, _check_activation_dtype, _check_cached_side, _check_float_input,
                     _check_fp8_dims, _check_ignored, _default_init, _like, _no_dynamo, _np, _on_gpu, _param_grad,
                     _zeros_or_arr)


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
        ctx.promotions = _promotions(module._recipe)
        y, saved = _layers.linear_forward(x2, None, b, module._fwd_quantizer, training=training, weight_q=weight_q,
                                          promotion=ctx.promotions[0])
        ctx.saved, ctx.module, ctx.group, ctx.gpu = saved, module, group, gpu
        ctx.x_like, ctx.w_like = _like(x), _like(weight)
        ctx.has_bias = bias is not None
        return _back(y, ctx.x_like).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        out_f = ctx.saved.out_features
        dy2 = _zeros_or_arr(dy, (ctx.saved.rows, out_f), ctx)
        # ctx.saved stays: a second backward through a retained graph (retain_graph=True) reads it
        # again, as TE's saved tensors; the graph's release frees it.
        dx, dw, db = _layers.linear_backward(dy2, ctx.saved, ctx.module._bwd_quantizer,
                                             need_dgrad=ctx.needs_input_grad[0], need_wgrad=ctx.needs_input_grad[1],
                                             promotion=ctx.promotions[1])
        if ctx.group is not None:
            ctx.group.update()
        gx = None if dx is None else _back(dx, ctx.x_like).reshape(ctx.x_like.shape)
        gw = _param_grad(dw, ctx)
        gb = _param_grad(db, ctx) if ctx.has_bias and ctx.needs_input_grad[2] else None
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

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        weight, full_bias = _full_weight(self), _full_bias(self)
        bias = None if self.return_bias else full_bias
        _check_float_input(inp, weight)
        _check_activation_dtype(self, inp)
        empty = inp.numel() == 0  # no rows (an expert without tokens): the fp32 path's empty result
        if region is None or not region.enabled or empty:
            if region is not None and region.calibrating and not empty:
                self._calibrate(region, inp, weight)
            w = weight.to(inp.dtype)
            out = torch.nn.functional.linear(inp, w, None if bias is None else bias.to(inp.dtype))
        else:
            _check_fp8_dims(inp, weight)
            act = _autocast_dtype(inp)
            if act is not None and inp.dtype != act:  # TE casts the input to the activation dtype first
                inp = inp.to(act)
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
