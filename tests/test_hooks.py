"""Hook points (tformer.nn.hooks): every intermediate has a stable name, documented in docs/architecture.md; capture
reads the very tensors the model used; a patch replaces the tensor the model goes on with; an attention layer takes
the reference path only when a step inside it is watched; hooks leave with their block."""

import copy
import itertools
import re
from pathlib import Path

import pytest
import torch

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, fast, hooks
from tformer.nn import attention

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
VOCAB = 30
IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


def _seq2seq(**options) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, max_len=16)
    return Seq2SeqTransformer(config.replace(**options)).eval()


def _gpt(**options) -> GPT:
    torch.manual_seed(1)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=16, **options)).eval()


def _bert(**options) -> Bert:
    torch.manual_seed(2)
    return Bert(BertConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=16, **options)).eval()


GEMMA_LIKE = dict(
    norm="rmsnorm", ffn="geglu", n_kv_heads=2, qk_norm=True, positional="rope", sandwich_norm=True, sliding_window=3
)
MODELS = {  # one of each family, and the options that add or change hook points
    "seq2seq": lambda: _seq2seq(),
    "seq2seq pre-LN gated": lambda: _seq2seq(norm_first=True, ffn="swiglu"),
    "gpt": lambda: _gpt(),
    "gpt gemma-like": lambda: _gpt(**GEMMA_LIKE),
    "gpt token-shifted": lambda: _gpt(positional="rope", shift_tokens=1),
    "bert": lambda: _bert(),
    "bert pre-LN gated": lambda: _bert(norm_first=True, ffn="geglu"),
}


def _run(model, ids: torch.Tensor = IDS) -> torch.Tensor:
    """The family's forward on ``ids`` (IDS by default): (B, T, V) logits."""
    if isinstance(model, Seq2SeqTransformer):
        return model(ids, ids[:, :4])
    if isinstance(model, GPT):
        return model(ids)
    return model.pretraining_logits(ids)[0]


def _padded(model) -> torch.Tensor:
    """IDS and a shorter row padded with the model's pad id: a batch whose padding mask hides something."""
    short = torch.tensor([[5, 6, 7] + [model.config.pad_id] * 3])
    return torch.cat([IDS, short])  # (2, 6)


def _documented() -> set[str]:
    """The hook point names docs/architecture.md lists: each row's modules × its hook points."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| module | hook points | when |") :].split("\n\n")[0].splitlines()[2:]
    names = set()
    for row in table:
        modules, points = (re.findall(r"`([^`]+)`", cell) for cell in row.split("|")[1:3])
        for module, point in itertools.product(modules or [""], points):
            names.add(f"{module}.{point}" if module else point)
    return names


def _patterns(model) -> set[str]:
    return {re.sub(r"\.layers\.\d+\.", ".layers.{i}.", name) for name in hooks.names(model)}


def test_the_documented_hook_points_are_exactly_the_models_own():
    documented = _documented()
    assert len(documented) > 60 and "decoder.layers.{i}.cross_attn.hook_weights" in documented
    seen: set[str] = set()
    for name, make in MODELS.items():
        own = _patterns(make())
        assert own <= documented, f"{name} has hook points the docs do not list: {sorted(own - documented)}"
        seen |= own
    assert seen == documented, f"documented but in no model: {sorted(documented - seen)}"


@pytest.mark.parametrize("family", ["seq2seq", "gpt gemma-like", "bert"])
def test_every_hook_point_runs_once_in_a_forward_and_captures_what_the_model_used(family):
    model = MODELS[family]()
    ids = IDS if family.startswith("gpt") else _padded(model)  # padding: the encoder's mask is used
    with torch.no_grad(), hooks.capture(model) as cache:
        logits = _run(model, ids)
    assert set(cache) == set(hooks.names(model))  # every hook point ran
    assert torch.equal(cache["hook_logits"], logits)
    prefix = "decoder" if family.startswith("gpt") else "encoder"
    if family == "seq2seq":  # post-LN: the layer's output is norm(x + sublayer(x))
        layer = model.encoder.layers[0]
        x = cache["src_embed.hook_out"]
        residual = x + cache["encoder.layers.0.self_attn.hook_out"]
        torch.testing.assert_close(cache["encoder.layers.0.add_norm1.hook_residual"], residual, rtol=0, atol=0)
        assert torch.equal(cache["encoder.layers.0.add_norm1.hook_norm"], layer.add_norm1.norm(residual))
    attn = model.get_submodule(f"{prefix}.layers.0.self_attn")
    at = lambda point: cache[f"{prefix}.layers.0.self_attn.{point}"]  # noqa: E731
    v = at("hook_v").repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)  # (B, H, Tk, Dh)
    torch.testing.assert_close(at("hook_weights") @ v, at("hook_context"), rtol=0, atol=1e-6)
    b, h, t, dh = at("hook_context").shape
    merged = at("hook_context").transpose(1, 2).reshape(b, t, h * dh)
    torch.testing.assert_close(attn.out_proj(merged), at("hook_out"), rtol=0, atol=1e-6)
    assert torch.equal(at("hook_masked_scores").isinf(), ~at("hook_mask").expand_as(at("hook_scores")))


@pytest.mark.parametrize("family", ["seq2seq", "bert"])
def test_a_batch_without_padding_has_no_padding_mask(family):
    """Nothing padded: the model passes no mask (it reads once per forward whether its padding mask hides anything,
    not once per layer), so attention takes its unmasked path; the numbers are the masked ones."""
    model = MODELS[family]()
    with torch.no_grad(), hooks.capture(model) as cache:
        logits = _run(model)
    assert not [name for name in cache if name.startswith("encoder") and name.endswith("hook_mask")]
    with torch.no_grad():
        padded = _run(model, _padded(model))
    torch.testing.assert_close(padded[:1], logits, rtol=0, atol=1e-5)  # row 0 is IDS, unpadded, beside a padded row


def test_a_patch_replaces_the_tensor_the_model_goes_on_with():
    model = _gpt()
    uniform = torch.tril(torch.ones(6, 6))
    uniform = uniform / uniform.sum(-1, keepdim=True)  # (T, T): each position attends equally to the past

    def flat(weights, name):
        assert name == "decoder.layers.0.self_attn.hook_weights"
        return uniform.expand_as(weights)

    with torch.no_grad():
        before = model(IDS)
        with hooks.add(model, "decoder.layers.0.self_attn.hook_weights", flat), hooks.capture(model) as cache:
            patched = model(IDS)
        after = model(IDS)
    assert torch.equal(after, before)  # the patch left with its block
    assert not torch.allclose(patched, before)
    at = lambda point: cache["decoder.layers.0.self_attn." + point]  # noqa: E731
    assert torch.equal(at("hook_weights"), uniform.expand_as(at("hook_weights")))
    torch.testing.assert_close(at("hook_context"), uniform @ at("hook_v"), rtol=0, atol=1e-6)  # the patch was used
    # a fused-path hook point: the feed-forward's output replaced by zeros leaves the residual stream as it was
    with torch.no_grad(), hooks.add(model, lambda n: n == "decoder.layers.1.ff.hook_out", lambda t, _: 0 * t):
        with hooks.capture(model) as cache:
            model(IDS)
    torch.testing.assert_close(
        cache["decoder.layers.1.add_norm3.hook_residual"], cache["decoder.layers.1.add_norm1.hook_residual"]
    )


@pytest.mark.parametrize("swapped", [False, True], ids=["plain", "speed_up"])
def test_attention_takes_the_reference_path_only_where_a_step_inside_it_is_watched(monkeypatch, swapped):
    model = _seq2seq()
    if swapped:
        fast.speed_up(model)
    calls = []
    reference = attention.reference_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return reference(*args, **kwargs)

    monkeypatch.setattr(attention, "reference_attention", counted)
    with torch.no_grad():
        plain = _run(model)
        assert calls == []  # nothing attached: the fused kernel everywhere
        with hooks.capture(model, lambda n: n.endswith((".hook_q", ".hook_k", ".hook_context", ".hook_out"))):
            assert torch.equal(_run(model), plain)
        assert calls == []  # outside the kernel: still fused
        with hooks.capture(model, "decoder.layers.1.cross_attn.hook_weights") as cache:
            watched = _run(model)
        assert len(calls) == 1 and list(cache) == ["decoder.layers.1.cross_attn.hook_weights"]
    torch.testing.assert_close(watched, plain, rtol=1e-5, atol=1e-6)


def test_hooks_leave_with_their_block_even_after_an_error():
    model = _gpt()
    with pytest.raises(RuntimeError, match="stop"), hooks.capture(model):

        def stop(t, name):
            raise RuntimeError("stop")

        with hooks.add(model, "embed.hook_out", stop):
            model(IDS)
    assert not any(point.active for point in hooks.points(model).values())


def test_an_unknown_hook_name_is_refused_with_the_nearest_one():
    model = _gpt()
    with pytest.raises(ValueError, match=r"no hook point named 'decoder.layers.0.self_attn.weights'.*hook_weights"):
        with hooks.capture(model, "decoder.layers.0.self_attn.weights"):
            pass
    assert hooks.names(model)[:3] == ["embed.hook_token", "embed.hook_position", "embed.hook_out"]


def test_a_swapped_model_shows_the_same_numbers_through_its_hook_points():
    plain = _gpt(**GEMMA_LIKE)
    swapped = fast.speed_up(copy.deepcopy(plain))
    with torch.no_grad():
        with hooks.capture(plain) as a:
            _run(plain)
        with hooks.capture(swapped) as b:
            _run(swapped)
    assert list(a) == list(b)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-5, msg=name)
