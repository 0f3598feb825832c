"""What a trace's hook points mean: :class:`Entry` (one traced tensor, its stage, place and dimensions) and the
collector that turns the tensors one forward pass captured (:mod:`tformer.nn.hooks`) into entries in data-flow
order, each with its note: the formula that made it, in the words of the model that ran (its norm and where it
comes, its attention scale, RoPE, shared K/V heads). :mod:`tformer.inspection.tracing` runs the pass."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from tformer.nn.attention import MultiHeadAttention
from tformer.nn.feedforward import FeedForward, GatedFeedForward
from tformer.nn.layers import AddNorm, Decoder, Encoder
from tformer.nn.positional import InputEmbedding

__all__ = ["Entry", "Collector"]

# an attention's hook points, read together at its end
_ATTENTION = ("q", "k", "v", "mask", "raw_scores", "scores", "masked_scores", "weights", "context", "out")
BTD = ("B", "T", "D")


@dataclass
class Entry:
    """One traced tensor: which stage, where in the model, and what its dimensions mean."""

    stage: str  # one of STAGES
    tensor: torch.Tensor
    dims: tuple[str, ...]  # one name per dimension, e.g. ("B", "H", "Tq", "Tk")
    block: str = ""  # "encoder" | "decoder" | "output"
    layer: int | None = None  # layer index inside the block; None outside the layers
    where: str = ""  # module path, e.g. "decoder.layers.0.cross_attn"
    note: str = ""
    rows: list[str] | None = None  # labels along dims[-2] (tokens)
    cols: list[str] | None = None  # labels along dims[-1]

    @property
    def kind(self) -> str:
        """ "self" or "cross" for attention entries, "" otherwise."""
        tail = self.where.rsplit(".", 1)[-1]
        return {"self_attn": "self", "cross_attn": "cross"}.get(tail, "")


class Collector:
    """Turns the captured hook points (name → tensor, in the order they ran) into entries, in data-flow order."""

    def __init__(self, model: nn.Module, labels: dict[str, list[str]], vocab: list[str] | None) -> None:
        self.entries: list[Entry] = []
        self.labels, self.vocab = labels, vocab
        self.modules = dict(model.named_modules())
        config = getattr(model, "config", None)  # what the notes name: the model's activation, its positions
        self.activation = getattr(config, "activation", None) or "activation"
        self.rope = getattr(config, "positional", None) == "rope"
        rope_dim = getattr(config, "rope_dim", None)  # a partial rotary (Pythia): the first rope_dim dims turn
        self.turned = f"its first {rope_dim} of {getattr(config, 'head_dim', None)} dims " if rope_dim else ""
        self.embed_block = "decoder" if model.model_type == "gpt" else "encoder"

    def collect(self, captured: dict[str, torch.Tensor]) -> list[Entry]:
        for name, tensor in captured.items():
            owner, _, point = name.rpartition(".")
            self._entry(owner, point, tensor, captured)
        return self.entries

    def _entry(self, owner: str, point: str, t: torch.Tensor, captured: dict[str, torch.Tensor]) -> None:
        """The entry (if any) of hook point ``point`` of module ``owner``; an attention's, all at once at its end."""
        m = self.modules[owner]
        block, layer = self._locate(owner)

        def add(stage: str, t: torch.Tensor, dims: tuple[str, ...], where: str, note: str) -> None:
            self._add(stage, t, dims, block, layer, where, note)

        if owner == "":  # the model's own: the output head's logits
            if point == "hook_logits":
                head = self.modules.get("mlm_head")  # a BERT's: more than one Linear, said as it runs
                said = (
                    f"MLM head: dense → {self.activation} → LayerNorm → Linear (tied to the token embedding)"
                    if head
                    else ""
                )
                self._add("logits", t, ("B", "T", "V"), "output", None, "output", f"{said or 'output head'} → logits")
        elif isinstance(m, InputEmbedding):
            self._embedding(m, owner, point, t, add)
        elif isinstance(m, MultiHeadAttention) and point == "hook_out":
            self._attention(m, owner, block, layer, {p: captured.get(f"{owner}.hook_{p}") for p in _ATTENTION})
        elif isinstance(m, AddNorm) and point == ("hook_residual" if m.norm_first else "hook_norm"):
            norm = type(m.norm).__name__  # LayerNorm or RMSNorm
            read = f"{norm}(x)" if not m.shift else f"token_shift({norm}(x), {m.shift})"  # (tformer.nn.shift)
            formula = f"x + sublayer({read})" if m.norm_first else f"{norm}(x + sublayer(x))"
            if m.post_norm is not None:  # sandwich (Gemma 2/3): the sub-layer's output is normed too
                formula = f"x + {norm}(sublayer({read}))"
            parent = self.modules.get(owner.rsplit(".", 1)[0])
            if getattr(parent, "parallel", False) and owner.endswith("add_norm3"):  # GPT-NeoX's parallel residual
                inner = read.replace("(x)", "(the layer's input)")
                formula = f"x + sublayer({inner}), x = add_norm1's sum"
            add("add_norm", t, BTD, owner, f"{formula} [{self._sublayer(owner)}]")
        elif isinstance(m, FeedForward) and point == "hook_out":
            add("ffn", t, BTD, owner, f"Linear(D, F) → {self.activation} → Linear(F, D)")
        elif isinstance(m, GatedFeedForward):
            act = "SiLU" if m.kind == "swiglu" else "GELU"
            if point == "hook_gate":
                add("ffn_gate", t, ("B", "T", "F"), owner + ".gate_proj", f"gate = Linear(D, F), before {act}")
            elif point == "hook_up":
                add("ffn_up", t, ("B", "T", "F"), owner + ".up_proj", "up = Linear(D, F)")
            elif point == "hook_out":
                add("ffn", t, BTD, owner, f"{m.kind}: down({act}(gate) ⊙ up), Linear(F, D)")
        elif isinstance(m, (Encoder, Decoder)) and point == "hook_final_norm":
            add("final_norm", t, BTD, owner + ".norm", f"final {type(m.norm).__name__} of the stack")

    def _embedding(self, m: InputEmbedding, owner: str, point: str, t: torch.Tensor, add) -> None:
        if point == "hook_token":
            note = "token embedding lookup" + (f" × √D = × {m.scale:.4g}" if m.scale != 1.0 else "")
            add("token_embedding", t, BTD, owner + ".token", note)
        elif point == "hook_position":
            layout = " ([sin | cos] halves)" if getattr(m.position, "halves", False) else ""
            note = f"{type(m.position).__name__}{layout}, one row per position"
            add("positional", t, ("T", "D"), owner + ".position", note)
        elif point == "hook_segment":
            add("segment", t, BTD, owner + ".segment", "segment (token-type) embedding")
        elif point == "hook_out":
            extra = " + segment" * (m.segment is not None) + " → LayerNorm" * (m.norm is not None)
            position = "position" if m.position is not None else "no position (RoPE rotates q and k in self-attention)"
            add("embedding", t, BTD, owner, f"token + {position}{extra} → dropout")

    def _sublayer(self, owner: str) -> str:
        """``owner``'s name and the sub-layer it wraps: a GPT layer has no cross-attention, so no add_norm2."""
        parent, name = owner.rsplit(".", 1)
        layer = self.modules[parent]
        if name == "add_norm1":
            return f"{name}, after self-attention"
        if name == "add_norm2" and getattr(layer, "cross_attn", None) is not None:
            return f"{name}, after cross-attention"
        if name == "add_norm3" and getattr(layer, "cross_attn", "") is None:
            return f"{name}, after the feed-forward; no cross-attention here, so no add_norm2"
        return f"{name}, after the feed-forward"

    def _locate(self, name: str) -> tuple[str, int | None]:
        parts = name.split(".")
        blocks = {"encoder": "encoder", "src_embed": "encoder", "decoder": "decoder", "tgt_embed": "decoder"}
        layer = int(parts[parts.index("layers") + 1]) if "layers" in parts[:-1] else None
        return blocks.get(parts[0], self.embed_block if parts[0] == "embed" else "output"), layer

    def vocab_cols(self, n: int) -> list[str] | None:
        return self.vocab if self.vocab is not None and len(self.vocab) == n <= 64 else None

    def _add(self, stage, tensor, dims, block, layer, where, note="", rows=None, cols=None) -> None:
        if stage == "positional":
            rows = [f"pos {p}" for p in range(tensor.shape[0])]  # traces start at position 0 (no cache)
        elif rows is None and dims[-2] in ("T", "Tq"):
            rows = self.labels.get(block)
        cols = self.vocab_cols(tensor.shape[-1]) if stage == "logits" else cols
        self.entries.append(Entry(stage, tensor.detach(), dims, block, layer, where, note, rows, cols))

    def _attention(self, m: MultiHeadAttention, name: str, block: str, layer: int | None, r: dict) -> None:
        kind = "cross" if name.rsplit(".", 1)[-1] == "cross_attn" else "self"
        q_rows = self.labels.get(block)
        k_rows = self.labels.get("encoder") if kind == "cross" else q_rows
        b, _, tq, tk = r["scores"].shape
        mask = torch.ones(1, 1, tq, tk, dtype=torch.bool, device=r["scores"].device) if r["mask"] is None else r["mask"]
        mask = mask.expand(b, 1, tq, tk)[:, 0].int()  # (B, Tq, Tk) 1 = may attend
        k, v = (t.repeat_interleave(m.n_heads // m.n_kv_heads, dim=1) for t in (r["k"], r["v"]))  # (B, H, Tk, Dh)
        src = " from the encoder output" if kind == "cross" else ""
        group = m.n_heads // m.n_kv_heads  # query heads per key/value head (grouped-query attention)
        if group > 1:
            src += f" ({m.n_kv_heads} heads, each shared by {group} query heads: shown repeated)"
        normed = ", each head RMS-normed (QK-norm)" if m.q_norm is not None else ""
        x, rotated = self._attention_input(name, kind)
        own_k, own_v = (f" = {x}·W_K", f" = {x}·W_V") if kind == "self" else ("", "")  # cross: from the encoder
        q_note = f"queries Q = {x}·W_Q, split into {m.n_heads} heads of Dh = {m.head_dim}{normed}{rotated}"
        default = 1 / math.sqrt(m.head_dim)
        scaled = f"Q·Kᵀ / √Dh = Q·Kᵀ × {default:.4g}" if m.scale is None else f"Q·Kᵀ × {m.scale:.4g}, the model's"
        scaled += "" if m.scale is None else f" scale (not 1/√Dh = {default:.4g})"
        scores_note = scaled + (f", soft-capped: c·tanh(s / c), c = {m.softcap:g}" if m.softcap is not None else "")
        for stage, t, dims, note, rows, cols in (
            ("q", r["q"], ("B", "H", "Tq", "Dh"), q_note, q_rows, None),
            ("k", k, ("B", "H", "Tk", "Dh"), f"keys K{own_k}{normed}{rotated}{src}", k_rows, None),
            ("v", v, ("B", "H", "Tk", "Dh"), f"values V{own_v}{src}", k_rows, None),
            ("qk", r["raw_scores"], ("B", "H", "Tq", "Tk"), "Q·Kᵀ: one dot product per query and key", q_rows, k_rows),
            ("scores", r["scores"], ("B", "H", "Tq", "Tk"), scores_note, q_rows, k_rows),
            ("mask", mask, ("B", "Tq", "Tk"), "1 = may attend, 0 = blocked", q_rows, k_rows),
            ("masked_scores", r["masked_scores"], ("B", "H", "Tq", "Tk"), "blocked scores set to -inf", q_rows, k_rows),
            (
                "weights",
                r["weights"],
                ("B", "H", "Tq", "Tk"),
                "softmax over Tk; blocked entries are exactly 0",
                q_rows,
                k_rows,
            ),
            ("context", r["context"], ("B", "H", "Tq", "Dh"), "weights · V", q_rows, None),
            ("attn_output", r["out"], ("B", "Tq", "D"), "heads concatenated → W_O", q_rows, None),
        ):
            self._add(stage, t, dims, block, layer, name, note, rows, cols)

    def _attention_input(self, name: str, kind: str) -> tuple[str, str]:
        """What the attention ``name`` multiplies by W_Q (``x``, or ``RMSNorm(x)`` in a pre-LN layer: the norm comes
        first), and ", rotated by RoPE" where its Q and K are rotated by their positions (a RoPE model's
        self-attention): the Q and K traced are those the scores used."""
        parent = self.modules[name.rsplit(".", 1)[0]]
        add_norm = getattr(parent, "add_norm1" if kind == "self" else "add_norm2", None)
        x = f"{type(add_norm.norm).__name__}(x)" if isinstance(add_norm, AddNorm) and add_norm.norm_first else "x"
        return x, f", then {self.turned}rotated by RoPE (its position's angles)" if self.rope and kind == "self" else ""
