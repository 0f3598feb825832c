"""Decoding for the explorer: greedy steps, the beam-search tree, teacher forcing, GPT sampling step by step.

Each answer is produced by the library's own decoding code, watched, never re-implemented:

* greedy: :func:`tformer.inspection.greedy_steps` (the decoding loop's greedy steps, each pick with its top-k);
* beam: :func:`tformer.generation.beam_search` with its ``on_step`` hook, which reports every ranked candidate;
  the tree is drawn from those reports and the output is the search's own result;
* sampling: the decoding loop of :func:`tformer.generation.generate_lm` (its prefill, sampler and
  :func:`~tformer.generation.decode_n`) with the seed, so the tokens are what ``tformer generate --seed`` draws; the
  distributions before and after the filters are the logits each draw was made from, and those put through
  :func:`tformer.generation.process_logits` (temperature → top-k → top-p);
* teacher forcing: one forward pass of the model on the reference.

Dimension legend: T tokens, V vocabulary size, K beams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tformer.generation import (
    BeamCandidate,
    LMDecoder,
    SamplingConfig,
    beam_search,
    decode_n,
    process_logits,
    sampler,
    seeded,
    until,
)
from tformer.inspection import greedy_steps
from tformer.tokens import LM_PAD

if TYPE_CHECKING:
    from tformer.explore.model import Model
    from tformer.explore.params import Params

__all__ = ["greedy_ids", "decode", "sample"]

MAX_BEAM, MAX_LEN, MAX_STEPS, TOP = 16, 256, 64, 10
TOP_SAMPLE = 20  # candidates shown before / after the sampling filters


def _name(m: Model, i: int) -> str:
    return m.tgt.vocab[i] if 0 <= i < len(m.tgt.vocab) else str(i)


def greedy_ids(m: Model, src_ids: list[int], max_len: int) -> list[int]:
    """The greedy translation's ids (no <eos>)."""
    steps = greedy_steps(m.model, src_ids, max_len, m.tgt.vocab, 1, m.eos_id, m.start_id)
    return [s["id"] for s in steps if s["id"] != m.eos_id]


def decode(m: Model, p: Params) -> dict:
    if m.family not in ("seq2seq", "gpt"):
        raise ValueError(f"decode needs a seq2seq or gpt model; this one is {m.family}")
    codec = m.src if m.family == "seq2seq" else m.tgt
    ids = m.encode(p.text("text"), codec)[0]
    mode = p.choice("mode", ("greedy", "beam"), "greedy")
    context = int(m.config.max_len)
    room = context - 1 if m.family == "seq2seq" else context - len(ids)  # as Translator.translate / the context
    if room < 1:
        raise ValueError(f"text has {len(ids)} tokens: no room left in the model's context of {context}")
    max_len = p.integer("max_len", min(128 if m.family == "seq2seq" else 20, room), lo=1, hi=min(MAX_LEN, room))
    if mode == "beam":
        if m.family != "seq2seq":
            raise ValueError("decode: mode beam needs a seq2seq model (beam search is encoder–decoder here)")
        k = p.integer("beam_size", 4, lo=1, hi=MAX_BEAM)
        lp = p.number("length_penalty", 1.0, lo=0.0, hi=5.0)
        p.done()
        return _beam(m, ids, k, max_len, lp)
    reference = p.text("reference") if p.has("reference") else None
    p.done()
    eos = m.eos_id if m.family == "seq2seq" else m.tgt.eos
    steps, fed = [], []
    for step in greedy_steps(m.model, ids, max_len, m.tgt.vocab, TOP, eos, m.start_id):
        fed += step["fed"]
        candidates = [list(c) for c in step["candidates"]]
        steps.append({**step, "candidates": candidates, "input": list(fed), "cache_len": len(fed)})
    new = [st["id"] for st in steps if st["id"] != eos]
    answer: dict[str, Any] = dict(steps=steps, output=m.tgt.decode(new))
    if reference is not None:
        answer["teacher_forced"] = _teacher_forced(m, ids, reference)
    return answer


def _teacher_forced(m: Model, ids: list[int], reference: str) -> list[dict]:
    """Each reference token's probability when the decoder is fed the reference (not its own picks)."""
    ref = m.encode(reference, m.tgt, "reference")[0]
    if m.family == "seq2seq":
        fed, expected = [m.start_id] + ref, ref + [m.eos_id]
        m.check_length(len(fed), "reference")
        logits = m.model(torch.tensor([ids]), torch.tensor([fed]))[0]  # (T, V)
        start = 0
    else:
        m.check_length(len(ids) + len(ref), "text + reference")
        logits, expected, start = m.model(torch.tensor([ids + ref]))[0], ref, len(ids) - 1  # (T, V)
    probs = logits.double().softmax(-1)
    out = []
    for j, e in enumerate(expected):
        row = probs[start + j]  # (V,)
        pred = int(row.argmax())
        out.append(
            dict(
                step=j + 1,
                expected=_name(m, e),
                expected_id=e,
                predicted=_name(m, pred),
                predicted_id=pred,
                prob_expected=float(row[e]),
                prob_predicted=float(row[pred]),
            )
        )
    return out


def _beam(m: Model, ids: list[int], k: int, max_len: int, length_penalty: float) -> dict:
    """The search tree as ``beam_search`` reports it: every ranked candidate of every step, and its own result."""
    root = _name(m, m.start_id)  # <sos>; a Marian's <pad>
    nodes: list[dict] = [
        dict(id=0, parent=None, step=0, token=root, token_id=m.start_id, logp=0.0, score=0.0, status="alive")
    ]
    steps: list[dict] = []
    beams = [0]  # node id of each beam slot

    def on_step(step: int, _source: int, candidates: list[BeamCandidate]) -> None:
        nonlocal beams
        slots: dict[int, int] = {}
        record: dict[str, list[int]] = {"alive": [], "finished": [], "pruned": []}
        for c in candidates:
            node = len(nodes)
            score = c.score if c.score is not None else c.logp / step**length_penalty
            nodes.append(
                dict(
                    id=node,
                    parent=beams[c.beam],
                    step=step,
                    token=_name(m, c.token),
                    token_id=c.token,
                    logp=c.logp,
                    score=score,
                    status=c.status,
                )
            )
            record[c.status].append(node)
            if c.slot is not None:
                slots[c.slot] = node
        steps.append(dict(step=step, **record))
        beams = [slots[j] for j in sorted(slots)]

    src = torch.tensor([ids])  # (1, S)
    best = beam_search(m.model, src, m.start_id, m.eos_id, k, max_len, length_penalty, on_step=on_step)[0]
    return dict(
        nodes=nodes,
        steps=steps,
        best=[_name(m, i) for i in best],
        best_node=_best_node(nodes, best, m.eos_id),
        output=m.tgt.decode(best),
        beam_size=k,
        length_penalty=length_penalty,
    )


def _best_node(nodes: list[dict], best: list[int], eos_id: int) -> int | None:
    """The finished node whose path is ``best`` with the highest score (the search's pick)."""

    def path(node: dict) -> list[int]:
        ids = []
        while node["parent"] is not None:
            ids.append(node["token_id"])
            node = nodes[node["parent"]]
        return ids[::-1]

    done = [n for n in nodes if n["status"] == "finished"]
    hits = [n for n in done if path(n) in (best, best + [eos_id])]
    return max(hits, key=lambda n: n["score"])["id"] if hits else None


def sample(m: Model, p: Params) -> dict:
    if m.family != "gpt":
        raise ValueError(f"sample needs a gpt model; this one is {m.family}")
    ids = m.encode(p.text("text"), m.tgt)[0]
    top_k = p.integer("top_k", 0, lo=0, hi=len(m.tgt.vocab))  # 0 = off, as `tformer generate --top-k 0`
    top_p = p.number("top_p", 1.0, lo=0.0, hi=1.0, lo_open=True)  # any p > 0 keeps at least the top token
    config = SamplingConfig(
        True,
        p.number("temperature", 1.0, lo=1e-3, hi=100.0),
        top_k or None,
        top_p if top_p < 1 else None,  # 1 = off, as `tformer generate --top-p 1`
    )
    seed = p.integer("seed", 0, lo=0, hi=2**63 - 1)
    room = int(m.config.max_len) - len(ids)
    if room < 1:
        raise ValueError(f"text has {len(ids)} tokens: no room left in the model's context of {m.config.max_len}")
    n = p.integer("steps", min(20, room), lo=1, hi=min(MAX_STEPS, room))
    p.done()
    # the tokens: exactly what `tformer generate --seed` draws (tformer.lm.generate's generate_lm: the same prefill,
    # sampler and loop), and beside each the logits the draw was made from, before and after the filters
    pad = LM_PAD if m.tgt.pad is None else m.tgt.pad
    decoder, seen = LMDecoder(m.model, pad), []
    draw = sampler(config, seeded(seed, next(m.model.parameters()).device))

    def watched(logits: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
        seen.append((logits[0].float(), process_logits(logits, config, previous)[0]))  # (V,) before, after
        return draw(logits, previous)

    with torch.inference_mode():
        logits, state = decoder.prefill([ids], n)
        new = decode_n(decoder, state, logits, n, watched, None if m.tgt.eos is None else until(m.tgt.eos))[0]
    steps = []
    for j, (token, (before, after)) in enumerate(zip(new, seen)):
        steps.append(
            dict(
                step=j + 1,
                token=_name(m, token),
                id=token,
                before=_top(m, before),
                after=_top(m, after),
                kept=int(torch.isfinite(after).sum()),
                prob_before=float(before.double().softmax(-1)[token]),
                prob_after=float(after.double().softmax(-1)[token]),
            )
        )
    return dict(steps=steps, output=m.tgt.decode(new), prompt=m.tgt.decode(ids))


def _top(m: Model, logits: torch.Tensor) -> list[list]:
    probs = logits.double().softmax(-1)  # (V,)
    values, ids = probs.topk(min(TOP_SAMPLE, int(torch.isfinite(logits).sum())))
    return [[_name(m, int(i)), int(i), float(v)] for v, i in zip(values, ids)]
