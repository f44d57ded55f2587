"""TE's standalone ``LayerNorm`` and ``RMSNorm`` (``module/layernorm.py``, ``module/rmsnorm.py``)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..utils import _NoQuantizerState


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



class LayerNorm(_NoQuantizerState, torch.nn.Module):
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
