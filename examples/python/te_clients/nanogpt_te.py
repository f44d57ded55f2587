"""A nanoGPT-style character model whose Linear layers are Transformer Engine's, trained in FP32
and in FP8 from the same seed. Written for TE; on fp8emu only the two imports differ:

    import transformer_engine.pytorch as te        ->  import fp8emu.torch as te
    from transformer_engine.common import recipe   ->  from fp8emu import recipe

Prints one line per run: the losses, and for FP8 the first block's attention input scale. Exit 0
when both runs' losses are finite and FP8 actually ran. Sizes fit 2 CPU cores (seconds).
"""

import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import fp8emu.torch as te  # TE: import transformer_engine.pytorch as te
from fp8emu import recipe  # TE: from transformer_engine.common import recipe


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = te.Linear(n_embd, 3 * n_embd)
        self.c_proj = te.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.c_fc, self.mlp_proj = te.Linear(n_embd, 4 * n_embd), te.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_embd, n_head):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)  # vocab 65: stays in high precision
        self.lm_head.weight = self.wte.weight
        for emb in (self.wte, self.wpe):  # nanoGPT's initialisation of the embeddings
            nn.init.normal_(emb.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def batches(steps, batch, block, vocab, seed):
    """A learnable token stream: each sequence counts up from a random start modulo the vocabulary."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        seq = (start + torch.arange(block + 1)) % vocab
        yield seq[:, :-1], seq[:, 1:]


def train(fp8, steps, seed=0):
    torch.manual_seed(seed)
    model = GPT(vocab=65, block=32, n_layer=2, n_embd=64, n_head=4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    losses = []
    for x, y in batches(steps, batch=8, block=32, vocab=65, seed=seed + 1):
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args(argv)
    ok = True
    for fp8 in (False, True):
        model, losses = train(fp8, a.steps)
        line = f"{'fp8 ' if fp8 else 'fp32'} first {losses[0]:.4f} last {losses[-1]:.4f}"
        ok &= all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
        if fp8:
            meta = model.blocks[0].attn.c_attn.fp8_meta
            scale = float(meta["scaling_fwd"].scale[0]) if "scaling_fwd" in meta else 1.0
            line += f" c_attn input scale {scale:.4g}"
            ok &= scale != 1.0  # the scales moved: FP8 ran
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
