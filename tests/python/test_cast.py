"""fp8emu.cast: bit for bit against ml_dtypes (policy "ml_dtypes"), and the other policies exactly where
docs/conversion-policies.md says they differ from it; directed rounding against gfloat; stochastic
rounding against a rational oracle fed NumPy's MT19937 words; values worked by hand."""

import bisect
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from conftest import (ELEMENT_FORMATS, OCP_FP8, boundary_inputs, codes, finite_values, is_nan_code,
                      is_nonfinite_code, ml_codes, ml_type, random_f32, run_cli)

N_RANDOM = 1 << 20  # ~1M random fp32 bit patterns per format


@pytest.fixture(scope="module")
def f32_inputs():
    return {name: np.concatenate([random_f32(N_RANDOM, 20260), boundary_inputs(name)]) for name in ELEMENT_FORMATS}


def ml_dtypes_version():
    return tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2])


# ------------------------------------------------------------------ policy "ml_dtypes" == ml_dtypes


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
def test_ml_dtypes_policy_equals_ml_dtypes_on_fp32(name, f32_inputs):
    x = f32_inputs[name]
    got = fp8emu.cast(x, name, policy="ml_dtypes")
    assert got.dtype == np.dtype(ml_type(name))
    want = ml_codes(x, name)
    bad = np.flatnonzero(codes(got) != want)
    assert bad.size == 0, f"{bad.size} differ, e.g. x={x[bad[:4]]} got {codes(got)[bad[:4]]} want {want[bad[:4]]}"


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
@pytest.mark.parametrize("wide", ["float16", "bfloat16"])
def test_ml_dtypes_policy_equals_ml_dtypes_on_every_16_bit_pattern(name, wide):
    wide_type = np.float16 if wide == "float16" else ml_dtypes.bfloat16
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(wide_type)
    got = codes(fp8emu.cast(x, name, policy="ml_dtypes"))
    want = ml_codes(x, name)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} differ, e.g. bits={x.view(np.uint16)[bad[:4]]} got {got[bad[:4]]} want {want[bad[:4]]}"


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
def test_ml_dtypes_policy_on_fp64(name):
    # Doubles that fp32 would snap onto a rounding midpoint: one rounding and the route through
    # fp32 disagree on about half of them (docs/conversion-policies.md, Double rounding).
    v = finite_values(name)
    pos = v[v > 0]
    mids = (pos[:-1] + pos[1:]) / 2
    x = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids, pos, -mids * (1 + 2.0**-40),
                        np.random.default_rng(3).standard_normal(4096) * pos[-1] / 3])
    got = codes(fp8emu.cast(x, name, policy="ml_dtypes"))
    if ml_dtypes_version() >= (0, 7):
        assert np.array_equal(got, ml_codes(x, name))  # ml_dtypes >= 0.7 rounds float64 arrays once
    else:
        # ml_dtypes 0.6 rounded float64 arrays to float32 first: fp8emu gives that from x as float32.
        assert np.array_equal(codes(fp8emu.cast(x.astype(np.float32), name, policy="ml_dtypes")), ml_codes(x, name))
    via32 = codes(fp8emu.cast(x.astype(np.float32), name, policy="ml_dtypes"))
    assert np.count_nonzero(via32 != got) > 0, "the inputs must include double-rounding cases"


# ------------------------------------------- the other policies differ exactly where the docs say


def expected_cuda(x, name, ml, saturating):
    """CUDA's codes from ml_dtypes' by the rules of docs/conversion-policies.md (Where they differ):
    NaN -> the canonical positive NaN code (FP6/FP4, no NaN: +max); under __NV_SATFINITE a non-NaN
    input that ml_dtypes turns into Inf/NaN (finite overflow, +-Inf) -> +-max; else ml_dtypes' code."""
    info = fp8emu.format_info(name)
    want = ml.copy()
    nan_in = np.isnan(x)
    want[nan_in] = info.nan_code if info.has_nan else info.max_code
    if saturating:
        over = ~nan_in & is_nonfinite_code(ml, name)
        sign = np.where(np.signbit(x[over]), 1 << (info.bits - 1), 0)
        want[over] = (sign | info.max_code).astype(np.uint8)
    return want


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
@pytest.mark.parametrize("policy", ["cuda", "cuda-nosat"])
def test_cuda_policies_differ_from_ml_dtypes_where_documented(name, policy, f32_inputs):
    x = f32_inputs[name]
    ml = ml_codes(x, name)
    got = codes(fp8emu.cast(x, name, policy=policy))
    want = expected_cuda(x, name, ml, saturating=policy == "cuda")
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} differ, e.g. x={x[bad[:4]]} got {got[bad[:4]]} want {want[bad[:4]]}"
    # The documented counts for E4M3/E5M2 NaNs: cuda-nosat differs from ml_dtypes on the negative
    # NaNs only (E4M3) or on every NaN (E5M2).
    if policy == "cuda-nosat" and name in OCP_FP8:
        differ = got != ml
        nan_in = np.isnan(x)
        assert not np.any(differ & ~nan_in)
        expect = nan_in & np.signbit(x) if name == "e4m3fn" else nan_in
        assert np.array_equal(differ, expect)


@pytest.mark.parametrize("wide", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ELEMENT_FORMATS)
def test_cuda_policy_on_every_16_bit_pattern(name, wide):
    wide_type = np.float16 if wide == "float16" else ml_dtypes.bfloat16
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(wide_type)
    got = codes(fp8emu.cast(x, name))  # policy="cuda": the SIMD kernels for e4m3fn/e5m2
    want = expected_cuda(x.astype(np.float32), name, ml_codes(x, name), saturating=True)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
def test_ml_dtypes_saturate_clips_finite_overflow_only(name, f32_inputs):
    x = f32_inputs[name]
    info = fp8emu.format_info(name)
    ml = ml_codes(x, name)
    got = codes(fp8emu.cast(x, name, policy="ml_dtypes-saturate"))
    want = ml.copy()
    over = np.isfinite(x) & is_nonfinite_code(ml, name)  # finite inputs that overflow
    want[over] = (np.where(np.signbit(x[over]), 1 << (info.bits - 1), 0) | info.max_code).astype(np.uint8)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", OCP_FP8)
@pytest.mark.parametrize("policy", ["pytorch", "pytorch-2.13"])
def test_pytorch_policies(name, policy, f32_inputs):
    # PyTorch <= 2.12 equals ml_dtypes except NaN, which is 0x7F | sign (ml_dtypes: E5M2 0x7E | sign);
    # >= 2.13 also saturates E4M3's overflow, finite and infinite (pytorch#178817).
    x = f32_inputs[name]
    ml = ml_codes(x, name)
    got = codes(fp8emu.cast(x, name, policy=policy))
    want = ml.copy()
    nan_in = np.isnan(x)
    want[nan_in] = np.where(np.signbit(x[nan_in]), 0xFF, 0x7F).astype(np.uint8)
    if policy == "pytorch-2.13" and name == "e4m3fn":
        over = ~np.isnan(x) & is_nan_code(ml, name)  # finite overflow and the infinities
        want[over] = np.where(np.signbit(x[over]), 0xFE, 0x7E).astype(np.uint8)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", OCP_FP8)
def test_pytorch_policy_against_real_pytorch(name, f32_inputs):
    # The oracle is PyTorch itself (scripts/python-test installs it): Tensor.to(float8) on the CPU,
    # the conversion the policies name: "pytorch-2.13" for PyTorch >= 2.13, "pytorch" before
    # (measured: 2.12.1 does not saturate; 2.13.0 to 2.15.0 saturate E4M3's overflow and infinities).
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (scripts/python-test installs it)")
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    policy = "pytorch-2.13" if (major, minor) >= (2, 13) else "pytorch"
    dtype = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[name]
    x = f32_inputs[name]
    want = torch.from_numpy(x).to(dtype).view(torch.uint8).numpy()
    got = codes(fp8emu.cast(x, name, policy=policy))
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} of {x.size} codes differ from PyTorch {torch.__version__}, first: "
                           f"x = {x[bad[0]]!r}: fp8emu {got[bad[0]]:#04x}, PyTorch {want[bad[0]]:#04x}")
    # float64 inputs: PyTorch rounds them to float32 first, as the policy does.
    x64 = np.array([1.0625 + 2.0**-40, -(1.0625 + 2.0**-40), 3.0000000001, 1e-300, 0.0], np.float64)
    want64 = torch.from_numpy(x64).to(dtype).view(torch.uint8).numpy()
    assert np.array_equal(codes(fp8emu.cast(x64, name, policy=policy)), want64)


def test_pytorch_policy_rounds_doubles_through_float32():
    # 1.0625 + 2^-40 rounds to 1.125 directly (above the midpoint 1.0625) but to 1.0 through fp32
    # (1.0625 exactly, a tie to even): docs/conversion-policies.md, Double rounding.
    x = np.array([1.0625 + 2.0**-40])
    assert fp8emu.cast(x, "e4m3fn", policy="pytorch").astype(np.float32)[0] == 1.0
    assert fp8emu.cast(x, "e4m3fn", policy="cuda").astype(np.float32)[0] == 1.125


# ------------------------------------------------------------------------------ values by hand


def test_cuda_e4m3_values_by_hand():
    # E4M3 (OCP OFP8 Table 1): max 1.75 * 2^8 = 0x7E; 464 = max + half an ulp (2^4) ties to even,
    # the max; min subnormal 2^-9.
    x = np.array([464, 465, 480, 1e30, np.inf, -np.inf, 2.0**-10, 1.5 * 2.0**-10, 2.0**-9, -0.0, 0.1],
                 np.float32)
    want = [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x00, 0x01, 0x01, 0x80, 0x1D]
    assert codes(fp8emu.cast(x, "e4m3fn")).tolist() == want
    # __NV_NOSAT: overflow to the NaN code with the sign; 464 still rounds to the max.
    want_nosat = [0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF, 0x00, 0x01, 0x01, 0x80, 0x1D]
    assert codes(fp8emu.cast(x, "e4m3fn", policy="cuda-nosat")).tolist() == want_nosat


def test_cuda_e5m2_values_by_hand():
    # E5M2: max 1.75 * 2^15 = 0x7B; 61440 = max + half an ulp ties to the even 2^16, which overflows.
    x = np.array([1.75 * 2**15, 61439, 61440, np.inf, np.nan], np.float32)
    assert codes(fp8emu.cast(x, "e5m2")).tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0x7F]
    assert codes(fp8emu.cast(x, "e5m2", policy="cuda-nosat")).tolist() == [0x7B, 0x7B, 0x7C, 0x7C, 0x7F]
    # ml_dtypes' NaN keeps the sign and sets the quiet bit: 0x7E | sign.
    neg_nan = np.array([0xFFC00000], np.uint32).view(np.float32)
    assert codes(fp8emu.cast(neg_nan, "e5m2", policy="ml_dtypes")).tolist() == [0xFE]


def test_cuda_fp4_fp6_values_by_hand():
    # E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no Inf/NaN: saturate, NaN -> +max (CUDA).
    x = np.array([0.25, 0.75, 2.5, 5.0, 7.0, np.inf, -100, np.nan], np.float32)
    assert codes(fp8emu.cast(x, "e2m1fn")).tolist() == [0x0, 0x2, 0x4, 0x6, 0x7, 0x7, 0xF, 0x7]
    # E3M2 max 28 = 0x1F; E2M3 max 7.5 = 0x1F.
    assert codes(fp8emu.cast(np.float32([30, -30]), "e3m2fn")).tolist() == [0x1F, 0x3F]
    assert codes(fp8emu.cast(np.float32([7.75, 0.0625]), "e2m3fn")).tolist() == [0x1F, 0x00]


def test_cuda_e8m0_values_by_hand():
    # __nv_cvt_float_to_e8m0: through bfloat16; cudaRoundPosInf rounds a non-power of two up,
    # cudaRoundZero down; 0 -> code 0 (2^-127); NaN -> 0xFF; Inf -> 0xFE (satfinite) / 0xFF.
    x = np.array([1.0, 3.0, 0.75, 1.0 + 2.0**-20, 0.0, np.nan, np.inf, 2.0**127], np.float32)
    assert codes(fp8emu.cast(x, "e8m0fnu")).tolist() == [127, 129, 127, 128, 0, 255, 254, 254]
    assert codes(fp8emu.cast(x, "e8m0", rounding="zero")).tolist() == [127, 128, 126, 127, 0, 255, 254, 254]
    assert codes(fp8emu.cast(x, "e8m0", policy="cuda-nosat")).tolist() == [127, 129, 127, 128, 0, 255, 255, 254]


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m1fn", "e4m3fnuz"])
def test_scale_is_one_fp32_multiply(name):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(50000) * 30).astype(np.float32)
    s = np.float32(0.7)
    want = codes(fp8emu.cast(x * s, name))  # NumPy's float32 product, cast unscaled
    assert np.array_equal(codes(fp8emu.cast(x, name, scale=float(s))), want)
    xb = x.astype(ml_dtypes.bfloat16)
    want_b = codes(fp8emu.cast(xb.astype(np.float32) * s, name))
    assert np.array_equal(codes(fp8emu.cast(xb, name, scale=float(s))), want_b)


# ------------------------------------------------------------------- directed and stochastic


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn"])
@pytest.mark.parametrize("rounding", ["zero", "up", "down", "nearest"])
def test_directed_rounding_equals_gfloat(name, rounding):
    import gfloat
    import gfloat.formats

    fi = {"e4m3fn": gfloat.formats.format_info_ocp_e4m3, "e5m2": gfloat.formats.format_info_ocp_e5m2,
          "e2m3fn": gfloat.formats.format_info_ocp_e2m3, "e3m2fn": gfloat.formats.format_info_ocp_e3m2,
          "e2m1fn": gfloat.formats.format_info_ocp_e2m1}[name]
    mode = {"zero": gfloat.RoundMode.TowardZero, "up": gfloat.RoundMode.TowardPositive,
            "down": gfloat.RoundMode.TowardNegative, "nearest": gfloat.RoundMode.TiesToEven}[rounding]
    mx = fp8emu.format_info(name).max
    b = boundary_inputs(name)
    b = b[np.isfinite(b) & (np.abs(b) <= mx)]
    rng = np.random.default_rng(11)
    x = np.concatenate([b, (rng.uniform(-mx, mx, 20000)).astype(np.float32),
                        (rng.standard_normal(20000) * fp8emu.format_info(name).min_normal).astype(np.float32)])
    want = gfloat.round_ndarray(fi, x.astype(np.float64), rnd=mode, sat=True)
    got = fp8emu.decode(fp8emu.cast(x, name, rounding=rounding)).astype(np.float64)
    assert np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_directed_overflow_by_hand():
    # IEEE 754 7.4 (cuda-nosat): rounding toward the range gives +-max, away from it Inf/NaN.
    x = np.float32([500, -500])
    assert codes(fp8emu.cast(x, "e4m3fn", policy="cuda-nosat", rounding="zero")).tolist() == [0x7E, 0xFE]
    assert codes(fp8emu.cast(x, "e4m3fn", policy="cuda-nosat", rounding="up")).tolist() == [0x7F, 0xFE]
    assert codes(fp8emu.cast(x, "e4m3fn", policy="cuda-nosat", rounding="down")).tolist() == [0x7E, 0xFF]


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m1fn", "e3m2fn"])
def test_stochastic_rounding_against_a_rational_oracle(name):
    # Contract (core/encode.hpp): the first 32 bits of the discarded fraction of an ulp, plus the
    # element's random word, carrying out of 32 bits rounds the magnitude up. Words: std::mt19937(seed),
    # one per element in order, which NumPy's legacy RandomState(seed) reproduces word for word.
    seed = 1234
    mx = fp8emu.format_info(name).max
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-mx * 0.99, mx * 0.99, 3000),
                        rng.uniform(-1, 1, 3000) * fp8emu.format_info(name).min_normal * 2]).astype(np.float32)
    words = np.random.RandomState(seed).randint(0, 2**32, size=x.size, dtype=np.uint32)
    values = [float(v) for v in finite_values(name) if v >= 0]  # ascending
    want = []
    for xi, r in zip(x.tolist(), words.tolist()):
        a = abs(xi)
        i = bisect.bisect_right(values, a) - 1
        lo = values[i]
        if lo == a:
            mag = lo
        else:
            hi = values[i + 1]
            frac32 = int((Fraction(a) - Fraction(lo)) / (Fraction(hi) - Fraction(lo)) * 2**32)  # floor
            mag = hi if frac32 + r >= 2**32 else lo
        want.append(-float(mag) if xi < 0 or (xi == 0 and np.signbit(xi)) else float(mag))
    got = fp8emu.decode(fp8emu.cast(x, name, rounding="stochastic", seed=seed)).astype(np.float64)
    assert np.array_equal(got, np.array(want))


# ----------------------------------------------------------------------------- against the CLI


@pytest.mark.parametrize(
    "to,policy,rounding,seed",
    [("e4m3fn", "cuda", None, None), ("e5m2", "ml_dtypes", None, None), ("e4m3fnuz", "cuda-nosat", "zero", None),
     ("e2m1fn", "cuda", "stochastic", 42), ("e8m0fnu", "cuda", "zero", None), ("e3m2fn", "ml_dtypes-saturate", "down", None),
     ("e4m3fn", "pytorch-2.13", None, None)])
def test_cast_equals_the_cli(cli, tmp_path, to, policy, rounding, seed):
    x = np.concatenate([random_f32(20000, 9), boundary_inputs("e4m3fn")]).reshape(-1, 2)
    np.save(tmp_path / "x.npy", x)
    args = ["convert", tmp_path / "x.npy", tmp_path / "q.npy", "--to", to, "--policy", policy]
    if rounding:
        args += ["--rounding", rounding]
    if seed is not None:
        args += ["--seed", seed]
    run_cli(cli, *args)
    want = np.load(tmp_path / "q.npy")
    got = fp8emu.cast(x, to, policy=policy, rounding=rounding, seed=seed)
    assert got.shape == want.shape
    assert np.array_equal(codes(got), want)


@pytest.mark.parametrize("to,policy", [("e4m3fn", "ml_dtypes"), ("e5m2", "ml_dtypes"), ("e5m2", "cuda"),
                                       ("e2m3fn", "ml_dtypes")])
@pytest.mark.parametrize("wide", ["float16", "bfloat16"])
def test_cli_and_module_equal_ml_dtypes_on_every_16_bit_pattern(cli, tmp_path, to, policy, wide):
    # The CLI stores bfloat16 as uint16 bits (--from bfloat16). Oracle: ml_dtypes, or for "cuda"
    # the documented rules applied to ml_dtypes' codes.
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16 if wide == "float16" else ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x.view(np.float16) if wide == "float16" else bits)
    run_cli(cli, "convert", tmp_path / "x.npy", tmp_path / "q.npy", "--from", wide, "--to", to, "--policy", policy)
    want = ml_codes(x, to)
    if policy == "cuda":
        want = expected_cuda(x.astype(np.float32), to, want, saturating=True)
    assert np.array_equal(np.load(tmp_path / "q.npy"), want)
    assert np.array_equal(codes(fp8emu.cast(x, to, policy=policy)), want)


# -------------------------------------------------------------------------------------- errors


def test_cast_errors_name_the_problem():
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"unknown policy 'numpy' \(accepted: cuda, cuda-nosat, ml_dtypes"):
        fp8emu.cast(x, "e4m3fn", policy="numpy")
    with pytest.raises(ValueError, match=r"unknown rounding 'odd' \(accepted: nearest, zero, up, down, stochastic\)"):
        fp8emu.cast(x, "e4m3fn", rounding="odd")
    with pytest.raises(ValueError, match="policy pytorch applies to e4m3fn and e5m2 only"):
        fp8emu.cast(x, "e2m1fn", policy="pytorch")
    with pytest.raises(ValueError, match="policy ml_dtypes does not apply to e8m0fnu"):
        fp8emu.cast(x, "e8m0fnu", policy="ml_dtypes")
    with pytest.raises(ValueError, match="rounding nearest does not apply to e8m0fnu"):
        fp8emu.cast(x, "e8m0fnu", rounding="nearest")
    with pytest.raises(ValueError, match="needs seed"):
        fp8emu.cast(x, "e4m3fn", rounding="stochastic")
    with pytest.raises(ValueError, match="seed applies to rounding='stochastic' only"):
        fp8emu.cast(x, "e4m3fn", seed=3)
    with pytest.raises(ValueError, match="unknown format 'e4m4'"):
        fp8emu.cast(x, "e4m4")
    with pytest.raises(ValueError, match="bfloat16 is not a code format"):
        fp8emu.cast(x, "bfloat16")
    with pytest.raises(TypeError, match="x has dtype int64; cast takes float32, float64, float16 or bfloat16"):
        fp8emu.cast(np.arange(4), "e4m3fn")
    with pytest.raises(TypeError, match="x has dtype uint8"):
        fp8emu.cast(np.zeros(4, np.uint8), "e4m3fn")
    with pytest.raises(ValueError, match=r"x is not C-contiguous \(strides in elements: \(8, 2\)\)"):
        fp8emu.cast(np.zeros((4, 8), np.float32)[:, ::2], "e4m3fn")
    with pytest.raises(ValueError, match=r"out has shape \(5,\); expected \(4,\)"):
        fp8emu.cast(x, "e4m3fn", out=np.zeros(5, np.uint8))
    with pytest.raises(TypeError, match="out has dtype float8_e5m2; expected uint8 or float8_e4m3fn"):
        fp8emu.cast(x, "e4m3fn", out=np.zeros(4, ml_dtypes.float8_e5m2))
    with pytest.raises(ValueError, match="out is read-only"):
        ro = np.zeros(4, np.uint8)
        ro.flags.writeable = False
        fp8emu.cast(x, "e4m3fn", out=ro)


@pytest.mark.parametrize("name", ELEMENT_FORMATS)
def test_the_inputs_tell_every_two_policies_apart(name, f32_inputs):
    # The comparisons above can fail: on these inputs every two policies that the docs say differ
    # for this format give different codes somewhere, so a swapped or wrong policy is caught.
    x = f32_inputs[name]
    names = ["cuda", "cuda-nosat", "ml_dtypes", "ml_dtypes-saturate"]
    if name in OCP_FP8:
        names += ["pytorch", "pytorch-2.13"]
    results = {p: codes(fp8emu.cast(x, name, policy=p)) for p in names}
    info = fp8emu.format_info(name)
    same = set()  # the pairs that agree on every fp32 input, each by the docs' table
    if not info.has_nan:  # FP6/FP4: no Inf or NaN code, every policy saturates
        same |= {("cuda", "cuda-nosat"), ("ml_dtypes", "ml_dtypes-saturate")}
    if info.fnuz:  # one NaN code 0x80 for overflow, Inf and NaN alike
        same.add(("cuda-nosat", "ml_dtypes"))
    if name == "e4m3fn":  # "PyTorch <= 2.12 vs ml_dtypes on none"; >= 2.13 differs from kSaturate at +-Inf
        same.add(("ml_dtypes", "pytorch"))
    if name == "e5m2":  # pytorch#178817 changed E4M3 only
        same.add(("pytorch", "pytorch-2.13"))
    for i, p in enumerate(names):
        for q in names[i + 1:]:
            differ = bool(np.any(results[p] != results[q]))
            assert differ != ((p, q) in same), f"{p} vs {q}: differ={differ}"


def test_cli_reads_ml_dtypes_own_npy_files(cli, tmp_path):
    """np.save of ml_dtypes arrays writes void-record descrs ('<V2' bfloat16, '|V1' float8); fp8emu
    convert reads them as bfloat16 bits and FP8 codes. In-range finite bfloat16 values convert to
    E4M3 as ml_dtypes' astype does (no saturation or NaN rule is involved)."""
    x = np.array([1.0, -2.5, 0.3, 100.0, -0.001, 400.0, 3.0e-3, 0.0], dtype=np.float32).astype(ml_dtypes.bfloat16)
    src, out = tmp_path / "x.npy", tmp_path / "q.npy"
    np.save(src, x)
    assert np.load(src).dtype.str in ("<V2", "|V2")
    run_cli(cli, "convert", src, out, "--to", "e4m3fn")
    want = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(np.load(out), want)
    # An ml_dtypes float8 file reads as codes: decode them to float32.
    codes = want.view(ml_dtypes.float8_e4m3fn)
    src8, out32 = tmp_path / "c.npy", tmp_path / "d.npy"
    np.save(src8, codes)
    run_cli(cli, "convert", src8, out32, "--from", "e4m3fn", "--to", "float32")
    assert np.array_equal(np.load(out32), codes.astype(np.float32))
