"""Glass box: a trace of one real forward pass, every intermediate tensor in data-flow order.

The trace is *collected*, never recomputed: it captures the model's hook points (:mod:`tformer.nn.hooks`: the
embeddings, each attention's Q, K, V, mask, scores, weights and context, each add & norm, the feed-forwards, the
final norms, the logits) during one forward pass. Capturing the steps inside an attention sends it down the
reference path, so the numbers shown are the numbers the model used; ``tests/test_trace.py`` proves it against
``model(...)``.

    >>> t = trace(model, src_ids, tgt_ids)                    # doctest: +SKIP
    >>> toy = toy_seq2seq()                                   # d_model = 4, the notes' example
    >>> t = toy.trace(max_new_tokens=5)                       # doctest: +SKIP
    >>> print(t.format(layer=0, stages=["weights"]))          # doctest: +SKIP
    >>> t.plot_attention("cross.png", block="decoder", kind="cross")  # doctest: +SKIP

Dimension legend: B batch, T sequence length, H heads, Tq query length, Tk key length,
Dh head dim, D model dim, V vocabulary size. Each :class:`Entry` names its dims, e.g. ("B", "H", "Tq", "Tk").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from tformer.inspection.collector import Collector, Entry
from tformer.inspection.decoding import as_ids, greedy_steps, token_text, top_k_probs
from tformer.inspection.format import format_trace, summary
from tformer.nn import hooks
from tformer.outputs import save_to, write_output
from tformer.tokens import TRANSLATION_SOS

__all__ = [
    "STAGES",
    "Entry",
    "Trace",
    "trace",
    "trace_seq2seq",
    "trace_gpt",
    "trace_bert",
]

STAGES = (
    "tokens",
    "token_embedding",
    "positional",
    "segment",
    "embedding",
    "q",
    "k",
    "v",
    "qk",
    "scores",
    "mask",
    "masked_scores",
    "weights",
    "context",
    "attn_output",
    "add_norm",
    "ffn_gate",
    "ffn_up",
    "ffn",
    "final_norm",
    "logits",
    "probs",
    "top_k",
    "generation",
)
SOS = TRANSLATION_SOS  # the seq2seq decoder starts here (the layouts: tformer.tokens)


@dataclass
class Trace:
    model_type: str
    entries: list[Entry] = field(default_factory=list)
    tokens: dict[str, list[str]] = field(default_factory=dict)  # block → tokens of its input
    top_k: list[dict] = field(default_factory=list)  # {"position", "token", "candidates": [(token, id, prob)]}
    steps: list[dict] = field(default_factory=list)  # greedy generation, one dict per step

    def select(self, layer: int | None = None, stages=None, block: str | None = None) -> list[Entry]:
        """Entries of that ``layer`` (entries outside the layers are dropped), ``stages`` and ``block``. A layer or
        block the trace does not have is a ``ValueError`` saying which it has (not an empty list)."""
        stages = _check_stages(stages)
        for name, value in (("layer", layer), ("block", block)):
            have = {getattr(e, name) for e in self.entries}
            if value is not None and value not in have:
                held = sorted(h for h in have if h is not None)
                raise ValueError(f"{name}={value!r}: this trace has no such {name}; it has {held}")
        return [
            e
            for e in self.entries
            if (layer is None or e.layer == layer)
            and (stages is None or e.stage in stages)
            and (block is None or e.block == block)
        ]

    def get(self, stage: str, block: str | None = None, layer: int | None = None, kind: str | None = None) -> Entry:
        """The first entry of ``stage`` matching ``block``/``layer``/``kind`` ("self"/"cross")."""
        for e in self.select(layer, [stage], block):
            if kind is None or e.kind == kind:
                return e
        have = sorted({(e.block, e.layer, e.kind) for e in self.entries if e.stage == stage}, key=str)
        raise ValueError(
            f"no {stage!r} entry for block={block!r}, layer={layer!r}, kind={kind!r}; the trace has {have}"
        )

    def format(self, layer: int | None = None, head: int | None = None, stages=None, max_full: int = 128) -> str:
        """Readable text: values in full for tensors of at most ``max_full`` elements, else a summary."""
        self._check_head(head, layer)
        return format_trace(self, self.select(layer, stages), head, _check_stages(stages), layer, max_full)

    def __str__(self) -> str:
        return self.format()

    def _check_head(self, head: int | None, layer: int | None = None) -> None:
        """``head`` and ``layer`` must be the model's (else the selection would be empty, said by no one)."""
        n_heads = max((e.tensor.shape[e.dims.index("H")] for e in self.entries if "H" in e.dims), default=0)
        if head is not None and not 0 <= head < n_heads:
            raise ValueError(f"head must be in [0, {n_heads}) for this model, got {head}")
        n_layers = max((e.layer for e in self.entries if e.layer is not None), default=-1) + 1
        if layer is not None and not 0 <= layer < n_layers:
            raise ValueError(f"layer must be in [0, {n_layers}) for this model, got {layer}")

    def to_dict(
        self, max_values: int = 100_000, layer: int | None = None, head: int | None = None, stages=None
    ) -> dict:
        """Plain data: each entry with its dims, labels and values (a summary above ``max_values`` elements); the
        same selection as :meth:`format`'s: that ``layer``'s entries, that ``head`` of each tensor with heads (its H
        axis then of size 1, and the entry says ``"head"``), those ``stages``."""
        self._check_head(head, layer)
        entries = []
        for e in self.select(layer, stages):
            one = head is not None and "H" in e.dims
            t = e.tensor.narrow(e.dims.index("H"), head, 1) if one and head is not None else e.tensor  # H of size 1
            data = {"values": _jsonable(t.tolist())} if t.numel() <= max_values else {"summary": summary(t)}
            entries.append(
                dict(stage=e.stage, block=e.block, layer=e.layer, where=e.where, kind=e.kind, dims=list(e.dims))
                | dict(shape=list(t.shape), note=e.note, rows=e.rows, cols=e.cols)
                | ({"head": head} if one else {})
                | data
            )
        stages = _check_stages(stages)
        outside = lambda stage: layer is None and (stages is None or stage in stages)  # noqa: E731 (as format's)
        return dict(
            model_type=self.model_type,
            tokens=self.tokens,
            entries=entries,
            top_k=self.top_k if outside("top_k") else [],
            generation=self.steps if outside("generation") else [],
        )

    def to_json(self, path: str | Path, max_values: int = 100_000, layer=None, head=None, stages=None) -> Path:
        """Write the trace as JSON (−∞ is written as the string "-inf"); tensors above ``max_values`` as summaries;
        ``layer``, ``head`` and ``stages`` select as :meth:`to_dict` does."""
        text = json.dumps(self.to_dict(max_values, layer, head, stages), indent=1) + "\n"
        return write_output(save_to(path, "path"), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    def plot_attention(
        self, path=None, block: str | None = None, layer: int = 0, kind: str | None = None, head: int | None = None
    ):
        """Heatmap of one attention module's weights (all heads in a grid, or ``head``); returns the Figure."""
        from tformer.inspection.plots import plot_attention

        self._check_head(head)
        e = self.get("weights", block, layer, kind)
        w = e.tensor[0]  # (H, Tq, Tk), first sequence of the batch
        if head is not None:
            w = w[head]  # (Tq, Tk)
        title = f"{e.block} layer {e.layer} {e.kind}-attention" + (f", head {head}" if head is not None else "")
        return plot_attention(w, e.cols, e.rows, path, title)


def _check_stages(stages) -> set[str] | None:
    if stages is None:
        return None
    stages = {stages} if isinstance(stages, str) else set(stages)
    unknown = stages - set(STAGES)
    if unknown:
        raise ValueError(f"stages: unknown stage(s) {sorted(unknown)}; choose from {', '.join(STAGES)}")
    return stages


def _jsonable(v):
    """Nested lists of numbers with ±inf/nan as strings ("-inf"): JSON has no infinity."""
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


def _labels(ids: torch.Tensor, tokens: list[str] | None, vocab: list[str] | None, name: str) -> list[str]:
    if tokens is None:
        return [token_text(vocab, int(i)) for i in ids[0]]
    if len(tokens) != ids.shape[1]:
        raise ValueError(f"{name} has {len(tokens)} tokens but the ids have length {ids.shape[1]}")
    return list(tokens)


def _run(model: nn.Module, labels: dict[str, list[str]], ids: dict[str, torch.Tensor], vocab, call) -> Trace:
    """Run ``call()`` once with every hook point captured, in eval mode; restore the mode after."""
    was_training = model.training
    model.eval()
    tr = Trace(str(model.model_type), tokens=labels)
    for block, t in ids.items():
        tr.entries.append(Entry("tokens", t, ("B", "T"), block, None, "", "token ids", cols=labels[block]))
    last = labels[list(ids)[-1]]  # the output head reads the last block's positions
    collector = Collector(model, {**labels, "output": last}, vocab)
    with torch.no_grad(), hooks.capture(model) as captured:  # every hook point, the attentions' inside included
        try:
            call()
        finally:
            model.train(was_training)
    tr.entries += collector.collect(captured)
    logits = tr.get("logits").tensor  # (B, T, V)
    tr.entries.append(
        Entry(
            "probs",
            torch.softmax(logits, dim=-1),
            ("B", "T", "V"),
            "output",
            None,
            "output",
            "softmax over V",
            last,
            collector.vocab_cols(logits.shape[-1]),
        )
    )
    return tr


def _add_top_k(tr: Trace, vocab, k: int, positions: list[int]) -> None:
    logits = tr.get("logits").tensor[0]  # (T, V)
    rows = tr.get("probs").rows or []
    tr.top_k = [dict(position=p, token=rows[p], candidates=top_k_probs(logits[p], vocab, k)) for p in positions]


def trace_seq2seq(
    model,
    src_ids,
    tgt_ids=(SOS,),
    src_tokens=None,
    tgt_tokens=None,
    vocab=None,
    k: int = 5,
    max_new_tokens: int = 0,
    eos_id: int | None = None,
    start_id: int | None = None,
) -> Trace:
    """Trace ``model(src, tgt)`` (teacher forcing; ``tgt`` starts with <sos>), then greedy generation from
    ``start_id`` (default <sos>; a Marian's <pad>) until ``eos_id`` (default <eos>; a Marian's </s>).

    ``vocab`` maps target ids to token strings (for top-k and generation).
    """
    src, tgt = as_ids(src_ids, "src_ids"), as_ids(tgt_ids, "tgt_ids")
    labels = {
        "encoder": _labels(src, src_tokens, None, "src_tokens"),
        "decoder": _labels(tgt, tgt_tokens, vocab, "tgt_tokens"),
    }
    tr = _run(model, labels, {"encoder": src, "decoder": tgt}, vocab, lambda: model(src, tgt))
    _add_top_k(tr, vocab, k, list(range(tgt.shape[1])))
    if max_new_tokens:
        tr.steps = greedy_steps(model, src, max_new_tokens, vocab, k, eos_id, start_id)
    return tr


def trace_gpt(
    model, ids, tokens=None, vocab=None, k: int = 5, max_new_tokens: int = 0, eos_id: int | None = None
) -> Trace:
    """Trace ``model(ids)`` (a prompt), top-k at the last position, then greedy continuation."""
    ids = as_ids(ids, "ids")
    labels = {"decoder": _labels(ids, tokens, vocab, "tokens")}
    tr = _run(model, labels, {"decoder": ids}, vocab, lambda: model(ids))
    _add_top_k(tr, vocab, k, [ids.shape[1] - 1])
    if max_new_tokens:
        tr.steps = greedy_steps(model, ids, max_new_tokens, vocab, k, eos_id)
    return tr


def trace_bert(
    model, ids, tokens=None, token_type_ids=None, vocab=None, k: int = 5, mask_token: str = "[MASK]"
) -> Trace:
    """Trace the encoder and the MLM head; top-k at the ``mask_token`` positions (all positions if none)."""
    ids = as_ids(ids, "ids")
    labels = {"encoder": _labels(ids, tokens, vocab, "tokens")}
    types = None if token_type_ids is None else as_ids(token_type_ids, "token_type_ids")
    tr = _run(model, labels, {"encoder": ids}, vocab, lambda: model.pretraining_logits(ids, token_type_ids=types))
    positions = [i for i, t in enumerate(labels["encoder"]) if t == mask_token] or list(range(ids.shape[1]))
    _add_top_k(tr, vocab, k, positions)
    return tr


def trace(model, *args, **kwargs) -> Trace:
    """Dispatch on ``model.model_type`` to :func:`trace_seq2seq`, :func:`trace_gpt` or :func:`trace_bert`."""
    fns: dict[str, Callable[..., Trace]] = {"seq2seq": trace_seq2seq, "gpt": trace_gpt, "bert": trace_bert}
    kind = getattr(model, "model_type", None)
    if kind not in fns:
        raise TypeError(f"model must be a tformer Seq2SeqTransformer, GPT or Bert, got {type(model).__name__}")
    return fns[kind](model, *args, **kwargs)
