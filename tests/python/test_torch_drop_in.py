"""fp8emu.torch as a drop-in for TE scripts: what a training script does to a module besides calling it.

Each test is a failure a TE client met (copying, saving, averaging and compiling a model, a second
backward, checkpoints, a reassigned parameter, a non-float input). Oracles: PyTorch's own behaviour
(torch.nn.functional.linear's error, torch.nn.Linear, torch.optim.swa_utils), the same module's
eager or uncopied bits, and TE's checkpoint layout (``get_extra_state`` in
transformer_engine/pytorch/module/base.py: a uint8 tensor of a pickled dict).
"""

import copy
import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402


def bits(t):
    return np.ascontiguousarray(t.detach().numpy(), np.float32).view(np.uint32)


def same(a, b):
    return np.array_equal(bits(a), bits(b))


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


DELAYED = fp8emu.DelayedScaling(amax_history_len=4)
RECIPES = [DELAYED, fp8emu.Float8CurrentScaling(), fp8emu.MXFP8BlockScaling(), fp8emu.Float8BlockScaling()]


def train_step(m, recipe, seed, rows=16):
    x = randn(rows, m.in_features if hasattr(m, "in_features") else m.hidden_size, seed=seed).requires_grad_(True)
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        y = m(x)
    y.square().sum().backward()
    return y


def fp8_forward(m, recipe, seed=99, rows=16):
    x = randn(rows, m.in_features if hasattr(m, "in_features") else m.hidden_size, seed=seed)
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        return m(x)


@pytest.mark.parametrize("fp8", [False, True])
def test_a_non_float_input_gets_torchs_dtype_error(fp8):
    # TE's Linear on a Long tensor fails as torch's linear does; it once cast the weight to Long
    # and returned zeros.
    lin = te.Linear(4, 2)
    x = torch.tensor([[1, 2, 3, 4]])
    with pytest.raises(RuntimeError) as want:
        torch.nn.functional.linear(x, lin.weight)
    for m in (lin, te.LayerNormLinear(4, 2)):
        with pytest.raises(RuntimeError) as got, te.fp8_autocast(enabled=fp8, fp8_recipe=DELAYED):
            m(x)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("fp8", [False, True])
def test_layernorm_mlp_reads_reassigned_parameters(fp8):
    # A Parameter assigned to a TE name of LayerNormMLP is what its forward reads: the same bits as
    # copying the values into the old Parameter (the path that always worked).
    torch.manual_seed(0)
    a = te.LayerNormMLP(16, 32)
    b = copy.deepcopy(a)
    new = {"fc1_weight": randn(32, 16, seed=1) * 0.1, "fc2_weight": randn(16, 32, seed=2) * 0.1,
           "layer_norm_weight": randn(16, seed=3), "fc1_bias": randn(32, seed=4)}
    for name, v in new.items():
        setattr(a, name, torch.nn.Parameter(v.clone()))
        with torch.no_grad():
            getattr(b, name).copy_(v)
    x = randn(8, 16, seed=5)
    with torch.no_grad(), te.fp8_autocast(enabled=fp8, fp8_recipe=DELAYED):
        ya, yb = a(x), b(x)
    assert same(ya, yb)
    if not fp8:  # and the fp32 path is the composition of torch's functions on those parameters
        ln = torch.nn.functional.layer_norm(x, (16,), a.layer_norm_weight, a.layer_norm_bias, 1e-5)
        h = torch.nn.functional.gelu(torch.nn.functional.linear(ln, a.fc1_weight, a.fc1_bias), approximate="tanh")
        assert same(ya, torch.nn.functional.linear(h, a.fc2_weight, a.fc2_bias))
    # The parameters the optimizer sees are the ones the forward reads (their gradients are set).
    with te.fp8_autocast(enabled=fp8, fp8_recipe=DELAYED):
        a(x).sum().backward()
    assert a.fc1_weight.grad is not None and a.fc2_weight.grad is not None


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: type(r).__name__)
def test_copies_pickles_and_averages_after_fp8_steps(recipe):
    torch.manual_seed(0)
    for m in (te.Linear(32, 16), te.LayerNormLinear(32, 16), te.LayerNormMLP(32, 64)):
        train_step(m, recipe, 1)
        train_step(m, recipe, 2)
        want = fp8_forward(copy.deepcopy(m), recipe)  # forward on a copy leaves m's state alone
        c = copy.deepcopy(m)
        buf = io.BytesIO()
        torch.save(m, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        unpickled = pickle.loads(pickle.dumps(m))
        for other in (c, loaded, unpickled):
            assert same(fp8_forward(other, recipe), want), type(m).__name__
        avg = torch.optim.swa_utils.AveragedModel(m)
        avg.update_parameters(m)
        assert same(fp8_forward(avg.module, recipe), want)


def test_a_retained_graph_backs_up_twice():
    # backward(retain_graph=True) then backward(): the second pass reads the saved operands again.
    # Current scaling keeps no state, so the second gradient equals the first and they add exactly.
    torch.manual_seed(0)
    for m in (te.Linear(32, 16), te.LayerNormLinear(32, 16)):
        x = randn(16, 32, seed=1).requires_grad_(True)
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.Float8CurrentScaling()):
            y = m(x)
        y.sum().backward(retain_graph=True)
        g1, w1 = x.grad.clone(), m.weight.grad.clone()
        y.sum().backward()
        assert same(x.grad, 2 * g1) and same(m.weight.grad, 2 * w1)


def test_state_dict_holds_the_fp8_state_in_tes_layout():
    torch.manual_seed(0)
    m = te.Linear(32, 16)
    assert m.state_dict()["_extra_state"].numel() == 0  # before any FP8 forward: an empty uint8 tensor
    for s in (1, 2, 3):
        train_step(m, DELAYED, s)
    sd = m.state_dict()
    extra = sd["_extra_state"]
    assert extra.dtype == torch.uint8
    state = pickle.loads(extra.numpy().tobytes())
    assert state["recipe"] == DELAYED
    assert state["scale_fwd"].shape == (3,) and state["amax_history_fwd"].shape == (4, 3)
    assert state["scale_bwd"].shape == (2,) and state["amax_history_bwd"].shape == (4, 2)
    assert np.array_equal(state["scale_fwd"].numpy(), m.fp8_meta["scaling_fwd"].scale.numpy())
    assert np.array_equal(state["amax_history_bwd"].numpy(), m.fp8_meta["scaling_bwd"].amax_history.numpy())
    # A fresh module that loads it continues bit for bit (it once restarted from scale 1).
    m2 = te.Linear(32, 16)
    m2.load_state_dict(sd)
    assert same(fp8_forward(m2, DELAYED), fp8_forward(m, DELAYED))
    m.zero_grad(set_to_none=True)
    train_step(m, DELAYED, 4)
    train_step(m2, DELAYED, 4)
    assert same(m2.weight.grad, m.weight.grad)


def test_layernorm_mlp_checkpoint_has_both_gemms_slots():
    torch.manual_seed(0)
    m = te.LayerNormMLP(32, 64)
    train_step(m, DELAYED, 1)
    train_step(m, DELAYED, 2)
    state = pickle.loads(m.state_dict()["_extra_state"].numpy().tobytes())
    assert state["scale_fwd"].shape == (6,) and state["amax_history_fwd"].shape == (4, 6)
    assert state["scale_bwd"].shape == (4,) and state["amax_history_bwd"].shape == (4, 4)
    m2 = te.LayerNormMLP(32, 64)
    m2.load_state_dict(m.state_dict())
    assert same(fp8_forward(m2, DELAYED), fp8_forward(m, DELAYED))


def test_torch_compile_runs_the_eager_bits():
    # torch.compile traces around the FP8 modules (TE's no_torch_dynamo) and gives the eager bits.
    torch.manual_seed(0)
    model = torch.nn.Sequential(te.Linear(32, 64), torch.nn.GELU(), te.Linear(64, 16))
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="eager")
    x = randn(16, 32, seed=1)
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.Float8CurrentScaling()):
        assert same(compiled(x), eager(x))


def test_transformer_layer_checkpoint_resumes_bit_for_bit():
    # Every TE module of the layer saves its state (TE's keys); a fresh layer loading the
    # checkpoint gives the same next FP8 step.
    torch.manual_seed(0)
    layer = te.TransformerLayer(32, 64, 4, hidden_dropout=0.0, attention_dropout=0.0)
    x = randn(8, 2, 32, seed=1)
    for s in (1, 2):
        with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
            y = layer(randn(8, 2, 32, seed=s).requires_grad_(True))
        y.sum().backward()
    fresh = te.TransformerLayer(32, 64, 4, hidden_dropout=0.0, attention_dropout=0.0)
    fresh.load_state_dict(layer.state_dict())
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
        assert same(fresh(x), layer(x))


def test_tes_fp8_shape_rule_with_tes_message(monkeypatch):
    # TE refuses FP8 GEMMs whose rows are not a multiple of 8 or whose K is not a multiple of 16
    # (assert_dim_for_fp8_exec); a script that runs here must run on a GPU too.
    lin = te.Linear(100, 36)
    x = randn(7, 100)
    with pytest.raises(AssertionError, match=r"FP8 execution requires .* dims=\[7, 100\]"):
        with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
            lin(x)
    with pytest.raises(AssertionError, match=r"dims=\[36, 96\]"):  # the weight too
        with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
            te.Linear(96, 36)(randn(8, 96))
    lin(x)  # outside FP8: any shape, as TE
    monkeypatch.setenv("FP8EMU_TORCH_ANY_FP8_SHAPE", "1")  # the documented switch: the emulator takes any shape
    with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
        assert lin(x).shape == (7, 36)


def test_fp8_bias_is_rounded_to_bf16_as_te_casts_it():
    # TE casts an fp32 bias to bf16 for the FP8 GEMM's epilogue ("cuBLAS does not support FP8 GEMM
    # with FP32 bias", module/linear.py): y = RN(x W^T + bf16(b)). Oracle: the GEMM without bias
    # and ml_dtypes' bfloat16 rounding, added in float32.
    import ml_dtypes
    from fp8emu import layers
    recipe = fp8emu.Float8CurrentScaling()
    lin = te.Linear(32, 16)
    with torch.no_grad():
        lin.bias.copy_(randn(16, seed=4) * 1.2345)
    x = randn(16, 32, seed=5)
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        y = lin(x)
    y0, _ = layers.linear_forward(x.numpy(), lin.weight.detach().numpy(), None, fp8emu.Quantizer(recipe, "forward"),
                                  training=False)
    b16 = lin.bias.detach().numpy().astype(ml_dtypes.bfloat16).astype(np.float32)
    assert not np.array_equal(b16, lin.bias.detach().numpy())  # the rounding matters here
    assert np.array_equal(bits(y), (y0 + b16).view(np.uint32))


def test_a_script_holding_fp8_state_exits_silently():
    # A module-level model and an output whose graph saved FP8 operands, alive at exit: no
    # "nanobind: leaked instances" lines (about 20 before), and the exit status is 0.
    import subprocess
    import sys
    script = ("import torch, fp8emu.torch as te\n"
              "lin = te.Linear(32, 16)\n"
              "x = torch.randn(16, 32, requires_grad=True)\n"
              "with te.fp8_autocast(enabled=True):\n"
              "    y = lin(x)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("fp8", [False, True])
def test_tes_dtype_rule_outside_torch_autocast(fp8):
    # TE's set_activation_dtype: outside torch.autocast every parameter must have the input's dtype.
    lin = te.Linear(32, 16)
    with pytest.raises(AssertionError, match="Data types for parameters must match when outside of autocasted "
                                             "region.  Found input dtype: torch.bfloat16 and 'weight' dtype: "
                                             "torch.float32"):
        with te.fp8_autocast(enabled=fp8, fp8_recipe=DELAYED):
            lin(randn(16, 32).to(torch.bfloat16))


def test_torch_autocast_around_fp8_autocast_is_tes_activation_dtype():
    # Under torch.autocast(bf16) TE casts the input to bf16 before its FP8 cast, and the GEMM writes
    # bf16: the output is bf16, equal to the functional path on the bf16-rounded input, rounded to
    # bf16 (oracle for the input rounding: ml_dtypes).
    import ml_dtypes
    from fp8emu import layers
    recipe = fp8emu.Float8CurrentScaling()
    torch.manual_seed(0)
    lin = te.Linear(32, 16)
    x = randn(16, 32, seed=3).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16), te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        y = lin(x)
    assert y.dtype == torch.bfloat16
    xr = x.detach().numpy().astype(ml_dtypes.bfloat16).astype(np.float32)
    want, _ = layers.linear_forward(xr, lin.weight.detach().numpy(), lin.bias.detach().numpy(),
                                    fp8emu.Quantizer(recipe, "forward"), training=False)
    assert torch.equal(y, torch.from_numpy(want).to(torch.bfloat16))
    y.float().sum().backward()  # gradients reach the fp32 input and parameters in their dtypes
    assert x.grad.dtype == torch.float32 and lin.weight.grad.dtype == torch.float32
    # TE's wgrad comes out in the activation dtype: the fp32 gradient holds bf16 values.
    w = lin.weight.grad.numpy()
    assert np.array_equal(w, w.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_an_empty_input_gives_an_empty_output_and_casts_nothing():
    # No rows (an expert that got no tokens): torch's empty result, as nn.Linear gives it; the
    # weight is not cast, so no amax is recorded (it once recorded the weight's before failing).
    lin = te.Linear(32, 16)
    x = torch.zeros(0, 32, requires_grad=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
        y = lin(x)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert torch.equal(lin.weight.grad, torch.zeros_like(lin.weight))
    assert "scaling_fwd" not in lin.fp8_meta  # no FP8 state was made
    m = te.LayerNormLinear(32, 16, return_layernorm_output=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=DELAYED):
        y, ln = m(torch.zeros(0, 32))
    assert y.shape == (0, 16) and ln.shape == (0, 32) and "scaling_fwd" not in m.fp8_meta
