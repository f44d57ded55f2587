"""Transformer Engine's FP8 recipes, with TE's class and field names, and their quantizers.

Mirrors ``transformer_engine/common/recipe/__init__.py`` (the recipe records and their defaults) and
TE's quantizers (``pytorch/tensor/float8_tensor.py`` Float8Quantizer / Float8CurrentScalingQuantizer,
``mxfp8_tensor.py`` MXFP8Quantizer, ``float8_blockwise_tensor.py`` Float8BlockQuantizer), through
fp8emu's C++ quantizers (``include/fp8emu/scaling/``; docs/transformer-engine.md has the formulas and
the TE sources of each). Every cast rounds to nearest even and saturates (CUDA ``__NV_SATFINITE``:
finite overflow and +-Inf to +-max, NaN to the NaN code), as TE's cast kernels.

    recipe = fp8emu.DelayedScaling(fp8_format=fp8emu.Format.HYBRID, amax_history_len=16)
    fwd = fp8emu.Quantizer(recipe, "forward")
    x_q = fwd.quantize(x, "input")                 # codes, scale_inv, ... (x: float32 (rows, cols))
    w_q = fwd.quantize(w, "weight")
    y = fp8emu.recipe.gemm(x_q, w_q)               # y = x W^T, TE's fprop GEMM
    fwd.update_scales()                            # TE's amax/scale update after the forward pass
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np

from . import _fp8emu

__all__ = ["Format", "Recipe", "MMParams", "QParams", "DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling",
           "Float8BlockScaling", "NVFP4BlockScaling", "CustomRecipe", "Quantizer", "QuantizedTensor", "gemm"]


class _FormatHelper(NamedTuple):
    """TE's ``_FormatHelper``: the largest finite value of the forward and backward formats."""

    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    """TE ``Format``: the element formats of the forward and backward tensors; each value is TE's
    ``_FormatHelper(max_fwd, max_bwd)`` (``Format.HYBRID.value.max_fwd == 448``)."""

    E2M1 = _FormatHelper(max_fwd=6, max_bwd=6)  #: FP4 (NVFP4's element format)
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)  #: E4M3 everywhere
    #: E5M2 everywhere (TE rejects it in every recipe: "Pure E5M2 training is not supported")
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    #: E4M3 forward (input, weight, output), E5M2 backward (grad_output, grad_input)
    HYBRID = _FormatHelper(max_fwd=448, max_bwd=57344)


def _format_name(f: Any) -> str:
    return f.name.lower() if isinstance(f, Format) else str(f)


@dataclass(frozen=True)
class MMParams:
    """TE ``MMParams``: a GEMM's option. ``use_split_accumulator`` (TE's name for cuBLASLt without
    fast accumulation): promote the tensor-core partial sums to fp32 every 128 K-elements (fp8emu's
    ``promotion=128``); False is fast accumulation (``promotion=0``)."""

    use_split_accumulator: bool = True


@dataclass(frozen=True)
class QParams:
    """TE ``QParams``: quantization options of one tensor kind (TE's fields; fp8emu reads
    ``power_2_scale`` and ``amax_epsilon`` through its recipes' own fields)."""

    power_2_scale: bool = False
    amax_epsilon: float = 0.0
    random_hadamard_transform: bool = False
    stochastic_rounding: bool = False
    fp4_2d_quantization: bool = False


_BACKWARD_OVERRIDES = (None, "high_precision", "dequantized")


def _check_common(recipe: Any) -> None:
    """TE's checks shared by the recipes (its asserts, as AssertionError with TE's messages), and
    what fp8emu does not model, refused by name."""
    assert recipe.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."
    assert recipe.backward_override in _BACKWARD_OVERRIDES, (
        "NVTE_BACKWARD_OVERRIDE must be unset or one of: 'high_precision', 'dequantized'.")
    if recipe.backward_override is not None:
        raise NotImplementedError(f"{type(recipe).__name__}(backward_override={recipe.backward_override!r}): TE's "
                                  f"high-precision or dequantized backward is not modelled by fp8emu (the backward "
                                  f"GEMMs run in FP8 as with backward_override=None)")


class Recipe:
    """TE ``Recipe``: the base of the recipe classes, with TE's predicates."""

    @classmethod
    def nvfp4(cls) -> bool:
        return issubclass(cls, NVFP4BlockScaling)

    @classmethod
    def mxfp8(cls) -> bool:
        return issubclass(cls, MXFP8BlockScaling)

    @classmethod
    def delayed(cls) -> bool:
        return issubclass(cls, DelayedScaling)

    @classmethod
    def float8_current_scaling(cls) -> bool:
        return issubclass(cls, Float8CurrentScaling)

    @classmethod
    def float8_per_tensor_scaling(cls) -> bool:
        return issubclass(cls, (DelayedScaling, Float8CurrentScaling))

    @classmethod
    def float8_block_scaling(cls) -> bool:
        return issubclass(cls, Float8BlockScaling)

    @classmethod
    def custom(cls) -> bool:
        return issubclass(cls, CustomRecipe)


@dataclass
class DelayedScaling(Recipe):
    """TE ``DelayedScaling``: each tensor is cast with a scale from the amax history of earlier steps.

    After a pass, :meth:`Quantizer.update_scales` runs TE's update for every tensor slot (fused
    kernel, ``delayed_scaling.cu``): the window's amax (``"max"``) or this step's (``"most_recent"``),
    ``scale = RN(RN(fp8_max * 2^-margin) / amax)`` in fp32 where amax is finite and > 0, else the old
    scale; ``fused_update=False`` is TE's Python path (``NVTE_UNFUSED_FP8_UPDATE=1``).

    TE's callables (they make TE take its Python path, as ``fused_update=False``):

    - ``amax_compute_algo`` may be a function of the amax history, a float32 array
      (amax_history_len, slots) with row 0 this step's amaxes, returning the amax of each slot,
      shape (slots,); it sees the history before the roll (TE ``_compute_amax_and_update_history``).
    - ``scaling_factor_compute_algo(amax, scale, fp8_max, recipe)``: amax and the current scales as
      float32 arrays (slots,), fp8_max a Python float; returns the new scales (slots,), stored as
      float32 (TE ``_compute_scaling_factor``). None: TE's default,
      ``sf = (fp8_max / amax) / 2**margin`` in fp32, the old scale where amax is not > 0 or not
      finite, FLT_MAX where sf is infinite.

    ``reduce_amax``: fp8emu.torch reduces each step's amaxes (MAX) over ``fp8_autocast``'s
    ``fp8_group`` when torch.distributed is initialized, as TE; a lone Quantizer has nothing to
    reduce. ``fp8_dpa`` and
    ``fp8_mha`` (TE's FP8 attention) are accepted; an attention module run under them raises
    NotImplementedError. ``backward_override`` must be None (TE: "Delayed scaling only supports
    backward_override=None").

    ``fnuz`` (fp8emu's; ROCm's TE picks it from the GPU): the FP8 types of ROCm's TE on MI300
    (gfx942), E4M3FNUZ (max 240) forward and E5M2FNUZ (max 57344) backward under HYBRID, cast as
    ROCm casts them (round to nearest even, finite overflow to +-max, +-Inf and NaN to the NaN code
    0x80, no -0); docs/transformer-engine.md. Host arrays only (the GPU path takes OCP formats).
    """

    margin: float = 0.0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Any = "max"  #: "max", "most_recent" or a callable (above)
    scaling_factor_compute_algo: Optional[Callable] = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = os.getenv("NVTE_BACKWARD_OVERRIDE", None)
    fused_update: bool = True  #: fp8emu's name for TE's NVTE_UNFUSED_FP8_UPDATE=0
    fnuz: bool = False  #: ROCm's TE on MI300: E4M3FNUZ / E5M2FNUZ (above)

    _kind = "delayed"

    def __post_init__(self) -> None:
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."
        assert self.backward_override in _BACKWARD_OVERRIDES, (
            "NVTE_BACKWARD_OVERRIDE must be unset or one of: 'high_precision', 'dequantized'.")
        assert self.backward_override is None, "Delayed scaling only supports backward_override=None."


@dataclass
class Float8CurrentScaling(Recipe):
    """TE ``Float8CurrentScaling``: each tensor is scaled by its own amax at cast time,
    ``scale = fp8_max / max(amax, amax_epsilon)`` in fp32 (TE ``compute_scale_from_amax``), a power of
    two below it with ``use_power_2_scales`` (TE's NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES=1, read
    when fp8emu is imported, as TE reads it). ``fp8_gemm_fprop`` / ``fp8_gemm_dgrad`` /
    ``fp8_gemm_wgrad`` choose each GEMM's accumulation in fp8emu.torch as in TE (defaults: fast
    accumulation in fprop, promotion every 128 in dgrad and wgrad); dgrad and wgrad must agree
    (fp8emu's backward takes one promotion interval). ``fp8_quant_*`` are TE's QParams, read only.
    ``fnuz``: ROCm's TE on MI300, as :class:`DelayedScaling`'s (fp8_max 240 for E4M3FNUZ)."""

    fp8_format: Format = Format.HYBRID
    use_power_2_scales: bool = os.getenv("NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES", "0") == "1"
    amax_epsilon: float = 0.0
    fnuz: bool = False  #: ROCm's TE on MI300: E4M3FNUZ / E5M2FNUZ
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=False)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = os.getenv("NVTE_BACKWARD_OVERRIDE", None)

    _kind = "current"

    def __post_init__(self) -> None:
        _check_common(self)
        if self.fp8_gemm_dgrad.use_split_accumulator != self.fp8_gemm_wgrad.use_split_accumulator:
            raise NotImplementedError("Float8CurrentScaling: fp8_gemm_dgrad and fp8_gemm_wgrad with different "
                                      "use_split_accumulator are not modelled (fp8emu's backward takes one "
                                      "promotion interval for both GEMMs)")

    @property
    def fp8_quant_fwd_inp(self) -> QParams:
        return QParams(power_2_scale=self.use_power_2_scales, amax_epsilon=self.amax_epsilon)

    fp8_quant_fwd_weight = fp8_quant_fwd_inp
    fp8_quant_bwd_grad = fp8_quant_fwd_inp


@dataclass
class MXFP8BlockScaling(Recipe):
    """TE ``MXFP8BlockScaling``: blocks of 32 elements along K, each with an E8M0 scale. TE's rule
    (``scale_rule="te"``) rounds ``amax * fl32(1/fp8_max)`` up to a power of two, so no element
    saturates; ``"ocp"`` is OCP MX v1.0's ``2^(floor(log2 amax) - emax)``, which may saturate.
    ``margin`` is TE's field, which TE's MXFP8 cast does not read (accepted at 0 only)."""

    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = os.getenv("NVTE_BACKWARD_OVERRIDE", None)
    scale_rule: str = "te"  #: fp8emu's addition: "te", "ocp" or "even" (torchao's EVEN)

    _kind = "mxfp8"

    def __post_init__(self) -> None:
        _check_common(self)
        if self.margin != 0:
            raise NotImplementedError(f"MXFP8BlockScaling(margin={self.margin}): TE's MXFP8 cast has no margin")


@dataclass
class Float8BlockScaling(Recipe):
    """TE ``Float8BlockScaling`` (DeepSeek-V3 style): 1 x 128 blocks for activations and gradients,
    128 x 128 tiles for weights, fp32 scales rounded down to powers of two unless ``use_f32_scales``
    (TE's NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1, read when fp8emu is imported, as TE reads it).
    ``x_block_scaling_dim`` / ``w_block_scaling_dim`` / ``grad_block_scaling_dim`` are TE's (1 or 2,
    with TE's checks); fp8emu runs TE's defaults (1, 2, 1) and refuses the other valid choices by
    name. The GEMMs always promote (TE requires ``use_split_accumulator=True`` for all three).

    ``mxfp8_gemms`` (fp8emu's, not a TE field: TE picks it from the GPU) runs the GEMMs as TE does on
    Blackwell (sm_100 and newer): the same FP8 codes, each power-of-two ``scale_inv`` converted to
    the E8M0 code of its exponent and broadcast to four 1 x 32 blocks, every 32-block's partial
    promoted (an MXFP8 GEMM). It needs power-of-two scales (``use_f32_scales=False``), as TE
    asserts on Blackwell; docs/transformer-engine.md has the sources."""

    fp8_format: Format = Format.E4M3
    use_f32_scales: bool = os.getenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "0") == "1"
    amax_epsilon: float = 0.0
    mxfp8_gemms: bool = False
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = os.getenv("NVTE_BACKWARD_OVERRIDE", None)

    _kind = "block"

    def __post_init__(self) -> None:
        assert self.x_block_scaling_dim in [1, 2], "Only 1D or 2D blocks supported for x"
        assert self.w_block_scaling_dim in [1, 2], "Only 1D or 2D blocks supported for w"
        assert self.grad_block_scaling_dim in [1, 2], "Only 1D or 2D blocks supported for grad"
        assert not (self.x_block_scaling_dim == 2 and self.w_block_scaling_dim == 2), "2D by 2D block gemm not supported."
        assert not (self.x_block_scaling_dim == 2 and self.grad_block_scaling_dim == 2), (
            "2D by 2D block gemm not supported.")
        assert not (self.w_block_scaling_dim == 2 and self.grad_block_scaling_dim == 2), (
            "2D by 2D block gemm not supported.")
        assert self.fp8_gemm_fprop.use_split_accumulator, "Split accumulator required for fprop."
        assert self.fp8_gemm_dgrad.use_split_accumulator, "Split accumulator required for dgrad."
        assert self.fp8_gemm_wgrad.use_split_accumulator, "Split accumulator required for wgrad."
        assert not self.fp8_dpa and not self.fp8_mha, "FP8 attention is not supported for Float8BlockScaling."
        _check_common(self)
        dims = (self.x_block_scaling_dim, self.w_block_scaling_dim, self.grad_block_scaling_dim)
        if dims != (1, 2, 1):
            raise NotImplementedError(f"Float8BlockScaling with (x, w, grad) block dims {dims}: fp8emu runs TE's "
                                      f"default (1, 2, 1): 1 x 128 activations and gradients, 128 x 128 weights")

    @property
    def fp8_quant_fwd_inp(self) -> QParams:
        return QParams(power_2_scale=not self.use_f32_scales, amax_epsilon=self.amax_epsilon)

    fp8_quant_fwd_weight = fp8_quant_fwd_inp
    fp8_quant_bwd_grad = fp8_quant_fwd_inp


@dataclass
class NVFP4BlockScaling(Recipe):
    """TE ``NVFP4BlockScaling`` (TE 2.x, Blackwell): E2M1 elements in 1 x 16 blocks along K, each
    with an E4M3 scale under an fp32 tensor scale ``S_enc = 2688 / amax`` (docs/nvfp4.md has TE's
    arithmetic and sources). Per tensor, as TE's QParams: inputs 1 x 16, their column-wise copy (the
    wgrad operand) after the random Hadamard transform; weights in 16 x 16 tiles; gradients 1 x 16
    with stochastic rounding (TE's Philox stream and element map, reproduced from the quantizer's
    seed and offset: :meth:`Quantizer.set_rng_state`), their column-wise copy after the transform.
    The switches turn each off (TE's fields; defaults from TE's env vars
    ``NVTE_NVFP4_DISABLE_RHT``, ``NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING``,
    ``NVTE_NVFP4_DISABLE_2D_QUANTIZATION``, read when fp8emu is imported). TE's row-scaled and 4over6
    variants are refused by name. The block GEMM's accumulation is a documented model choice (no
    public source measures Blackwell's)."""

    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    disable_rht: bool = os.getenv("NVTE_NVFP4_DISABLE_RHT", "0") == "1"
    disable_stochastic_rounding: bool = os.getenv("NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING", "0") == "1"
    disable_2d_quantization: bool = os.getenv("NVTE_NVFP4_DISABLE_2D_QUANTIZATION", "0") == "1"
    row_scaled_activation: bool = os.getenv("NVTE_NVFP4_ROW_SCALED_ACTIVATION", "0") == "1"
    nvfp4_4over6: str = os.getenv("NVTE_NVFP4_4OVER6", "none")
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = os.getenv("NVTE_BACKWARD_OVERRIDE", None)

    _kind = "nvfp4"

    def __post_init__(self) -> None:
        assert self.fp4_format == Format.E2M1, "Only E2M1 is supported for NVFP4 scaling"
        assert self.fp8_format == Format.E4M3, "Only E4M3 is supported for NVFP4 scaling"
        _check_common(self)
        if self.row_scaled_activation:
            raise NotImplementedError("NVFP4BlockScaling(row_scaled_activation=True): TE's row-scaled activations "
                                      "are not modelled by fp8emu")
        if self.nvfp4_4over6 != "none":
            raise NotImplementedError(f"NVFP4BlockScaling(nvfp4_4over6={self.nvfp4_4over6!r}): TE's 4over6 "
                                      f"variant is not modelled by fp8emu")

    @property
    def fp4_quant_fwd_inp(self) -> QParams:
        return QParams(random_hadamard_transform=not self.disable_rht)

    @property
    def fp4_quant_fwd_weight(self) -> QParams:
        return QParams(fp4_2d_quantization=not self.disable_2d_quantization)

    @property
    def fp4_quant_bwd_grad(self) -> QParams:
        return QParams(random_hadamard_transform=not self.disable_rht,
                       stochastic_rounding=not self.disable_stochastic_rounding)


class CustomRecipe(Recipe):
    """TE ``CustomRecipe`` (quantizer factories): not available; constructing it raises
    NotImplementedError."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("CustomRecipe (user quantizer factories) is not available in fp8emu: its "
                                  "quantizers are fp8emu's C++ recipes (DelayedScaling, Float8CurrentScaling, "
                                  "MXFP8BlockScaling, Float8BlockScaling, NVFP4BlockScaling)")


class QuantizedTensor:
    """One FP8 operand as the GEMM reads it (TE Float8Tensor, MXFP8Tensor, Float8BlockwiseQTensor),
    from an fp32 source of shape (rows, cols).

    Where it lives: the device of the tensor it was cast from (:attr:`device`). From a CPU array,
    its arrays are read-only NumPy views of the operand's host memory. From a CUDA array, they are
    CUDA arrays of the source's framework on its GPU (PyTorch in, PyTorch out with
    ``torch.float8_e4m3fn``/``torch.float8_e5m2`` codes; JAX likewise; CuPy uint8 codes), written by
    the GPU twins of the host casts, with the same bits; ``scale`` and ``scale_inv`` are host floats
    either way, and ``rowwise_e8m0``/``columnwise_e8m0`` are None on the GPU (each E8M0 code is the
    exponent field of the fp32 scale_inv, ``bits >> 23``).

    Attributes (None where absent):
        mode: "per_tensor" (delayed and current scaling) or "block" (MXFP8, 128-block).
        format: element format name ("e4m3fn", "e5m2").
        rowwise_data: codes of the row-wise copy, (rows, cols), ml_dtypes dtype (K = cols).
        columnwise_data: codes of the column-wise copy, (cols, rows): per-tensor modes the transpose of
            the row-wise codes (TE's cast-transpose); block modes quantized along columns (K = rows).
        scale, scale_inv: per-tensor modes: the cast's scale and RN(1/scale) (NaN for block modes).
        rowwise_scale_inv, columnwise_scale_inv: block modes: one fp32 per block, (n, ceil(K/block)).
        rowwise_e8m0, columnwise_e8m0: MXFP8: the E8M0 codes of those scales.
        amax_rowwise, amax_columnwise: NVFP4 (E4M3 block scales under an fp32 tensor scale): the
            tensor amax each copy's blocks sit under (TE's names), a float (a one-element CUDA array
            on the GPU); the copy's scale_inv then holds each block's E4M3 scale.
        block: block length along K (32 MXFP8, 128 block scaling; 0 per-tensor).
        stats: the cast's counts: count, saturated, underflow, nan.
    """

    def __init__(self, impl: Any, stats: Dict[str, int]):
        self._impl = impl
        self.stats = stats

    @property
    def is_cuda(self) -> bool:
        """True when the codes and scales are CUDA arrays (cast from a CUDA array)."""
        return isinstance(self._impl, _fp8emu.CudaQuantizedTensor)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``: where the codes and scales live."""
        return f"cuda:{self._impl.device}" if self.is_cuda else "cpu"

    def _codes(self, a):
        if a is None:
            return None
        if self.is_cuda:
            from . import _cuda

            return _cuda.codes_as(a, self.format, self._impl.framework)
        from . import dtype

        return a.view(dtype(self.format))

    mode = property(lambda self: self._impl.mode)
    format = property(lambda self: self._impl.format)
    rows = property(lambda self: self._impl.rows)
    cols = property(lambda self: self._impl.cols)
    usage = property(lambda self: self._impl.usage)
    scale = property(lambda self: self._impl.scale)
    scale_inv = property(lambda self: self._impl.scale_inv)
    block = property(lambda self: self._impl.block)
    rowwise_data = property(lambda self: self._codes(self._impl.rowwise_data))
    columnwise_data = property(lambda self: self._codes(self._impl.columnwise_data))
    rowwise_scale_inv = property(lambda self: self._impl.rowwise_scale_inv)
    columnwise_scale_inv = property(lambda self: self._impl.columnwise_scale_inv)
    rowwise_e8m0 = property(lambda self: self._impl.rowwise_e8m0)
    columnwise_e8m0 = property(lambda self: self._impl.columnwise_e8m0)
    amax_rowwise = property(lambda self: self._impl.amax_rowwise)
    amax_columnwise = property(lambda self: self._impl.amax_columnwise)

    def __repr__(self):
        return (f"QuantizedTensor(mode={self.mode!r}, format={self.format!r}, shape=({self.rows}, {self.cols}), "
                f"usage={self.usage!r}, device={self.device!r})")


def _field_value(recipe: Any, name: str) -> Any:
    # TE's Format enum by its name; TE's callables go to the C++ record, whose update calls them (a
    # scaling_factor_compute_algo with this recipe object, as TE passes its recipe).
    value = getattr(recipe, name)
    if isinstance(value, Format):
        return value.name.lower()
    if name == "scaling_factor_compute_algo" and value is not None and callable(value):
        return lambda amax, scale, fp8_max, _record: value(amax, scale, fp8_max, recipe)
    return value


def _record(recipe: Any) -> Any:
    """The C++ record of a recipe (include/fp8emu/scaling/recipe.hpp, bound by the extension): the
    record named by the recipe class, each of its fields (named as TE's) copied from the recipe, so
    a field's checks and messages are the C++ parsers'.

    Raises:
        TypeError: not one of fp8emu's recipe classes, or a field of the wrong type.
        ValueError: a field value the record does not take (an unknown format or rule name).
    """
    kind = getattr(recipe, "_kind", None)
    if kind is None:
        raise TypeError(f"recipe must be a DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, "
                        f"Float8BlockScaling or NVFP4BlockScaling (got {type(recipe).__name__})")
    record = _fp8emu.recipe_record(kind)
    for name in record.field_names():
        setattr(record, name, _field_value(recipe, name))
    return record


class Quantizer:
    """The casts of one recipe for one direction, with the recipe's state (TE ``RecipeState`` for
    ``forward`` or ``backward``, and its quantizers).

    Args:
        recipe: a DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling or
            NVFP4BlockScaling.
        direction: "forward" (input, weight, output: the recipe's forward format, E4M3; NVFP4:
            E2M1) or "backward" (grad_output, grad_input: the backward format, E5M2 under HYBRID;
            NVFP4: E2M1).
    Raises:
        ValueError: invalid recipe parameters (TE's checks: E5M2 format, history length, ...), an
            unknown direction.
    Not thread-safe (as TE's quantizers): casts release the GIL, so give each thread its own
    Quantizer. Deterministic: the same inputs give the same bits for any thread count.
    Copies (``copy.deepcopy``) and pickles hold the recipe, the direction and the delayed-scaling
    state (scales and amax history), so a copy casts with the same bits; pickling needs a picklable
    recipe (TE's callables as module-level functions, not lambdas).
    """

    def __init__(self, recipe: Any, direction: str = "forward"):
        kind = getattr(recipe, "_kind", None)
        if kind is None:
            raise TypeError(f"recipe must be a DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, "
                            f"Float8BlockScaling or NVFP4BlockScaling (got {type(recipe).__name__})")
        self.recipe = recipe
        self.direction = direction
        self._impl = _fp8emu.Quantizer(_record(recipe), direction)

    def __getstate__(self) -> dict:
        st = self._impl.state()
        return {"recipe": self.recipe, "direction": self.direction,
                "state": None if st is None else (st[0].copy(), st[1].copy()), "rng_state": self.rng_state}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["recipe"], state["direction"])
        if state["state"] is not None:
            self._impl.set_state(*state["state"])
        if state.get("rng_state") is not None:
            self.set_rng_state(*state["rng_state"])

    @property
    def rng_state(self) -> Optional[Tuple[int, int]]:
        """NVFP4BlockScaling: ``(seed, offset)`` of the next stochastic rounding, TE's ``rng_state``
        (the Philox seed and offset its kernels read); None for the other recipes."""
        return _fp8emu.quantizer_rng_state(self._impl)

    def set_rng_state(self, seed: int, offset: int) -> None:
        """NVFP4BlockScaling: the Philox seed and offset of the next stochastic rounding (TE's
        ``rng_state``, which TE draws from PyTorch's CUDA generator). Each cast of a gradient with
        stochastic rounding advances the offset by 1024, as PyTorch's generator advances per draw
        (2048 when its column-wise copy after the Hadamard transform draws a second state). The
        bits are those of TE's tuned 1D kernel (docs/nvfp4.md), so a GPU's output for the same
        ``rng_state`` can be compared byte for byte.

        Raises:
            ValueError: another recipe (it rounds to nearest).
        """
        _fp8emu.set_quantizer_rng_state(self._impl, int(seed), int(offset))

    @property
    def format(self) -> str:
        """The element format of this direction's casts."""
        return self._impl.format

    @property
    def supports_accumulation_models(self) -> bool:
        """Whether this recipe's GEMMs take the whole accumulation setting (a model, a promotion
        interval, split-K) and TE's per-GEMM choices: the per-tensor recipes, delayed and current
        scaling. Block recipes take a model for each scale block's partial only (default "fp32")."""
        return self._impl.supports_accumulation_models

    @property
    def reads_bf16_norm_output(self) -> bool:
        """Whether TE casts a LayerNorm output to FP8 from its bfloat16 copy (current scaling) rather
        than straight from fp32 (delayed scaling's fused norm + cast)."""
        return self._impl.reads_bf16_norm_output

    def quantize(self, x: Any, role: str = "input", usage: str = "rowwise", *, stream: Any = None) -> QuantizedTensor:
        """Cast an fp32 tensor.

        Args:
            x: float32, (rows, cols), C-contiguous (NumPy or a CPU DLPack array; read in place). A CUDA
                array (PyTorch CUDA tensor, CuPy, JAX GPU array) on fp8emu's GPU is cast there by
                the GPU twins of the same casts (``Quantizer::quantize_device``: same bits, the
                quantizer's state updated the same way), after ``stream`` (see :func:`fp8emu.cast`;
                default: the array's framework's current stream) has reached the call; the
                QuantizedTensor's codes and scale_inv are then new CUDA arrays on that GPU, complete
                when the call returns, ready for :func:`gemm` on the GPU.
            role: "input", "weight" or "output" (forward), "grad_output" or "grad_input" (backward).
                Delayed scaling casts with the role's stored scale and records x's amax in the
                role's history slot; block scaling casts "weight" in 128 x 128 tiles, the others in
                1 x 128 blocks; NVFP4 casts "weight" in 16 x 16 tiles, the others in 1 x 16 blocks,
                their column-wise copy after the Hadamard transform, "grad_output" with stochastic
                rounding (TE's QParams; the recipe's switches turn each off).
            usage: "rowwise" (fprop operands, dgrad's grad_output), "columnwise" (wgrad operands,
                dgrad's weight) or "both".
            stream: CUDA arrays only: an int cudaStream_t, a torch.cuda.Stream or a CuPy stream.
        Raises:
            TypeError: x not float32; on a device other than the CPU or CUDA; a CUDA array where
                this build has no CUDA or the machine no usable GPU (the message says why).
            ValueError (CUDA arrays): on another GPU than fp8emu's (the message names both).
            ValueError: not 2-D, empty, non-contiguous, a role of the other direction, unknown
                role/usage, ``stream`` with a CPU array.
        """
        from . import _cuda

        if _cuda.is_cuda(x):
            impl, stats = self._impl.quantize(x, role, usage, _cuda.stream_handle(x, stream), _cuda.framework_of(x))
        else:
            if stream is not None:
                raise ValueError("fp8emu.Quantizer.quantize: stream applies to CUDA arrays only")
            impl, stats = self._impl.quantize(x, role, usage)
        return QuantizedTensor(impl, stats)

    def update_scales(self) -> None:
        """TE's scale update after this direction's pass (delayed scaling; a no-op otherwise).

        The update is the C++ one (``DelayedScalingState::update``, the quantizer's). With TE's
        callables (DelayedScaling.amax_compute_algo as a function, or scaling_factor_compute_algo)
        it takes TE's Python path and calls them as TE does, once with every slot: amax =
        amax_compute_algo(history) on a float32 copy of the (amax_history_len, slots) history
        before the roll (or the named algorithm), the history rolled by one row
        (``torch.roll(h, -1, 0)``, row 0 zeroed), then the scales from
        scaling_factor_compute_algo(amax, scale, fp8_max, recipe) or TE's default
        (``_default_sf_compute``), stored as float32. A callable that raises leaves the state as it was.
        Raises:
            ValueError: a callable returned the wrong number of values.
        """
        self._impl.update_scales()

    def scale(self, role: str) -> Optional[float]:
        """Delayed scaling: the role's current scale (the next cast multiplies by it); None otherwise."""
        st = self._impl.state()
        return None if st is None else float(st[0][_fp8emu.slot_of(role)])

    def amax_history(self, role: str) -> Optional[np.ndarray]:
        """Delayed scaling: the role's amax history column, (amax_history_len,), as TE stores it:
        row 0 this step's amax (the staging row), rows 1.. the earlier steps; None otherwise."""
        st = self._impl.state()
        return None if st is None else st[1][:, _fp8emu.slot_of(role)].copy()


def gemm(a: QuantizedTensor, b: QuantizedTensor, *, a_usage: str = "rowwise", b_usage: str = "rowwise",
         accumulation: Optional[str] = None, promotion: int = 0) -> np.ndarray:
    """FP8 GEMM of two quantized operands, TN layout: ``D[M, N] = A[M, K] B[N, K]^T``, fp32 out (TE
    ``general_gemm``). A is ``a`` read as ``a_usage`` (rowwise: (rows, cols); columnwise: (cols, rows)),
    B likewise: fprop ``y = x W^T`` (x rowwise, W rowwise), dgrad ``dx = dy W`` (dy rowwise, W
    columnwise), wgrad ``dW = dy^T x`` (dy columnwise, x columnwise).

    Per-tensor operands: ``D = RN(acc * RN(a.scale_inv * b.scale_inv))`` with any accumulation model
    (see :func:`fp8emu.gemm`; default ``"hopper"``, as the layers); block operands: per-block scales,
    each scale block's partial summed under ``accumulation`` (default ``"fp32"``, as the layers) and
    promoted to the fp32 total (``promotion`` must be 0).

    Devices: two host operands give a float32 NumPy array, computed by the emulator; two GPU
    operands (quantized from CUDA arrays) give a new float32 CUDA array of a's framework on their
    GPU, computed there by the GPU twin (``scaling::gemm_tn`` on ``backend::cuda_device()``) with the
    same bits, complete when the call returns.

    Raises:
        TypeError: an operand that is not a QuantizedTensor; one host and one GPU operand.
        ValueError: operands of different modes, a missing copy, K mismatch, a block GEMM with a
            promotion interval, unknown names; GPU operands on different GPUs.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, QuantizedTensor):
            raise TypeError(f"fp8emu.recipe.gemm: {name} must be a QuantizedTensor (from Quantizer.quantize); "
                            f"got {type(t).__name__}")
    if a.is_cuda != b.is_cuda:
        raise TypeError(f"fp8emu.recipe.gemm: a is on {a.device} and b on {b.device}; both operands must be on "
                        f"the same device (quantize both from CPU arrays, or both from CUDA arrays)")
    if accumulation is None:
        accumulation = "hopper" if a.mode == b.mode == "per_tensor" else "fp32"
    return _fp8emu.gemm_tn(a._impl, a_usage, b._impl, b_usage, accumulation, int(promotion))
