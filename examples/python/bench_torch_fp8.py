"""What FP8 through fp8emu.torch costs against the FP32 step a user would run: one Linear forward and
backward (torch.nn.Linear in fp32 vs te.Linear under fp8_autocast), and one training step of a
nanoGPT-sized model (examples/python/te_clients/nanogpt_te.py's GPT with FP8 off vs on), both
measured in this run on this machine, best of --repeat.

Prints ms per call and the ratios ``linear_fp8_vs_torch_fp32`` and ``model_step_fp8_vs_fp32``
(goals: at most 2.5 and 2.0). The FP8 arithmetic is the Hopper tensor-core model (delayed scaling,
HYBRID); the FP32 baselines are PyTorch's own kernels with all its threads.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_clients"))

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402
from nanogpt_te import GPT, batches  # noqa: E402


def best_ms(fn, repeat):
    fn()  # warm-up (and the delayed scales' first update)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    recipe = fp8emu.DelayedScaling(fp8_format=fp8emu.Format.HYBRID, amax_history_len=16)
    torch.manual_seed(0)
    x = torch.randn(a.batch, a.features, requires_grad=True)
    ref = torch.nn.Linear(a.features, a.features)
    lin = te.Linear(a.features, a.features)

    def torch_step():
        ref(x).sum().backward()

    def fp8_step():
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = lin(x)
        y.sum().backward()

    t32, t8 = best_ms(torch_step, a.repeat), best_ms(fp8_step, a.repeat)
    print(f"Linear {a.features}x{a.features}, batch {a.batch}, forward+backward: torch fp32 {t32:.1f} ms, "
          f"fp8emu FP8 {t8:.1f} ms")
    print(f"linear_fp8_vs_torch_fp32: {t8 / t32:.2f}")

    torch.manual_seed(0)
    model = GPT(vocab=65, block=64, n_layer=4, n_embd=128, n_head=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xb, yb = next(batches(1, batch=16, block=64, vocab=65, seed=1))

    def model_step(fp8):
        def step():
            with te.fp8_autocast(enabled=fp8, fp8_recipe=recipe):
                loss = model(xb, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    m32, m8 = best_ms(model_step(False), a.repeat), best_ms(model_step(True), a.repeat)
    print(f"nanoGPT step (4 layers, 128 wide, block 64, batch 16): fp32 {m32:.1f} ms, FP8 {m8:.1f} ms")
    print(f"model_step_fp8_vs_fp32: {m8 / m32:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
