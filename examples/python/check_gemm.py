"""Check an FP8 GEMM against fp8emu's tensor-core model, bit for bit.

With PyTorch and an sm_89+/sm_90 GPU, runs torch._scaled_mm (cuBLASLt's FP8 GEMM, fast accumulation)
and compares it with fp8emu.gemm(accumulation="hopper" on sm_90, "ada" on sm_89). Without one, it
compares a plain float32 GEMM (NumPy) with the Hopper model, to show what such a check reports, and
checks fp8emu's "exact" model against the exact sum of the products computed with Python's
fractions and rounded once to float32 (on the top-left 8 x 8 outputs).

    python examples/python/check_gemm.py [--m 256 --n 128 --k 4096]
"""

import argparse
from fractions import Fraction

import ml_dtypes
import numpy as np

import fp8emu


def report(name, got, ref):
    got = np.asarray(got, np.float32)
    same = np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    diff = np.count_nonzero(got != ref)
    err = np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref))  # relative to the largest output
    print(f"{name}: {'bit-identical' if same else f'{diff} of {ref.size} elements differ, max |diff| / max |D| = {err:.3g}'}")
    return same


def round_f32(q):
    """The float32 nearest to the rational q, ties to even (the exact model's single rounding)."""
    f = np.float32(float(q))  # within one float32 ulp of q
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.uint32)) & 1))


def exact_reference(a, b, sa, sb, rows, cols):
    """D = RN(RN(sum_k a_ik b_jk) * RN(sa * sb)) from exact rational sums (no fp8emu code)."""
    s = np.float32(np.float32(sa) * np.float32(sb))
    av, bv = a.astype(np.float64), b.astype(np.float64)  # FP8 values are exact in float64
    d = np.zeros((rows, cols), np.float32)
    for i in range(rows):
        for j in range(cols):
            total = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(av[i], bv[j])), Fraction(0))
            d[i, j] = np.float32(round_f32(total) * s)
    return d


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--k", type=int, default=4096)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.m, args.k)).astype(np.float32)
    w = (rng.standard_normal((args.n, args.k)) * 0.02).astype(np.float32)
    e4m3_max = fp8emu.format_info("e4m3fn").max
    # Per-tensor current scaling: scale = max / amax, scale_inv = 1 / scale (fp32).
    sx, sw = np.float32(e4m3_max / np.abs(x).max()), np.float32(e4m3_max / np.abs(w).max())
    a, b = fp8emu.cast(x, "e4m3fn", scale=sx), fp8emu.cast(w, "e4m3fn", scale=sw)
    sa, sb = float(np.float32(1) / sx), float(np.float32(1) / sw)

    try:
        import torch

        gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    except ImportError:
        gpu = False
    if gpu:
        arch = "hopper" if torch.cuda.get_device_capability() >= (9, 0) else "ada"
        ta = torch.from_numpy(a.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        tb = torch.from_numpy(b.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        out = torch._scaled_mm(ta, tb.t(), scale_a=torch.tensor(sa, device="cuda"),
                               scale_b=torch.tensor(sb, device="cuda"), out_dtype=torch.float32,
                               use_fast_accum=True)
        # The two-line check:
        ref = fp8emu.gemm(a, b, scale_inv_a=sa, scale_inv_b=sb, accumulation=arch, promotion=0)
        ok = report(f"torch._scaled_mm vs fp8emu {arch}", out.cpu().numpy(), ref)
    else:
        print("no PyTorch CUDA device with FP8 (sm_89+): comparing a float32 NumPy GEMM instead")
        ref = fp8emu.gemm(a, b, scale_inv_a=sa, scale_inv_b=sb, accumulation="hopper", promotion=0)
        fp32 = (a.astype(np.float32) @ b.astype(np.float32).T) * np.float32(sa * sb)
        report("NumPy float32 GEMM vs fp8emu hopper", fp32, ref)
        exact = fp8emu.gemm(a, b, scale_inv_a=sa, scale_inv_b=sb, accumulation="exact")
        report("fp8emu exact vs fp8emu hopper", exact, ref)
        r, c = min(8, args.m), min(8, args.n)
        ok = report(f"fp8emu exact vs the exact sum in Python fractions ({r} x {c} outputs)", exact[:r, :c],
                    exact_reference(a[:r], b[:c], sa, sb, r, c))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
