"""Codes and casts as Python objects, for notebooks and teaching: :func:`table` and :func:`explain`.

    rows = fp8emu.table("e4m3fn")          # 256 CodeRow objects; print(fp8emu.table_text("e4m3fn"))
    e = fp8emu.explain(0.3, "e4m3fn")      # an Explanation; print(e) for the text
    e.code, e.value, e.next_down, e.next_up, e.rel_error

Values come from the library's exact decoder (:func:`fp8emu.decode`) and codes from its casts
(:func:`fp8emu.cast`), so they are those of the rest of the module; the fields are split from the
code by the format's widths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

__all__ = ["CodeRow", "table", "table_text", "Explanation", "explain"]


@dataclass(frozen=True)
class CodeRow:
    """One code of a format.

    Attributes:
        code: the code (0 .. 2^bits - 1). sign, exponent, mantissa: its fields (sign 0 for unsigned
        formats). kind: "zero", "subnormal", "normal", "inf" or "nan". value: its exact value
        (float; NaN for NaN codes). fields: "s | eeee | mmm" as a string.
    """

    code: int
    sign: int
    exponent: int
    mantissa: int
    kind: str
    value: float
    fields: str


def _split(code: int, info) -> Tuple[int, int, int, str]:
    m = code & ((1 << info.mantissa_bits) - 1)
    e = (code >> info.mantissa_bits) & ((1 << info.exponent_bits) - 1)
    s = (code >> (info.bits - 1)) & 1 if info.signed else 0
    parts = ([str(s)] if info.signed else []) + [format(e, f"0{info.exponent_bits}b")]
    if info.mantissa_bits:
        parts.append(format(m, f"0{info.mantissa_bits}b"))
    return s, e, m, " | ".join(parts)


def table(fmt) -> List[CodeRow]:
    """Every code of a code format, ascending by code: a list of :class:`CodeRow` (2^bits rows).

    Raises:
        ValueError: an unknown format, or binary16/bfloat16 (not code formats).
    """
    from . import decode, format_info

    info = format_info(fmt)
    if info.family == "wide":
        raise ValueError(f"{info.name} is not a code format")
    codes = np.arange(info.code_count, dtype=np.uint8)
    values = decode(codes, info.name).astype(np.float64)
    rows = []
    for c, v in zip(codes.tolist(), values.tolist()):
        s, e, m, text = _split(c, info)
        if math.isnan(v):
            kind = "nan"
        elif math.isinf(v):
            kind = "inf"
        elif v == 0:
            kind = "zero"
        elif info.subnormals and e == 0:
            kind = "subnormal"
        else:
            kind = "normal"
        rows.append(CodeRow(c, s, e, m, kind, v, text))
    return rows


def table_text(fmt) -> str:
    """:func:`table` as text, one line per code: code, fields, kind, value."""
    from . import format_info

    info = format_info(fmt)
    lines = [f"{info.name}: {info.exponent_bits} exponent bits, {info.mantissa_bits} mantissa bits, bias {info.bias}"]
    for r in table(fmt):
        lines.append(f"0x{r.code:02X}  {r.fields:<16} {r.kind:<9} {r.value!r}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Explanation:
    """What a cast of one value does.

    Attributes:
        x: the input (as the float32 or float64 the cast reads). format, policy, rounding: the cast.
        code: the code it gives; value: that code's exact value; fields, kind: as :class:`CodeRow`.
        next_down, next_up: the nearest finite values below / above x as (value, code), or None.
        abs_error, rel_error: |value - x| and that over |x| (None where undefined: NaN/Inf, x = 0).
        saturated: x was finite and beyond the largest finite value (or Inf) and the code is +-max.
        flushed: x was nonzero and the code is a zero.
    """

    x: float
    format: str
    policy: str
    rounding: str
    code: int
    value: float
    fields: str
    kind: str
    next_down: Optional[Tuple[float, int]]
    next_up: Optional[Tuple[float, int]]
    abs_error: Optional[float]
    rel_error: Optional[float]
    saturated: bool
    flushed: bool

    def __str__(self) -> str:
        def nb(t):
            return "none" if t is None else f"{t[0]!r} (0x{t[1]:02X})"

        lines = [f"{self.x!r} -> {self.format} ({self.policy}, {self.rounding}): code 0x{self.code:02X} = "
                 f"{self.fields} = {self.value!r} ({self.kind})",
                 f"  next down {nb(self.next_down)}, next up {nb(self.next_up)}"]
        if self.abs_error is not None:
            rel = "" if self.rel_error is None else f", relative {self.rel_error:.3g}"
            lines.append(f"  error {self.abs_error:.6g}{rel}")
        if self.saturated:
            lines.append("  saturated to the largest finite value")
        if self.flushed:
            lines.append("  flushed to zero")
        return "\n".join(lines)


def explain(x: float, fmt, *, policy: str = "cuda", rounding: Optional[str] = None, seed: Optional[int] = None,
            double: bool = False) -> Explanation:
    """Explain the cast of one value: its code, exact value, neighbours and error.

    Args:
        x: the value; read as float32 (``double=False``, default: CUDA's float entry) or float64.
        fmt: the target code format (name or ml_dtypes type). policy, rounding, seed: as :func:`fp8emu.cast`.
    Returns:
        an :class:`Explanation` (``str()`` gives the text).
    Raises:
        ValueError: as :func:`fp8emu.cast`.
    """
    from . import cast, format_info

    info = format_info(fmt)
    xv = np.array([x], np.float64 if double else np.float32)
    code = int(cast(xv, info.name, policy=policy, rounding=rounding, seed=seed).view(np.uint8)[0])
    rows = table(info.name)
    row = rows[code]
    xf = float(xv[0])
    finite = sorted({(r.value, r.code) for r in rows if r.kind in ("zero", "subnormal", "normal")
                     and not (r.value == 0 and r.sign)})
    down = up = None
    if not math.isnan(xf):
        below = [t for t in finite if t[0] < xf]
        above = [t for t in finite if t[0] > xf]
        down = below[-1] if below else None
        up = above[0] if above else None
    err = rel = None
    if math.isfinite(xf) and math.isfinite(row.value):
        err = abs(row.value - xf)
        rel = err / abs(xf) if xf != 0 else None
    saturated = (not math.isnan(xf)) and abs(xf) > info.max and abs(row.value) == info.max
    flushed = xf != 0 and not math.isnan(xf) and row.kind == "zero"
    return Explanation(xf, info.name, policy, rounding or "nearest-even", code, row.value, row.fields, row.kind,
                       down, up, err, rel, saturated, flushed)
