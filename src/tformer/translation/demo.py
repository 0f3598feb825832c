"""What ``tformer demo`` shows after training: a few example sentences and a cross-attention heatmap.

Dimension legend: H heads, T target tokens, S source tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tformer.generation import translate_ids
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_SOS as SOS
from tformer.translation.translator import Translator

__all__ = ["EXAMPLES", "HEATMAP", "cross_attention_png"]

HEATMAP = "cross_attention.png"  # written by the demo into its run directory
EXAMPLES = ["I am good.", "She is tired.", "We do not eat bread today.", "Do you like coffee?", "They have a dog."]


def cross_attention_png(translator: Translator, sentence: str, path: str | Path) -> Path:
    """Heatmap of the last decoder layer's cross-attention (averaged over heads) for one translation."""
    from tformer.inspection.plots import DPI, plot_attention
    from tformer.outputs import write_figure

    src = translator.encode_sources([sentence])
    max_len = translator.model.config.max_len - 1
    hyp_ids = translate_ids(translator.model, src, SOS, EOS, max_len=min(max_len, 40))[0]
    tgt = torch.tensor([[SOS] + hyp_ids])
    with torch.no_grad():
        _, weights = translator.model(src, tgt, return_attention=True)
    last = f"decoder.layers.{translator.model.config.n_decoder_layers - 1}.cross_attn"

    def label(tokenizer, i):
        return tokenizer.id_to_token(i).replace("\u2581", "") or "\u2581"  # "▁" marks a word start

    src_tokens = [label(translator.src_tokenizer, i) for i in src[0].tolist()]
    tgt_tokens = ["<sos>"] + [label(translator.tgt_tokenizer, i) for i in hyp_ids]
    fig = plot_attention(
        weights[last][0].mean(0),  # (H, T, S) -> (T, S)
        src_tokens,
        tgt_tokens,
        title=f"cross-attention, last decoder layer (mean over heads): {sentence}",
    )
    return write_figure(fig, path, DPI)  # the run's own picture, beside its log (no user's path to check)
