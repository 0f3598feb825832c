"""Rendering a :class:`~tformer.inspection.tracing.Trace` as text: labelled grids for small tensors, summaries for large ones.

Values that are exactly zero print as ``0`` (a masked weight), −∞ as ``-inf`` (a blocked score). A token is printed
as ``tformer explore`` shows it (:func:`shown`): a space as ␣, a newline as ↵, a tab as ⇥, an empty token as ∅, so
that a character model's tokens are seen, and never break a line.

Dimension legend: H heads, Tq query length, Tk key length; each entry names its own dims.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

Entry = Any  # tformer.inspection.tracing.Entry (trace imports this module, so its classes are not imported back)
Trace = Any  # tformer.inspection.tracing.Trace

__all__ = ["format_trace", "summary", "shown"]


def shown(token: str) -> str:
    """A token as printed: whitespace made visible (the explorer's ``shown`` in static/js/format.js)."""
    return str(token).replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _fmt(x) -> str:
    if isinstance(x, int) or x == 0:
        return str(int(x))  # masked weights print as an exact "0"
    return ("-inf" if x < 0 else "inf") if math.isinf(x) else f"{x:.4f}"


def _grid(mat: torch.Tensor, rows: list[str] | None, cols: list[str] | None) -> list[str]:
    """A labelled (R, C) table of values."""
    values = [[_fmt(v) for v in row] for row in mat.tolist()]
    rows = rows if rows is not None and len(rows) == len(values) else [str(i) for i in range(len(values))]
    cols = cols if cols is not None and len(cols) == len(values[0]) else [str(j) for j in range(len(values[0]))]
    width = max(6, *(len(v) for row in values for v in row), *(len(c) for c in cols))
    lw = max(len(r) for r in rows)
    out = [" " * (lw + 5) + " ".join(c.rjust(width) for c in cols)]
    return out + ["    " + r.ljust(lw) + " " + " ".join(v.rjust(width) for v in vals) for r, vals in zip(rows, values)]


def summary(t: torch.Tensor) -> dict:
    """Mean, std, min, max over the finite values, and how many are ±inf (blocked scores)."""
    t = t.detach().double()
    finite = t[torch.isfinite(t)]
    stats = dict(shape=list(t.shape), n_inf=int((~torch.isfinite(t)).sum()))
    if finite.numel():
        stats.update(
            mean=finite.mean().item(),
            std=finite.std(unbiased=False).item(),
            min=finite.min().item(),
            max=finite.max().item(),
        )
    return stats


def _labels(e: Entry) -> tuple[list[str] | None, list[str] | None]:
    """An entry's row and column labels as printed: tokens :func:`shown` (a positional table's rows are positions)."""
    rows = e.rows if e.rows is None or e.stage == "positional" else list(map(shown, e.rows))
    return rows, None if e.cols is None else list(map(shown, e.cols))


def _render(e: Entry, head: int | None, max_full: int) -> list[str]:
    rows, cols = _labels(e)
    t = e.tensor if not e.tensor.is_floating_point() else e.tensor.float()
    h_axis = e.dims.index("H") if "H" in e.dims else None
    if head is not None and h_axis is not None:
        t = t.narrow(h_axis, head, 1)  # keep only that head
    if t.dim() == 1:
        t = t[None]
    names = e.dims[: t.dim() - 2]
    if t.numel() > max_full:
        s = summary(t)
        line = f"    mean {s.get('mean', 0):.4f}  std {s.get('std', 0):.4f}  min {s.get('min', 0):.4f}  max {s.get('max', 0):.4f}"
        first = t[(0,) * (t.dim() - 2)][:4, :6]  # (≤4, ≤6) corner of the first matrix
        corner = f"    corner [{', '.join(f'{n}=0' for n in names)}{', ' if names else ''}:4, :6]"
        return [line + (f"  ({s['n_inf']} entries are -inf)" if s["n_inf"] else ""), corner] + _grid(
            first, rows[:4] if rows else None, cols[:6] if cols else None
        )
    lines = []
    for idx in itertools.product(*map(range, t.shape[:-2])):
        if any(n > 1 for n in t.shape[:-2]) or (head is not None and h_axis is not None):
            shown = [head if (d == "H" and head is not None) else i for d, i in zip(names, idx)]
            lines.append("    [" + ", ".join(f"{d}={i}" for d, i in zip(names, shown)) + "]")
        lines += _grid(t[idx], rows, cols)
    return lines


def _most_attended(e: Entry, head: int | None) -> str:
    """Which source token each target token attends to most (one head, or the mean over heads)."""
    w = e.tensor[0].float()  # (H, Tq, Tk)
    w = w[head] if head is not None else w.mean(dim=0)  # (Tq, Tk)
    rows, cols = e.rows or list(map(str, range(w.shape[0]))), e.cols or list(map(str, range(w.shape[1])))
    pairs = ", ".join(f"{shown(rows[i])} → {shown(cols[j])}" for i, j in enumerate(w.argmax(dim=-1).tolist()))
    return f"most attended source token ({f'head {head}' if head is not None else 'mean over heads'}): {pairs}"


def format_trace(tr: Trace, entries: list[Entry], head, stages, layer, max_full: int) -> str:
    lines = [f"tformer trace · {tr.model_type}"] + [
        f"  {b} tokens: {' '.join(map(shown, t))}" for b, t in tr.tokens.items()
    ]
    for e in entries:
        place = (
            e.block + (f" layer {e.layer}" if e.layer is not None else "") + (f" {e.kind}-attention" if e.kind else "")
        )
        dims = ", ".join(f"{d}={n}" for d, n in zip(e.dims, e.tensor.shape))
        lines += ["", f"── {place} · {e.stage}  ({dims})  {e.note}"] + _render(e, head, max_full)
        if e.stage == "weights" and e.kind == "cross":
            lines.append("    " + _most_attended(e, head))
    if tr.top_k and layer is None and (stages is None or "top_k" in stages):
        lines += ["", "── predicted tokens, top-k: logits → softmax (position: input token → candidates)"]
        for item in tr.top_k:
            cands = ", ".join(f"{shown(tok)} {p:.4f}" for tok, _, p in item["candidates"])
            lines.append(f"    {item['position']}: {shown(item['token'])} → {cands}")
    if tr.steps and layer is None and (stages is None or "generation" in stages):
        lines += ["", "── greedy generation, one token per step with the KV cache"]
        for s in tr.steps:
            fed = " ".join(map(shown, s["fed"]))
            lines.append(f"    step {s['step']}: fed {fed} → {shown(s['token'])} (p={s['prob']:.4f})")
        lines.append("    generated: " + " ".join(shown(s["token"]) for s in tr.steps))
    return "\n".join(lines)
