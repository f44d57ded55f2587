"""TE's FP8 autocast (``fp8_autocast``, ``autocast``) and the region state the modules read (TE
``transformer_engine/pytorch/fp8.py``)."""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from ..recipe import DelayedScaling, Quantizer


@dataclass
class _Region:
    enabled: bool
    calibrating: bool
    recipe: Any
    group: Any = None  # fp8_group: the torch.distributed group of the amax reduction (None: the world)
    modules: List[Any] = field(default_factory=list)  # modules whose FP8 forward ran in the region
    first_module_seen: bool = False
    backward_group: Optional["_BackwardGroup"] = None
    graph: bool = False  # TE's _graph (CUDA-graph capture): no registration, no automatic updates


# TE's global buffers (FP8GlobalStateManager.add_fp8_tensors_to_global_buffer): every quantizer with
# delayed-scaling state joins, at its module's first FP8 forward outside graph capture, the list of
# its (recipe, fp8_group) key, once; each update then rolls and updates every registered quantizer of
# its direction, whether or not its module ran since the last one, reducing the amaxes per key. Weak
# references: a module that is gone leaves its key.
_Key = Tuple[str, Optional[int]]
_REGISTERED: Dict[bool, Dict[_Key, Tuple[Any, Any, List["weakref.ref"]]]] = {True: {}, False: {}}


def _register(fwd: Quantizer, bwd: Quantizer, recipe: Any, group: Any) -> None:
    """TE ``add_fp8_tensors_to_global_buffer`` for one GEMM's forward and backward quantizers."""
    if getattr(fwd, "_fp8emu_registered", False) or fwd._impl.state() is None:
        return
    key = (repr(recipe), None if group is None else id(group))
    for forward, q in ((True, fwd), (False, bwd)):
        entry = _REGISTERED[forward].setdefault(key, (recipe, group, []))
        entry[2].append(weakref.ref(q))
        q._fp8emu_registered = True


def _update_registered(forward: bool, also: List[Quantizer] = ()) -> None:
    """TE ``reduce_and_update_fp8_tensors(forward)``: every registered quantizer of the direction,
    per key its amaxes reduced over the key's group, then each quantizer's update; ``also``: quantizers
    outside the registry (calibration) updated after them."""
    table = _REGISTERED[forward]
    done: List[Quantizer] = []
    for key in list(table):
        recipe, group, refs = table[key]
        alive = [q for q in (r() for r in refs) if q is not None]
        if not alive:
            del table[key]
            continue
        refs[:] = [weakref.ref(q) for q in alive]
        _reduce_amaxes(alive, recipe, group)
        for q in alive:
            q.update_scales()
        done.extend(alive)
    for q in also:
        if not any(q is d for d in done):
            q.update_scales()
            done.append(q)


def _reset_registered() -> None:
    for forward in (True, False):
        for _, _, refs in _REGISTERED[forward].values():
            for r in refs:
                q = r()
                if q is not None:
                    q._fp8emu_registered = False
        _REGISTERED[forward].clear()


def _reduce_amaxes(quantizers: List[Quantizer], recipe: Any, group: Any) -> None:
    """TE's amax reduction before a delayed-scaling update (``reduce_and_update_fp8_tensors``): when
    ``recipe.reduce_amax`` and torch.distributed is initialized with more than one rank in
    ``group`` (None: the default group), this step's amaxes of every quantizer (row 0 of each amax
    history) are replaced by their maximum over the ranks, in one all-reduce (MAX: exact, the same
    on every rank in any order). Other recipes keep no amax history: nothing to reduce."""
    if not getattr(recipe, "reduce_amax", False):
        return
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) <= 1:
        return
    states = [(q, q._impl.state()) for q in quantizers]
    states = [(q, st) for q, st in states if st is not None]
    if not states:
        return
    import torch
    buf = torch.from_numpy(np.concatenate([st[1][0] for _, st in states]))
    dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
    reduced, at = buf.numpy(), 0
    for q, (scale, hist) in states:
        hist = hist.copy()
        hist[0] = reduced[at:at + hist.shape[1]]
        at += hist.shape[1]
        q._impl.set_state(scale, np.ascontiguousarray(hist))


class _BackwardGroup:
    """The backward quantizers of one autocast region, updated together at the end of the backward
    (after the amax reduction over the region's fp8_group)."""

    def __init__(self, recipe: Any = None, group: Any = None, graph: bool = False):
        self.quantizers: List[Quantizer] = []
        self.recipe, self.group, self.graph = recipe, group, graph

    def add(self, q: Quantizer) -> None:
        if not any(q is o for o in self.quantizers):
            self.quantizers.append(q)

    def update(self) -> None:
        """TE ``reduce_and_update_fp8_tensors(forward=False)`` at the end of the backward: every
        registered backward quantizer (and this region's others), unless the region was captured
        as a graph (TE skips it then)."""
        if self.graph:
            return
        _update_registered(False, [q for q in self.quantizers if not getattr(q, "_fp8emu_registered", False)])


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
            ``Float8CurrentScaling``, ``MXFP8BlockScaling``, ``Float8BlockScaling``,
            ``NVFP4BlockScaling``).
        fp8_group: TE's amax reduction group: with torch.distributed initialized and the recipe's
            ``reduce_amax`` (delayed scaling), each update first takes the maximum of this step's
            amaxes over the group's ranks (None: the default group), so every rank holds the same
            scales, as TE.
    Nesting: the innermost context decides; the forward scales are updated at the exit of the
    outermost one (TE's ``FP8_AUTOCAST_DEPTH == 0``) when gradients are enabled there
    (``torch.is_grad_enabled()``: under ``torch.no_grad()`` TE leaves the scales as they are).
    Which scales: as TE's global buffers, every module that has run an FP8 forward under delayed
    scaling (registered once, at its first; each (recipe, fp8_group) pair reduced separately),
    whether or not it ran in this region, and the modules calibrated in it; the backward states
    likewise at the end of each backward. ``_graph`` (TE's CUDA-graph capture flag): modules
    neither register nor update; the caller updates.
    Raises:
        TypeError: a recipe that is not one of fp8emu's recipe classes.
    """
    recipe = DelayedScaling() if fp8_recipe is None else fp8_recipe
    if getattr(recipe, "_kind", None) is None:
        raise TypeError(f"fp8_recipe must be an fp8emu recipe (DelayedScaling, Float8CurrentScaling, "
                        f"MXFP8BlockScaling, Float8BlockScaling, NVFP4BlockScaling); got {type(recipe).__name__}")
    region = _Region(bool(enabled), bool(calibrating), recipe, fp8_group, graph=bool(_graph))
    _STACK.append(region)
    try:
        yield
    finally:
        _STACK.pop()
        if _STACK:  # nested: hand the modules to the enclosing region, which updates them at its exit
            _STACK[-1].modules.extend(region.modules)
        elif not _graph and torch.is_grad_enabled():
            calibrated = [m._fwd_quantizer for m in region.modules
                          if not getattr(m._fwd_quantizer, "_fp8emu_registered", False)]
            if enabled:  # TE: the registered modules' update needs FP8 on in the outermost region
                _update_registered(True, calibrated)
            else:
                for q in {id(q): q for q in calibrated}.values():
                    q.update_scales()


def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None, amax_reduction_group: Any = None,
             _graph: bool = False):
    """TE 2.x's newer name for :func:`fp8_autocast` (``recipe`` for ``fp8_recipe``; ``_graph``:
    TE's CUDA-graph capture flag, which leaves the scale update to the caller, as there)."""
    return fp8_autocast(enabled=enabled, calibrating=calibrating, fp8_recipe=recipe, fp8_group=amax_reduction_group,
                        _graph=_graph)


# ---- TE's availability probes and model-init contexts (transformer_engine/pytorch/quantization.py) ----

_EMULATED = ("emulated by fp8emu: bit-exact casts and Hopper tensor-core GEMMs on the CPU, and with fp8emu's "
             "CUDA kernels on any NVIDIA GPU (no FP8 hardware needed)")


def _probe(available: bool, reason: str, return_reason: bool) -> Any:
    return (available, reason) if return_reason else available


def is_fp8_available(return_reason: bool = False) -> Any:
    """TE ``is_fp8_available``: True here, on any machine; with ``return_reason`` the pair
    ``(True, reason)``, the reason saying that FP8 is emulated (TE gives "" when it is available)."""
    return _probe(True, _EMULATED, return_reason)


def is_mxfp8_available(return_reason: bool = False) -> Any:
    """TE ``is_mxfp8_available``: True (MXFP8BlockScaling is emulated; TE needs Blackwell)."""
    return _probe(True, _EMULATED, return_reason)


def is_fp8_block_scaling_available(return_reason: bool = False) -> Any:
    """TE ``is_fp8_block_scaling_available``: True (Float8BlockScaling is emulated)."""
    return _probe(True, _EMULATED, return_reason)


def is_nvfp4_available(return_reason: bool = False) -> Any:
    """TE ``is_nvfp4_available``: True (NVFP4BlockScaling is emulated: TE's casts, Hadamard transform
    and stochastic rounding bit for bit; its block GEMM's accumulation a documented model)."""
    return _probe(True, _EMULATED, return_reason)


def get_default_fp8_recipe() -> Any:
    """TE ``get_default_fp8_recipe`` (TE's older module ``fp8``): :func:`get_default_recipe`."""
    return get_default_recipe()


def get_default_recipe() -> Any:
    """TE ``get_default_recipe``: the recipe ``fp8_autocast`` uses without one, ``DelayedScaling()``
    (TE's default before Blackwell; fp8emu models Hopper's GEMMs)."""
    return DelayedScaling()


@contextlib.contextmanager
def quantized_model_init(enabled: bool = True, recipe: Any = None, preserve_high_precision_init_val: bool = False):
    """TE ``quantized_model_init``: with ``enabled=False`` a no-op block (the modules keep
    high-precision parameters, as TE then does). FP8 primary weights (TE's ``Float8Tensor``
    parameters, ``enabled=True``) are not modelled: NotImplementedError, before the block runs."""
    if enabled:
        raise NotImplementedError("quantized_model_init(enabled=True) / fp8_model_init: FP8 primary weights "
                                  "(Float8Tensor parameters) are not modelled by fp8emu.torch; the modules keep "
                                  "high-precision weights and cast them each step, as TE does without it")
    yield


def fp8_model_init(enabled: bool = True, recipe: Any = None, preserve_high_precision_init_val: bool = False):
    """TE ``fp8_model_init``: :func:`quantized_model_init` under its older name."""
    return quantized_model_init(enabled=enabled, recipe=recipe,
                                preserve_high_precision_init_val=preserve_high_precision_init_val)


def __getattr__(name: str) -> Any:
    """TE's older module ``transformer_engine.pytorch.fp8`` re-exports the quantization module and
    the recipes: the same names here, imported on first use."""
    if name.startswith("__"):
        raise AttributeError(name)
    from . import quantization
    from .. import recipe as _recipe
    for mod in (quantization, _recipe):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
