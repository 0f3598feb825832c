"""A :class:`Session`: one model (any family, or the notes' toy) and the answers of the explorer's JSON API.

    >>> s = Session.open(None)                                      # the notes' d_model = 4 toy
    >>> t = s.call("trace", {"text": "I am good."})                 # doctest: +SKIP
    >>> s.call("tensor", {"trace_id": t["trace_id"], "id": 12, "head": 0})  # doctest: +SKIP

Every number comes from the model's own code: the forward pass from :func:`tformer.inspection.trace` (plus the
feed-forwards' hook points before and after their activation, captured in the same pass),
decoding from :mod:`tformer.explore.decoding` (which calls :mod:`tformer.generation`), fill-mask from
:func:`tformer.bert.fill_mask`. A trace is computed once and kept (a small LRU keyed by ``trace_id``); its
tensors are sent only when asked for, one at a time. The API is written down in ``docs/explore-api.md``.

This module knows nothing about HTTP; :mod:`tformer.explore.server` serves it.

Dimension legend: B batch (always 1 here), T tokens, H heads, V vocabulary size.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tformer.explore import decoding, defaults
from tformer.explore.formulas import formula
from tformer.explore.model import Model, check_comparable, load_model, with_precision
from tformer.explore.params import Params
from tformer.explore.tensors import difference, jsonable_tensor, number, value_range
from tformer.inspection import Entry, Trace, trace
from tformer.nn import hooks
from tformer.nn.feedforward import FeedForward, GatedFeedForward

__all__ = ["Session", "API_NAMES", "MAX_TENSOR_VALUES", "jsonable_tensor"]

API_NAMES = ("info", "trace", "tensor", "decode", "sample", "fill_mask", "nsp", "compare", "tensor_diff")

MAX_TENSOR_VALUES = 1 << 21  # one tensor answer; a bigger one is asked for a row at a time
TRACES_KEPT = 8


@dataclass
class _Traced:
    trace: Trace
    entries: list[Entry] = field(default_factory=list)  # the trace's entries + the feed-forward's inner two
    target_ids: list[int] | None = None  # seq2seq: the decoder input after <sos>


class Session:
    """The explorer's state: one model, the traces computed so far; ``call(name, params)`` answers the API."""

    def __init__(self, model: Model, other: Model | None = None, tag: str = "t", target_cap: int | None = None) -> None:
        self.m = model
        self.tag = tag  # the first letter of this session's trace ids
        self.other = Session(other, tag="b") if other is not None else None  # --compare: the second checkpoint
        self.max_tokens = model.max_tokens
        # seq2seq: the most tokens of the greedy translation a trace without ``target`` feeds the decoder (an export
        # sets it: an untrained model's translation runs to the context, and the trace's tensors grow with it)
        self.target_cap = self.max_tokens - 1 if target_cap is None else min(target_cap, self.max_tokens - 1)
        self._traces: OrderedDict[str, _Traced] = OrderedDict()
        self._inputs: dict[str, dict] = {}  # trace_id → its inputs, to recompute a trace the LRU dropped
        self._lock = threading.Lock()  # one model, hooks attached while tracing: one call at a time
        limit = min(s.max_tokens for s in (self, self.other) if s is not None)  # with --compare, both must fit
        self.default_text, self.nsp_texts = defaults.fit_texts(model, limit)
        self.default_text_b = self.nsp_texts[1] if self.nsp_texts is not None else None

    @classmethod
    def open(cls, directory: str | Path | None, compare: str | Path | None = None, precision: str = "auto") -> Session:
        """The model of ``directory`` (None: the toy), and with ``compare`` a second checkpoint of the same family
        and shape to compare it with (a ValueError naming both directories otherwise). ``precision``: the weights'
        (:mod:`tformer.fast.precision`; ``auto`` keeps the float32 the model was saved in)."""
        model = with_precision(load_model(directory), precision)
        other = with_precision(load_model(compare, "--compare"), precision) if compare is not None else None
        if other is not None:
            check_comparable(model, other)
        return cls(model, other)

    def call(self, name: str, params: dict) -> dict:
        """Answer ``POST /api/<name>`` with body ``params``; a bad request raises ValueError naming the field."""
        if name not in API_NAMES:
            raise ValueError(f"no API named {name!r}; there are {', '.join(API_NAMES)}")
        if not isinstance(params, dict):
            raise ValueError("the request body must be a JSON object")
        with self._lock, torch.no_grad():
            return getattr(self, name)(Params(params, name))

    # ------------------------------------------------------------------------------------------- info
    def info(self, p: Params) -> dict:
        p.done()
        m, c = self.m, self.m.config
        seq2seq = m.family == "seq2seq"
        layers = (
            {"encoder": c.n_encoder_layers, "decoder": c.n_decoder_layers}
            if seq2seq
            else {"decoder" if m.family == "gpt" else "encoder": c.n_layers}
        )
        return dict(
            family=m.family,
            name=m.name,
            source=m.source,
            precision=m.precision,
            config=c.to_dict(),
            layers=layers,
            heads=c.n_heads,
            d_model=c.d_model,
            vocab_size=len(m.tgt.vocab),
            max_tokens=self.max_tokens,
            max_tensor_values=MAX_TENSOR_VALUES,
            default_text=self.default_text or m.default_text,
            default_target=m.default_target,
            default_text_b=self.default_text_b,
            compare=(
                dict(name=self.other.m.name, source=self.other.m.source, family=self.other.m.family)
                if self.other is not None
                else None
            ),
            untrained={h: m.untrained_text(h) for h in m.untrained},  # the page shows why, not the heads' noise
            defaults=self.default_requests(),
        )

    def default_requests(self) -> dict[str, dict]:
        """The requests the page makes first (and an export answers): :func:`tformer.explore.defaults.requests`."""
        return defaults.requests(self.m, self.default_text, self.nsp_texts, self.other is not None)

    # ------------------------------------------------------------------------------------------ trace
    def encode(self, text: str, codec: Any, field_name: str = "text") -> tuple[list[int], list[str]]:
        return self.m.encode(text, codec, field_name)

    def check_length(self, n: int, field_name: str = "text") -> None:
        self.m.check_length(n, field_name)

    def trace(self, p: Params) -> dict:
        inputs = self._trace_inputs(p)
        p.done()
        return self._trace_answer(inputs)

    def _trace_inputs(self, p: Params, suffix: str = "", required: bool = True) -> dict:
        """The fields of a trace request (``text``, ``target``, ``text_b``; with ``suffix`` "2": ``text2``...)."""
        inputs = {"text": p.text("text" + suffix)} if required or p.has("text" + suffix) else {}
        if self.m.family == "seq2seq" and p.has("target" + suffix):
            inputs["target"] = p.text("target" + suffix, empty=True)
        if self.m.family == "bert" and p.has("text_b" + suffix):
            inputs["text_b"] = p.text("text_b" + suffix)
        return inputs

    def _trace_answer(self, inputs: dict) -> dict:
        trace_id = self.tag + hashlib.sha1(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
        traced = self._traced(trace_id, inputs)
        tr = traced.trace
        answer: dict[str, Any] = dict(trace_id=trace_id, tokens=tr.tokens, steps=self._steps(traced))
        if self.m.family == "bert":
            answer["token_type_ids"] = self._types(inputs)
        answer["top_k"] = [
            dict(position=t["position"], token=t["token"], candidates=[list(c) for c in t["candidates"]])
            for t in tr.top_k
            if "mlm_head" not in self.m.untrained  # a random head's guesses are not the model's predictions
        ]
        return answer

    def _traced(self, trace_id: str, inputs: dict) -> _Traced:
        if trace_id in self._traces:
            self._traces.move_to_end(trace_id)
            return self._traces[trace_id]
        traced = self._compute_trace(inputs)
        self._traces[trace_id] = traced
        self._inputs[trace_id] = inputs
        while len(self._traces) > TRACES_KEPT:
            self._traces.popitem(last=False)
        return traced

    def _bert_layout(self, inputs: dict) -> tuple[list[int], list[int]]:
        wp = self.m.tgt.tokenizer
        a = self.m.tgt.encode(inputs["text"])[0]
        limit = int(self.m.config.max_len)
        if "text_b" in inputs:
            b = self.m.tgt.encode(inputs["text_b"])[0]
            self.check_length(len(a) + len(b) + 3, "text + text_b")
            return wp.pair(a, b, limit)
        self.check_length(len(a) + 2, "text")
        return wp.single(a, limit)

    def _types(self, inputs: dict) -> list[int]:
        return self._bert_layout(inputs)[1]

    def _compute_trace(self, inputs: dict) -> _Traced:
        m, k = self.m, 5
        kwargs: dict[str, Any]
        if m.family == "seq2seq":
            src_ids, src_tokens = self.encode(inputs["text"], m.src)
            if "target_ids" in inputs:  # compare: the first model's decoder input, as ids
                tgt_ids = list(inputs["target_ids"])
            elif "target" in inputs:
                tgt_ids = m.tgt.encode(inputs["target"])[0]
            else:  # the greedy translation
                tgt_ids = decoding.greedy_ids(m, src_ids, self.target_cap)
            self.check_length(len(tgt_ids) + 1, "target")
            tgt_ids = [m.start_id] + tgt_ids
            tgt_tokens = [m.tgt.vocab[i] if i < len(m.tgt.vocab) else str(i) for i in tgt_ids]
            args: tuple = (src_ids, tgt_ids, src_tokens, tgt_tokens)
            kwargs = dict(vocab=m.tgt.vocab, k=k)
        elif m.family == "gpt":
            ids, tokens = self.encode(inputs["text"], m.tgt)
            args, kwargs = (ids, tokens), dict(vocab=m.tgt.vocab, k=k)
        else:
            ids, types = self._bert_layout(inputs)
            args = (ids, [m.tgt.vocab[i] for i in ids], types)
            kwargs = dict(vocab=m.tgt.vocab, k=k)
        with hooks.capture(m.model, lambda name: name.endswith(_FFN_INSIDE)) as captured:
            tr = trace(m.model, *args, **kwargs)
        inner = _feed_forward_inside(m.model, captured)
        entries: list[Entry] = []
        for e in tr.entries:
            if e.stage == "ffn":  # the feed-forward's inner two go just before its output
                entries += [replace(x, block=e.block, layer=e.layer, rows=e.rows) for x in inner.get(e.where, [])]
            entries.append(e)
        return _Traced(tr, entries, tgt_ids[1:] if m.family == "seq2seq" else None)

    def _steps(self, traced: _Traced) -> list[dict]:
        activation = str(self.m.config.activation)
        random = self.m.untrained.get("mlm_head")  # a BERT without its MLM head: its logits are noise, said so
        out = []
        for i, e in enumerate(traced.entries):
            lo, hi = value_range(e.tensor)
            said = formula(e.stage, e.block, e.kind, e.note, activation)
            if random and e.stage in ("logits", "probs"):
                said += f" (untrained: {random}; these are a random head's numbers)"
            out.append(
                dict(
                    id=i,
                    stage=e.stage,
                    block=e.block,
                    layer=e.layer,
                    kind=e.kind,
                    where=e.where,
                    dims=list(e.dims),
                    shape=list(e.tensor.shape),
                    formula=said,
                    note=e.note,
                    min=lo,
                    max=hi,
                )
            )
        return out

    def _entries(self, trace_id: str, field_name: str) -> list[Entry]:
        """The entries of ``trace_id``, of either model (recomputed if the LRU dropped them)."""
        for s in (self, self.other):
            if s is not None and trace_id in s._inputs:
                return s._traced(trace_id, s._inputs[trace_id]).entries
        raise ValueError(f"{field_name} {trace_id!r} is unknown: ask for the trace first")

    def _pick(self, e: Entry, i: int, p: Params) -> tuple[torch.Tensor, list[str], Any]:
        """Batch 0 of step ``i``'s tensor, then head ``head`` and row ``row`` when asked: (tensor, dims, rows)."""
        t, dims = e.tensor[0] if e.dims[0] == "B" else e.tensor, list(e.dims[1:] if e.dims[0] == "B" else e.dims)
        rows = e.rows
        if p.has("head"):
            if "H" not in dims:
                raise ValueError(f"head: step {i} ({e.stage}) has no head dimension; its dims are {dims}")
            t = t.select(dims.index("H"), p.integer("head", lo=0, hi=t.shape[dims.index("H")] - 1))
            dims.remove("H")
        if p.has("row"):
            if t.dim() < 2:
                raise ValueError(f"row: step {i} ({e.stage}) is one-dimensional; ask without row")
            r = p.integer("row", lo=0, hi=t.shape[-2] - 1)
            t, dims, rows = t[..., r, :], dims[:-2] + dims[-1:], [rows[r]] if rows and r < len(rows) else None
        p.done()
        if t.numel() > MAX_TENSOR_VALUES:
            raise ValueError(
                f"step {i} ({e.stage}) has {t.numel()} values, over the {MAX_TENSOR_VALUES} one answer holds: "
                "ask one row at a time (row: N)"
            )
        return t, dims, rows

    def tensor(self, p: Params) -> dict:
        entries = self._entries(p.string("trace_id"), "trace_id")
        i = p.integer("id", lo=0, hi=len(entries) - 1)
        e = entries[i]
        t, dims, rows = self._pick(e, i, p)
        lo, hi = value_range(t)
        return dict(shape=list(t.shape), dims=dims, rows=rows, cols=e.cols, values=jsonable_tensor(t), min=lo, max=hi)

    # ---------------------------------------------------------------------------------------- compare
    def compare(self, p: Params) -> dict:
        other = p.choice("other", ("input", "model"))
        inputs = self._trace_inputs(p)
        if other == "input":
            if not p.has("text2"):
                raise ValueError("compare: text2 is required to compare two inputs (other: input)")
            inputs_b, session_b = self._trace_inputs(p, "2"), self
        else:
            given = [k for k in ("text2", "target2", "text_b2") if p.has(k)]
            if given:
                raise ValueError(f"compare: {given[0]} is for other 'input'; other 'model' traces the same input")
            if self.other is None:
                raise ValueError("compare: other 'model' needs a second checkpoint: start with --compare DIR2")
            inputs_b, session_b = dict(inputs), self.other
        p.done()
        a = self._trace_answer(inputs)
        if other == "model" and self.m.family == "seq2seq" and "target" not in inputs:
            inputs_b["target_ids"] = self._entries_traced(a["trace_id"]).target_ids  # the first model's greedy
        b = session_b._trace_answer(inputs_b)
        ea, eb = self._entries(a["trace_id"], "trace_a"), self._entries(b["trace_id"], "trace_b")
        diff = []
        for sa, x, y in zip(a["steps"], ea, eb):
            same = x.tensor.shape == y.tensor.shape
            d = difference(x.tensor, y.tensor).abs() if same else None
            diff.append(
                dict(
                    id=sa["id"],
                    stage=sa["stage"],
                    block=sa["block"],
                    layer=sa["layer"],
                    kind=sa["kind"],
                    where=sa["where"],
                    dims=sa["dims"],
                    shape_a=list(x.tensor.shape),
                    shape_b=list(y.tensor.shape),
                    max_abs_diff=number(d.max()) if d is not None and d.numel() else None,
                    mean_abs_diff=number(d.mean()) if d is not None and d.numel() else None,
                )
            )
        return dict(other=other, a=a, b=b, diff=diff)

    def _entries_traced(self, trace_id: str) -> _Traced:
        return self._traced(trace_id, self._inputs[trace_id])

    def tensor_diff(self, p: Params) -> dict:
        ea, eb = self._entries(p.string("trace_a"), "trace_a"), self._entries(p.string("trace_b"), "trace_b")
        if len(ea) != len(eb):
            raise ValueError(f"tensor_diff: trace_a has {len(ea)} steps and trace_b {len(eb)}: not one model's")
        i = p.integer("id", lo=0, hi=len(ea) - 1)
        x, y = ea[i], eb[i]
        if x.tensor.shape != y.tensor.shape:
            raise ValueError(
                f"tensor_diff: step {i} ({x.stage}) has shape {list(x.tensor.shape)} in trace_a and "
                f"{list(y.tensor.shape)} in trace_b"
            )
        d = replace(x, tensor=difference(x.tensor, y.tensor))
        t, dims, rows = self._pick(d, i, p)
        lo, hi = value_range(t)
        return dict(
            shape=list(t.shape),
            dims=dims,
            rows=rows,
            cols=x.cols,
            values=jsonable_tensor(t),
            min=lo,
            max=hi,
            max_abs_diff=number(t.abs().max()) if t.numel() else None,
        )

    # --------------------------------------------------------------------------------------- decoding
    def decode(self, p: Params) -> dict:
        return decoding.decode(self.m, p)

    def sample(self, p: Params) -> dict:
        return decoding.sample(self.m, p)

    # ------------------------------------------------------------------------------------------- BERT
    def _need(self, family: str, what: str, head: str | None = None) -> None:
        if self.m.family != family:
            raise ValueError(f"{what} needs a {family} model; this one is {self.m.family}")
        if head in self.m.untrained:  # a random head's answer would be shown as the model's
            raise ValueError(f"{what}: {self.m.untrained_text(head)}")

    def fill_mask(self, p: Params) -> dict:
        from tformer.bert import fill_mask

        self._need("bert", "fill_mask", "mlm_head")
        text, top_k = p.text("text"), p.integer("top_k", 5, lo=1, hi=50)
        p.done()
        ids, _ = self._bert_layout({"text": text})
        wp = self.m.tgt.tokenizer
        positions = [i for i, t in enumerate(ids) if t == wp.mask_id]
        masks = fill_mask(self.m.model, wp, text, top_k)  # what `tformer fill-mask` prints
        return dict(
            tokens=[self.m.tgt.vocab[i] for i in ids],
            masks=[dict(position=pos, candidates=[list(c) for c in cands]) for pos, cands in zip(positions, masks)],
        )

    def nsp(self, p: Params) -> dict:
        self._need("bert", "nsp", "nsp_head")
        inputs = {"text": p.text("text"), "text_b": p.text("text_b")}
        p.done()
        ids, types = self._bert_layout(inputs)
        _, nsp = self.m.model.pretraining_logits(torch.tensor([ids]), token_type_ids=torch.tensor([types]))  # (1, 2)
        return dict(
            tokens=[self.m.tgt.vocab[i] for i in ids],
            token_type_ids=types,
            is_next_prob=float(nsp.float().softmax(-1)[0, 0]),  # class 0 = "B follows A"
        )


_FFN_INSIDE = (".hook_hidden", ".hook_activation")


def _feed_forward_inside(model: Any, captured: dict[str, torch.Tensor]) -> dict[str, list[Entry]]:
    """The feed-forwards' values before (W₁'s output) and after (W₂'s input) the activation, captured in the trace's
    own pass, as entries keyed by the feed-forward's module path. A gated one (SwiGLU, GeGLU; the trace has its gate
    and up projections already) gives W_down's input, act(gate) ⊙ up."""
    out: dict[str, list[Entry]] = {}
    for name, t in captured.items():
        where, _, point = name.rpartition(".")
        m = model.get_submodule(where)
        if isinstance(m, FeedForward):
            stage, note = ("ffn_hidden" if point == "hook_hidden" else "ffn_activation"), ""
        elif isinstance(m, GatedFeedForward) and point == "hook_activation":
            stage, note = "ffn_gated", m.kind
        else:
            continue
        out.setdefault(where, []).append(Entry(stage, t, ("B", "T", "F"), where=where, note=note))
    return out
