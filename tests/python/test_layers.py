"""fp8emu.layers (the FP8 Linear / LayerNormLinear as functions) against fp8emu's C++ layers.

Oracles: the C++ nn::Linear and nn::LayerNormLinear through the extension (their own forward and
backward code: a different path from the Python composition of quantizers and GEMMs), TE's
delayed-scaling update worked in NumPy float32, and NumPy's sequential float32 sums.
"""

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import _fp8emu, layers
from fp8emu.recipe import _record

RECIPES = {
    "delayed": fp8emu.DelayedScaling(amax_history_len=4),
    "delayed_most_recent": fp8emu.DelayedScaling(amax_history_len=3, amax_compute_algo="most_recent", margin=1),
    "current": fp8emu.Float8CurrentScaling(),
    "mxfp8": fp8emu.MXFP8BlockScaling(),
    "block": fp8emu.Float8BlockScaling(),
}


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def data(rng, rows, cols, scale=1.0):
    return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)


@pytest.mark.parametrize("name", list(RECIPES))
def test_linear_equals_cpp_linear(name):
    recipe = RECIPES[name]
    rng = np.random.default_rng(7)
    rows, n_in, n_out = 128, 128, 256
    w = data(rng, n_out, n_in, 0.05)
    b = data(rng, 1, n_out, 0.1)[0]
    fwd, bwd = fp8emu.Quantizer(recipe, "forward"), fp8emu.Quantizer(recipe, "backward")
    cpp = _fp8emu.CppLinear(n_in, n_out, True, _record(recipe))
    cpp.set_params(w, b)
    for step in range(4):
        x = data(rng, rows, n_in, 1.0 + step)  # a different amax each step
        dy = data(rng, rows, n_out, 1e-3 * (step + 1))
        y, saved = layers.linear_forward(x, w, b, fwd)
        fwd.update_scales()
        y_c = cpp.forward(x, True)
        cpp.update_forward_scales()
        dx, dw, db = layers.linear_backward(dy, saved, bwd)
        bwd.update_scales()
        dx_c, dw_c, db_c = cpp.backward(dy)
        cpp.update_backward_scales()
        for got, want in ((y, y_c), (dx, dx_c), (dw, dw_c), (db, db_c)):
            assert np.array_equal(bits(got), bits(want)), (name, step)
        st_f, st_b = fwd._impl.state(), bwd._impl.state()
        if st_f is not None:
            for mine, theirs in ((st_f, cpp.forward_state()), (st_b, cpp.backward_state())):
                assert np.array_equal(bits(mine[0]), bits(theirs[0]))
                assert np.array_equal(bits(mine[1]), bits(theirs[1]))


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("name", ["delayed", "current"])
def test_layernorm_linear_equals_cpp(normalization, name):
    recipe = RECIPES[name]
    rng = np.random.default_rng(11)
    rows, n_in, n_out = 64, 96, 160
    gamma = (1 + 0.1 * rng.standard_normal(n_in)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(n_in)).astype(np.float32) if normalization == "LayerNorm" else None
    w = data(rng, n_out, n_in, 0.05)
    b = data(rng, 1, n_out, 0.1)[0]
    fwd, bwd = fp8emu.Quantizer(recipe, "forward"), fp8emu.Quantizer(recipe, "backward")
    cpp = _fp8emu.CppLayerNormLinear(normalization, n_in, n_out, True, _record(recipe), 1e-5, False)
    cpp.set_params(gamma, beta, w, b)
    for step in range(3):
        x = data(rng, rows, n_in, 2.0) + np.float32(step)
        dy = data(rng, rows, n_out, 1e-2)
        y, saved, ln = layers.layernorm_linear_forward(x, gamma, beta, w, b, fwd, normalization=normalization)
        fwd.update_scales()
        y_c = cpp.forward(x, True)
        cpp.update_forward_scales()
        dx, dg, dbeta, dw, db = layers.layernorm_linear_backward(dy, saved, bwd)
        bwd.update_scales()
        dx_c, dg_c, dbeta_c, dw_c, db_c = cpp.backward(dy)
        cpp.update_backward_scales()
        for got, want in ((y, y_c), (dx, dx_c), (dg, dg_c), (dw, dw_c), (db, db_c)):
            assert np.array_equal(bits(got), bits(want)), (normalization, name, step)
        if beta is not None:
            assert np.array_equal(bits(dbeta), bits(dbeta_c))


def test_norm_output_read_as_bf16_rounds_a_nan_as_cuda_does():
    # Current scaling reads the norm's bf16 output. TE's norm writes it with CUDA's conversion, whose
    # host code (cuda_bf16.hpp: __float2bfloat16_rn through __internal_float2bfloat16) returns the
    # canonical NaN 0x7FFF for any NaN input, sign and payload dropped; the other values round to
    # nearest even (as ml_dtypes does).
    # The same bits on the host as on the GPU (Device::round_bf16) and in nn::LayerNormLinear.
    rng = np.random.default_rng(5)
    x = data(rng, 4, 32, 1.0)
    x[1, 3] = np.float32("nan")
    x[2, :] = -np.float32("nan")  # a NaN row: every output of the row is NaN
    gamma = np.ones(32, np.float32)
    w = data(rng, 8, 32, 0.1)
    fwd = fp8emu.Quantizer(RECIPES["current"], "forward")
    _, _, ln = layers.layernorm_linear_forward(x, gamma, None, w, None, fwd, normalization="RMSNorm")
    nan = np.isnan(ln)
    assert nan[1].all() and nan[2].all() and not nan[[0, 3]].any()
    assert (bits(ln[nan]) == 0x7FFF0000).all()
    finite = ln[~nan]
    assert np.array_equal(bits(finite), bits(finite.astype(ml_dtypes.bfloat16).astype(np.float32)))


def test_delayed_scaling_history_as_te_updates_it():
    """TE's update worked in NumPy: after step t, scale = RN(448 / max(amax of the last L steps)) and
    the history keeps the last L - 1 amaxes (row 0 cleared for the next step)."""
    L = 4
    recipe = fp8emu.DelayedScaling(amax_history_len=L)
    fwd, bwd = fp8emu.Quantizer(recipe, "forward"), fp8emu.Quantizer(recipe, "backward")
    rng = np.random.default_rng(3)
    w = data(rng, 32, 64, 0.1)
    amax_x, amax_dy = [], []
    for step, mag in enumerate([1.0, 8.0, 0.5, 0.25, 0.125, 3.0]):
        x = data(rng, 16, 64, mag)
        dy = data(rng, 16, 32, mag * 1e-3)
        _, saved = layers.linear_forward(x, w, None, fwd)
        fwd.update_scales()
        layers.linear_backward(dy, saved, bwd)
        bwd.update_scales()
        amax_x.append(np.float32(np.abs(x).max()))
        amax_dy.append(np.float32(np.abs(dy).max()))
        want_x = np.float32(448.0) / max(amax_x[-L:])
        want_dy = np.float32(57344.0) / max(amax_dy[-L:])
        assert fwd.scale("input") == want_x, step
        assert bwd.scale("grad_output") == want_dy, step
        h = fwd.amax_history("input")
        assert h[0] == 0
        assert sorted(h[1:][h[1:] > 0].tolist()) == sorted(float(a) for a in amax_x[-(L - 1):])
        assert fwd.scale("weight") == np.float32(448.0) / np.float32(np.abs(w).max())
        assert fwd.scale("output") == 1.0  # never cast: amax 0 keeps the old scale


def test_bias_grad_is_sequential_fp32_sum():
    rng = np.random.default_rng(5)
    dy = (rng.standard_normal((300, 7)) * np.exp(rng.uniform(-10, 10, (300, 1)))).astype(np.float32)
    want = np.zeros(7, np.float32)
    for row in dy:
        want = want + row
    assert np.array_equal(bits(layers.bias_grad(dy)), bits(want))
    # +0 start: a column of -0.0 sums to +0 (as the C++ loop)
    assert np.signbit(layers.bias_grad(np.full((3, 2), -0.0, np.float32))).sum() == 0


def test_cached_weight_is_not_recast():
    recipe = fp8emu.DelayedScaling(amax_history_len=2)
    fwd = fp8emu.Quantizer(recipe, "forward")
    rng = np.random.default_rng(1)
    x, w = data(rng, 8, 32), data(rng, 16, 32)
    y1, saved = layers.linear_forward(x, w, None, fwd)
    y2, _ = layers.linear_forward(x, w * 100, None, fwd, weight_q=saved.w_q)  # the weight argument is not read
    assert np.array_equal(bits(y1), bits(y2))


def test_bf16_norm_output_rounding_matches_ml_dtypes():
    x = np.array([1.00390625, 1.01171875, -3.3e-3, 65504.0], np.float32)
    assert np.array_equal(layers.round_to_bf16(x), x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_errors():
    fwd = fp8emu.Quantizer(fp8emu.DelayedScaling(), "forward")
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(TypeError):
        layers.linear_forward(x.astype(np.float64), np.zeros((2, 8), np.float32), None, fwd)
    with pytest.raises(ValueError):
        layers.linear_forward(x, np.zeros((2, 9), np.float32), None, fwd)
    with pytest.raises(ValueError):
        layers.linear_forward(x, np.zeros((2, 8), np.float32), np.zeros(3, np.float32), fwd)
    _, saved = layers.linear_forward(x, np.zeros((2, 8), np.float32), None, fwd)
    with pytest.raises(ValueError):
        layers.linear_backward(np.zeros((4, 3), np.float32), saved, fp8emu.Quantizer(fp8emu.DelayedScaling(), "backward"))
    with pytest.raises(ValueError):
        layers.layernorm_linear_forward(x, np.ones(8, np.float32), None, np.zeros((2, 8), np.float32), None, fwd,
                                        normalization="BatchNorm")


def test_errors_come_before_any_cast_and_change_no_state():
    # Every check of linear_forward / linear_backward runs before the first cast, so a call that
    # raises leaves delayed scaling's amax history as it was (all zero here: nothing was cast).
    rng = np.random.default_rng(7)
    x, w, b = data(rng, 8, 32, 100.0), data(rng, 16, 32, 100.0), data(rng, 1, 16)[0]

    def fresh():
        return fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=4), "forward")

    bad_calls = [
        (ValueError, "features", lambda q: layers.linear_forward(x[:, :16], w, b, q)),
        (ValueError, "bias", lambda q: layers.linear_forward(x, w, b[:8], q)),
        (TypeError, "bias has dtype", lambda q: layers.linear_forward(x, w, b.astype(np.float64), q)),
        (ValueError, "accumulation", lambda q: layers.linear_forward(x, w, b, q, accumulation="bogus")),
        (ValueError, "rows and features", lambda q: layers.linear_forward(x[:0], w, b, q)),
        (ValueError, "promotion", lambda q: layers.linear_forward(x, w, b, q, promotion=7)),
        # a weight cast by another recipe's or direction's quantizer
        (ValueError, "not a cast of the delayed forward quantizer",
         lambda q: layers.linear_forward(x, None, b, q, weight_q=fp8emu.Quantizer(
             fp8emu.MXFP8BlockScaling(), "forward").quantize(w, "weight", "both"))),
        (ValueError, "not a cast of the delayed forward quantizer",
         lambda q: layers.linear_forward(x, None, b, q, weight_q=fp8emu.Quantizer(
             fp8emu.DelayedScaling(), "backward").quantize(w, "grad_output", "both"))),
    ]
    for error, match, call in bad_calls:
        q = fresh()
        with pytest.raises(error, match=match):
            call(q)
        assert not q.amax_history("input").any() and not q.amax_history("weight").any(), match

    # Backward: a saved state of other layers' operands (it used to write past dx), a bad promotion
    # and a saved state of another recipe, each refused before dy's cast.
    fwd, bwd = fresh(), fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=4), "backward")
    _, saved = layers.linear_forward(x, w, b, fwd)
    wide = fresh().quantize(data(rng, 16, 4096), "weight", "both")
    dy = data(rng, 8, 16)
    mx_fwd = fp8emu.Quantizer(fp8emu.MXFP8BlockScaling(), "forward")
    _, mx_saved = layers.linear_forward(x, w, b, mx_fwd)
    for error, match, s, kw in [
        (ValueError, "features, the saved weight", layers.LinearSaved(saved.x_q, wide, 8, 32, 16, "hopper"), {}),
        (ValueError, "promotion", saved, {"promotion": -5}),
        (ValueError, "scaling modes", mx_saved, {}),
    ]:
        with pytest.raises(error, match=match):
            layers.linear_backward(dy, s, bwd, **kw)
        assert not bwd.amax_history("grad_output").any(), match
    with pytest.raises(TypeError, match="saved must be the LinearSaved"):
        layers.linear_backward(dy, None, bwd)
    with pytest.raises(TypeError, match="fwd must be an fp8emu.Quantizer"):
        layers.linear_forward(x, w, b, None)
    with pytest.raises(TypeError, match="ln_weight has dtype float64"):
        layers.layernorm_linear_forward(x, np.ones(32), None, w, b, fresh())
