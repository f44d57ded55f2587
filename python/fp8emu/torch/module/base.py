"""The base of the FP8 modules (TE ``module/base.py``): their quantizers and autocast hooks."""

from __future__ import annotations

import hashlib
import pickle
from types import SimpleNamespace
from typing import Any, Optional

import torch
import numpy as np

from ...recipe import Quantizer
from ..fp8 import _BackwardGroup, _Region, _register


def _promotions(recipe: Any) -> tuple:
    """The promotion intervals of fprop and of dgrad/wgrad under a recipe, as TE chooses each GEMM's
    cuBLASLt fast accumulation: the recipe's ``fp8_gemm_*`` MMParams where it has them
    (Float8CurrentScaling; ``use_split_accumulator`` is promotion every 128 K-elements), else TE's
    module defaults (``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``). Block
    recipes promote every block whatever these say."""
    if not recipe.float8_per_tensor_scaling():
        return (0, 128)  # the block GEMMs promote every block; linear_backward ignores the interval
    fprop, dgrad = getattr(recipe, "fp8_gemm_fprop", None), getattr(recipe, "fp8_gemm_dgrad", None)
    return (128 if fprop is not None and fprop.use_split_accumulator else 0,
            0 if dgrad is not None and not dgrad.use_split_accumulator else 128)


def _rounding_seed(module: torch.nn.Module) -> int:
    """The Philox seed of a module's NVFP4 stochastic rounding: a hash of torch's initial seed and
    the module's first parameter when it makes its quantizers. TE draws each cast's (seed, offset)
    from PyTorch's CUDA generator; fp8emu gives each module its own stream without drawing from
    torch's generators, so a script seeded the same way rounds the same way and its other random
    numbers are unchanged (``Quantizer.set_rng_state`` sets other values)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(int(torch.initial_seed()).to_bytes(8, "little"))
    p = next(module.parameters(), None)
    if p is not None:
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return int.from_bytes(h.digest(), "little")


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
            if self._bwd_quantizer.rng_state is not None:  # NVFP4: this module's rounding stream
                self._bwd_quantizer.set_rng_state(_rounding_seed(self), 0)
            self._weight_q = None
        return self._fwd_quantizer, self._bwd_quantizer

    def _region_enter(self, region: _Region, needs_grad: bool):
        """Registers this module's FP8 pass in the region; returns the backward group this call
        must update at the end of its backward (the first FP8 module of the region) or None."""
        region.modules.append(self)
        if region.enabled and not region.graph:
            _register(self._fwd_quantizer, self._bwd_quantizer, region.recipe, region.group)
        if region.backward_group is None:
            region.backward_group = _BackwardGroup(region.recipe, region.group, region.graph)
        region.backward_group.add(self._bwd_quantizer)
        first = needs_grad and not region.first_module_seen
        if needs_grad:
            region.first_module_seen = True
        return region.backward_group if first else None

    def __getstate__(self) -> dict:
        # copy.deepcopy, pickle and torch.save: the quantizers travel with their state; the cached
        # FP8 weight (is_first_microbatch) does not (the copy casts its weight again).
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state["_weight_q"] = None
        return state

    def get_extra_state(self) -> "torch.Tensor":
        """TE's checkpoint of the FP8 state (``_extra_state`` in ``state_dict``), in TE's layout: an
        empty uint8 tensor before the first FP8 forward, else the uint8 bytes of a pickled dict
        ``{"recipe", "extra_fp8_variables"}`` plus, for delayed scaling, ``scale_fwd`` (3,),
        ``amax_history_fwd`` (amax_history_len, 3), ``scale_bwd`` (2,), ``amax_history_bwd``
        (amax_history_len, 2) float32 CPU tensors (slots as :attr:`fp8_meta`). Loading it with
        :meth:`set_extra_state` (``load_state_dict``) restores the next FP8 forward's bits."""
        return _extra_state(self._recipe, [self._fwd_quantizer], [self._bwd_quantizer])

    def set_extra_state(self, state: Any) -> None:
        """Loads :meth:`get_extra_state`'s bytes (None or an empty tensor: nothing to load)."""
        loaded = _load_extra_state(state)
        if loaded is None:
            return
        self._fwd_quantizer = None
        self._quantizers(loaded["recipe"])
        _restore_states(loaded, [self._fwd_quantizer], [self._bwd_quantizer])

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


def _extra_state(recipe: Any, fwd: list, bwd: list) -> "torch.Tensor":
    """TE's ``get_extra_state`` layout for the quantizers of one module's GEMMs (TE keeps each GEMM's
    slots side by side in one fp8_meta: forward [input, weight, output] per GEMM, backward
    [grad_output, grad_input] per GEMM)."""
    if recipe is None or any(q is None for q in fwd + bwd):
        return torch.empty(0, dtype=torch.uint8)
    state: dict = {"recipe": recipe}
    for key, qs in (("fwd", fwd), ("bwd", bwd)):
        sts = [q._impl.state() for q in qs]
        if all(st is not None for st in sts):
            state[f"scale_{key}"] = torch.from_numpy(np.concatenate([st[0] for st in sts]))
            state[f"amax_history_{key}"] = torch.from_numpy(np.concatenate([st[1] for st in sts], axis=1))
    state["extra_fp8_variables"] = {"num_gemms": len(fwd), "fp8_checkpoint": True}
    return torch.frombuffer(bytearray(pickle.dumps(state)), dtype=torch.uint8)


def _load_extra_state(state: Any) -> Optional[dict]:
    """The dict of :func:`_extra_state`'s bytes; None for None or an empty tensor (no FP8 state)."""
    if state is None:
        return None
    if not isinstance(state, torch.Tensor):
        raise RuntimeError("Unsupported checkpoint format.")
    if state.numel() == 0:
        return None
    return pickle.loads(state.detach().cpu().numpy().tobytes())


def _restore_states(state: dict, fwd: list, bwd: list) -> None:
    """Splits a loaded state's scale and amax-history columns back over the GEMMs' quantizers."""
    for key, qs in (("fwd", fwd), ("bwd", bwd)):
        if f"scale_{key}" not in state:
            continue
        scale = state[f"scale_{key}"].numpy().astype(np.float32)
        hist = state[f"amax_history_{key}"].numpy().astype(np.float32)
        slots = scale.shape[0] // len(qs)
        for i, q in enumerate(qs):
            q._impl.set_state(np.ascontiguousarray(scale[i * slots:(i + 1) * slots]),
                              np.ascontiguousarray(hist[:, i * slots:(i + 1) * slots]))
