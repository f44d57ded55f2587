"""TE's public surface in fp8emu.torch and fp8emu.recipe: every name a TE script imports exists; what
is modelled behaves as TE's (oracles: TE's recipe defaults and checks as written in
transformer_engine/common/recipe/__init__.py, PyTorch's own optimizers and checkpointing, the
functional path fp8emu.layers with TE's per-GEMM accumulation); what is not raises
NotImplementedError naming it, never AttributeError.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402
from fp8emu import layers, recipe  # noqa: E402

NAMES = [line.strip() for line in open(os.path.join(os.path.dirname(__file__), "data", "te_pytorch_names.txt"))
         if line.strip() and not line.startswith("#")]


def bits(t):
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_every_public_te_name_exists():
    assert len(NAMES) == 85
    missing = [n for n in NAMES if not hasattr(te, n)]
    assert not missing


@pytest.mark.parametrize("name", [n for n in NAMES])
def test_an_unmodelled_name_raises_not_implemented_naming_itself(name):
    obj = getattr(te, name)
    from fp8emu.torch import _unsupported
    if name in _unsupported.REASONS:
        with pytest.raises(NotImplementedError, match=name):
            obj()
    elif name in _unsupported.NAMESPACES:
        with pytest.raises(NotImplementedError, match=name):
            obj.anything  # noqa: B018
        assert not hasattr(obj, "anything")  # feature tests with hasattr see it missing
    else:  # modelled: a class, a function or a module of fp8emu's own
        assert obj.__module__.startswith("fp8emu") if hasattr(obj, "__module__") else obj.__name__.startswith("fp8emu")


def test_availability_probes_tell_the_truth():
    assert te.is_fp8_available() is True
    ok, why = te.is_fp8_available(return_reason=True)
    assert ok and "emulated" in why
    assert te.is_mxfp8_available() and te.is_fp8_block_scaling_available()
    ok, why = te.is_nvfp4_available(return_reason=True)
    assert ok and "emulated" in why
    assert te.is_bf16_available() is True and te.is_bf16_available(return_reason=True) == (True, "")
    assert te.get_device_compute_capability() == (9, 0)
    assert te.get_default_recipe() == fp8emu.DelayedScaling()


def test_recipe_module_has_tes_names_fields_and_checks():
    # Format values are TE's _FormatHelper(max_fwd, max_bwd).
    assert recipe.Format.HYBRID.value.max_fwd == 448 and recipe.Format.HYBRID.value.max_bwd == 57344
    assert recipe.Format.E4M3.value == (448, 448) and recipe.Format.E2M1.value.max_fwd == 6
    for cls in (recipe.DelayedScaling, recipe.Float8CurrentScaling, recipe.MXFP8BlockScaling,
                recipe.Float8BlockScaling):
        r = cls()
        assert isinstance(r, recipe.Recipe)
        assert r.fp8_dpa is False and r.fp8_mha is False and r.backward_override is None
    nv = recipe.NVFP4BlockScaling()
    assert nv.nvfp4() and nv.fp4_format == recipe.Format.E2M1 and nv.fp8_format == recipe.Format.E4M3
    # TE's QParams of NVFP4: RHT on inputs and gradients, 2D weights, SR on gradients.
    assert nv.fp4_quant_fwd_inp == recipe.QParams(random_hadamard_transform=True)
    assert nv.fp4_quant_fwd_weight == recipe.QParams(fp4_2d_quantization=True)
    assert nv.fp4_quant_bwd_grad == recipe.QParams(random_hadamard_transform=True, stochastic_rounding=True)
    assert recipe.NVFP4BlockScaling(disable_rht=True).fp4_quant_bwd_grad.random_hadamard_transform is False
    with pytest.raises(AssertionError, match="Only E4M3 is supported for NVFP4 scaling"):
        recipe.NVFP4BlockScaling(fp8_format=recipe.Format.HYBRID)
    assert recipe.DelayedScaling().delayed() and recipe.Float8CurrentScaling().float8_per_tensor_scaling()
    assert recipe.MXFP8BlockScaling().mxfp8() and recipe.Float8BlockScaling().float8_block_scaling()
    assert not recipe.DelayedScaling().mxfp8()
    cs = recipe.Float8CurrentScaling()
    assert cs.fp8_gemm_fprop == recipe.MMParams(use_split_accumulator=False)
    assert cs.fp8_gemm_dgrad.use_split_accumulator and cs.fp8_gemm_wgrad.use_split_accumulator
    assert cs.fp8_quant_fwd_inp == recipe.QParams(power_2_scale=False, amax_epsilon=0.0)
    assert recipe.MXFP8BlockScaling().margin == 0
    bs = recipe.Float8BlockScaling()
    assert (bs.x_block_scaling_dim, bs.w_block_scaling_dim, bs.grad_block_scaling_dim) == (1, 2, 1)
    assert bs.fp8_quant_fwd_weight.power_2_scale
    # TE's asserts, with TE's messages.
    with pytest.raises(AssertionError, match="2D by 2D block gemm not supported"):
        recipe.Float8BlockScaling(x_block_scaling_dim=2)
    with pytest.raises(AssertionError, match="Split accumulator required for fprop"):
        recipe.Float8BlockScaling(fp8_gemm_fprop=recipe.MMParams(False))
    with pytest.raises(AssertionError, match="Delayed scaling only supports backward_override=None"):
        recipe.DelayedScaling(backward_override="high_precision")
    with pytest.raises(AssertionError, match="NVTE_BACKWARD_OVERRIDE must be unset"):
        recipe.Float8CurrentScaling(backward_override="bogus")
    # What fp8emu does not model, by name.
    for make in (lambda: recipe.Float8CurrentScaling(backward_override="dequantized"),
                 lambda: recipe.Float8BlockScaling(x_block_scaling_dim=2, w_block_scaling_dim=1),
                 lambda: recipe.NVFP4BlockScaling(nvfp4_4over6="map_to_4"),
                 lambda: recipe.NVFP4BlockScaling(row_scaled_activation=True),
                 lambda: recipe.CustomRecipe(qfactory=None)):
        with pytest.raises(NotImplementedError):
            make()


def test_fp8_attention_recipes_are_refused_where_attention_runs():
    mha = te.MultiheadAttention(32, 4)
    x = randn(8, 2, 32, seed=1)
    with pytest.raises(NotImplementedError, match="fp8_dpa"):
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.DelayedScaling(fp8_dpa=True)):
            mha(x)
    lin = te.Linear(32, 16)  # modules without attention run under such a recipe
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.DelayedScaling(fp8_dpa=True)):
        lin(randn(8, 32))


def test_current_scaling_gemm_params_choose_the_accumulation():
    # fp8_gemm_fprop=MMParams(use_split_accumulator=True) is TE's promotion every 128 in fprop: the
    # functional path with promotion=128; the default is fast accumulation (promotion 0).
    torch.manual_seed(0)
    lin = te.Linear(512, 64)
    x = randn(32, 512, seed=2) * 3
    xs, ws, bs = x.numpy(), lin.weight.detach().numpy(), lin.bias.detach().numpy()
    outs = {}
    for split in (False, True):
        r = fp8emu.Float8CurrentScaling(fp8_gemm_fprop=recipe.MMParams(use_split_accumulator=split))
        with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=r):
            outs[split] = lin(x)
        want, _ = layers.linear_forward(xs, ws, bs, fp8emu.Quantizer(r, "forward"), training=False,
                                        promotion=128 if split else 0)
        assert np.array_equal(bits(outs[split]), bits(want))
    assert not np.array_equal(bits(outs[False]), bits(outs[True]))  # K = 512: the choice matters


def test_model_init_contexts():
    with te.fp8_model_init(enabled=False):
        lin = te.Linear(8, 4)
    assert lin.weight.dtype == torch.float32
    with te.quantized_model_init(enabled=False):
        pass
    with pytest.raises(NotImplementedError, match="FP8 primary weights"):
        with te.fp8_model_init(enabled=True):
            te.Linear(8, 4)


def test_checkpoint_is_torchs_outside_fp8_and_refused_inside():
    torch.manual_seed(0)
    lin = te.Linear(16, 8)
    x = randn(4, 16, seed=3).requires_grad_(True)
    y = te.checkpoint(lin, x)
    y.sum().backward()
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad, lin.weight.grad = None, None
    lin(x).sum().backward()
    assert np.array_equal(bits(gx), bits(x.grad)) and np.array_equal(bits(gw), bits(lin.weight.grad))
    with pytest.raises(NotImplementedError, match="fp8_autocast"):
        with te.fp8_autocast(enabled=True):
            te.checkpoint(lin, x)


def test_fused_adam_is_torchs_adamw_with_tes_arguments():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    opt_a = te.optimizers.FusedAdam(a.parameters(), lr=1e-2, weight_decay=0.1)
    opt_b = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    for s in range(3):
        x = randn(5, 8, seed=s)
        for m, o in ((a, opt_a), (b, opt_b)):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
    assert np.array_equal(bits(a.weight), bits(b.weight))
    with pytest.raises(RuntimeError, match="AMSGrad"):
        te.optimizers.FusedAdam(a.parameters(), amsgrad=True)
    with pytest.raises(NotImplementedError, match="master_weights"):
        te.optimizers.FusedAdam(a.parameters(), master_weights=True)
    for name in ("MultiTensorApply", "multi_tensor_applier"):  # TE's other optimizers names
        with pytest.raises(NotImplementedError, match=name):
            getattr(te.optimizers, name)()


# ---- TE client patterns found by running TE's own examples (getting started, quickstart, te_llama,
# te_gemma) with the imports swapped

@pytest.mark.parametrize("act", ["gelu", "relu", "qgelu", "srelu", "silu", "glu", "geglu", "qgeglu", "reglu", "sreglu",
                                 "swiglu"])
def test_layernorm_mlp_takes_te_activations_with_te_layout(act):
    """TE's activation definitions (ops/basic/activation.py): the gated ones split FC1's 2 ffn outputs
    into a (first half, gated) and b; written out here with torch primitives."""
    gelu = lambda t: 0.5 * t * (1 + torch.tanh(0.7978845608028654 * (t + 0.044715 * t ** 3)))  # noqa: E731
    sig = torch.sigmoid
    unary = {"gelu": gelu, "relu": lambda t: torch.clamp(t, min=0), "qgelu": lambda t: t * sig(1.702 * t),
             "srelu": lambda t: torch.clamp(t, min=0) ** 2, "silu": lambda t: t * sig(t)}
    gated = {"glu": sig, "geglu": gelu, "qgeglu": unary["qgelu"], "reglu": unary["relu"], "sreglu": unary["srelu"],
             "swiglu": unary["silu"]}
    torch.manual_seed(3)
    mlp = te.LayerNormMLP(16, 32, activation=act)
    assert mlp.fc1_weight.shape == ((64 if act in gated else 32), 16) and mlp.fc2_weight.shape == (16, 32)
    x = randn(8, 16, seed=4)
    h = torch.nn.functional.layer_norm(x, (16,), mlp.layer_norm_weight, mlp.layer_norm_bias, 1e-5)
    h = h @ mlp.fc1_weight.T + mlp.fc1_bias
    a = gated[act](h[:, :32]) * h[:, 32:] if act in gated else unary[act](h)
    want = a @ mlp.fc2_weight.T + mlp.fc2_bias
    torch.testing.assert_close(mlp(x), want, rtol=1e-5, atol=1e-5)
    with te.fp8_autocast(enabled=True):
        y = mlp(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and mlp.fc1_weight.grad.shape == mlp.fc1_weight.shape
    layer = te.TransformerLayer(32, 64, 4, activation=act, hidden_dropout=0.0, attention_dropout=0.0)
    assert layer.layernorm_mlp.fc1_weight.shape[0] == (128 if act in gated else 64)


def test_clamped_swiglu_refuses_in_every_module():
    for make in (lambda: te.LayerNormMLP(16, 24, activation="clamped_swiglu"),
                 lambda: te.TransformerLayer(32, 64, 4, activation="clamped_swiglu")):
        with pytest.raises(NotImplementedError, match="clamped_swiglu"):
            make()


def test_te_quantization_module_and_package_paths():
    from fp8emu.torch import quantization as q
    from fp8emu.torch.quantization import FP8GlobalStateManager, get_default_fp8_recipe
    assert isinstance(get_default_fp8_recipe(), fp8emu.DelayedScaling)
    ok, why = q.check_fp8_support()
    assert ok and "emulated" in why
    assert q.get_align_size_for_quantization(fp8emu.MXFP8BlockScaling()) == 32
    hybrid = fp8emu.DelayedScaling(fp8_format=fp8emu.Format.HYBRID)
    assert q.get_fp8_torch_dtype(hybrid) == torch.float8_e4m3fn
    assert q.get_fp8_torch_dtype(hybrid, fprop_tensor=False) == torch.float8_e5m2
    assert q.get_fp8_max(hybrid, fprop_tensor=False) == 57344
    assert not FP8GlobalStateManager.is_fp8_enabled()
    rec = fp8emu.Float8CurrentScaling()
    with te.autocast(enabled=True, recipe=rec, _graph=False):
        assert FP8GlobalStateManager.is_fp8_enabled() and FP8GlobalStateManager.get_fp8_recipe() is rec
    # import transformer_engine as te; te.pytorch.Linear; te.common.recipe.DelayedScaling
    assert fp8emu.pytorch is te and fp8emu.common.recipe.DelayedScaling is fp8emu.DelayedScaling
    with pytest.raises(AttributeError):
        fp8emu.no_such_name  # noqa: B018


def test_autocast_graph_leaves_the_scale_update_to_the_caller():
    torch.manual_seed(0)
    lin = te.Linear(16, 16)
    x = randn(16, 16, seed=1)
    with te.autocast(enabled=True, _graph=True):
        lin(x)
    scale, hist = lin._fwd_quantizer._impl.state()
    assert np.all(scale == 1.0) and hist[0].max() > 0  # amax recorded, scales not yet updated


# ---- TE's autocast state (quantization.py autocast_exit, add_fp8_tensors_to_global_buffer)

def _fwd_state(m):
    scale, hist = m._fwd_quantizer._impl.state()
    return scale.copy(), hist.copy()


def test_no_update_when_gradients_are_off():
    """TE updates at the outermost exit only when torch.is_grad_enabled() (autocast_exit)."""
    torch.manual_seed(0)
    lin = te.Linear(32, 32)
    x = randn(16, 32, seed=2) * 10
    ys = []
    with torch.no_grad():
        for _ in range(2):
            with te.autocast(recipe=fp8emu.DelayedScaling()):
                ys.append(lin(x))
    scale, hist = _fwd_state(lin)
    assert np.all(scale == 1.0) and hist[0].max() > 0  # amax recorded, never rolled
    assert torch.equal(ys[0], ys[1])
    with te.autocast(recipe=fp8emu.DelayedScaling()):  # with gradients: updated
        lin(x)
    assert not np.all(_fwd_state(lin)[0] == 1.0)


def test_every_registered_module_is_updated_at_each_update():
    """TE's global buffers: a module registered by an earlier FP8 forward takes part in every update,
    whether or not it ran. On TE's Python path (fused_update=False: torch.roll(h, -1, 0), row 0
    zeroed) its history rolls a zero row in; the fused kernel leaves a history whose row 0 is 0 as
    it is (core::delayed_update_slot_fused, TE's fused_amax_and_scale_update_after_reduction)."""
    x = randn(16, 16, seed=3)
    for fused in (False, True):
        torch.manual_seed(0)
        rec = fp8emu.DelayedScaling(amax_history_len=4, fused_update=fused)
        a, b = te.Linear(16, 16), te.Linear(16, 16)
        with te.autocast(recipe=rec):
            y = a(x) + b(x)
        y.sum().backward()
        _, hb1 = _fwd_state(b)
        hbb1 = b._bwd_quantizer._impl.state()[1].copy()
        assert hb1[-1].any() and hbb1[-1].any()
        for _ in range(2):
            with te.autocast(recipe=rec):
                y = a(x)
            y.sum().backward()
        _, hb3 = _fwd_state(b)
        hbb3 = b._bwd_quantizer._impl.state()[1]
        if fused:
            assert np.array_equal(hb3, hb1) and np.array_equal(hbb3, hbb1)
        else:  # two more rolls: the first step's amaxes moved from the last row up by two
            assert np.array_equal(hb3[-3], hb1[-1]) and not hb3[-2:].any() and not hb3[0].any()
            assert np.array_equal(hbb3[-3], hbb1[-1]) and not hbb3[-2:].any()
            # an outermost region with FP8 off updates nothing (TE: `enabled` at exit)
            with te.autocast(enabled=False, recipe=rec):
                a(x)
            assert np.array_equal(_fwd_state(b)[1], hb3)


def test_graph_capture_leaves_registration_and_updates_to_the_caller():
    from fp8emu.torch.quantization import FP8GlobalStateManager as M
    torch.manual_seed(0)
    lin = te.Linear(16, 16)
    x = randn(16, 16, seed=4)
    with te.autocast(enabled=True, _graph=True):
        assert M.fp8_graph_capturing()
        y = lin(x)
    y.sum().backward()
    assert not M.fp8_graph_capturing()
    assert np.all(_fwd_state(lin)[0] == 1.0) and np.all(lin._bwd_quantizer._impl.state()[0] == 1.0)
    assert not getattr(lin._fwd_quantizer, "_fp8emu_registered", False)
    with te.autocast(enabled=True):
        lin(x)  # registers
    M.reset()
    assert not getattr(lin._fwd_quantizer, "_fp8emu_registered", False)


def test_activations_round_once_in_low_precision():
    """TE's activation kernels compute in fp32 and round once (common/util/math.h)."""
    h = randn(64, 64, seed=5).to(torch.bfloat16)
    mlp_acts = __import__("fp8emu.torch.module.layernorm_mlp", fromlist=["_activate"])
    for act in ("qgelu", "swiglu", "geglu", "glu", "sreglu", "gelu", "silu"):
        got = mlp_acts._activate(act, h)
        want = mlp_acts._ACTIVATIONS[act](h.float()).to(torch.bfloat16)
        assert got.dtype == torch.bfloat16 and torch.equal(got, want), act
    nan = torch.tensor([float("nan"), -1.0, 2.0])
    for act, want in (("relu", [0.0, 0.0, 2.0]), ("srelu", [0.0, 0.0, 4.0])):
        assert torch.equal(mlp_acts._activate(act, nan), torch.tensor(want)), act  # TE: fmaxf(x, 0)


def test_layernorm_mlp_takes_te_positional_order_and_arguments():
    m = te.LayerNormMLP(16, 32, 1e-5, False)  # TE's 4th parameter is sequence_parallel
    assert m.fc1_bias is not None
    te.LayerNormMLP(16, 32, seq_length=8, micro_batch_size=2, set_parallel_mode=True, checkpoint=True,
                    return_layernorm_output_gathered=False)
    with pytest.raises(NotImplementedError, match="sequence_parallel"):
        te.LayerNormMLP(16, 32, 1e-5, True)
    with pytest.raises(ValueError, match="activation_params"):
        te.LayerNormMLP(16, 32, activation_params={"limit": 7.0})


def test_te_module_paths_import():
    import importlib
    assert importlib.import_module("fp8emu.pytorch") is te
    from fp8emu.common.recipe import DelayedScaling
    assert DelayedScaling is fp8emu.DelayedScaling
    from fp8emu.torch.fp8 import FP8GlobalStateManager, check_fp8_support, Format  # TE's older module
    assert check_fp8_support()[0] and Format is fp8emu.Format and FP8GlobalStateManager is not None
    from fp8emu.torch import quantization as q
    q.check_recipe_support(None)
    with pytest.raises(NotImplementedError, match="DType"):
        q.get_fp8_te_dtype(fp8emu.DelayedScaling())
    with pytest.raises(NotImplementedError, match="QuantizerRole"):
        q.QuantizerRole()
