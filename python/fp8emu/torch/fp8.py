"""TE's FP8 autocast (``fp8_autocast``, ``autocast``) and the region state the modules read (TE
``transformer_engine/pytorch/fp8.py``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, List, Optional

from ..recipe import DelayedScaling, Quantizer


@dataclass
class _Region:
    enabled: bool
    calibrating: bool
    recipe: Any
    modules: List[Any] = field(default_factory=list)  # modules whose FP8 forward ran in the region
    first_module_seen: bool = False
    backward_group: Optional["_BackwardGroup"] = None


class _BackwardGroup:
    """The backward quantizers of one autocast region, updated together at the end of the backward."""

    def __init__(self):
        self.quantizers: List[Quantizer] = []

    def add(self, q: Quantizer) -> None:
        if not any(q is o for o in self.quantizers):
            self.quantizers.append(q)

    def update(self) -> None:
        for q in self.quantizers:
            q.update_scales()


_STACK: List[_Region] = []


def is_fp8_enabled() -> bool:
    """Whether FP8 is on here (inside an ``fp8_autocast(enabled=True)``), as TE's
    ``FP8GlobalStateManager.is_fp8_enabled``."""
    return bool(_STACK) and _STACK[-1].enabled


def get_fp8_recipe() -> Any:
    """The recipe of the innermost autocast (TE's default ``DelayedScaling()`` outside one)."""
    return _STACK[-1].recipe if _STACK else DelayedScaling()


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None, fp8_group: Any = None,
                 _graph: bool = False):
    """TE ``fp8_autocast``: FP8 execution of fp8emu.torch modules inside the block.

    Args:
        enabled: run the modules' GEMMs in FP8.
        calibrating: with ``enabled=False``, run in fp32 but record the amax of inputs and weights
            in the delayed-scaling histories (TE's calibration).
        fp8_recipe: a recipe (``fp8emu.DelayedScaling`` (default ``DelayedScaling()``),
            ``Float8CurrentScaling``, ``MXFP8BlockScaling``, ``Float8BlockScaling``).
        fp8_group: TE's amax reduction group; ignored (one process).
    Nesting: the innermost context decides; the forward scales are updated at the exit of the
    outermost one (TE's ``FP8_AUTOCAST_DEPTH == 0``).
    Raises:
        TypeError: a recipe that is not one of fp8emu's recipe classes.
    """
    recipe = DelayedScaling() if fp8_recipe is None else fp8_recipe
    if getattr(recipe, "_kind", None) is None:
        raise TypeError(f"fp8_recipe must be an fp8emu recipe (DelayedScaling, Float8CurrentScaling, "
                        f"MXFP8BlockScaling, Float8BlockScaling); got {type(recipe).__name__}")
    region = _Region(bool(enabled), bool(calibrating), recipe)
    _STACK.append(region)
    try:
        yield
    finally:
        _STACK.pop()
        if _STACK:  # nested: hand the modules to the enclosing region, which updates them at its exit
            _STACK[-1].modules.extend(region.modules)
        elif not _graph:
            seen = []
            for m in region.modules:
                if not any(m is o for o in seen):
                    seen.append(m)
                    m._fwd_quantizer.update_scales()


def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None, amax_reduction_group: Any = None):
    """TE 2.x's newer name for :func:`fp8_autocast` (``recipe`` for ``fp8_recipe``)."""
    return fp8_autocast(enabled=enabled, calibrating=calibrating, fp8_recipe=recipe, fp8_group=amax_reduction_group)
