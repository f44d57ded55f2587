"""fp8emu.mma against Hopper's mma.sync as recorded on an NVIDIA H200 (tests/data/h200, provenance in
its README) and against the published fp16, bf16 and tf32 tensor-core recordings of V100 to B200
(tests/data/tensor-core-mma, decoded here with NumPy), and fp8emu.compare against ULP distances and
errors computed here with NumPy."""

import gzip

import ml_dtypes
import numpy as np
import pytest

import fp8emu

from conftest import ROOT

H200 = ROOT / "tests" / "data" / "h200"
PAIRS = ["e4m3_e4m3", "e5m2_e5m2", "e4m3_e5m2"]
NAMES = {"e4m3": "e4m3fn", "e5m2": "e5m2"}


def load_tiles(kind, pair):
    p = H200 / kind
    A = np.fromfile(p / f"{pair}_A.u8", np.uint8).reshape(-1, 16, 32)
    B = np.fromfile(p / f"{pair}_B.u8", np.uint8).reshape(-1, 32, 8)
    C = np.fromfile(p / f"{pair}_C.f32", "<f4").reshape(-1, 16, 8)
    D = np.fromfile(p / f"{pair}_D.f32", "<u4").reshape(-1, 16, 8)
    assert len(A) == len(B) == len(C) == len(D) > 0
    return A, B, C, D


@pytest.mark.parametrize("kind", ["mma-sync", "mma-sync-edge"])
@pytest.mark.parametrize("pair", PAIRS)
def test_mma_equals_every_recorded_h200_tile(kind, pair):
    A, B, C, D = load_tiles(kind, pair)
    fa, fb = (NAMES[x] for x in pair.split("_"))
    bad = bad_wgmma = 0
    for t in range(len(A)):
        bt = np.ascontiguousarray(B[t].T)  # the instruction's K x 8 B as fp8emu's (N, K) operand
        d = fp8emu.mma(A[t], bt, C[t], format_a=fa, format_b=fb)
        bad += int(np.count_nonzero(d.view(np.uint32) != D[t]))
        d = fp8emu.mma(A[t], bt, C[t], format_a=fa, format_b=fb, accumulation="hopper")
        bad_wgmma += int(np.count_nonzero(d.view(np.uint32) != D[t]))
    assert bad == 0
    assert bad_wgmma > 0  # the wgmma row does not fit mma.sync: the comparison can fail


def test_mma_takes_ml_dtypes_arrays_and_defaults_c_to_zero():
    A, B, C, D = load_tiles("mma-sync", "e4m3_e4m3")
    a = A[0].view(ml_dtypes.float8_e4m3fn)
    b = np.ascontiguousarray(B[0].T).view(ml_dtypes.float8_e4m3fn)
    with_c = fp8emu.mma(a, b, C[0])
    assert np.array_equal(with_c.view(np.uint32), D[0])
    out = np.empty((16, 8), np.float32)
    assert fp8emu.mma(a, b, np.zeros((16, 8), np.float32), out=out) is out
    assert np.array_equal(fp8emu.mma(a, b).view(np.uint32), out.view(np.uint32))


def test_mma_rejects_bad_arguments_by_name():
    a = np.zeros((16, 32), np.uint8)
    b = np.zeros((8, 32), np.uint8)
    with pytest.raises(TypeError, match="names no format"):
        fp8emu.mma(np.zeros((16, 32), np.float32), b, format_b="e4m3fn")
    with pytest.raises(TypeError, match="8-bit codes"):
        fp8emu.mma(np.zeros((16, 32), np.float32), b, format_a="e4m3fn", format_b="e4m3fn")
    with pytest.raises(ValueError, match="shape mismatch"):
        fp8emu.mma(a, np.zeros((8, 16), np.uint8), format_a="e4m3fn", format_b="e4m3fn")
    with pytest.raises(ValueError, match="not a tensor-core model"):
        fp8emu.mma(a, b, format_a="e4m3fn", format_b="e4m3fn", accumulation="fp32")
    with pytest.raises(ValueError, match="c has shape"):
        fp8emu.mma(a, b, np.zeros((8, 16), np.float32), format_a="e4m3fn", format_b="e4m3fn")
    with pytest.raises(TypeError, match="float32"):
        fp8emu.mma(a, b, np.zeros((16, 8), np.float64), format_a="e4m3fn", format_b="e4m3fn")


TC = ROOT / "tests" / "data" / "tensor-core-mma"
# (file, model, array dtype the test hands to fp8emu.mma)
WIDE = [("V100_fp16", "volta-fp16", np.float16), ("A100_bf16", "ampere-bf16", ml_dtypes.bfloat16),
        ("A100_tf32", "ampere-tf32", np.float32), ("Ada_fp16", "ada-fp16", np.float16),
        ("L40S_tf32", "ada-tf32", np.float32), ("H100_fp16", "hopper-fp16", np.float16),
        ("H200_bf16", "hopper-bf16", ml_dtypes.bfloat16), ("H100_tf32", "hopper-tf32", np.float32),
        ("B200_bf16", "blackwell-bf16", ml_dtypes.bfloat16), ("B200_tf32", "blackwell-tf32", np.float32)]


def load_wide(name, rows):
    """The first rows of a packed dataset: a, b as float32 values; c, d as uint32 bits."""
    fmt = name.split("_")[1]
    width = 8 if fmt == "tf32" else 4
    a, b, c, d = [], [], [], []
    with gzip.open(TC / f"{name}.txt.gz", "rt") as f:
        for _, line in zip(range(rows), f):
            fields = line.split()
            for side, out in ((fields[0], a), (fields[1], b)):
                u = np.array([int(side[i:i + width], 16) for i in range(0, len(side), width)], np.uint32)
                if fmt == "fp16":
                    out.append(u.astype(np.uint16).view(np.float16).astype(np.float32))
                elif fmt == "bf16":
                    out.append((u << 16).view(np.float32))
                else:
                    out.append(u.view(np.float32))
            c.append(int(fields[2], 16))
            d.append(int(fields[3], 16))
    return np.array(a), np.array(b), np.array(c, np.uint32), np.array(d, np.uint32)


@pytest.mark.parametrize("name,model,dtype", WIDE)
def test_mma_on_values_reproduces_recorded_tensor_cores(name, model, dtype):
    a, b, c, d = load_wide(name, 200)
    C = np.zeros((200, 200), np.float32)
    C[np.arange(200), np.arange(200)] = c.view(np.float32)
    D = fp8emu.mma(a.astype(dtype), b.astype(dtype), C, accumulation=model)
    assert np.array_equal(np.diag(D).view(np.uint32), d)
    # The fp32 sequential sum (what a CPU GEMM does) is another result on many rows.
    seq = np.array([np.float32(c.view(np.float32)[i]) for i in range(200)])
    for k in range(a.shape[1]):
        seq = (seq + (a[:, k] * b[:, k]).astype(np.float32)).astype(np.float32)
    assert np.count_nonzero(seq.view(np.uint32) != d) > 0


def test_gemm_on_values_is_the_mma_in_both_layouts():
    a, b, c, d = load_wide("H200_bf16", 64)
    C = np.zeros((64, 64), np.float32)
    C[np.arange(64), np.arange(64)] = c.view(np.float32)
    ab, bb = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    D = fp8emu.gemm(ab, bb, c=C, accumulation="hopper-bf16")
    assert np.array_equal(np.diag(D).view(np.uint32), d)
    Dnn = fp8emu.gemm(ab, np.ascontiguousarray(bb.T), c=C, accumulation="hopper-bf16", layout="nn")
    assert np.array_equal(Dnn.view(np.uint32), D.view(np.uint32))
    with pytest.raises(ValueError, match="apply to FP8 operands only"):
        fp8emu.gemm(ab, bb, accumulation="hopper-bf16", alpha=2.0)


def test_mma_on_values_refuses_values_outside_the_format():
    x = np.array([[1.0, 1.0 + 2.0**-9]], np.float32)
    assert fp8emu.mma(x, x, accumulation="hopper-fp16")[0, 0] == np.float32(2.0 + 2.0**-8 + 2.0**-18)  # exact in 24 bits
    with pytest.raises(ValueError, match=r"A\[1\] = 1.00195 .* is not a bf16 value"):
        fp8emu.mma(x, x, accumulation="hopper-bf16")
    with pytest.raises(ValueError, match="not a tensor-core model of fp16, bf16 or tf32 inputs"):
        fp8emu.mma(x, x, accumulation="hopper-mma-sync")


def ulp_distance(x, y):
    """|ordered(x) - ordered(y)| with the monotone integer image of float32 (NumPy int64)."""
    def ordered(v):
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, np.int64(-(2**31)) - i, i)
    return np.abs(ordered(x) - ordered(y))


def test_compare_counts_and_errors_match_numpy():
    rng = np.random.default_rng(5)
    y = rng.standard_normal(10000).astype(np.float32)
    x = y.copy()
    idx = rng.choice(10000, 40, replace=False)
    x[idx[:20]] = np.nextafter(x[idx[:20]], np.float32(np.inf))       # 1 ulp
    x[idx[20:25]] *= np.float32(1.001)                                # many ulps
    x[idx[25:30]] = np.nan                                            # NaN in x only
    y_nan = y.copy()
    y_nan[idx[30:33]] = np.float32(np.nan)
    x[idx[30:33]] = np.uint32(0x7FC00001).view(np.float32)            # NaN in both, other payload
    x[idx[33]] = -y_nan[idx[33]]                                      # sign flip
    r = fp8emu.compare(x, y_nan)
    ordinary = np.array([i for i in idx[:34] if not (np.isnan(x[i]) or np.isnan(y_nan[i]))])
    assert r.elements == 10000
    assert r.mismatches == 34
    assert r.nan_in_one == 5
    assert r.nan_payload == 3
    assert r.max_ulp == int(ulp_distance(x[ordinary], y_nan[ordinary]).max())
    diff = np.abs(x[ordinary].astype(np.float64) - y_nan[ordinary].astype(np.float64))
    assert r.max_abs_error == diff.max()
    assert r.max_rel_error == (diff / np.abs(y_nan[ordinary].astype(np.float64))).max()
    assert not r.identical
    same = fp8emu.compare(y, y.copy())
    assert same.identical and same.mismatches == 0 and same.max_ulp == 0
    zeros = fp8emu.compare(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert zeros.mismatches == 1 and zeros.max_ulp == 0


def test_compare_rejects_bad_arguments():
    with pytest.raises(ValueError, match="shapes differ"):
        fp8emu.compare(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="float32"):
        fp8emu.compare(np.zeros(3, np.float64), np.zeros(3, np.float64))
