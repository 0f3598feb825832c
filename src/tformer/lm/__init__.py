"""Language modelling end to end: text → tokenizer → random blocks → training → perplexity → samples.

* :mod:`.tokenizer` — characters or byte-level BPE, one special-token layout (:mod:`tformer.tokens`);
* :mod:`.data` — documents (a text file, a folder of ``.txt`` files, JSONL) → one stream of ids → blocks;
* :mod:`.task` — :class:`LMTask` (what the Trainer trains) and :func:`evaluate_stream` (loss, perplexity,
  bits per character or byte);
* :mod:`.stream` — :class:`TextStream`, printing a generation as it comes;
* :mod:`.recipes` — the CPU-tuned recipes and the flags > recipe > defaults resolution;
* :mod:`.run` — the entry points :func:`train`, :func:`load`, :func:`generate`, :func:`evaluate`;
* :mod:`.hf_tokenizer` — a Hugging Face model directory's tokenizer (:class:`HFTokenizer`), its model read as a GPT
  by :mod:`tformer.hf.directory`, both without ``transformers``: :func:`load` takes either kind of directory.

This package knows the decoder-only model (:class:`~tformer.models.gpt.GPT`), the Trainer and the
generation loop; it knows nothing about translation, BERT or the command line.
"""

from tformer.hf import is_hf_dir, load_hf_model
from tformer.lm.data import blocks, encode_documents, read_documents, split_ids
from tformer.lm.hf_tokenizer import HFTokenizer
from tformer.lm.recipes import DEFAULTS, RECIPES, resolve
from tformer.lm.run import evaluate, generate, load, setup, train
from tformer.lm.stream import TextStream
from tformer.lm.task import LMTask, evaluate_stream
from tformer.lm.tokenizer import (
    EOT,
    PAD,
    SPECIALS,
    UNK,
    ByteBPETokenizer,
    CharTokenizer,
    load_lm_tokenizer,
    train_lm_tokenizer,
)

__all__ = [
    "SPECIALS",
    "UNK",
    "PAD",
    "EOT",
    "CharTokenizer",
    "ByteBPETokenizer",
    "train_lm_tokenizer",
    "load_lm_tokenizer",
    "HFTokenizer",
    "is_hf_dir",
    "load_hf_model",
    "read_documents",
    "encode_documents",
    "split_ids",
    "blocks",
    "LMTask",
    "evaluate_stream",
    "TextStream",
    "RECIPES",
    "DEFAULTS",
    "resolve",
    "setup",
    "train",
    "load",
    "generate",
    "evaluate",
]
