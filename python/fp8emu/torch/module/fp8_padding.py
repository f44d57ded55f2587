"""TE's ``Fp8Padding`` and ``Fp8Unpadding`` (``module/fp8_padding.py``, ``module/fp8_unpadding.py``):
the rows of each group of a grouped GEMM's input padded to the FP8 alignment, and taken back.

No arithmetic: padding copies each group's rows and appends zero rows (TE's
``fused_multi_row_padding`` writes zeros), unpadding drops them; the backward of one is the other.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from ..fp8 import get_fp8_recipe
from ..utils import _no_dynamo


def _align_size(recipe) -> int:
    """TE ``get_align_size_for_quantization``: 32 for MXFP8, 128 for NVFP4, 16 for the other recipes."""
    if recipe.mxfp8():
        return 32
    if recipe.nvfp4():
        return 128
    return 16


def _pad(inp: "torch.Tensor", m_splits: List[int], padded: List[int]) -> "torch.Tensor":
    rows = inp.reshape(-1, inp.shape[-1])
    out = rows.new_zeros((sum(padded), rows.shape[-1]))
    src = dst = 0
    for m, p in zip(m_splits, padded):
        out[dst:dst + m] = rows[src:src + m]
        src, dst = src + m, dst + p
    return out


def _unpad(inp: "torch.Tensor", m_splits: List[int], padded: List[int]) -> "torch.Tensor":
    rows = inp.reshape(-1, inp.shape[-1])
    parts, at = [], 0
    for m, p in zip(m_splits, padded):
        parts.append(rows[at:at + m])
        at += p
    return torch.cat(parts) if parts else rows[:0]


class _PadFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, m_splits, padded):  # type: ignore[override]
        ctx.m_splits, ctx.padded = m_splits, padded
        return _pad(inp, m_splits, padded)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _unpad(grad, ctx.m_splits, ctx.padded), None, None


class _UnpadFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, m_splits, padded):  # type: ignore[override]
        ctx.m_splits, ctx.padded = m_splits, padded
        return _unpad(inp, m_splits, padded)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _pad(grad, ctx.m_splits, ctx.padded), None, None


def _check(cls: str, num_gemms: int, m_splits: List[int]) -> None:
    if len(m_splits) != num_gemms:
        raise ValueError(f"{cls}: Number of splits should match number of GEMMs (got {len(m_splits)} splits for "
                         f"num_gemms={num_gemms})")


class Fp8Padding(torch.nn.Module):
    """TE ``Fp8Padding``: pad each group of rows of a grouped GEMM's input to a multiple of
    ``align_size``.

    Args (TE's): ``num_gemms``; ``align_size`` (None: on the first forward, from the recipe of the
    current ``fp8_autocast`` (TE's default recipe outside one): 32 for MXFP8, 128 for NVFP4, 16
    otherwise, then kept, as TE).
    forward(inp [sum(m_splits), k], m_splits) -> (out [sum(padded), k], padded_m_splits), each
    group's rows followed by zero rows; ``inp`` itself when no group needs padding.
    Raises ValueError when ``len(m_splits) != num_gemms`` (TE's assertion message).
    """

    def __init__(self, num_gemms: int, align_size: Optional[int] = None) -> None:
        super().__init__()
        self.num_gemms, self.align_size = num_gemms, align_size

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", m_splits: List[int]) -> Tuple["torch.Tensor", List[int]]:
        _check("Fp8Padding", self.num_gemms, m_splits)
        if self.align_size is None:
            self.align_size = _align_size(get_fp8_recipe())
        a = self.align_size
        padded = [(m + a - 1) // a * a for m in m_splits]
        if list(m_splits) == padded:
            return inp, m_splits
        return _PadFn.apply(inp, list(m_splits), padded), padded


class Fp8Unpadding(torch.nn.Module):
    """TE ``Fp8Unpadding``: the inverse of :class:`Fp8Padding` (same arguments).

    forward(inp [sum(padded), n], m_splits) -> [sum(m_splits), n], the padding rows of each group
    dropped; ``inp`` itself when no group was padded.
    Raises ValueError when ``len(m_splits) != num_gemms``.
    """

    def __init__(self, num_gemms: int, align_size: Optional[int] = None) -> None:
        super().__init__()
        self.num_gemms, self.align_size = num_gemms, align_size

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", m_splits: List[int]) -> "torch.Tensor":
        _check("Fp8Unpadding", self.num_gemms, m_splits)
        if self.align_size is None:
            self.align_size = _align_size(get_fp8_recipe())
        a = self.align_size
        padded = [(m + a - 1) // a * a for m in m_splits]
        if list(m_splits) == padded:
            return inp
        return _UnpadFn.apply(inp, list(m_splits), padded)
