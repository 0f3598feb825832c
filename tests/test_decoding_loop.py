"""The one decoding loop (tformer.generation.loop): prefill + decode_one steps give the full forward's logits, every
way of choosing and every family steps through the same prefill and step, the samplers are pure, and decoding never
changes the model the caller holds (what a call keeps for speed is the call's own)."""

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
    """What a decoding function must leave as it found: each module's name, class and attributes (their names and
    the objects), the Parameters (the objects, and the layout of their storage), the mode."""
    modules = [(name, type(m), sorted((k, id(v)) for k, v in vars(m).items())) for name, m in model.named_modules()]
    params = [(id(p), p.stride(), p.data_ptr()) for p in model.parameters()]
    return modules, params, model.training


def _model(use: str, kernels: str) -> nn.Module:
    model = _gpt() if use in ("generate_lm", "sampled") else _seq2seq()
    return model if kernels == "reference" else fast.speed_up(model, inference=kernels == "fast, inference layout")


@pytest.mark.parametrize("kernels", ["reference", "fast", "fast, inference layout"])
@pytest.mark.parametrize("use", ["generate_lm", "sampled", "translate_ids", "beam_search", "greedy_steps"])
def test_decoding_leaves_the_callers_model_as_it_was(use, kernels):
    """After decoding, whichever kernels the model runs, the model has the same modules holding the same attributes,
    the same Parameters in the same layout holding the same values, and gives the same logits to the bit: what a
    decoding call keeps (its KV cache, the weight layouts its steps read) was its own, and no context is left set.
    On older code a decoding function swapped the fast layers into the model, then kept copies on its layers and
    stored a weight column-major while it decoded."""
    model, src = _model(use, kernels), _ids(2, 7)
    before = _state_of(model)
    weights = {k: t.clone() for k, t in model.state_dict().items()}
    with torch.inference_mode():
        logits = model(_ids(2, 9)) if use in ("generate_lm", "sampled") else model(src, _ids(2, 5))
    if use == "generate_lm":
        generate_lm(model, [[5, 6, 7], [8]], 6)
    elif use == "sampled":
        generate_lm(model, [[5, 6, 7]], 6, SamplingConfig(True, top_k=5), seed=1)
    elif use == "translate_ids":
        translate_ids(model, src, SOS, EOS, max_len=6)
    elif use == "beam_search":
        beam_search(model, src, SOS, EOS, beam_size=3, max_len=6)
    else:
        greedy_steps(model, src[:1], 6)
    assert _state_of(model) == before
    assert all(torch.equal(t, weights[k]) for k, t in model.state_dict().items())
    assert fast_linear._STEP.get() is None
    with torch.inference_mode():
        again = model(_ids(2, 9)) if use in ("generate_lm", "sampled") else model(src, _ids(2, 5))
    assert torch.equal(again, logits)


@pytest.mark.parametrize("how", [[], ["--beam", "2"], ["--sample", "--seed", "3"]])
def test_tformer_translate_leaves_the_loaded_model_as_it_was(tmp_path, monkeypatch, capsys, how):
    """Through the command: the load chooses the fast kernels (the output layer that runs is the fast Linear), and
    Translator.translate (greedy, beam, sampling) leaves the translator's model as the load made it."""
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator

    texts = ["the cat sat on the mat.", "a bird sang in the tree.", "le chat est assis."] * 3
    tok = train_tokenizer("bpe", texts, vocab_size=40, min_frequency=1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=16)
    torch.manual_seed(0)
    Translator(Seq2SeqTransformer(config), tok, tok).save(tmp_path)
    loaded, ran, before = [], [], []
    real_load = Translator.load

    def load(*args, **kwargs):
        loaded.append(real_load(*args, **kwargs))
        loaded[-1].model.output.register_forward_hook(lambda module, a, out: ran.append(type(module)))
        before.append(_state_of(loaded[-1].model))
        return loaded[-1]

    monkeypatch.setattr(Translator, "load", load)
    assert main(["translate", "--model", str(tmp_path), *how, "the cat sat.", "a bird."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert ran and set(ran) == {fast_linear.Linear}  # the load chose the fast kernels ...
    assert _state_of(loaded[0].model) == before[0]  # ... and decoding left the model as the load made it


def test_the_weight_layouts_belong_to_the_decoder_and_go_with_it():
    """What the fast Linear reads while decoding (here the transposed copy of a weight kept in PyTorch's layout) is
    kept by the decoder (``decoder.weights``), made on first use in a step, and freed with the decoder; a new decoder
    starts with none; a hook put on the model sees the decoding."""
    import gc
    import weakref

    model = fast.speed_up(_gpt())  # the training layout: the one-row product reads a copy of Wᵀ
    before = _state_of(model)
    decoder = LMDecoder(model)
    with torch.inference_mode(), hooks.capture(model, "hook_logits") as seen:
        logits, state = decoder.prefill([[5, 6, 7]], 3)
        assert decoder.weights._layouts == {}  # the prefill's products are F.linear's: no layout made
        decode_one(decoder, state, logits.argmax(-1))
    assert seen["hook_logits"].shape == (1, 1, VOCAB)  # the step's
    made = decoder.weights._layouts[model.output].transposed
    assert made is not None and made.is_contiguous() and made.data_ptr() != model.output.weight.data_ptr()
    copy = weakref.ref(made)
    assert _state_of(model) == before and LMDecoder(model).weights._layouts == {}
    del decoder, state, made
    gc.collect()
    assert copy() is None


def test_a_caller_keeps_one_decoding_context_over_several_calls():
    """``decoding=``: the weight layouts of one call read again by the next (a server's, or Translator.translate's for
    all its batches): the same tokens as fresh ones, no layout made twice; anything else is refused in one line."""
    model, src = fast.speed_up(_seq2seq(), inference=True), _ids(2, 7)
    kept = fast_linear.DecodingWeights()
    first = beam_search(model, src, SOS, EOS, beam_size=3, max_len=6, decoding=kept)
    layouts = {layer: (found, found.transposed, dict(found.packed)) for layer, found in kept._layouts.items()}
    assert layouts and all(wt is not None for _, wt, _ in layouts.values())  # beams: 3 rows a step read Wᵀ
    assert beam_search(model, src, SOS, EOS, beam_size=3, max_len=6, decoding=kept) == first
    assert beam_search(model, src, SOS, EOS, beam_size=3, max_len=6) == first  # a fresh context: the same beams
    for layer, (found, wt, packed) in layouts.items():  # the second call read the first call's, made none
        assert kept._layouts[layer] is found and found.transposed is wt and found.packed == packed
    assert translate_ids(model, src, SOS, EOS, max_len=6, decoding=kept) == translate_ids(model, src, SOS, EOS, 6)
    assert generate_lm(_gpt(), [[5, 6]], 3, decoding=fast_linear.DecodingWeights()) == generate_lm(_gpt(), [[5, 6]], 3)
    with pytest.raises(TypeError, match="decoding must be None or a tformer.fast.linear.DecodingWeights"):
        translate_ids(model, src, SOS, EOS, max_len=6, decoding={})


def test_translator_translate_keeps_one_decoding_context_for_all_its_batches(monkeypatch):
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator, translator

    texts = ["the cat sat on the mat.", "a bird sang in the tree.", "le chat est assis."] * 3
    tok = train_tokenizer("bpe", texts, vocab_size=40, min_frequency=1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=16)
    torch.manual_seed(0)
    seen = []
    real = translator.translate_ids
    monkeypatch.setattr(translator, "translate_ids", lambda *a, **k: seen.append(k["decoding"]) or real(*a, **k))
    Translator(fast.speed_up(Seq2SeqTransformer(config).eval()), tok, tok).translate(texts[:5], batch_size=2)
    assert len(seen) == 3 and all(d is seen[0] for d in seen) and seen[0]._layouts  # three batches, one context


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_a_translation_call_is_checked_before_it_decodes_naming_the_argument(decode):
    """max_len past the decoder's positions failed only after 32 tokens, and only for sources that never ended, in
    the words of the positional table: it is a bound, kept within them; a start id past the vocabulary was said as
    "tgt contains token id 999", a 1-D src as an IndexError."""
    model = _seq2seq()
    src = _ids(2, 5)

    def call(src=src, sos_id=SOS, max_len=8):
        if decode == "beam":
            return beam_search(model, src, sos_id, NEVER, beam_size=2, max_len=max_len)
        return translate_ids(model, src, sos_id, NEVER, max_len)

    assert [len(row) for row in call(max_len=32)] == [32, 32]  # the whole of the target's positions
    assert [len(row) for row in call(max_len=200)] == [32, 32]  # a bound: no further than the positions go
    for kwargs, said in (
        ({"sos_id": VOCAB}, rf"sos_id must be a target token id in \[0, {VOCAB}\), got {VOCAB}"),
        ({"src": src[0]}, r"src must be a \(B, S\) tensor of token ids \(one row per source\), got shape \(5,\)"),
        ({"src": src.tolist()}, r"src must be a \(B, S\) tensor of token ids .*, got list"),
    ):
        with pytest.raises(ValueError, match=said):
            call(**kwargs)
