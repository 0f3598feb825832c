"""The one decoding loop (tformer.generation.loop): prefill + decode_one steps give the full forward's logits, every
way of choosing and every family steps through the same prefill and step, the samplers are pure, and decoding never
changes the model the caller holds (the fast paths run on tformer.fast.fast_view, a view sharing its Parameters)."""

import pytest
import torch
from torch import nn

from tformer import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, fast, hooks
from tformer.cli import main
from tformer.fast import linear as fast_linear
from tformer.generation import (
    LMDecoder,
    SamplingConfig,
    Seq2SeqDecoder,
    beam_search,
    choose_next,
    decode_one,
    generate_lm,
    greedy,
    process_logits,
    sample,
    sampler,
    translate_ids,
)
from tformer.inspection import greedy_steps
from tformer.nn.attention import MultiHeadAttention
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_SOS as SOS

VOCAB = 40
NEVER = -1  # an end id no token has: every row runs its full length


def _gpt(**options) -> GPT:
    torch.manual_seed(1)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=32, **options)).eval()


def _seq2seq() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, max_len=32)
    return Seq2SeqTransformer(config).eval()


def _ids(*shape: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(4, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------- prefill + n × decode_one = forward


@pytest.mark.parametrize("options", [{}, {"positional": "rope"}])
def test_lm_prefill_then_decode_one_steps_equal_the_full_forwards_logits(options):
    """Two prompts of different lengths in one batch (left padding, masks, positions): each row's logits, from the
    prefill and then one decode_one per token, are the full forward's logits of that row alone."""
    model, prompts, new = _gpt(**options), [_ids(7).tolist(), _ids(3, seed=4).tolist()], _ids(2, 6, seed=5)
    decoder = LMDecoder(model)
    with torch.inference_mode():
        logits, state = decoder.prefill(prompts, 6)
        steps = [logits] + [decode_one(decoder, state, new[:, t]) for t in range(6)]  # each (2, V)
        for row, prompt in enumerate(prompts):
            full = model(torch.tensor([prompt + new[row].tolist()]))[0, len(prompt) - 1 :]  # (1 + 6, V)
            torch.testing.assert_close(torch.stack([s[row] for s in steps]), full, atol=1e-5, rtol=0)
    assert state.tokens[1, -6:].tolist() == new[1].tolist()  # the tokens seen: what the repetition penalty reads


def test_seq2seq_prefill_then_decode_one_steps_equal_the_full_forwards_logits():
    model, src, tgt = _seq2seq(), _ids(2, 9), _ids(2, 5, seed=6)
    src[1, 6:] = 0  # one padded source: the memory mask
    decoder = Seq2SeqDecoder(model, SOS)
    with torch.inference_mode():
        logits, state = decoder.prefill(src, 5)
        steps = [logits] + [decode_one(decoder, state, tgt[:, t]) for t in range(5)]
        full = model(src, torch.cat([torch.full((2, 1), SOS), tgt], 1))  # (2, 1 + 5, V)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------- one step function for every way of choosing


@pytest.fixture
def counted(monkeypatch):
    """Counts the calls of each decoder's prefill and step (the loop's two model calls)."""
    calls: list[str] = []
    for cls in (LMDecoder, Seq2SeqDecoder):
        for name in ("prefill", "step"):
            real = getattr(cls, name)

            def counting(self, *args, _real=real, _name=f"{cls.__name__}.{name}"):
                calls.append(_name)
                return _real(self, *args)

            monkeypatch.setattr(cls, name, counting)
    return calls


def test_greedy_sampling_beams_and_the_step_by_step_views_share_prefill_and_step(counted):
    """n tokens = one prefill and n − 1 steps, whoever chooses: greedy, sampling, beam search, the explorer's and
    trace's step-by-step decoding (greedy_steps), for both families."""
    seq2seq, gpt, src = _seq2seq(), _gpt(), _ids(2, 7)
    sampled = SamplingConfig(True, 0.8, 10)
    runs = {
        "greedy": lambda: translate_ids(seq2seq, src, SOS, NEVER, max_len=5),
        "sampled": lambda: translate_ids(seq2seq, src, SOS, NEVER, 5, sampled, torch.Generator().manual_seed(0)),
        "beam": lambda: beam_search(seq2seq, src, SOS, NEVER, beam_size=3, max_len=5),
        "steps": lambda: greedy_steps(seq2seq, src[:1], 5, eos_id=NEVER),
    }
    for name, run in runs.items():
        counted.clear()
        run()
        assert counted == ["Seq2SeqDecoder.prefill"] + ["Seq2SeqDecoder.step"] * 4, name
    runs = {
        "greedy": lambda: generate_lm(gpt, [[5, 6, 7], [8]], 5),
        "sampled": lambda: generate_lm(gpt, [[5, 6, 7], [8]], 5, sampled, seed=0),
        "steps": lambda: greedy_steps(gpt, [5, 6, 7], 5),
    }
    for name, run in runs.items():
        counted.clear()
        run()
        assert counted == ["LMDecoder.prefill"] + ["LMDecoder.step"] * 4, name


# ---------------------------------------------------------------------------------------------- pure samplers


@pytest.mark.parametrize(
    "config",
    [
        SamplingConfig(),
        SamplingConfig(repetition_penalty=1.3),
        SamplingConfig(True, 0.7, 5, 0.9, 1.2),
        SamplingConfig(True, 1e-45),
    ],
)
def test_samplers_are_pure_functions(config):
    """The same logits (and a generator in the same state) give the same ids; the inputs are left as they were."""
    logits, previous = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(1)), _ids(3, 4)
    kept, kept_previous = logits.clone(), previous.clone()
    for _ in range(2):
        assert torch.equal(process_logits(logits, config, previous), process_logits(logits, config, previous))
        one = choose_next(logits, config, torch.Generator().manual_seed(7), previous)
        assert torch.equal(one, choose_next(logits, config, torch.Generator().manual_seed(7), previous))
        assert torch.equal(sampler(config, torch.Generator().manual_seed(7))(logits, previous), one)
    assert torch.equal(greedy(logits), logits.argmax(-1))
    drawn = sample(logits, torch.Generator().manual_seed(2))
    assert torch.equal(drawn, sample(logits, torch.Generator().manual_seed(2)))
    assert torch.equal(logits, kept) and torch.equal(previous, kept_previous)


# ------------------------------------------------------------------------------------ the caller's model untouched


def _state_of(model: nn.Module) -> tuple:
    """What a decoding function must leave as it found: each module's name and class, each attention module's own
    attributes, the Parameters (the objects), the mode."""
    modules = [(name, type(m)) for name, m in model.named_modules()]
    attention = [sorted(vars(m)) for m in model.modules() if isinstance(m, MultiHeadAttention)]
    return modules, attention, [id(p) for p in model.parameters()], model.training


@pytest.mark.parametrize("use", ["generate_lm", "sampled", "translate_ids", "beam_search", "greedy_steps"])
def test_decoding_leaves_the_callers_model_as_it_was(use):
    """After decoding (with the fast paths, the default) the model has the same modules (no fast Linear, no fast
    attention), attributes and Parameters holding the same values to the bit, and gives the same logits (to float
    rounding: decoding may have stored a weight column-major, the layout its products read, and ``F.linear`` sums in
    another order then; issue 40). On the old code every one of these swapped the fast layers into the model in
    place."""
    gpt, seq2seq, src = _gpt(), _seq2seq(), _ids(2, 7)
    model = gpt if use in ("generate_lm", "sampled") else seq2seq
    before = _state_of(model)
    weights = {k: t.clone() for k, t in model.state_dict().items()}
    with torch.inference_mode():
        logits = gpt(_ids(2, 9)) if model is gpt else seq2seq(src, _ids(2, 5))
    if use == "generate_lm":
        generate_lm(gpt, [[5, 6, 7], [8]], 6)
    elif use == "sampled":
        generate_lm(gpt, [[5, 6, 7]], 6, SamplingConfig(True, top_k=5), seed=1)
    elif use == "translate_ids":
        translate_ids(seq2seq, src, SOS, EOS, max_len=6)
    elif use == "beam_search":
        beam_search(seq2seq, src, SOS, EOS, beam_size=3, max_len=6)
    else:
        greedy_steps(seq2seq, src[:1], 6)
    assert _state_of(model) == before
    assert not any(isinstance(m, fast_linear.Linear) for m in model.modules())
    assert all(torch.equal(t, weights[k]) for k, t in model.state_dict().items())
    with torch.inference_mode():
        again = gpt(_ids(2, 9)) if model is gpt else seq2seq(src, _ids(2, 5))
    torch.testing.assert_close(again, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", [[], ["--beam", "2"], ["--sample", "--seed", "3"]])
def test_tformer_translate_leaves_the_loaded_model_as_it_was(tmp_path, monkeypatch, capsys, how):
    """Through the command: Translator.translate (greedy, beam, sampling) decodes with the fast layers and leaves the
    translator's model with its plain modules."""
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator

    texts = ["the cat sat on the mat.", "a bird sang in the tree.", "le chat est assis."] * 3
    tok = train_tokenizer("bpe", texts, vocab_size=40, min_frequency=1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=16)
    torch.manual_seed(0)
    Translator(Seq2SeqTransformer(config), tok, tok).save(tmp_path)
    loaded, ran = [], []
    real_load = Translator.load

    def load(*args, **kwargs):
        loaded.append(real_load(*args, **kwargs))
        loaded[-1].model.output.register_forward_hook(lambda module, a, out: ran.append(type(module)))
        return loaded[-1]

    monkeypatch.setattr(Translator, "load", load)
    assert main(["translate", "--model", str(tmp_path), *how, "the cat sat.", "a bird."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert ran and set(ran) == {fast_linear.Linear}  # the decoding ran the fast output layer ...
    model = loaded[0].model
    assert type(model.output) is nn.Linear and not any(isinstance(m, fast_linear.Linear) for m in model.modules())
    assert all(
        type(m) is MultiHeadAttention and "attention" not in vars(m)
        for m in model.modules()
        if isinstance(m, MultiHeadAttention)
    )


# ------------------------------------------------------------------------------------------------ the fast view


def test_the_fast_view_is_made_once_and_follows_the_model():
    """fast_view shares the Parameters and is kept between calls (the fast layer's decoding copies with it); a layer
    replaced, a mode changed, a method patched on the model make a new one; hooks on the model see the decoding."""
    model = _gpt()
    view = fast.fast_view(model)
    assert view is not model and fast.fast_view(model) is view
    assert all(p is q for p, q in zip(view.parameters(), model.parameters()))
    assert type(view.output) is fast_linear.Linear and type(model.output) is nn.Linear
    first = generate_lm(model, [[5, 6, 7]], 4)
    copies = view.output.__dict__.get("_decoding_copies")
    assert copies is not None and copies.transposed is not None  # the one-row layout, made at the first call ...
    assert generate_lm(model, [[5, 6, 7]], 4) == first
    assert fast.fast_view(model) is view and view.output.__dict__["_decoding_copies"] is copies  # ... and kept

    with hooks.capture(model, "hook_logits") as seen:  # a hook put on the model runs in the view
        generate_lm(model, [[5, 6, 7]], 4)
    assert seen["hook_logits"].shape == (1, 1, VOCAB)  # the last step's

    model.train()
    assert fast.fast_view(model) is not view and fast.fast_view(model).training
    model.eval()
    torch.manual_seed(9)
    model.output = nn.Linear(model.output.in_features, VOCAB, bias=False)  # a new head: the view reads it
    assert fast.fast_view(model).output.weight is model.output.weight
    assert generate_lm(model, [[5, 6, 7]], 4) == generate_lm(model, [[5, 6, 7]], 4, fast=False) != first
    calls = []
    real_forward = model.forward
    model.forward = lambda *a, **k: calls.append(1) or real_forward(*a, **k)  # patched on the model: the view uses it
    generate_lm(model, [[5, 6, 7]], 3)
    assert len(calls) == 3
    with fast.reference():  # the plain code: no view at all
        assert fast.fast_view(model) is model


def test_a_model_decoded_through_its_fast_view_is_still_freed():
    """The views are kept per model by a weak reference: the model (and its view) go when the caller drops it."""
    import gc
    import weakref

    gpt, seq2seq = _gpt(), _seq2seq()
    generate_lm(gpt, [[5, 6, 7]], 3)
    beam_search(seq2seq, _ids(2, 5), SOS, EOS, beam_size=2, max_len=3)
    gone = [weakref.ref(gpt), weakref.ref(seq2seq), weakref.ref(fast.fast_view(gpt))]
    del gpt, seq2seq
    gc.collect()
    assert [ref() for ref in gone] == [None, None, None]
