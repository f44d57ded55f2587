"""Shared helpers of the Python module's tests.

Oracles: ml_dtypes (casts and decoding), gfloat (decoding, directed rounding), PyTorch (its own
float8 casts, for the PyTorch policies), values worked by hand from the format definitions, NumPy
float64/float32 arithmetic (GEMMs), Python's fractions (exact sums), and NumPy's legacy MT19937
(stochastic rounding's random words).

Not oracles: the tests named `..._equals_the_cli` (and the scale-trace comparisons of
test_recipe.py) compare the module with the fp8emu command line, which runs the same C++ library:
they check the binding's plumbing (argument passing, dtypes, layouts), and the numerics they cover
rest on the oracles above and on the C++ tests.
"""

import os
import pathlib
import subprocess

import ml_dtypes
import numpy as np
import pytest

import fp8emu

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The registry's code formats (every family but the 16-bit ones).
CODE_FORMATS = [f.name for f in fp8emu.formats() if f.family != "wide"]
# Code formats whose ml_dtypes type exists (all of them with ml_dtypes >= 0.5).
ML_FORMATS = [n for n in CODE_FORMATS if fp8emu.format_info(n).dtype != np.uint8]
# Element formats: casts under the ml_dtypes policies (E8M0 takes CUDA's conversions only).
ELEMENT_FORMATS = [n for n in ML_FORMATS if n != "e8m0fnu"]
OCP_FP8 = ["e4m3fn", "e5m2"]


def ml_type(name):
    """The ml_dtypes scalar type of a format, by ml_dtypes' own name."""
    info = fp8emu.format_info(name)
    return getattr(ml_dtypes, f"float{info.bits}_{info.name}")


def ml_codes(x, name):
    """ml_dtypes' codes of x (astype), as uint8."""
    return np.asarray(x).astype(ml_type(name)).view(np.uint8)


def codes(a):
    """The uint8 view of an array of codes."""
    return np.asarray(a).view(np.uint8)


def finite_values(name):
    """Sorted distinct finite values of a format, from ml_dtypes' decoding of every code."""
    info = fp8emu.format_info(name)
    v = np.arange(info.code_count, dtype=np.uint8).view(ml_type(name)).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def boundary_inputs(name):
    """fp32 inputs at every rounding boundary of a format: each finite value, each midpoint between
    neighbours, their fp32 neighbours, overflow thresholds, signed zeros, Inf, NaNs with payloads."""
    v = finite_values(name)
    pos = v[v >= 0]
    mids = (pos[:-1] + pos[1:]) / 2
    top = pos[-1] + (pos[-1] - pos[-2]) / 2  # max + half an ulp
    base = np.concatenate([pos, mids, [top, 2 * pos[-1], 4 * pos[-1], pos[1] / 2, pos[1] / 4]]).astype(np.float32)
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(0))])
    special = np.array([0.0, np.inf, np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                        np.float32(1e-45)], np.float32)
    both = np.concatenate([near, special])
    both = np.concatenate([both, -both])
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000,
                     0xFFE00000], np.uint32).view(np.float32)
    return np.concatenate([both, nans])


def random_f32(n, seed):
    """n uniformly random fp32 bit patterns (every class: NaNs, Infs, subnormals, normals)."""
    return np.random.default_rng(seed).integers(0, 2**32, size=n, dtype=np.uint32).view(np.float32)


def is_nan_code(c, name):
    """Whether codes are NaN codes, from ml_dtypes' decoding."""
    return np.isnan(np.asarray(c, np.uint8).view(ml_type(name)).astype(np.float32))


def is_nonfinite_code(c, name):
    return ~np.isfinite(np.asarray(c, np.uint8).view(ml_type(name)).astype(np.float32))


@pytest.fixture(scope="session")
def cli():
    """Path of the fp8emu command line (FP8EMU_CLI, else build/fp8emu)."""
    path = pathlib.Path(os.environ.get("FP8EMU_CLI") or ROOT / "build" / "fp8emu")
    if not path.is_file():
        if os.environ.get("FP8EMU_REQUIRE_CLI"):
            pytest.fail(f"FP8EMU_REQUIRE_CLI is set but the fp8emu CLI is missing at {path}")
        pytest.skip(f"the fp8emu CLI is not built at {path} (set FP8EMU_CLI)")
    return path


def run_cli(cli, *args):
    r = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"fp8emu {' '.join(map(str, args))}: {r.stdout}{r.stderr}"
    return r.stdout
