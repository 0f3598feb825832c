"""The KV cache's size is known and bounded (issue 40, item 3): :func:`tformer.generation.cache_size.kv_cache_bytes` is
what decoding allocates (grouped-query heads, sliding windows and an encoder–decoder's cross-attention included);
``generate_lm``, ``translate_ids`` and ``beam_search`` refuse in one line, before anything is allocated, a cache
larger than the memory available; ``tformer generate`` says the cache it will hold."""

from __future__ import annotations

import pytest
import torch

from tformer.cli import main
from tformer.generation import beam_search, generate_lm, translate_ids
from tformer.generation import cache_size as kv_memory
from tformer.generation.loop import LMDecoder, Seq2SeqDecoder
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def _allocated(cache) -> int:
    tensors = [t for layer in cache.layers for t in (layer.k, layer.v, layer.cross_k, layer.cross_v) if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"n_kv_heads": 2, "positional": "rope"},  # grouped-query: the cache holds only the K/V heads
        {"sliding_window": 4, "positional": "rope"},  # a window's store keeps at most 2·W positions
    ],
)
def test_the_size_is_what_decoding_allocates(options):
    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=50, **options)).eval()
    prompts, new = [[1, 2, 3, 4, 5], [6, 7]], 9
    decoder = LMDecoder(model)
    with torch.inference_mode():
        logits, state = decoder.prefill(prompts, new)
        for _ in range(new - 1):
            logits = decoder.step(logits.argmax(-1), state)
    size = kv_memory.kv_cache_bytes(model, 2, 5 + new)
    if "sliding_window" in options:  # the window's store: an upper bound
        assert (
            0
            < _allocated(state.cache)
            <= size
            < kv_memory.kv_cache_bytes(GPT(GPTConfig.preset("tiny", vocab_size=50)), 2, 14)
        )
    else:
        assert _allocated(state.cache) == size


def test_an_encoder_decoders_size_counts_its_cross_attention():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40)).eval()
    src, new = torch.randint(4, 40, (3, 7)), 6
    decoder = Seq2SeqDecoder(model, start_id=1)
    with torch.inference_mode():
        logits, state = decoder.prefill(src, new)
        for _ in range(new):
            logits = decoder.step(logits.argmax(-1), state)
    assert _allocated(state.cache) == kv_memory.kv_cache_bytes(model, 3, new + 1, source_len=7)


def test_a_cache_larger_than_the_memory_available_is_refused_before_decoding(monkeypatch):
    model = GPT(GPTConfig.preset("tiny", vocab_size=50)).eval()
    seq2seq = Seq2SeqTransformer(Seq2SeqConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40)).eval()
    monkeypatch.setattr(kv_memory, "available_bytes", lambda device: 1000)  # a machine with 1 KB free
    ran = []
    monkeypatch.setattr(LMDecoder, "prefill", lambda *a: ran.append(a))
    with pytest.raises(
        ValueError, match=r"the KV cache for 2 prompt\(s\) of up to 3 tokens \+ max_new_tokens=50 needs"
    ):
        generate_lm(model, [[1, 2, 3], [4]], 50)
    assert not ran  # refused before the prefill allocated anything
    src = torch.randint(4, 40, (2, 5))
    with pytest.raises(ValueError, match="more than the 1000 B|more than the 1 KB cpu has available"):
        translate_ids(seq2seq, src, 1, 2, max_len=20)
    with pytest.raises(ValueError, match=r"2 source\(s\) x beam_size=4 x 20 new tokens needs"):
        beam_search(seq2seq, src, 1, 2, beam_size=4, max_len=20)


def test_generate_says_the_cache_it_will_hold(tmp_path, words_txt, capsys):
    out = tmp_path / "run"
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    assert main([*argv, "--max-steps", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--prompt", "the", "--max-new-tokens", "4", "--greedy"]) == 0
    err = capsys.readouterr().err
    assert "KV cache: " in err and "at most (1 row x " in err


def _identity(step):  # compile=<a function>: the static cache without torch.compile's minutes
    return step


@pytest.mark.parametrize(
    "options",
    [{}, {"sliding_window": 4, "positional": "rope"}, {"n_kv_heads": 2, "positional": "rope", "max_len": 200}],
)
def test_the_static_caches_size_is_what_it_allocates(options):
    """compile=True decodes on a static cache: a capacity rounded up to 64 slots (at most the context), kept whole in
    every layer, a sliding window's too (issue 44, item 5: the check had counted 2W+1 and the unrounded length)."""
    from tformer.generation.static import StaticLMDecoder, lm_capacity

    torch.manual_seed(0)
    model = GPT(GPTConfig.preset("tiny", vocab_size=50, **options)).eval()
    prompts, new = [[1, 2, 3, 4, 5], [6, 7]], 9
    decoder = StaticLMDecoder(model, compile=_identity)
    with torch.inference_mode():
        logits, state = decoder.prefill(prompts, new)
        decoder.step(logits.argmax(-1), state)
    capacity = lm_capacity(5, new, model.config.max_len)
    assert capacity == min(64, model.config.max_len) != 5 + new  # the rounding the line had left out
    assert _allocated(state.cache) == kv_memory.kv_cache_bytes(model, 2, capacity, static=True)
    if "sliding_window" in options:  # the dynamic cache's bound is smaller: the static one must not be told so
        assert kv_memory.kv_cache_bytes(model, 2, capacity) < _allocated(state.cache)


def test_a_static_cache_of_a_windowed_model_is_checked_at_its_real_size(monkeypatch):
    """A Mistral-shaped model (a sliding window, a long context) with compile and many new tokens: the static cache
    keeps the whole context in every layer, so the check refuses what the dynamic cache (2W+1 a layer) would fit."""
    model = GPT(GPTConfig.preset("tiny", vocab_size=50, sliding_window=4, positional="rope", max_len=4096)).eval()
    dynamic = kv_memory.kv_cache_bytes(model, 1, 3 + 4000)
    static = kv_memory.kv_cache_bytes(model, 1, 4096, static=True)
    assert static > 100 * dynamic
    monkeypatch.setattr(kv_memory, "available_bytes", lambda device: 10 * dynamic)
    with pytest.raises(ValueError, match="the KV cache for 1 prompt"):
        generate_lm(model, [[1, 2, 3]], 4000, compile=_identity)
    generate_lm(model, [[1, 2, 3]], 4, compile=False)  # the dynamic cache fits: decoding goes on


def test_generate_compile_says_the_static_cache_it_will_hold(tmp_path, words_txt, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = ["train", "lm", "--data", str(words_txt), "--out", str(out), "--preset", "tiny", "--max-len", "100"]
    assert main([*argv, "--max-steps", "1", "--no-progress"]) == 0
    capsys.readouterr()
    import tformer.generation.static as static

    monkeypatch.setattr(static, "_compiled", lambda step, mode: step)  # the static cache, without compiling's 20 s
    args = ["generate", "--model", str(out), "--prompt", "the", "--max-new-tokens", "4", "--greedy", "--compile"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "static KV cache: " in err and "(1 row x 64 positions)" in err  # 2 + 4 positions, rounded up to 64
