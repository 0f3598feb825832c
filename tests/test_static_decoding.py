"""Decoding on a static KV cache with a compiled step (tformer.generation.static, tformer.generation.static_cache): the same
logits step by step and the same tokens as today's loop for every family (GPT-2's block, a Llama block with RoPE and
grouped-query attention, a Gemma-3-like one with sliding-window layers, a token-shifted one, the encoder–decoder),
greedy, sampled with a seed, beam search, left-padded prompts, rows that finish early, a window that slides past the context; uncompiled and
compiled (``fullgraph=True``: no graph break), the step compiled once over all the steps of several calls; and
``--compile`` on ``tformer generate`` and ``tformer translate``."""

import functools

import pytest
import torch

from tformer import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.cli import main
from tformer.generation import (
    LMDecoder,
    SamplingConfig,
    Seq2SeqDecoder,
    beam_search,
    generate_lm,
    static,
    translate_ids,
)
from tformer.generation.static import StaticLMDecoder, StaticSeq2SeqDecoder
from tformer.generation.static_cache import StaticCaches, StaticKVCache
from tformer.tokens import TRANSLATION_SOS as SOS

VOCAB = 40
UNCOMPILED = lambda step: step  # noqa: E731  (the static cache, the step run as written)
FAMILIES = {
    "gpt2": {},
    "llama": dict(positional="rope", norm="rmsnorm", ffn="swiglu", bias=False, n_kv_heads=2),
    "gemma3": dict(
        positional="rope", n_kv_heads=1, sliding_window=5, sliding_window_pattern=2, rope_local_base=100.0, qk_norm=True
    ),
    "shift": dict(positional="rope", norm="rmsnorm", ffn="swiglu", bias=False, shift_tokens=2),  # (tformer.nn.shift)
}
PROMPTS = [[5, 9, 3, 17, 22, 8, 30], [7, 1, 12], [12], [3, 3, 14, 15, 9]]  # left padding in every batch


def _gpt(family: str, max_len: int = 32) -> GPT:
    """A tiny untied GPT: tied tiny models repeat their last token, untied ones make varied text."""
    torch.manual_seed(1)
    config = GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=max_len, tie_embeddings=False)
    return GPT(config.replace(**FAMILIES[family])).eval()


def _seq2seq() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset(
        "tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, max_len=32, tie_embeddings=False
    )
    return Seq2SeqTransformer(config).eval()


def _ids(*shape: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(4, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _sources() -> torch.Tensor:
    src = _ids(3, 9)
    src[1, 6:] = 0  # padded sources: the memory mask
    src[2, 3:] = 0
    return src


@pytest.fixture
def counted():
    """A compiler that counts what it compiles (torch._dynamo.testing.CompileCounter, no code generation: quick),
    with ``fullgraph=True``: a graph break is an error. Dynamo starts afresh, and so does the default compiler."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    static._compiled.cache_clear()
    backend = CompileCounter()
    yield backend, functools.partial(torch.compile, backend=backend, fullgraph=True)
    torch._dynamo.reset()
    static._compiled.cache_clear()


# ------------------------------------------------------------------------------ the static cache and its masks


def test_the_static_caches_mask_hides_the_future_the_padding_and_what_the_window_left():
    """Slots 0..5; two rows, the second left-padded by one; the window's layer sees 3 positions. After the prefill
    (slots 0-2) a step at slot 3 sees slots 0-3 (global) or 1-3 (window), never the padding; the buffers keep their
    addresses (a CUDA graph reads them in place) and the position is counted on the device."""
    cache = StaticKVCache(2, capacity=6, windows=[None, 3])
    prompt, real = torch.zeros(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [0, 1, 1]]).bool()
    assert cache.begin(prompt, real)[0].tolist() == [0, 1, 2]
    assert cache.masks[None][1, 0].int().tolist() == [[0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0]]
    kv = torch.randn(2, 1, 3, 4)
    k, _ = cache.layers[0].append(kv, kv)
    buffer = k.data_ptr()
    assert k.shape == (2, 1, 6, 4) and torch.equal(k[:, :, :3], kv) and not k[:, :, 3:].any()
    assert cache.begin(torch.zeros(2, 1, dtype=torch.long))[0].tolist() == [3] and cache.index.tolist() == [4]
    assert cache.layers[0].mask[:, 0, 0].int().tolist() == [[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0]]
    assert cache.layers[1].mask[:, 0, 0].int().tolist() == [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0]]
    step = torch.randn(2, 1, 1, 4)
    k, _ = cache.layers[0].append(step, step)
    assert k.data_ptr() == buffer and torch.equal(k[:, :, 3:4], step)
    cache.reorder(torch.tensor([1, 1]), length=4)  # beam search: both rows continue row 1, in place
    assert k.data_ptr() == buffer and torch.equal(k[0, :, :4], k[1, :, :4]) and not cache.real[0, 0]


def test_a_static_cache_is_at_most_the_context():
    with pytest.raises(ValueError, match="a static cache reaches position 33, longer than max_len=32"):
        StaticKVCache.for_model(_gpt("gpt2"), 33)
    assert StaticKVCache.for_model(_seq2seq()).capacity == 32


# -------------------------------------------------------------------- the same logits, step by step, as today's


def _run(decoder, prompts, fed: torch.Tensor, ends_at: int) -> list[torch.Tensor]:
    """The prefill's logits, then a step per column of ``fed`` (rows, steps); row 1 ends after step ``ends_at``."""
    logits, state = decoder.prefill(prompts, fed.shape[1] + 1)
    out, rows = [logits], list(range(fed.shape[0]))
    for t in range(fed.shape[1]):
        if t == ends_at:  # a finished row leaves the loop's batch (the static cache keeps it, unread)
            rows = [r for r in rows if r != 1]
            state.keep(torch.tensor(rows))  # (every row is still running: its index is its row)
        out.append(decoder.step(fed[rows, t], state))
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_lm_static_steps_give_the_dynamic_caches_logits(family):
    """Left-padded prompts, a row that ends, and 20 steps in a context of 16: the window slides twice. Every step's
    (R, V) logits are today's (LMDecoder's) to float rounding."""
    model, fed = _gpt(family, max_len=16), _ids(len(PROMPTS), 20, seed=5)
    with torch.inference_mode():
        today = _run(LMDecoder(model), PROMPTS, fed, ends_at=6)
        static_ = _run(StaticLMDecoder(model, compile=UNCOMPILED), PROMPTS, fed, ends_at=6)
    for t, (a, b) in enumerate(zip(today, static_)):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0, msg=lambda m, t=t: f"step {t}: {m}")


def test_seq2seq_static_steps_give_the_dynamic_caches_logits():
    model, src, fed = _seq2seq(), _sources(), _ids(3, 12, seed=6)
    with torch.inference_mode():
        today = _run(Seq2SeqDecoder(model, SOS), src, fed, ends_at=4)
        static_ = _run(StaticSeq2SeqDecoder(model, SOS, compile=UNCOMPILED), src, fed, ends_at=4)
    for t, (a, b) in enumerate(zip(today, static_)):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0, msg=lambda m, t=t: f"step {t}: {m}")


# --------------------------------------------- the same tokens as today's loop, uncompiled and compiled once


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_lm_gives_todays_tokens_and_compiles_the_step_once(family, counted):
    """Greedy and seeded sampling (with a repetition penalty), rows that end early (an end token, a stop callback),
    36 new tokens past a context of 32 (the window slides): the static cache gives today's tokens, uncompiled and
    compiled; the compiled step has no graph break and is compiled once for all the steps of the six calls."""
    backend, compiled = counted
    model = _gpt(family)
    sampled = SamplingConfig(True, temperature=1.0, top_k=20, repetition_penalty=1.2)
    greedy_today = generate_lm(model, PROMPTS, 36)
    end = next(t for t in greedy_today[1][2:] if t not in greedy_today[0])  # row 1 ends early, row 0 runs on
    cases = [
        dict(eos_id=end),
        dict(sampling=sampled, seed=3, stop=lambda step, ids: [step == e for e in (30, 4, -1, 11)]),
    ]
    for case in cases:
        today = generate_lm(model, PROMPTS, 36, **case)
        assert any(len(row) < 36 for row in today) and any(len(row) == 36 for row in today)
        assert generate_lm(model, PROMPTS, 36, compile=UNCOMPILED, **case) == today
        assert generate_lm(model, PROMPTS, 36, compile=compiled, **case) == today
    assert generate_lm(model, PROMPTS, 36, compile=compiled) == greedy_today
    assert backend.frame_count == 1  # one graph, compiled once, for every step of every call


def test_translate_ids_and_beam_search_give_todays_tokens_and_compile_the_step_once(counted):
    """Greedy, sampled and beam search (3 beams, a length penalty) over padded sources that finish at different
    steps: greedy and beam search give today's tokens, uncompiled and compiled; sampling on the device (its own
    draws: tformer.generation.on_device) the same tokens uncompiled and compiled; the step compiled once for greedy
    and once for sampling (each chooses inside it; B rows), and once for beam search (B·K rows, chosen on the host)."""
    backend, compiled = counted
    model, src = _seq2seq(), _sources()
    end = translate_ids(model, src, SOS, 3, 20)[0][4]  # an end id the model makes: sources end at different steps
    sampled = SamplingConfig(True, temperature=1.0)
    for sampling in (SamplingConfig(), sampled):
        today = translate_ids(model, src, SOS, end, 20, sampling, torch.Generator().manual_seed(1))
        if sampling.do_sample:
            today = translate_ids(
                model, src, SOS, end, 20, sampling, torch.Generator().manual_seed(1), compile=UNCOMPILED
            )
        assert len({len(row) for row in today}) > 1
        for compile in (UNCOMPILED, compiled):
            out = translate_ids(model, src, SOS, end, 20, sampling, torch.Generator().manual_seed(1), compile=compile)
            assert out == today
    assert backend.frame_count == 2
    today = beam_search(model, src, SOS, end, beam_size=3, max_len=20, length_penalty=0.6)
    assert len({len(row) for row in today}) > 1
    for compile in (UNCOMPILED, compiled):
        assert beam_search(model, src, SOS, end, 3, 20, 0.6, compile=compile) == today
    assert backend.frame_count == 3


# ------------------------------------------------------------------ one cache per shape, reused across calls


@pytest.fixture
def guarded(monkeypatch):
    """The buffers marked as on a GPU, on the CPU too, with the guard on their identity that ``mark_static_address``
    had by default in torch 2.6–2.8 (a new buffer: the step compiled again; from 2.9 the default is no guard, and a new
    address records the CUDA graph again instead), so that a new cache per call shows here (issue 48)."""
    from tformer.generation import static_cache

    def static(t):
        torch._dynamo.mark_static_address(t, guard=True)
        return t

    monkeypatch.setattr(static_cache, "_static", static)


def test_ten_generate_calls_on_one_static_caches_compile_the_step_once(counted, guarded):
    backend, compiled = counted
    model, caches = _gpt("llama"), StaticCaches()
    today = generate_lm(model, PROMPTS, 12)
    addresses = set()
    for _ in range(10):
        assert generate_lm(model, PROMPTS, 12, compile=compiled, caches=caches) == today
        (cache,) = caches._caches.values()
        addresses.add(tuple(b.data_ptr() for layer in cache.layers for b in (layer.k, layer.v) if b is not None))
    assert backend.frame_count == 1 and caches.made == 1  # one cache, one compilation, ten calls
    assert len(addresses) == 1  # the same buffers: a CUDA graph replays, not recorded again
    generate_lm(model, PROMPTS[:2], 12, compile=compiled, caches=caches)  # two rows: another shape, another cache
    assert caches.made == 2
    backend.frame_count = 0
    fresh = [StaticCaches() for _ in range(3)]  # kept alive: a freed cache's ids could be reused by the next one
    for pool in fresh:  # new buffers each call: the guards on their identity compile the step again, every call
        generate_lm(model, PROMPTS, 12, compile=compiled, caches=pool)
    assert backend.frame_count == 3


def test_greedy_and_beam_search_reuse_static_caches_across_calls(counted, guarded):
    backend, compiled = counted
    model, src = _seq2seq(), _sources()
    caches = StaticCaches()
    today = translate_ids(model, src, SOS, 3, 12)
    beams = beam_search(model, src, SOS, 3, 3, 12, 0.6)
    for _ in range(5):  # another source each time would do the same: the cross-attention keys are made per prefill
        assert translate_ids(model, src, SOS, 3, 12, compile=compiled, caches=caches) == today
        assert beam_search(model, src, SOS, 3, 3, 12, 0.6, compile=compiled, caches=caches) == beams
    assert backend.frame_count == 2 and caches.made == 2  # B rows and B·K rows
    other = _sources().flip(0)  # other sources in the same cache: their own cross-attention keys and values
    assert translate_ids(model, other, SOS, 3, 12, compile=compiled, caches=caches) == translate_ids(
        model, other, SOS, 3, 12
    )


def test_a_translators_calls_share_its_static_caches(tmp_path, counted, guarded):
    from tformer.translation import Translator

    backend, compiled = counted
    translator = Translator.load(_saved_translator(tmp_path))
    sentences = ["the cat sat.", "a bird sang in the tree.", "le chat."]
    today = translator.translate(sentences, max_new_tokens=10)
    for _ in range(4):
        assert translator.translate(sentences, max_new_tokens=10, compile=compiled) == today  # type: ignore[arg-type]
    assert translator.static_caches.made == 1 and backend.frame_count == 1


def test_static_caches_keep_the_most_recent_shapes_of_one_model():
    model, caches = _gpt("gpt2"), StaticCaches(limit=2)
    first = caches.get(model, 2, 16)
    assert caches.get(model, 2, 16) is first and caches.made == 1
    caches.get(model, 3, 16), caches.get(model, 4, 16)  # the third shape pushes out the oldest
    assert caches.get(model, 2, 16) is not first and caches.made == 4
    assert caches.get(_gpt("llama"), 2, 16) is not first  # another model: its own caches
    with pytest.raises(ValueError, match="StaticCaches needs a limit of at least 1 cache, got 0"):
        StaticCaches(limit=0)


# ------------------------------------------------------------------------- compile=True, and the command line


@pytest.mark.parametrize("device, mode", [("cpu", None), ("cuda", "reduce-overhead")])
def test_compile_true_is_torch_compile_reduce_overhead_on_a_gpu_made_once(monkeypatch, device, mode):
    """``compile=True``: torch.compile with mode="reduce-overhead" (CUDA graphs) on a CUDA device, the default mode on
    the CPU; one compiled function per step function, kept for the next call (a new torch.compile compiles again)."""
    made = []
    monkeypatch.setattr(torch, "compile", lambda step, mode=None: made.append((step, mode)) or step)
    static._compiled.cache_clear()
    try:
        compile = static.compile_step(True, torch.device(device))
        assert compile(static._lm_step) is static._lm_step and compile(static._lm_step) is static._lm_step
        assert made == [(static._lm_step, mode)]
    finally:
        static._compiled.cache_clear()


def _saved_lm(directory):
    from tformer.tokenizers import CharTokenizer

    tok = CharTokenizer.train(["the cat sat on the mat and ran off to see the dog."])
    torch.manual_seed(0)
    config = GPTConfig.preset("tiny", vocab_size=tok.vocab_size, dropout=0.0, max_len=32, tie_embeddings=False)
    GPT(config).save_pretrained(directory)
    tok.save(directory)
    return directory


def _saved_translator(directory):
    from tformer.tokenizers import train_tokenizer
    from tformer.translation import Translator

    texts = ["the cat sat on the mat.", "a bird sang in the tree.", "le chat est assis."] * 3
    tok = train_tokenizer("bpe", texts, vocab_size=40, min_frequency=1)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=24)
    torch.manual_seed(0)
    Translator(Seq2SeqTransformer(config.replace(tie_embeddings=False)), tok, tok).save(directory)
    return directory


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "--prompt", "the c", "--max-new-tokens", "40", "--seed", "2"],
        ["generate", "--prompt", "the c", "--max-new-tokens", "40", "--greedy"],
        ["generate", "--prompt", "the c", "--max-new-tokens", "40", "--seed", "3", "--num-samples", "2"],  # 2 calls
        ["translate", "the cat sat.", "a bird sang in the tree.", "le chat."],
        ["translate", "--beam", "3", "the cat sat.", "a bird sang in the tree.", "le chat."],
        ["translate", "--sample", "--seed", "4", "the cat sat.", "a bird."],
    ],
)
def test_compile_flag_decodes_the_same_text_through_the_compiled_step(tmp_path, monkeypatch, capsys, command):
    """``--compile`` (generate, translate): the same output as without, each step through the compiled static step
    (torch.compile stubbed to count the steps it runs: compiling for real takes a minute on a small CPU). A sampled
    translation chooses on the device (its own draws): the same output in two runs. The language model's 40 tokens
    pass its context of 32, so its window slides: the host loop's step; a translation chooses in the step, beam search
    on the host."""
    saved = (_saved_lm if command[0] == "generate" else _saved_translator)(tmp_path)
    args = [command[0], "--model", str(saved), *command[1:]]
    sampled_on_device = "--sample" in command
    assert main(args) == 0
    today = capsys.readouterr().out
    steps = []

    def stub(step, mode=None):
        assert mode is None  # the CPU: plain torch.compile

        def counted(*a, **k):
            steps.append(step.__name__)
            return step(*a, **k)

        return counted

    monkeypatch.setattr(torch, "compile", stub)
    static._compiled.cache_clear()
    try:
        assert main([*args, "--compile"]) == 0
        if sampled_on_device:
            today = capsys.readouterr().out
            assert main([*args, "--compile"]) == 0
    finally:
        static._compiled.cache_clear()
    assert capsys.readouterr().out == today and today.strip()
    step = {"generate": "_lm_step", "translate": "_seq2seq_token"}[command[0]]
    step = "_seq2seq_step" if "--beam" in command else step
    assert len(steps) > 3 and set(steps) == {step}
