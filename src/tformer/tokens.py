"""The special tokens of every tokenizer kind: one layout each, defined here and nowhere else.

    family          tokenizer kind (module in tokenizers/)        specials (id)
    translation     bpe (bpe.py)                                  <pad> 0, <unk> 1, <sos> 2, <eos> 3
    language model  char (char.py) or byte_bpe (bpe.py)           <unk> 0, <pad> 1, <|endoftext|> 2
    BERT            wordpiece trained here (wordpiece.py)         [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4
    BERT            wordpiece, the uncased BERT vocabulary        [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103
                                                                  (looked up by name, never hard-coded)

Every tokenizer answers to the same names whatever its layout (``pad_id``, ``unk_id``, ``bos_id``, ``eos_id``,
``mask_id``, ``cls_id``, ``sep_id``: :mod:`tformer.tokenizers.base`), so ``<pad>`` being 1 in the language model
and 0 elsewhere never has to be remembered; the ids themselves never move, so every saved run loads the same.

How they are used:

* translation: the encoder reads the bare source ids; the decoder reads ``<sos>`` + target and is trained
  to predict target + ``<eos>``; decoding stops at ``<eos>``; ``<pad>`` fills batches and carries no loss;
* language model: documents are joined with ``<|endoftext|>`` into one stream; ``<pad>`` marks positions
  with no label (ignored by the loss) and is dropped when decoding;
* BERT: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``; bracketed tokens are never picked by MLM nor drawn
  as random replacements. Since a downloaded vocabulary puts them elsewhere, BERT code looks the ids up by
  name (``tokenizer.pad_id`` etc.).

This module sits in the lowest layer so that every package that needs an id (the tokenizers, the
families, ``inspection.tracing``) reads it from here; it knows nothing about tokenizers or models.
"""

from __future__ import annotations

__all__ = [
    "TRANSLATION_SPECIALS",
    "TRANSLATION_PAD",
    "TRANSLATION_UNK",
    "TRANSLATION_SOS",
    "TRANSLATION_EOS",
    "LM_SPECIALS",
    "LM_UNK",
    "LM_PAD",
    "LM_EOT",
    "BERT_SPECIALS",
]

# translation BPE: the position in the list is the id
TRANSLATION_SPECIALS = ["<pad>", "<unk>", "<sos>", "<eos>"]
TRANSLATION_PAD, TRANSLATION_UNK, TRANSLATION_SOS, TRANSLATION_EOS = range(4)

# language model (characters or byte-level BPE): the position in the list is the id
LM_SPECIALS = ["<unk>", "<pad>", "<|endoftext|>"]
LM_UNK, LM_PAD, LM_EOT = range(3)

# BERT WordPiece: names only; ours puts them first in this order, the uncased BERT vocabulary elsewhere
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
