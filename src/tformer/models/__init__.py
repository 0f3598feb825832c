"""The three model families, pure ``nn.Module``s, and what they share.

* :mod:`.config` — :class:`ModelConfig`, the base of the three configs (validation, presets,
  ``replace``, the derived layer config, ``to_dict`` / ``from_dict`` with old field names mapped);
* :mod:`.seq2seq`, :mod:`.gpt`, :mod:`.bert` — the families, with the same field names for the same
  ideas and the same ``forward`` conventions (ids first, ``attention_mask`` (B, T) ``True`` = real
  token, keyword-only ``return_attention``, see :mod:`.attention_output`);
* :mod:`.checkpoint` — ``save_pretrained`` / ``from_pretrained`` / :func:`load_pretrained`.

The Hugging Face layouts of the three families, both ways, live a layer up in :mod:`tformer.hf`, which imports the
models (never the other way round).

The models know nothing of tracing, plotting, training or tokenizers: :func:`tformer.inspection.tracing.trace`
takes a model, the models never import :mod:`tformer.inspection`.
"""

from tformer.models.bert import Bert, BertConfig
from tformer.models.checkpoint import load_pretrained
from tformer.models.config import ModelConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = [
    "ModelConfig",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "GPTConfig",
    "GPT",
    "BertConfig",
    "Bert",
    "load_pretrained",
]
