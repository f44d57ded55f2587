"""The GPU path: fp8emu.cast / decode / gemm on PyTorch CUDA tensors against the CPU emulator.

Runs where PyTorch with CUDA and a usable GPU are present and this build of the module has CUDA
(``fp8emu.cuda_available()``); skipped with the reason otherwise, unless FP8EMU_REQUIRE_GPU=1
(scripts/gpu-check sets it), which turns a missing GPU into a failure. Every GPU result is compared
with the CPU emulator's result on the same inputs (copied to the host), bit for bit: FP8 codes
byte for byte; float32 values by their 32 bits, NaN positions included. The NaN *payload* of an fp32
operation is the FPU's choice (docs/gpu.md §Exactness): on an H200 every NaN the GPU returned was
0x7FFFFFFF, while x86 gives the default NaN 0xFFC00000 for 0 * Inf or Inf - Inf, so two NaNs are
equal here, the GPU's are checked to be 0x7FFFFFFF, and where the emulator defines the NaN (a NaN
code's decoded value) the CPU's must be 0x7FFFFFFF too.
"""

import os

import numpy as np
import pytest

import fp8emu
from fp8emu import _fp8emu

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the GPU path tests are skipped")

_REQUIRE = os.environ.get("FP8EMU_REQUIRE_GPU") == "1"
_WHY = None
if not torch.cuda.is_available():
    _WHY = "PyTorch sees no CUDA device"
elif not _fp8emu.cuda:
    _WHY = "this build of fp8emu has no CUDA (build the module with FP8EMU_ENABLE_CUDA=ON)"
elif not fp8emu.cuda_available():
    _WHY = "fp8emu cannot run its GPU kernels here: " + _fp8emu.cuda_why_not()
if _WHY is not None:
    if _REQUIRE:
        pytest.fail("FP8EMU_REQUIRE_GPU=1 but " + _WHY, pytrace=False)
    pytest.skip(_WHY, allow_module_level=True)

DEV = torch.device("cuda")
FORMATS = ["e4m3fn", "e5m2"]


def cuda(a):
    """A CUDA tensor holding the NumPy array a (same bytes)."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def host_bytes(t):
    """The bytes of a CUDA tensor as a NumPy uint8 array (float8 tensors viewed as uint8)."""
    if t.element_size() == 1:
        return t.view(torch.uint8).cpu().numpy()
    return t.cpu().numpy()


def assert_f32_bits_equal(gpu, cpu, what):
    """Every fp32 value bit for bit, except that two NaNs are equal whatever their sign and payload
    (docs/gpu.md, Exactness: an fp32 operation's NaN is the FPU's choice, x86 0xFFC00000 or the
    first NaN operand, NVIDIA GPUs 0x7FFFFFFF); NaN positions must match. Returns the number of NaN
    pairs whose bits differ."""
    g = np.ascontiguousarray(gpu, np.float32).view(np.uint32)
    c = np.ascontiguousarray(cpu, np.float32).view(np.uint32)
    gn, cn = np.isnan(gpu), np.isnan(cpu)
    assert np.array_equal(gn, cn), f"{what}: NaN positions differ at {np.argwhere(gn != cn)[:5].tolist()}"
    bad = np.argwhere((g != c) & ~gn)
    assert bad.size == 0, (f"{what}: {len(bad)} values differ; first at {bad[0].tolist()}: "
                           f"gpu {g[tuple(bad[0])]:#010x} cpu {c[tuple(bad[0])]:#010x}")
    # The GPU's arithmetic NaNs are its canonical one.
    assert np.all(g[gn] == 0x7FFFFFFF), f"{what}: a GPU NaN other than 0x7FFFFFFF"
    return int(np.count_nonzero((g != c) & gn))


def cast_inputs(fmt):
    """float32 inputs covering every code's value, the rounding midpoints and their neighbours, the
    overflow thresholds, signed zeros, fp32 subnormals, Inf and NaNs of several payloads, all 2^16
    bfloat16 bit patterns (the top halves of fp32) and random fp32 bit patterns."""
    codes = np.arange(256, dtype=np.uint8)
    values = fp8emu.decode(codes, fmt).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[:-1] + finite[1:]) / 2
    parts = [finite, mids, -mids, finite * 1.5, finite * 0.75, finite * 2.0 ** -3, finite * 2.0 ** 3]
    base = np.concatenate(parts).astype(np.float32)
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    info = fp8emu.format_info(fmt)
    special = np.array([0.0, -0.0, np.inf, -np.inf, info.max, -info.max, np.finfo(np.float32).max,
                        np.finfo(np.float32).tiny, 1e-45, -1e-45, 3.4e-39], np.float32)
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000], np.uint32)
    bf16_patterns = (np.arange(1 << 16, dtype=np.uint32) << 16) | 0x8001
    rng = np.random.default_rng(7)
    random_bits = rng.integers(0, 1 << 32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([near, special, nan_bits.view(np.float32), bf16_patterns.view(np.float32),
                           random_bits.view(np.float32)]).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scale", [1.0, 0.5, 3.0, 2.0 ** -10, 1e30])
def test_cast_equals_the_emulator(fmt, scale):
    x = cast_inputs(fmt)
    xd = cuda(x)
    q = fp8emu.cast(xd, fmt, scale=scale)
    assert q.device == xd.device and q.dtype == getattr(torch, f"float8_{fmt}") and q.shape == xd.shape
    expect = fp8emu.cast(x, fmt, scale=scale).view(np.uint8)
    got = host_bytes(q)
    bad = np.flatnonzero(got != expect)
    assert bad.size == 0, (f"{bad.size} codes differ; first x={x[bad[0]]!r} ({x.view(np.uint32)[bad[0]]:#010x}): "
                           f"gpu {got[bad[0]]:#04x} cpu {expect[bad[0]]:#04x}")


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 3, 7), (1025,), (64, 64)])
def test_cast_shapes_and_unaligned_views(shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 100).astype(np.float32)
    got = host_bytes(fp8emu.cast(cuda(x), "e4m3fn"))
    assert np.array_equal(got, fp8emu.cast(x, "e4m3fn").view(np.uint8))
    # An input that starts 4 bytes into an allocation (no float4 loads) and an odd length.
    big = cuda(np.concatenate([[0.0], x.ravel()]).astype(np.float32))
    got = host_bytes(fp8emu.cast(big[1:], "e5m2"))
    assert np.array_equal(got, fp8emu.cast(x.ravel(), "e5m2").view(np.uint8))


def test_cast_stats_and_amax_equal_the_emulator():
    # The per-tensor recipe cast (cast_transpose twin) against the CPU Quantizer: both copies, counts
    # and the amax recorded in the delayed-scaling history (scale 1 before any update).
    rng = np.random.default_rng(3)
    for rows, cols in [(1, 1), (33, 70), (128, 256), (5, 4), (64, 128)]:
        x = (rng.standard_normal((rows, cols)) * 300).astype(np.float32)
        x.ravel()[:: 7] = np.float32(np.nan)
        x.ravel()[3:: 11] = np.float32(1e-9)
        fwd = fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=4), "forward")
        qt = fwd.quantize(x, "input", "both")
        r, c, st = _fp8emu.cuda_cast_transpose(cuda(x), "e4m3fn", 1.0, True, True, 0, "torch")
        assert np.array_equal(host_bytes(r), qt.rowwise_data.view(np.uint8))
        assert np.array_equal(host_bytes(c), qt.columnwise_data.view(np.uint8))
        for k in ("count", "saturated", "underflow", "nan"):
            assert st[k] == qt.stats[k], (rows, cols, k)
        # TE's amax ignores NaN (fmaxf): an all-NaN tensor has amax 0.
        amax = np.float32(np.max(np.abs(x[~np.isnan(x)]), initial=0.0))
        assert np.float32(st["amax"]) == amax == np.float32(fwd.amax_history("input")[0])
        assert np.float32(_fp8emu.cuda_amax(cuda(x), 0)) == amax
        _codes, st2 = _fp8emu.cast(cuda(x), "e4m3fn", 1.0, "cuda", "", 0, False, None, 0, "torch")
        assert st2["amax"] == st["amax"] and st2["saturated"] == st["saturated"] and st2["nan"] == st["nan"]


def _same_quantized(a, b, what):
    """a: a QuantizedTensor on the GPU (CUDA tensors), b: the CPU one (NumPy)."""
    assert a.is_cuda and a.device == f"cuda:{torch.cuda.current_device()}" and not b.is_cuda, what
    for name in ("mode", "format", "rows", "cols", "usage", "block"):
        assert getattr(a, name) == getattr(b, name), (what, name)
    for name in ("scale", "scale_inv"):
        assert np.array_equal(np.float32(getattr(a, name)).view(np.uint32), np.float32(getattr(b, name)).view(np.uint32)), (what, name)
    for name in ("rowwise_data", "columnwise_data"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), (what, name)
        if x is not None:
            assert x.is_cuda and x.dtype == getattr(torch, f"float8_{a.format}"), (what, name, x.dtype)
            assert np.array_equal(host_bytes(x), y.view(np.uint8)), (what, name)
    for name in ("rowwise_scale_inv", "columnwise_scale_inv"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), (what, name)
        if x is not None:
            assert x.is_cuda and x.dtype == torch.float32, (what, name)
            assert_f32_bits_equal(x.cpu().numpy(), y, f"{what} {name}")
            # The E8M0 codes the CPU tensor carries are the exponent fields of the GPU's scale_inv.
            e = getattr(b, name.replace("scale_inv", "e8m0"))
            if e is not None:
                assert np.array_equal((x.cpu().numpy().view(np.uint32) >> 23).astype(np.uint8), e), (what, name)
    assert a.rowwise_e8m0 is None and a.columnwise_e8m0 is None, what
    assert a.stats == b.stats, what


# Each recipe with TE's defaults apart from a short history (the quantizer test varies them more).
RECIPES = {"delayed": lambda: fp8emu.DelayedScaling(amax_history_len=4), "current": fp8emu.Float8CurrentScaling,
           "mxfp8": fp8emu.MXFP8BlockScaling, "block": fp8emu.Float8BlockScaling}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_quantizer_on_cuda_tensors_equals_the_cpu_quantizer(recipe):
    # Every recipe, both directions: the same sequence of casts and scale updates on a CPU and a CUDA
    # copy of each tensor, with two quantizers from one recipe: the QuantizedTensors (codes, scales,
    # E8M0 codes, counts) and the delayed-scaling state bit for bit.
    make = {"delayed": lambda: fp8emu.DelayedScaling(amax_history_len=4, margin=1),
            "current": lambda: fp8emu.Float8CurrentScaling(use_power_2_scales=True),
            "mxfp8": fp8emu.MXFP8BlockScaling, "block": fp8emu.Float8BlockScaling}[recipe]
    rng = np.random.default_rng(17)
    for direction, roles in (("forward", ("input", "weight")), ("backward", ("grad_output",))):
        cpu_q, gpu_q = fp8emu.Quantizer(make(), direction), fp8emu.Quantizer(make(), direction)
        for step, (rows, cols) in enumerate([(67, 260), (128, 256), (1, 33), (256, 128)]):
            x = (rng.standard_normal((rows, cols)) * 10.0 ** (step - 1)).astype(np.float32)
            x.ravel()[5:: 13] = np.float32(np.nan)
            for role in roles:
                for usage in ("rowwise", "columnwise", "both"):
                    what = f"{recipe} {direction} {role} {usage} {rows}x{cols}"
                    _same_quantized(gpu_q.quantize(cuda(x), role, usage), cpu_q.quantize(x, role, usage), what)
            cpu_q.update_scales()
            gpu_q.update_scales()
            for role in roles:
                h, g = cpu_q.amax_history(role), gpu_q.amax_history(role)
                assert (h is None) == (g is None)
                if h is not None:
                    assert_f32_bits_equal(g, h, f"{recipe} amax_history {role}")
                    assert np.float32(gpu_q.scale(role)) == np.float32(cpu_q.scale(role))


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_gemm_of_gpu_operands_equals_the_cpu(recipe):
    # fprop, dgrad and wgrad of operands quantized on the GPU, computed there, against the same
    # GEMMs of the CPU operands, for the accumulation models the recipe takes.
    make = RECIPES[recipe]
    rng = np.random.default_rng(5)
    M, N, K = 67, 96, 260
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
    dy = (rng.standard_normal((M, N)) * 1e-3).astype(np.float32)
    qs = {}
    for dev in ("cpu", "gpu"):
        fwd, bwd = fp8emu.Quantizer(make(), "forward"), fp8emu.Quantizer(make(), "backward")
        put = cuda if dev == "gpu" else (lambda a: a)
        qs[dev] = (fwd.quantize(put(x), "input", "both"), fwd.quantize(put(w), "weight", "both"),
                   bwd.quantize(put(dy), "grad_output", "both"))
    models = [("hopper", 0), ("hopper", 128), ("fp32", 0), ("ada", 32)] if recipe in ("delayed", "current") \
        else [("fp32", 0)]
    for acc, promotion in models:
        for what, (ia, ua, ib, ub) in {"fprop": (0, "rowwise", 1, "rowwise"), "dgrad": (2, "rowwise", 1, "columnwise"),
                                       "wgrad": (2, "columnwise", 0, "columnwise")}.items():
            g = fp8emu.recipe.gemm(qs["gpu"][ia], qs["gpu"][ib], a_usage=ua, b_usage=ub, accumulation=acc,
                                   promotion=promotion)
            h = fp8emu.recipe.gemm(qs["cpu"][ia], qs["cpu"][ib], a_usage=ua, b_usage=ub, accumulation=acc,
                                   promotion=promotion)
            assert isinstance(g, torch.Tensor) and g.is_cuda and g.dtype == torch.float32
            assert_f32_bits_equal(g.cpu().numpy(), h, f"{recipe} {what} {acc}/{promotion}")
    with pytest.raises(TypeError, match="both operands must be on the same device"):
        fp8emu.recipe.gemm(qs["gpu"][0], qs["cpu"][1])


def test_quantizer_cuda_input_waits_for_its_stream():
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 100.0
    t = cuda(x)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    t2 = torch.zeros_like(t)
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # the side stream is busy for a while before it writes t2
        t2.copy_(t)
    q1, q2 = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward"), fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward")
    _same_quantized(q1.quantize(t2, "input", "both", stream=s), q2.quantize(x, "input", "both"), "side stream")
    with pytest.raises(TypeError, match="quantizers take float32"):
        q1.quantize(t.half(), "input")
    with pytest.raises(ValueError, match="2-D"):
        q1.quantize(t.ravel(), "input")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scale_inv", [1.0, 0.25, 3.0, 2.0 ** -20, float("inf")])
def test_decode_every_code_equals_the_emulator(fmt, scale_inv):
    codes = np.tile(np.arange(256, dtype=np.uint8), 5)
    y = fp8emu.decode(cuda(codes), fmt, scale_inv=scale_inv)
    assert y.device.type == "cuda" and y.dtype == torch.float32
    cpu = fp8emu.decode(codes, fmt, scale_inv=scale_inv)
    differ = assert_f32_bits_equal(y.cpu().numpy(), cpu, f"decode {fmt}")
    # NaN codes decode to CUDA's canonical NaN on both sides; the only NaN allowed to differ is the
    # product 0 * inf of a zero code with scale_inv = inf (x86's default NaN on the CPU).
    nan_code = np.isnan(fp8emu.decode(codes, fmt))
    assert np.all(cpu.view(np.uint32)[nan_code] == 0x7FFFFFFF)
    zero_code = fp8emu.decode(codes, fmt) == 0
    assert differ == (int(np.count_nonzero(zero_code)) if scale_inv == float("inf") else 0)
    # float8 tensors carry their format.
    t = cuda(codes).view(getattr(torch, f"float8_{fmt}"))
    assert_f32_bits_equal(fp8emu.decode(t).cpu().numpy(), fp8emu.decode(codes, fmt), f"decode float8 {fmt}")


def _operands(rng, m, n, k, fa, fb, specials):
    a = rng.integers(0, 256, size=(m, k), dtype=np.uint8)
    b = rng.integers(0, 256, size=(n, k), dtype=np.uint8)
    if not specials:  # finite codes only: replace NaN/Inf codes by zero
        for arr, f in ((a, fa), (b, fb)):
            v = fp8emu.decode(arr, f)
            arr[~np.isfinite(v)] = 0
    return a, b


GEMM_CASES = [
    # (M, N, K, accumulation, promotion, split_k)
    (1, 1, 1, "hopper", 0, 1),
    (17, 33, 65, "hopper", 0, 1),
    (64, 48, 256, "hopper", 128, 1),
    (5, 7, 1000, "hopper", 0, 3),
    (40, 24, 4096, "hopper", 128, 2),
    (16, 8, 96, "ada", 0, 1),
    (19, 21, 160, "ada", 32, 1),
    (33, 9, 300, "fp32", 0, 1),
    (12, 10, 77, "exact", 0, 1),
    (8, 8, 0, "hopper", 0, 1),
]


@pytest.mark.parametrize("m,n,k,acc,promotion,split_k", GEMM_CASES)
@pytest.mark.parametrize("fa,fb", [("e4m3fn", "e4m3fn"), ("e4m3fn", "e5m2"), ("e5m2", "e4m3fn")])
def test_gemm_equals_the_emulator(m, n, k, acc, promotion, split_k, fa, fb):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    for specials in (False, True):
        a, b = _operands(rng, m, n, k, fa, fb, specials)
        kw = dict(format_a=fa, format_b=fb, scale_inv_a=0.75, scale_inv_b=2.0 ** -3, accumulation=acc,
                  promotion=promotion, split_k=split_k)
        d, amax = fp8emu.gemm(cuda(a), cuda(b), return_amax=True, **kw)
        assert d.device.type == "cuda" and d.dtype == torch.float32 and tuple(d.shape) == (m, n)
        ref, ref_amax = fp8emu.gemm(a, b, return_amax=True, **kw)
        assert_f32_bits_equal(d.cpu().numpy(), ref, f"gemm {m}x{n}x{k} {acc}/{promotion}/{split_k} {fa}x{fb}")
        assert np.float32(amax) == np.float32(ref_amax)


def _assert_same_output(d, ref, out_dtype, what):
    """D of the GPU (a torch tensor) against the CPU's: FP8 codes byte for byte; float32, bfloat16 and
    float16 bit for bit except the payload of NaNs, which an fp32 operation of the epilogue (alpha *
    NaN, NaN + bias, Inf - Inf) leaves to the FPU (docs/gpu.md §Exactness): NaN positions must match."""
    if d.element_size() == 1:
        assert np.array_equal(d.view(torch.uint8).cpu().numpy(), np.ascontiguousarray(ref).view(np.uint8)), what
        return
    if out_dtype == "float32":
        g, r = d.cpu().numpy().view(np.uint32), np.ascontiguousarray(ref, np.float32).view(np.uint32)
        gn, rn = np.isnan(g.view(np.float32)), np.isnan(r.view(np.float32))
    else:  # 16-bit patterns; NaN: exponent all ones and a non-zero fraction
        g, r = d.view(torch.int16).cpu().numpy().view(np.uint16), np.ascontiguousarray(ref).view(np.uint16)
        exp_mask, frac_mask = (0x7F80, 0x007F) if out_dtype == "bfloat16" else (0x7C00, 0x03FF)
        gn = ((g & exp_mask) == exp_mask) & ((g & frac_mask) != 0)
        rn = ((r & exp_mask) == exp_mask) & ((r & frac_mask) != 0)
    assert np.array_equal(gn, rn), f"{what}: NaN positions differ at {np.argwhere(gn != rn)[:5].tolist()}"
    bad = np.argwhere((g != r) & ~gn)
    assert bad.size == 0, f"{what}: {len(bad)} values differ; first at {bad[0].tolist()}"


EPILOGUES = [
    # (out_dtype, d_scale, alpha, beta, bias)
    ("float32", 1.0, 1.0, 0.0, False),
    ("float32", 1.0, 0.5, 1.0, True),
    ("bfloat16", 1.0, 1.0, 0.0, True),
    ("bfloat16", 1.0, 3.0, -0.25, False),
    ("float16", 1.0, 1.0, 2.0, True),
    ("e4m3fn", 8.0, 1.0, 0.0, True),
    ("e5m2", 0.5, 2.0, 1.0, True),
]


@pytest.mark.parametrize("out_dtype,d_scale,alpha,beta,with_bias", EPILOGUES)
def test_gemm_epilogue_equals_the_emulator(out_dtype, d_scale, alpha, beta, with_bias):
    # alpha, beta * c, bias, the output conversion and the amax before d_scale, on operands with
    # NaN/Inf and values that overflow the FP8 and float16 outputs, against the CPU epilogue.
    rng = np.random.default_rng(3)
    m, n, k = 33, 40, 160
    for specials in (False, True):
        a, b = _operands(rng, m, n, k, "e4m3fn", "e4m3fn", specials)
        c = (rng.standard_normal((m, n)) * 100.0).astype(np.float32)
        c[0, 0], c[1, 1] = np.inf, np.nan
        bias = (rng.standard_normal(n) * 1e4).astype(np.float32) if with_bias else None
        kw = dict(format_a="e4m3fn", format_b="e4m3fn", scale_inv_a=4.0, scale_inv_b=2.0, accumulation="hopper",
                  promotion=128, out_dtype=out_dtype, d_scale=d_scale, alpha=alpha, beta=beta)
        d, amax = fp8emu.gemm(cuda(a), cuda(b), c=cuda(c) if beta != 0.0 else None,
                              bias=cuda(bias) if with_bias else None, return_amax=True, **kw)
        ref, ref_amax = fp8emu.gemm(a, b, c=c if beta != 0.0 else None, bias=bias, return_amax=True, **kw)
        want = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                "e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[out_dtype]
        assert d.is_cuda and d.dtype == want and tuple(d.shape) == (m, n)
        what = f"gemm epilogue {out_dtype} d_scale={d_scale} alpha={alpha} beta={beta} bias={with_bias}"
        _assert_same_output(d, ref, out_dtype, what)
        assert np.float32(amax).view(np.uint32) == np.float32(ref_amax).view(np.uint32), what
    # c and out= the same tensor (an in-place accumulate, D = alpha t + beta D): c is read before
    # D is written, as on the CPU.
    if out_dtype == "float32" and beta != 0.0:
        a, b = _operands(rng, m, n, k, "e4m3fn", "e4m3fn", False)
        c = (rng.standard_normal((m, n)) * 100.0).astype(np.float32)
        acc = cuda(c)
        kw = dict(format_a="e4m3fn", format_b="e4m3fn", alpha=alpha, beta=beta)
        assert fp8emu.gemm(cuda(a), cuda(b), c=acc, out=acc, **kw) is acc
        _assert_same_output(acc, fp8emu.gemm(a, b, c=c, **kw), out_dtype, "gemm epilogue c is out")
    # out= of the output type, written in place.
    a, b = _operands(rng, m, n, k, "e4m3fn", "e4m3fn", False)
    want = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            "e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[out_dtype]
    out = torch.empty((m, n), dtype=want, device=DEV)
    kw = dict(format_a="e4m3fn", format_b="e4m3fn", out_dtype=out_dtype, d_scale=d_scale, alpha=alpha)
    assert fp8emu.gemm(cuda(a), cuda(b), out=out, **kw) is out
    ref = fp8emu.gemm(a, b, **kw)
    _assert_same_output(out, ref, out_dtype, "gemm epilogue out=")


def test_gemm_nn_layout_and_float8_tensors():
    rng = np.random.default_rng(11)
    a, b = _operands(rng, 24, 40, 96, "e4m3fn", "e4m3fn", False)
    bkn = np.ascontiguousarray(b.T)  # (K, N)
    ta = cuda(a).view(torch.float8_e4m3fn)
    tb = cuda(bkn).view(torch.float8_e4m3fn)
    d = fp8emu.gemm(ta, tb, layout="nn", accumulation="hopper", promotion=128)
    ref = fp8emu.gemm(a, bkn, format_a="e4m3fn", format_b="e4m3fn", layout="nn", accumulation="hopper", promotion=128)
    assert_f32_bits_equal(d.cpu().numpy(), ref, "gemm nn")


def test_zero_copy_and_out():
    x = torch.randn(1000, 3, device=DEV) * 50
    assert _fp8emu.data_pointer(x) == x.data_ptr()  # the extension reads the tensor's own memory
    out = torch.empty(1000, 3, dtype=torch.float8_e4m3fn, device=DEV)
    ptr = out.data_ptr()
    r = fp8emu.cast(x, "e4m3fn", out=out)
    assert r is out and out.data_ptr() == ptr
    assert np.array_equal(host_bytes(out), fp8emu.cast(x.cpu().numpy(), "e4m3fn").view(np.uint8))
    y = torch.empty(1000, 3, device=DEV)
    assert fp8emu.decode(out, out=y) is y
    assert_f32_bits_equal(y.cpu().numpy(), fp8emu.decode(host_bytes(out), "e4m3fn"), "decode out")
    a = fp8emu.cast(torch.randn(32, 64, device=DEV), "e4m3fn")
    d = torch.empty(32, 32, device=DEV)
    assert fp8emu.gemm(a, a, out=d) is d


def test_results_live_on_the_inputs_device_and_survive_the_inputs():
    x = torch.randn(4096, device=DEV)
    q = fp8emu.cast(x, "e5m2")
    expect = fp8emu.cast(x.cpu().numpy(), "e5m2").view(np.uint8)
    del x
    torch.cuda.empty_cache()
    assert q.device == DEV or q.device.type == "cuda"
    assert np.array_equal(host_bytes(q), expect)
    # The result is an ordinary tensor: PyTorch can compute with it.
    assert torch.isfinite(q.float()).all()


def test_side_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.randn(1 << 20, device=DEV) * 1000  # produced on s
        q = fp8emu.cast(x, "e4m3fn")                  # runs on s (the current stream), waited for
    assert np.array_equal(host_bytes(q), fp8emu.cast(x.cpu().numpy(), "e4m3fn").view(np.uint8))
    q2 = fp8emu.cast(x, "e4m3fn", stream=s)
    assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8))


def test_gpu_errors_name_the_function_and_device():
    with pytest.raises(TypeError, match=r"fp8emu.cast: x is a CUDA array of dtype float16; the GPU path casts float32"):
        fp8emu.cast(torch.ones(4, device=DEV, dtype=torch.float16), "e4m3fn")
    with pytest.raises(ValueError, match=r"fp8emu.cast: format e2m1fn on a CUDA array"):
        fp8emu.cast(torch.ones(4, device=DEV), "e2m1fn")
    with pytest.raises(ValueError, match=r"fp8emu.cast: policy 'ml_dtypes' on a CUDA array"):
        fp8emu.cast(torch.ones(4, device=DEV), "e4m3fn", policy="ml_dtypes")
    with pytest.raises(ValueError, match=r"fp8emu.decode: format e8m0fnu on a CUDA array"):
        fp8emu.decode(torch.zeros(4, device=DEV, dtype=torch.uint8), "e8m0fnu")
    a = fp8emu.cast(torch.randn(8, 32, device=DEV), "e4m3fn")
    with pytest.raises(ValueError, match=r"fp8emu.gemm: bias has shape \(4,\); expected \(8,\)"):
        fp8emu.gemm(a, a, bias=torch.zeros(4, device=DEV))
    with pytest.raises(TypeError, match=r"fp8emu.gemm: bias is a CUDA array of dtype float16; it must be float32"):
        fp8emu.gemm(a, a, bias=torch.zeros(8, device=DEV, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"fp8emu.gemm: beta = .* needs c"):
        fp8emu.gemm(a, a, beta=1.0)
    with pytest.raises(TypeError, match=r"fp8emu.gemm: b is a CPU array .* but another argument is on a CUDA device"):
        fp8emu.gemm(a, np.zeros((8, 32), np.uint8), format_b="e4m3fn")
    with pytest.raises(ValueError, match=r"fp8emu.gemm: .*E5M2"):
        b5 = fp8emu.cast(torch.randn(8, 32, device=DEV), "e5m2")
        fp8emu.gemm(b5, b5)
    with pytest.raises(TypeError, match=r"this function runs on the CPU only"):
        fp8emu.mma(a[:, :32], a[:, :32])
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        fp8emu.cast(torch.randn(8, 8, device=DEV).t(), "e4m3fn")


def test_cupy_arrays_when_present():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed: its DLPack path is not checked here")
    x = cupy.asarray(cast_inputs("e4m3fn")[:4096])
    q = fp8emu.cast(x, "e4m3fn")
    assert isinstance(q, cupy.ndarray) and q.dtype == cupy.uint8
    assert np.array_equal(cupy.asnumpy(q), fp8emu.cast(cupy.asnumpy(x), "e4m3fn").view(np.uint8))


def test_jax_gpu_arrays_when_present():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        gpu = jax.devices("gpu")
    except RuntimeError:
        gpu = []
    if not gpu:
        pytest.skip("JAX has no GPU device here (CPU-only jaxlib)")
    x_host = cast_inputs("e5m2")[:4096]
    x = jax.device_put(x_host, gpu[0])
    q = fp8emu.cast(x, "e5m2")
    assert np.array_equal(np.asarray(q).view(np.uint8), fp8emu.cast(x_host, "e5m2").view(np.uint8))


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_layers_on_cuda_tensors_equal_the_cpu(recipe):
    # fp8emu.layers' Linear (fprop, dgrad, wgrad, bias add and bias grad) on CUDA tensors against the
    # same calls on NumPy arrays, over three steps with scale updates: results and quantizer state
    # bit for bit, results on the GPU.
    make = RECIPES[recipe]
    from fp8emu import layers

    rng = np.random.default_rng(9)
    n_in, n_out, rows = 160, 96, 70
    w = (rng.standard_normal((n_out, n_in)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
    q = {d: (fp8emu.Quantizer(make(), "forward"), fp8emu.Quantizer(make(), "backward")) for d in ("cpu", "gpu")}
    for step in range(3):
        x = (rng.standard_normal((rows, n_in)) * (1.0 + step)).astype(np.float32)
        dy = (rng.standard_normal((rows, n_out)) * 1e-3).astype(np.float32)
        y_h, saved_h = layers.linear_forward(x, w, b, q["cpu"][0])
        y_g, saved_g = layers.linear_forward(cuda(x), cuda(w), cuda(b), q["gpu"][0])
        assert isinstance(y_g, torch.Tensor) and y_g.is_cuda and saved_g.x_q.is_cuda and saved_g.w_q.is_cuda
        assert_f32_bits_equal(y_g.cpu().numpy(), y_h, f"{recipe} y step {step}")
        for d in ("cpu", "gpu"):
            q[d][0].update_scales()
        dx_h, dw_h, db_h = layers.linear_backward(dy, saved_h, q["cpu"][1])
        dx_g, dw_g, db_g = layers.linear_backward(cuda(dy), saved_g, q["gpu"][1])
        for name, g, h in (("dx", dx_g, dx_h), ("dw", dw_g, dw_h), ("db", db_g, db_h)):
            assert g.is_cuda, name
            assert_f32_bits_equal(g.cpu().numpy(), h, f"{recipe} {name} step {step}")
        for d in ("cpu", "gpu"):
            q[d][1].update_scales()
        if recipe == "delayed":
            for role, k in (("input", 0), ("weight", 0), ("grad_output", 1)):
                assert_f32_bits_equal(q["gpu"][k].amax_history(role), q["cpu"][k].amax_history(role), role)
    with pytest.raises(TypeError, match="bias must be a CUDA array"):
        layers.linear_forward(cuda(x), cuda(w), b, q["gpu"][0])
    # bias_grad alone: the row-order fp32 sum, including a column where the order matters.
    big = np.ones((1000, 3), np.float32)
    big[0, 1] = 2.0 ** 24
    assert_f32_bits_equal(layers.bias_grad(cuda(big)).cpu().numpy(), layers.bias_grad(big), "bias_grad")


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_torch_linear_on_the_gpu_equals_the_cpu_module(recipe):
    # fp8emu.torch.Linear with its parameters and input on the GPU runs the GPU path; a CPU copy of
    # the module gives the same output and gradients bit for bit, and the same delayed-scaling state.
    import fp8emu.torch as te

    make = RECIPES[recipe]
    torch.manual_seed(0)
    m_cpu = te.Linear(128, 64, bias=True)
    m_gpu = te.Linear(128, 64, bias=True, device="cuda")
    with torch.no_grad():
        m_cpu.bias.copy_(torch.randn(64) * 0.1)
        m_gpu.weight.copy_(m_cpu.weight.to("cuda"))
        m_gpu.bias.copy_(m_cpu.bias.to("cuda"))
    r_cpu, r_gpu = make(), make()
    for step in range(3):
        x = torch.randn(2, 48, 128) * (1.0 + step)
        dy = torch.randn(2, 48, 64) * 1e-3
        outs = []
        for m, r, dev in ((m_cpu, r_cpu, "cpu"), (m_gpu, r_gpu, "cuda")):
            xi = x.detach().to(dev).requires_grad_()  # a leaf on each device
            m.zero_grad()
            with te.fp8_autocast(enabled=True, fp8_recipe=r):
                y = m(xi)
            y.backward(dy.to(dev))
            outs.append((y, xi.grad, m.weight.grad, m.bias.grad))
        for name, h, g in zip(("y", "dx", "dw", "db"), *outs):
            assert g.is_cuda, name
            assert_f32_bits_equal(g.detach().cpu().numpy(), h.detach().numpy(), f"{recipe} {name} step {step}")
    assert m_gpu._weight_q is None or m_gpu._weight_q.is_cuda
    if recipe == "delayed":
        for key in ("scaling_fwd", "scaling_bwd"):
            assert_f32_bits_equal(m_gpu.fp8_meta[key].amax_history.numpy(), m_cpu.fp8_meta[key].amax_history.numpy(),
                                  key)


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
def test_layernorm_linear_on_cuda_tensors_equals_the_cpu(recipe, normalization):
    # fp8emu.layers' LayerNormLinear (the norm, its bf16 output under current scaling, the FP8 Linear,
    # the norm's backward with a gradient of the returned norm output) on CUDA tensors against NumPy,
    # and fp8emu.torch.LayerNormLinear on the GPU against a CPU copy of the module.
    from fp8emu import layers
    import fp8emu.torch as te

    make = RECIPES[recipe]
    rng = np.random.default_rng(21)
    n_in, n_out, rows = 96, 64, 40
    gamma = (1.0 + 0.1 * rng.standard_normal(n_in)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(n_in)).astype(np.float32) if normalization == "LayerNorm" else None
    w = (rng.standard_normal((n_out, n_in)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
    x = (rng.standard_normal((rows, n_in)) * 3.0 + 1.0).astype(np.float32)
    dy = (rng.standard_normal((rows, n_out)) * 1e-3).astype(np.float32)
    g_ln = (rng.standard_normal((rows, n_in)) * 1e-4).astype(np.float32)
    res = {}
    for dev in ("cpu", "gpu"):
        put = cuda if dev == "gpu" else (lambda a: a)
        fwd, bwd = fp8emu.Quantizer(make(), "forward"), fp8emu.Quantizer(make(), "backward")
        y, saved, ln = layers.layernorm_linear_forward(put(x), put(gamma), None if beta is None else put(beta),
                                                       put(w), put(b), fwd, normalization=normalization, eps=1e-5,
                                                       zero_centered_gamma=normalization == "RMSNorm")
        grads = layers.layernorm_linear_backward(put(dy), saved, bwd, grad_ln_out=put(g_ln))
        res[dev] = (y, ln) + tuple(grads)
    for name, g, h in zip(("y", "ln_out", "dx", "dgamma", "dbeta", "dW", "db"), res["gpu"], res["cpu"]):
        assert g.is_cuda, name
        assert_f32_bits_equal(g.cpu().numpy(), h, f"{recipe} {normalization} {name}")
    # LayerNorm without ln_bias (nn::Norm's zero beta), a non-default eps, and gamma changed in place
    # between the forward and the backward: the backward uses the forward's gamma on both sides.
    if normalization == "LayerNorm":
        res = {}
        for dev in ("cpu", "gpu"):
            put = cuda if dev == "gpu" else (lambda a: a.copy())
            fwd, bwd = fp8emu.Quantizer(make(), "forward"), fp8emu.Quantizer(make(), "backward")
            g_dev = put(gamma)
            y, saved, ln = layers.layernorm_linear_forward(put(x), g_dev, None, put(w), None, fwd, eps=1e-3)
            g_dev *= 3
            res[dev] = (y, ln) + tuple(layers.layernorm_linear_backward(put(dy), saved, bwd))
        for name, g, h in zip(("y", "ln_out", "dx", "dgamma", "dbeta", "dW", "db"), res["gpu"], res["cpu"]):
            assert_f32_bits_equal(g.cpu().numpy(), h, f"{recipe} no ln_bias, gamma changed: {name}")
        with pytest.raises(TypeError, match="grad_ln_out must be a CUDA array"):
            fwd = fp8emu.Quantizer(make(), "forward")
            _, saved, _ = layers.layernorm_linear_forward(cuda(x), cuda(gamma), None, cuda(w), None, fwd)
            layers.layernorm_linear_backward(cuda(dy), saved, fp8emu.Quantizer(make(), "backward"), grad_ln_out=g_ln)

    torch.manual_seed(1)
    m_cpu = te.LayerNormLinear(n_in, n_out, normalization=normalization, return_layernorm_output=True)
    m_gpu = te.LayerNormLinear(n_in, n_out, normalization=normalization, return_layernorm_output=True, device="cuda")
    with torch.no_grad():
        for p_gpu, p_cpu in zip(m_gpu.parameters(), m_cpu.parameters()):
            p_cpu.add_(torch.randn_like(p_cpu) * 0.01)
            p_gpu.copy_(p_cpu.to("cuda"))
    r_cpu, r_gpu = make(), make()
    for step in range(2):
        xt = torch.randn(2, 20, n_in) * (1.0 + step)
        dyt, dlnt = torch.randn(2, 20, n_out) * 1e-3, torch.randn(2, 20, n_in) * 1e-4
        outs = []
        for m, r, dev in ((m_cpu, r_cpu, "cpu"), (m_gpu, r_gpu, "cuda")):
            xi = xt.detach().to(dev).requires_grad_()  # a leaf on each device
            m.zero_grad()
            with te.fp8_autocast(enabled=True, fp8_recipe=r):
                y, ln = m(xi)
            torch.autograd.backward([y, ln], [dyt.to(dev), dlnt.to(dev)])
            outs.append([y, ln, xi.grad] + [p.grad for p in m.parameters()])
        for i, (h, g) in enumerate(zip(*outs)):
            assert g.is_cuda, i
            assert_f32_bits_equal(g.detach().cpu().numpy(), h.detach().numpy(), f"{recipe} {normalization} torch {i}")
