"""A walk through E4M3 and E5M2: codes, fields, rounding and the systems that disagree.

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


if __name__ == "__main__":
    main()
