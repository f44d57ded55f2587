"""A walk through E4M3 and E5M2: codes, fields, rounding, the systems that disagree, and TE's delayed scaling.

    python examples/python/formats_walkthrough.py
"""

import numpy as np

import fp8emu


def fields(code, info):
    s = code >> (info.bits - 1)
    e = (code >> info.mantissa_bits) & ((1 << info.exponent_bits) - 1)
    m = code & ((1 << info.mantissa_bits) - 1)
    return f"{s} | {e:0{info.exponent_bits}b} | {m:0{info.mantissa_bits}b}"


def main():
    for name in ("e4m3fn", "e5m2"):
        f = fp8emu.format_info(name)
        print(f"{f.name} ({f.title}): {f.exponent_bits} exponent bits, {f.mantissa_bits} mantissa bits, bias {f.bias}")
        print(f"  max {f.max} (code 0x{f.max_code:02X}), min normal {f.min_normal}, min subnormal {f.min_subnormal}, "
              f"Inf {'none' if f.inf_code is None else hex(f.inf_code)}, NaN 0x{f.nan_code:02X}")
        codes = np.arange(0, 1 << f.bits, 1, dtype=np.uint8)
        values = fp8emu.decode(codes, name)
        for c in (0x00, 0x01, 1 << f.mantissa_bits, f.bias << f.mantissa_bits, f.max_code, f.max_code + 1):
            print(f"  0x{c:02X} = {fields(c, f)} = {values[c]}")

    # Rounding to nearest even, and where CUDA, ml_dtypes and PyTorch store different codes.
    x = np.array([0.1, 464, 465, np.inf, -np.nan], np.float32)
    print("\nx                    ", x)
    for policy in ("cuda", "cuda-nosat", "ml_dtypes", "ml_dtypes-saturate", "pytorch"):
        q = fp8emu.cast(x, "e4m3fn", policy=policy)
        print(f"e4m3fn {policy:<18}", " ".join(f"0x{c:02X}" for c in q.view(np.uint8)), "=", q.astype(np.float32))

    # A per-tensor scale (TE's delayed/current scaling): the cast stores x * scale, the GEMM
    # multiplies by scale_inv = 1 / scale afterwards.
    g = np.float32([3e-6, 1e-5, -4e-5])
    e5 = fp8emu.format_info("e5m2")
    scale = np.float32(e5.max / np.abs(g).max())
    q = fp8emu.cast(g, "e5m2", scale=float(scale))
    print(f"\ngradients {g} with scale {scale}: codes {q.view(np.uint8)}, dequantized "
          f"{fp8emu.decode(q, scale_inv=float(np.float32(1) / scale))}")
    print(f"without a scale they land in E5M2's subnormals or flush: {fp8emu.cast(g, 'e5m2').astype(np.float32)}")

    delayed_scaling()


def delayed_scaling():
    """TE's delayed scaling step by step: each cast uses the scale computed from the amax history of
    earlier steps, so a sudden spike saturates once, and the scale follows it after the update."""
    recipe = fp8emu.DelayedScaling(amax_history_len=4, amax_compute_algo="max", margin=0)
    fwd = fp8emu.Quantizer(recipe, "forward")
    rng = np.random.default_rng(0)
    e4m3_max = fp8emu.format_info("e4m3fn").max
    print(f"\ndelayed scaling (E4M3, amax_history_len=4, max): scale = {e4m3_max:g} / max(amax history)")
    print(f"{'step':>4} {'amax(x)':>9} {'scale used':>11} {'saturated':>9} {'rel. error':>10}  history after update")
    for step, mag in enumerate([1.0, 1.0, 20.0, 1.0, 1.0, 1.0, 1.0]):
        x = (rng.standard_normal((64, 64)) * mag).astype(np.float32)
        q = fwd.quantize(x, "input")
        back = fp8emu.decode(q.rowwise_data, scale_inv=q.scale_inv)
        err = np.linalg.norm(back - x) / np.linalg.norm(x)
        fwd.update_scales()
        hist = " ".join(f"{h:6.2f}" for h in fwd.amax_history("input"))
        print(f"{step:>4} {np.abs(x).max():>9.3f} {q.scale:>11.4g} {q.stats['saturated']:>9} {err:>10.4f}  [{hist}]")
    print(f"step 2's spike is cast with the old scale: every value above {e4m3_max:g}/scale saturates to {e4m3_max:g} "
          "(large error).\n"
          "Steps 3-6 use the spike's amax until it leaves the window (4 updates): a scale 20x smaller, which costs\n"
          "little here, since E4M3's relative precision does not depend on the scale until values fall into its\n"
          "subnormals (below 2^-6 after scaling).")


if __name__ == "__main__":
    main()
