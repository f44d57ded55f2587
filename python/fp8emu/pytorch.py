"""``import fp8emu.pytorch``: :mod:`fp8emu.torch` under the name of TE's ``transformer_engine.pytorch``
(for scripts written ``import transformer_engine as te; te.pytorch.Linear``). Needs PyTorch."""

import sys

from . import torch as _torch

sys.modules[__name__] = _torch
