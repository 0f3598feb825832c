"""What the explorer shows first: the model's default text (and BERT's sentence pair) cut to fit its context, and
the requests the page makes before anyone types (an export answers exactly these)."""

from __future__ import annotations

from collections.abc import Callable

from tformer.explore import decoding
from tformer.explore.model import Model

__all__ = ["fit_texts", "requests"]


def fit_texts(m: Model, limit: int) -> tuple[str | None, tuple[str, str] | None]:
    """The model's default text, and BERT's sentence pair for NSP, shortened to at most ``limit`` tokens (the
    smaller context when two models are compared); a GPT's text leaves room for one new token at least. None where
    nothing fits."""
    if m.family == "seq2seq":
        return _fit(m.default_text, lambda t: len(m.src.encode(t)[0]), limit), None
    count = lambda t: len(m.tgt.encode(t)[0])  # noqa: E731
    if m.family == "gpt":
        text = _fit(m.default_text, count, min(limit, int(m.config.max_len) - 1))
        return text or _fit(m.default_text, count, limit), None
    text = _fit(m.default_text, lambda t: count(t) + 2, limit, keep_end=True)  # [CLS] text [SEP]
    if text is None or m.default_text_b is None:
        return text, None
    budget = limit - 3  # [CLS] A [SEP] B [SEP]
    for a_limit in (budget - 1, budget // 2):  # A whole if B still fits a word, else each half the room
        a = _fit(text.replace("[MASK]", "mat"), count, a_limit, keep_end=True)
        b = _fit(m.default_text_b, count, budget - count(a)) if a is not None else None
        if a is not None and b is not None:
            return text, (a, b)
    return text, None


def requests(m: Model, text: str | None, nsp: tuple[str, str] | None, comparing: bool) -> dict[str, dict]:
    """The page's first requests, name → params, each within the model's context (``text`` and ``nsp`` from
    :func:`fit_texts`); a request no text fits is left out."""
    if text is None:  # not even one word fits the context
        return {}
    out: dict[str, dict] = {"trace": {"text": text}}
    room = int(m.config.max_len) - len(m.tgt.encode(text)[0]) if m.family == "gpt" else 0  # tokens to generate
    if m.family == "seq2seq" or room > 0:
        out["decode"] = {"text": text, "mode": "greedy"}
    if m.family == "seq2seq":
        out["beam"] = {"text": text, "mode": "beam", "beam_size": 4}
    if room > 0:
        top_k = min(50, len(m.tgt.vocab))  # a small vocabulary (a character GPT) has fewer than 50
        steps = min(20, decoding.MAX_STEPS, room)
        out["sample"] = {"text": text, "temperature": 0.8, "top_k": top_k, "top_p": 0.95, "seed": 0, "steps": steps}
    if m.family == "bert" and "[MASK]" in text and "mlm_head" not in m.untrained:  # a random head's: not asked
        out["fill_mask"] = {"text": text, "top_k": 5}
    if nsp is not None and "nsp_head" not in m.untrained:
        out["nsp"] = {"text": nsp[0], "text_b": nsp[1]}
    if comparing:
        out["compare"] = {"text": text, "other": "model"}
    return out


def _fit(text: str, count: Callable[[str], int], limit: int, keep_end: bool = False) -> str | None:
    """``text``, or the longest part of it that ``count`` makes at most ``limit`` tokens: its first words (with
    ``keep_end``, its last: BERT's default keeps its [MASK]), then one word's first characters; None if not even
    one character fits."""
    words = text.split()
    if keep_end:
        words = words[::-1]
    parts = [words[:n] for n in range(len(words), 0, -1)]
    candidates = [" ".join(part[::-1] if keep_end else part) for part in parts]
    candidates += [words[0][:k] for k in range(len(words[0]) - 1, 0, -1)] if words else []
    return next((c for c in candidates if count(c) <= limit), None)
