"""TE's recipes through fp8emu.Quantizer: scale sequences against `fp8emu scale-trace` and against
TE's formulas worked in NumPy float32; codes against ml_dtypes (satfinite = clip, then round to
nearest even); block scales by hand; the recipes' GEMMs against NumPy."""

import ml_dtypes
import os

import numpy as np
import pytest

import fp8emu
from conftest import run_cli

E4M3_MAX = np.float32(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)
E5M2_MAX = np.float32(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max)


def satfinite_codes(v, fmt):
    """CUDA __NV_SATFINITE cast of float32 values: finite values clipped to +-max, then ml_dtypes'
    round to nearest even (NaN stays NaN; none here)."""
    t = ml_dtypes.float8_e4m3fn if fmt == "e4m3fn" else ml_dtypes.float8_e5m2
    mx = np.float32(ml_dtypes.finfo(t).max)
    return np.clip(np.asarray(v, np.float32), -mx, mx).astype(t).view(np.uint8)


def te_delayed_scales(amaxes, fp8_max, history_len, algo, margin):
    """TE's fused delayed-scaling update (delayed_scaling.cu kernel_bulk), step by step, in float32:
    the window holds the last history_len - 1 non-zero amaxes plus this one; scale = RN(RN(fp8_max *
    2^-margin) / amax) when amax is finite and > 0, else unchanged."""
    window, scale, out = [], np.float32(1), []
    target = np.float32(fp8_max) * np.float32(2.0 ** -margin)
    for r in map(np.float32, amaxes):
        if r != 0:
            m = max(window + [r]) if algo == "max" else r
            window = (window + [r])[-(history_len - 1):] if history_len > 1 else []
        else:
            m = np.float32(0) if algo == "max" else r
        if np.isfinite(m) and m > 0:
            scale = np.float32(target / m)
        out.append(scale)
    return out


AMAX = [1.0, 3.5, 0.25, 100.0, 0.0, 7.0, 2.0, 0.5, 0.5, 0.125]


@pytest.mark.parametrize("history_len,algo,margin", [(3, "max", 0), (1, "max", 0), (4, "most_recent", 0),
                                                     (3, "max", 2)])
def test_delayed_scaling_scales(cli, history_len, algo, margin):
    recipe = fp8emu.DelayedScaling(margin=margin, amax_history_len=history_len, amax_compute_algo=algo)
    fwd = fp8emu.Quantizer(recipe, "forward")
    got, prev = [], np.float32(1)
    for a in AMAX:
        x = np.float32([[a, -a / 2], [a / 8, 0.0]])
        q = fwd.quantize(x, "input")
        # The cast uses the scale of the previous update (delayed), with __NV_SATFINITE.
        assert q.scale == prev
        assert np.array_equal(q.rowwise_data.view(np.uint8), satfinite_codes(x * prev, "e4m3fn"))
        assert q.scale_inv == np.float32(1) / prev
        assert fwd.amax_history(role="input")[0] == np.float32(a)  # staging row, before the update
        fwd.update_scales()
        prev = np.float32(fwd.scale("input"))
        got.append(prev)
    want = te_delayed_scales(AMAX, E4M3_MAX, history_len, algo, margin)
    assert [float(g) for g in got] == [float(w) for w in want]
    csv = run_cli(cli, "scale-trace", "--recipe", "delayed", "--format", "e4m3", "--history-len", history_len,
                  "--algo", algo, "--margin", margin, "--amax", ",".join(map(str, AMAX)))
    rows = [line.split(",") for line in csv.strip().splitlines()[1:]]
    assert [float(np.float32(r[2])) for r in rows] == [float(g) for g in got]


def test_delayed_scaling_hybrid_backward_targets_e5m2():
    bwd = fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=2), "backward")
    assert bwd.format == "e5m2"
    bwd.quantize(np.float32([[3.0, -1.0]]), "grad_output")
    bwd.update_scales()
    assert bwd.scale("grad_output") == np.float32(E5M2_MAX / np.float32(3.0))
    with pytest.raises(ValueError, match="the backward quantizer casts only grad_output"):
        bwd.quantize(np.float32([[1.0]]), "input")  # a forward role


@pytest.mark.parametrize("pow2", [False, True])
def test_current_scaling(cli, pow2):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((7, 33)) * 3).astype(np.float32)
    q = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(use_power_2_scales=pow2), "forward").quantize(
        x, "weight", "both")
    amax = np.max(np.abs(x))
    scale = np.float32(E4M3_MAX / amax)  # TE compute_scale_from_amax: fp8_max / amax in fp32
    if pow2:
        scale = np.float32(2.0 ** np.floor(np.log2(scale)))  # rounded down to a power of two
    assert q.scale == scale and q.scale_inv == np.float32(1) / scale
    codes = satfinite_codes(x * scale, "e4m3fn")
    assert np.array_equal(q.rowwise_data.view(np.uint8), codes)
    assert np.array_equal(q.columnwise_data.view(np.uint8), codes.T)  # TE's cast-transpose
    assert q.rowwise_data.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    csv = run_cli(cli, "scale-trace", "--recipe", "current", "--format", "e4m3", *(["--pow2"] if pow2 else []),
                  "--amax", repr(float(amax)))
    assert np.float32(csv.strip().splitlines()[1].split(",")[2]) == scale


def e8m0_round_up(t):
    """TE float_to_e8m0 (ptx.cuh) for a positive normal fp32 t: biased exponent + (mantissa != 0)."""
    bits = np.float32(t).view(np.uint32)
    return int(bits >> 23) + (1 if bits & 0x7FFFFF else 0)


def test_mxfp8_blocks_by_hand():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 96)) * np.float32([[1], [40], [0.01]])).astype(np.float32)
    x[1, 40] = 8 * E4M3_MAX  # the rounding of amax * fl32(1/max) decides between 2^3 and 2^4
    q = fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(), "forward").quantize(x, "input", "both")
    assert q.mode == "block" and q.block == 32
    rcp = np.float32(1) / E4M3_MAX  # fl32(1 / fp8_max)
    for view, data, e8m0, scale_inv in ((x, q.rowwise_data, q.rowwise_e8m0, q.rowwise_scale_inv),
                                        (np.ascontiguousarray(x.T), q.columnwise_data, q.columnwise_e8m0,
                                         q.columnwise_scale_inv)):
        n, k = view.shape  # rows: K = 96, three blocks; columns: K = 3, one partial block
        nb = (k + 31) // 32
        assert data.shape == (n, k) and e8m0.shape == (n, nb)
        for r in range(n):
            for b in range(nb):
                blk = view[r, 32 * b:32 * b + 32]
                e = e8m0_round_up(np.max(np.abs(blk)) * rcp)
                assert e8m0[r, b] == e
                assert scale_inv[r, b] == np.float32(2.0 ** (e - 127))
                want = satfinite_codes(blk * np.float32(2.0 ** (127 - e)), "e4m3fn")
                assert np.array_equal(data[r, 32 * b:32 * b + 32].view(np.uint8), want)
    # That block: RN(8 max * fl32(1/max)) is 8 exactly (worked out: fl32(1/max) = 0x3B124925, and
    # 8 max times it is 8 + 3 * 2^-23, which rounds to 8), so the scale is 2^3 and the element
    # becomes the max exactly, not saturated.
    assert q.rowwise_e8m0[1, 1] == 127 + 3
    assert q.rowwise_data[1, 40].astype(np.float32) == E4M3_MAX


def test_float8_block_scaling_by_hand():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 300)) * 7).astype(np.float32)
    q = fp8emu.Quantizer(fp8emu.Float8BlockScaling(), "forward").quantize(x, "input")
    assert q.block == 128 and q.rowwise_scale_inv.shape == (5, 3)  # 300 = 128 + 128 + 44
    for r in range(5):
        for b in range(3):
            blk = x[r, 128 * b:128 * b + 128]
            scale = np.float32(2.0 ** np.floor(np.log2(E4M3_MAX / np.max(np.abs(blk)))))  # pow2 scales
            assert q.rowwise_scale_inv[r, b] == np.float32(1) / scale
            assert np.array_equal(q.rowwise_data[r, 128 * b:128 * b + 128].view(np.uint8),
                                  satfinite_codes(blk * scale, "e4m3fn"))
    # Weights: 128 x 128 tiles, one scale each, shared by the row-wise and column-wise views.
    w = (rng.standard_normal((130, 260)) * 2).astype(np.float32)
    qw = fp8emu.Quantizer(fp8emu.Float8BlockScaling(), "forward").quantize(w, "weight", "both")
    for ti in range(2):
        for tj in range(3):
            tile = w[128 * ti:128 * ti + 128, 128 * tj:128 * tj + 128]
            s = np.float32(2.0 ** np.floor(np.log2(E4M3_MAX / np.max(np.abs(tile)))))
            assert qw.rowwise_scale_inv[128 * ti, tj] == np.float32(1) / s
            assert qw.columnwise_scale_inv[128 * tj, ti] == np.float32(1) / s


def test_float8_block_scaling_mxfp8_gemms_is_te_blackwell_conversion():
    # TE on Blackwell (common/swizzle/swizzle_block_scaling.cu): the same codes; each power-of-two
    # scale_inv becomes the E8M0 code of its fp32 exponent field, `(bits >> 23) & 0xFF`, broadcast
    # to the four 1 x 32 blocks of its 128-block; the GEMM then runs on 32-blocks.
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((6, 300)) * 7).astype(np.float32)
    x[:, 3] *= 500
    w = (rng.standard_normal((130, 300)) * 2).astype(np.float32)
    hopper = fp8emu.Quantizer(fp8emu.Float8BlockScaling(), "forward")
    blackwell = fp8emu.Quantizer(fp8emu.Float8BlockScaling(mxfp8_gemms=True), "forward")
    for t, role in ((x, "input"), (w, "weight")):
        q128, q32 = hopper.quantize(t, role, "both"), blackwell.quantize(t, role, "both")
        assert q32.block == 32
        for view in ("rowwise", "columnwise"):
            assert np.array_equal(getattr(q32, view + "_data").view(np.uint8), getattr(q128, view + "_data").view(np.uint8))
            s128 = getattr(q128, view + "_scale_inv")
            k = t.shape[1] if view == "rowwise" else t.shape[0]  # the view's K
            code = (s128.view(np.uint32) >> 23) & 0xFF
            want = np.ldexp(np.float32(1), code.astype(np.int32) - 127).astype(np.float32)
            want = np.repeat(want, 4, axis=1)[:, :(k + 31) // 32]
            assert np.array_equal(getattr(q32, view + "_scale_inv"), want)
    with pytest.raises(ValueError, match="power-of-two scales"):
        fp8emu.Quantizer(fp8emu.Float8BlockScaling(mxfp8_gemms=True, use_f32_scales=True), "forward")
    # The GEMM sums 32-element partials: the product of the exact block partials in float64 matches
    # both to rounding, and the two GEMMs differ where a 128-block partial rounds.
    xq32, wq32 = blackwell.quantize(x, "input"), blackwell.quantize(w, "weight")
    xq128, wq128 = hopper.quantize(x, "input"), hopper.quantize(w, "weight")
    y32 = fp8emu.recipe.gemm(xq32, wq32, accumulation="fp32")
    y128 = fp8emu.recipe.gemm(xq128, wq128, accumulation="fp32")
    ref = np.zeros((6, 130), np.float32)
    a, b = xq32.rowwise_data.astype(np.float32), wq32.rowwise_data.astype(np.float32)
    for kb in range(10):
        p = np.zeros((6, 130), np.float32)
        for k in range(32 * kb, min(300, 32 * kb + 32)):
            p = p + np.outer(a[:, k], b[:, k]).astype(np.float32)
        s = np.outer(xq32.rowwise_scale_inv[:, kb], wq32.rowwise_scale_inv[:, kb]).astype(np.float32)
        ref = ref + p * s
    assert np.array_equal(y32, ref)
    assert not np.array_equal(y32, y128)


def test_quantize_cli_writes_te_blackwell_block_scales(cli, tmp_path):
    # `fp8emu quantize --recipe block --mxfp8-gemms`: TE's converted MXFP8 tensor, E8M0 codes
    # `(scale_inv bits >> 23) & 0xFF` of the 128-block scales broadcast to 1 x 32 blocks, as uint8.
    x = (np.random.default_rng(6).standard_normal((64, 300)) * 3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run_cli(cli, "quantize", "--recipe", "block", "--role", "weight", "--in", tmp_path / "x.npy", "--out", tmp_path / "h")
    run_cli(cli, "quantize", "--recipe", "block", "--role", "weight", "--mxfp8-gemms", "--in", tmp_path / "x.npy",
            "--out", tmp_path / "b")
    for view, k in (("rowwise", 300), ("columnwise", 64)):
        s128 = np.load(tmp_path / "h" / f"{view}_scale_inv.npy")
        e8m0 = np.load(tmp_path / "b" / f"{view}_scale_inv.npy")
        assert s128.dtype == np.float32 and e8m0.dtype == np.uint8
        want = np.repeat(((s128.view(np.uint32) >> 23) & 0xFF).astype(np.uint8), 4, axis=1)[:, :(k + 31) // 32]
        assert np.array_equal(e8m0, want)
        assert np.array_equal(np.load(tmp_path / "b" / f"{view}_data.npy"), np.load(tmp_path / "h" / f"{view}_data.npy"))


def test_per_tensor_gemm_is_the_scaled_gemm():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    w = rng.standard_normal((5, 64)).astype(np.float32)
    fwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward")
    xq, wq = fwd.quantize(x, "input"), fwd.quantize(w, "weight", "both")
    y = fp8emu.recipe.gemm(xq, wq, accumulation="exact")
    exact = xq.rowwise_data.astype(np.float64) @ wq.rowwise_data.astype(np.float64).T
    assert np.array_equal(y, exact.astype(np.float32) * np.float32(np.float32(xq.scale_inv) * np.float32(wq.scale_inv)))
    # dgrad-style read of the column-wise copy: D = dy W with W (5, 64) read as (64, 5).
    dy = fwd.quantize(rng.standard_normal((6, 5)).astype(np.float32), "input")
    dx = fp8emu.recipe.gemm(dy, wq, b_usage="columnwise", accumulation="exact")
    exact = dy.rowwise_data.astype(np.float64) @ wq.rowwise_data.astype(np.float64)
    assert np.array_equal(dx, exact.astype(np.float32) * np.float32(np.float32(dy.scale_inv) * np.float32(wq.scale_inv)))


def test_block_gemm_by_hand():
    # D[i,j] = sum over K-blocks b (increasing, fp32 from +0) of RN(P_b * RN(sa * sb)), P_b the
    # sequential fp32 sum of the block's exact products (include/fp8emu/emulation/block_quantize.hpp).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    w = (rng.standard_normal((2, 96)) * 10).astype(np.float32)
    fwd = fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(), "forward")
    xq, wq = fwd.quantize(x, "input"), fwd.quantize(w, "weight")
    d = fp8emu.recipe.gemm(xq, wq, accumulation="fp32")
    a, b = xq.rowwise_data.astype(np.float32), wq.rowwise_data.astype(np.float32)
    want = np.zeros((3, 2), np.float32)
    for i in range(3):
        for j in range(2):
            acc = np.float32(0)
            for blk in range(3):
                p = np.float32(0)
                for k in range(32 * blk, 32 * blk + 32):
                    p = np.float32(p + a[i, k] * b[j, k])
                s = np.float32(xq.rowwise_scale_inv[i, blk] * wq.rowwise_scale_inv[j, blk])
                acc = np.float32(acc + np.float32(p * s))
            want[i, j] = acc
    assert np.array_equal(d, want)
    # Another model sums each scale block's partial: the per-tensor GEMM of that model (fp8emu.gemm,
    # its hopper model reproduced on H200 recordings) over each block alone, composed as above.
    dh = fp8emu.recipe.gemm(xq, wq, accumulation="hopper")
    want_h = np.zeros((3, 2), np.float32)
    for blk in range(3):
        ks = slice(32 * blk, 32 * blk + 32)
        p = fp8emu.gemm(np.ascontiguousarray(xq.rowwise_data[:, ks]), np.ascontiguousarray(wq.rowwise_data[:, ks]),
                        accumulation="hopper")
        s = (xq.rowwise_scale_inv[:, blk][:, None] * wq.rowwise_scale_inv[:, blk][None, :]).astype(np.float32)
        want_h = (want_h + (p * s).astype(np.float32)).astype(np.float32)
    assert np.array_equal(dh, want_h)
    with pytest.raises(ValueError, match="promotion interval must be 0"):
        fp8emu.recipe.gemm(xq, wq, accumulation="hopper", promotion=128)


def test_recipe_errors_name_the_problem():
    for cls in (fp8emu.DelayedScaling, fp8emu.Float8CurrentScaling, fp8emu.MXFP8BlockScaling,
                fp8emu.Float8BlockScaling):  # TE's assert, at construction
        with pytest.raises(AssertionError, match="Pure E5M2 training is not supported"):
            cls(fp8_format=fp8emu.Format.E5M2)
    r = fp8emu.DelayedScaling()
    r.fp8_format = fp8emu.Format.E5M2  # set after construction: the C++ record refuses it
    with pytest.raises(ValueError, match="E5M2"):
        fp8emu.Quantizer(r)
    with pytest.raises(ValueError, match="amax_history_len"):
        fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=0))
    with pytest.raises(ValueError, match="unknown amax_compute_algo 'mean'"):
        fp8emu.Quantizer(fp8emu.DelayedScaling(amax_compute_algo="mean"))
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "sideways")
    with pytest.raises(TypeError, match="recipe must be"):
        fp8emu.Quantizer("delayed")
    fwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling())
    with pytest.raises(TypeError, match="x has dtype float64; quantizers take float32"):
        fwd.quantize(np.zeros((2, 2)), "input")
    with pytest.raises(ValueError, match="x has 1 dimensions"):
        fwd.quantize(np.zeros(4, np.float32), "input")
    with pytest.raises(ValueError, match="unknown role 'bias'"):
        fwd.quantize(np.zeros((2, 2), np.float32), "bias")
    with pytest.raises(ValueError, match="unknown usage 'diagonal'"):
        fwd.quantize(np.zeros((2, 2), np.float32), "input", "diagonal")
    with pytest.raises(ValueError, match="the forward quantizer casts only input and weight"):
        fwd.quantize(np.zeros((2, 2), np.float32), "grad_output")


def run_steps(recipe, amaxes, role="input"):
    """Cast one 2 x 2 tensor of each amax and update; returns (scales after each update, the final
    full state)."""
    fwd = fp8emu.Quantizer(recipe, "forward")
    scales = []
    for a in amaxes:
        fwd.quantize(np.float32([[a, -a / 2], [a / 8, 0.0]]), role)
        fwd.update_scales()
        scales.append(float(fwd.scale(role)))
    return scales, fwd._impl.state()


AMAX_SPECIAL = AMAX + [float("inf"), 3.0, float("nan"), 1e-40, 6.0]


@pytest.mark.parametrize("history_len,margin", [(3, 0), (1, 0), (5, 1)])
def test_callable_amax_compute_algo_equals_tes_python_path(history_len, margin):
    # A callable taking the (history_len, slots) history: TE's Python path. With the function
    # torch.max(h, dim=0) is, it must give what the named algorithm on TE's Python path
    # (fused_update=False) gives: scales and every history row, bit for bit.
    seen = []

    def amax_max(h):
        seen.append(h.shape)
        return np.max(h, axis=0)

    callable_recipe = fp8emu.DelayedScaling(amax_history_len=history_len, margin=margin, amax_compute_algo=amax_max)
    named = fp8emu.DelayedScaling(amax_history_len=history_len, margin=margin, fused_update=False)
    s1, (sc1, h1) = run_steps(callable_recipe, AMAX_SPECIAL)
    s2, (sc2, h2) = run_steps(named, AMAX_SPECIAL)
    assert np.array_equal(np.float32(s1).view(np.uint32), np.float32(s2).view(np.uint32))
    assert np.array_equal(sc1.view(np.uint32), sc2.view(np.uint32))
    assert np.array_equal(h1.view(np.uint32), h2.view(np.uint32))
    assert seen and all(shape == (history_len, 3) for shape in seen)  # forward: input, weight, output


def test_callable_sees_the_history_before_the_roll():
    rows = []
    recipe = fp8emu.DelayedScaling(amax_history_len=4, amax_compute_algo=lambda h: (rows.append(h[:, 0].copy()), h[0])[1])
    run_steps(recipe, [2.0, 5.0, 3.0])
    # Row 0 is this step's amax; earlier steps sit at the bottom after each roll (torch.roll(h, -1, 0)).
    assert [list(r) for r in rows] == [[2, 0, 0, 0], [5, 0, 0, 2], [3, 0, 2, 5]]


def test_scaling_factor_compute_algo_by_hand():
    # Power-of-two scales below fp8_max / amax, worked by hand: E4M3 max 448.
    def pow2(amax, scale, fp8_max, recipe):
        assert fp8_max == 448.0 and isinstance(recipe, fp8emu.DelayedScaling)
        out = scale.copy()
        ok = amax > 0
        out[ok] = np.exp2(np.floor(np.log2(fp8_max / amax[ok])))
        return out

    recipe = fp8emu.DelayedScaling(amax_history_len=1, scaling_factor_compute_algo=pow2)
    scales, _ = run_steps(recipe, [3.0, 0.0, 448.0, 0.01])
    # 448/3 = 149.3 -> 128; amax 0 keeps 128; 448/448 = 1 -> 1; 448/0.01 = 44800 -> 32768
    assert scales == [128.0, 128.0, 1.0, 32768.0]


def test_callables_errors():
    bad = fp8emu.DelayedScaling(amax_compute_algo=lambda h: np.zeros(7, np.float32))
    fwd = fp8emu.Quantizer(bad, "forward")
    fwd.quantize(np.ones((2, 2), np.float32), "input")
    before = [fwd.scale(r) for r in ("input", "weight")], fwd.amax_history("input").copy()
    with pytest.raises(ValueError, match="expected 3"):
        fwd.update_scales()
    # Nothing changed: the history did not roll, no scale was stored (TE computes before it stores).
    assert [fwd.scale(r) for r in ("input", "weight")] == before[0]
    assert np.array_equal(fwd.amax_history("input"), before[1]) and before[1][0] == 1.0

    def raises(amax, scale, fp8_max, recipe):
        raise ZeroDivisionError("user code")

    fwd = fp8emu.Quantizer(fp8emu.DelayedScaling(scaling_factor_compute_algo=raises), "forward")
    fwd.quantize(np.ones((2, 2), np.float32), "input")
    with pytest.raises(ZeroDivisionError, match="user code"):
        fwd.update_scales()
    assert fwd.amax_history("input")[0] == 1.0 and fwd.scale("input") == 1.0
    wrong = fp8emu.Quantizer(fp8emu.DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: s[:2]), "forward")
    with pytest.raises(ValueError, match="scaling_factor_compute_algo returned 2 value"):
        wrong.update_scales()


def test_recipes_reach_cpp_as_records_field_by_field():
    # Each Python recipe becomes the C++ record of its name (include/fp8emu/scaling/recipe.hpp), every
    # record field copied from the field of the same name (TE's), with the C++ parsers' checks.
    from dataclasses import fields
    from fp8emu.recipe import _record
    cases = [
        (fp8emu.DelayedScaling(margin=3, fp8_format=fp8emu.Format.E4M3, amax_history_len=7,
                               amax_compute_algo="most_recent", fused_update=False),
         {"margin": 3.0, "fp8_format": "e4m3", "amax_history_len": 7, "amax_compute_algo": "most_recent",
          "scaling_factor_compute_algo": None, "fused_update": False, "fnuz": False}),
        (fp8emu.Float8CurrentScaling(use_power_2_scales=True, amax_epsilon=0.5, fnuz=True),
         {"fp8_format": "hybrid", "use_power_2_scales": True, "amax_epsilon": 0.5, "fnuz": True}),
        (fp8emu.MXFP8BlockScaling(scale_rule="ocp"), {"fp8_format": "e4m3", "scale_rule": "ocp"}),
        (fp8emu.Float8BlockScaling(use_f32_scales=True, amax_epsilon=0.25),
         {"fp8_format": "e4m3", "use_f32_scales": True, "amax_epsilon": 0.25, "mxfp8_gemms": False}),
        (fp8emu.Float8BlockScaling(mxfp8_gemms=True),
         {"fp8_format": "e4m3", "use_f32_scales": False, "amax_epsilon": 0.0, "mxfp8_gemms": True}),
    ]
    for recipe, want in cases:
        rec = _record(recipe)
        assert rec.name == type(recipe)._kind
        # Every C++ field has its Python field: a field added on one side only fails here.
        assert set(rec.field_names()) <= {f.name for f in fields(recipe)}
        assert {n: getattr(rec, n) for n in rec.field_names()} == want
    # TE's callables reach the record (its C++ update calls them): amax_compute_algo as given.
    first_row = lambda h: h[0]  # noqa: E731
    assert _record(fp8emu.DelayedScaling(amax_compute_algo=first_row)).amax_compute_algo is first_row
    assert callable(_record(fp8emu.DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: s))
                    .scaling_factor_compute_algo)
    with pytest.raises(TypeError, match="scaling_factor_compute_algo must be a callable or None"):
        _record(fp8emu.DelayedScaling(scaling_factor_compute_algo=3))
    with pytest.raises(ValueError, match="unknown scale_rule 'floor'"):
        _record(fp8emu.MXFP8BlockScaling(scale_rule="floor"))
    with pytest.raises(TypeError, match="fused_update must be a bool"):
        _record(fp8emu.DelayedScaling(fused_update=1))
    with pytest.raises(TypeError, match="recipe must be"):
        _record(object())


def test_per_tensor_operands_have_no_block_scales():
    # A per-tensor operand has no block scales: None (reading them once divided by a block of 0).
    q = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward").quantize(np.ones((2, 3), np.float32), "input", "both")
    assert q.mode == "per_tensor" and q.block == 0
    for f in ("rowwise_scale_inv", "columnwise_scale_inv", "rowwise_e8m0", "columnwise_e8m0", "amax_rowwise",
              "amax_columnwise"):
        assert getattr(q, f) is None
    m = fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(), "forward").quantize(np.ones((2, 64), np.float32), "input", "rowwise")
    assert m.rowwise_scale_inv.shape == (2, 2) and m.rowwise_e8m0.shape == (2, 2)
    assert m.columnwise_scale_inv is None
    # One-level block scales: no tensor amax (NVFP4's two-level scales carry one per copy).
    assert m.amax_rowwise is None and m.amax_columnwise is None


def test_quantizers_holding_callables_are_collected():
    # The C++ hooks hold TE's callables; the garbage collector must see those references, or a
    # callable that refers back to its quantizer's owner makes a cycle nobody frees (and nanobind
    # reports leaked instances at exit).
    import gc
    import subprocess
    import sys
    import weakref

    class Owner:
        def __init__(self):
            self.q = fp8emu.Quantizer(fp8emu.DelayedScaling(amax_compute_algo=self.algo))

        def algo(self, h):
            return h.max(0)

    refs = []
    for _ in range(3):
        o = Owner()
        o.q.quantize(np.ones((2, 2), np.float32), "input")
        o.q.update_scales()
        refs.append(weakref.ref(o))
    del o
    gc.collect()
    assert all(r() is None for r in refs)
    script = ("import numpy as np, fp8emu\n"
              "q = fp8emu.Quantizer(fp8emu.DelayedScaling(amax_compute_algo=lambda h: h.max(0)))\n"
              "q.quantize(np.ones((2, 2), np.float32), 'input'); q.update_scales()\n")
    env = dict(os.environ, FP8EMU_LEAK_WARNINGS="1")  # nanobind's leak report, off by default
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "leaked" not in r.stderr, r.stderr
