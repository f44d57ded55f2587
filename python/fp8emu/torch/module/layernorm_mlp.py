"""TE's ``LayerNormMLP`` (``module/layernorm_mlp.py``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .base import _extra_state, _load_extra_state, _restore_states
from .layernorm_linear import LayerNormLinear
from .linear import Linear
from ..utils import _check_ignored, _no_dynamo

# Each TE parameter name of LayerNormMLP and where its part reads it: (part index, attribute).
_PART_PARAMS = (("layer_norm_weight", 0, "layer_norm_weight"), ("layer_norm_bias", 0, "layer_norm_bias"),
                ("fc1_weight", 0, "weight"), ("fc1_bias", 0, "bias"), ("fc2_weight", 1, "weight"),
                ("fc2_bias", 1, "bias"))


def _gelu(t: "torch.Tensor") -> "torch.Tensor":
    return torch.nn.functional.gelu(t, approximate="tanh")  # TE's gelu is the tanh form


def _qgelu(t: "torch.Tensor") -> "torch.Tensor":
    return t * torch.sigmoid(1.702 * t)


def _relu(t: "torch.Tensor") -> "torch.Tensor":
    """TE's relu, fmaxf(x, 0): a NaN gives 0 (torch.relu would keep it)."""
    return torch.where(t > 0, t, torch.zeros_like(t))


def _srelu(t: "torch.Tensor") -> "torch.Tensor":
    """TE's srelu, x > 0 ? x * x : 0 (NaN gives 0)."""
    return torch.where(t > 0, t * t, torch.zeros_like(t))


def _gated(act: Callable) -> Callable:
    """TE's gated form: FC1's output [..., 2 ffn] split into a (first half) and b; act(a) * b (TE
    applies the gate to the first half, the opposite of torch.nn.functional.glu)."""
    def f(t: "torch.Tensor") -> "torch.Tensor":
        a, b = torch.chunk(t, 2, dim=-1)
        return act(a) * b
    return f


# TE's activations (transformer_engine/pytorch/ops/basic/activation.py) as PyTorch expressions.
_ACTIVATIONS = {
    "gelu": _gelu,
    "relu": _relu,
    "qgelu": _qgelu,
    "srelu": _srelu,
    "silu": torch.nn.functional.silu,
    "glu": _gated(torch.sigmoid),
    "geglu": _gated(_gelu),
    "qgeglu": _gated(_qgelu),
    "reglu": _gated(_relu),
    "sreglu": _gated(_srelu),
    "swiglu": _gated(torch.nn.functional.silu),
}
_GATED = ("glu", "geglu", "qgeglu", "reglu", "sreglu", "swiglu")
# TE activations that need TE's activation_params: not modelled.
_NOT_MODELLED = ("clamped_swiglu",)


def _activate(name: str, h: "torch.Tensor") -> "torch.Tensor":
    """TE's activation kernels compute each element in fp32 and round once to the tensor's dtype
    (common/util/math.h); the same here: fp32 PyTorch arithmetic, one cast back."""
    return _ACTIVATIONS[name](h.float()).to(h.dtype)


class LayerNormMLP(torch.nn.Module):
    """TE ``transformer_engine.pytorch.LayerNormMLP``: ``y = FC2(act(FC1(Norm(x))))``, FP8 GEMMs inside
    :func:`fp8_autocast`.

    Args (TE's names): hidden_size, ffn_hidden_size, eps (1e-5), bias, normalization ("LayerNorm" or
        "RMSNorm"), activation (TE's: "gelu" (tanh form), "relu", "qgelu", "srelu", "silu", and the
        gated "glu", "geglu", "qgeglu", "reglu", "sreglu", "swiglu", whose FC1 has 2 ffn_hidden_size
        outputs, the gate on the first half as TE), init_method (FC1's weight),
        output_layer_init_method (FC2's; default init_method), return_bias (return FC2's bias unadded),
        return_layernorm_output, params_dtype, zero_centered_gamma, device; the parallel and
        userbuffer arguments at their defaults only.
    Parameters (TE's names): ``layer_norm_weight`` (hidden_size,), ``layer_norm_bias`` (hidden_size,;
        LayerNorm only), ``fc1_weight`` (ffn_hidden_size, hidden_size; 2 ffn_hidden_size rows for a
        gated activation), ``fc1_bias`` (as many), ``fc2_weight`` (hidden_size, ffn_hidden_size), ``fc2_bias``
        (hidden_size,); no biases with ``bias=False``.
    FP8: the norm and FC1 are :class:`LayerNormLinear`'s path, FC2 is :class:`Linear`'s (its input,
    the activation output, cast to FP8 by FC2's forward quantizer); the activation is PyTorch's
    arithmetic in fp32 on the tensors' device, rounded once to the tensors' dtype, as TE's kernels
    (its transcendental functions may differ from CUDA's in the last fp32 bit). Under FP8 recipes
    other than Float8BlockScaling TE casts the fp32 activation to FP8 directly; here FC2 casts the
    activation rounded to the tensors' dtype, which differs only for bf16/fp16 tensors and only where
    that rounding crosses an FP8 rounding boundary. Each GEMM has its own
    delayed-scaling slots (TE keeps the same six forward slots in one ``fp8_meta``), so the scales
    and amax histories are TE's.
    forward(inp, is_first_microbatch=None): inp (..., hidden_size) -> (..., hidden_size).
    Raises:
        ValueError: unknown normalization or activation; activation_params with another activation
        than clamped_swiglu. NotImplementedError: "clamped_swiglu" (TE's activation_params);
        otherwise as Linear. TypeError: as Linear.
    Arguments in TE's order (``sequence_parallel`` is the fourth); ``seq_length``,
    ``micro_batch_size``, ``set_parallel_mode``, ``return_layernorm_output_gathered`` and
    ``checkpoint`` (FC1's recomputation in the backward) are accepted and change no value.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, eps: float = 1e-5, sequence_parallel: bool = False,
                 return_bias: bool = False, get_rng_state_tracker: Optional[Callable] = None, tp_group: Any = None,
                 tp_size: int = 1, init_method: Optional[Callable] = None, bias: bool = True,
                 normalization: str = "LayerNorm", activation: str = "gelu", activation_params: Optional[dict] = None,
                 output_layer_init_method: Optional[Callable] = None, fuse_wgrad_accumulation: bool = False,
                 params_dtype: Optional["torch.dtype"] = None, return_layernorm_output: bool = False,
                 return_layernorm_output_gathered: bool = False, seq_length: Optional[int] = None,
                 micro_batch_size: Optional[int] = None, set_parallel_mode: bool = False,
                 zero_centered_gamma: bool = False, device: Any = "cpu", **kwargs: Any):
        super().__init__()
        # TE's positional order (sequence_parallel 4th); the parallel, userbuffer and checkpoint
        # arguments at their defaults only, as Linear checks them.
        for name, value, default in (("sequence_parallel", sequence_parallel, False),
                                     ("get_rng_state_tracker", get_rng_state_tracker, None), ("tp_group", tp_group, None),
                                     ("tp_size", tp_size, 1), ("fuse_wgrad_accumulation", fuse_wgrad_accumulation, False)):
            if value is not default and value != default:
                kwargs[name] = value
        kwargs.pop("checkpoint", None)  # TE's recomputation of FC1 in the backward: the same values
        if activation_params is not None and activation not in _NOT_MODELLED:
            raise ValueError(f"LayerNormMLP: activation_params is only read by clamped_swiglu (got activation="
                             f"{activation!r})")
        _check_ignored(kwargs, "LayerNormMLP")
        if activation in _NOT_MODELLED:
            raise NotImplementedError(f"LayerNormMLP: activation={activation!r} (with TE's activation_params) is not "
                                      f"modelled by fp8emu.torch (accepted: {', '.join(_ACTIVATIONS)})")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} (accepted: {', '.join(_ACTIVATIONS)})")
        self.hidden_size, self.ffn_hidden_size = int(hidden_size), int(ffn_hidden_size)
        self.activation, self.activation_params = activation, activation_params
        self.return_bias, self.return_layernorm_output = bool(return_bias), bool(return_layernorm_output)
        fc1_out = 2 * int(ffn_hidden_size) if activation in _GATED else int(ffn_hidden_size)
        fc1 = LayerNormLinear(hidden_size, fc1_out, eps=eps, bias=bias, normalization=normalization,
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

    def _sync_parts(self) -> None:
        """Points the parts at this module's parameters: the forward reads what the module holds now
        (a reassigned ``fc1_weight``, a ``.to()`` that replaced a Parameter), as TE's one module does."""
        for name, i, attr in _PART_PARAMS:
            part = self._parts[i]
            p = getattr(self, name)
            if part._parameters.get(attr) is not p:
                part._parameters[attr] = p

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", is_first_microbatch: Optional[bool] = None):
        self._sync_parts()
        fc1, fc2 = self._parts
        h, ln = fc1(inp, is_first_microbatch=is_first_microbatch)
        out = fc2(_activate(self.activation, h), is_first_microbatch=is_first_microbatch)
        result = list(out) if self.return_bias else [out]
        if self.return_layernorm_output:
            result.append(ln)
        return result[0] if len(result) == 1 else tuple(result)

    def get_extra_state(self) -> "torch.Tensor":
        """TE's checkpoint of the FP8 state in TE's layout for a two-GEMM module: as
        :meth:`Linear.get_extra_state`, the slots of FC1 then FC2 side by side (``scale_fwd`` (6,),
        ``amax_history_fwd`` (amax_history_len, 6), ``scale_bwd`` (4,), ...)."""
        fc1, fc2 = self._parts
        if fc1._recipe is None or fc2._recipe is None:
            return torch.empty(0, dtype=torch.uint8)
        return _extra_state(fc1._recipe, [fc1._fwd_quantizer, fc2._fwd_quantizer],
                            [fc1._bwd_quantizer, fc2._bwd_quantizer])

    def set_extra_state(self, state: Any) -> None:
        """Loads :meth:`get_extra_state`'s bytes into both GEMMs."""
        loaded = _load_extra_state(state)
        if loaded is None:
            return
        for part in self._parts:
            part._fwd_quantizer = None
            part._quantizers(loaded["recipe"])
        fc1, fc2 = self._parts
        _restore_states(loaded, [fc1._fwd_quantizer, fc2._fwd_quantizer], [fc1._bwd_quantizer, fc2._bwd_quantizer])

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
