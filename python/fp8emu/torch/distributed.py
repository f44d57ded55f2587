"""TE's ``transformer_engine/pytorch/distributed.py`` names a single-process script meets."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .fp8 import is_fp8_enabled


def checkpoint(function: Callable, *args: Any, distribute_saved_activations: bool = False,
               get_rng_state_tracker: Any = None, tp_group: Any = None, use_reentrant: bool = True,
               **kwargs: Any) -> Any:
    """TE ``checkpoint`` (activation recomputation): outside an FP8 region, PyTorch's
    ``torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)``,
    the same values as calling ``function``. Inside ``fp8_autocast(enabled=True)``, TE replays the
    forward with the first pass's FP8 scales; fp8emu does not model that replay, so it raises
    NotImplementedError rather than recompute with other scales.
    Raises:
        NotImplementedError: inside an FP8 region; ``distribute_saved_activations``,
            ``get_rng_state_tracker`` or ``tp_group`` (tensor parallelism).
    """
    if distribute_saved_activations or get_rng_state_tracker is not None or tp_group is not None:
        raise NotImplementedError("checkpoint: distribute_saved_activations, get_rng_state_tracker and tp_group "
                                  "(tensor parallelism) are not supported by fp8emu.torch (one process)")
    if is_fp8_enabled():
        raise NotImplementedError("checkpoint inside fp8_autocast(enabled=True): TE recomputes the forward with "
                                  "the first pass's FP8 scales, which fp8emu.torch does not model; call the "
                                  "function directly, or checkpoint outside the FP8 region")
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)
