"""One sentence per traced stage: the formula as the course notes write it, for the explorer's forward path.

The sentence says what the step computes; the numbers come from the trace (:func:`tformer.inspection.trace`), never
from these strings.

Dimension legend: none (strings only).
"""

from __future__ import annotations

import re

__all__ = ["formula"]

_FIXED = {
    "tokens": "text → pieces → ids: each piece's row number in the vocabulary",
    "segment": "segment embedding S[type id]: 0 for sentence A, 1 for sentence B",
    "q": "Q = x·W_Q, split into h heads of d_k = d_model / h columns",
    "qk": "Q·Kᵀ: the dot product of each query with each key, not yet scaled",
    "scores": "scores = Q·Kᵀ / √d_k",
    "masked_scores": "masked scores = scores where the mask is 1, −∞ where it is 0",
    "weights": "weights = softmax(masked scores) over keys; blocked keys get exactly 0",
    "context": "head_i = weights · V",
    "attn_output": "MultiHead(Q, K, V) = Concat(head_1, …, head_h)·W_O",
    "ffn_hidden": "h = x·W₁ + b₁ (before the activation)",
    "ffn_up": "up = x·W_up: the values the gate lets through",
    "ffn": "FFN(x) = activation(x·W₁ + b₁)·W₂ + b₂",
    "final_norm": "LayerNorm(x) = γ·(x − mean) / √(var + ε) + β, over d_model",
    "logits": "logits = x·W_outᵀ (+ b): one score per vocabulary entry",
    "probs": "probabilities = softmax(logits) over the vocabulary",
}

_MASKS = {
    ("encoder", "self"): "padding mask: 1 = a real token may be attended, 0 = <pad> is blocked",
    ("decoder", "self"): "causal (look-ahead) mask: position i may attend to positions ≤ i only (and no <pad>)",
    ("decoder", "cross"): "cross-attention mask: every decoder position may attend to every real source token",
}


def formula(stage: str, block: str, kind: str, note: str, activation: str = "") -> str:
    """The notes' sentence for one traced stage; ``note`` is the trace's own note (norm placement, scale)."""
    if stage == "ffn" and "⊙" in note:  # a gated feed-forward (SwiGLU, GeGLU): the trace's note says which
        act = "SiLU" if "SiLU" in note else "GELU"
        return f"FFN(x) = ({act}(x·W_gate) ⊙ x·W_up)·W_down"
    if stage == "ffn_gate":
        return f"gate = x·W_gate (before {'SiLU' if 'SiLU' in note else 'GELU'})"
    if stage == "ffn_gated":  # W_down's input; the session's note is the kind
        act = "SiLU" if note == "swiglu" else "GELU"
        return f"h = {act}(gate) ⊙ up: each hidden unit's value, scaled by its gate"
    scaled = "Q·Kᵀ / √d_k"
    if "the model's scale" in note:  # Gemma's query_pre_attn_scalar^-½ in place of 1/√d_k: the trace's note names it
        scaled = "Q·Kᵀ × s, s = " + note.split("× ", 1)[1].split(",", 1)[0] + " (the model's, not 1/√d_k)"
    if stage == "scores" and "soft-capped" in note:  # Gemma 2: the trace's note names c
        return f"scores = c·tanh(({scaled}) / c), c = " + note.rsplit("c = ", 1)[-1]
    if stage == "scores":
        return f"scores = {scaled}"
    x = next((f"{n}(x)" for n in ("RMSNorm", "LayerNorm") if f"= {n}(x)·W_" in note), "x")  # pre-LN: normed first
    turned = note.split("then its first ", 1)[1].split(" rotated", 1)[0] if "then its first " in note else ""
    rope = f", then its first {turned} rotated by RoPE" if turned else ", then rotated by RoPE"  # (partial: Pythia)
    after = " (then QK-norm)" * ("QK-norm" in note) + rope * ("RoPE" in note)
    if stage == "q" and "Dh = " in note:  # the head size, which is d_model / h unless the model says (Gemma)
        dh = note.split("Dh = ", 1)[1].split(",", 1)[0]
        return f"Q = {x}·W_Q, split into h heads of d_k = {dh} columns{after}"
    if stage == "final_norm" and "RMSNorm" in note:
        return "RMSNorm(x) = x / √(mean(x²) + ε) · γ, over d_model"
    if stage in _FIXED:
        return _FIXED[stage]
    if stage == "token_embedding":
        return "token embedding = E[id] × √d_model" if "×" in note else "token embedding = E[id] (a row per id)"
    if stage == "positional":
        if "halves" in note:  # Marian's layout: the sin columns, then the cos ones
            return "PE(pos, i) = sin(pos / 10000^(2i/d_model)), PE(pos, d_model/2 + i) = cos(pos / 10000^(2i/d_model))"
        if "Sinus" in note:
            return "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))"
        return "positional embedding P[pos]: a learned row per position"
    if stage == "embedding":
        return f"x = {note}"
    if stage in ("k", "v"):
        name = stage.upper()
        source = "memory (the encoder output)" if kind == "cross" else x
        return f"{name} = {source}·W_{name}, split into h heads of d_k columns" + (after if stage == "k" else "")
    if stage == "mask":
        return _MASKS.get((block, kind), "mask: 1 = may attend, 0 = blocked")
    if stage == "add_norm":
        norm = "RMSNorm" if "RMSNorm" in note else "LayerNorm"
        shifted = re.search(r"token_shift\(.*\), (\d+)\)", note)  # (tformer.inspection.collector's note)
        n = shifted.group(1) if shifted else ""

        def read(x: str) -> str:  # what the sub-layer reads: the norm, token-shifted (tformer.nn.shift) or not
            return f"token_shift({norm}({x}), {n})" if n else f"{norm}({x})"

        if note.startswith(f"x + {norm}(sublayer("):  # sandwich (Gemma 2/3)
            return f"x + Dropout({norm}(sublayer({read('x')}))) (a norm before and after the sub-layer)"
        if "the layer's input" in note:  # GPT-NeoX's parallel residual: the feed-forward reads what attention read
            inner = read("the layer's input")
            return f"x + Dropout(FFN({inner})), x = add_norm1's sum (parallel residual)"
        if note.startswith("x + sublayer("):  # pre-LN (GPT-2)
            return f"x + Dropout(sublayer({read('x')})) (pre-LN: the norm comes first)"
        return f"x + Dropout(sublayer(x)), then {norm}"
    if stage == "ffn_activation":
        return f"{activation or 'activation'}(h) = {_ACTIVATION_TEXT.get(activation, 'activation(h)')}"
    return note


_ACTIVATION_TEXT = {
    "relu": "max(0, h)",
    "gelu": "h·Φ(h)",
    "gelu_tanh": "0.5·h·(1 + tanh(√(2/π)·(h + 0.044715·h³)))",
    "silu": "h·sigmoid(h)",
    "relu2": "max(0, h)²",
}
