"""TE's modules (``transformer_engine/pytorch/module/``): one per file."""

from .fp8_padding import Fp8Padding, Fp8Unpadding
from .grouped_linear import GroupedLinear
from .layernorm import LayerNorm, RMSNorm
from .layernorm_linear import LayerNormLinear
from .layernorm_mlp import LayerNormMLP
from .linear import Linear

__all__ = ["Linear", "GroupedLinear", "Fp8Padding", "Fp8Unpadding", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm"]
