"""fp8emu.torch: TE's Linear / LayerNormLinear / fp8_autocast on fp8emu.

Run where PyTorch is importable (scripts/python-test does not install it; see docs/python.md),
skipped with the reason printed otherwise. Oracles: the module-free functional path
(fp8emu.layers), fp8emu's C++ nn::Linear / nn::LayerNormLinear through the extension (their own
forward/backward code), torch.nn.Linear / torch.nn.LayerNorm in fp32, TE's delayed-scaling update
worked in NumPy float32.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402
from fp8emu import _fp8emu, layers  # noqa: E402
from fp8emu.recipe import _record  # noqa: E402


def bits(t):
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def same(a, b):
    return np.array_equal(bits(a), bits(b))


def randn(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


RECIPES = [fp8emu.DelayedScaling(amax_history_len=4), fp8emu.Float8CurrentScaling(), fp8emu.MXFP8BlockScaling(),
           fp8emu.Float8BlockScaling()]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: type(r).__name__)
def test_linear_equals_functional_path_and_cpp_linear(recipe):
    n_in, n_out = 128, 256
    torch.manual_seed(0)
    m = te.Linear(n_in, n_out, bias=True)
    with torch.no_grad():
        m.bias.copy_(randn(n_out, scale=0.1, seed=1))
    w, b = m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()
    fwd, bwd = fp8emu.Quantizer(recipe, "forward"), fp8emu.Quantizer(recipe, "backward")
    cpp = _fp8emu.CppLinear(n_in, n_out, True, _record(recipe))
    cpp.set_params(w, b)
    for step in range(3):
        x = randn(2, 64, n_in, scale=1.0 + step, seed=10 + step).requires_grad_()  # (batch, seq, in)
        dy = randn(2, 64, n_out, scale=1e-3, seed=20 + step)
        m.zero_grad()
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = m(x)
        y.backward(dy)
        x2, dy2 = x.detach().reshape(-1, n_in).numpy(), dy.reshape(-1, n_out).numpy()
        # the functional path, same update points
        y_f, saved = layers.linear_forward(x2, w, b, fwd)
        fwd.update_scales()
        dx_f, dw_f, db_f = layers.linear_backward(dy2, saved, bwd)
        bwd.update_scales()
        # the C++ layer
        y_c = cpp.forward(x2, True)
        cpp.update_forward_scales()
        dx_c, dw_c, db_c = cpp.backward(dy2)
        cpp.update_backward_scales()
        assert y.shape == (2, 64, n_out) and x.grad.shape == x.shape
        for got, f, c in ((y.reshape(-1, n_out), y_f, y_c), (x.grad.reshape(-1, n_in), dx_f, dx_c),
                          (m.weight.grad, dw_f, dw_c), (m.bias.grad, db_f, db_c)):
            assert same(got, f) and same(got, c), (type(recipe).__name__, step)
        if isinstance(recipe, fp8emu.DelayedScaling):
            meta = m.fp8_meta
            assert same(meta["scaling_fwd"].amax_history, cpp.forward_state()[1])
            assert same(meta["scaling_fwd"].scale, cpp.forward_state()[0])
            assert same(meta["scaling_bwd"].amax_history, cpp.backward_state()[1])
            assert same(meta["scaling_bwd"].scale, cpp.backward_state()[0])


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("recipe", RECIPES[:2], ids=lambda r: type(r).__name__)
def test_layernorm_linear_equals_cpp(normalization, recipe):
    n_in, n_out = 96, 64
    torch.manual_seed(1)
    m = te.LayerNormLinear(n_in, n_out, normalization=normalization, eps=1e-5)
    with torch.no_grad():
        m.layer_norm_weight.copy_(1 + randn(n_in, scale=0.1, seed=2))
        if m.layer_norm_bias is not None:
            m.layer_norm_bias.copy_(randn(n_in, scale=0.1, seed=3))
        m.bias.copy_(randn(n_out, scale=0.1, seed=4))
    beta = None if m.layer_norm_bias is None else m.layer_norm_bias.detach().numpy().copy()
    cpp = _fp8emu.CppLayerNormLinear(normalization, n_in, n_out, True, _record(recipe), 1e-5, False)
    cpp.set_params(m.layer_norm_weight.detach().numpy().copy(), beta, m.weight.detach().numpy().copy(),
                   m.bias.detach().numpy().copy())
    for step in range(3):
        x = (randn(32, n_in, scale=3.0, seed=30 + step) + step).requires_grad_()
        dy = randn(32, n_out, scale=1e-2, seed=40 + step)
        m.zero_grad()
        with te.fp8_autocast(fp8_recipe=recipe):
            y = m(x)
        y.backward(dy)
        y_c = cpp.forward(x.detach().numpy(), True)
        cpp.update_forward_scales()
        dx_c, dg_c, dbeta_c, dw_c, db_c = cpp.backward(dy.numpy())
        cpp.update_backward_scales()
        assert same(y, y_c) and same(x.grad, dx_c) and same(m.layer_norm_weight.grad, dg_c)
        assert same(m.weight.grad, dw_c) and same(m.bias.grad, db_c)
        if beta is not None:
            assert same(m.layer_norm_bias.grad, dbeta_c)


def test_disabled_autocast_equals_torch_nn_linear():
    torch.manual_seed(2)
    m = te.Linear(40, 24)
    ref = torch.nn.Linear(40, 24)
    with torch.no_grad():
        ref.weight.copy_(m.weight)
        ref.bias.copy_(randn(24, seed=5))
        m.bias.copy_(ref.bias)
    x = randn(7, 40, seed=6)
    for ctx in (te.fp8_autocast(enabled=False), torch.enable_grad()):
        m.zero_grad()
        ref.zero_grad()
        with ctx:
            y, y_ref = m(x), ref(x)
        assert same(y, y_ref)
        y.square().sum().backward()
        y_ref.square().sum().backward()
        assert same(m.weight.grad, ref.weight.grad) and same(m.bias.grad, ref.bias.grad)
    ln = te.LayerNormLinear(40, 24)
    ref_ln = torch.nn.LayerNorm(40)
    with torch.no_grad():
        ref.weight.copy_(ln.weight)
        ref.bias.copy_(ln.bias)
    assert same(ln(x), ref(ref_ln(x)))


def test_amax_history_evolves_as_the_recipe_says():
    """TE's delayed scaling, worked in NumPy: forward scales change at fp8_autocast exit, backward
    ones at the end of the backward; scale = RN(fp8_max / max of the last L amaxes)."""
    L = 3
    recipe = fp8emu.DelayedScaling(amax_history_len=L)
    torch.manual_seed(3)
    m1, m2 = te.Linear(32, 48), te.Linear(48, 16)
    amax_x, amax_dy = [], []
    for step, mag in enumerate([1.0, 4.0, 0.5, 0.25, 2.0]):
        x = randn(8, 32, scale=mag, seed=50 + step)
        dy = randn(8, 16, scale=mag * 1e-3, seed=60 + step)
        with te.fp8_autocast(fp8_recipe=recipe):
            y = m2(m1(x))
            if step > 0:  # inside the context the scales are still those of the previous update
                assert m1.fp8_meta["scaling_fwd"].scale[0] == np.float32(448) / max(amax_x[-L:])
        y.backward(dy)
        amax_x.append(np.float32(x.abs().max().item()))
        amax_dy.append(np.float32(dy.abs().max().item()))
        assert m1.fp8_meta["scaling_fwd"].scale[0] == np.float32(448) / max(amax_x[-L:])
        assert m1.fp8_meta["scaling_fwd"].scale[1] == np.float32(448) / np.float32(m1.weight.abs().max().item())
        assert m2.fp8_meta["scaling_bwd"].scale[0] == np.float32(57344) / max(amax_dy[-L:])
        hist = m1.fp8_meta["scaling_fwd"].amax_history[:, 0].numpy()
        assert hist.shape == (L,) and hist[0] == 0
        assert sorted(hist[1:][hist[1:] > 0].tolist()) == sorted(float(a) for a in amax_x[-(L - 1):])


def test_backward_scales_update_once_after_the_whole_backward():
    """m1's backward state updates when the backward reaches the first module of the region (TE's
    reduce_and_update_bwd_fp8_tensors), after m2's backward cast, not before it."""
    recipe = fp8emu.DelayedScaling(amax_history_len=2)
    m1, m2 = te.Linear(16, 16), te.Linear(16, 16)
    x = randn(8, 16, seed=7)
    with te.fp8_autocast(fp8_recipe=recipe):
        y = m2(m1(x))
    y.sum().backward()
    s1, s2 = m1.fp8_meta["scaling_bwd"].scale[0].item(), m2.fp8_meta["scaling_bwd"].scale[0].item()
    assert s1 != 1.0 and s2 != 1.0  # both updated once the backward ended


def test_is_first_microbatch_caches_the_weight():
    recipe = fp8emu.DelayedScaling(amax_history_len=2)
    m = te.Linear(32, 16)
    x = randn(8, 32, seed=8)
    with te.fp8_autocast(fp8_recipe=recipe):
        y1 = m(x, is_first_microbatch=True)
        with torch.no_grad():
            m.weight.mul_(10)
        y2 = m(x, is_first_microbatch=False)  # the cached FP8 weight, not the new one
        y3 = m(x)
    assert same(y1, y2) and not same(y1, y3)
    with pytest.raises(RuntimeError):
        with te.fp8_autocast():
            te.Linear(16, 16)(randn(8, 16), is_first_microbatch=False)


def test_bf16_inputs_and_params():
    m = te.Linear(64, 32, params_dtype=torch.bfloat16)
    x = randn(8, 64, seed=9).to(torch.bfloat16).requires_grad_()
    with te.fp8_autocast(fp8_recipe=fp8emu.Float8CurrentScaling()):
        y = m(x)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and m.weight.grad.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    fwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward")
    y_f, _ = layers.linear_forward(x.detach().float().numpy(), m.weight.detach().float().numpy(),
                                   m.bias.detach().float().numpy(), fwd, training=False)
    assert torch.equal(y, torch.from_numpy(y_f).to(torch.bfloat16))


def test_return_bias_and_layernorm_output():
    m = te.LayerNormLinear(32, 16, return_bias=True, return_layernorm_output=True)
    x = randn(8, 32, seed=11).requires_grad_()
    with te.fp8_autocast():
        y, bias, ln = m(x)
    assert bias is m.bias and ln.shape == x.shape
    (y.sum() + ln.sum()).backward()
    assert x.grad is not None and m.layer_norm_weight.grad is not None


def test_small_model_trains():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(512, 32, generator=g)
    labels = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
    # The 4-class head is torch's (TE's FP8 GEMM needs out_features divisible by 8), as TE users keep it.
    model = torch.nn.Sequential(te.LayerNormLinear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    recipe = fp8emu.DelayedScaling(amax_history_len=16)
    losses = []
    for step in range(60):
        idx = torch.arange(step * 64, step * 64 + 64) % 512
        with te.fp8_autocast(fp8_recipe=recipe):
            loss = torch.nn.functional.cross_entropy(model(X[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-8:]) < 0.6 * np.mean(losses[:8]), losses


def test_errors():
    with pytest.raises(TypeError):
        te.Linear(8, 8, not_an_argument=1)
    with pytest.raises(NotImplementedError):
        te.Linear(8, 8, tp_size=2)
    with pytest.raises(NotImplementedError):
        te.Linear(8, 8, ub_overlap_ag=True)
    te.Linear(8, 8, sequence_parallel=False, tp_group=None, ub_overlap_rs=False)  # TE's defaults pass
    with pytest.raises(TypeError):
        with te.fp8_autocast(fp8_recipe="delayed"):
            pass
    with pytest.raises(ValueError):
        te.LayerNormLinear(8, 8, normalization="BatchNorm")
    assert not te.is_fp8_enabled()
    with te.fp8_autocast():
        assert te.is_fp8_enabled()
        with te.fp8_autocast(enabled=False):
            assert not te.is_fp8_enabled()


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_layernorm_mlp_equals_the_functional_path(activation):
    # LN + FC1 (LayerNormLinear's path), the activation in fp32 by PyTorch, FC2 (Linear's path), each
    # GEMM with its own quantizers, updated at TE's points: compared bit for bit with fp8emu.layers.
    hid, ffn = 64, 256
    recipe = fp8emu.DelayedScaling(amax_history_len=4)
    torch.manual_seed(0)
    m = te.LayerNormMLP(hid, ffn, activation=activation)
    assert [n for n, _ in m.named_parameters()] == ["layer_norm_weight", "layer_norm_bias", "fc1_weight", "fc1_bias",
                                                    "fc2_weight", "fc2_bias"]
    with torch.no_grad():
        m.layer_norm_weight.add_(randn(hid, scale=0.1, seed=1))
        m.layer_norm_bias.copy_(randn(hid, scale=0.1, seed=2))
        m.fc1_bias.copy_(randn(ffn, scale=0.1, seed=3))
        m.fc2_bias.copy_(randn(hid, scale=0.1, seed=4))
    p = {n: t.detach().numpy().copy() for n, t in m.named_parameters()}
    f1, b1, f2, b2 = (fp8emu.Quantizer(recipe, d) for d in ("forward", "backward", "forward", "backward"))
    act = te._ACTIVATIONS[activation]
    for step in range(3):
        x = randn(4, 16, hid, scale=1.0 + step, seed=10 + step).requires_grad_()
        dy = randn(4, 16, hid, scale=1e-3, seed=20 + step)
        m.zero_grad()
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = m(x)
        y.backward(dy)
        x2 = x.detach().reshape(-1, hid).numpy()
        h, s1, _ = layers.layernorm_linear_forward(x2, p["layer_norm_weight"], p["layer_norm_bias"], p["fc1_weight"],
                                                   p["fc1_bias"], f1)
        ht = torch.from_numpy(h).requires_grad_()
        a = act(ht)
        y2, s2 = layers.linear_forward(a.detach().numpy(), p["fc2_weight"], p["fc2_bias"], f2)
        f1.update_scales()
        f2.update_scales()
        assert same(y.reshape(-1, hid), y2)
        da, dw2, db2 = layers.linear_backward(dy.reshape(-1, hid).numpy(), s2, b2)
        a.backward(torch.from_numpy(da))
        dx, dgamma, dbeta, dw1, db1 = layers.layernorm_linear_backward(ht.grad.numpy(), s1, b1)
        b1.update_scales()
        b2.update_scales()
        assert same(x.grad.reshape(-1, hid), dx)
        for name, want in (("fc2_weight", dw2), ("fc2_bias", db2), ("fc1_weight", dw1), ("fc1_bias", db1),
                           ("layer_norm_weight", dgamma), ("layer_norm_bias", dbeta)):
            assert same(getattr(m, name).grad, want), name
        for part, fwd, bwd in (("fc1", f1, b1), ("fc2", f2, b2)):
            assert same(m.fp8_meta[part]["scaling_fwd"].amax_history, fwd._impl.state()[1])
            assert same(m.fp8_meta[part]["scaling_bwd"].scale, bwd._impl.state()[0])


def test_layernorm_mlp_without_fp8_is_torch_fp32_and_trains():
    torch.manual_seed(1)
    m = te.LayerNormMLP(32, 64, return_layernorm_output=True)
    x = randn(8, 32, seed=5)
    y, ln = m(x)
    ref_ln = torch.nn.functional.layer_norm(x, (32,), m.layer_norm_weight, m.layer_norm_bias, 1e-5)
    h = torch.nn.functional.gelu(torch.nn.functional.linear(ref_ln, m.fc1_weight, m.fc1_bias), approximate="tanh")
    assert same(ln, ref_ln) and same(y, torch.nn.functional.linear(h, m.fc2_weight, m.fc2_bias))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    target = randn(8, 32, seed=6)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.DelayedScaling()):
            out, _ = m(x)
        loss = torch.nn.functional.mse_loss(out, target)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match="unknown activation"):
        te.LayerNormMLP(8, 16, activation="swish")
