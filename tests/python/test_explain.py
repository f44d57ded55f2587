"""fp8emu.table / fp8emu.explain (Python objects for notebooks) against ml_dtypes and the OCP spec."""

import math

import numpy as np
import pytest

import fp8emu

from conftest import ML_FORMATS, finite_values, ml_type


@pytest.mark.parametrize("name", ML_FORMATS)
def test_table_values_are_ml_dtypes(name):
    rows = fp8emu.table(name)
    info = fp8emu.format_info(name)
    assert [r.code for r in rows] == list(range(info.code_count))
    want = np.arange(info.code_count, dtype=np.uint8).view(ml_type(name)).astype(np.float64)
    got = np.array([r.value for r in rows])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
    for r in rows:  # fields rebuild the code
        width = info.exponent_bits + info.mantissa_bits
        assert (r.sign << width | r.exponent << info.mantissa_bits | r.mantissa) == r.code
    assert len(fp8emu.table_text(name).splitlines()) == info.code_count + 1


def test_kinds_from_the_spec():
    # OCP FP8: E4M3 has no Inf, NaN S.1111.111; E5M2 Inf S.11111.00, NaN S.11111.{01,10,11}; 2 x 7 / 2 x 3 subnormals
    k4 = [r.kind for r in fp8emu.table("e4m3fn")]
    assert [c for c, k in enumerate(k4) if k == "nan"] == [0x7F, 0xFF] and "inf" not in k4
    assert k4.count("subnormal") == 14 and [c for c, k in enumerate(k4) if k == "zero"] == [0x00, 0x80]
    k5 = [r.kind for r in fp8emu.table("e5m2")]
    assert [c for c, k in enumerate(k5) if k == "inf"] == [0x7C, 0xFC] and k5.count("nan") == 6
    assert k5.count("subnormal") == 6
    assert fp8emu.table("e4m3fn")[0x7E].fields == "0 | 1111 | 110"


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m3fn", "e2m1fn"])
def test_explain_against_ml_dtypes(name):
    vals = finite_values(name)
    rng = np.random.default_rng(4)
    xs = np.concatenate([rng.uniform(-vals[-1], vals[-1], 40), [0.3, -0.0, vals[1] / 3]]).astype(np.float32)
    for x in xs.tolist():
        e = fp8emu.explain(x, name, policy="ml_dtypes")
        assert e.code == int(np.float32(x).astype(ml_type(name)).view(np.uint8))
        assert e.value == float(np.float32(x).astype(ml_type(name)).astype(np.float64))
        below, above = vals[vals < x], vals[vals > x]
        assert (e.next_down is None) == (below.size == 0) and (e.next_up is None) == (above.size == 0)
        if below.size:
            assert e.next_down[0] == below[-1]
        if above.size:
            assert e.next_up[0] == above[0]
        assert e.abs_error == abs(e.value - x)
    s = fp8emu.explain(1000.0, "e4m3fn")
    assert s.saturated and s.value == 448.0 and s.code == 0x7E and "saturated" in str(s)
    f = fp8emu.explain(1e-9, "e5m2")
    assert f.flushed and f.kind == "zero" and f.rel_error == 1.0
    n = fp8emu.explain(math.nan, "e4m3fn")
    assert n.code == 0x7F and n.kind == "nan" and n.abs_error is None


def test_errors():
    with pytest.raises(ValueError):
        fp8emu.table("e9m9")
    with pytest.raises(ValueError):
        fp8emu.table("bfloat16")
    with pytest.raises(ValueError):
        fp8emu.explain(1.0, "e4m3fn", policy="nope")
