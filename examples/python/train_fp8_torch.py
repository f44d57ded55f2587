"""FP32 vs FP8 training of a small PyTorch model through fp8emu.torch (Transformer Engine's API).

The same MLP (LayerNormLinear -> GELU -> Linear -> GELU -> Linear) is trained twice from the same
initial weights and batches: once with FP8 off (plain fp32), once inside fp8_autocast with TE's
delayed scaling (HYBRID: E4M3 forward, E5M2 gradients), every GEMM emulated bit-exactly as Hopper
runs it. The data is a synthetic 10-class problem (a fixed random teacher network labels Gaussian
inputs), so the example needs nothing but PyTorch. The model is written for TE: swap the import
below for ``import transformer_engine.pytorch as te`` on a GPU with TE and it runs there.

    python examples/python/train_fp8_torch.py [--steps 300] [--plot curves.png]

Prints the loss and accuracy of both runs every --log steps; with --plot and matplotlib installed,
writes the two loss curves (skipped with a message when matplotlib is absent).
"""

import argparse
import copy
import sys
import time

try:
    import torch
except ImportError:
    print("this example needs PyTorch (pip install torch)")
    sys.exit(0)

import fp8emu
import fp8emu.torch as te  # on a GPU with Transformer Engine: import transformer_engine.pytorch as te


def make_data(n, d, classes, seed):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(d, classes, generator=g)
    x = torch.randn(n, d, generator=g)
    y = (torch.tanh(x) @ teacher + 0.3 * torch.randn(n, classes, generator=g)).argmax(1)
    return x, y


def make_model(d, hidden, classes):
    # The 10-class head is torch's own Linear: TE's FP8 GEMM needs out_features divisible by 8 (and
    # TE users keep the output layer in high precision).
    return torch.nn.Sequential(te.LayerNormLinear(d, hidden), torch.nn.GELU(), te.Linear(hidden, hidden),
                               torch.nn.GELU(), torch.nn.Linear(hidden, classes))


def train(model, x, y, xt, yt, steps, batch, fp8, recipe, log):
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    history = []
    g = torch.Generator().manual_seed(123)  # same batch order for both runs
    for step in range(1, steps + 1):
        idx = torch.randint(0, x.shape[0], (batch,), generator=g)
        with te.fp8_autocast(enabled=fp8, fp8_recipe=recipe):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % log == 0 or step == steps:
            with torch.no_grad(), te.fp8_autocast(enabled=fp8, fp8_recipe=recipe):
                logits = model(xt)
            test_loss = torch.nn.functional.cross_entropy(logits, yt).item()
            acc = (logits.argmax(1) == yt).float().mean().item()
            history.append((step, loss.item(), test_loss, acc))
    return history


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--log", type=int, default=50)
    p.add_argument("--plot", default=None, help="write the loss curves to this image (needs matplotlib)")
    a = p.parse_args(argv)
    d, classes = 64, 10
    x, y = make_data(8192, d, classes, seed=0)
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(x.shape[0], generator=g)
    x, y, xt, yt = x[perm[:6144]], y[perm[:6144]], x[perm[6144:]], y[perm[6144:]]

    torch.manual_seed(0)
    model32 = make_model(d, a.hidden, classes)
    model8 = copy.deepcopy(model32)  # the same initial weights
    recipe = fp8emu.DelayedScaling(fp8_format=fp8emu.Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    runs = {}
    for name, model, fp8 in (("fp32", model32, False), ("fp8_delayed", model8, True)):
        t0 = time.time()
        runs[name] = train(model, x, y, xt, yt, a.steps, a.batch, fp8, recipe, a.log)
        print(f"{name}: {time.time() - t0:.1f} s")
    print(f"{'step':>6} | {'fp32 loss':>9} {'test':>7} {'acc':>6} | {'fp8 loss':>9} {'test':>7} {'acc':>6}")
    for r32, r8 in zip(runs["fp32"], runs["fp8_delayed"]):
        print(f"{r32[0]:>6} | {r32[1]:>9.4f} {r32[2]:>7.4f} {r32[3]:>6.3f} | {r8[1]:>9.4f} {r8[2]:>7.4f} {r8[3]:>6.3f}")
    f32, f8 = runs["fp32"][-1], runs["fp8_delayed"][-1]
    print(f"final test accuracy: fp32 {f32[3]:.4f}, fp8 {f8[3]:.4f} ({100 * (f8[3] - f32[3]):+.2f} points)")
    meta = model8[0].fp8_meta
    print(f"first layer's forward scales (input, weight, output): {meta['scaling_fwd'].scale.tolist()}")

    if a.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot (pip install matplotlib)")
            return 0
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
        for name, h in runs.items():
            ax1.plot([r[0] for r in h], [r[2] for r in h], label=name)
            ax2.plot([r[0] for r in h], [r[3] for r in h], label=name)
        ax1.set(xlabel="step", ylabel="test loss")
        ax2.set(xlabel="step", ylabel="test accuracy")
        ax1.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print(f"wrote {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
