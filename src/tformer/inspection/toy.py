"""The notes' own toy model: a d_model = 4 translator of "I am good ." -> "Je vais bien", trained in a second.

``tformer trace`` with no ``--model`` opens it, so a learner can follow the notes' walk-through number by number.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from tformer.inspection.tracing import Trace, trace_seq2seq
from tformer.models import Seq2SeqConfig, Seq2SeqTransformer

__all__ = ["Toy", "toy_seq2seq"]


@dataclass
class Toy:
    """The notes' teaching example: a d_model = 4 translator of "I am good ." → "Je vais bien"."""

    model: nn.Module
    src_vocab: list[str]
    tgt_vocab: list[str]
    src_tokens: list[str]
    tgt_tokens: list[str]  # decoder input: <sos> + target

    def ids(self, tokens: list[str], vocab: list[str]) -> list[int]:
        return [vocab.index(t) for t in tokens]

    def trace(self, k: int = 3, max_new_tokens: int = 5) -> Trace:
        return trace_seq2seq(
            self.model,
            self.ids(self.src_tokens, self.src_vocab),
            self.ids(self.tgt_tokens, self.tgt_vocab),
            self.src_tokens,
            self.tgt_tokens,
            self.tgt_vocab,
            k,
            max_new_tokens,
        )


_SPECIALS = ["<pad>", "<unk>", "<sos>", "<eos>"]
_TOY_TEXT = dict(
    src_vocab=_SPECIALS + ["I", "am", "good", "."],
    tgt_vocab=_SPECIALS + ["Je", "vais", "bien"],
    src_tokens=["I", "am", "good", "."],
    tgt_tokens=["<sos>", "Je", "vais", "bien"],
)


def toy_seq2seq(n_heads: int = 2, train_steps: int = 60, seed: int = 0) -> Toy:
    """A 1-layer, d_model = 4 seq2seq model overfit on the one pair, with a fixed seed (global RNG untouched)."""
    config = Seq2SeqConfig(
        src_vocab_size=8,
        tgt_vocab_size=7,
        d_model=4,
        n_heads=n_heads,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=16,
        dropout=0.0,
        max_len=16,
    )
    toy = Toy(Seq2SeqTransformer(config), **{k: list(v) for k, v in _TOY_TEXT.items()})
    toy.model.load_state_dict(_toy_weights(config, train_steps, seed))
    toy.model.eval()
    return toy


@functools.lru_cache(maxsize=4)
def _toy_weights(config, train_steps: int, seed: int) -> dict[str, torch.Tensor]:
    """Teacher forcing on the one pair: input <sos> Je vais bien, labels Je vais bien <eos> (cached per process)."""
    t = _TOY_TEXT
    src = torch.tensor([[t["src_vocab"].index(w) for w in t["src_tokens"]]])  # (1, S)
    tgt = torch.tensor([[t["tgt_vocab"].index(w) for w in t["tgt_tokens"] + ["<eos>"]]])  # (1, T + 1)
    with torch.random.fork_rng(devices=[]), torch.enable_grad():  # it trains even where the caller turned gradients off
        torch.manual_seed(seed)
        model = Seq2SeqTransformer(config)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(train_steps):
            logits = model(src, tgt[:, :-1])  # (1, T, V)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return {name: p.detach().clone() for name, p in model.state_dict().items()}
