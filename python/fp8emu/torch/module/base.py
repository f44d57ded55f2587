"""The base of the FP8 modules (TE ``module/base.py``): their quantizers and autocast hooks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import torch
import numpy as np

from ...recipe import Quantizer
from ..fp8 import _BackwardGroup, _Region


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
            self._weight_q = None
        return self._fwd_quantizer, self._bwd_quantizer

    def _region_enter(self, region: _Region, needs_grad: bool):
        """Registers this module's FP8 pass in the region; returns the backward group this call
        must update at the end of its backward (the first FP8 module of the region) or None."""
        region.modules.append(self)
        if region.backward_group is None:
            region.backward_group = _BackwardGroup()
        region.backward_group.add(self._bwd_quantizer)
        first = needs_grad and not region.first_module_seen
        if needs_grad:
            region.first_module_seen = True
        return region.backward_group if first else None

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
