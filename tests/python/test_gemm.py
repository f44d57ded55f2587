"""fp8emu.gemm against exact sums computed in NumPy float64, sequential float32 sums, values worked by
hand from the tensor-core model (docs/tensor-core-model.md), and the fp8emu command line."""

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from conftest import codes, run_cli

E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2


def random_codes(shape, dtype, seed, finite_only=True):
    """Random FP8 arrays: uniformly random codes, NaN/Inf codes replaced by zero."""
    q = np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8).view(dtype)
    if finite_only:
        q[~np.isfinite(q.astype(np.float32))] = 0
    return q


def exact_tn(a, b):
    """sum_k a[i,k] b[j,k] in float64: exact for E4M3 x E4M3 (products span 2^-18 .. 2^18, so any sum
    of fewer than 2^17 of them fits in 53 bits)."""
    return a.astype(np.float64) @ b.astype(np.float64).T


def test_exact_model_equals_numpy_float64():
    a, b = random_codes((37, 300), E4M3, 1), random_codes((23, 300), E4M3, 2)
    d = fp8emu.gemm(a, b, accumulation="exact")
    assert d.dtype == np.float32 and d.shape == (37, 23)
    want = exact_tn(a, b).astype(np.float32)  # one RNE rounding of the exact sum
    assert np.array_equal(d, want)


def test_scale_inv_is_applied_once_after_the_sum():
    a, b = random_codes((8, 64), E4M3, 3), random_codes((5, 64), E4M3, 4)
    sa, sb = np.float32(0.37), np.float32(3.1)
    d = fp8emu.gemm(a, b, accumulation="exact", scale_inv_a=float(sa), scale_inv_b=float(sb))
    want = exact_tn(a, b).astype(np.float32) * (sa * sb)  # RN(acc * RN(sa * sb)) in float32
    assert np.array_equal(d, want)


def test_fp32_model_is_the_sequential_float32_sum():
    a, b = random_codes((6, 200), E4M3, 5), random_codes((7, 200), E5M2, 6)
    d = fp8emu.gemm(a, b, format_b="e5m2", accumulation="fp32")
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    acc = np.zeros((6, 7), np.float32)
    with np.errstate(all="ignore"):
        for k in range(200):  # c = RN(c + a_k b_k); products of E4M3 x E5M2 values are exact in fp32
            acc = acc + np.outer(fa[:, k], fb[:, k]).astype(np.float32)
    assert np.array_equal(d, acc)


@pytest.mark.parametrize("accumulation,promotion", [("hopper", 0), ("hopper", 128), ("ada", 0), ("ada", 32),
                                                    ("fp32", 0)])
def test_tensor_core_models_are_exact_on_small_integers(accumulation, promotion):
    # Integer operands |x| <= 8 with K = 256: every product is an integer <= 64 and every partial
    # sum an integer below 2^14, so the block alignment (13 fraction bits below the block's largest
    # exponent) and the 14-bit cut lose nothing: every model gives the exact sum.
    rng = np.random.default_rng(7)
    a = rng.integers(-8, 9, size=(16, 256)).astype(np.float32).astype(E4M3)
    b = rng.integers(-8, 9, size=(12, 256)).astype(np.float32).astype(E4M3)
    d = fp8emu.gemm(a, b, accumulation=accumulation, promotion=promotion)
    assert np.array_equal(d, exact_tn(a, b).astype(np.float32))


def test_tensor_core_truncation_by_hand():
    # One block: products 8*8 = 64 = 2^6 and 2^-4 * 2^-4 = 2^-8. Hopper/Ada align every product to
    # 13 fraction bits below the largest exponent (2^6 -> unit 2^-7) by truncation, so 2^-8 is lost:
    # 64. fp32 and exact keep it: 64 + 2^-8 (exact in fp32).
    a = np.array([[8.0, 2.0**-4]], np.float32).astype(E4M3)
    b = np.array([[8.0, 2.0**-4]], np.float32).astype(E4M3)
    assert fp8emu.gemm(a, b, accumulation="hopper")[0, 0] == 64.0
    assert fp8emu.gemm(a, b, accumulation="ada")[0, 0] == 64.0
    assert fp8emu.gemm(a, b, accumulation="fp32")[0, 0] == 64.0 + 2.0**-8
    assert fp8emu.gemm(a, b, accumulation="exact")[0, 0] == 64.0 + 2.0**-8


def test_layout_nn_is_tn_of_the_transpose():
    a, b = random_codes((9, 96), E4M3, 8), random_codes((96, 11), E4M3, 9)
    nn = fp8emu.gemm(a, b, layout="nn", accumulation="hopper")
    tn = fp8emu.gemm(a, np.ascontiguousarray(b.T), accumulation="hopper")
    assert np.array_equal(nn, tn)


def test_epilogue_by_hand():
    a, b = random_codes((4, 64), E4M3, 10), random_codes((3, 64), E4M3, 11)
    c = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    bias = np.float32([0.5, -1.25, 3.0])
    alpha, beta = np.float32(1.5), np.float32(-0.75)
    d, amax = fp8emu.gemm(a, b, accumulation="exact", alpha=float(alpha), beta=float(beta), c=c, bias=bias,
                          return_amax=True)
    t = exact_tn(a, b).astype(np.float32)
    t = t * alpha
    t = t + beta * c
    t = t + bias
    assert np.array_equal(d, t)
    assert amax == np.max(np.abs(t))


def test_fp8_and_16_bit_outputs_by_hand():
    a, b = random_codes((8, 32), E4M3, 12), random_codes((8, 32), E4M3, 13)
    t = exact_tn(a, b).astype(np.float32)
    d_scale = np.float32(0.25)
    mx = ml_dtypes.finfo(E4M3).max
    q = fp8emu.gemm(a, b, accumulation="exact", out_dtype="e4m3fn", d_scale=float(d_scale))
    assert q.dtype == np.dtype(E4M3)
    # __NV_SATFINITE of RN(t * d_scale): finite values clip to +-max, then round to nearest even.
    assert np.array_equal(codes(q), codes(np.clip(t * d_scale, -mx, mx).astype(E4M3)))
    bf = fp8emu.gemm(a, b, accumulation="exact", out_dtype=ml_dtypes.bfloat16)
    assert bf.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(bf.view(np.uint16), t.astype(ml_dtypes.bfloat16).view(np.uint16))
    h = fp8emu.gemm(a, b, accumulation="exact", out_dtype="float16")
    with np.errstate(over="ignore"):  # large sums overflow float16 to Inf, in both
        assert h.dtype == np.float16 and np.array_equal(h, t.astype(np.float16))


@pytest.mark.parametrize("accumulation,promotion,fb,out_dtype", [("hopper", 0, "e4m3fn", "float32"),
                                                                 ("hopper", 128, "e5m2", "bfloat16"),
                                                                 ("ada", 32, "e4m3fn", "e4m3fn"),
                                                                 ("fp32", 0, "e5m2", "float16")])
def test_gemm_equals_the_cli(cli, tmp_path, accumulation, promotion, fb, out_dtype):
    a = random_codes((33, 520), E4M3, 20, finite_only=False)  # NaN codes too
    b = random_codes((17, 520), ml_dtypes.float8_e5m2 if fb == "e5m2" else E4M3, 21, finite_only=False)
    np.save(tmp_path / "a.npy", codes(a))
    np.save(tmp_path / "b.npy", codes(b))
    cli_out = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "e4m3fn": "e4m3"}[out_dtype]
    run_cli(cli, "gemm", "--a", tmp_path / "a.npy", "--b", tmp_path / "b.npy", "--out", tmp_path / "d.npy",
            "--format-a", "e4m3", "--format-b", fb.replace("fn", ""), "--scale-inv-a", "0.5", "--scale-inv-b",
            "0.125", "--accumulation", accumulation, "--promotion", promotion, "--output", cli_out,
            "--d-scale", "2")
    want = np.load(tmp_path / "d.npy")
    got = fp8emu.gemm(a, b, scale_inv_a=0.5, scale_inv_b=0.125, accumulation=accumulation, promotion=promotion,
                      out_dtype=out_dtype, d_scale=2.0)
    assert got.shape == want.shape
    bits = f"u{want.itemsize}"  # bit patterns (NaNs included)
    assert np.array_equal(got.view(bits), want.view(bits))


def test_gemm_writes_into_out():
    a, b = random_codes((4, 32), E4M3, 30), random_codes((5, 32), E4M3, 31)
    out = np.full((4, 5), -1.0, np.float32)
    d = fp8emu.gemm(a, b, out=out)
    assert d is out
    assert np.array_equal(out, fp8emu.gemm(a, b))


def test_gemm_errors_name_the_problem():
    a, b = random_codes((4, 32), E4M3, 40), random_codes((5, 32), E4M3, 41)
    with pytest.raises(TypeError, match="a has dtype float32, which names no format"):
        fp8emu.gemm(a.astype(np.float32), b)
    with pytest.raises(TypeError, match="names no format"):
        fp8emu.gemm(codes(a), b)  # uint8 without format_a
    with pytest.raises(ValueError, match="a has 1 dimensions; gemm takes 2-D operands"):
        fp8emu.gemm(a[0], b)
    with pytest.raises(ValueError, match=r"shape mismatch: a is \(4, 32\), b is \(5, 16\)"):
        fp8emu.gemm(a, np.ascontiguousarray(b[:, :16]))
    e5 = random_codes((5, 32), E5M2, 42)
    with pytest.raises(ValueError, match="E5M2 x E5M2 is not supported"):
        fp8emu.gemm(random_codes((4, 32), E5M2, 43), e5)
    with pytest.raises(ValueError, match="promotion interval 48 is not a multiple of the hopper block"):
        fp8emu.gemm(a, b, promotion=48)
    with pytest.raises(ValueError, match="the exact model takes no promotion interval"):
        fp8emu.gemm(a, b, accumulation="exact", promotion=32)
    with pytest.raises(ValueError, match=r"unknown accumulation model 'volta' \(accepted: exact, fp32, hopper, ada, hopper-mma-sync, blackwell, volta-fp16,"):
        fp8emu.gemm(a, b, accumulation="volta")
    with pytest.raises(ValueError, match="gemm takes OCP FP8 operands"):
        fp8emu.gemm(codes(a), b, format_a="e2m1fn")
    with pytest.raises(ValueError, match="beta != 0 needs c"):
        fp8emu.gemm(a, b, beta=1.0)
    with pytest.raises(TypeError, match="c has dtype float64; it must be float32"):
        fp8emu.gemm(a, b, beta=1.0, c=np.zeros((4, 5)))
    with pytest.raises(ValueError, match="unknown out_dtype"):
        fp8emu.gemm(a, b, out_dtype="int8")
    with pytest.raises(ValueError, match="unknown layout 'nt'"):
        fp8emu.gemm(a, b, layout="nt")


@pytest.mark.parametrize("split_k", [2, 3, 25])
def test_split_k_equals_the_h200_cublaslt_recordings(split_k):
    """cuBLASLt FP8 GEMMs recorded on an H200 with split-K forced to S (tests/data/h200/README.md):
    16 x 16 x 65536 E4M3 codes, unit scales, FAST_ACCUM=1. fp8emu.gemm with the same split_k gives
    every output bit; without the split it misses most of them (so this test can fail)."""
    from conftest import ROOT

    d = ROOT / "tests" / "data" / "h200" / "cublaslt-splitk" / "k65536_m16"
    a, b = np.load(d / "A.npy"), np.load(d / "B.npy")
    want = np.load(d / f"D_f1_s{split_k}_r2.npy").view(np.uint32)
    got = fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", accumulation="hopper", promotion=0,
                      split_k=split_k)
    assert np.array_equal(got.view(np.uint32), want)
    unsplit = fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", accumulation="hopper", promotion=0)
    assert np.count_nonzero(unsplit.view(np.uint32) != want) > want.size // 2


def test_split_k_below_one_is_rejected_by_name():
    a = np.zeros((2, 4), np.uint8)
    with pytest.raises(ValueError, match="split_k must be >= 1"):
        fp8emu.gemm(a, a, format_a="e4m3fn", format_b="e4m3fn", split_k=0)
