"""Gemma 3 (text) weights with the same logits: ``from_hf(Gemma3ForCausalLM)`` on small random models.

Float32, eager attention. Checked: logits ≤ 1e-5 on a batch with left padding (real positions only); cached
decoding equals the full pass; greedy ids equal ``transformers``' ``generate``; the config mapping reads the v4
keys (``sliding_window_pattern``, ``rope_local_base_freq``, ``rope_scaling``) as the v5 ones; what GPTConfig cannot
say is refused naming the field.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tformer.generation import generate_lm  # noqa: E402
from tformer.hf import config_from_hf, from_hf  # noqa: E402

VOCAB = 96


def _hf_gemma(seed: int = 0, **changes):
    torch.manual_seed(seed)
    options = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,  # apart from hidden / heads = 16
        query_pre_attn_scalar=20,  # apart from head_dim: the scores' factor is 20^-1/2
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    options.update(changes)
    model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**options)).eval()
    with torch.no_grad():  # Gemma's norms start at weight 0 (scale 1): move them so a wrong offset shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3)
    return model


CASES = {
    "local-global": {},
    # the attention soft-cap sits in Gemma 3's config but transformers never applies it: neither do we
    "softcaps": dict(attn_logit_softcapping=4.0, final_logit_softcapping=6.0),
    "rope-scaling": dict(
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        }
    ),
    "untied-mha": dict(tie_word_embeddings=False, num_key_value_heads=4),
}


def _left_padded(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :4], mask[2, :2] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask


@pytest.mark.parametrize("case", CASES)
def test_logits_equal_with_left_padding(case):
    hf = _hf_gemma(**CASES[case])
    ours = from_hf(hf)
    ids, mask = _left_padded()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        mine = ours(ids, attention_mask=mask.bool(), positions=positions)
    real = mask.bool()
    assert (mine[real] - theirs[real]).abs().max() <= 1e-5


def test_the_mapping_builds_gemmas_block():
    config = from_hf(_hf_gemma()).config
    assert (config.sliding_window, config.sliding_window_pattern, config.rope_local_base) == (3, 2, 10_000.0)
    assert config.head_dim == 24 and config.attn_scale == pytest.approx(20**-0.5)
    assert config.sandwich_norm and config.embed_scale and config.norm_weight_offset == 1.0 and config.qk_norm


def test_cached_decoding_equals_the_full_pass():
    ours = from_hf(_hf_gemma(**CASES["softcaps"]))
    ids = torch.randint(3, VOCAB, (2, 10))
    with torch.no_grad():
        full = ours(ids)
        cache = ours.new_cache()
        steps = [ours(ids[:, :4], cache=cache)] + [ours(ids[:, t : t + 1], cache=cache) for t in range(4, 10)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


@pytest.mark.parametrize("case", ["local-global", "rope-scaling"])
def test_greedy_ids_equal_transformers_generate(case):
    hf = _hf_gemma(seed=3, **CASES[case])
    ours = from_hf(hf)
    prompt = [5, 17, 33, 8, 41]
    with torch.no_grad():
        theirs = hf.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, 5, dtype=torch.long),
            do_sample=False,
            max_new_tokens=12,
            min_new_tokens=12,
            pad_token_id=0,
        )[0, 5:].tolist()
    mine = generate_lm(ours, [prompt], max_new_tokens=12)[0]  # greedy by default
    assert mine == theirs


def test_v4_config_keys_give_the_same_config():
    hf = _hf_gemma(**CASES["rope-scaling"])
    v5 = config_from_hf(hf.config.to_dict())
    v4 = {k: v for k, v in hf.config.to_dict().items() if k not in ("rope_parameters", "layer_types")}
    v4.update(
        rope_theta=1e6,
        rope_local_base_freq=100.0,
        rope_scaling={"type": "linear", "factor": 4.0},
        sliding_window_pattern=2,
    )
    assert config_from_hf(v4) == v5


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
        (dict(attention_bias=True), "attention_bias"),
        (dict(hidden_activation="relu"), "hidden_activation='relu'"),
        (dict(layer_types=["full_attention", "sliding_attention"] * 2), "every k-th layer global"),
    ],
)
def test_what_gptconfig_cannot_say_is_refused(change, message):
    hf = {**_hf_gemma().config.to_dict(), **change}
    with pytest.raises(ValueError, match=message):
        config_from_hf(hf)
