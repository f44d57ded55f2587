"""fp8emu: bit-exact FP8 numerics from Python.

The Python face of the fp8emu C++ library (``include/fp8emu``; docs/python.md): the format
registry, casts under the conversion policies of CUDA, ml_dtypes and PyTorch, exact decoding, and the
scaled FP8 GEMM on fp8emu's tensor-core accumulation models.

Arrays: NumPy arrays, and any array that exports DLPack on the CPU (JAX, PyTorch CPU tensors), are
read in place, without copies; results are NumPy arrays whose small-format elements carry ml_dtypes'
dtypes (``float8_e4m3fn``, ``float8_e5m2``, ``float8_e8m0fnu``, ``float6_e2m3fn``, ...), so
``result.astype(numpy.float32)`` gives their values. CPU arrays run on the library's emulator. In a
build with CUDA (:func:`cuda_available`), CUDA arrays given to :func:`cast`, :func:`decode` and
:func:`gemm` run on the GPU kernels, with the same bits, and come back as CUDA arrays (docs/python.md
§GPU arrays); other functions, and a build without CUDA, raise TypeError naming the device. The GIL is
released while the library's kernels run.

Errors: TypeError for an array of the wrong kind (dtype, device), ValueError for a wrong shape, a
non-contiguous array, an unknown name or an unsupported combination; each message names the
argument and what it takes.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional, Tuple, Union

import ml_dtypes
import numpy as np

from . import _cuda, _fp8emu
from ._fp8emu import __version__

__all__ = [
    "__version__",
    "FormatInfo",
    "formats",
    "format_info",
    "dtype",
    "policies",
    "roundings",
    "accumulations",
    "cast",
    "decode",
    "gemm",
    "mma",
    "compare",
    "CompareResult",
    "cuda_available",
    "Format",
    "DelayedScaling",
    "Float8CurrentScaling",
    "MXFP8BlockScaling",
    "Float8BlockScaling",
    "NVFP4BlockScaling",
    "Quantizer",
    "QuantizedTensor",
    "recipe",
]


class FormatInfo(NamedTuple):
    """One row of fp8emu's format registry (``include/fp8emu/format/format_spec.hpp``).

    Every number is derived from the format's field widths and Inf/NaN layout (checked there against
    the OCP OFP8 r1.0 and MX v1.0 tables). Values are Python floats (exact: every one is a double).
    """

    name: str  #: canonical name: "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu", ...
    aliases: Tuple[str, ...]  #: other accepted names ("e4m3", "fp4", ...)
    title: str  #: one line: "OCP FP8 E4M3"
    family: str  #: "fp8", "fp8_fnuz", "fp6", "fp4", "scale" or "wide"
    bits: int  #: total width (sign included)
    exponent_bits: int
    mantissa_bits: int  #: trailing significand bits (no implicit bit)
    bias: int
    signed: bool  #: False for E8M0 (no sign bit)
    has_inf: bool
    has_nan: bool
    fnuz: bool  #: no -0 and no Inf; the NaN is the code of -0
    subnormals: bool  #: False for E8M0 (code 0 is 2^-127)
    emin: int  #: exponent of the smallest normal
    emax: int  #: exponent of the largest finite value
    max: float  #: largest finite value
    min_normal: float
    min_subnormal: float
    max_code: int  #: code of the largest finite value
    nan_code: Optional[int]  #: canonical (positive) NaN code, None without NaN
    inf_code: Optional[int]  #: +Inf code, None without Inf
    dtype: Any  #: the NumPy dtype of its arrays: ml_dtypes' type, uint8 codes if ml_dtypes has none

    @property
    def code_count(self) -> int:
        """Number of codes (2**bits)."""
        return 1 << self.bits


def _ml_dtypes_type(name: str, bits: int, family: str):
    if family == "wide":
        return np.dtype(np.float16) if name == "binary16" else np.dtype(ml_dtypes.bfloat16)
    t = getattr(ml_dtypes, f"float{bits}_{name}", None)
    return np.dtype(t) if t is not None else np.dtype(np.uint8)


_FORMATS = tuple(
    FormatInfo(**d, dtype=_ml_dtypes_type(d["name"], d["bits"], d["family"])) for d in _fp8emu.formats()
)
_BY_NAME = {f.name: f for f in _FORMATS}
_DTYPE_PREFIX = re.compile(r"^(?:torch\.|jax\.numpy\.|jnp\.)?float\d+_")


def formats() -> Tuple[FormatInfo, ...]:
    """Every format of fp8emu's registry, in registry order (FP8, fnuz, E8M0, FP6, FP4, binary16,
    bfloat16)."""
    return _FORMATS


def _name_of(fmt: Any) -> str:
    """A format argument as a name: a string, or a dtype / scalar type such as
    ``ml_dtypes.float8_e4m3fn``, ``numpy.dtype('float8_e5m2')`` or ``torch.float8_e4m3fn``."""
    if isinstance(fmt, str):
        name = fmt
    elif isinstance(fmt, FormatInfo):
        return fmt.name
    else:
        try:
            name = np.dtype(fmt).name
        except TypeError:
            name = str(fmt)
    if name in ("float16", "torch.float16"):
        return "binary16"
    if name in ("bfloat16", "torch.bfloat16"):
        return "bfloat16"
    return _DTYPE_PREFIX.sub("", name)


def format_info(fmt: Any) -> FormatInfo:
    """The registry record of a format.

    Args:
        fmt: a name or alias ("e4m3fn", "e4m3", "e5m2", "e8m0", "fp4", ...), an ml_dtypes type
            (``ml_dtypes.float8_e4m3fn``), a NumPy dtype, or a FormatInfo.
    Raises:
        ValueError: unknown format (the message lists the accepted names).
    """
    return _BY_NAME[_fp8emu.canonical_format(_name_of(fmt))]


def dtype(fmt: Any) -> np.dtype:
    """The NumPy dtype fp8emu returns for a format's codes: ml_dtypes' type (``float8_e4m3fn``,
    ``float4_e2m1fn``, ...), or uint8 when the installed ml_dtypes has none. ValueError if unknown."""
    return format_info(fmt).dtype


def policies() -> Tuple[Tuple[str, str], ...]:
    """The conversion policies of :func:`cast`: ``(name, what it reproduces)``, from the library's
    registry (``include/fp8emu/emulation/cast_policy.hpp``; docs/conversion-policies.md)."""
    return tuple(_fp8emu.policies())


def roundings() -> Tuple[str, ...]:
    """The rounding names of :func:`cast` for element formats ("nearest", "zero", "up", "down",
    "stochastic"); E8M0 takes "up" (default) or "zero"."""
    return tuple(_fp8emu.roundings())


def cuda_available() -> bool:
    """True when CUDA arrays run on the GPU here: this build has CUDA (``fp8emu._fp8emu.cuda``) and a GPU
    of compute capability >= 8.9 can run its kernels (``backend::cuda_status().usable()``, probed once).
    ``fp8emu._fp8emu.cuda_why_not()`` says why not otherwise."""
    return _cuda.available()


def accumulations() -> Tuple[Tuple[str, str, int], ...]:
    """The accumulation models of :func:`gemm`: ``(name, hardware, block)`` from the library's
    table (``include/fp8emu/core/accumulation.hpp``; docs/tensor-core-model.md)."""
    return tuple(_fp8emu.accumulations())


# ------------------------------------------------------------------------------------ arrays


def _is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def _code_format_of_dtype(dt: Any) -> Optional[str]:
    """The code format an array dtype stands for (ml_dtypes / PyTorch float8, float6, float4), or None."""
    name = _name_of(dt) if dt is not None else None
    if name in _BY_NAME and _BY_NAME[name].family != "wide":
        return name
    return None


def _as_codes(x: Any, what: str, fmt: Any) -> Tuple[Any, str]:
    """(an array of uint8 codes the extension reads in place, the format's canonical name)."""
    if not _is_numpy(x) and not hasattr(x, "__dlpack__"):
        x = np.asarray(x)
    dt = getattr(x, "dtype", None)
    inferred = _code_format_of_dtype(dt)
    if fmt is None:
        if inferred is None:
            raise TypeError(
                f"{what} has dtype {dt}, which names no format: pass an ml_dtypes float8/6/4 array, or "
                f"uint8 codes with format=..."
            )
        name = inferred
    else:
        name = format_info(fmt).name
        if inferred is not None and inferred != name:
            raise TypeError(f"{what} has dtype {dt} (format {inferred}), which contradicts format {name}")
    if _is_numpy(x) and x.dtype != np.uint8:
        if inferred is None:
            raise TypeError(f"{what} has dtype {x.dtype}; it must hold 8-bit codes (uint8 or an ml_dtypes "
                            f"float8/6/4 dtype)")
        x = x.view(np.uint8)
    elif type(x).__module__.startswith("torch") and inferred is not None:
        import torch  # only reached with a torch tensor

        x = x.view(torch.uint8)
    elif not _is_numpy(x) and inferred is not None and _cuda.is_cuda(x):
        x = x.view(np.uint8)  # JAX float8 arrays on a GPU: a uint8 bitcast there (no host copy)
    elif not _is_numpy(x) and inferred is not None:
        x = np.asarray(x).view(np.uint8)  # JAX float8 arrays: NumPy's view of the same buffer
    return x, name


def _as_source(x: Any) -> Tuple[Any, bool]:
    """(an array the extension reads in place, whether it holds bfloat16 bits as uint16)."""
    if not _is_numpy(x) and not hasattr(x, "__dlpack__"):
        x = np.asarray(x)  # lists, scalars, other array-likes
    if _is_numpy(x) and x.dtype == np.dtype(ml_dtypes.bfloat16):
        return x.view(np.uint16), True
    if not _is_numpy(x) and _name_of(getattr(x, "dtype", "")) == "bfloat16" and type(x).__module__.startswith("jax"):
        return np.asarray(x).view(np.uint16), True
    return x, False


def _shape(x: Any) -> Tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _writable_out(out: Any, what: str, shape: Tuple[int, ...], want: np.dtype, accept: Tuple[np.dtype, ...]):
    """The NumPy view of `out` the extension writes into (out itself is returned to the caller)."""
    if not _is_numpy(out):
        raise TypeError(f"{what} must be a NumPy array (got {type(out).__name__})")
    if out.dtype not in accept:
        raise TypeError(f"{what} has dtype {out.dtype}; expected {' or '.join(str(a) for a in accept)}")
    if _shape(out) != tuple(shape):
        raise ValueError(f"{what} has shape {_shape(out)}; expected {tuple(shape)}")
    if not out.flags.writeable:
        raise ValueError(f"{what} is read-only")
    return out.view(want)


def cast(
    x: Any,
    format: Any,
    *,
    scale: float = 1.0,
    policy: str = "cuda",
    rounding: Optional[str] = None,
    seed: Optional[int] = None,
    out: Optional[np.ndarray] = None,
    stream: Any = None,
) -> np.ndarray:
    """Convert an array to codes of a small format, bit-exactly as the named system converts.

    ``code[i] = convert(x[i] * scale)`` elementwise, for any shape (layout kept; C-contiguous input).

    Args:
        x: float32, float64, float16 or bfloat16 array (NumPy, ml_dtypes.bfloat16, or any CPU
            DLPack array: JAX, PyTorch). Lists and scalars go through ``numpy.asarray``.
        format: target format: "e4m3fn" ("e4m3"), "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu",
            "e2m3fn" ("fp6"), "e3m2fn", "e2m1fn" ("fp4"), or the ml_dtypes type.
        scale: fp32 multiplier applied before the conversion: float32/float16/bfloat16 inputs are
            widened exactly to float32 and multiplied once in float32 (round to nearest even, no FMA),
            float64 inputs once in float64; NaNs are not multiplied. 1.0 multiplies exactly.
        policy: whose conversion to reproduce (see :func:`policies`; docs/conversion-policies.md):
            "cuda" (default): ``__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)`` for float32 inputs
            (float16/bfloat16 widen to float32 first, as CUDA's half/bf16 entries) and
            ``__nv_cvt_double_to_fp8`` for float64 (one rounding, NaN sign and payload kept); finite
            overflow and +-Inf saturate to +-max, NaN gives the canonical positive NaN code; FP6/FP4
            (no Inf/NaN): ``__nv_cvt_*_to_fp6/fp4``, NaN gives +max; E8M0: ``__nv_cvt_float_to_e8m0``.
            "cuda-nosat": ``__NV_NOSAT`` (overflow to Inf, or NaN where the format has no Inf).
            "ml_dtypes": ml_dtypes' ``astype`` (non-saturating; NaN keeps its sign; float64 arrays
            rounded once, as ml_dtypes 0.7; ml_dtypes 0.6 rounded them to float32 first).
            "ml_dtypes-saturate": ml_dtypes' C++ ``ConvertFrom<kSaturate=true>`` (finite overflow
            to +-max, Inf kept). "pytorch" / "pytorch-2.13": PyTorch's c10 float8 constructors
            (e4m3fn and e5m2 only; float64 inputs rounded to float32 first, as PyTorch).
        rounding: "nearest" (default: ties to even), "zero", "up" (toward +Inf), "down" (toward
            -Inf) or "stochastic" (needs ``seed``); E8M0: "up" (default, CUDA's cudaRoundPosInf)
            or "zero". Replaces the policy's rounding; overflow and NaN rules stay the policy's.
        seed: stochastic rounding only: one 32-bit word per element, in C order, from
            ``std::mt19937(seed)`` (the same codes as ``fp8emu convert --rounding stochastic --seed``).
        out: optional NumPy array of x's shape to write into (uint8 or the format's ml_dtypes dtype);
            it is returned, written in place (no copy). For a CUDA x: a CUDA array on x's device.
        stream: CUDA x only: the stream to run on (an int cudaStream_t, a ``torch.cuda.Stream`` or a
            CuPy stream); default: PyTorch's / CuPy's current stream, else the legacy default stream.
            The call waits for it before returning.
    Returns:
        The codes, shape of x: an array of ``dtype(format)`` (ml_dtypes' type; FP6/FP4 codes in
        the low bits of each byte, as ml_dtypes stores them), or ``out``. For a CUDA x: a new CUDA
        array of x's framework (PyTorch: ``torch.float8_e4m3fn`` / ``float8_e5m2``; JAX: its float8
        type; CuPy and others: uint8 codes).
    GPU: a CUDA x (PyTorch, CuPy, JAX, any DLPack producer) runs on the GPU kernel that is the twin of
        ``emu::quantize``, with the same codes as the CPU, when x is float32, the format e4m3fn or
        e5m2, the policy "cuda" (or another whose float32 cast is CUDA's satfinite one) and the
        rounding nearest; anything else raises (docs/python.md §GPU arrays).
    Raises:
        TypeError: x of another dtype or not on the CPU (CUDA arrays: not float32, no usable GPU, or a
            build without CUDA); out of a wrong dtype.
        ValueError: unknown format/policy/rounding, a policy that does not model the format
            (PyTorch: e4m3fn/e5m2 only; E8M0: cuda/cuda-nosat), stochastic rounding without a seed
            (or a seed without it), non-contiguous x, out of another shape.
    Mirrors: include/fp8emu/emulation/cast_policy.hpp (emu::cast_array), whose CUDA satfinite cast
    to e4m3fn/e5m2 runs on the SIMD kernels of bulk_convert.hpp and all others on core/encode.hpp.
    """
    info = format_info(format)
    if info.family == "wide":
        raise ValueError(f"{info.name} is not a code format: convert to it with numpy's astype")
    stochastic = rounding == "stochastic"
    if stochastic and seed is None:
        raise ValueError("rounding='stochastic' needs seed=N (results are reproducible for a given seed)")
    if seed is not None and not stochastic:
        raise ValueError("seed applies to rounding='stochastic' only")
    if seed is not None and not (isinstance(seed, (int, np.integer)) and 0 <= int(seed) <= 0xFFFFFFFF):
        raise ValueError(f"seed must be an integer in 0..4294967295 (got {seed!r})")
    if _cuda.is_cuda(x):
        return _cuda.cast(x, info.name, scale, policy, rounding, seed, out, stream)
    if stream is not None:
        raise ValueError("stream applies to CUDA arrays only")
    src, bf16_bits = _as_source(x)
    shape = _shape(src)
    codes_dtype = info.dtype
    if out is None:
        result = np.empty(shape, np.uint8)
        target = result
    else:
        accept = (np.dtype(np.uint8),) + ((codes_dtype,) if codes_dtype != np.uint8 else ())
        target = _writable_out(out, "out", shape, np.dtype(np.uint8), accept)
        result = out
    _fp8emu.cast(src, info.name, float(scale), policy, rounding or "", int(seed or 0), bf16_bits, target)
    if out is not None:
        return out
    return result.view(codes_dtype)


def decode(
    codes: Any,
    format: Any = None,
    *,
    scale_inv: float = 1.0,
    out: Optional[np.ndarray] = None,
    stream: Any = None,
) -> np.ndarray:
    """The exact values of codes, as float32 (every value of every code format is a float32).

    ``y[i] = value(codes[i]) * scale_inv`` (one fp32 multiply, round to nearest even; exact for 1.0),
    any shape, layout kept. NaN codes give float32 NaN (CUDA's canonical 0x7FFFFFFF, sign dropped);
    Inf codes +-Inf; the fnuz NaN (0x80) NaN; E8M0 code 0 is 2^-127 and 0xFF NaN. FP6/FP4: the bits
    above the format's width are ignored, as CUDA's decoders.

    Args:
        codes: an ml_dtypes float8/float6/float4 array (format inferred), or uint8 codes (any CPU
            DLPack array) with ``format``.
        format: the codes' format (a name or ml_dtypes type); must agree with an ml_dtypes dtype.
        scale_inv: dequantization multiplier (TE's scale_inv), fp32.
        out: optional float32 NumPy array of the same shape, written in place and returned (a CUDA
            array on the codes' device for CUDA codes).
        stream: CUDA codes only: as in :func:`cast`.
    Returns:
        float32 array of codes' shape, or ``out``; a new CUDA array of the codes' framework for CUDA
        codes.
    GPU: CUDA codes of e4m3fn or e5m2 run on the twin of ``emu::dequantize`` (same bits); other
        formats raise ValueError.
    Raises:
        TypeError: codes of another dtype, no format for uint8 codes, a format that contradicts the
            dtype, not on the CPU; out not float32.
        ValueError: unknown format, binary16/bfloat16 (not code formats), non-contiguous codes, out
            of another shape.
    Mirrors: core::decode_code_to_f32_bits / core::e8m0_to_f32_bits (emu::decode_array).
    """
    arr, name = _as_codes(codes, "codes", format)
    if _BY_NAME[name].family == "wide":
        raise ValueError(f"{name} is not a code format")
    if _cuda.is_cuda(arr):
        return _cuda.decode(arr, name, scale_inv, out, stream)
    if stream is not None:
        raise ValueError("stream applies to CUDA arrays only")
    shape = _shape(arr)
    if out is None:
        out = np.empty(shape, np.float32)
        target = out
    else:
        target = _writable_out(out, "out", shape, np.dtype(np.float32), (np.dtype(np.float32),))
    _fp8emu.decode(arr, name, float(scale_inv), target)
    return out


_GEMM_OUT = {
    "float32": ("float32", np.dtype(np.float32), np.dtype(np.float32)),
    "bfloat16": ("bfloat16", np.dtype(np.uint16), np.dtype(ml_dtypes.bfloat16)),
    "binary16": ("float16", np.dtype(np.uint16), np.dtype(np.float16)),
}


def gemm(
    a: Any,
    b: Any,
    *,
    format_a: Any = None,
    format_b: Any = None,
    scale_inv_a: float = 1.0,
    scale_inv_b: float = 1.0,
    accumulation: str = "hopper",
    promotion: int = 0,
    split_k: int = 1,
    layout: str = "tn",
    out_dtype: Any = "float32",
    d_scale: float = 1.0,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: Any = None,
    bias: Any = None,
    out: Optional[np.ndarray] = None,
    return_amax: bool = False,
    stream: Any = None,
):
    """Scaled FP8 GEMM on fp8emu's accumulation models (cuBLASLt's FP8 matmul with per-tensor scales).

    ``D = A B^T`` (layout "tn", Hopper's FP8 layout: a is (M, K), b is (N, K), both K-contiguous) or
    ``D = A B`` (layout "nn": b is (K, N)); D is (M, N), row-major. Each element::

        t = RN(acc(A[i,:], B[j,:]) * RN(scale_inv_a * scale_inv_b))
        if alpha != 1: t = RN(alpha * t);  if beta != 0: t = RN(t + RN(beta * c[i,j]));  if bias: t = RN(t + bias[j])
        D[i,j] = t (float32), RNE to bfloat16/float16, or the FP8 code of RN(t * d_scale) (__NV_SATFINITE)

    where acc is the accumulation model: "exact" (exact sum, one rounding), "fp32" (sequential fp32
    sum in increasing k), "hopper" (wgmma k32 tensor-core block FMA: blocks of 32 products aligned
    to 13 fraction bits below the largest exponent by truncation, the sum cut to 14 significant bits), "ada" (mma.sync m16n8k32: blocks of 16);
    see :func:`accumulations` and docs/tensor-core-model.md. NaN/Inf operands follow the models.

    Args:
        a, b: FP8 codes, 2-D, C-contiguous: ml_dtypes float8_e4m3fn / float8_e5m2 arrays (format
            inferred) or uint8 codes with format_a / format_b. E5M2 x E5M2 is rejected (as cuBLASLt).
        format_a, format_b: "e4m3fn" or "e5m2" (needed for uint8 codes).
        scale_inv_a, scale_inv_b: fp32 dequantization scales (TE's scale_inv of each operand).
        accumulation: "exact", "fp32", "hopper" (default) or "ada".
        promotion: 0 (default): fast accumulation, the whole K in the tensor-core chain (TE's fprop);
            N > 0: TE's split accumulator, each run of N K-elements added to an fp32 accumulator with
            one RN add (TE's dgrad/wgrad use 128); a multiple of the model's block; not with "exact".
        split_k: cuBLASLt's split-K count S (default 1: no split): K is cut into ranges of
            roundup(ceil(K/S), 128) elements, each accumulated by the model from zero, and the
            partials are added in fp32 (round to nearest) in range order before the scales, as
            measured on an H200 (docs/tensor-core-model.md §Split-K); not with "exact".
        layout: "tn" (default) or "nn".
        out_dtype: "float32" (default), "bfloat16", "float16", "e4m3fn" or "e5m2" (or the NumPy /
            ml_dtypes type).
        d_scale: FP8 outputs: the output's scale.
        alpha, beta, c, bias: the epilogue above; c is (M, N) float32 (read only when beta != 0;
            it may be ``out`` itself, an in-place accumulate: c is read as it was before the call),
            bias (N,) float32.
        out: optional NumPy array (M, N) of out_dtype's dtype (or its uint8/uint16 storage),
            written in place and returned.
        return_amax: also return the amax of D before d_scale (NaN ignored), as cuBLASLt's
            AMAX_D pointer.
        stream: CUDA operands only: as in :func:`cast`.
    Returns:
        D, shape (M, N): float32, ml_dtypes.bfloat16, float16 or the FP8 ml_dtypes type; with
        return_amax, ``(D, amax)``. CUDA operands: D is a new CUDA array of their framework (PyTorch:
        float32, bfloat16, float16 or float8 tensors; JAX likewise; CuPy: uint8 codes for FP8 and
        the uint16 bits of bfloat16, which CuPy before v14 cannot import).
    GPU: CUDA operands (both on one device) run on the twin of ``emu::gemm_fp8_tn`` with its
        epilogue (one thread per element of D, every accumulation model, promotion and split-K, then
        core::gemm_epilogue_element and the output conversion; same bits), layouts "tn" and "nn";
        c and bias must then be float32 CUDA arrays on the same device.
    Raises:
        TypeError: operands that are not FP8 codes (e.g. float32: quantize them first with
            :func:`cast`), not on the CPU; c/bias not float32; out of a wrong dtype.
        ValueError: not 2-D, shape mismatch, non-contiguous, unknown names, E5M2 x E5M2, a
            promotion interval the model does not take, split_k < 1, beta != 0 without c.
    fp16, bf16 and tf32 tensor cores: with ``accumulation`` one of their rows ("hopper-bf16",
    "ampere-fp16", "ada-tf32", ...) and a, b float16, bfloat16 or float32 arrays of that format's
    values, ``D = A B^T + C`` (``c`` is the accumulator C; "nn": ``D = A B + C``) as :func:`mma`
    computes it, in float32; the FP8 arguments (scales, promotion, split_k, out_dtype, d_scale,
    alpha, beta, bias, return_amax, stream) are refused there.

    Mirrors: emu::gemm_fp8_tn with emu::GemmEpilogue (include/fp8emu/emulation/gemm_models.hpp),
    as ``fp8emu gemm`` runs it (emu::mma_tn_values for the value operands).
    """
    if str(accumulation).endswith(("-fp16", "-bf16", "-tf32")) and _value_dtype(a) is not None \
            and _value_dtype(b) is not None:
        if (scale_inv_a, scale_inv_b, promotion, split_k, d_scale, alpha, beta) != (1.0, 1.0, 0, 1, 1.0, 1.0, 0.0) \
                or bias is not None or return_amax or stream is not None or _name_of(out_dtype) != "float32":
            raise ValueError(f"accumulation {accumulation!r} computes D = A B^T + C on value operands in float32: "
                             "scale_inv_a/b, promotion, split_k, out_dtype, d_scale, alpha, beta, bias, return_amax "
                             "and stream apply to FP8 operands only")
        if layout not in ("tn", "nn"):
            raise ValueError(f"unknown layout {layout!r} (accepted: tn, nn)")
        bt = b if layout == "tn" else np.ascontiguousarray(np.asarray(b).T)
        return mma(a, bt, c, accumulation=accumulation, out=out)
    qa, fa = _as_codes(a, "a", format_a)
    qb, fb = _as_codes(b, "b", format_b)
    od = _name_of(out_dtype)
    if od in _GEMM_OUT:
        kind, storage, shown = _GEMM_OUT[od]
    else:
        try:
            info = format_info(od)
        except ValueError:
            info = None
        if info is None or info.family != "fp8":
            raise ValueError(f"unknown out_dtype {out_dtype!r} (accepted: float32, bfloat16, float16, e4m3fn, e5m2)")
        kind, storage, shown = info.name, np.dtype(np.uint8), info.dtype
    if _cuda.is_cuda(qa) or _cuda.is_cuda(qb):
        return _cuda.gemm(qa, qb, fa, fb, scale_inv_a=scale_inv_a, scale_inv_b=scale_inv_b,
                          accumulation=accumulation, promotion=promotion, split_k=split_k, layout=layout,
                          out_kind=kind, d_scale=d_scale, alpha=alpha, beta=beta, c=c, bias=bias, out=out,
                          return_amax=return_amax, stream=stream)
    if stream is not None:
        raise ValueError("stream applies to CUDA arrays only")
    ndim_a, ndim_b = len(getattr(qa, "shape", ())), len(getattr(qb, "shape", ()))
    if ndim_a != 2 or ndim_b != 2:
        bad = "a" if ndim_a != 2 else "b"
        raise ValueError(f"{bad} has {ndim_a if bad == 'a' else ndim_b} dimensions; gemm takes 2-D operands")
    M = int(qa.shape[0])
    N = int(qb.shape[0] if layout == "tn" else qb.shape[1])
    c_arr = None if c is None else (c if (_is_numpy(c) or hasattr(c, "__dlpack__")) else np.asarray(c, np.float32))
    bias_arr = None if bias is None else (
        bias if (_is_numpy(bias) or hasattr(bias, "__dlpack__")) else np.asarray(bias, np.float32))
    if out is None:
        target = np.empty((M, N), storage)
        result = target.view(shown)
    else:
        accept = tuple(dict.fromkeys((storage, shown)))
        target = _writable_out(out, "out", (M, N), storage, accept)
        result = out
    amax = _fp8emu.gemm(qa, qb, fa, fb, float(scale_inv_a), float(scale_inv_b), accumulation, int(promotion),
                        int(split_k), layout, kind, float(d_scale), float(alpha), float(beta), c_arr, bias_arr, target)
    return (result, amax) if return_amax else result


def mma(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    format_a: Any = None,
    format_b: Any = None,
    accumulation: str = "hopper-mma-sync",
    out: Optional[np.ndarray] = None,
) -> np.ndarray:
    """Tensor-core MMA: ``D = A B^T + C`` as chained MMA instructions compute it, bit for bit.

    For each ``D[i, j]``: the K products of ``a[i, :]`` and ``b[j, :]`` in blocks of the model's
    block size (:func:`accumulations`: 32 for "hopper" wgmma and "hopper-mma-sync", 16 for "ada",
    16 for "hopper-bf16", 8 for "ampere-fp16", ...), in increasing K, each block one instruction
    whose C is the previous block's D; the first C is ``c[i, j]``, which joins the first step's
    alignment or is added last with one round-to-nearest fp32 add ("hopper-mma-sync" and
    "blackwell": FP8 ``mma.sync`` on the fp16 tensor core). One PTX
    ``mma.sync.aligned.m16n8k32.row.col.f32.<a>.<b>.f32`` is M = 16, N = 8, K = 32 (its B, K x 8
    column-major, is ``b`` here as 8 x K row-major). No scales, promotion or split-K (see
    :func:`gemm`). Checked against every tile recorded on an H200 (tests/data/h200/mma-sync) and
    every row of the published V100 to B200 recordings (tests/data/tensor-core-mma).

    Args:
        a: shape (M, K), C-contiguous: FP8 codes (ml_dtypes float8_e4m3fn / float8_e5m2, format
            inferred, or uint8 with format_a), or values of the model's input format for the fp16,
            bf16 and tf32 models: float16, ml_dtypes bfloat16 or float32 arrays (float32 elements
            must be exactly values of the format: round them first, e.g. ``x.astype(bfloat16)``).
        b: shape (N, K) (K-contiguous), likewise, of the same kind as a. All four FP8 operand pairs
            are accepted (``mma.sync`` takes E5M2 x E5M2, cuBLASLt's GEMM does not).
        c: float32 (M, N), or None for +0. Signed zeros, NaN payloads, Inf and subnormals are kept.
        format_a, format_b: "e4m3fn" or "e5m2" (needed for uint8 codes).
        accumulation: a tensor-core model of :func:`accumulations`: "hopper-mma-sync" (default),
            "hopper", "ada", "blackwell" for FP8 codes (or any tensor-core row: FP8 codes enter it
            widened to its format); "volta-fp16", "ampere-fp16", "ampere-bf16", "ampere-tf32",
            "ada-*", "hopper-*", "blackwell-*" (fp16, bf16, tf32) for values.
        out: optional float32 (M, N) array written in place and returned.
    Returns:
        D, float32 (M, N). NaN results are 0x7FFFFFFF where the GPU writes that (C added last).
    Raises:
        TypeError: operands that are not FP8 codes (unless both are float16/bfloat16/float32 values),
            c or out not float32, arrays not on the CPU.
        ValueError: not 2-D, shape mismatch, non-contiguous, unknown names, a model that is not a
            tensor-core model ("exact", "fp32"), values with an FP8 model, a value that is not of the
            model's format (naming the operand and index).
    Mirrors: emu::mma_tn and emu::mma_tn_values (include/fp8emu/emulation/mma.hpp), core::mma_dot
    per element, as ``fp8emu mma-check`` runs it. Deterministic.
    """
    if _value_dtype(a) is not None and _value_dtype(b) is not None:
        qa = np.ascontiguousarray(np.asarray(a).astype(np.float32))
        qb = np.ascontiguousarray(np.asarray(b).astype(np.float32))
        fa = fb = ""
    else:
        qa, fa = _as_codes(a, "a", format_a)
        qb, fb = _as_codes(b, "b", format_b)
    M = int(qa.shape[0]) if len(getattr(qa, "shape", ())) == 2 else 0
    N = int(qb.shape[0]) if len(getattr(qb, "shape", ())) == 2 else 0
    c_arr = None if c is None else (c if (_is_numpy(c) or hasattr(c, "__dlpack__")) else np.asarray(c, np.float32))
    target = np.empty((M, N), np.float32) if out is None else _writable_out(
        out, "out", (M, N), np.dtype(np.float32), (np.dtype(np.float32),))
    _fp8emu.mma(qa, qb, fa, fb, accumulation, c_arr, target)
    return target if out is None else out


def _value_dtype(x: Any) -> Optional[np.dtype]:
    """The dtype of a NumPy array of float16, bfloat16 or float32 values (None otherwise)."""
    if not _is_numpy(x):
        return None
    return x.dtype if x.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)) else None


class CompareResult(NamedTuple):
    """What :func:`compare` found (the fields of ``fp8emu compare``)."""

    elements: int
    mismatches: int       #: elements whose 32 bits differ (two NaNs of different payload or sign count)
    nan_in_one: int       #: of those, NaN in one array only
    nan_payload: int      #: of those, NaN in both with different bits
    max_ulp: int          #: largest ULP distance over the other mismatches (+0 vs -0: 0)
    max_abs_error: float  #: max |x - y| over those (in float64)
    max_rel_error: float  #: max |x - y| / |y| over those with y != 0

    @property
    def identical(self) -> bool:
        """True when every element has the same bits."""
        return self.mismatches == 0


def compare(x: Any, y: Any) -> CompareResult:
    """Compare two float32 arrays bit for bit: mismatch counts, ULP distance and errors.

    For checking a kernel's output against fp8emu (e.g. a GPU GEMM's D against :func:`gemm`):
    ``fp8emu.compare(d_gpu, d_emulated).identical``.

    Args:
        x, y: float32 arrays of one shape, C-contiguous, on the CPU (NumPy, or any DLPack array).
    Returns:
        :class:`CompareResult`; ``y`` is the reference of the relative error.
    Raises:
        TypeError: not float32, or not on the CPU. ValueError: shapes differ, not contiguous.
    Mirrors: emu::compare_f32 (include/fp8emu/emulation/mma.hpp), as ``fp8emu compare X Y``.
    """
    xa = x if (_is_numpy(x) or hasattr(x, "__dlpack__")) else np.asarray(x)
    ya = y if (_is_numpy(y) or hasattr(y, "__dlpack__")) else np.asarray(y)
    return CompareResult(**_fp8emu.compare(xa, ya))


from . import recipe  # noqa: E402  (TE's recipe classes; they use the functions above)
from .recipe import (  # noqa: E402
    DelayedScaling,
    Float8BlockScaling,
    Float8CurrentScaling,
    Format,
    MXFP8BlockScaling,
    NVFP4BlockScaling,
    QuantizedTensor,
    Quantizer,
)
from . import layers  # noqa: E402  (the FP8 Linear / LayerNormLinear as functions)
from . import nv  # noqa: E402  (cuda_fp8.h's conversions, vectorised)
from .explain import CodeRow, Explanation, explain, table, table_text  # noqa: E402


def __getattr__(name: str):
    """TE's package layout for ``import fp8emu as te`` in place of ``import transformer_engine as
    te``: ``te.pytorch`` is :mod:`fp8emu.torch` (imported on first use; it needs PyTorch) and
    ``te.common.recipe`` is :mod:`fp8emu.recipe`."""
    if name in ("pytorch", "common"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'fp8emu' has no attribute {name!r}")
