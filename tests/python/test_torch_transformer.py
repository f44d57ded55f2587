"""fp8emu.torch.TransformerLayer (and its MultiheadAttention / DotProductAttention parts).

Run where PyTorch is importable, skipped with the reason printed otherwise (as test_torch.py).
Oracles: without FP8, the layer written out in plain PyTorch from its parameters (F.layer_norm,
F.linear, the attention as matmul / masked_fill / softmax / matmul, gelu's tanh form) and PyTorch's
scaled_dot_product_attention; with FP8, the same forward and backward composed by hand from the
existing fp8emu.torch modules (LayerNormLinear, Linear, LayerNormMLP, each already checked against
fp8emu's C++ layers in test_torch.py) and the fp32 attention; TE's parameter names listed from TE's
transformer.py / multi_head_attention.py structure.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402

F = torch.nn.functional


def same(a, b):
    a = a.detach() if isinstance(a, torch.Tensor) else torch.as_tensor(a)
    b = b.detach() if isinstance(b, torch.Tensor) else torch.as_tensor(b)
    return a.shape == b.shape and torch.equal(a.float().contiguous().view(torch.int32),
                                              b.float().contiguous().view(torch.int32))


def randn(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def perturb(module, seed=100):
    """Non-trivial norm scales and biases (TE starts them at 1 and 0)."""
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            if "layer_norm" in name or name.startswith("layernorm.") or name.endswith("bias"):
                p.add_(randn(*p.shape, scale=0.1, seed=seed + i))


H, FFN, HEADS, S, B = 128, 256, 8, 16, 4  # head size 16: softmax scale 1/4, a power of two

RECIPES = [fp8emu.DelayedScaling(amax_history_len=4), fp8emu.Float8CurrentScaling(), fp8emu.MXFP8BlockScaling(),
           fp8emu.Float8BlockScaling()]


# ------------------------------------------------------------------------------------------ references

def ref_attention(q, k, v, mask=None, zero_masked_rows=False):
    """q [b, h, sq, d], k/v [b, h, sk, d] -> [b, h, sq, d]: TE's unfused attention written out."""
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if mask is not None:
        s = s.masked_fill(mask, -10000.0)
    p = F.softmax(s, dim=-1)
    if zero_masked_rows:
        p = p.masked_fill(mask, 0.0)
    return torch.matmul(p, v)


def ref_mask(mask_type, sq, sk, pad=None):
    if mask_type == "no_mask":
        return None
    if mask_type == "causal":
        return torch.ones(sq, sk, dtype=torch.bool).triu(1)
    if mask_type == "padding":
        return pad.squeeze(1).unsqueeze(3) | pad
    raise AssertionError(mask_type)


def split_heads(qkv, heads, groups, d, interleaved):
    """The projection output [s0, s1, (h + 2g) d] -> q [s0, s1, h, d], k, v [s0, s1, g, d]."""
    n = heads // groups
    if interleaved:  # per group: n query heads, then k, then v
        x = qkv.view(*qkv.shape[:2], groups, n + 2, d)
        q, k, v = x[..., :n, :], x[..., n:n + 1, :], x[..., n + 1:, :]
    else:  # all q heads, all k heads, all v heads
        q, k, v = qkv.split([heads * d, groups * d, groups * d], dim=-1)
    return tuple(t.reshape(*qkv.shape[:2], -1, d) for t in (q, k, v))


def ref_layer_fp32(layer, x, mask_type="causal", pad=None, fmt="sbhd", fused=False, groups=HEADS,
                   post_ln=False, output_ln=False, parallel=False, normalization="LayerNorm", eps=1e-5):
    """The TransformerLayer of TE's transformer.py written out in plain PyTorch fp32 from its parameters."""
    p = dict(layer.named_parameters())
    a = "self_attention."
    d = H // HEADS

    def norm(t, w, b):
        if normalization == "LayerNorm":
            return F.layer_norm(t, (t.shape[-1],), w, b, eps)
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w

    if fused:
        wqkv, bqkv = p[a + "layernorm_qkv.weight"], p[a + "layernorm_qkv.bias"]
    else:
        wqkv = torch.cat([p[a + f"layernorm_qkv.{n}_weight"] for n in ("query", "key", "value")])
        bqkv = torch.cat([p[a + f"layernorm_qkv.{n}_bias"] for n in ("query", "key", "value")])
    ln1 = norm(x, p[a + "layernorm_qkv.layer_norm_weight"], p.get(a + "layernorm_qkv.layer_norm_bias"))
    q, k, v = split_heads(F.linear(ln1, wqkv, bqkv), HEADS, groups, d, fused)
    k, v = (t.repeat_interleave(HEADS // groups, dim=2) for t in (k, v))
    to_bhsd = (lambda t: t.permute(1, 2, 0, 3)) if fmt == "sbhd" else (lambda t: t.permute(0, 2, 1, 3))
    sq = x.shape[0] if fmt == "sbhd" else x.shape[1]
    ctx = ref_attention(*(to_bhsd(t) for t in (q, k, v)), mask=ref_mask(mask_type, sq, sq, pad),
                        zero_masked_rows=mask_type == "padding")
    ctx = ctx.permute(2, 0, 1, 3) if fmt == "sbhd" else ctx.permute(0, 2, 1, 3)
    attn = F.linear(ctx.reshape(*x.shape[:2], H), p[a + "proj.weight"])
    m = "layernorm_mlp."
    if parallel:
        ln2 = norm(x, p[m + "layer_norm_weight"], p.get(m + "layer_norm_bias"))
        h = F.gelu(F.linear(ln2, p[m + "fc1_weight"], p[m + "fc1_bias"]), approximate="tanh")
        # TE: no return_bias here, the biases are added by the GEMMs (F.linear's addmm without FP8)
        attn = F.linear(ctx.reshape(*x.shape[:2], H), p[a + "proj.weight"], p[a + "proj.bias"])
        return x + (attn + F.linear(h, p[m + "fc2_weight"], p[m + "fc2_bias"]))
    hid = (ln1 if post_ln else x) + (attn + p[a + "proj.bias"])
    ln2 = norm(hid, p[m + "layer_norm_weight"], p.get(m + "layer_norm_bias"))
    h = F.gelu(F.linear(ln2, p[m + "fc1_weight"], p[m + "fc1_bias"]), approximate="tanh")
    out = (ln2 if post_ln else hid) + (F.linear(h, p[m + "fc2_weight"]) + p[m + "fc2_bias"])
    if output_ln:
        out = norm(out, p["layernorm.weight"], p.get("layernorm.bias"))
    return out


# ------------------------------------------------------------------------------------------ (a) fp32

@pytest.mark.parametrize("mask_type,fmt,fused,groups", [
    ("causal", "sbhd", False, HEADS), ("no_mask", "sbhd", True, HEADS), ("padding", "bshd", False, HEADS),
    ("causal", "bshd", True, 2), ("padding", "sbhd", False, 1)])
def test_without_fp8_equals_plain_pytorch(mask_type, fmt, fused, groups):
    """Bit for bit: the same PyTorch ops in the same order (the scores' 1/sqrt(d) = 1/4 is a power of
    two, so TE's baddbmm(alpha) and matmul-then-scale round alike)."""
    torch.manual_seed(0)
    layer = te.TransformerLayer(H, FFN, HEADS, hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type=mask_type, attn_input_format=fmt, fuse_qkv_params=fused,
                                num_gqa_groups=groups)
    perturb(layer)
    shape = (S, B, H) if fmt == "sbhd" else (B, S, H)
    x = randn(*shape, seed=1).requires_grad_()
    pad = None
    if mask_type == "padding":  # sequences of lengths 16, 11, 5, 1
        lens = torch.tensor([16, 11, 5, 1])
        pad = (torch.arange(S).view(1, S) >= lens.view(B, 1)).view(B, 1, 1, S)
    y = layer(x, attention_mask=pad)
    x_ref = x.detach().clone().requires_grad_()
    y_ref = ref_layer_fp32(layer, x_ref, mask_type, pad, fmt, fused, groups)
    assert y.shape == shape and same(y, y_ref)
    dy = randn(*shape, seed=2)
    y.backward(dy)
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad()
    y_ref.backward(dy)
    assert same(x.grad, x_ref.grad)
    for n, p in layer.named_parameters():
        assert same(grads[n], p.grad), n


@pytest.mark.parametrize("flags", [dict(apply_residual_connection_post_layernorm=True),
                                   dict(output_layernorm=True), dict(parallel_attention_mlp=True),
                                   dict(normalization="RMSNorm")], ids=lambda f: next(iter(f)))
def test_residual_variants_without_fp8(flags):
    torch.manual_seed(1)
    layer = te.TransformerLayer(H, FFN, HEADS, hidden_dropout=0.0, attention_dropout=0.0, **flags)
    perturb(layer)
    x = randn(S, B, H, seed=3)
    ref_flags = dict(post_ln=flags.get("apply_residual_connection_post_layernorm", False),
                     output_ln=flags.get("output_layernorm", False), parallel=flags.get("parallel_attention_mlp", False),
                     normalization=flags.get("normalization", "LayerNorm"))
    if ref_flags["output_ln"]:  # TE: no norm before the QKV GEMM (a plain `qkv` Linear), one after the MLP
        assert "self_attention.qkv.query_weight" in dict(layer.named_parameters())
        return check_output_layernorm(layer, x)
    assert same(layer(x), ref_layer_fp32(layer, x, **ref_flags))


def check_output_layernorm(layer, x):
    p = dict(layer.named_parameters())
    a = "self_attention.qkv."
    w = torch.cat([p[a + f"{n}_weight"] for n in ("query", "key", "value")])
    b = torch.cat([p[a + f"{n}_bias"] for n in ("query", "key", "value")])
    q, k, v = split_heads(F.linear(x, w, b), HEADS, HEADS, H // HEADS, False)
    ctx = ref_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), mask=ref_mask("causal", S, S))
    hid = x + (F.linear(ctx.permute(2, 0, 1, 3).reshape(S, B, H), p["self_attention.proj.weight"])
               + p["self_attention.proj.bias"])
    m = "layernorm_mlp."
    h = F.gelu(F.linear(F.layer_norm(hid, (H,), p[m + "layer_norm_weight"], p[m + "layer_norm_bias"], 1e-5),
                        p[m + "fc1_weight"], p[m + "fc1_bias"]), approximate="tanh")
    out = hid + (F.linear(h, p[m + "fc2_weight"]) + p[m + "fc2_bias"])
    assert same(layer(x), F.layer_norm(out, (H,), p["layernorm.weight"], p["layernorm.bias"], 1e-5))


@pytest.mark.parametrize("mask_type", ["causal", "no_mask", "padding"])
def test_attention_core_against_torch_sdpa(mask_type):
    """An independent oracle: PyTorch's scaled_dot_product_attention (its own kernel, so not the same
    rounding: 4 ulps of the largest output is the tolerance, the sums being 16 terms of |p v| <= |v|)."""
    dpa = te.DotProductAttention(HEADS, 16, attn_mask_type=mask_type)
    q, k, v = (randn(S, B, HEADS, 16, seed=s) for s in (4, 5, 6))
    pad = None
    if mask_type == "padding":
        lens = torch.tensor([16, 3, 9, 12])
        pad = (torch.arange(S).view(1, S) >= lens.view(B, 1)).view(B, 1, 1, S)
    out = dpa(q, k, v, attention_mask=pad)
    qb, kb, vb = (t.permute(1, 2, 0, 3) for t in (q, k, v))
    if mask_type == "padding":
        full = pad.squeeze(1).unsqueeze(3) | pad
        ref = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=~full)
        ref = ref.masked_fill(full[:, :, :, :1].expand(-1, HEADS, -1, 16), 0.0)  # padded query rows: 0
        ref = torch.nan_to_num(ref)
    else:
        ref = F.scaled_dot_product_attention(qb, kb, vb, is_causal=mask_type == "causal")
    ref = ref.permute(2, 0, 1, 3).reshape(S, B, HEADS * 16)
    tol = 4 * torch.finfo(torch.float32).eps * ref.abs().max()
    assert out.shape == ref.shape and (out - ref).abs().max() <= tol


def test_masks_follow_te_alignment():
    """Causal masks: top-left ("causal") vs bottom-right ("causal_bottom_right") with sq != sk; a
    sliding window (left 2) with TE's inclusive bounds."""
    dpa = te.DotProductAttention(2, 4, attention_type="cross")
    q, k, v = randn(3, 1, 2, 4, seed=7), randn(5, 1, 2, 4, seed=8), randn(5, 1, 2, 4, seed=9)
    qb, kb, vb = (t.permute(1, 2, 0, 3) for t in (q, k, v))
    for mask_type, allowed in (("causal", lambda i, j: j <= i), ("causal_bottom_right", lambda i, j: j <= i + 2)):
        mask = torch.tensor([[not allowed(i, j) for j in range(5)] for i in range(3)])
        want = ref_attention(qb, kb, vb, mask).permute(2, 0, 1, 3).reshape(3, 1, 8)
        assert same(dpa(q, k, v, attn_mask_type=mask_type), want), mask_type
    mask = torch.tensor([[not (i + 2 - 2 <= j <= i + 2) for j in range(5)] for i in range(3)])
    want = ref_attention(qb, kb, vb, mask).permute(2, 0, 1, 3).reshape(3, 1, 8)
    assert same(dpa(q, k, v, attn_mask_type="causal_bottom_right", window_size=(2, 0)), want)


# ------------------------------------------------------------------------------------------ (b) FP8

class ByHand:
    """The layer's forward composed from separate fp8emu.torch modules holding copies of its parameters."""

    def __init__(self, layer):
        p = {n: t.detach().clone() for n, t in layer.named_parameters()}
        a = "self_attention.layernorm_qkv."
        self.qkv = te.LayerNormLinear(H, 3 * H)
        self.proj = te.Linear(H, H, return_bias=True)
        self.mlp = te.LayerNormMLP(H, FFN, return_bias=True)
        with torch.no_grad():
            self.qkv.layer_norm_weight.copy_(p[a + "layer_norm_weight"])
            self.qkv.layer_norm_bias.copy_(p[a + "layer_norm_bias"])
            self.qkv.weight.copy_(torch.cat([p[a + f"{n}_weight"] for n in ("query", "key", "value")]))
            self.qkv.bias.copy_(torch.cat([p[a + f"{n}_bias"] for n in ("query", "key", "value")]))
            self.proj.weight.copy_(p["self_attention.proj.weight"])
            self.proj.bias.copy_(p["self_attention.proj.bias"])
            for n, t in self.mlp.named_parameters():
                t.copy_(p["layernorm_mlp." + n])

    def __call__(self, x):
        q, k, v = split_heads(self.qkv(x), HEADS, HEADS, H // HEADS, False)
        ctx = ref_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), mask=ref_mask("causal", S, S))
        a, a_bias = self.proj(ctx.permute(2, 0, 1, 3).reshape(S, B, H))
        hid = x + (a + a_bias)
        m, m_bias = self.mlp(hid)
        return hid + (m + m_bias)

    def grads(self):
        g = {}
        w, b = self.qkv.weight.grad, self.qkv.bias.grad
        for i, n in enumerate(("query", "key", "value")):
            g[f"self_attention.layernorm_qkv.{n}_weight"] = w[i * H:(i + 1) * H]
            g[f"self_attention.layernorm_qkv.{n}_bias"] = b[i * H:(i + 1) * H]
        g["self_attention.layernorm_qkv.layer_norm_weight"] = self.qkv.layer_norm_weight.grad
        g["self_attention.layernorm_qkv.layer_norm_bias"] = self.qkv.layer_norm_bias.grad
        g["self_attention.proj.weight"], g["self_attention.proj.bias"] = self.proj.weight.grad, self.proj.bias.grad
        for n, t in self.mlp.named_parameters():
            g["layernorm_mlp." + n] = t.grad
        return g

    def metas(self):
        return {"self_attention.layernorm_qkv": self.qkv.fp8_meta, "self_attention.proj": self.proj.fp8_meta,
                "layernorm_mlp.fc1": self.mlp.fp8_meta["fc1"], "layernorm_mlp.fc2": self.mlp.fp8_meta["fc2"]}


def layer_metas(layer):
    return {"self_attention.layernorm_qkv": layer.self_attention.layernorm_qkv.fp8_meta,
            "self_attention.proj": layer.self_attention.proj.fp8_meta,
            "layernorm_mlp.fc1": layer.layernorm_mlp.fp8_meta["fc1"],
            "layernorm_mlp.fc2": layer.layernorm_mlp.fp8_meta["fc2"]}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: type(r).__name__)
def test_fp8_equals_the_modules_composed_by_hand(recipe):
    torch.manual_seed(2)
    layer = te.TransformerLayer(H, FFN, HEADS, hidden_dropout=0.0, attention_dropout=0.0)
    perturb(layer)
    hand = ByHand(layer)
    delayed = isinstance(recipe, fp8emu.DelayedScaling)
    for step in range(3):
        x = randn(S, B, H, scale=1.0 + step, seed=10 + step).requires_grad_()
        xh = x.detach().clone().requires_grad_()
        dy = randn(S, B, H, scale=1e-3 * (1 + step), seed=20 + step)
        layer.zero_grad()
        for mod in (hand.qkv, hand.proj, hand.mlp):
            mod.zero_grad()
        before = {k: m["scaling_fwd"].scale.clone() for k, m in layer_metas(layer).items()} if delayed and step else None
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = layer(x)
            if before is not None:  # TE: the forward scales change at the autocast exit, not inside
                assert all(same(m["scaling_fwd"].scale, before[k]) for k, m in layer_metas(layer).items())
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            yh = hand(xh)
        assert same(y, yh), step
        bwd_before = {k: m["scaling_bwd"].scale.clone() for k, m in layer_metas(layer).items()} if delayed else None
        y.backward(dy)
        yh.backward(dy)
        assert same(x.grad, xh.grad), step
        want = hand.grads()
        for n, p in layer.named_parameters():
            assert same(p.grad, want[n]), (n, step)
        if delayed:
            got, ref = layer_metas(layer), hand.metas()
            for k in got:
                for key in ("scaling_fwd", "scaling_bwd"):
                    assert same(got[k][key].amax_history, ref[k][key].amax_history), (k, key, step)
                    assert same(got[k][key].scale, ref[k][key].scale), (k, key, step)
                # one amax recorded per step (TE's roll leaves row 0 empty for the next one)
                hist = got[k]["scaling_fwd"].amax_history
                assert hist.shape == (4, 3) and int((hist[:, 0] > 0).sum()) == min(step + 1, 3)
                assert not same(got[k]["scaling_bwd"].scale, bwd_before[k])  # updated by the backward


def test_fp8_state_amax_is_the_gemm_inputs():
    """The QKV GEMM's input amax slot is the LayerNorm output's, FC2's the activation's: TE's slots."""
    recipe = fp8emu.DelayedScaling(amax_history_len=2)
    layer = te.TransformerLayer(H, FFN, HEADS, hidden_dropout=0.0, attention_dropout=0.0,
                                apply_residual_connection_post_layernorm=True)
    x = randn(S, B, H, seed=30)
    with te.fp8_autocast(fp8_recipe=recipe):
        _, _, ln = layer.self_attention(x)
    qkv_hist = layer.self_attention.layernorm_qkv.fp8_meta["scaling_fwd"].amax_history
    assert qkv_hist[:, 0].max().item() == ln.abs().max().item()
    w = torch.cat([layer.self_attention.layernorm_qkv.query_weight, layer.self_attention.layernorm_qkv.key_weight,
                   layer.self_attention.layernorm_qkv.value_weight])
    assert qkv_hist[:, 1].max().item() == w.abs().max().item()


def test_decoder_and_bf16_under_fp8():
    """The decoder's cross attention (layernorm_query, key_value) and bfloat16 tensors run, shapes and
    dtypes kept, every parameter receives a gradient."""
    torch.manual_seed(3)
    layer = te.TransformerLayer(64, 128, 4, layer_type="decoder", params_dtype=torch.bfloat16,
                                hidden_dropout=0.0, attention_dropout=0.0, self_attn_mask_type="causal",
                                enc_dec_attn_mask_type="padding")
    x = randn(8, 2, 64, seed=31).to(torch.bfloat16).requires_grad_()
    enc = randn(12, 2, 64, seed=32).to(torch.bfloat16)
    pad = (torch.arange(12).view(1, 12) >= torch.tensor([12, 7]).view(2, 1)).view(2, 1, 1, 12)
    q_pad = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
    with te.fp8_autocast(fp8_recipe=fp8emu.Float8CurrentScaling()):
        y = layer(x, encoder_output=enc, enc_dec_attn_mask=(q_pad, pad))
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    y.float().sum().backward()
    for n, p in layer.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.bfloat16 and p.grad.abs().sum() > 0, n


# ------------------------------------------------------------------------------------------ (c) gradients

@pytest.mark.parametrize("flags", [dict(), dict(fuse_qkv_params=True, attn_input_format="bshd"),
                                   dict(output_layernorm=True), dict(parallel_attention_mlp=True),
                                   dict(apply_residual_connection_post_layernorm=True, normalization="RMSNorm"),
                                   dict(layer_type="decoder"), dict(num_gqa_groups=2, activation="relu", bias=False)],
                         ids=lambda f: ",".join(f) or "default")
@pytest.mark.parametrize("fp8", [False, True])
def test_gradients_reach_every_parameter(flags, fp8):
    torch.manual_seed(4)
    layer = te.TransformerLayer(H, FFN, HEADS, **flags)
    layer.eval()  # no dropout
    perturb(layer)
    x = randn(S, B, H, seed=40).requires_grad_()
    enc = randn(S // 2, B, H, seed=41) if flags.get("layer_type") == "decoder" else None
    # current scaling: a first delayed-scaling step (scale 1) flushes these small gradients to 0 in E5M2
    with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8emu.Float8CurrentScaling()):
        y = layer(x, encoder_output=enc)
    y.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for n, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, n


def test_dropout_only_in_training():
    torch.manual_seed(5)
    layer = te.TransformerLayer(64, 128, 4)  # TE's defaults: hidden and attention dropout 0.1
    x = randn(8, 2, 64, seed=50)
    layer.eval()
    y_eval = layer(x)
    ref = te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    ref.load_state_dict(layer.state_dict())
    assert same(y_eval, ref(x))
    layer.train()
    torch.manual_seed(6)
    y1 = layer(x)
    torch.manual_seed(6)
    y2 = layer(x)
    assert same(y1, y2) and not same(y1, y_eval)


def test_training_reduces_the_loss_under_fp8():
    torch.manual_seed(7)
    layer = te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    opt = torch.optim.Adam(layer.parameters(), lr=3e-3)
    x = randn(8, 4, 64, seed=70)
    target = randn(8, 4, 64, seed=71)
    losses = []
    for _ in range(25):
        with te.fp8_autocast(fp8_recipe=fp8emu.DelayedScaling(amax_history_len=8)):
            loss = F.mse_loss(layer(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# ------------------------------------------------------------------------------------------ (d) errors

def test_bad_arguments_raise_named_errors():
    for kwargs, exc, word in ((dict(tp_size=2), NotImplementedError, "tp_size"),
                              (dict(tp_group=object()), NotImplementedError, "tp_group"),
                              (dict(ub_tp_comm_overlap=True), NotImplementedError, "ub_tp_comm_overlap"),
                              (dict(fuse_wgrad_accumulation=True), NotImplementedError, "fuse_wgrad_accumulation"),
                              (dict(get_rng_state_tracker=lambda: None), NotImplementedError, "get_rng_state_tracker"),
                              (dict(attn_input_format="thd"), NotImplementedError, "thd"),
                              (dict(attn_input_format="hbsd"), ValueError, "attn_input_format"),
                              (dict(self_attn_mask_type="diagonal"), ValueError, "self_attn_mask_type"),
                              (dict(activation="clamped_swiglu"), NotImplementedError, "clamped_swiglu"),
                              (dict(activation="tanh"), ValueError, "activation"),
                              (dict(normalization="BatchNorm"), ValueError, "normalization"),
                              (dict(layer_type="mixer"), ValueError, "layer_type"),
                              (dict(parallel_attention_mlp=True, output_layernorm=True), ValueError,
                               "parallel_attention_mlp"),
                              (dict(num_gqa_groups=3), ValueError, "num_gqa_groups"),
                              (dict(qk_norm_type="RMSNorm"), NotImplementedError, "qk_norm_type"),
                              (dict(softmax_type="learnable"), NotImplementedError, "softmax_type"),
                              (dict(window_size=(-1, 4)), ValueError, "window_size"),
                              (dict(hidden_dropout=1.5), ValueError, "hidden_dropout"),
                              (dict(layer_number=0), ValueError, "layer_number")):
        with pytest.raises(exc, match=word):
            te.TransformerLayer(64, 128, 4, **kwargs)
    with pytest.raises(TypeError):
        te.TransformerLayer(64, 128, 4, not_an_argument=1)
    with pytest.raises(ValueError, match="num_attention_heads"):
        te.MultiheadAttention(60, 8, kv_channels=None)  # TransformerLayer passes kv_channels = 60 // 8, as TE
    with pytest.raises(ValueError, match="num_attention_heads"):
        te.DotProductAttention(6, 16, num_gqa_groups=4)
    # TE's defaults, and the flags TE ignores at tp_size=1 or without userbuffers, are accepted
    te.TransformerLayer(64, 128, 4, sequence_parallel=True, set_parallel_mode=True, ub_overlap_ag=True,
                        seq_length=8, micro_batch_size=2, rotary_pos_interleaved=True, layer_number=3, name="l3")
    layer = te.TransformerLayer(64, 128, 4, self_attn_mask_type="padding")
    x = randn(8, 2, 64)
    with pytest.raises(TypeError, match="bool"):
        layer(x, attention_mask=torch.zeros(2, 1, 1, 8))
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x)
    with pytest.raises(ValueError, match="hidden_states"):
        layer(randn(8, 2, 32))
    for kwargs, word in ((dict(inference_params=object()), "inference_params"),
                         (dict(core_attention_bias_type="alibi"), "core_attention_bias_type"),
                         (dict(cu_seqlens_q=torch.zeros(3, dtype=torch.int32)), "cu_seqlens_q")):
        with pytest.raises(NotImplementedError, match=word):
            layer(x, attention_mask=torch.zeros(2, 1, 1, 8, dtype=torch.bool), **kwargs)
    with pytest.raises(ValueError, match="encoder_output"):
        te.TransformerLayer(64, 128, 4, layer_type="decoder")(x)


# ------------------------------------------------------------------------------------------ (e) names

def te_names(fused=False, bias=True, rms=False, output_layernorm=False, decoder=False, extra_state=False):
    """TE's parameter names in named_parameters order, from TE's transformer.py,
    multi_head_attention.py, layernorm_linear.py, linear.py and layernorm_mlp.py; with extra_state,
    the state_dict keys: each TE module's ``_extra_state`` after its own parameters (module/base.py's
    get_extra_state; DotProductAttention is a TE base module, the TE 2.x norms are ops that have one)."""
    extra = (lambda prefix: [prefix + "_extra_state"]) if extra_state else (lambda prefix: [])

    def lin(prefix, splits, norm):
        names = []
        if norm:
            names += [prefix + "layer_norm_weight"] + ([] if rms else [prefix + "layer_norm_bias"])
        names += [prefix + (f"{s}_weight" if s else "weight") for s in splits]
        if bias:
            names += [prefix + (f"{s}_bias" if s else "bias") for s in splits]
        return names + extra(prefix)
    qkv = [""] if fused else ["query", "key", "value"]
    out = lin("self_attention.layernorm_qkv." if not output_layernorm else "self_attention.qkv.", qkv,
              not output_layernorm)
    out += extra("self_attention.core_attention.")
    out += lin("self_attention.proj.", [""], False)
    if decoder:
        out += lin("inter_attention.layernorm_query.", [""] if fused else ["query"], True)
        out += lin("inter_attention.key_value.", [""] if fused else ["key", "value"], False)
        out += extra("inter_attention.core_attention.")
        out += lin("inter_attention.proj.", [""], False)
    mlp = ["layernorm_mlp.layer_norm_weight"] + ([] if rms else ["layernorm_mlp.layer_norm_bias"])
    mlp += ["layernorm_mlp.fc1_weight"] + (["layernorm_mlp.fc1_bias"] if bias else [])
    mlp += ["layernorm_mlp.fc2_weight"] + (["layernorm_mlp.fc2_bias"] if bias else [])
    out += mlp + extra("layernorm_mlp.")
    if output_layernorm:
        out += ["layernorm.weight"] + ([] if rms else ["layernorm.bias"]) + extra("layernorm.")
    return out


@pytest.mark.parametrize("kw", [dict(), dict(fused=True), dict(bias=False), dict(rms=True),
                                dict(output_layernorm=True), dict(decoder=True), dict(decoder=True, fused=True)],
                         ids=lambda k: ",".join(k) or "default")
def test_parameter_names_are_te_names(kw):
    layer = te.TransformerLayer(64, 128, 4, fuse_qkv_params=kw.get("fused", False), bias=kw.get("bias", True),
                                normalization="RMSNorm" if kw.get("rms") else "LayerNorm",
                                output_layernorm=kw.get("output_layernorm", False),
                                layer_type="decoder" if kw.get("decoder") else "encoder")
    want = te_names(**kw)
    assert [n for n, _ in layer.named_parameters()] == want
    assert list(layer.state_dict()) == te_names(**kw, extra_state=True)
    shapes = dict((n, tuple(p.shape)) for n, p in layer.named_parameters())
    if kw.get("fused"):
        assert shapes["self_attention.layernorm_qkv.weight"] == (192, 64)
    elif not kw.get("output_layernorm"):
        assert shapes["self_attention.layernorm_qkv.query_weight"] == (64, 64)
    assert shapes["layernorm_mlp.fc1_weight"] == (128, 64) and shapes["layernorm_mlp.fc2_weight"] == (64, 128)


def test_default_init_is_te_normal():
    torch.manual_seed(8)
    layer = te.TransformerLayer(256, 512, 8)
    for n, p in layer.named_parameters():
        if n.endswith("weight") and "layer_norm" not in n:
            assert abs(p.std().item() - 0.023) < 0.002 and abs(p.mean().item()) < 0.002, n
        elif "layer_norm_weight" in n:
            assert torch.equal(p, torch.ones_like(p))
        else:
            assert torch.equal(p, torch.zeros_like(p)), n
    seen = []
    te.TransformerLayer(64, 128, 4, init_method=lambda w: seen.append(("in", tuple(w.shape))),
                        output_layer_init_method=lambda w: seen.append(("out", tuple(w.shape))))
    assert sorted(seen) == sorted([("in", (64, 64))] * 3 + [("in", (128, 64)), ("out", (64, 64)), ("out", (64, 128))])


def test_parameters_split_is_one_weight():
    """TE's parameters_split on Linear: the split parameters' GEMM equals one Linear with their
    concatenation, in FP8 (outputs and gradients), and bad splits raise."""
    torch.manual_seed(9)
    split = te.Linear(64, 96, parameters_split=("a", "b", "c"))
    assert [n for n, _ in split.named_parameters()] == ["a_weight", "b_weight", "c_weight", "a_bias", "b_bias",
                                                        "c_bias"]
    whole = te.Linear(64, 96)
    with torch.no_grad():
        whole.weight.copy_(torch.cat([split.a_weight, split.b_weight, split.c_weight]))
        for p in (split.a_bias, split.b_bias, split.c_bias):
            p.add_(randn(32, scale=0.1, seed=id(p) % 1000))
        whole.bias.copy_(torch.cat([split.a_bias, split.b_bias, split.c_bias]))
    x = randn(32, 64, seed=90)
    dy = randn(32, 96, scale=1e-2, seed=91)
    recipe = fp8emu.Float8CurrentScaling()
    with te.fp8_autocast(fp8_recipe=recipe):
        y1, y2 = split(x), whole(x)
    y1.backward(dy)
    y2.backward(dy)
    assert same(y1, y2)
    assert same(torch.cat([split.a_weight.grad, split.b_weight.grad, split.c_weight.grad]), whole.weight.grad)
    assert same(torch.cat([split.a_bias.grad, split.b_bias.grad, split.c_bias.grad]), whole.bias.grad)
    with pytest.raises(ValueError, match="parameters_split"):
        te.Linear(64, 96, parameters_split={"q": 64, "k": 16})
    with pytest.raises(ValueError, match="parameters_split"):
        te.LayerNormLinear(64, 96, parameters_split=())
