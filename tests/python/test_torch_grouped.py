"""fp8emu.torch.GroupedLinear (TE's grouped GEMMs of MoE layers) against one fp8emu.torch.Linear per
group applied to that group's rows in the same fp8_autocast region (its own forward and backward
code path per group): outputs, every gradient and the scaling state, bit for bit, over steps."""

import copy
import io

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


RECIPES = [fp8emu.DelayedScaling(amax_history_len=4), fp8emu.Float8CurrentScaling(), fp8emu.MXFP8BlockScaling()]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: type(r).__name__)
def test_grouped_linear_is_one_linear_per_group(recipe):
    torch.manual_seed(0)
    grouped = te.GroupedLinear(3, 32, 16)
    singles = [te.Linear(32, 16) for _ in range(3)]
    with torch.no_grad():
        for i, lin in enumerate(singles):
            getattr(grouped, f"bias{i}").uniform_(-0.5, 0.5)
            lin.weight.copy_(getattr(grouped, f"weight{i}"))
            lin.bias.copy_(getattr(grouped, f"bias{i}"))
    assert [n for n, _ in grouped.named_parameters()] == ["weight0", "weight1", "weight2", "bias0", "bias1", "bias2"]
    m_splits = [16, 0, 32]  # an expert without tokens
    for step in range(3):
        x = torch.randn(48, 32) * (1 + step)
        xg, xs = x.clone().requires_grad_(), x.clone().requires_grad_()
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):  # one region each: each its own updates
            yg = grouped(xg, m_splits)
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            ys = torch.cat([lin(p) for lin, p in zip(singles, torch.split(xs, m_splits))])
        assert same(yg, ys)
        g = torch.randn_like(yg)
        yg.backward(g)
        ys.backward(g)
        assert same(xg.grad, xs.grad)
        for i, lin in enumerate(singles):
            assert same(getattr(grouped, f"weight{i}").grad, lin.weight.grad)
            assert same(getattr(grouped, f"bias{i}").grad, lin.bias.grad)
    if isinstance(recipe, fp8emu.DelayedScaling):
        meta = grouped.fp8_meta
        assert meta["scaling_fwd"].scale.shape == (9,) and meta["scaling_bwd"].scale.shape == (6,)
        for i in (0, 2):  # the groups with rows: their Linear's state
            lin = singles[i]
            assert same(meta["scaling_fwd"].scale[3 * i:3 * i + 3], lin.fp8_meta["scaling_fwd"].scale)
            assert same(meta["scaling_bwd"].amax_history[:, 2 * i:2 * i + 2], lin.fp8_meta["scaling_bwd"].amax_history)
        # The group without rows took part in every update (TE's one fp8_meta): its input history
        # holds zeros, its weight history the weight's amax (TE casts every group's weight).
        hist = meta["scaling_fwd"].amax_history
        assert float(hist[:, 3].abs().max()) == 0.0
        assert float(hist[-1, 4]) == float(grouped.weight1.detach().abs().max())


def test_grouped_linear_state_dict_deepcopy_and_errors():
    torch.manual_seed(1)
    grouped = te.GroupedLinear(2, 16, 8, bias=False)
    recipe = fp8emu.DelayedScaling(amax_history_len=8)
    x = torch.randn(32, 16)
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        grouped(x, [16, 16]).sum().backward()
    buf = io.BytesIO()
    torch.save(grouped.state_dict(), buf)
    buf.seek(0)
    restored = te.GroupedLinear(2, 16, 8, bias=False)
    restored.load_state_dict(torch.load(buf))
    twin = copy.deepcopy(grouped)
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        y = grouped(x, [16, 16])
        y2 = restored(x, [16, 16])
        y3 = twin(x, [16, 16])
    assert same(y, y2) and same(y, y3)  # the scales travel with the state
    with pytest.raises(ValueError, match="m_splits has 3 entries, expected num_gemms=2"):
        grouped(x, [8, 8, 16])
    with pytest.raises(ValueError, match="must be non-negative and add up to the input's 32 rows"):
        grouped(x, [16, 8])
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        with pytest.raises(AssertionError, match="FP8 execution requires"):
            grouped(x, [12, 20])  # 12 rows: not a multiple of 8
    out = grouped(x, [12, 20])  # without FP8 any split runs (torch's linear)
    assert out.shape == (32, 8)
    y, biases = te.GroupedLinear(2, 16, 8, return_bias=True)(x, [16, 16])
    assert len(biases) == 2 and y.shape == (32, 8)
