"""TE's ``transformer_engine.pytorch.attention``: ``DotProductAttention`` and ``MultiheadAttention``
(the attention core in fp32 PyTorch) and the rotary embedding (:mod:`.rope`:
``RotaryPositionEmbedding``, ``apply_rotary_pos_emb``)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Tuple

import torch

from ..module.layernorm_linear import LayerNormLinear
from ..module.linear import Linear
from ..fp8 import _STACK
from .rope import RotaryPositionEmbedding, apply_rotary_pos_emb
from ..utils import _NoQuantizerState, _default_init


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


class DotProductAttention(_NoQuantizerState, torch.nn.Module):
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
        region = _STACK[-1] if _STACK else None
        if region is not None and region.enabled and (getattr(region.recipe, "fp8_dpa", False)
                                                      or getattr(region.recipe, "fp8_mha", False)):
            raise NotImplementedError("DotProductAttention under a recipe with fp8_dpa or fp8_mha: TE's FP8 "
                                      "attention is not modelled by fp8emu.torch (attention runs in fp32); set "
                                      "fp8_dpa=False and fp8_mha=False")
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
        micro_batch_size, softmax_type, rotary_pos_interleaved); parallelism, userbuffers and QK-norm
        arguments at their no-op values only (else NotImplementedError).
    forward(hidden_states, attention_mask=None, encoder_output=None, attn_mask_type=None,
        window_size=None, bottom_right_diagonal=None, is_first_microbatch=None, rotary_pos_emb=None, ...):
        hidden_states [s, b, hidden] (sbhd) or [b, s, hidden] (bshd) -> the same shape.
        ``rotary_pos_emb``: angles [s2, 1, 1, d2] from :class:`RotaryPositionEmbedding`, or a pair
        (for q, for k), applied to q and k after the projection as TE does (its fused kernel's
        arithmetic, :func:`fp8emu.torch.attention.rope.apply_rotary_pos_emb` with ``fused=True``). Returns
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
        self.rotary_pos_interleaved = bool(rotary_pos_interleaved)
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
        _check_unsupported_forward("MultiheadAttention", inference_params=inference_params, cu_seqlens_q=cu_seqlens_q,
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
        if rotary_pos_emb is not None:  # TE: one tensor for both, or (q_pos_emb, k_pos_emb); the fused kernel
            q_pos_emb, k_pos_emb = rotary_pos_emb if isinstance(rotary_pos_emb, tuple) else (rotary_pos_emb,) * 2
            q = apply_rotary_pos_emb(q, q_pos_emb, self.qkv_format, fused=True, interleaved=self.rotary_pos_interleaved)
            k = apply_rotary_pos_emb(k, k_pos_emb, self.qkv_format, fused=True, interleaved=self.rotary_pos_interleaved)
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


from .._unsupported import unsupported as _unsupported_name  # noqa: E402

#: TE's ``attention.InferenceParams`` (KV cache): present, refusing with the reason.
InferenceParams = _unsupported_name("InferenceParams", module=__name__)
