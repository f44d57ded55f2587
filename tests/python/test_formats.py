"""The format registry and decoding: every code of every format against ml_dtypes and gfloat."""

import importlib.metadata
import re

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from conftest import CODE_FORMATS, ML_FORMATS, ROOT, ml_type

# gfloat's record of each OCP format (gfloat has no fnuz formats).
GFLOAT = {
    "e4m3fn": "format_info_ocp_e4m3",
    "e5m2": "format_info_ocp_e5m2",
    "e2m3fn": "format_info_ocp_e2m3",
    "e3m2fn": "format_info_ocp_e3m2",
    "e2m1fn": "format_info_ocp_e2m1",
    "e8m0fnu": "format_info_ocp_e8m0",
}


def test_version_is_the_cmake_project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    version = re.search(r"project\(fp8emu VERSION ([0-9.]+)", text).group(1)
    assert fp8emu.__version__ == version
    assert importlib.metadata.version("fp8emu") == version


def test_registry_lists_every_ml_dtypes_small_format():
    # Every small float type of ml_dtypes that fp8emu models is in the registry, by ml_dtypes' name.
    expected = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}
    have = {f"float{f.bits}_{f.name}" for f in fp8emu.formats() if f.family != "wide"}
    assert have == expected
    for name in expected:
        assert fp8emu.dtype(getattr(ml_dtypes, name)) == np.dtype(getattr(ml_dtypes, name))


@pytest.mark.parametrize("name", ML_FORMATS)
def test_format_info_equals_ml_dtypes_finfo(name):
    info = fp8emu.format_info(name)
    fi = ml_dtypes.finfo(ml_type(name))
    assert info.max == float(fi.max)
    assert info.min_normal == float(fi.smallest_normal)
    assert info.min_subnormal == float(fi.smallest_subnormal)
    assert info.mantissa_bits == fi.nmant
    assert info.exponent_bits == fi.nexp
    assert info.bits == fi.bits or (info.bits < 8 and fi.bits == 8)  # FP6/FP4 stored in a byte
    assert info.dtype == np.dtype(ml_type(name))


def test_format_lookup_by_alias_dtype_and_errors():
    assert fp8emu.format_info("e4m3").name == "e4m3fn"
    assert fp8emu.format_info("fp4").name == "e2m1fn"
    assert fp8emu.format_info("e8m0").name == "e8m0fnu"
    assert fp8emu.format_info(ml_dtypes.float8_e5m2).name == "e5m2"
    assert fp8emu.format_info(np.dtype(ml_dtypes.float6_e3m2fn)).name == "e3m2fn"
    assert fp8emu.format_info(np.float16).name == "binary16"
    with pytest.raises(ValueError, match=r"unknown format 'e9m9'.*accepted: e4m3fn \(e4m3\), e5m2"):
        fp8emu.format_info("e9m9")


def test_format_info_by_hand():
    # OCP OFP8 r1.0 Table 1/2 and OCP MX v1.0, written out here (no code under test involved).
    e4 = fp8emu.format_info("e4m3fn")
    assert (e4.bias, e4.max_code, e4.nan_code, e4.inf_code, e4.has_inf) == (7, 0x7E, 0x7F, None, False)
    assert (e4.emin, e4.emax, e4.min_subnormal) == (-6, 8, 2.0**-9)
    e5 = fp8emu.format_info("e5m2")
    assert (e5.bias, e5.max_code, e5.inf_code, e5.min_subnormal) == (15, 0x7B, 0x7C, 2.0**-16)
    e8 = fp8emu.format_info("e8m0fnu")
    assert (e8.signed, e8.subnormals, e8.max, e8.min_normal, e8.nan_code) == (False, False, 2.0**127, 2.0**-127, 0xFF)
    fp4 = fp8emu.format_info("e2m1fn")
    assert (fp4.bits, fp4.max, fp4.min_subnormal, fp4.has_nan, fp4.code_count) == (4, 6.0, 0.5, False, 16)


def all_codes(name):
    return np.arange(fp8emu.format_info(name).code_count, dtype=np.uint8)


def same_values(got, want):
    """Bitwise equal as float32, except that any NaN equals any NaN."""
    got = np.asarray(got, np.float32)
    want = np.asarray(want, np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("name", ML_FORMATS)
def test_every_code_decodes_as_ml_dtypes(name):
    c = all_codes(name)
    want = c.view(ml_type(name)).astype(np.float32)
    same_values(fp8emu.decode(c, name), want)  # uint8 codes with their format
    same_values(fp8emu.decode(c.view(ml_type(name))), want)  # format from the ml_dtypes dtype


@pytest.mark.parametrize("name", sorted(GFLOAT))
def test_every_code_decodes_as_gfloat(name):
    import gfloat
    import gfloat.formats

    fi = getattr(gfloat.formats, GFLOAT[name])
    c = all_codes(name)
    want = np.array([gfloat.decode_float(fi, int(k)).fval for k in c], np.float64)
    got = fp8emu.decode(c, name).astype(np.float64)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))  # -0 included


@pytest.mark.parametrize("name", CODE_FORMATS)
def test_decode_scale_inv_is_one_fp32_multiply(name):
    c = all_codes(name)
    exact = c.view(ml_type(name)).astype(np.float32)
    s = np.float32(0.3)  # not a power of two: the product rounds
    with np.errstate(all="ignore"):
        want = exact * s  # NumPy float32 multiply: one RNE rounding
    same_values(fp8emu.decode(c, name, scale_inv=float(s)), want)


def test_decode_keeps_shape_and_ignores_high_bits_of_fp4():
    c = np.array([[0x01, 0x11], [0xF7, 0x08]], np.uint8)  # e2m1: the high nibble is ignored (CUDA)
    y = fp8emu.decode(c, "e2m1fn")
    assert y.shape == (2, 2) and y.dtype == np.float32
    assert y.tolist() == [[0.5, 0.5], [6.0, -0.0]]


def test_decode_errors_name_the_problem():
    with pytest.raises(TypeError, match="codes has dtype float32, which names no format"):
        fp8emu.decode(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="names no format"):
        fp8emu.decode(np.zeros(3, np.uint8))  # uint8 without format=
    with pytest.raises(TypeError, match="contradicts format e5m2"):
        fp8emu.decode(np.zeros(3, ml_dtypes.float8_e4m3fn), "e5m2")
    with pytest.raises(ValueError, match="not C-contiguous"):
        fp8emu.decode(np.zeros((4, 4), np.uint8)[:, ::2], "e4m3fn")
    with pytest.raises(ValueError, match="binary16 is not a code format"):
        fp8emu.decode(np.zeros(3, np.uint8), "binary16")
    with pytest.raises(ValueError, match=r"out has shape \(4,\); expected \(3,\)"):
        fp8emu.decode(np.zeros(3, np.uint8), "e4m3fn", out=np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="out has dtype float64"):
        fp8emu.decode(np.zeros(3, np.uint8), "e4m3fn", out=np.zeros(3, np.float64))
