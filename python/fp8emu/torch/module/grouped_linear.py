"""TE's ``GroupedLinear`` (``module/grouped_linear.py``): one Linear per group of rows (MoE experts)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any, Callable, List, Optional

import numpy as np
import torch

from ...recipe import Quantizer
from ..fp8 import _BackwardGroup, _Region, _STACK, _register
from .base import _Fp8Module, _extra_state, _load_extra_state, _restore_states, _rounding_seed
from .linear import _LinearFn, _weight_cache
from ... import layers as _layers
from ..utils import (_arr, _autocast_dtype, _check_activation_dtype, _check_float_input, _check_fp8_dims,
                     _check_ignored, _default_init, _no_dynamo, _np, _on_gpu)


class _Gemm:
    """One GEMM's FP8 state inside a GroupedLinear: what ``_LinearFn`` reads of a module (its recipe,
    forward and backward quantizers, cached FP8 weight). TE keeps these as one fp8_meta with
    ``num_gemms`` slots of each role; here each GEMM has its own quantizers, the same numbers."""

    def __init__(self) -> None:
        self._recipe = None
        self._fwd_quantizer: Optional[Quantizer] = None
        self._bwd_quantizer: Optional[Quantizer] = None
        self._weight_q = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_weight_q"] = None  # as _Fp8Module: a copy casts its weight again
        return state


class GroupedLinear(_Fp8Module):
    """TE ``transformer_engine.pytorch.GroupedLinear``: ``num_gemms`` independent Linear layers applied
    to consecutive groups of rows (the experts of an MoE layer), each GEMM in FP8 inside
    :func:`fp8_autocast` with its own scaling state.

    Args (TE's names; the tensor-parallel, userbuffer and deferred-wgrad ones at their defaults only):
        num_gemms: number of groups (experts).
        in_features, out_features: sizes of every group's Linear.
        bias: learn an additive bias per group (zeros at start, as TE).
        init_method: callable initialising each ``weight<i>`` in place (default TE's normal(0, 0.023)).
        return_bias: return ``(y, [bias0, ...])`` with the biases not added.
        params_dtype, device: as :class:`Linear`.
    Parameters: ``weight0`` ... ``weight<num_gemms-1>`` (out_features, in_features), ``bias0`` ...
        (out_features,) or None (TE's names).
    forward(inp, m_splits, is_first_microbatch=None): inp (sum(m_splits), in_features) (leading
        dimensions are flattened), m_splits the row count of each group in order (a list of
        num_gemms ints, zeros allowed); returns (sum(m_splits), out_features) in inp's dtype, group i's
        rows being ``inp_i W_i^T + b_i``, bit for bit what :class:`Linear` computes on those rows with
        group i's state (each FP8 GEMM is fp8emu.layers' linear step). Under FP8 every non-empty
        group's rows must satisfy TE's FP8 shape rule (rows a multiple of 8, in_features of 16).
    State: ``get_extra_state`` holds TE's layout with the groups' slots side by side
        (``extra_fp8_variables["num_gemms"]``); :attr:`fp8_meta` likewise. Every GEMM's scaling state
        is updated at each FP8 step, a group without rows recording an input amax of 0 (its weight is
        still cast, as TE casts every group's weight), as TE updates the module's one fp8_meta.
    Raises:
        ValueError: m_splits of another length or sum. AssertionError: TE's FP8 shape rule.
        NotImplementedError: tensor parallelism, userbuffers, delay_wgrad_compute.
    """

    def __init__(self, num_gemms: int, in_features: int, out_features: int, bias: bool = True,
                 init_method: Optional[Callable] = None, return_bias: bool = False,
                 params_dtype: Optional["torch.dtype"] = None, device: Any = "cpu", **kwargs: Any):
        super().__init__()
        _check_ignored(kwargs, "GroupedLinear")
        if int(num_gemms) < 1:
            raise ValueError(f"GroupedLinear: num_gemms must be at least 1, got {num_gemms}")
        self.num_gemms = int(num_gemms)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.use_bias, self.return_bias = bool(bias), bool(return_bias)
        dtype = params_dtype or torch.get_default_dtype()
        self.params_dtype = dtype
        for i in range(self.num_gemms):
            w = torch.nn.Parameter(torch.empty(self.out_features, self.in_features, dtype=dtype, device=device))
            (init_method or _default_init)(w.data)
            setattr(self, f"weight{i}", w)
        for i in range(self.num_gemms):
            if self.use_bias:
                setattr(self, f"bias{i}", torch.nn.Parameter(torch.zeros(self.out_features, dtype=dtype, device=device)))
            else:
                self.register_parameter(f"bias{i}", None)
        self._init_fp8()
        self._gemms = [_Gemm() for _ in range(self.num_gemms)]

    def _quantizers(self, recipe: Any):
        """Each GEMM's quantizers for the recipe (new state when the recipe changes, as TE)."""
        if self._recipe != recipe or type(self._recipe) is not type(recipe) or self._gemms[0]._fwd_quantizer is None:
            self._recipe = recipe
            seed = _rounding_seed(self)
            for i, g in enumerate(self._gemms):
                g._recipe = recipe
                g._fwd_quantizer = Quantizer(recipe, "forward")
                g._bwd_quantizer = Quantizer(recipe, "backward")
                if g._bwd_quantizer.rng_state is not None:  # NVFP4: one rounding stream per GEMM
                    h = hashlib.blake2b(seed.to_bytes(8, "little") + i.to_bytes(4, "little"), digest_size=8)
                    g._bwd_quantizer.set_rng_state(int.from_bytes(h.digest(), "little"), 0)
                g._weight_q = None
            self._fwd_quantizer, self._bwd_quantizer = self._gemms[0]._fwd_quantizer, self._gemms[0]._bwd_quantizer
        return self._fwd_quantizer, self._bwd_quantizer

    def _split(self, inp: "torch.Tensor", m_splits: List[int]) -> List["torch.Tensor"]:
        splits = [int(m) for m in m_splits]
        if len(splits) != self.num_gemms:
            raise ValueError(f"GroupedLinear: m_splits has {len(splits)} entries, expected num_gemms={self.num_gemms}")
        rows = inp.reshape(-1, self.in_features)
        if any(m < 0 for m in splits) or sum(splits) != rows.shape[0]:
            raise ValueError(f"GroupedLinear: m_splits {splits} must be non-negative and add up to the input's "
                             f"{rows.shape[0]} rows")
        return list(torch.split(rows, splits, dim=0))

    @_no_dynamo
    def forward(self, inp: "torch.Tensor", m_splits: List[int], is_first_microbatch: Optional[bool] = None):
        region = _STACK[-1] if _STACK else None
        weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        biases = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
        _check_float_input(inp, weights[0])
        _check_activation_dtype(self, inp)
        pieces = self._split(inp, m_splits)
        use_bias = [None if (b is None or self.return_bias) else b for b in biases]
        fp8 = region is not None and region.enabled
        if fp8:
            act = _autocast_dtype(inp)
            if act is not None and inp.dtype != act:  # TE casts the input to the activation dtype first
                pieces = [p.to(act) for p in pieces]
            for p, w in zip(pieces, weights):
                if p.shape[0] > 0:
                    _check_fp8_dims(p, w)
            self._quantizers(region.recipe)
            needs_grad = torch.is_grad_enabled() and (inp.requires_grad or any(w.requires_grad for w in weights))
            group = self._enter(region, needs_grad)
        elif region is not None and region.calibrating:
            self._calibrate(region, pieces, weights)
        outs = []
        first = True
        for p, w, b, g in zip(pieces, weights, use_bias, self._gemms):
            if not fp8 or p.shape[0] == 0:  # no FP8, or a group without rows (no GEMM)
                if fp8 and is_first_microbatch is not False:  # TE casts every group's weight
                    wq = _layers.quantize_weight(_arr(w, _on_gpu(w)), g._fwd_quantizer)
                    g._weight_q = wq if is_first_microbatch else None
                outs.append(torch.nn.functional.linear(p, w.to(p.dtype), None if b is None else b.to(p.dtype)))
                continue
            weight_q = _weight_cache(g, g._fwd_quantizer, is_first_microbatch)
            outs.append(_LinearFn.apply(p, w, b, g, weight_q, group if first else None))
            first = False
            if is_first_microbatch is None:
                g._weight_q = None
        out = torch.cat(outs, 0).reshape(*inp.shape[:-1], self.out_features) if outs else \
            inp.new_empty((*inp.shape[:-1], self.out_features))
        return (out, biases) if self.return_bias else out

    def _enter(self, region: _Region, needs_grad: bool):
        """As _Fp8Module._region_enter for every GEMM, those without rows included: TE updates one
        fp8_meta holding all the GEMMs' slots, so a group without tokens records an amax of 0."""
        region.modules.extend(self._gemms)
        if region.enabled and not region.graph:
            for g in self._gemms:
                _register(g._fwd_quantizer, g._bwd_quantizer, region.recipe, region.group)
        if region.backward_group is None:
            region.backward_group = _BackwardGroup(region.recipe, region.group, region.graph)
        for g in self._gemms:
            region.backward_group.add(g._bwd_quantizer)
        first = needs_grad and not region.first_module_seen
        if needs_grad:
            region.first_module_seen = True
        return region.backward_group if first else None

    def _calibrate(self, region: _Region, pieces, weights) -> None:
        self._quantizers(region.recipe)
        for p, w, g in zip(pieces, weights, self._gemms):
            if p.shape[0] > 0:
                g._fwd_quantizer.quantize(_np(p), "input", "rowwise")
            g._fwd_quantizer.quantize(_np(w), "weight", "rowwise")
        region.modules.extend(self._gemms)

    def get_extra_state(self) -> "torch.Tensor":
        """TE's layout (see :meth:`Linear.get_extra_state`) with the GEMMs' slots side by side."""
        return _extra_state(self._recipe, [g._fwd_quantizer for g in self._gemms],
                            [g._bwd_quantizer for g in self._gemms])

    def set_extra_state(self, state: Any) -> None:
        loaded = _load_extra_state(state)
        if loaded is None:
            return
        self._recipe = None
        self._quantizers(loaded["recipe"])
        _restore_states(loaded, [g._fwd_quantizer for g in self._gemms], [g._bwd_quantizer for g in self._gemms])

    @property
    def fp8_meta(self) -> dict:
        """TE's ``fp8_meta`` view: ``scaling_fwd`` with 3 * num_gemms slots (input, weight, output of
        each GEMM in turn), ``scaling_bwd`` with 2 * num_gemms (grad_output, grad_input)."""
        meta: dict = {"recipe": self._recipe}
        for key, attr in (("scaling_fwd", "_fwd_quantizer"), ("scaling_bwd", "_bwd_quantizer")):
            sts = [None if getattr(g, attr) is None else getattr(g, attr)._impl.state() for g in self._gemms]
            if all(st is not None for st in sts):
                scale = np.concatenate([st[0] for st in sts])
                meta[key] = SimpleNamespace(scale=torch.from_numpy(scale),
                                            scale_inv=torch.from_numpy((np.float32(1) / scale).astype(np.float32)),
                                            amax_history=torch.from_numpy(np.concatenate([st[1] for st in sts], 1)))
        return meta

    @property
    def quantizers(self) -> dict:
        """Every GEMM's :class:`fp8emu.Quantizer` objects: ``{"forward": [...], "backward": [...]}``."""
        return {"forward": [g._fwd_quantizer for g in self._gemms], "backward": [g._bwd_quantizer for g in self._gemms]}

    def extra_repr(self) -> str:
        return (f"num_gemms={self.num_gemms}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.use_bias}")
