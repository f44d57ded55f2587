"""``fp8emu.common``: TE's ``transformer_engine.common`` package layout; ``fp8emu.common.recipe`` is
:mod:`fp8emu.recipe` (``from fp8emu.common.recipe import DelayedScaling`` works as TE's import)."""

import sys

from .. import recipe

sys.modules[__name__ + ".recipe"] = recipe

__all__ = ["recipe"]
