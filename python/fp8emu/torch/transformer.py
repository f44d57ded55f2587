"""TE's ``TransformerLayer`` (``transformer.py``)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import torch

from .attention import MultiheadAttention, _TE_ACTIVATIONS, _check_bool_mask, _check_format, _check_mask_type, _check_parallel, _check_softmax_type, _check_unsupported_forward, _window
from .module.layernorm import LayerNorm, RMSNorm
from .module.layernorm_mlp import LayerNormMLP, _ACTIVATIONS
from .utils import _default_init


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
        activation (TE's, as :class:`LayerNormMLP`: gelu (tanh form), relu, qgelu, srelu, silu and the
        gated glu, geglu, qgeglu, reglu, sreglu, swiglu), normalization ("LayerNorm"/"RMSNorm"),
        attn_input_format ("sbhd" or "bshd"), name, softmax_type ("vanilla").
        Accepted at their no-op values only: tp_group=None, tp_size=1, get_rng_state_tracker=None,
        fuse_wgrad_accumulation=False, ub_tp_comm_overlap=False (the other ub_* flags are then no-ops,
        as in TE), activation_params=None, qk_norm_type=None; sequence_parallel and
        set_parallel_mode are no-ops at tp_size=1 (as in TE).
    forward(hidden_states, attention_mask=None, self_attn_mask_type=None, window_size=None,
        bottom_right_diagonal=None, encoder_output=None, enc_dec_attn_mask=None,
        enc_dec_attn_mask_type=None, ..., is_first_microbatch=None, checkpoint_core_attention=False):
        hidden_states [s, b, hidden_size] ("sbhd") or [b, s, hidden_size] ("bshd"), any float dtype
        (the GEMMs are fp8emu's, the attention core fp32, the result in the input's dtype) ->
        the same shape. ``attention_mask``: bool, True = masked out, [b, 1, 1, s] for padding masks.
        ``checkpoint_core_attention`` is accepted (recomputation does not change values).
        ``rotary_pos_emb`` (angles from :class:`RotaryPositionEmbedding`, or a (q, k) pair) goes to
        the self and the cross attention, as in TE.
    Raises:
        ValueError: inconsistent sizes, unknown mask types / formats / normalizations /
            activations, TE's incompatible flag combinations. TypeError: unknown keyword arguments,
            non-bool masks. NotImplementedError: the TE features listed above as not modelled
            (named in the message), e.g. "thd", inference_params, attention
            biases/ALiBi, clamped_swiglu, parallelism.
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
                         softmax_type=softmax_type, bias=bias, normalization=normalization, device=device,
                         rotary_pos_interleaved=rotary_pos_interleaved)
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
        unsupported = dict(inference_params=inference_params,
                           core_attention_bias=core_attention_bias, alibi_slopes=alibi_slopes,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                           cu_seqlens_q_padded=cu_seqlens_q_padded, cu_seqlens_kv_padded=cu_seqlens_kv_padded)
        _check_unsupported_forward("TransformerLayer", **unsupported)
        attn_kwargs = dict(is_first_microbatch=is_first_microbatch, checkpoint_core_attention=checkpoint_core_attention,
                           core_attention_bias_type=core_attention_bias_type, rotary_pos_emb=rotary_pos_emb)
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
