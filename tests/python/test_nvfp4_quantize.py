"""`fp8emu quantize --recipe nvfp4` against TE's NVFP4 arithmetic restated here in NumPy.

Oracles (none of them is fp8emu code):
  - Philox4x32-10 written here from its definition (Salmon et al., SC'11; the constants of
    Random123), checked against Random123's known-answer vectors (kat_vectors: philox4x32 10);
  - TE's state layout (common/util/curanddx.hpp: key = seed halves, counter = (subsequence << 64)
    + offset, one counter step per generate4, words x, y, z, w) and the loops of TE's tuned 1D
    NVFP4 kernel (cast/nvfp4/specialized/quantize_transpose_nvfp4_tuned_1D.cuh), simulated thread by
    thread in the order the kernel consumes its random words;
  - TE's scale arithmetic in the kernel's order (cast/nvfp4/core_nvfp4.cuh), in NumPy float32, with
    ml_dtypes for the E4M3 and E2M1 roundings; TE's software stochastic rounder
    (common/util/ptx.cuh stochastic_round_fp4_e2m1);
  - the Hadamard transform from its definition (Sylvester H16, TE's sign vector from
    pytorch/tensor/nvfp4_tensor.py), summed in float64 (exact for these inputs), rounded to fp32,
    then to bf16 by ml_dtypes; and torch's bf16 matmul, as TE's reference_nvfp4.py computes it.
"""

import subprocess

import ml_dtypes
import numpy as np
import pytest

F32 = np.float32
M32 = 0xFFFFFFFF

# ---------------------------------------------------------------------------------------- Philox


def philox4x32_10(ctr, key):
    """Philox4x32 with 10 rounds on Python ints: ctr 4 words, key 2 words -> 4 words."""
    x = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * x[0]
        p1 = 0xCD9E8D57 * x[2]
        x = [((p1 >> 32) ^ x[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ x[3] ^ k1) & M32, p0 & M32]
    return x


def test_philox_known_answers():
    # Random123 kat_vectors, philox4x32 10 (ctr, key -> out).
    assert philox4x32_10([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox4x32_10([M32] * 4, [M32] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox4x32_10([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


class TeStream:
    """One thread's words as TE's get_rbits hands them out: generate4 at (subsequence << 64) +
    offset + n, words x, y, z, w."""

    def __init__(self, seed, subsequence, offset):
        self.seed, self.sub, self.off, self.n, self.buf = seed, subsequence, offset, 0, []

    def word(self):
        if not self.buf:
            c = (self.sub << 64) + self.off + self.n
            self.n += 1
            self.buf = philox4x32_10([(c >> s) & M32 for s in (0, 32, 64, 96)], [self.seed & M32, self.seed >> 32])
        return self.buf.pop(0)


def te_tuned_kernel_bits(rows, cols, seed, offset, with_transpose):
    """The random byte of every element in TE's tuned 1D kernel, simulated thread by thread: returns
    (rowwise [rows, cols], columnwise [rows, cols] or None), each element's 8 bits."""
    rb = np.full((rows, cols), -1, np.int64)
    cb = np.full((rows, cols), -1, np.int64) if with_transpose else None
    gx, gy = -(-cols // 128), -(-rows // 128)

    def put(arr, r, c, v):
        if r < rows and c < cols:
            arr[r, c] = v

    for by in range(gy):
        for bx in range(gx):
            for t in range(128):
                st = TeStream(seed, t + bx * 128 + by * gx * 128, offset)
                lane, warp = t % 32, t // 32
                for s in range(4):
                    r0, c0 = by * 128 + 64 * (s // 2), bx * 128 + 64 * (s % 2)
                    tid_y, tid_x, bank = t // 4, t % 4, lane // 16
                    for it in range(2):
                        for w in range(2):
                            g = ((w + bank) * 8) % 16
                            for half in range(2):  # word A: columns g..g+3, word B: g+4..g+7
                                word = st.word()
                                for i in range(4):
                                    put(rb, r0 + tid_y + 32 * it, c0 + 16 * tid_x + g + 4 * half + i,
                                        (word >> (8 * i)) & 0xFF)
                    if with_transpose:
                        ty = (lane // 2 + warp) % 4
                        for w in range(2):
                            for e in range(2):
                                for half in range(2):
                                    word = st.word()
                                    for i in range(4):
                                        put(cb, r0 + 16 * ty + 8 * e + 4 * half + i, c0 + 2 * lane + w,
                                            (word >> (8 * i)) & 0xFF)
    return rb, cb


# --------------------------------------------------------------------------------- TE's arithmetic

FLT_MAX = np.finfo(F32).max
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], F32)


def e4m3_satfinite(v):
    return np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn)


def e2m1_rn_codes(v):
    """cvt.rn.satfinite.e2m1: clip to +-6, RNE by ml_dtypes; NaN -> +6 (code 7)."""
    q = np.clip(v, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return np.where(np.isnan(v), np.uint8(7), q)


def sr_software(v, bits8):
    """TE ptx::stochastic_round_fp4_e2m1 in float32: returns E2M1 codes."""
    u = (bits8.astype(F32) * F32(1 / 256))
    a = np.abs(v)
    step = np.where(a >= 4, F32(2), np.where(a >= 2, F32(1), F32(0.5))).astype(F32)
    t = (u * step + a).astype(F32)  # u * step exact: fmaf is one rounding
    step_t = np.where(t >= 4, F32(2), np.where(t >= 2, F32(1), F32(0.5))).astype(F32)
    with np.errstate(invalid="ignore"):
        q = np.minimum(np.floor(t / step_t) * step_t, F32(6))
    q = np.where(np.isnan(v), F32(6), q)
    q = np.where(np.signbit(v) & ~np.isnan(v), -q, q).astype(F32)
    return q.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def s_enc(amax):
    with np.errstate(divide="ignore", over="ignore"):
        s = np.minimum(F32(2688) / F32(amax), FLT_MAX).astype(F32)
    return F32(1) if (amax == 0 or s == 0) else s


def nvfp4_1d(x, amax, bits=None, tile=False):
    """TE's NVFP4 cast of x [n, k] (16-element blocks along k, or 16 x 16 tiles) under the tensor
    amax: E2M1 codes [n, k], E4M3 scale codes [n, k / 16]."""
    n, k = x.shape
    if k % 16 and not tile:  # a last partial block: zeros pad it without changing its amax
        pad = np.zeros((n, 16 - k % 16), F32)
        b = None if bits is None else np.concatenate([bits, np.zeros(pad.shape, bits.dtype)], axis=1)
        q, sc = nvfp4_1d(np.concatenate([x, pad], axis=1), amax, b)
        return q[:, :k], sc
    se = s_enc(amax)
    sd = (F32(1) / se).astype(F32)
    coef = (se * F32(1 / 6)).astype(F32)
    blocks = np.abs(x).reshape(n, k // 16, 16)
    bamax = np.fmax.reduce(blocks, axis=2).astype(F32)
    if tile:  # 16 x 16 tiles: one amax per tile, repeated on its rows
        t = np.fmax.reduce(bamax.reshape(n // 16, 16, k // 16), axis=1)
        bamax = np.repeat(t, 16, axis=0)
    sb = np.minimum((bamax * coef).astype(F32), FLT_MAX)
    sb_e4 = e4m3_satfinite(sb)
    with np.errstate(divide="ignore"):
        inv = np.minimum((F32(1) / (sb_e4.astype(F32) * sd).astype(F32)).astype(F32), FLT_MAX).astype(F32)
    v = (x * np.repeat(inv, 16, axis=1)).astype(F32)
    q = e2m1_rn_codes(v) if bits is None else sr_software(v, bits)
    return q, sb_e4.view(np.uint8)


def unpack(d, k):
    lo, hi = d & 0x0F, d >> 4
    return np.stack([lo, hi], axis=-1).reshape(d.shape[0], -1)[:, :k]


SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float64)


def rht_matrix():
    h = np.array([[1.0]])
    for _ in range(4):
        h = np.kron(h, np.array([[1.0, 1.0], [1.0, -1.0]]))
    return np.diag(SIGNS) @ h / 4


def rht_of_transpose(x):
    """bf16(RHT(x^T)) as float32 [cols, rows]: 16 consecutive rows of x (tokens) per group."""
    xt = x.T.astype(ml_dtypes.bfloat16).astype(np.float64)
    y = (xt.reshape(xt.shape[0], -1, 16) @ rht_matrix()).reshape(xt.shape)
    return y.astype(F32).astype(ml_dtypes.bfloat16).astype(F32)


def amax_of(x):
    return F32(np.fmax.reduce(np.abs(x).ravel()))


# --------------------------------------------------------------------------------------- the CLI


_RUNS = iter(range(10**6))


def run_quantize(cli, tmp_path, x, *args):
    src = tmp_path / "x.npy"
    np.save(src, x.astype(F32))
    out = tmp_path / f"q{next(_RUNS)}"
    subprocess.run([str(cli), "quantize", "--recipe", "nvfp4", "--in", str(src), "--out", str(out), *args],
                   check=True, capture_output=True, text=True)
    return {p.stem: np.load(p) for p in out.glob("*.npy")}


def bf16_randn(shape, seed, spread=1.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-spread, spread, shape))
    return x.astype(ml_dtypes.bfloat16).astype(F32)


def check_view(f, name, x, amax, bits=None, tile=False):
    q, s = nvfp4_1d(x, amax, bits, tile)
    np.testing.assert_array_equal(unpack(f[f"{name}_data"], x.shape[1]), q)
    np.testing.assert_array_equal(f[f"{name}_scale_inv"], s)
    assert f[f"amax_{name}"].view(np.uint32)[0] == np.array([amax], F32).view(np.uint32)[0]


SHAPES = [(64, 64), (128, 96), (256, 160), (96, 288)]


@pytest.mark.parametrize("shape", SHAPES)
def test_input_rowwise_and_hadamard_columnwise(cli, tmp_path, shape):
    x = bf16_randn(shape, 1 + shape[0])
    f = run_quantize(cli, tmp_path, x, "--role", "input")
    check_view(f, "rowwise", x, amax_of(x))
    y = rht_of_transpose(x)
    check_view(f, "columnwise", y, amax_of(y))


def test_hadamard_matches_torch_bf16_matmul():
    torch = pytest.importorskip("torch")
    x = bf16_randn((64, 48), 7)
    m = torch.tensor(rht_matrix(), dtype=torch.bfloat16)  # entries +-1/4: exact in bf16
    ref = (torch.tensor(x).to(torch.bfloat16).t().reshape(-1, 16) @ m).reshape(48, 64).float().numpy()
    np.testing.assert_array_equal(rht_of_transpose(x), ref)


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_tiles_and_1d(cli, tmp_path, shape):
    x = bf16_randn(shape, 2 + shape[1], spread=3.0)
    f = run_quantize(cli, tmp_path, x, "--role", "weight")
    check_view(f, "rowwise", x, amax_of(x), tile=True)
    check_view(f, "columnwise", x.T.copy(), amax_of(x), tile=True)
    g = run_quantize(cli, tmp_path, x, "--role", "weight", "--no-2d")
    check_view(g, "rowwise", x, amax_of(x))
    check_view(g, "columnwise", x.T.copy(), amax_of(x))


@pytest.mark.parametrize("shape", [(64, 64), (128, 256), (256, 160)])
def test_grad_stochastic_rounding_with_hadamard(cli, tmp_path, shape):
    seed, offset = 0x1234_5678_9ABC_DEF0, 3 * 1024
    x = bf16_randn(shape, 3 + shape[0])
    f = run_quantize(cli, tmp_path, x, "--role", "grad", "--seed", str(seed), "--offset", str(offset))
    rb, _ = te_tuned_kernel_bits(*shape, seed, offset, with_transpose=False)
    check_view(f, "rowwise", x, amax_of(x), bits=rb)
    y = rht_of_transpose(x)  # the second launch: its own state, one draw (1024) later
    cb, _ = te_tuned_kernel_bits(*y.shape, seed, offset + 1024, with_transpose=False)
    check_view(f, "columnwise", y, amax_of(y), bits=cb)


def test_grad_stochastic_rounding_without_hadamard(cli, tmp_path):
    shape, seed, offset = (128, 192), 42, 0
    x = bf16_randn(shape, 4)
    f = run_quantize(cli, tmp_path, x, "--role", "grad", "--no-rht", "--seed", str(seed), "--offset", str(offset))
    rb, cb = te_tuned_kernel_bits(*shape, seed, offset, with_transpose=True)  # one launch, both copies
    check_view(f, "rowwise", x, amax_of(x), bits=rb)
    check_view(f, "columnwise", x.T.copy(), amax_of(x), bits=cb.T.copy())


def test_grad_round_to_nearest_and_draws_differ(cli, tmp_path):
    x = bf16_randn((64, 64), 5)
    f = run_quantize(cli, tmp_path, x, "--role", "grad", "--no-sr", "--no-rht")
    check_view(f, "rowwise", x, amax_of(x))
    a = run_quantize(cli, tmp_path, x, "--role", "grad", "--seed", "1", "--offset", "0")["rowwise_data"]
    b = run_quantize(cli, tmp_path, x, "--role", "grad", "--seed", "1", "--offset", "1024")["rowwise_data"]
    assert (a != b).mean() > 0.3  # another draw rounds other elements the other way


def test_sr_is_unbiased_between_neighbours():
    # The rounder's two outcomes for v between neighbours lo < v < hi: hi with probability
    # (v - lo) / (hi - lo) over the 256 byte values, exactly when v - lo is a multiple of step/256.
    for v, lo, hi in [(F32(0.75), 0.5, 1.0), (F32(2.25), 2.0, 3.0), (F32(5.0), 4.0, 6.0), (F32(1.125), 1.0, 1.5)]:
        q = sr_software(np.full(256, v, F32), np.arange(256)).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        assert set(np.unique(q)) <= {lo, hi}
        assert q.mean() == pytest.approx(float(v), abs=0)


def test_edges(cli, tmp_path):
    # All zero: amax 0 gives S_enc = 1, scales 0, codes 0.
    z = np.zeros((32, 32), F32)
    f = run_quantize(cli, tmp_path, z, "--role", "input", "--no-rht")
    check_view(f, "rowwise", z, F32(0))
    # A block 2^-22 below the tensor amax: its E4M3 scale underflows to 0, the multiplier is FLT_MAX
    # and its elements saturate to +-6 (TE's kernel); NaN and Inf elements.
    x = bf16_randn((32, 64), 6)
    x[0, :16] *= F32(2.0**-22)
    x[1, 3], x[2, 5], x[3, 7] = np.nan, np.inf, -np.inf
    f = run_quantize(cli, tmp_path, x, "--role", "input", "--no-rht")
    check_view(f, "rowwise", x, amax_of(x))
    assert f["rowwise_scale_inv"][0, 0] == 0
    # A tensor amax so small that 2688 / amax overflows: S_enc = FLT_MAX.
    t = bf16_randn((32, 32), 8) * F32(2.0**-120)
    f = run_quantize(cli, tmp_path, t, "--role", "input", "--no-rht")
    check_view(f, "rowwise", t, amax_of(t))


def test_swizzled_scales_follow_cublas_layout(cli, tmp_path):
    x = bf16_randn((200, 160), 9)  # 200 rows pad to 256, 10 scale columns to 12
    f = run_quantize(cli, tmp_path, x, "--role", "input", "--no-rht", "--swizzle")
    s = f["rowwise_scale_inv"]
    # torchao's to_blocked: pad, cut 128 x 4 blocks, each stored as 32 x 16 (rows r, r+32, r+64,
    # r+96 side by side).
    p = np.zeros((256, 12), np.uint8)
    p[:200, :10] = s
    blocks = p.reshape(2, 128, 3, 4).transpose(0, 2, 1, 3).reshape(-1, 4, 32, 4)
    ref = blocks.transpose(0, 2, 1, 3).reshape(-1, 32, 16).ravel()
    np.testing.assert_array_equal(f["rowwise_scale_inv_swizzled"].ravel(), ref)


def test_tokens_past_the_last_group_of_16_are_not_transformed(cli, tmp_path):
    # 40 tokens: two groups of 16 transformed, the last 8 rows passed through (the documented tail
    # rule; TE refuses such shapes).
    x = bf16_randn((40, 32), 12)
    f = run_quantize(cli, tmp_path, x, "--role", "input")
    y = np.concatenate([rht_of_transpose(x[:32]), x[32:].T], axis=1)
    check_view(f, "columnwise", y, amax_of(y))


def test_bad_input_is_one_clear_error(cli, tmp_path):
    src = tmp_path / "x.npy"
    np.save(src, np.zeros((32, 32), np.float16))
    r = subprocess.run([str(cli), "quantize", "--recipe", "nvfp4", "--role", "grad", "--in", str(src), "--out",
                        str(tmp_path / "q")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "neither float32 nor bfloat16" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "q").exists()
    np.save(src, np.zeros((32, 32), F32))
    for args, message in [(["--recipe", "mxfp8", "--no-rht"], "switches of --recipe nvfp4"),
                          (["--recipe", "nvfp4", "--role", "output"], "unknown --role 'output'"),
                          (["--recipe", "fp4"], "unknown recipe 'fp4'"),
                          (["--recipe", "block", "--swizzle"], "--swizzle writes cuBLAS's layout"),
                          (["--recipe", "nvfp4", "--seed", "18446744073709551616"], "not an integer in [0, 2^64 - 1]"),
                          (["--recipe", "nvfp4", "--offset", "-1"], "not an integer"),
                          (["--recipe", "nvfp4", "--format", "hybrid"], "does not apply to --recipe nvfp4")]:
        r = subprocess.run([str(cli), "quantize", *args, "--in", str(src), "--out", str(tmp_path / "q")],
                           capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert not (tmp_path / "q").exists() and not (tmp_path / "q.partial").exists()
    # An existing folder with files is refused (no stale fields beside new ones); an error while
    # writing leaves nothing.
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.npy").write_bytes(b"x")
    r = subprocess.run([str(cli), "quantize", "--recipe", "nvfp4", "--in", str(src), "--out", str(tmp_path / "full")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "exists and is not empty" in r.stderr
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["old.npy"]


def test_mxfp8_columnwise_copy_keeps_tes_layout(cli, tmp_path):
    # TE's MXFP8 column-wise copy: data in x's layout [R, C], scales [ceil(R / 32), C]; the row-wise
    # copy's scales [R, ceil(C / 32)]; the hybrid format's grads are E5M2.
    x = bf16_randn((70, 40), 13)
    src = tmp_path / "x.npy"
    np.save(src, x)
    out = tmp_path / "m"
    subprocess.run([str(cli), "quantize", "--recipe", "mxfp8", "--role", "grad", "--format", "hybrid", "--in",
                    str(src), "--out", str(out)], check=True, capture_output=True)
    f = {p.stem: np.load(p) for p in out.glob("*.npy")}
    assert f["rowwise_data"].shape == (70, 40) and f["rowwise_scale_inv"].shape == (70, 2)
    assert f["columnwise_data"].shape == (70, 40) and f["columnwise_scale_inv"].shape == (3, 40)
    # Column c, rows 32 b ..: E8M0 scale 2^(code - 127) times E5M2 codes gives x within E5M2's precision.
    dec = f["columnwise_data"].view(ml_dtypes.float8_e5m2).astype(np.float64)
    scale = np.exp2(np.repeat(f["columnwise_scale_inv"].astype(np.float64) - 127, 32, axis=0)[:70])
    np.testing.assert_allclose(dec * scale, x, rtol=2**-2, atol=1e-30)


# ------------------------------------------------------------------------------------ Python API


def test_python_quantizer_gives_tes_fields():
    import fp8emu

    x = bf16_randn((128, 64), 11)
    q = fp8emu.Quantizer(fp8emu.NVFP4BlockScaling(), "backward")
    assert q.format == "e2m1fn"
    q.set_rng_state(99, 2048)
    assert q.rng_state == (99, 2048)
    t = q.quantize(x, "grad_output", "both")
    assert q.rng_state == (99, 2048 + 2 * 1024)  # a second draw for the transformed column-wise copy
    rb, _ = te_tuned_kernel_bits(128, 64, 99, 2048, with_transpose=False)
    codes, scales = nvfp4_1d(x, amax_of(x), bits=rb)
    np.testing.assert_array_equal(t.rowwise_data.view(np.uint8), codes)
    np.testing.assert_array_equal(np.asarray(t.rowwise_scale_inv, F32),
                                  scales.view(ml_dtypes.float8_e4m3fn).astype(F32))
    assert t.amax_rowwise == amax_of(x)
    y = rht_of_transpose(x)
    assert t.amax_columnwise == amax_of(y)
    cb, _ = te_tuned_kernel_bits(64, 128, 99, 3072, with_transpose=False)
    np.testing.assert_array_equal(t.columnwise_data.view(np.uint8), nvfp4_1d(y, amax_of(y), bits=cb)[0])
    # Weights: 16 x 16 tiles; inputs round to nearest; the other recipes have no rng_state.
    f = fp8emu.Quantizer(fp8emu.NVFP4BlockScaling(), "forward")
    w = f.quantize(x, "weight", "rowwise")
    np.testing.assert_array_equal(w.rowwise_data.view(np.uint8), nvfp4_1d(x, amax_of(x), tile=True)[0])
    assert f.rng_state == (0, 0)
    assert fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(), "backward").rng_state is None
    with pytest.raises(ValueError, match="only NVFP4BlockScaling"):
        fp8emu.Quantizer(fp8emu.DelayedScaling(), "backward").set_rng_state(1, 0)
    # A pickled quantizer continues the same stream.
    import pickle

    q2 = pickle.loads(pickle.dumps(q))
    assert q2.rng_state == q.rng_state
    np.testing.assert_array_equal(q2.quantize(x, "grad_output").rowwise_data.view(np.uint8),
                                  q.quantize(x, "grad_output").rowwise_data.view(np.uint8))


def test_torch_linear_trains_under_nvfp4():
    torch = pytest.importorskip("torch")
    import fp8emu
    import fp8emu.torch as te

    def run():
        torch.manual_seed(0)
        lin = te.Linear(64, 32)
        opt = torch.optim.SGD(lin.parameters(), lr=0.05)
        x, target = torch.randn(64, 64), torch.randn(64, 32)
        losses = []
        for _ in range(8):
            with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.NVFP4BlockScaling()):
                loss = torch.nn.functional.mse_loss(lin(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, lin.weight.detach().clone()

    losses, w = run()
    assert losses[-1] < losses[0]
    losses2, w2 = run()
    assert losses2 == losses and torch.equal(w, w2)  # seeded the same: the same bits


def test_mxfp8_even_rule_is_torchaos():
    # torchao's ScaleCalculationMode.EVEN (prototype/mx_formats/mx_tensor.py to_mx), its bit
    # operations on the fp32 amax restated: bits + 2^(22 - mbits), mantissa dropped, exponent - emax
    # (E4M3: 3 mantissa bits, emax 8). amax 496 = 1.1111b * 2^8 rounds up a binade; 480 does not.
    import fp8emu

    rng = np.random.default_rng(14)
    x = (rng.standard_normal((16, 256)) * np.exp(rng.uniform(-8, 8, (16, 1)))).astype(F32)
    x[0, :32], x[1, :32] = 496.0, 480.0
    t = fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(scale_rule="even"), "forward").quantize(x, "input")
    amax = np.abs(x).reshape(16, 8, 32).max(axis=2).astype(F32)
    bits = (amax.view(np.uint32).astype(np.int64) + (1 << (22 - 3))) & 0x7F800000
    want = np.clip((bits >> 23) - 8, 0, 254)
    assert want[0, 0] == 128 and want[1, 0] == 127
    np.testing.assert_array_equal(np.asarray(t.rowwise_e8m0).astype(np.int64), want)
    # Codes: x / 2^(code - 127), satfinite RNE (ml_dtypes after clipping to 448).
    scale = np.exp2(np.repeat(want.astype(np.float64) - 127, 32, axis=1)).astype(F32)
    ref = np.clip(x / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(t.rowwise_data.view(np.uint8), ref)
