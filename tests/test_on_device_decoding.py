"""The whole one-token step on the device (tformer.generation.on_device, issue 48): the token chosen inside the
compiled step, the host reading the tokens every READ_EVERY steps. Greedy gives the host loop's tokens and the same
callbacks (``on_token``, ``stop``), for every family; sampling draws from the processed softmax, seeded; the model's
step reads nothing back, and the host reads once per READ_EVERY steps."""

import math
import sys

import pytest
import torch

from test_static_decoding import FAMILIES, PROMPTS, SOS, UNCOMPILED, _gpt, _seq2seq, _sources, counted  # noqa: F401
from test_syncs import Reads
from tformer.generation import SamplingConfig, generate_lm, on_device, translate_ids
from tformer.generation.on_device import READ_EVERY, choose_on_device
from tformer.generation.samplers import process_logits

NEW = 40  # new tokens: the prompts (at most 7) and these fit a context of 64, so no window slides


def _calls(model, compile, **kw):
    """generate_lm's tokens and what its on_token callback saw: (step, the (B,) ids) for every step."""
    seen = []
    out = generate_lm(
        model, PROMPTS, NEW, compile=compile, on_token=lambda s, ids: seen.append((s, ids.tolist())), **kw
    )
    return out, seen


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_on_the_device_gives_the_host_loops_tokens_and_callbacks(family, counted):  # noqa: F811
    backend, compiled = counted
    model = _gpt(family, max_len=64)
    today = generate_lm(model, PROMPTS, NEW)
    end = next(t for t in today[1][2:] if t not in today[0])  # row 1 ends early, row 0 runs on
    stop = lambda step, ids: [step == e for e in (-1, 4, 30, 11)]  # noqa: E731  (row 0 never stops)
    for case in (dict(eos_id=end), dict(stop=stop), dict(eos_id=end, stop=stop)):
        host, host_seen = _calls(model, False, **case)
        assert any(len(row) < NEW for row in host) and any(len(row) == NEW for row in host)
        for compile in (UNCOMPILED, compiled):
            assert _calls(model, compile, **case) == (host, host_seen)  # the filler for a row that ended, too
    assert backend.frame_count == 1  # greedy chosen inside the step: one graph for every step of every call


def test_greedy_translation_on_the_device_gives_the_host_loops_tokens(counted):  # noqa: F811
    backend, compiled = counted
    model, src = _seq2seq(), _sources()
    end = translate_ids(model, src, SOS, 3, 20)[0][4]
    today = translate_ids(model, src, SOS, end, 20)
    assert len({len(row) for row in today}) > 1  # sources end at different steps
    for compile in (UNCOMPILED, compiled):
        assert translate_ids(model, src, SOS, end, 20, compile=compile) == today
    assert backend.frame_count == 1


def test_sampling_on_the_device_draws_from_the_processed_softmax():
    """40,000 draws from one row: each token as often as process_logits' softmax says (±0.01, 4 standard errors),
    the tokens top-k and top-p remove never; the same uniforms give the same ids."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -1.0, 3.0, 0.0, -3.0]]).repeat(40_000, 1)
    for sampling in (
        SamplingConfig(True, temperature=0.7),
        SamplingConfig(True, temperature=1.3, top_k=4),
        SamplingConfig(True, top_p=0.8),
    ):
        uniforms = torch.rand(40_000, generator=torch.Generator().manual_seed(0))
        ids = choose_on_device(logits, sampling, uniforms)
        assert torch.equal(ids, choose_on_device(logits, sampling, uniforms))
        want = process_logits(logits[:1], sampling).softmax(-1)[0]
        got = torch.bincount(ids, minlength=8).double() / len(ids)
        assert (got - want).abs().max() < 0.01, (sampling, got, want)
        assert got[want == 0].sum() == 0  # removed tokens are never drawn
    assert torch.equal(choose_on_device(logits[:3], SamplingConfig(), None), logits[:3].argmax(-1))


def test_sampled_generation_on_the_device_is_seeded_and_ends_rows():
    model = _gpt("llama", max_len=64)
    sampled = SamplingConfig(True, temperature=1.0, top_k=20)
    first = generate_lm(model, PROMPTS, NEW, sampled, seed=3, compile=UNCOMPILED)
    assert generate_lm(model, PROMPTS, NEW, sampled, seed=3, compile=UNCOMPILED) == first
    assert generate_lm(model, PROMPTS, NEW, sampled, seed=4, compile=UNCOMPILED) != first
    end = first[0][5]
    ended = generate_lm(model, PROMPTS, NEW, sampled, seed=3, eos_id=end, compile=UNCOMPILED)
    for row, whole in zip(ended, first):  # each row up to its first end token, included; the same draws before
        cut = whole.index(end) + 1 if end in whole else NEW
        assert row == whole[:cut]


def test_the_host_reads_the_tokens_once_every_read_every_steps(monkeypatch):
    """An end id that never comes: the host loop reads each step's ids to check it; on the device, the step reads
    nothing (no aten read while it runs) and the host reads ceil(40 / 16) = 3 times, all in on_device's grouped read."""
    model = _gpt("gpt2", max_len=64)
    readers: list[str] = []
    tolist = torch.Tensor.tolist

    def counted_tolist(self):
        readers.append(sys._getframe(1).f_code.co_filename)
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)
    steps = []
    step = on_device.decode_n_on_device

    def watched(token_step, *args):
        def watched_step(logits, uniforms):
            with Reads() as reads:
                out = token_step(logits, uniforms)
            steps.append(reads.count)
            return out

        return step(watched_step, *args)

    monkeypatch.setattr("tformer.generation.on_device.decode_n_on_device", watched)
    generate_lm(model, PROMPTS, NEW, eos_id=-1, compile=UNCOMPILED)
    assert len(steps) == NEW - 1 and sum(steps) == 0  # the model's steps read nothing
    grouped = [f for f in readers if f.endswith("on_device.py")]
    assert len(grouped) == math.ceil(NEW / READ_EVERY) == 3
