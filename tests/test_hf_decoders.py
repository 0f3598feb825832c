"""Llama, Mistral, Qwen2, Qwen3 and GPT-NeoX (Pythia's block and the sequential one) from Hugging Face: small random
models (no download) converted by ``from_hf`` give transformers' own logits on a left-padded batch, the same logits
when decoded token by token through our KV cache, and the same greedy continuations as ``generate``. Then the
refusals: what GPTConfig cannot express is one ValueError naming the config field."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tformer import GPT  # noqa: E402
from tformer.generation import generate_lm  # noqa: E402
from tformer.hf import config_from_hf, dtype_from_hf, from_hf, state_from_hf  # noqa: E402
from tformer.hf.common import load_state  # noqa: E402

ATOL = 1e-5
VOCAB = 211
PAD = 0
LENGTHS = (11, 8, 4)  # a left-padded batch: the rows' real lengths

# name -> (config class, model class, config fields); the window (3) is shorter than the sequences, so it matters
CASES = {
    "llama-gqa-untied": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2, tie_word_embeddings=False)),
    "llama-mqa-tied": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "llama-bias": ("LlamaConfig", "LlamaForCausalLM", dict(attention_bias=True, mlp_bias=True, rope_theta=5e5)),
    "llama3-rope-scaling": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            num_key_value_heads=2,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=5e5,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8,
            ),
        ),
    ),
    "mistral-window": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=3)),
    "qwen2-qkv-bias-tied": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2-window": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(num_key_value_heads=1, use_sliding_window=True, sliding_window=3, max_window_layers=0),
    ),
    # GPT-NeoX's sequential block (tformer's RoPE GPT with an MLP, as shakespeare-char-6min): heads grouped Q, K, V
    "gpt-neox-sequential": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        dict(use_parallel_residual=False, rotary_pct=1.0, rotary_emb_base=5e3, tie_word_embeddings=False),
    ),
    # Pythia's block (EleutherAI): attention and MLP side by side, a quarter of each head turned by RoPE
    "gpt-neox-pythia": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3-qk-norm-head-dim": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        dict(num_key_value_heads=2, head_dim=24, tie_word_embeddings=False),  # 4 · 24 = 96 ≠ hidden 64
    ),
}


def _hf_config(name, **overrides):
    config_cls, _, fields = CASES[name]
    kwargs = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=None,
        eos_token_id=None,  # generate runs all its tokens
        attn_implementation="eager",
    )
    return getattr(transformers, config_cls)(**{**kwargs, **fields, **overrides})


def _random_hf(name, seed=0, **overrides):
    torch.manual_seed(seed)
    model = getattr(transformers, CASES[name][1])(_hf_config(name, **overrides)).eval()
    with torch.no_grad():  # HF zero-inits biases and sets norms to 1: randomise so every weight matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request):
    hf = _random_hf(request.param)
    return request.param, hf, from_hf(hf)


def _batch(seed=1):
    """Left-padded ids (B, T), attention mask (B, T) bool and positions counting real tokens only."""
    g = torch.Generator().manual_seed(seed)
    t = max(LENGTHS)
    ids = torch.randint(1, VOCAB, (len(LENGTHS), t), generator=g)
    mask = torch.arange(t)[None, :] >= torch.tensor([t - n for n in LENGTHS])[:, None]  # (B, T)
    ids = ids.masked_fill(~mask, PAD)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def test_config_maps_the_family(pair):
    name, hf, ours = pair
    assert isinstance(ours, GPT) and not ours.training
    c, h = ours.config, hf.config
    neox = name.startswith("gpt-neox")  # LayerNorm and GPT-2's MLP (exact GELU), biases everywhere
    assert (c.norm, c.ffn, c.positional) == (("layernorm", "mlp") if neox else ("rmsnorm", "swiglu")) + ("rope",)
    assert (c.n_kv_heads or c.n_heads) == getattr(h, "num_key_value_heads", h.num_attention_heads)
    assert c.head_dim == getattr(h, "head_dim", None) or h.hidden_size // h.num_attention_heads
    assert c.tie_embeddings == h.tie_word_embeddings
    assert c.qk_norm == name.startswith("qwen3")
    assert c.sliding_window == (3 if "window" in name else None)
    assert c.pad_id == PAD
    n_ours = sum(p.numel() for p in ours.parameters())
    assert n_ours == sum(p.numel() for p in hf.parameters())  # every weight has a place, none is extra


def test_logits_match_on_left_padded_batch(pair):
    _, hf, ours = pair
    ids, mask, positions = _batch()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask.long(), position_ids=positions).logits  # (B, T, V)
        mine = ours(ids, attention_mask=mask, positions=positions)
    assert (theirs - mine)[mask].abs().max().item() <= ATOL  # real tokens only: padded rows are anyone's guess
    assert theirs[mask].abs().max().item() > 0.1  # not a trivially flat model


def test_cached_decoding_equals_full_pass(pair):
    _, _, ours = pair
    ids, mask, positions = _batch()
    with torch.no_grad():
        full = ours(ids, attention_mask=mask, positions=positions)  # (B, T, V)
        cache = ours.new_cache()
        steps = [ours(ids[:, :3], attention_mask=mask[:, :3], positions=positions[:, :3], cache=cache)]
        for t in range(3, ids.shape[1]):  # one token at a time
            step = ours(
                ids[:, t : t + 1], attention_mask=mask[:, : t + 1], positions=positions[:, t : t + 1], cache=cache
            )
            steps.append(step)
    cached = torch.cat(steps, dim=1)  # (B, T, V)
    assert (cached - full)[mask].abs().max().item() <= ATOL


def test_greedy_generation_matches_generate(pair):
    _, hf, ours = pair
    prompts = [[5, 17, 42, 9, 100, 3, 77], [8, 61, 2]]
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (longest - len(p)) + p for p in prompts])
    mask = (torch.arange(longest)[None, :] >= torch.tensor([longest - len(p) for p in prompts])[:, None]).long()
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=PAD)
    theirs = out[:, longest:].tolist()
    mine = generate_lm(ours, prompts, max_new_tokens=12, pad_id=PAD)
    assert mine == theirs
    assert len({t for row in mine for t in row}) > 2  # continuations, not one token repeated (tied heads like that)


def test_v4_config_keys_read_as_v5():
    hf = _hf_config("llama3-rope-scaling").to_dict()
    v4 = {k: v for k, v in hf.items() if k != "rope_parameters"}
    rope = dict(hf["rope_parameters"])
    v4["rope_theta"] = rope.pop("rope_theta")
    v4["rope_scaling"] = {"type": rope.pop("rope_type"), **rope}  # the older "type" spelling
    assert config_from_hf(v4) == config_from_hf(hf)
    assert config_from_hf(v4).rope_base == 5e5 and config_from_hf(v4).rope_scaling["rope_type"] == "llama3"


# config.json of published checkpoints (the keys that matter; as transformers 4.x wrote them), with what they must map to
PUBLISHED = {
    "Llama-3.1-8B": (
        dict(
            model_type="llama",
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            hidden_act="silu",
            max_position_embeddings=131072,
            rms_norm_eps=1e-05,
            attention_bias=False,
            mlp_bias=False,
            pretraining_tp=1,
            rope_theta=500000.0,
            tie_word_embeddings=False,
            rope_scaling=dict(
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8192,
                rope_type="llama3",
            ),
            torch_dtype="bfloat16",
            vocab_size=128256,
            bos_token_id=128000,
            eos_token_id=128001,
        ),
        dict(n_kv_heads=8, head_dim=128, rope_base=5e5, tie_embeddings=False, sliding_window=None, qk_norm=False),
    ),
    "Mistral-7B-v0.1": (
        dict(
            model_type="mistral",
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            hidden_act="silu",
            max_position_embeddings=32768,
            rms_norm_eps=1e-05,
            rope_theta=10000.0,
            sliding_window=4096,
            tie_word_embeddings=False,
            torch_dtype="bfloat16",
            vocab_size=32000,
        ),
        dict(n_kv_heads=8, head_dim=128, sliding_window=4096, bias=False, qkv_bias=None),
    ),
    "Qwen2.5-0.5B": (
        dict(
            model_type="qwen2",
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            hidden_act="silu",
            max_position_embeddings=32768,
            max_window_layers=24,
            rms_norm_eps=1e-06,
            rope_theta=1000000.0,
            sliding_window=32768,
            use_sliding_window=False,
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
            vocab_size=151936,
        ),
        dict(n_kv_heads=2, head_dim=64, sliding_window=None, bias=False, qkv_bias=True, tie_embeddings=True),
    ),
    "Qwen3-0.6B": (
        dict(
            model_type="qwen3",
            head_dim=128,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            hidden_act="silu",
            max_position_embeddings=40960,
            max_window_layers=28,
            rms_norm_eps=1e-06,
            rope_scaling=None,
            rope_theta=1000000,
            sliding_window=None,
            use_sliding_window=False,
            attention_bias=False,
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
            vocab_size=151936,
        ),
        dict(n_kv_heads=8, head_dim=128, qk_norm=True, bias=False, qkv_bias=None, rope_base=1e6),
    ),
    "pythia-70m": (  # EleutherAI's: GPT-NeoX's parallel block, a quarter of each head of 64 turned
        dict(
            model_type="gpt_neox",
            bos_token_id=0,
            eos_token_id=0,
            hidden_act="gelu",
            hidden_size=512,
            intermediate_size=2048,
            layer_norm_eps=1e-05,
            max_position_embeddings=2048,
            num_attention_heads=8,
            num_hidden_layers=6,
            rotary_emb_base=10000,
            rotary_pct=0.25,
            tie_word_embeddings=False,
            torch_dtype="float16",
            use_parallel_residual=True,
            vocab_size=50304,
        ),
        dict(parallel_residual=True, rope_dim=16, head_dim=64, norm="layernorm", ffn="mlp", tie_embeddings=False),
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_map(name):
    hf, expected = PUBLISHED[name]
    config = config_from_hf(hf)
    assert {k: getattr(config, k) for k in expected} == expected
    assert dtype_from_hf(hf) is getattr(torch, hf["torch_dtype"])
    # transformers reads the same file into its own (v5) config: that maps to the same GPTConfig
    theirs = transformers.AutoConfig.for_model(**hf)
    assert config_from_hf(theirs.to_dict()) == config


def test_state_dtype_converted_and_named():
    hf = _random_hf("qwen2-qkv-bias-tied")
    config = hf.config.to_dict() | {"dtype": "bfloat16"}
    assert dtype_from_hf(config) is torch.bfloat16
    assert dtype_from_hf({"torch_dtype": "float16"}) is torch.float16 and dtype_from_hf({}) is None
    model = from_hf(config, hf.state_dict(), dtype=dtype_from_hf(config))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    state = state_from_hf(hf.state_dict(), config_from_hf(config), dtype=torch.bfloat16)
    assert torch.equal(state["embed.token.weight"], hf.model.embed_tokens.weight.to(torch.bfloat16))
    with pytest.raises(ValueError, match="dtype='int8'"):
        dtype_from_hf({"dtype": "int8"})


def test_qkv_rows_are_q_then_k_then_v():
    hf = _random_hf("qwen3-qk-norm-head-dim")
    ours = from_hf(hf)
    attn = hf.model.layers[1].self_attn
    w, b = ours.decoder.layers[1].self_attn.qkv_proj.weight, None
    assert w.shape == (4 * 24 + 2 * 2 * 24, 64)  # H·Dh + 2·Hkv·Dh rows
    assert torch.equal(w, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
    assert b is None and ours.decoder.layers[1].self_attn.qkv_proj.bias is None


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "name, changes, field",
    [
        ("llama-gqa-untied", dict(hidden_act="gelu"), "hidden_act"),
        ("llama-gqa-untied", dict(attention_bias=True, mlp_bias=False), "attention_bias"),
        ("llama-gqa-untied", dict(pretraining_tp=2), "pretraining_tp"),
        ("llama-gqa-untied", dict(model_type="gemma"), "model_type"),
        ("llama-gqa-untied", dict(rope_parameters=dict(rope_type="dynamic", factor=2.0)), "rope_parameters"),
        ("llama-gqa-untied", dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
        ("qwen2-window", dict(max_window_layers=1, layer_types=None), "max_window_layers"),  # v4: layer 1 slides only
        ("qwen2-window", dict(layer_types=["full_attention", "sliding_attention"]), "max_window_layers"),
        ("qwen3-qk-norm-head-dim", dict(layer_types=["chunked_attention"] * 2), "layer_types"),
        ("mistral-window", dict(dtype="float64"), None),  # read by dtype_from_hf only: the config still maps
        ("gpt-neox-sequential", dict(rope_parameters=dict(partial_rotary_factor=1.5)), "partial_rotary_factor"),
        ("gpt-neox-sequential", dict(rope_parameters=dict(partial_rotary_factor=0.35)), "rotary_pct"),  # 5 of 16
        ("gpt-neox-sequential", dict(attention_bias=False), "attention_bias"),
    ],
)
def test_unsupported_config_refused(name, changes, field):
    hf = _hf_config(name).to_dict() | changes
    if field is None:
        config_from_hf(hf)
        with pytest.raises(ValueError, match="dtype='float64'"):
            dtype_from_hf(hf)
        return
    with pytest.raises(ValueError, match=field) as err:
        config_from_hf(hf)
    assert "\n" not in str(err.value)


def test_weights_that_do_not_fit_refused():
    hf = _random_hf("llama-mqa-tied")
    config = config_from_hf(hf.config.to_dict())
    hf_state = dict(hf.state_dict())
    untied = hf_state | {"lm_head.weight": hf_state["lm_head.weight"] + 1}
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        state_from_hf(untied, config)
    with pytest.raises(ValueError, match="unexpected.*'model.layers.0.mystery.weight'"):
        state_from_hf(hf_state | {"model.layers.0.mystery.weight": torch.zeros(1)}, config)
    state = state_from_hf(hf_state, config)
    with pytest.raises(ValueError, match="missing.*decoder.layers.1.ff.up_proj.weight"):
        load_state(GPT(config), {k: v for k, v in state.items() if k != "decoder.layers.1.ff.up_proj.weight"})
    with pytest.raises(ValueError, match="shapes.*decoder.norm.weight"):
        load_state(GPT(config), state | {"decoder.norm.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="without k_proj"):
        state_from_hf({k: v for k, v in hf_state.items() if "k_proj" not in k}, config)
