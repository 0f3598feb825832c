"""The layer-level options of today's decoders (issue 24): RoPE scaling, ``head_dim``, per-layer windows and RoPE
bases (Gemma 3's local:global pattern), sandwich norms, norms without a scale, scaled embeddings, the attention scale,
token shift.

The RoPE frequencies are checked against ``transformers``' own functions (``ROPE_INIT_FUNCTIONS``); the rest against
the formula written out, or against an equivalent model built another way.
"""

import math

import pytest
import torch

from tformer import GPT, GPTConfig
from tformer.nn.attention import reference_attention, scaled_dot_product_attention
from tformer.nn.cache import KVCache
from tformer.nn.layers import AddNorm, LayerConfig
from tformer.nn.positional import apply_rotary, rope_frequencies, rotary_tables
from tformer.nn.shift import shift_tokens

VOCAB = 40
LLAMA3 = dict(
    rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64
)


def _gpt(seed: int = 0, **options) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=64, **options)).eval()


# ------------------------------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize(
    "scaling",
    [
        dict(rope_type="linear", factor=4.0),
        dict(LLAMA3, original_max_position_embeddings=8192),
        dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=4096),
        dict(
            rope_type="yarn", factor=8.0, original_max_position_embeddings=2048, beta_fast=16, beta_slow=2, mscale=1.0
        ),
        dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=2048, mscale=1.0, mscale_all_dim=0.8),
    ],
    ids=["linear", "llama3", "yarn", "yarn-betas", "yarn-mscale"],
)
@pytest.mark.parametrize("head_dim, base", [(64, 10000.0), (128, 500000.0)])
def test_rope_frequencies_equal_transformers_own_functions(scaling, head_dim, base):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=16384,
        rope_parameters={"rope_theta": base, **scaling},
    )
    theirs, their_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu")
    ours, factor = rope_frequencies(head_dim, base, scaling)
    assert torch.equal(ours, theirs)
    assert factor == pytest.approx(their_factor, abs=1e-12)


def test_unscaled_frequencies_are_base_to_the_minus_2i_over_d():
    inv_freq, factor = rope_frequencies(8, 100.0)
    assert torch.allclose(inv_freq, torch.tensor([1.0, 100 ** (-2 / 8), 100 ** (-4 / 8), 100 ** (-6 / 8)]))
    assert factor == 1.0


def test_linear_scaling_is_positions_divided_by_the_factor():
    positions = torch.arange(12)
    cos, sin = rotary_tables(positions, 16, 10000.0, dict(rope_type="linear", factor=4.0))
    cos0, sin0 = rotary_tables(positions.float() / 4.0, 16, 10000.0)
    assert torch.allclose(cos, cos0, atol=1e-6) and torch.allclose(sin, sin0, atol=1e-6)


def test_llama3_keeps_the_fast_pairs_and_slows_the_slow_ones_by_the_factor():
    plain, _ = rope_frequencies(64, 500000.0)
    scaled, _ = rope_frequencies(64, 500000.0, LLAMA3)
    wavelength = 2 * math.pi / plain
    fast, slow = wavelength < 64 / 4, wavelength > 64 / 1
    assert fast.any() and slow.any()
    assert torch.equal(scaled[fast], plain[fast]) and torch.allclose(scaled[slow], plain[slow] / 8)


def test_yarn_scales_cos_and_sin_by_its_attention_factor():
    scaling = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16)
    cos, sin = rotary_tables(torch.arange(5), 16, 10000.0, scaling)
    factor = 0.1 * math.log(4.0) + 1.0
    assert torch.allclose(cos.square() + sin.square(), torch.full_like(cos, factor**2), atol=1e-5)


def test_a_gpt_with_rope_scaling_uses_the_scaled_frequencies():
    ids = torch.randint(0, VOCAB, (1, 9))
    a = _gpt(positional="rope", rope_scaling=dict(rope_type="linear", factor=1.0))
    b, c = _gpt(positional="rope"), _gpt(positional="rope", rope_scaling=dict(rope_type="linear", factor=4.0))
    assert torch.allclose(a(ids), b(ids), atol=1e-6)  # factor 1 is no scaling
    assert not torch.allclose(c(ids), b(ids), atol=1e-3)


# -------------------------------------------------------------------------------------- head_dim, config


def test_head_dim_follows_d_model_and_n_heads_unless_set_apart():
    config = GPTConfig.preset("tiny", vocab_size=VOCAB)
    assert config.head_dim == 16 and config.replace(d_model=128).head_dim == 32
    apart = config.replace(head_dim=24)
    assert apart.replace(d_model=128).head_dim == 24  # set apart: kept
    assert GPTConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "head_dim"}) == config  # 0.1 files
    model = GPT(apart.replace(n_kv_heads=2))
    attn = model.decoder.layers[0].self_attn
    assert attn.qkv_proj.weight.shape == (4 * 24 + 2 * 2 * 24, 64) and attn.out_proj.weight.shape == (64, 96)
    assert GPTConfig.preset("tiny", vocab_size=VOCAB, d_model=66, head_dim=16).head_dim == 16  # 66 / 4 is no int


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(d_model=66), "d_model must be divisible by n_heads"),
        (dict(head_dim=0), "head_dim must be None or > 0"),
        (dict(positional="rope", rope_scaling="yarn"), "rope_scaling must be None or an object"),
        (dict(positional="rope", rope_scaling=dict(rope_type="ntk", factor=2.0)), "rope_type one of"),
        (dict(positional="rope", rope_scaling=dict(rope_type="yarn", factor=2.0)), "lacks.*original_max"),
        (dict(positional="rope", rope_scaling=dict(rope_type="linear", factor=2.0, fact=1)), "unknown keys.*fact"),
        (dict(positional="rope", rope_scaling=dict(rope_type="linear", factor=-2.0)), r"\['factor'\].*> 0"),
        (dict(rope_scaling=dict(rope_type="linear", factor=2.0)), "needs positional='rope'"),
        (dict(sliding_window_pattern=2), "sliding_window_pattern must be None or >= 1 with a sliding_window"),
        (dict(sandwich_norm=True, norm_first=False), "sandwich_norm needs norm_first=True"),
        (dict(rope_local_base=0.0), "rope_local_base must be None or > 0"),
        (dict(attn_scale=-1.0), "attn_scale must be None or > 0"),
        (dict(parallel_residual=True, norm_first=False), "parallel_residual needs norm_first=True"),
        (dict(positional="rope", rope_dim=3), "rope_dim must be None or an even number of dims in"),
        (dict(positional="rope", rope_dim=18), r"rope_dim must be None or an even number of dims in \[2, head_dim=16"),
        (dict(rope_dim=4), "rope_dim .* with positional='rope'"),
        (dict(shift_tokens=1, norm_first=False), "shift_tokens needs norm_first=True"),
        (dict(shift_tokens=-1), "shift_tokens must be a whole number >= 0"),
        (dict(shift_tokens=1.5), "shift_tokens"),
        (dict(shift_tokens=64), "shift_tokens must be below d_model=64"),
    ],
)
def test_the_config_names_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig.preset("tiny", vocab_size=VOCAB, **change)


# ------------------------------------------------------------------------------- local and global layers


def test_the_pattern_makes_every_kth_layer_global():
    model = _gpt(n_layers=6, sliding_window=4, sliding_window_pattern=3)
    windows = [layer.self_attn.sliding_window for layer in model.decoder.layers]
    assert windows == [4, 4, None, 4, 4, None]
    assert [layer.self_attn.sliding_window for layer in _gpt(sliding_window=4).decoder.layers] == [4, 4]


def test_a_global_layer_sees_what_the_windows_forget():
    """Two layers with a window of 1 see only their own position; make the second global and the first token
    reaches the last position's logits."""
    ids = torch.randint(1, VOCAB, (1, 6))
    changed = ids.clone()
    changed[0, 0] = 0
    local = _gpt(sliding_window=1)
    assert torch.allclose(local(ids)[:, -1], local(changed)[:, -1], atol=1e-6)
    mixed = _gpt(sliding_window=1, sliding_window_pattern=2)
    assert not torch.allclose(mixed(ids)[:, -1], mixed(changed)[:, -1], atol=1e-4)


def test_the_sliding_layers_turn_at_their_own_rope_base():
    """Every layer local: a local base of 100 is the same model as a global base of 100; with the pattern, the
    global layers keep theirs (and their scaling)."""
    ids = torch.randint(0, VOCAB, (2, 8))
    local = _gpt(positional="rope", sliding_window=5, rope_base=1e6, rope_local_base=100.0)
    same = _gpt(positional="rope", sliding_window=5, rope_base=100.0)
    assert torch.allclose(local(ids), same(ids), atol=1e-6)
    mixed = _gpt(positional="rope", sliding_window=5, sliding_window_pattern=2, rope_base=1e6, rope_local_base=100.0)
    assert not torch.allclose(mixed(ids), same(ids), atol=1e-4)


# --------------------------------------------------------------------------------- norms, scales, embeddings


def test_sandwich_norm_norms_the_sublayer_output_before_the_residual():
    cfg = LayerConfig(8, 2, 16, dropout=0.0, norm_first=True, norm="rmsnorm", sandwich_norm=True)
    add_norm = AddNorm(cfg)
    with torch.no_grad():
        add_norm.norm.weight.uniform_(0.5, 1.5)
        add_norm.post_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 8)

    def rms(t, w):
        return t / torch.sqrt(t.square().mean(-1, keepdim=True) + 1e-5) * w

    def sublayer(h):
        return 3.0 * h + 1.0

    expected = x + rms(sublayer(rms(x, add_norm.norm.weight)), add_norm.post_norm.weight)
    assert torch.allclose(add_norm(x, sublayer), expected, atol=1e-6)


def test_a_parallel_residual_adds_attention_and_feed_forward_of_the_same_input():
    """GPT-NeoX's (Pythia's) block: x + attn(norm1(x)) + ff(norm3(x)), the feed-forward reading the layer's input
    rather than x + attention; and a partial rotary turns the first rope_dim dims of each head, the rest pass."""
    model = _gpt(positional="rope", parallel_residual=True, rope_dim=4)
    layer = model.decoder.layers[0]
    x = torch.randn(2, 5, 64)
    rotary = model._rotary(torch.arange(5), (model.rope_inv_freq[0], 1.0))
    assert rotary[0].shape[-1] == 4  # the tables cover the turned dims only
    with torch.no_grad():
        got = layer(x, causal=True, rotary=rotary)
        attn = layer.self_attn(layer.add_norm1.norm(x), causal=True, rotary=rotary)
        alone = layer.ff(layer.add_norm3.norm(x))
    torch.testing.assert_close(got, x + attn + alone, rtol=1e-5, atol=1e-5)
    q = torch.randn(1, 2, 5, 16)
    turned = apply_rotary(q, *rotary)
    assert torch.equal(turned[..., 4:], q[..., 4:]) and not torch.allclose(turned[..., 1:4], q[..., 1:4])
    torch.testing.assert_close(turned[..., :4], apply_rotary(q[..., :4], *rotary))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_a_norm_without_scale_learns_nothing(norm):
    model = _gpt(norm=norm, norm_scale=False)
    assert not [n for n, _ in model.named_parameters() if "norm" in n]
    x = torch.randn(2, 3, 64)
    centred = x - x.mean(-1, keepdim=True) if norm == "layernorm" else x
    expected = centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(model.decoder.norm(x), expected, atol=1e-5)


def test_embed_scale_multiplies_the_token_embeddings_by_the_root_of_d_model():
    model = _gpt(embed_scale=True, positional="rope")
    ids = torch.tensor([[3, 5, 7]])
    assert torch.allclose(model.embed(ids), model.embed.token.weight[ids[0]][None] * 8.0)


@pytest.mark.parametrize("scale", [0.05, 1.0])
def test_the_attention_scale_replaces_one_over_root_dh_in_both_paths(scale):
    q, k, v = torch.randn(3, 2, 1, 5, 8).unbind(0)
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    out, details = reference_attention(q, k, v, mask, scale=scale)
    assert torch.allclose(details.scores, q @ k.transpose(-2, -1) * scale)
    expected = torch.softmax((q @ k.transpose(-2, -1) * scale).masked_fill(~mask, -torch.inf), -1) @ v
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(scaled_dot_product_attention(q, k, v, mask, scale=scale), expected, atol=1e-6)
    model = _gpt(attn_scale=scale)
    assert model.decoder.layers[0].self_attn.scale == scale


# ------------------------------------------------------------------------------------------------ token shift


def test_shift_tokens_takes_feature_group_i_from_i_positions_back():
    x = torch.randn(2, 6, 11)
    one = shift_tokens(x, 1)  # 5 + 5 features, 1 left over
    assert torch.equal(one[..., :5], x[..., :5]) and torch.equal(one[..., 10:], x[..., 10:])
    assert torch.equal(one[:, 1:, 5:10], x[:, :-1, 5:10]) and not one[:, 0, 5:10].any()
    two = shift_tokens(x, 2)  # 3 + 3 + 3, 2 left over
    assert torch.equal(two[:, 1:, 3:6], x[:, :-1, 3:6]) and torch.equal(two[:, 2:, 6:9], x[:, :-2, 6:9])
    assert not two[:, :2, 6:9].any() and torch.equal(two[..., 9:], x[..., 9:])
    real = torch.tensor([[False, True, True, True, True, True]] * 2)
    padded = shift_tokens(x, 1, real)  # the padding reads as zeros to the position after it, itself unchanged
    assert (
        not padded[:, 1, 5:10].any() and torch.equal(padded[:, 0], one[:, 0]) and torch.equal(padded[:, 2:], one[:, 2:])
    )


def test_a_token_shifted_sub_layer_reads_the_shifted_norm_and_stays_causal():
    model = _gpt(shift_tokens=1, positional="rope", norm="rmsnorm", ffn="swiglu")
    add_norm = model.decoder.layers[1].add_norm3
    read = []
    handle = add_norm.hook_shifted.register_forward_hook(lambda m, args, out: read.append(out))
    normed = []
    handle2 = add_norm.hook_norm.register_forward_hook(lambda m, args, out: normed.append(out))
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        logits = model(ids)
    handle.remove(), handle2.remove()
    assert torch.equal(read[0], shift_tokens(normed[0], 1))  # the feed-forward reads the shifted norm
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 1) % VOCAB
    with torch.no_grad():
        other = model(changed)
    assert torch.equal(other[:, :5], logits[:, :5]) and not torch.allclose(other[:, 5:], logits[:, 5:])
    from tformer.inspection import trace

    formulas = [e.note for e in trace(model, ids[:1]).entries if e.stage == "add_norm"]
    assert formulas and all(f.startswith("x + sublayer(token_shift(RMSNorm(x), 1))") for f in formulas), formulas
    from tformer.explore.formulas import formula  # the explorer's page says it too

    assert formula("add_norm", "decoder", "", formulas[0]).startswith(
        "x + Dropout(sublayer(token_shift(RMSNorm(x), 1)))"
    )


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_a_token_shifted_model_decodes_with_its_cache_as_the_full_pass(kind):
    """A prompt of 4, then one position at a time: each cache keeps the positions every shifted sub-layer read last,
    so the steps' logits are the full pass's; a left-padded row gives its own logits unpadded."""
    from tformer.generation.static_cache import StaticKVCache

    model = _gpt(shift_tokens=2, positional="rope", parallel_residual=True)
    ids = torch.randint(0, VOCAB, (3, 12))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache() if kind == "dynamic" else StaticKVCache.for_model(model, 16)
        steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 12)]
        assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5
        row, pad = ids[:1, 3:], torch.zeros(1, 3, dtype=torch.long)
        real = torch.tensor([[False] * 3 + [True] * 9])
        positions = torch.cat([torch.zeros(3, dtype=torch.long), torch.arange(9)])[None]
        padded = model(torch.cat([pad, row], 1), attention_mask=real, positions=positions)[:, 3:]
    assert (padded - model(row)).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_a_caches_reorder_and_reset_move_and_clear_what_the_shifted_sub_layers_read(kind):
    from tformer.generation.static_cache import StaticKVCache

    cache = KVCache(1, 8) if kind == "dynamic" else StaticKVCache(1, 8)
    layer = cache.layers[0]
    x = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    layer.carry(0, x, 2)
    cache.reorder(torch.tensor([1, 0]))  # (beam search: row 0 now follows row 1)
    before = layer.carry(0, torch.zeros(2, 1, 4), 2)[:, :2]  # the two positions kept, per row
    assert torch.equal(before, x.flip(0)[:, -2:])
    if kind == "static":  # the next prefill starts with nothing before it
        cache.reset()
        assert not layer.carry(0, torch.ones(2, 1, 4), 2)[:, :2].any()


def test_a_token_shifted_model_generates_each_prompts_own_text_in_a_batch():
    """Left padding, and a row that stops early (the cache's rows reordered, the shifted positions with them): each
    prompt gets the text it gets alone, which is the course notes' loop over the whole text."""
    from tformer.generation import generate_lm

    model = _gpt(shift_tokens=1, positional="rope", tie_embeddings=False)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13]]
    alone = [generate_lm(model, [p], 20, eos_id=-1)[0] for p in prompts]
    assert generate_lm(model, prompts, 20, eos_id=-1) == alone
    stopped = generate_lm(model, prompts, 20, eos_id=-1, stop=lambda step, ids: [step >= 4, False])
    assert stopped[0] == alone[0][:5] and stopped[1] == alone[1]
    ids = torch.tensor([prompts[1]])
    with torch.no_grad():
        for _ in range(20):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert ids[0, 2:].tolist() == alone[1]


def test_token_shift_is_a_decoder_only_layers():
    from tformer.nn.layers import DecoderLayer, EncoderLayer

    config = LayerConfig(16, 2, 32, norm_first=True, shift_tokens=1)
    with pytest.raises(ValueError, match="shift_tokens is a decoder-only layer's"):
        DecoderLayer(config, cross_attention=True)
    with pytest.raises(ValueError, match="shift_tokens is a decoder-only layer's"):
        EncoderLayer(config)


# ------------------------------------------------------------------------------- a cache that forgets


def test_a_sliding_layers_cache_keeps_only_its_window_and_decodes_as_the_full_pass():
    """Window 3 on layer 0 (layer 1 global): after 40 steps the local store holds at most 2·3 + 1 positions, the
    global one all of them, and every step's logits equal the full pass over the whole text."""
    model = _gpt(sliding_window=3, sliding_window_pattern=2, positional="rope", n_kv_heads=2)
    ids = torch.randint(0, VOCAB, (2, 44))
    full = model(ids)
    cache = model.new_cache()
    steps = [model(ids[:, :4], cache=cache)]
    for t in range(4, 44):
        steps.append(model(ids[:, t : t + 1], cache=cache))
        local, glob = cache.layers
        assert local.k.shape[2] <= 7 and local.length - local.offset <= 7 and glob.offset == 0
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5
    assert cache.layers[0].offset > 30 and cache.length == 44


def test_a_forgetting_cache_with_left_padding_gives_each_prompt_its_own_greedy_text():
    from tformer.generation import generate_lm

    model = _gpt(sliding_window=4, positional="rope")
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13]]
    batch = generate_lm(model, prompts, 30, eos_id=-1)
    alone = [generate_lm(model, [p], 30, eos_id=-1)[0] for p in prompts]
    assert batch == alone
    # the second row stops after 5 tokens and leaves the batch: the cache's rows are reordered, windows and all
    stopped = generate_lm(model, prompts, 30, eos_id=-1, stop=lambda step, ids: [False, step >= 4])
    assert stopped[0] == alone[0] and stopped[1] == alone[1][:5]

    ids = torch.tensor([prompts[0]])
    for _ in range(30):  # the course notes' loop: the whole text every step, no cache
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert ids[0, 7:].tolist() == alone[0]


# ------------------------------------------------------------------------ the encoder families take them too

ENCODER_OPTIONS = dict(norm="rmsnorm", ffn="swiglu", n_kv_heads=2, qk_norm=True)


def test_a_translator_with_todays_options_decodes_with_its_cache_as_the_full_pass():
    from tformer import Seq2SeqConfig, Seq2SeqTransformer, fast
    from tformer.generation import translate_ids

    torch.manual_seed(0)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, dropout=0.0, **ENCODER_OPTIONS)
    model = Seq2SeqTransformer(config).eval()
    layer = model.decoder.layers[0]
    assert layer.cross_attn.n_kv_heads == 2 and layer.ff.kind == "swiglu" and layer.self_attn.q_norm is not None
    src, tgt = torch.randint(4, 30, (2, 7)), torch.randint(4, 30, (2, 6))
    full = model(src, tgt)
    memory, cache = model.encode(src), model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(6)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5
    assert cache.layers[0].cross_k.shape[1] == 2  # the cross-attention keys are cached for the 2 KV heads only
    plain = translate_ids(model, src, max_len=10, sos_id=1, eos_id=2)
    assert translate_ids(fast.speed_up(model, inference=True), src, max_len=10, sos_id=1, eos_id=2) == plain


def test_a_bert_with_todays_options_ignores_its_padding():
    from tformer import Bert, BertConfig

    torch.manual_seed(0)
    model = Bert(BertConfig.preset("tiny", vocab_size=40, dropout=0.0, **dict(ENCODER_OPTIONS, ffn="geglu"))).eval()
    ids = torch.randint(5, 40, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 6 + [False] * 3])
    assert (model(padded, attention_mask=mask)[:, :6] - model(ids)).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "family, change, message",
    [
        ("seq2seq", dict(norm="batchnorm"), "Seq2SeqConfig.norm must be one of"),
        ("seq2seq", dict(n_kv_heads=3), "Seq2SeqConfig.n_kv_heads must be None or a positive divisor"),
        ("bert", dict(ffn="moe"), "BertConfig.ffn must be one of"),
    ],
)
def test_the_encoder_families_name_the_field(family, change, message):
    from tformer import BertConfig, Seq2SeqConfig

    with pytest.raises(ValueError, match=message):
        if family == "seq2seq":
            Seq2SeqConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, **change)
        else:
            BertConfig.preset("tiny", vocab_size=30, **change)


def test_logits_to_keep_projects_only_the_last_positions():
    model = _gpt(positional="rope", n_kv_heads=2)
    ids = torch.randint(0, VOCAB, (2, 9))
    full = model(ids)
    assert model(ids, logits_to_keep=1).shape == (2, 1, VOCAB)  # (the matmul's blocking may differ: float rounding)
    assert torch.allclose(model(ids, logits_to_keep=1), full[:, -1:], atol=1e-6)
    assert torch.allclose(model(ids, logits_to_keep=3), full[:, -3:], atol=1e-6)


def test_a_prompts_cache_is_its_own_length_then_grows_to_max_len_once():
    """The prompt's pass (the largest temporaries) runs over a cache of the prompt's size, not the full one."""
    model = _gpt(positional="rope")
    ids = torch.randint(0, VOCAB, (2, 8))
    cache = model.new_cache(20)
    model(ids[:, :5], cache=cache)
    assert cache.layers[0].k.shape[2] == 5
    first = model(ids[:, 5:6], cache=cache)
    assert cache.layers[0].k.shape[2] == 20
    model(ids[:, 6:7], cache=cache)
    assert cache.layers[0].k.shape[2] == 20  # grown once
    assert torch.allclose(first, model(ids[:, :6])[:, -1:], atol=1e-5)
