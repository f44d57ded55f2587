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
    out = run("check_gemm.py", "--m", "16", "--n", "8", "--k", "256")
    assert "vs fp8emu" in out
