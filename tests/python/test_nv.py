"""fp8emu.nv (cuda_fp8.h's host conversions, vectorised) against ml_dtypes, against fp8emu.cast's CUDA
policies (a different C++ path: emu::cast_array and the SIMD bulk kernels, not the nv:: mirror), and
against values from the OCP FP8 spec and CUDA's header documentation."""

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import nv

from conftest import boundary_inputs, random_f32

FP8 = [("e4m3fn", nv.__NV_E4M3, ml_dtypes.float8_e4m3fn), ("e5m2", nv.__NV_E5M2, ml_dtypes.float8_e5m2)]


def test_enum_values_are_cudas():
    # cuda_fp8.h: enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
    #             enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };  cudaRoundMode: Nearest, Zero, PosInf, MinInf
    assert (nv.__NV_NOSAT, nv.__NV_SATFINITE, nv.__NV_E4M3, nv.__NV_E5M2) == (0, 1, 0, 1)
    assert (nv.__NV_E2M3, nv.__NV_E3M2, nv.__NV_E2M1) == (0, 1, 0)
    assert (nv.cudaRoundNearest, nv.cudaRoundZero, nv.cudaRoundPosInf, nv.cudaRoundMinInf) == (0, 1, 2, 3)
    assert nv.NV_SATFINITE == nv.__NV_SATFINITE and "cvt_float_to_fp8" in nv.__all__


def test_spec_values():
    # OCP FP8: E4M3 max 448 = 0x7E, E5M2 max 57344 = 0x7B, Inf 0x7C; CUDA's float entry NaN 0x7F.
    assert nv.cvt_float_to_fp8(448.0, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x7E
    assert nv.cvt_float_to_fp8(1e6, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x7E
    assert nv.cvt_float_to_fp8(-np.inf, nv.__NV_SATFINITE, nv.__NV_E5M2) == 0xFB
    assert nv.cvt_float_to_fp8(np.inf, nv.__NV_NOSAT, nv.__NV_E5M2) == 0x7C
    assert nv.cvt_float_to_fp8(-np.nan, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x7F
    assert nv.cvt_float_to_fp8(1.0, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x38
    assert nv.cvt_float2_to_fp8x2([1.0, -2.0], nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x38 | (0xC0 << 8)
    assert nv.cvt_fp8_to_halfraw(0x38, nv.__NV_E4M3) == 0x3C00  # 1.0 as float16
    assert nv.cvt_fp8_to_halfraw(0x01, nv.__NV_E4M3) == np.float16(2.0**-9).view(np.uint16)
    assert nv.cvt_e8m0_to_bf16raw(127) == 0x3F80  # 2^0
    assert nv.cvt_float_to_fp4(6.5, nv.__NV_E2M1, nv.cudaRoundNearest) == 0x7  # E2M1 max 6
    assert nv.cvt_float_to_fp6(np.nan, nv.__NV_E2M3, nv.cudaRoundNearest) == 0x1F  # NaN -> +max


@pytest.mark.parametrize("name,interp,ml", FP8, ids=["e4m3", "e5m2"])
def test_float_to_fp8_against_ml_dtypes_and_cast(name, interp, ml):
    x = np.concatenate([boundary_inputs(name), random_f32(1 << 18, 17)])
    info = fp8emu.format_info(name)
    for sat, policy in ((nv.__NV_SATFINITE, "cuda"), (nv.__NV_NOSAT, "cuda-nosat")):
        got = nv.cvt_float_to_fp8(x, sat, interp)
        assert got.dtype == np.uint8 and got.shape == x.shape
        assert np.array_equal(got, fp8emu.cast(x, name, policy=policy).view(np.uint8))
        ref = x.astype(ml).view(np.uint8)
        nan = np.isnan(x)
        assert np.all(got[nan] == 0x7F)  # CUDA's float entry: canonical +NaN
        over = ~nan & (np.abs(x) > info.max) & (ref & 0x7F != info.max_code)  # ml_dtypes rounded out of range
        if sat == nv.__NV_SATFINITE:
            assert np.all(got[over] == (info.max_code | (np.signbit(x[over]) << 7)))
        keep = ~nan & ~over
        assert np.array_equal(got[keep], ref[keep])


@pytest.mark.parametrize("name,interp,ml", FP8, ids=["e4m3", "e5m2"])
def test_half_and_bfloat16_entries_every_pattern(name, interp, ml):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for raw, fn, as_f32 in ((bits.view(np.float16), nv.cvt_halfraw_to_fp8, lambda b: b.view(np.float16).astype(np.float32)),
                            (bits.view(ml_dtypes.bfloat16), nv.cvt_bfloat16raw_to_fp8,
                             lambda b: b.view(ml_dtypes.bfloat16).astype(np.float32))):
        for sat in (nv.__NV_SATFINITE, nv.__NV_NOSAT):
            got = fn(raw, sat, interp)
            assert np.array_equal(got, fn(bits, sat, interp))  # uint16 bits or the typed array
            # CUDA widens half/bf16 to float exactly, then the float entry: ml_dtypes' float32 -> float entry
            assert np.array_equal(got, nv.cvt_float_to_fp8(as_f32(bits), sat, interp))
            f32 = as_f32(bits)
            ok = np.isfinite(f32) & (np.abs(f32) <= fp8emu.format_info(name).max)
            assert np.array_equal(got[ok], f32[ok].astype(ml).view(np.uint8))


@pytest.mark.parametrize("name,interp,ml", FP8, ids=["e4m3", "e5m2"])
def test_fp8_to_halfraw_every_code(name, interp, ml):
    codes = np.arange(256, dtype=np.uint8)
    got = nv.cvt_fp8_to_halfraw(codes, interp)
    want = codes.view(ml).astype(np.float16)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan], want[~nan].view(np.uint16))
    assert np.all(np.isnan(got[nan].view(np.float16)))
    assert np.array_equal(nv.cvt_fp8_to_halfraw(codes.view(ml), interp), got)  # ml_dtypes arrays accepted
    x2 = codes.astype(np.uint16) | (codes[::-1].astype(np.uint16) << 8)
    pairs = nv.cvt_fp8x2_to_halfraw2(x2, interp)
    assert pairs.shape == (256, 2) and np.array_equal(pairs[:, 0], got) and np.array_equal(pairs[:, 1], got[::-1])


def test_double_entry_rounds_once():
    # a double just above an E4M3 midpoint that rounds to the midpoint in float32: double entry rounds
    # up, the float entry (after float32 rounding) to even
    mid = 1.0 + 2.0**-4  # halfway between 1.0 (0x38) and 1.125 (0x39)
    x = mid + 2.0**-40
    assert nv.cvt_double_to_fp8(x, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x39
    assert nv.cvt_float_to_fp8(x, nv.__NV_SATFINITE, nv.__NV_E4M3) == 0x38
    with np.errstate(invalid="ignore"):  # (NaN payloads widened to float64)
        d = np.concatenate([boundary_inputs("e4m3fn").astype(np.float64), np.random.default_rng(2).standard_normal(4096)])
    assert np.array_equal(nv.cvt_double_to_fp8(d, nv.__NV_SATFINITE, nv.__NV_E4M3),
                          fp8emu.cast(d, "e4m3fn", policy="cuda").view(np.uint8))
    pairs = np.stack([d[:100], d[100:200]], axis=-1)
    assert np.array_equal(nv.cvt_double2_to_fp8x2(pairs, nv.__NV_SATFINITE, nv.__NV_E4M3),
                          nv.cvt_double_to_fp8(d[:100], 1, 0).astype(np.uint16)
                          | (nv.cvt_double_to_fp8(d[100:200], 1, 0).astype(np.uint16) << 8))


@pytest.mark.parametrize("name,fn,interp", [("e2m3fn", "fp6", nv.__NV_E2M3), ("e3m2fn", "fp6", nv.__NV_E3M2),
                                             ("e2m1fn", "fp4", nv.__NV_E2M1)])
def test_fp6_fp4_against_ml_dtypes(name, fn, interp):
    ml = getattr(ml_dtypes, f"float{fp8emu.format_info(name).bits}_{name}")
    info = fp8emu.format_info(name)
    x = boundary_inputs(name)
    to = getattr(nv, f"cvt_float_to_{fn}")
    got = to(x, interp, nv.cudaRoundNearest)
    assert np.array_equal(got, fp8emu.cast(x, name, policy="cuda").view(np.uint8))
    ok = np.isfinite(x) & (np.abs(x) <= info.max)
    assert np.array_equal(got[ok], x[ok].astype(ml).view(np.uint8))
    codes = np.arange(1 << info.bits, dtype=np.uint8)
    dec = getattr(nv, f"cvt_{fn}_to_halfraw")(codes, interp)
    assert np.array_equal(dec, codes.view(ml).astype(np.float16).view(np.uint16))
    # toward zero, by enumeration of the format's values (ml_dtypes decodes every code): the
    # representable value of largest magnitude not above |x|, with x's sign (zero keeps it).
    tz = to(x[ok], interp, nv.cudaRoundZero).view(ml).astype(np.float64)
    vals = np.unique(np.abs(codes.view(ml).astype(np.float64)))
    mag = np.abs(x[ok].astype(np.float64))
    want = vals[np.searchsorted(vals, mag, side="right") - 1] * np.where(np.signbit(x[ok]), -1.0, 1.0)
    assert np.array_equal(tz, want)
    assert np.array_equal(np.signbit(tz), np.signbit(x[ok]))


def test_e8m0_against_cast_and_ml_dtypes():
    x = np.concatenate([boundary_inputs("e8m0fnu"), np.abs(random_f32(1 << 14, 3))])
    got = nv.cvt_float_to_e8m0(x, nv.__NV_SATFINITE, nv.cudaRoundPosInf)
    assert np.array_equal(got, fp8emu.cast(x, "e8m0fnu", policy="cuda").view(np.uint8))
    codes = np.arange(255, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(nv.cvt_e8m0_to_bf16raw(codes), want)


def test_errors():
    with pytest.raises(ValueError):
        nv.cvt_float_to_fp8(1.0, 2, nv.__NV_E4M3)
    with pytest.raises(ValueError):
        nv.cvt_float_to_fp8(1.0, nv.__NV_SATFINITE, 5)
    with pytest.raises(TypeError):
        nv.cvt_halfraw_to_fp8(np.zeros(3, np.float32), 1, 0)
    with pytest.raises(TypeError):
        nv.cvt_fp8_to_halfraw(np.zeros(3, np.float32), 0)
    with pytest.raises(ValueError):
        nv.cvt_float2_to_fp8x2(np.zeros(3, np.float32), 1, 0)
