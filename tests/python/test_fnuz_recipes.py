"""The per-tensor recipes with ROCm TE's FP8 types on MI300 (``fnuz=True``): E4M3FNUZ and E5M2FNUZ.

Oracles, none of them fp8emu code: ml_dtypes' float8_e4m3fnuz / float8_e5m2fnuz roundings (round to
nearest even) of values clipped to the format's max, with ROCm TE's rule for what does not round
(its hip_f8 cast with clip, transformer_engine/common/amd_detail/hip_f8_impl.h: finite overflow
clips to +-max, +-Inf and NaN become the NaN code 0x80); TE's scale arithmetic in NumPy float32
with fp8_max 240 (ROCm TE's fp8_dtype_max, recipe/delayed_scaling.cu) and 57344; float64 sums of
the decoded codes for the GEMM.
"""
import ml_dtypes
import numpy as np
import pytest

import fp8emu

E4M3FNUZ_MAX = np.float32(240.0)
E5M2FNUZ_MAX = np.float32(57344.0)


def rocm_codes(v, dtype, fmax):
    """ROCm TE's cast of float32 values v (already scaled): uint8 codes."""
    v = np.asarray(v, np.float32)
    clipped = np.clip(np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0), -fmax, fmax)
    codes = clipped.astype(dtype).view(np.uint8).copy()
    codes[~np.isfinite(v)] = 0x80  # FNUZ's one NaN
    return codes


def inputs(seed, shape):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.choice([1e-4, 1.0, 50.0], size=shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-30, -1e-30, 3e38]
    return x


def test_formats_follow_rocm_te():
    fwd = fp8emu.Quantizer(fp8emu.DelayedScaling(fnuz=True), "forward")
    bwd = fp8emu.Quantizer(fp8emu.DelayedScaling(fnuz=True), "backward")
    assert fwd.format == "e4m3fnuz" and bwd.format == "e5m2fnuz"  # HYBRID: E4M3 forward, E5M2 backward
    e4m3 = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(fnuz=True, fp8_format=fp8emu.Format.E4M3), "backward")
    assert e4m3.format == "e4m3fnuz"
    assert fp8emu.Quantizer(fp8emu.DelayedScaling(), "forward").format == "e4m3fn"


@pytest.mark.parametrize("direction,dtype,fmax", [("forward", ml_dtypes.float8_e4m3fnuz, E4M3FNUZ_MAX),
                                                  ("backward", ml_dtypes.float8_e5m2fnuz, E5M2FNUZ_MAX)])
def test_delayed_cast_and_update_are_rocm_te(direction, dtype, fmax):
    q = fp8emu.Quantizer(fp8emu.DelayedScaling(fnuz=True, amax_history_len=4, amax_compute_algo="most_recent"),
                         direction)
    role = "input" if direction == "forward" else "grad_output"
    x = inputs(1, (6, 40))
    # The first cast uses scale 1: values beyond the max clip, Inf and NaN become 0x80, -0 and
    # negative values that round to zero become +0 (no -0 in FNUZ).
    t = q.quantize(x, role, "both")
    want = rocm_codes(x, dtype, fmax)
    assert np.array_equal(t.rowwise_data.view(np.uint8), want)
    assert np.array_equal(t.columnwise_data.view(np.uint8), want.T)
    assert want.reshape(-1)[3] == 0 and want.reshape(-1)[6] == 0 and want.reshape(-1)[0] == 0x80
    # Counts: clipped finite values are saturated; +-Inf becomes NaN, so it is not (nan counts NaN inputs).
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore", over="ignore"):
        overflows = ~np.isfinite(x.astype(dtype).astype(np.float32))  # ml_dtypes' non-saturating cast
    assert t.stats["saturated"] == int(np.count_nonzero(finite & overflows)) > 0
    assert t.stats["nan"] == int(np.count_nonzero(np.isnan(x)))
    # TE's fused update: this amax is Inf (NaN ignored), so the scale stays.
    q.update_scales()
    assert np.float32(q.scale(role)) == np.float32(1.0)
    # A finite tensor: scale = fp8_max / amax in float32 with ROCm's fp8_max.
    x2 = inputs(3, (6, 40))
    x2.reshape(-1)[:8] = [3.0, -2.0, 0.5, -0.0, 0.0, 1e-30, -1e-30, 7.5]
    q.quantize(x2, role)
    q.update_scales()
    scale = np.float32(fmax / np.max(np.abs(x2)))
    assert np.float32(q.scale(role)) == scale
    t2 = q.quantize(x, role)
    with np.errstate(over="ignore"):  # 3e38 * scale overflows to Inf in float32, as on the GPU: NaN code
        scaled = x * scale
    assert np.array_equal(t2.rowwise_data.view(np.uint8), rocm_codes(scaled, dtype, fmax))


def test_current_scaling_uses_fnuz_max():
    q = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(fnuz=True), "forward")
    x = inputs(2, (5, 33))
    x.reshape(-1)[:2] = 7.0  # finite amax: Inf and NaN leave the tensor
    x.reshape(-1)[7] = 12.0
    t = q.quantize(x, "input")
    amax = np.float32(np.max(np.abs(x[np.isfinite(x)])))
    scale = np.float32(E4M3FNUZ_MAX / amax)  # TE compute_scale_from_amax, fp8_max 240
    assert np.float32(t.scale) == scale
    assert np.array_equal(t.rowwise_data.view(np.uint8), rocm_codes(x * scale, ml_dtypes.float8_e4m3fnuz, E4M3FNUZ_MAX))
    # Exactly one code reaches 240 (the amax element) and none is the NaN code but the NaN input.
    codes = t.rowwise_data.view(np.uint8)
    assert np.count_nonzero((codes & 0x7F) == 0x7F) == 1
    assert np.count_nonzero(codes == 0x80) == 1


def test_fnuz_gemm_is_the_scaled_exact_sum():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 96)).astype(np.float32)
    w = rng.standard_normal((5, 96)).astype(np.float32)
    dy = rng.standard_normal((7, 5)).astype(np.float32)
    fwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(fnuz=True), "forward")
    bwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(fnuz=True), "backward")
    xq, wq, dyq = fwd.quantize(x, "input"), fwd.quantize(w, "weight", "both"), bwd.quantize(dy, "grad_output")
    y = fp8emu.recipe.gemm(xq, wq, accumulation="exact")
    a = xq.rowwise_data.astype(np.float64)  # ml_dtypes decodes the FNUZ codes
    b = wq.rowwise_data.astype(np.float64)
    s = np.float32(np.float32(xq.scale_inv) * np.float32(wq.scale_inv))
    assert np.array_equal(y, (a @ b.T).astype(np.float32) * s)
    # dgrad: E5M2FNUZ x E4M3FNUZ, the hipBLASLt pair.
    dx = fp8emu.recipe.gemm(dyq, wq, b_usage="columnwise", accumulation="exact")
    ref = (dyq.rowwise_data.astype(np.float64) @ b).astype(np.float32)
    assert np.array_equal(dx, ref * np.float32(np.float32(dyq.scale_inv) * np.float32(wq.scale_inv)))
    # The models of the table run on FNUZ operands too; the mixed OCP x FNUZ pair is refused.
    assert fp8emu.recipe.gemm(xq, wq, accumulation="hopper").shape == (7, 5)
    ocp = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward").quantize(w, "weight")
    with pytest.raises(ValueError, match="mix OCP and FNUZ"):
        fp8emu.recipe.gemm(xq, ocp, accumulation="exact")



def test_torch_modules_run_fnuz():
    torch = pytest.importorskip("torch")
    import fp8emu.torch as te
    from fp8emu.torch import quantization

    recipe = fp8emu.DelayedScaling(fnuz=True)
    assert quantization.get_fp8_torch_dtype(recipe) == torch.float8_e4m3fnuz
    assert quantization.get_fp8_torch_dtype(recipe, fprop_tensor=False) == torch.float8_e5m2fnuz
    assert quantization.get_fp8_max(recipe) == 240.0 and quantization.get_fp8_max(recipe, False) == 57344
    torch.manual_seed(0)
    layer = te.Linear(64, 32)
    x = torch.randn(16, 64, requires_grad=True)
    outs = []
    for r in (recipe, fp8emu.DelayedScaling()):
        with te.autocast(enabled=True, recipe=r):
            y = layer(x)
        y.sum().backward()
        outs.append(y.detach().clone())
    assert torch.isfinite(outs[0]).all() and x.grad is not None
    assert not torch.equal(outs[0], outs[1])  # other formats, other bits


def test_quantize_cli_fnuz(cli, tmp_path):
    from conftest import run_cli
    x = inputs(4, (8, 24))
    x.reshape(-1)[:3] = [5.0, -9.0, 1.5]
    x[~np.isfinite(x)] = 0.0
    x.reshape(-1)[7] = 0.0  # a finite tensor
    np.save(tmp_path / "x.npy", x)
    run_cli(cli, "quantize", "--recipe", "current", "--fnuz", "--in", tmp_path / "x.npy", "--out", tmp_path / "q")
    scale = np.float32(E4M3FNUZ_MAX / np.max(np.abs(x)))
    assert np.load(tmp_path / "q" / "rowwise_scale_inv.npy")[0] == np.float32(1) / scale
    assert np.array_equal(np.load(tmp_path / "q" / "rowwise_data.npy"),
                          rocm_codes(x * scale, ml_dtypes.float8_e4m3fnuz, E4M3FNUZ_MAX))
