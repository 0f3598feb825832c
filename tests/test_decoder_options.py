"""The options of today's decoders (issue 24), each against a hand-written reference on a tiny example.

RMSNorm (the formula, ``torch.nn.RMSNorm``, Gemma's ``1 + weight``), the gated feed-forward (SwiGLU, GeGLU),
grouped-query attention (= multi-head attention whose K/V weights are the repeated KV heads; the cache holds only
the KV heads), QK-norm and the Q/K/V bias (against attention written out with einsum); on a GPT: cached decoding
equals the full pass, the fast paths give the plain logits, causality (hypothesis), the config's checks.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tformer import GPT, GPTConfig, fast
from tformer.nn.attention import MultiHeadAttention
from tformer.nn.feedforward import GatedFeedForward
from tformer.nn.norms import RMSNorm

VOCAB = 50

# each option alone, then all together (a Llama / Qwen3-shaped block)
OPTIONS = {
    "rmsnorm": dict(norm="rmsnorm"),
    "gemma_norm": dict(norm="rmsnorm", norm_weight_offset=1.0),
    "swiglu": dict(ffn="swiglu"),
    "geglu": dict(ffn="geglu"),
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "qk_norm": dict(qk_norm=True),
    "qkv_bias": dict(bias=False, qkv_bias=True),
    "window": dict(sliding_window=3),
    "softcap": dict(attn_softcap=2.0, final_softcap=5.0),
    "all": dict(norm="rmsnorm", ffn="swiglu", n_kv_heads=2, qk_norm=True, bias=False, qkv_bias=True, positional="rope"),
}
OPTIONS["head_dim"] = dict(head_dim=8, positional="rope")  # Dh apart from d_model / n_heads: W_O is (D, H·Dh)
OPTIONS["no_norm_scale"] = dict(norm="rmsnorm", norm_scale=False)
OPTIONS["rope_yarn"] = dict(
    positional="rope", rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=8)
)
OPTIONS["gemma3"] = dict(  # local:global layers at their own RoPE bases, sandwich norms, scaled embeddings
    norm="rmsnorm",
    norm_weight_offset=1.0,
    ffn="geglu",
    qk_norm=True,
    bias=False,
    positional="rope",
    head_dim=24,
    n_kv_heads=2,
    sliding_window=3,
    sliding_window_pattern=2,
    rope_base=1e6,
    rope_local_base=100.0,
    sandwich_norm=True,
    embed_scale=True,
    attn_scale=0.1,
)
OPTIONS["everything"] = dict(
    OPTIONS["gemma3"],
    attn_softcap=5.0,
    final_softcap=10.0,
    qkv_bias=True,
    rope_scaling=dict(
        rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8
    ),
)


def _gpt(seed: int = 0, **options) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=32, **options)).eval()
    with torch.no_grad():  # move the norms' scales away from their start, so a wrong formula shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return model


# ------------------------------------------------------------------------------------------------ RMSNorm


def test_rmsnorm_is_the_formula_written_by_hand():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 8), torch.randn(8)
    norm = RMSNorm(8, eps=1e-6)
    norm.weight.data.copy_(w)
    by_hand = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(norm(x), by_hand, atol=1e-6)
    # a known value: x = [3, 4] has mean(x²) = 12.5, so y = x / √12.5 (eps 0, weight 1)
    assert torch.allclose(RMSNorm(2, eps=0.0)(torch.tensor([3.0, 4.0])), torch.tensor([0.8485281, 1.1313709]))


def test_rmsnorm_equals_torch_rmsnorm():
    torch.manual_seed(0)
    x = torch.randn(4, 5, 16)
    ours, theirs = RMSNorm(16, eps=1e-5), torch.nn.RMSNorm(16, eps=1e-5)
    w = torch.randn(16)
    ours.weight.data.copy_(w)
    theirs.weight.data.copy_(w)
    assert torch.allclose(ours(x), theirs(x), atol=1e-6)


def test_gemma_rmsnorm_scales_by_one_plus_weight_and_starts_as_the_identity_scale():
    torch.manual_seed(0)
    x, w = torch.randn(3, 8), torch.randn(8)
    gemma = RMSNorm(8, eps=1e-6, weight_offset=1.0)
    assert torch.equal(gemma.weight, torch.zeros(8))  # 1 + 0 = 1
    assert torch.allclose(gemma(x), RMSNorm(8, eps=1e-6)(x))
    gemma.weight.data.copy_(w)
    by_hand = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (1 + w)
    assert torch.allclose(gemma(x), by_hand, atol=1e-6)


def test_rmsnorm_keeps_the_input_dtype():
    x = torch.randn(2, 8).to(torch.bfloat16)
    out = RMSNorm(8)(x)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), RMSNorm(8)(x.float()), atol=1e-2)


# ------------------------------------------------------------------------------------- gated feed-forward


@pytest.mark.parametrize(
    "kind, act",
    [("swiglu", F.silu), ("geglu", lambda h: 0.5 * h * (1 + torch.tanh(0.7978845608 * (h + 0.044715 * h**3))))],
)
def test_gated_feed_forward_is_down_of_act_gate_times_up(kind, act):
    torch.manual_seed(0)
    ff = GatedFeedForward(4, 6, kind).eval()
    x = torch.randn(1, 3, 4)
    gate, up, down = ff.gate_proj.weight, ff.up_proj.weight, ff.down_proj.weight  # (F, D), (F, D), (D, F)
    by_hand = torch.zeros(1, 3, 4)
    for t in range(3):
        for i in range(4):
            by_hand[0, t, i] = sum(down[i, j] * act(x[0, t] @ gate[j]) * (x[0, t] @ up[j]) for j in range(6))
    assert torch.allclose(ff(x), by_hand, atol=1e-5)
    assert ff.gate_proj.bias is None  # no bias unless asked


def test_swiglu_on_a_known_example():
    ff = GatedFeedForward(1, 1, "swiglu")
    for layer, w in ((ff.gate_proj, 2.0), (ff.up_proj, 3.0), (ff.down_proj, 0.5)):
        layer.weight.data.fill_(w)
    # x = 1: gate 2, silu(2) = 2·σ(2) = 1.7615942; up 3; down 0.5 → 0.5 · 1.7615942 · 3 = 2.6423912
    assert torch.allclose(ff(torch.ones(1, 1, 1)), torch.tensor(2.6423912))


# ---------------------------------------------------------------------------------------------- attention


def _attention_by_hand(mha: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Causal self-attention written out: per-head Q, K, V slices of the weight, K/V head h // G for query head h."""
    h, hkv, dh = mha.n_heads, mha.n_kv_heads, mha.head_dim
    w, b = mha.qkv_proj.weight, mha.qkv_proj.bias
    proj = x @ w.T + (0 if b is None else b)  # (B, T, (H + 2·Hkv)·Dh)
    q = proj[..., : h * dh].unflatten(-1, (h, dh))  # (B, T, H, Dh)
    k = proj[..., h * dh : (h + hkv) * dh].unflatten(-1, (hkv, dh))
    v = proj[..., (h + hkv) * dh :].unflatten(-1, (hkv, dh))
    if mha.q_norm is not None:
        q = q / torch.sqrt(q.square().mean(-1, keepdim=True) + mha.q_norm.eps) * mha.q_norm.weight
        k = k / torch.sqrt(k.square().mean(-1, keepdim=True) + mha.k_norm.eps) * mha.k_norm.weight
    t = x.shape[1]
    allowed = torch.ones(t, t, dtype=torch.bool).tril()  # causal
    if mha.sliding_window is not None:
        allowed &= torch.ones(t, t, dtype=torch.bool).triu(-(mha.sliding_window - 1))  # i - j < window
    heads = []
    for head in range(h):
        g = head // (h // hkv)
        scores = torch.einsum("bqd,bkd->bqk", q[:, :, head], k[:, :, g]) / dh**0.5
        if mha.softcap is not None:
            scores = mha.softcap * torch.tanh(scores / mha.softcap)
        scores = scores.masked_fill(~allowed, float("-inf"))
        heads.append(scores.softmax(-1) @ v[:, :, g])  # (B, T, Dh)
    return mha.out_proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(n_kv_heads=2),
        dict(n_kv_heads=1),
        dict(head_dim=6),
        dict(qk_norm=True),
        dict(bias=False, qkv_bias=True),
        dict(sliding_window=2),
        dict(softcap=1.5),
        dict(n_kv_heads=2, head_dim=6, qk_norm=True, bias=False, qkv_bias=True, sliding_window=3, softcap=2.0),
    ],
)
def test_attention_options_equal_attention_written_by_hand(options):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, **options).eval()
    if mha.q_norm is not None:
        with torch.no_grad():
            mha.q_norm.weight.add_(torch.randn(mha.head_dim))
            mha.k_norm.weight.add_(torch.randn(mha.head_dim))
    x = torch.randn(2, 5, 16)
    expected = _attention_by_hand(mha, x)
    assert torch.allclose(mha(x, causal=True), expected, atol=1e-5)


def test_qkv_bias_alone_is_qwen2s_layout():
    mha = MultiHeadAttention(16, 4, bias=False, qkv_bias=True)
    assert mha.qkv_proj.bias is not None and mha.out_proj.bias is None


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_attention_equals_mha_with_the_kv_heads_repeated(n_kv_heads):
    torch.manual_seed(0)
    d, h, dh = 16, 4, 4
    gqa = MultiHeadAttention(d, h, n_kv_heads=n_kv_heads).eval()
    mha = MultiHeadAttention(d, h).eval()
    w, b = gqa.qkv_proj.weight, gqa.qkv_proj.bias
    q_rows, kv_rows = h * dh, n_kv_heads * dh

    def repeat(rows: torch.Tensor) -> torch.Tensor:  # (Hkv·Dh, ...) -> (H·Dh, ...): head j for heads j·G … j·G+G−1
        return rows.unflatten(0, (n_kv_heads, dh)).repeat_interleave(h // n_kv_heads, dim=0).flatten(0, 1)

    with torch.no_grad():
        for ours, theirs in ((mha.qkv_proj.weight, w), (mha.qkv_proj.bias, b)):
            k, v = theirs[q_rows : q_rows + kv_rows], theirs[q_rows + kv_rows :]
            ours.copy_(torch.cat([theirs[:q_rows], repeat(k), repeat(v)]))
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(2, 6, d)
    mask = torch.tensor([[True] * 6, [False, False, True, True, True, True]])[:, None, None, :]
    assert torch.allclose(gqa(x, mask=mask, causal=True), mha(x, mask=mask, causal=True), atol=1e-6)
    assert gqa.qkv_proj.weight.shape == (q_rows + 2 * kv_rows, d)


# --------------------------------------------------------------------------------------------------- GPT


def test_the_defaults_are_gpt2s_block():
    """The new fields are off by default: the same parameter names and shapes as before (checkpoints still load)."""
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB))
    shapes = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    assert shapes["decoder.layers.0.self_attn.qkv_proj.weight"] == (192, 64)
    assert shapes["decoder.layers.0.self_attn.qkv_proj.bias"] == (192,)
    assert shapes["decoder.layers.0.ff.linear1.weight"] == (256, 64)
    assert shapes["decoder.layers.0.add_norm1.norm.bias"] == (64,)
    assert not any("q_norm" in n or "gate_proj" in n for n in shapes)
    assert isinstance(model.decoder.norm, torch.nn.LayerNorm)


def test_the_options_build_their_modules():
    model = _gpt(**OPTIONS["all"])
    layer = model.decoder.layers[0]
    assert isinstance(layer.add_norm1.norm, RMSNorm) and isinstance(model.decoder.norm, RMSNorm)
    assert isinstance(layer.ff, GatedFeedForward) and layer.ff.gate_proj.bias is None
    attn = layer.self_attn
    assert (attn.n_heads, attn.n_kv_heads, attn.qkv_proj.weight.shape[0]) == (4, 2, 64 + 2 * 32)
    assert attn.q_norm is not None and attn.qkv_proj.bias is not None and attn.out_proj.bias is None


@pytest.mark.parametrize("name", OPTIONS)
def test_cached_decoding_equals_the_full_pass_and_the_cache_holds_the_kv_heads(name):
    model = _gpt(**OPTIONS[name])
    ids = torch.randint(0, VOCAB, (2, 7))
    full = model(ids)
    cache = model.new_cache()
    steps = [model(ids[:, :3], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(3, 7)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    kv_heads = model.config.n_kv_heads or model.config.n_heads
    assert cache.layers[0].k.shape[1] == kv_heads and cache.layers[0].v.shape[1] == kv_heads


@pytest.mark.parametrize("name", OPTIONS)
def test_the_fast_paths_give_the_plain_logits(name):
    plain = _gpt(**OPTIONS[name])
    swapped = fast.speed_up(copy.deepcopy(plain))
    ids = torch.randint(0, VOCAB, (3, 9))
    assert torch.allclose(swapped(ids), plain(ids), atol=1e-5)
    cache_a, cache_b = plain.new_cache(), swapped.new_cache()
    plain(ids[:, :5], cache=cache_a), swapped(ids[:, :5], cache=cache_b)
    step = ids[:, 5:6]
    assert torch.allclose(swapped(step, cache=cache_b), plain(step, cache=cache_a), atol=1e-5)


def test_left_padding_with_every_option_equals_the_unpadded_row():
    model = _gpt(**OPTIONS["all"])
    ids = torch.randint(1, VOCAB, (1, 5))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 5])
    positions = torch.tensor([[0, 0, 0, 0, 1, 2, 3, 4]])
    assert torch.allclose(model(padded, attention_mask=mask, positions=positions)[:, 3:], model(ids), atol=1e-5)


def test_the_gated_ffn_is_trained_with_the_residual_scaled_init():
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, ffn="swiglu", n_layers=8))
    std = model.decoder.layers[0].ff.down_proj.weight.std().item()
    assert 0.02 / 4 * 0.8 < std < 0.02 / 4 * 1.2  # 0.02 / √(2·8)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(norm="batchnorm"), r"GPTConfig\.norm must be one of 'layernorm', 'rmsnorm', got 'batchnorm'"),
        (dict(ffn="glu"), r"GPTConfig\.ffn must be one of 'mlp', 'swiglu', 'geglu', got 'glu'"),
        (dict(n_kv_heads=3), r"GPTConfig\.n_kv_heads must be None or a positive divisor of n_heads=4, got 3"),
        (dict(n_kv_heads=0), r"GPTConfig\.n_kv_heads must be None or a positive divisor"),
        (dict(n_kv_heads="2"), r"GPTConfig\.n_kv_heads must be an integer or None, got '2'"),
        (dict(qk_norm=1), r"GPTConfig\.qk_norm must be true or false, got 1"),
        (dict(qkv_bias="yes"), r"GPTConfig\.qkv_bias must be true or false or None"),
        (dict(norm_weight_offset=1.0), r"GPTConfig\.norm_weight_offset applies to norm='rmsnorm' only"),
        (dict(norm_weight_offset=float("nan"), norm="rmsnorm"), r"GPTConfig\.norm_weight_offset must be a finite"),
        (dict(sliding_window=0), r"GPTConfig\.sliding_window must be None or > 0, got 0"),
        (dict(attn_softcap=-1.0), r"GPTConfig\.attn_softcap must be None or > 0, got -1.0"),
        (dict(final_softcap=0.0), r"GPTConfig\.final_softcap must be None or > 0"),
    ],
)
def test_the_config_names_the_field_and_the_allowed_values(change, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig.preset("tiny", vocab_size=VOCAB, **change)


def test_a_config_with_the_options_round_trips_through_json():
    config = GPTConfig.preset("tiny", vocab_size=VOCAB, **OPTIONS["all"])
    assert GPTConfig.from_dict(config.to_dict()) == config
    assert config.layer.n_kv_heads == 2 and config.layer.ffn == "swiglu"


def test_sliding_window_mask_equals_the_mask_written_by_hand():
    from tformer.nn.masks import causal_mask, sliding_window_mask

    by_hand = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(sliding_window_mask(4, window=2)[0, 0], by_hand)
    # right-aligned (a cache holds 3 earlier positions): the queries stand at positions 3 and 4
    cached = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(sliding_window_mask(2, 5, window=3)[0, 0], cached)
    assert torch.equal(sliding_window_mask(3, 5, window=5), causal_mask(3, 5))  # a window as long as the keys
    with pytest.raises(ValueError, match="window >= 1"):
        sliding_window_mask(2, window=0)


def test_one_layer_with_a_window_of_two_forgets_what_is_two_positions_back():
    model = _gpt(n_layers=1, sliding_window=2)
    ids = torch.randint(1, VOCAB, (1, 6))
    changed = ids.clone()
    changed[0, 0] = 0
    a, b = model(ids), model(changed)
    assert not torch.allclose(a[:, 1], b[:, 1])  # position 1 sees 0 and 1
    assert torch.allclose(a[:, 2:], b[:, 2:], atol=1e-6)  # positions 2 … no longer see 0


def test_final_softcap_is_c_tanh_of_the_plain_logits():
    capped, plain = _gpt(seed=3, final_softcap=0.5), _gpt(seed=3)
    ids = torch.randint(0, VOCAB, (2, 5))
    expected = 0.5 * torch.tanh(plain(ids) / 0.5)
    assert torch.allclose(capped(ids), expected, atol=1e-6) and capped(ids).abs().max() < 0.5


# ----------------------------------------------------------------------------------------------- property

ALL_ON = _gpt(**OPTIONS["everything"])


@settings(max_examples=25, deadline=None)
@given(data=st.data(), tokens=st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=12))
def test_with_every_option_on_the_gpt_is_causal(data, tokens):
    t = data.draw(st.integers(0, len(tokens) - 2), label="t")
    n = len(tokens) - t - 1
    future = data.draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n), label="future")
    before, after = ALL_ON(torch.tensor([tokens])), ALL_ON(torch.tensor([tokens[: t + 1] + future]))
    assert (before[:, : t + 1] - after[:, : t + 1]).abs().max() <= 1e-5


def test_the_trace_shows_the_gate_and_up_projections_and_the_repeated_kv_heads():
    from tformer.inspection import trace

    model = _gpt(**OPTIONS["all"])
    tr = trace(model, [[1, 2, 3, 4]])
    get = lambda stage, **kw: tr.get(stage, block="decoder", layer=0, **kw).tensor  # noqa: E731
    gate, up, ffn = get("ffn_gate"), get("ffn_up"), get("ffn")
    assert gate.shape == up.shape == (1, 4, 256)
    torch.testing.assert_close(model.decoder.layers[0].ff.down_proj(F.silu(gate) * up), ffn, atol=1e-6, rtol=0)
    k = get("k", kind="self")  # (B, H, T, Dh): the 2 KV heads, each repeated for its 2 query heads
    assert k.shape == (1, 4, 4, 16) and torch.equal(k[:, 0], k[:, 1]) and torch.equal(k[:, 2], k[:, 3])
    assert "RMSNorm" in tr.get("add_norm", block="decoder", layer=0).note


def test_the_explore_formulas_name_rmsnorm_and_the_gated_feed_forward():
    from tformer.explore.formulas import formula
    from tformer.inspection import trace

    tr = trace(_gpt(**OPTIONS["all"]), [[1, 2, 3]])
    say = lambda stage: formula(stage, "decoder", "", tr.select(stages=[stage])[0].note)  # noqa: E731
    assert say("add_norm") == "x + Dropout(sublayer(RMSNorm(x))) (pre-LN: the norm comes first)"
    assert say("ffn") == "FFN(x) = (SiLU(x·W_gate) ⊙ x·W_up)·W_down"
    assert say("final_norm").startswith("RMSNorm(x) = x / √(mean(x²) + ε)")
    plain = trace(_gpt(), [[1, 2, 3]])
    assert formula("add_norm", "decoder", "", plain.select(stages=["add_norm"])[0].note).startswith(
        "x + Dropout(sublayer(LayerNorm"
    )


LLAMA_LIKE = _gpt(**OPTIONS["all"])  # no sliding window: it counts the padding slots, as Hugging Face's does


@settings(max_examples=20, deadline=None)
@given(tokens=st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=8), n_pad=st.integers(1, 5))
def test_with_every_option_on_left_padding_never_changes_the_real_positions(tokens, n_pad):
    n = len(tokens)
    padded = torch.tensor([[0] * n_pad + tokens])
    mask = torch.tensor([[False] * n_pad + [True] * n])
    positions = torch.tensor([[0] * n_pad + list(range(n))])
    out = LLAMA_LIKE(padded, attention_mask=mask, positions=positions)[:, n_pad:]
    assert (out - LLAMA_LIKE(torch.tensor([tokens]))).abs().max() <= 1e-5


@pytest.mark.parametrize("options", [dict(), dict(ffn="swiglu"), dict(n_kv_heads=1, ffn="geglu", norm="rmsnorm")])
def test_the_parameter_count_from_the_fields_counts_the_gate_and_the_smaller_kv_heads(options):
    config = GPTConfig.preset("small", vocab_size=1000, **options)
    actual = sum(p.numel() for p in GPT(config).parameters())
    assert abs(config.approx_parameters() / actual - 1) < 0.01


@pytest.mark.parametrize("use_fast", [False, True])
@pytest.mark.parametrize("name", ["everything", "all"])  # (soft-capped: the reference path; else the fused GQA one)
def test_with_every_option_on_every_parameter_gets_a_gradient(use_fast, name):
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, max_len=32, dropout=0.1, **OPTIONS[name]))
    model = fast.speed_up(model) if use_fast else model
    ids = torch.randint(0, VOCAB, (2, 8))
    F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
