"""Benchmark: casting float32 to E4M3 from Python against fp8emu's C++ bulk kernel and ml_dtypes.

Times, on the same machine in one run (best of --repeat):
  python      fp8emu.cast(x, "e4m3fn", scale=s, out=q) (the bulk kernel behind a nanobind call:
              argument checks, no copies, the GIL released), at 1 thread and at the OpenMP default;
  bulk        the same kernel without Python, from `fp8emu bench convert` (C++), at the same thread
              counts (needs the fp8emu command: --cli, default build/fp8emu; skipped when absent);
  ml_dtypes   x_scaled.astype(ml_dtypes.float8_e4m3fn) (NumPy's cast loop, one thread; not
              satfinite: the comparison is of speed only).
Prints a table and, last, `python_vs_bulk_same_threads: R` (goal: at most 1.2) and
`speedup_vs_ml_dtypes_per_thread: S` (ml_dtypes time / fp8emu time at 1 thread; goal: at least 10).
Timings vary with the machine's load; the ratios are of measurements made one after the other.

    python examples/python/bench_cast.py [--elements 67108864] [--repeat 3] [--cli build/fp8emu]
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

import fp8emu

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCALE = np.float32(224.0)


def inputs(n):
    return np.random.default_rng(1).standard_normal(n, dtype=np.float32)


def best_of(repeat, f):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_python(n, repeat):
    """ns/element of fp8emu.cast in this process (its OpenMP thread count)."""
    x = inputs(n)
    q = np.empty(n, np.uint8)
    fp8emu.cast(x, "e4m3fn", scale=float(SCALE), out=q)  # warm up (pages, threads)
    return best_of(repeat, lambda: fp8emu.cast(x, "e4m3fn", scale=float(SCALE), out=q)) / n * 1e9


def measure_in_child(n, repeat, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, __file__, "--child", "--elements", str(n), "--repeat", str(repeat)],
                       env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["ns"]


def bulk_rows(cli, n, repeat):
    """{threads: ns/element} of the bulk rows of `fp8emu bench convert`, or {} without the command."""
    if not pathlib.Path(cli).exists():
        return {}
    r = subprocess.run([cli, "bench", "convert", "--elements", str(n), "--repeat", str(repeat)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"bench convert failed ({r.returncode}): {r.stderr.strip()}", file=sys.stderr)
        return {}
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*bulk\s+(\d+)\s+([0-9.]+)", line)
        if m:
            rows[int(m.group(1))] = float(m.group(2))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=64 * 1024 * 1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cli", default=str(ROOT / "build" / "fp8emu"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.elements < 1 or a.repeat < 1:
        p.error("--elements and --repeat must be positive")
    if a.child:
        print(json.dumps({"ns": measure_python(a.elements, a.repeat)}))
        return 0

    n = a.elements
    threads_default = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    py = {1: measure_in_child(n, a.repeat, 1)}
    if threads_default > 1:
        py[threads_default] = measure_in_child(n, a.repeat, threads_default)
    x = inputs(n) * SCALE
    x.astype(ml_dtypes.float8_e4m3fn)  # warm up
    ml = best_of(a.repeat, lambda: x.astype(ml_dtypes.float8_e4m3fn)) / n * 1e9
    bulk = bulk_rows(a.cli, n, a.repeat)

    print(f"float32 -> E4M3, {n} elements, best of {a.repeat}")
    print(f"  {'path':<10} {'threads':>7} {'ns/element':>11}")
    for t, ns in py.items():
        print(f"  {'python':<10} {t:>7} {ns:>11.3f}")
    for t, ns in sorted(bulk.items()):
        print(f"  {'bulk':<10} {t:>7} {ns:>11.3f}")
    print(f"  {'ml_dtypes':<10} {1:>7} {ml:>11.3f}")
    same = [t for t in py if t in bulk]
    if same:
        t = max(same)
        print(f"python_vs_bulk_same_threads: {py[t] / bulk[t]:.3f}")
    else:
        print(f"python_vs_bulk_same_threads: unavailable (no fp8emu command at {a.cli})")
    print(f"speedup_vs_ml_dtypes_per_thread: {ml / py[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
