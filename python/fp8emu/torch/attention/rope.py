"""TE's rotary position embedding (``transformer_engine/pytorch/attention/rope.py``):
:class:`RotaryPositionEmbedding` builds the angles, :func:`apply_rotary_pos_emb` rotates a query or
key tensor by them. Neither touches FP8: RoPE runs on the high-precision query and key between the
QKV projection and the attention core, as in TE.

Arithmetic (the source mirrored):
- ``fused=False`` is TE's unfused PyTorch expression op for op: ``cos``/``sin`` of the fp32 angles,
  each cast to the tensor's dtype, then ``t * cos + rotate_half(t) * sin`` in that dtype
  (``rotate_half``: ``[-x2, x1]`` of the two halves, or of the odd/even pairs when interleaved).
  On the same device and dtype these are the bits TE's unfused path gives.
- ``fused=True`` (what TE's ``MultiheadAttention`` calls) models TE's fused CUDA kernel
  (``common/fused_rope/fused_rope.cu``): the element read as fp32, ``v * cos + v_rot * sin`` in fp32
  with fp32 ``cos``/``sin`` of the angle, one cast to the tensor's dtype. Two details of the GPU
  kernel are not modelled and can move the fp32 result by an ulp before that cast: CUDA's
  ``sincosf`` (PyTorch's ``sin``/``cos`` here) and nvcc's contraction of the product-sum into an
  FMA. For bfloat16 tensors the single final rounding is what distinguishes it from ``fused=False``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

__all__ = ["RotaryPositionEmbedding", "apply_rotary_pos_emb", "apply_fused_qkv_rotary_pos_emb"]

_FORMATS = ("sbhd", "bshd", "thd")


class RotaryPositionEmbedding(torch.nn.Module):
    """TE ``RotaryPositionEmbedding`` (RoFormer's rotary embedding, arXiv:2104.09864).

    Args (TE's):
        dim: rotary dimension; with ``rotary_percent < 1`` TE's ``int(dim * rotary_percent)``. The
            angles have 2 ceil(dim / 2) channels (TE's ``arange(0, dim, 2)``: an odd dim gives one
            more channel than dim; 0 gives none).
        rotary_percent: fraction of ``dim`` rotated.
        seq_len_interpolation_factor, pretrained_max_position_embeddings: TE's position
            interpolation (arXiv:2306.15595): positions multiplied by ``1 / factor``, or by
            ``1 / (max_seq_len / pretrained)`` when ``max_seq_len`` exceeds ``pretrained * factor``.
        rotary_base: the frequency base (10000).
        interleaved: the angle of pair j at elements 2j and 2j+1 (else at j and j + d2/2).
        device: where the ``inv_freq`` buffer lives (TE uses the current CUDA device; here the
            default is the CPU). Not one of TE's arguments; keyword only.
    Buffer ``inv_freq`` [d2/2] float32: ``1 / rotary_base ** (arange(0, d2, 2) / d2)``, TE's expression.
    forward(max_seq_len, offset=0) -> float32 angles [max_seq_len, 1, 1, d2]: position
    ``(arange(max_seq_len) + offset)`` (after interpolation) times ``inv_freq``, the d2/2 angles
    repeated as [a, a] (or pairwise when interleaved), computed outside ``torch.autocast`` as TE.
    """

    def __init__(self, dim: int, rotary_percent: float = 1.0, seq_len_interpolation_factor: Optional[int] = None,
                 pretrained_max_position_embeddings: Optional[int] = None, rotary_base: float = 10000.0,
                 interleaved: bool = False, *, device: Any = "cpu"):
        super().__init__()
        if rotary_percent < 1.0:
            dim = int(dim * rotary_percent)
        self.seq_len_interpolation_factor = seq_len_interpolation_factor
        self.rotary_base = rotary_base
        inv_freq = 1.0 / (self.rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
        self.register_buffer("inv_freq", inv_freq)
        self.pretrained_max_position_embeddings = pretrained_max_position_embeddings
        self.interleaved = interleaved

    def forward(self, max_seq_len: int, offset: int = 0) -> "torch.Tensor":
        device_type = self.inv_freq.device.type
        with torch.autocast(enabled=False, device_type=device_type if device_type in ("cpu", "cuda") else "cpu"):
            seq = torch.arange(max_seq_len, device=self.inv_freq.device, dtype=self.inv_freq.dtype) + offset
            if self.pretrained_max_position_embeddings is not None and self.seq_len_interpolation_factor is not None:
                if max_seq_len > self.pretrained_max_position_embeddings * self.seq_len_interpolation_factor:
                    seq *= 1 / (max_seq_len / self.pretrained_max_position_embeddings)
                else:
                    seq *= 1 / self.seq_len_interpolation_factor
            freqs = torch.einsum("i , j -> i j", seq, self.inv_freq)
        if not self.interleaved:
            emb = torch.cat((freqs, freqs), dim=-1)
        else:
            emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(freqs.shape[0], -1)
        return emb.reshape(emb.size(0), 1, 1, emb.size(1))


def _rotate_half(x: "torch.Tensor", interleaved: bool) -> "torch.Tensor":
    """[x1, x2] -> [-x2, x1] over the last dimension (halves, or odd/even elements when interleaved)."""
    if not interleaved:
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    x_new = torch.stack((-x2, x1), dim=-1)
    return x_new.view(*x_new.shape[:-2], -1)


def _apply_base(t: "torch.Tensor", freqs: "torch.Tensor", tensor_format: str, interleaved: bool,
                fused: bool) -> "torch.Tensor":
    if tensor_format == "bshd":
        freqs = freqs.transpose(0, 1)
    rot_dim = freqs.shape[-1]
    t_rot, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    if fused:  # TE's fused kernel: fp32 element arithmetic, one rounding to t's dtype
        x = t_rot.float()
        freqs = freqs.float()
        out = (x * torch.cos(freqs) + _rotate_half(x, interleaved) * torch.sin(freqs)).to(t.dtype)
    else:  # TE's unfused expression: cos/sin in fp32, cast to t's dtype, arithmetic in t's dtype
        cos_ = torch.cos(freqs).to(t.dtype)
        sin_ = torch.sin(freqs).to(t.dtype)
        out = (t_rot * cos_) + (_rotate_half(t_rot, interleaved) * sin_)
    return torch.cat((out, t_pass), dim=-1)


def _freqs_on_rank(freqs: "torch.Tensor", seqlen: int, cp_size: int, cp_rank: int) -> "torch.Tensor":
    """TE ``_get_freqs_on_this_cp_rank``: the load-balanced halves of context parallelism."""
    if cp_size > 1:
        cp_seg = seqlen // 2
        full = cp_size * seqlen
        return torch.cat([freqs[cp_rank * cp_seg:(cp_rank + 1) * cp_seg],
                          freqs[full - (cp_rank + 1) * cp_seg:full - cp_rank * cp_seg]])
    return freqs[:seqlen]


def apply_rotary_pos_emb(t: "torch.Tensor", freqs: "torch.Tensor", tensor_format: str = "sbhd",
                         start_positions: Optional["torch.Tensor"] = None, interleaved: bool = False,
                         fused: bool = False, cu_seqlens: Optional["torch.Tensor"] = None, cp_size: int = 1,
                         cp_rank: int = 0) -> "torch.Tensor":
    """TE ``apply_rotary_pos_emb``: rotate the first d2 channels of ``t`` by ``freqs``.

    Args:
        t: [s, b, h, d] (``"sbhd"``), [b, s, h, d] (``"bshd"``) or packed [total_tokens, h, d]
            (``"thd"``, with ``cu_seqlens``), any float dtype; channels beyond d2 pass unchanged.
        freqs: float angles [s2, 1, 1, d2] (as :class:`RotaryPositionEmbedding` returns), s2 >= s,
            d2 <= d.
        start_positions: int [b]: sequence i rotated from position ``start_positions[i]`` (TE's
            inference offsets).
        interleaved: the pair layout of ``freqs`` and ``t`` (see :class:`RotaryPositionEmbedding`).
        fused: TE's fused kernel's arithmetic (fp32, one rounding) instead of the unfused
            expression (module docstring); both differentiable.
        cu_seqlens: int [n + 1] cumulative sequence lengths for ``"thd"``.
        cp_size, cp_rank: TE's context-parallel split of the positions.
    Returns a tensor of ``t``'s shape and dtype. Deterministic.
    Raises ValueError for an unknown ``tensor_format``, "thd" without ``cu_seqlens``, or
    positions beyond ``freqs`` (TE's assertions, with TE's messages).
    """
    if tensor_format not in _FORMATS:
        raise ValueError(f"Unsupported tensor_format: {tensor_format}.")
    if tensor_format == "thd" and cu_seqlens is None:
        raise ValueError("cu_seqlens must not be None when tensor_format is 'thd'.")
    if freqs.dim() != 4 or freqs.shape[-1] > t.shape[-1]:
        raise ValueError(f"freqs must be [s2, 1, 1, d2] with d2 <= t's last dimension {t.shape[-1]}; "
                         f"got {tuple(freqs.shape)}")
    if tensor_format == "thd":
        cu = cu_seqlens // cp_size
        seqlens = (cu[1:] - cu[:-1]).tolist()
        parts = []
        for idx, x in enumerate(torch.split(t, seqlens)):
            f = freqs[int(start_positions[idx]):] if start_positions is not None else freqs
            parts.append(_apply_base(x.unsqueeze(1), _freqs_on_rank(f, x.size(0), cp_size, cp_rank), "sbhd",
                                     interleaved, fused))
        return torch.cat(parts).squeeze(1)
    seqlen = t.size(0) if tensor_format == "sbhd" else t.size(1)
    if start_positions is not None:
        if int(torch.max(start_positions)) + seqlen * cp_size > freqs.shape[0]:
            raise ValueError(f"Rotary Embeddings only suppported up to {freqs.shape[0]} sequence length!")
        freqs = torch.concatenate([freqs[int(i):int(i) + seqlen * cp_size] for i in start_positions], dim=1)
    elif seqlen * cp_size > freqs.shape[0]:
        raise ValueError(f"Rotary Embeddings only suppported up to {freqs.shape[0]} sequence length!")
    return _apply_base(t, _freqs_on_rank(freqs, seqlen, cp_size, cp_rank), tensor_format, interleaved, fused)


def apply_fused_qkv_rotary_pos_emb(qkv: "torch.Tensor", q_freqs: "torch.Tensor", k_freqs: "torch.Tensor",
                                   qkv_split_arg_list: list, tensor_format: str = "sbhd",
                                   start_positions: Optional["torch.Tensor"] = None, interleaved: bool = False,
                                   cu_seqlens: Optional["torch.Tensor"] = None, cp_size: int = 1,
                                   cp_rank: int = 0) -> tuple:
    """TE ``apply_fused_qkv_rotary_pos_emb``: split a fused QKV tensor and rotate q and k.

    Args:
        qkv: [s, b, g, q + k + v] ("sbhd") or [b, s, g, q + k + v] ("bshd"), g the key/value
            groups, the last dimension [q | k | v] with sizes ``qkv_split_arg_list`` = [q, k, v].
        q_freqs, k_freqs: float angles [s2, 1, 1, d2] for q and k.
    Returns (q [.., g q / k, k], k [.., g, k], v [.., g, v]): each group's q split into heads of
    the key width k, as TE's kernel lays them out; q and k rotated with TE's fused arithmetic
    (:func:`apply_rotary_pos_emb`, ``fused=True``), v unchanged.
    Raises ValueError for "thd" (TE: not supported), start_positions with cp_size > 1, a split that
    does not add up to qkv's last dimension, or a q width not a multiple of k.
    """
    if tensor_format == "thd":
        raise ValueError("'thd' tensor_format not supported currently.")
    if tensor_format not in ("sbhd", "bshd"):
        raise ValueError(f"Unsupported tensor_format: {tensor_format}.")
    if cp_size > 1 and start_positions is not None:
        raise ValueError("start_positions != None with CP SIZE > 1 is not supported!")
    nq, nk, nv = (int(x) for x in qkv_split_arg_list)
    if qkv.dim() != 4 or nq + nk + nv != qkv.shape[-1] or nk <= 0 or nq % nk:
        raise ValueError(f"qkv_split_arg_list {list(qkv_split_arg_list)} must split qkv's last dimension "
                         f"{qkv.shape[-1]} into q, k, v with q a multiple of k (qkv shape {tuple(qkv.shape)})")
    q = qkv[..., :nq].reshape(qkv.shape[0], qkv.shape[1], qkv.shape[2] * (nq // nk), nk)
    k = qkv[..., nq:nq + nk]
    v = qkv[..., nq + nk:].contiguous()
    common = dict(tensor_format=tensor_format, start_positions=start_positions, interleaved=interleaved,
                  fused=True, cp_size=cp_size, cp_rank=cp_rank)
    return apply_rotary_pos_emb(q, q_freqs, **common), apply_rotary_pos_emb(k, k_freqs, **common), v
