"""Transformer Engine's getting-started walk-through, written for TE: a transformer layer built from
TE's modules (LayerNormLinear for QKV, DotProductAttention, Linear, LayerNormMLP), then TE's
TransformerLayer, each run forward and backward in FP32 and under fp8_autocast with a delayed
scaling recipe. On fp8emu only the two imports differ:

    import transformer_engine.pytorch as te        ->  import fp8emu.torch as te
    from transformer_engine.common import recipe   ->  from fp8emu import recipe

Sizes are small for 2 CPU cores (hidden 128, 8 heads, sequence 32, batch 4); TE's tutorial uses
hidden 4096 on a GPU. Prints, per model, the largest difference between the FP32 and FP8 outputs
and the FP8 input scale; exit 0 when FP8 ran and the outputs are finite.
"""

import sys

import torch

import fp8emu.torch as te  # TE: import transformer_engine.pytorch as te
from fp8emu import recipe  # TE: from transformer_engine.common import recipe

hidden_size, ffn_hidden_size, num_attention_heads = 128, 512, 8
sequence_length, batch_size = 32, 4


class FusedTETransformerLayer(torch.nn.Module):
    """The tutorial's layer with TE's fused modules (sequence-first input, as TE's default)."""

    def __init__(self):
        super().__init__()
        self.kv_channels = hidden_size // num_attention_heads
        self.ln_qkv = te.LayerNormLinear(hidden_size, 3 * hidden_size, bias=True)
        self.attention = te.DotProductAttention(num_attention_heads, self.kv_channels, attention_dropout=0.0,
                                                attn_mask_type="causal")
        self.projection = te.Linear(hidden_size, hidden_size, bias=True)
        self.ln_mlp = te.LayerNormMLP(hidden_size, ffn_hidden_size, bias=True)

    def forward(self, x):
        s, b, _ = x.shape
        qkv = self.ln_qkv(x).view(s, b, num_attention_heads, 3 * self.kv_channels)
        q, k, v = torch.split(qkv, self.kv_channels, dim=3)
        attn = self.attention(q.contiguous(), k.contiguous(), v.contiguous())
        x = x + self.projection(attn)
        return x + self.ln_mlp(x)


def run(model, x, fp8_recipe, fp8):
    with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
        y = model(x)
    y.sum().backward()
    return y.detach()


def main():
    torch.manual_seed(1234)
    x = torch.rand(sequence_length, batch_size, hidden_size, requires_grad=True)
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
    ok = True
    for name, make, first in (("fused modules", FusedTETransformerLayer, lambda m: m.ln_qkv),
                              ("TransformerLayer", lambda: te.TransformerLayer(hidden_size, ffn_hidden_size,
                                                                               num_attention_heads,
                                                                               hidden_dropout=0.0,
                                                                               attention_dropout=0.0),
                               lambda m: m.self_attention.layernorm_qkv)):
        torch.manual_seed(0)
        model = make()
        y32 = run(model, x, fp8_recipe, False)
        for _ in range(3):  # the delayed scales settle from their initial 1
            y8 = run(model, x, fp8_recipe, True)
        scale = float(first(model).fp8_meta["scaling_fwd"].scale[0])
        diff = float((y8 - y32).abs().max())
        ok &= bool(torch.isfinite(y8).all()) and scale != 1.0 and 0.0 < diff < 1.0
        print(f"{name}: max |FP8 - FP32| {diff:.4g}, input scale {scale:.4g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
