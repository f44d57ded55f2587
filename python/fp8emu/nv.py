"""CUDA's ``cuda_fp8.h`` / ``cuda_fp6.h`` / ``cuda_fp4.h`` host conversions, vectorised over NumPy arrays.

Every function is CUDA's ``__nv_cvt_*`` without the ``__nv_`` prefix, with CUDA's argument order and
enum values, applied elementwise; each element is exactly what CUDA's host code returns for it (the
C++ mirror ``fp8emu::nv`` of ``include/fp8emu/nv.hpp``, pinned against CUDA's own header by the C++
test suite when the CUDA toolkit is installed)::

    from fp8emu import nv
    nv.cvt_float_to_fp8(x, nv.__NV_SATFINITE, nv.__NV_E4M3)   # == __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)

Storage types are CUDA's raw ones: ``__nv_fp8_storage_t`` (and fp6/fp4) -> uint8,
``__nv_fp8x2_storage_t`` -> uint16 (``.x`` in the low byte), ``__half_raw`` / ``__nv_bfloat16_raw``
-> uint16 bits (``.view(numpy.float16)`` / ``.view(ml_dtypes.bfloat16)`` for values); ``float2`` and
the other x2 inputs are arrays whose last dimension is 2 (``[..., 0]`` is ``.x``). Inputs: any array
or scalar; float entries convert it to float32 as C does (round to nearest), double entries to
float64; halfraw/bfloat16raw entries take float16 / ml_dtypes.bfloat16 arrays or their uint16 bits.
A scalar argument gives a Python int, an array a NumPy array of its shape.

CUDA's quirks are kept (see nv.hpp): the float entry drops the sign of NaN; the double entry rounds
once from the exact double; FP6/FP4 saturate overflow and Inf and send NaN to +max; E8M0 converts
through bfloat16. Names starting with two underscores (``__NV_E4M3``) are plain module attributes;
inside a class body Python would mangle ``nv.__NV_E4M3``: use the aliases without them there
(``nv.NV_E4M3``, ``nv.NV_SATFINITE``, ...).

Errors: ``ValueError`` for an enum value CUDA does not define; none for any input value (every input
is valid, as in CUDA).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _fp8emu

# __nv_saturation_t
__NV_NOSAT = NV_NOSAT = 0
__NV_SATFINITE = NV_SATFINITE = 1
# __nv_fp8_interpretation_t
__NV_E4M3 = NV_E4M3 = 0
__NV_E5M2 = NV_E5M2 = 1
# __nv_fp6_interpretation_t, __nv_fp4_interpretation_t
__NV_E2M3 = NV_E2M3 = 0
__NV_E3M2 = NV_E3M2 = 1
__NV_E2M1 = NV_E2M1 = 0
# cudaRoundMode
cudaRoundNearest = 0
cudaRoundZero = 1
cudaRoundPosInf = 2
cudaRoundMinInf = 3

__all__ = [n for n in list(globals()) if n.startswith(("__NV_", "NV_", "cudaRound"))]


def _enum(v: Any, allowed: tuple, what: str) -> int:
    i = int(v)
    if i not in allowed:
        raise ValueError(f"{what} must be one of {allowed} (CUDA's enum values); got {v!r}")
    return i


def _run(name: str, x: Any, dtype: Any, a: int, b: int, out_dtype: Any, raw16: Any = None):
    scalar = np.ndim(x) == 0
    if raw16 is not None:
        arr = np.asarray(x)
        if arr.dtype == np.uint16:
            src = np.ascontiguousarray(arr)
        elif arr.dtype == raw16 or (raw16 == "bfloat16" and arr.dtype.name == "bfloat16"):
            src = np.ascontiguousarray(arr).view(np.uint16)
        else:
            raise TypeError(f"{name}: x has dtype {arr.dtype}; it takes {np.dtype(raw16) if raw16 != 'bfloat16' else 'ml_dtypes.bfloat16'} "
                            f"or uint16 raw bits")
    elif dtype == np.uint8:
        arr = np.asarray(x)
        if arr.dtype.itemsize == 1 and arr.dtype != np.bool_:
            src = np.ascontiguousarray(arr).view(np.uint8)
        elif arr.dtype.kind in "iu" and np.all((arr >= 0) & (arr <= 255)):
            src = np.ascontiguousarray(arr.astype(np.uint8))
        else:
            raise TypeError(f"{name}: x has dtype {arr.dtype}; it takes 8-bit codes (uint8, an ml_dtypes type, or "
                            f"integers 0..255)")
    else:
        src = np.ascontiguousarray(np.asarray(x, dtype=dtype))
    out = np.empty(src.shape, out_dtype)
    _fp8emu.nv_convert(name, src, int(a), int(b), out)
    return int(out.reshape(-1)[0]) if scalar else out


def _pairs(x: Any, dtype: Any, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=dtype) if dtype is not None else np.asarray(x)
    if a.ndim == 0 or a.shape[-1] != 2:
        raise ValueError(f"{what}: the last dimension must be 2 (.x, .y); got shape {a.shape}")
    return a


def _pack8(lo: np.ndarray, hi: np.ndarray):
    r = np.asarray(lo, np.uint16) | (np.asarray(hi, np.uint16) << np.uint16(8))
    return int(r) if r.ndim == 0 else r


# ------------------------------------------------------------------------------------------ FP8

def cvt_float_to_fp8(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_float_to_fp8``: float32 -> FP8 code (uint8), round to nearest even.

    saturate: ``__NV_SATFINITE`` (overflow and +-Inf to +-max: 0x7E/0xFE E4M3, 0x7B/0xFB E5M2) or
    ``__NV_NOSAT`` (E4M3: NaN 0x7F; E5M2: +-Inf 0x7C/0xFC). NaN -> 0x7F (sign dropped).
    fp8_interpretation: ``__NV_E4M3`` or ``__NV_E5M2``. Shape: x's.
    """
    return _run("float_to_fp8", x, np.float32, _enum(saturate, (0, 1), "saturate"),
                _enum(fp8_interpretation, (0, 1), "fp8_interpretation"), np.uint8)


def cvt_double_to_fp8(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_double_to_fp8``: float64 -> FP8 code, rounded once from the exact double; NaN keeps
    its sign (and, for E5M2, the top payload bit)."""
    return _run("double_to_fp8", x, np.float64, _enum(saturate, (0, 1), "saturate"),
                _enum(fp8_interpretation, (0, 1), "fp8_interpretation"), np.uint8)


def cvt_halfraw_to_fp8(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_halfraw_to_fp8``: float16 (or its uint16 bits) -> FP8 code (widened to float32 first,
    exactly, as CUDA)."""
    return _run("halfraw_to_fp8", x, None, _enum(saturate, (0, 1), "saturate"),
                _enum(fp8_interpretation, (0, 1), "fp8_interpretation"), np.uint8, raw16=np.float16)


def cvt_bfloat16raw_to_fp8(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_bfloat16raw_to_fp8``: ml_dtypes.bfloat16 (or uint16 bits) -> FP8 code."""
    return _run("bfloat16raw_to_fp8", x, None, _enum(saturate, (0, 1), "saturate"),
                _enum(fp8_interpretation, (0, 1), "fp8_interpretation"), np.uint8, raw16="bfloat16")


def cvt_fp8_to_halfraw(x: Any, fp8_interpretation: int):
    """``__nv_cvt_fp8_to_halfraw``: FP8 code (uint8 or an ml_dtypes float8 array) -> float16 bits
    (uint16; exact; NaN 0x7FFF)."""
    return _run("fp8_to_halfraw", x, np.uint8, _enum(fp8_interpretation, (0, 1), "fp8_interpretation"), 0,
                np.uint16)


def cvt_float2_to_fp8x2(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_float2_to_fp8x2``: x (..., 2) float32 -> uint16 (...,), ``.x`` in the low byte."""
    a = _pairs(x, np.float32, "cvt_float2_to_fp8x2")
    return _pack8(cvt_float_to_fp8(a[..., 0], saturate, fp8_interpretation),
                  cvt_float_to_fp8(a[..., 1], saturate, fp8_interpretation))


def cvt_double2_to_fp8x2(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_double2_to_fp8x2``: x (..., 2) float64 -> uint16 (...,)."""
    a = _pairs(x, np.float64, "cvt_double2_to_fp8x2")
    return _pack8(cvt_double_to_fp8(a[..., 0], saturate, fp8_interpretation),
                  cvt_double_to_fp8(a[..., 1], saturate, fp8_interpretation))


def cvt_halfraw2_to_fp8x2(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_halfraw2_to_fp8x2``: x (..., 2) float16 or uint16 bits -> uint16 (...,)."""
    a = _pairs(x, None, "cvt_halfraw2_to_fp8x2")
    return _pack8(cvt_halfraw_to_fp8(np.ascontiguousarray(a[..., 0]), saturate, fp8_interpretation),
                  cvt_halfraw_to_fp8(np.ascontiguousarray(a[..., 1]), saturate, fp8_interpretation))


def cvt_bfloat16raw2_to_fp8x2(x: Any, saturate: int, fp8_interpretation: int):
    """``__nv_cvt_bfloat16raw2_to_fp8x2``: x (..., 2) bfloat16 or uint16 bits -> uint16 (...,)."""
    a = _pairs(x, None, "cvt_bfloat16raw2_to_fp8x2")
    return _pack8(cvt_bfloat16raw_to_fp8(np.ascontiguousarray(a[..., 0]), saturate, fp8_interpretation),
                  cvt_bfloat16raw_to_fp8(np.ascontiguousarray(a[..., 1]), saturate, fp8_interpretation))


def cvt_fp8x2_to_halfraw2(x: Any, fp8_interpretation: int):
    """``__nv_cvt_fp8x2_to_halfraw2``: uint16 (...,) -> float16 bits (..., 2), ``[..., 0]`` from the low byte."""
    a = np.asarray(x, np.uint16)
    lo = cvt_fp8_to_halfraw(np.atleast_1d(a & 0xFF).astype(np.uint8), fp8_interpretation)
    hi = cvt_fp8_to_halfraw(np.atleast_1d(a >> 8).astype(np.uint8), fp8_interpretation)
    return np.stack([lo, hi], axis=-1).reshape(a.shape + (2,))


# ------------------------------------------------------------------------------------------ FP6, FP4, E8M0

_ROUND = (0, 1, 2, 3)


def cvt_float_to_fp6(x: Any, fp6_interpretation: int, rounding: int):
    """``__nv_cvt_float_to_fp6``: float32 -> FP6 code in the low 6 bits of a uint8. rounding:
    ``cudaRoundNearest`` or ``cudaRoundZero`` (others act as cudaRoundZero, as CUDA with NDEBUG);
    overflow and +-Inf -> +-max, NaN -> +max."""
    return _run("float_to_fp6", x, np.float32, _enum(fp6_interpretation, (0, 1), "fp6_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_double_to_fp6(x: Any, fp6_interpretation: int, rounding: int):
    """``__nv_cvt_double_to_fp6`` (see :func:`cvt_float_to_fp6`; one rounding from the double)."""
    return _run("double_to_fp6", x, np.float64, _enum(fp6_interpretation, (0, 1), "fp6_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_halfraw_to_fp6(x: Any, fp6_interpretation: int, rounding: int):
    """``__nv_cvt_halfraw_to_fp6``: float16 (or uint16 bits) -> FP6 code."""
    return _run("halfraw_to_fp6", x, None, _enum(fp6_interpretation, (0, 1), "fp6_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8, raw16=np.float16)


def cvt_bfloat16raw_to_fp6(x: Any, fp6_interpretation: int, rounding: int):
    """``__nv_cvt_bfloat16raw_to_fp6``: bfloat16 (or uint16 bits) -> FP6 code."""
    return _run("bfloat16raw_to_fp6", x, None, _enum(fp6_interpretation, (0, 1), "fp6_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8, raw16="bfloat16")


def cvt_fp6_to_halfraw(x: Any, fp6_interpretation: int):
    """``__nv_cvt_fp6_to_halfraw``: FP6 code -> float16 bits (exact; the top two bits ignored)."""
    return _run("fp6_to_halfraw", x, np.uint8, _enum(fp6_interpretation, (0, 1), "fp6_interpretation"), 0,
                np.uint16)


def cvt_float_to_fp4(x: Any, fp4_interpretation: int, rounding: int):
    """``__nv_cvt_float_to_fp4``: float32 -> E2M1 code in the low 4 bits (see :func:`cvt_float_to_fp6`)."""
    return _run("float_to_fp4", x, np.float32, _enum(fp4_interpretation, (0,), "fp4_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_double_to_fp4(x: Any, fp4_interpretation: int, rounding: int):
    """``__nv_cvt_double_to_fp4``."""
    return _run("double_to_fp4", x, np.float64, _enum(fp4_interpretation, (0,), "fp4_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_halfraw_to_fp4(x: Any, fp4_interpretation: int, rounding: int):
    """``__nv_cvt_halfraw_to_fp4``."""
    return _run("halfraw_to_fp4", x, None, _enum(fp4_interpretation, (0,), "fp4_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8, raw16=np.float16)


def cvt_bfloat16raw_to_fp4(x: Any, fp4_interpretation: int, rounding: int):
    """``__nv_cvt_bfloat16raw_to_fp4``."""
    return _run("bfloat16raw_to_fp4", x, None, _enum(fp4_interpretation, (0,), "fp4_interpretation"),
                _enum(rounding, _ROUND, "rounding"), np.uint8, raw16="bfloat16")


def cvt_fp4_to_halfraw(x: Any, fp4_interpretation: int):
    """``__nv_cvt_fp4_to_halfraw``: E2M1 code -> float16 bits (exact; the top four bits ignored)."""
    return _run("fp4_to_halfraw", x, np.uint8, _enum(fp4_interpretation, (0,), "fp4_interpretation"), 0, np.uint16)


def cvt_float_to_e8m0(x: Any, saturate: int, rounding: int):
    """``__nv_cvt_float_to_e8m0``: float32 -> E8M0 code (via bfloat16). rounding: ``cudaRoundZero`` or
    ``cudaRoundPosInf`` (others act as cudaRoundPosInf)."""
    return _run("float_to_e8m0", x, np.float32, _enum(saturate, (0, 1), "saturate"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_double_to_e8m0(x: Any, saturate: int, rounding: int):
    """``__nv_cvt_double_to_e8m0`` (rounds to odd to float first, then the float entry)."""
    return _run("double_to_e8m0", x, np.float64, _enum(saturate, (0, 1), "saturate"),
                _enum(rounding, _ROUND, "rounding"), np.uint8)


def cvt_bfloat16raw_to_e8m0(x: Any, saturate: int, rounding: int):
    """``__nv_cvt_bfloat16raw_to_e8m0``."""
    return _run("bfloat16raw_to_e8m0", x, None, _enum(saturate, (0, 1), "saturate"),
                _enum(rounding, _ROUND, "rounding"), np.uint8, raw16="bfloat16")


def cvt_e8m0_to_bf16raw(x: Any):
    """``__nv_cvt_e8m0_to_bf16raw``: E8M0 code -> bfloat16 bits (uint16; 0x00 is 2^-127 as a bfloat16
    subnormal, 0xFF NaN)."""
    return _run("e8m0_to_bf16raw", x, np.uint8, 0, 0, np.uint16)


__all__ += [n for n in list(globals()) if n.startswith("cvt_")]
