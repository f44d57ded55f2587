"""TE's ``LayerNormLinear`` (``module/layernorm_linear.py``) over fp8emu.layers."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ... import layers as _layers
from ..fp8 import _STACK
from .base import _Fp8Module, _promotions
from .layernorm import _norm_torch
from .linear import _add_weight_and_bias, _full_bias, _full_weight, _weight_cache
from ..utils import (_arr, _autocast_dtype, _back, _check_activation_dtype, _check_cached_side, _check_float_input,
                     _check_fp8_dims, _check_ignored, _like, _no_dynamo, _np, _on_gpu, _param_grad, _zeros_or_arr)


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
        promotions = _promotions(module._recipe)
        y, saved, ln = _layers.layernorm_linear_forward(
            x2, _arr(ln_weight, gpu), None if ln_bias is None else _arr(ln_bias, gpu),
            None, None if bias is None else _arr(bias, gpu), module._fwd_quantizer,
            normalization=module.normalization, eps=module.eps, zero_centered_gamma=module.zero_centered_gamma,
            training=training, weight_q=weight_q, promotion=promotions[0])
        ctx.saved, ctx.module, ctx.group, ctx.gpu = saved, module, group, gpu
        ctx.bwd_promotion = promotions[1]
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
            need_wgrad=ctx.needs_input_grad[3], promotion=ctx.bwd_promotion)  # ctx.saved stays (retain_graph)
        if ctx.group is not None:
            ctx.group.update()
        gx = _back(dx, ctx.x_like).reshape(ctx.x_like.shape)
        return (gx, _back(dgamma, ctx.g_like), _back(dbeta, ctx.g_like) if ctx.has_ln_bias else None,
                _param_grad(dw, ctx), _param_grad(db, ctx) if ctx.has_bias else None, None, None, None)


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

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None, fp8_output: bool = False):
        region = _STACK[-1] if _STACK else None
        weight, full_bias = _full_weight(self), _full_bias(self)
        bias = None if self.return_bias else full_bias
        _check_float_input(inp, weight)
        _check_activation_dtype(self, inp)
        empty = inp.numel() == 0  # no rows: the fp32 path's empty results, nothing cast or recorded
        if region is None or not region.enabled or empty:
            ln = self._norm_fp32(inp)
            if region is not None and region.calibrating and not empty:
                fwd, _ = self._quantizers(region.recipe)
                fwd.quantize(_np(ln.reshape(-1, self.in_features)), "input", "rowwise")
                fwd.quantize(_np(weight), "weight", "rowwise")
                region.modules.append(self)
            out = torch.nn.functional.linear(ln, weight.to(inp.dtype),
                                             None if bias is None else bias.to(inp.dtype))
        else:
            _check_fp8_dims(inp, weight)
            act = _autocast_dtype(inp)
            if act is not None and inp.dtype != act:  # TE casts the input to the activation dtype first
                inp = inp.to(act)
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
