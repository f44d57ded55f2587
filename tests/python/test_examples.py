"""The examples in examples/python run and print what they promise."""

import subprocess
import sys

import ml_dtypes

from conftest import ROOT


def run(script, *args):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / script), *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_formats_walkthrough():
    out = run("formats_walkthrough.py")
    assert f"0x7E = 0 | 1111 | 110 = {float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)}" in out
    assert "e4m3fn cuda               0x1D 0x7E 0x7E 0x7E 0x7F" in out
    assert "e4m3fn ml_dtypes          0x1D 0x7E 0x7F 0x7F 0xFF" in out


def test_check_gemm():
    # Without an FP8 GPU the example's verdict is fp8emu's exact model against exact rational sums
    # (its exit status, which run() requires to be 0); with one, torch._scaled_mm against the model.
    out = run("check_gemm.py", "--m", "16", "--n", "8", "--k", "256")
    assert "vs fp8emu" in out
    assert ("exact sum in Python fractions (8 x 8 outputs): bit-identical" in out
            or "torch._scaled_mm vs fp8emu" in out and ": bit-identical" in out)


def test_formats_walkthrough_delayed_scaling():
    out = run("formats_walkthrough.py")
    assert "delayed scaling (E4M3, amax_history_len=4, max)" in out
    # step 0 casts with the initial scale 1; step 1 with 448 / amax of step 0
    rows = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
    assert rows[0][2] == "1" and float(rows[1][2]) == float(f"{448 / float(rows[0][1]):.4g}")


def test_train_fp8_torch(tmp_path):
    import pytest

    pytest.importorskip("torch", reason="PyTorch is not installed: the fp8emu.torch training example is skipped")
    out = run("train_fp8_torch.py", "--steps", "20", "--log", "10", "--hidden", "32", "--plot", str(tmp_path / "curves.png"))
    assert "final test accuracy: fp32" in out and "fp8" in out


def test_bench_cast_prints_both_ratios():
    # Small size, one round: the values depend on the machine; only their presence is checked here.
    out = run("bench_cast.py", "--elements", "100000", "--repeat", "1", "--cli", str(ROOT / "build" / "fp8emu"))
    lines = out.strip().splitlines()
    assert lines[-2].startswith("python_vs_bulk_same_threads: ")
    assert float(lines[-1].split(": ")[1]) > 0.0 and lines[-1].startswith("speedup_vs_ml_dtypes_per_thread: ")
    assert any(line.split()[:2] == ["python", "1"] for line in lines)
    assert any(line.split()[:1] == ["ml_dtypes"] for line in lines)


def test_te_client_scripts_run_in_fp8_deterministically():
    # Two scripts written for Transformer Engine with only the imports swapped (examples/python/
    # te_clients): their FP8 runs must run FP8 (scales moved off 1), stay finite, and print the same
    # numbers on a second run (same seed, bit-identical arithmetic).
    for script in ("te_clients/nanogpt_te.py", "te_clients/te_getting_started.py"):
        first, second = run(script), run(script)
        assert first == second, script
        assert "scale" in first
    out = run("te_clients/nanogpt_te.py")
    fp32, fp8 = (line.split() for line in out.splitlines()[:2])
    assert float(fp8[4]) < float(fp8[2])  # FP8 training lowered the loss
    assert abs(float(fp8[4]) - float(fp32[4])) < 0.1 * float(fp32[4])  # and tracks the FP32 run


def test_bench_torch_fp8_prints_its_ratios():
    # Small sizes: the benchmark runs and prints both ratios (their values are measured, not tested).
    out = run("bench_torch_fp8.py", "--features", "64", "--batch", "64", "--repeat", "1")
    assert "linear_fp8_vs_torch_fp32:" in out and "model_step_fp8_vs_fp32:" in out
