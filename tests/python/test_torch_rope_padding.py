"""TE's rotary position embedding and FP8 padding in fp8emu.torch.

Oracles (never the code under test): RoPE from its definition (RoFormer, arXiv:2104.09864: the pair
(x_j, x_{j+d/2}), or (x_{2j}, x_{2j+1}) when interleaved, multiplied as a complex number by
exp(i m theta_j), theta_j = base^(-2j/d)) in numpy float64; RoPE's relative-position property
(attention scores depend on position differences only); TE's padding written out by hand (each
group's rows then zero rows, TE's alignment per recipe from quantization.py).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")

import fp8emu  # noqa: E402
import fp8emu.torch as te  # noqa: E402
from fp8emu.torch.attention import InferenceParams, RotaryPositionEmbedding  # noqa: E402
from fp8emu.torch.attention.rope import apply_rotary_pos_emb  # noqa: E402


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def rope_oracle(x, positions, base=10000.0, interleaved=False, rot_dim=None):
    """x [s, ..., d] float64 numpy; position of row i = positions[i]; the first rot_dim channels rotated."""
    x = np.asarray(x, np.float64)
    d2 = x.shape[-1] if rot_dim is None else rot_dim
    theta = base ** (-np.arange(0, d2, 2, dtype=np.float64) / d2)
    ang = np.asarray(positions, np.float64)[:, None] * theta[None, :]  # [s, d2/2]
    ang = ang.reshape(ang.shape[0], *([1] * (x.ndim - 2)), ang.shape[1])
    out = x.copy()
    if interleaved:
        z = (x[..., 0:d2:2] + 1j * x[..., 1:d2:2]) * np.exp(1j * ang)
        out[..., 0:d2:2], out[..., 1:d2:2] = z.real, z.imag
    else:
        h = d2 // 2
        z = (x[..., :h] + 1j * x[..., h:d2]) * np.exp(1j * ang)
        out[..., :h], out[..., h:d2] = z.real, z.imag
    return out


def test_inv_freq_and_angles_follow_the_definition():
    rope = RotaryPositionEmbedding(64)
    f = rope(12).numpy()
    assert f.shape == (12, 1, 1, 64) and f.dtype == np.float32
    theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    want = np.arange(12)[:, None] * theta[None, :]
    np.testing.assert_allclose(f[:, 0, 0, :32], want, rtol=3e-7, atol=0)
    assert np.array_equal(f[:, 0, 0, :32], f[:, 0, 0, 32:])  # [a, a] layout
    fi = RotaryPositionEmbedding(64, interleaved=True)(12).numpy()
    assert np.array_equal(fi[:, 0, 0, 0::2], f[:, 0, 0, :32]) and np.array_equal(fi[:, 0, 0, 1::2], f[:, 0, 0, :32])
    # offset, interpolation (fixed: positions / factor; dynamic beyond pretrained * factor), rotary_percent
    np.testing.assert_array_equal(rope(4, offset=8).numpy(), f[8:12])
    fixed = RotaryPositionEmbedding(64, seq_len_interpolation_factor=2, pretrained_max_position_embeddings=16)
    np.testing.assert_allclose(fixed(12).numpy()[:, 0, 0, :32], want / 2, rtol=3e-7)
    dyn = fixed(64).numpy()[:, 0, 0, :32]
    np.testing.assert_allclose(dyn, np.arange(64)[:, None] * (16 / 64) * theta[None, :], rtol=3e-7)
    assert RotaryPositionEmbedding(64, rotary_percent=0.5)(3).shape == (3, 1, 1, 32)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("fmt", ["sbhd", "bshd"])
def test_apply_matches_the_definition_in_fp32(interleaved, fused, fmt):
    s, b, h, d = 10, 3, 2, 32
    freqs = RotaryPositionEmbedding(d, interleaved=interleaved)(16)
    x = randn(s, b, h, d, seed=1)
    t = x if fmt == "sbhd" else x.transpose(0, 1).contiguous()
    y = apply_rotary_pos_emb(t, freqs, fmt, interleaved=interleaved, fused=fused)
    assert y.shape == t.shape and y.dtype == torch.float32
    y = y if fmt == "sbhd" else y.transpose(0, 1)
    want = rope_oracle(x.numpy(), np.arange(s), interleaved=interleaved)
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=2e-5)


def test_partial_rotation_passes_the_other_channels_and_thd_is_per_sequence():
    x = randn(9, 1, 2, 48, seed=2)
    freqs = RotaryPositionEmbedding(32)(20)
    y = apply_rotary_pos_emb(x, freqs, "sbhd", fused=True)
    assert torch.equal(y[..., 32:], x[..., 32:])
    np.testing.assert_allclose(y.numpy(), rope_oracle(x.numpy(), np.arange(9), rot_dim=32), atol=2e-5, rtol=0)
    # thd: two packed sequences of 4 and 5 tokens, each from position 0 (and with start positions)
    t = x[:, 0]
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    y = apply_rotary_pos_emb(t, freqs, "thd", cu_seqlens=cu)
    pos = np.r_[np.arange(4), np.arange(5)]
    np.testing.assert_allclose(y.numpy(), rope_oracle(t.numpy(), pos, rot_dim=32), atol=2e-5, rtol=0)
    y = apply_rotary_pos_emb(t, freqs, "thd", cu_seqlens=cu, start_positions=torch.tensor([3, 7]))
    pos = np.r_[np.arange(4) + 3, np.arange(5) + 7]
    np.testing.assert_allclose(y.numpy(), rope_oracle(t.numpy(), pos, rot_dim=32), atol=2e-5, rtol=0)


def test_start_positions_offset_each_sequence_of_the_batch():
    x = randn(6, 2, 1, 16, seed=3)
    freqs = RotaryPositionEmbedding(16)(32)
    y = apply_rotary_pos_emb(x, freqs, "sbhd", start_positions=torch.tensor([0, 10]))
    for i, off in enumerate((0, 10)):
        np.testing.assert_allclose(y[:, i].numpy(), rope_oracle(x[:, i].numpy(), np.arange(6) + off), atol=2e-5,
                                   rtol=0)
    with pytest.raises(ValueError, match="only suppported up to 32"):
        apply_rotary_pos_emb(x, freqs, "sbhd", start_positions=torch.tensor([0, 30]))
    with pytest.raises(ValueError, match="Unsupported tensor_format"):
        apply_rotary_pos_emb(x, freqs, "hsbd")
    with pytest.raises(ValueError, match="cu_seqlens must not be None"):
        apply_rotary_pos_emb(x[:, 0], freqs, "thd")


def test_bf16_fused_rounds_once_and_unfused_rounds_each_op():
    x = randn(64, 4, 4, 64, seed=4, dtype=torch.bfloat16)
    freqs = RotaryPositionEmbedding(64)(64)
    exact = rope_oracle(x.float().numpy(), np.arange(64))
    once = torch.from_numpy(exact.astype(np.float32)).to(torch.bfloat16).float().numpy()
    fused = apply_rotary_pos_emb(x, freqs, fused=True).float().numpy()
    unfused = apply_rotary_pos_emb(x, freqs, fused=False).float().numpy()
    # one rounding of an fp32 result that is within a few fp32 ulps of exact: off by one bf16 ulp only
    # where the exact value sits next to a bf16 rounding boundary
    assert np.mean(fused != once) < 2e-3
    assert np.mean(unfused != once) > 0.05  # cos, sin, both products and the sum each rounded to bf16
    np.testing.assert_allclose(fused, exact, rtol=2 ** -8, atol=1e-5)  # atol: fp32 angles of |x| ~ 4


def test_transformer_layer_applies_rope_to_queries_and_keys():
    torch.manual_seed(0)
    layer = te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    x = randn(16, 2, 64, seed=5)
    base = layer(x)
    rope = RotaryPositionEmbedding(16)
    # zero angles: cos 1, sin 0, exactly the layer without rotary embeddings
    assert torch.equal(layer(x, rotary_pos_emb=torch.zeros(16, 1, 1, 16)), base)
    y0 = layer(x, rotary_pos_emb=rope(16))
    assert not torch.allclose(y0, base, atol=1e-3)
    # RoPE's scores depend on relative positions only: shifting every position changes rounding only
    y5 = layer(x, rotary_pos_emb=rope(16, offset=5))
    torch.testing.assert_close(y5, y0, rtol=0, atol=2e-5)
    # a (q, k) pair with both the same equals the single tensor, as TE duplicates it
    assert torch.equal(layer(x, rotary_pos_emb=(rope(16), rope(16))), y0)
    with te.fp8_autocast(enabled=True):
        y = layer(x, rotary_pos_emb=rope(16))
    y.sum().backward()
    assert torch.isfinite(y).all() and layer.self_attention.proj.weight.grad is not None


def test_inference_params_refuses_with_the_reason():
    with pytest.raises(NotImplementedError, match="InferenceParams"):
        InferenceParams(1, 16)


def test_fp8_padding_pads_each_group_with_zero_rows_and_unpads_back():
    x = randn(20, 8, seed=6).requires_grad_()
    pad, unpad = te.Fp8Padding(2), te.Fp8Unpadding(2)
    out, padded = pad(x, [3, 17])
    assert padded == [16, 32] and out.shape == (48, 8)
    assert torch.equal(out[:3], x[:3]) and torch.equal(out[16:33], x[3:20])
    assert not out[3:16].any() and not out[33:].any()
    g = randn(48, 8, seed=7)
    out.backward(g)
    assert torch.equal(x.grad, torch.cat([g[:3], g[16:33]]))
    y = unpad(out, [3, 17])
    assert torch.equal(y, x)
    same, m = te.Fp8Padding(2)(x[:16], [16, 0])
    assert same is not None and m == [16, 0] and same.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="Number of splits should match number of GEMMs"):
        te.Fp8Padding(3)(x, [3, 17])


def test_fp8_padding_alignment_follows_the_recipe_as_te():
    x = randn(5, 4, seed=8)
    cases = [(None, 16), (fp8emu.DelayedScaling(), 16), (fp8emu.Float8CurrentScaling(), 16),
             (fp8emu.MXFP8BlockScaling(), 32), (fp8emu.NVFP4BlockScaling(), 128)]
    for rec, align in cases:
        with te.fp8_autocast(enabled=rec is not None, fp8_recipe=rec):
            _, padded = te.Fp8Padding(1)(x, [5])
        assert padded == [align], rec
    assert te.Fp8Padding(1, align_size=8)(x, [5])[1] == [8]


def test_padded_grouped_linear_gives_the_unpadded_rows_of_each_group():
    """TE's MoE pattern: pad, GroupedLinear in FP8, unpad. Zero rows add nothing to the amax and
    each output row depends only on its own input row, so the result equals each group's rows
    run alone through a Linear with the same weights (delayed scaling, one step)."""
    torch.manual_seed(1)
    grouped = te.GroupedLinear(2, 32, 16, bias=False)
    x = randn(21, 32, seed=9)
    m_splits = [5, 16]
    with te.fp8_autocast(enabled=True):
        xp, padded = te.Fp8Padding(2)(x, m_splits)
        y = te.Fp8Unpadding(2)(grouped(xp, padded), m_splits)
    assert y.shape == (21, 16)
    for i, (lo, hi) in enumerate(((0, 5), (5, 21))):
        lin = te.Linear(32, 16, bias=False)
        with torch.no_grad():
            lin.weight.copy_(getattr(grouped, f"weight{i}"))
        rows = torch.cat([x[lo:hi], torch.zeros((-(hi - lo)) % 16, 32)])
        with te.fp8_autocast(enabled=True):
            want = lin(rows)[:hi - lo]
        assert torch.equal(y[lo:hi], want)


def test_te_llama_decoder_layer_pattern_runs_in_fp8():
    """TE's docs/examples/te_llama/te_llama.py builds each decoder layer as a TransformerLayer with
    RMSNorm, SwiGLU, no biases, grouped-query attention, bshd inputs and one RotaryPositionEmbedding
    passed as rotary_pos_emb; its weight loader writes the gate and up projections into
    fc1_weight[:ffn] and fc1_weight[ffn:]. The same here at small sizes, FP8 forward and backward."""
    torch.manual_seed(0)
    hidden, ffn, heads, kv_heads, seq = 64, 128, 4, 2, 16
    layer = te.TransformerLayer(hidden, ffn, heads, bias=False, layernorm_epsilon=1e-5, hidden_dropout=0.0,
                                attention_dropout=0.0, fuse_qkv_params=False, normalization="RMSNorm",
                                activation="swiglu", attn_input_format="bshd", num_gqa_groups=kv_heads)
    mlp = layer.layernorm_mlp
    assert mlp.fc1_weight.shape == (2 * ffn, hidden)
    assert layer.self_attention.layernorm_qkv.key_weight.shape == (kv_heads * hidden // heads, hidden)
    gate, up = randn(ffn, hidden, seed=11) * 0.1, randn(ffn, hidden, seed=12) * 0.1
    with torch.no_grad():  # te_llama's replace_params
        mlp.fc1_weight.data[:ffn] = gate
        mlp.fc1_weight.data[ffn:] = up
    rope = RotaryPositionEmbedding(hidden // heads)(max_seq_len=64)
    x = randn(2, seq, hidden, seed=13)
    y32 = layer(x, rotary_pos_emb=rope)
    # the MLP half by hand: SwiGLU of the written gate and up
    h = randn(16, hidden, seed=14)
    n = torch.nn.functional.rms_norm(h, (hidden,), mlp.layer_norm_weight, 1e-5)
    want = (torch.nn.functional.silu(n @ gate.T) * (n @ up.T)) @ mlp.fc2_weight.T
    torch.testing.assert_close(mlp(h)[0], want, rtol=1e-5, atol=1e-5)  # (out, bias): return_bias in a layer
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8emu.DelayedScaling(fp8_format=fp8emu.Format.HYBRID)):
        y8 = layer(x, rotary_pos_emb=rope)
    y8.sum().backward()
    assert y8.shape == x.shape and torch.isfinite(y8).all() and not torch.equal(y8, y32)
    assert all(p.grad is not None for p in layer.parameters())


def test_odd_and_zero_rotary_dims_as_te():
    f = RotaryPositionEmbedding(10, rotary_percent=0.5)(4)  # dim 5: TE's arange(0, 5, 2) gives 3 angles
    assert f.shape == (4, 1, 1, 6)
    assert RotaryPositionEmbedding(0)(3).shape == (3, 1, 1, 0)


def test_fused_qkv_rope_splits_as_te_kernel():
    """TE's fused QKV kernel: qkv [s, b, g, q + k + v]; q out [s, b, g q / k, k] (each group's query
    heads of the key width), k out [s, b, g, k], v out [s, b, g, v]; q and k rotated."""
    from fp8emu.torch.attention.rope import apply_fused_qkv_rotary_pos_emb
    s, b, g, d = 6, 2, 2, 8
    qkv = randn(s, b, g, 2 * d + d + d, seed=21)
    freqs = RotaryPositionEmbedding(d)(16)
    q, k, v = apply_fused_qkv_rotary_pos_emb(qkv, freqs, freqs, [2 * d, d, d])
    assert q.shape == (s, b, 2 * g, d) and k.shape == (s, b, g, d) and v.shape == (s, b, g, d)
    want_q = apply_rotary_pos_emb(qkv[..., :2 * d].reshape(s, b, 2 * g, d), freqs, fused=True)
    assert torch.equal(q, want_q) and torch.equal(v, qkv[..., 3 * d:])
    np.testing.assert_allclose(k.numpy(), rope_oracle(qkv[..., 2 * d:3 * d].numpy(), np.arange(s)), atol=2e-5,
                               rtol=0)
    with pytest.raises(ValueError, match="thd"):
        apply_fused_qkv_rotary_pos_emb(qkv, freqs, freqs, [2 * d, d, d], tensor_format="thd")
