"""Language modelling end to end: text → tokenizer → random blocks → training → perplexity → samples.

* its tokenizers are :mod:`tformer.tokenizers`' ``char`` and ``byte_bpe`` kinds (or a Hugging Face directory's
  ``hf``), their special tokens those of :mod:`tformer.tokens`;
* :mod:`.data` — documents (a text file, a folder of ``.txt`` files, JSONL) → one stream of ids → blocks;
* :mod:`.task` — :class:`LMTask` (what the Trainer trains) and :func:`evaluate_stream` (loss, perplexity,
  bits per character or byte);
* :mod:`.stream` — :class:`TextStream`, printing a generation as it comes;
* :mod:`.chat` — :func:`reply` (the model's turn in a conversation laid out by its chat template) and
  :func:`chat_prompt_ids` (the conversation's ids, the oldest turns dropped to fit the context);
* :mod:`.recipes` — the CPU-tuned recipes and the flags > recipe > defaults resolution;
* :mod:`.run` — the entry points :func:`train`, :func:`load`, :func:`generate`, :func:`evaluate`;
* a Hugging Face model directory (config.json, safetensors, tokenizer.json) is read as a GPT by
  :mod:`tformer.hf.directory` and its :class:`~tformer.tokenizers.HFTokenizer`, without ``transformers``:
  :func:`load` takes either kind of directory.

This package knows the decoder-only model (:class:`~tformer.models.gpt.GPT`), the Trainer and the
generation loop; it knows nothing about translation, BERT or the command line.
"""

from tformer.hf import is_hf_dir, load_hf_model
from tformer.lm.chat import ChatReply, chat_prompt_ids, reply
from tformer.lm.data import blocks, encode_documents, read_documents, split_ids
from tformer.lm.recipes import DEFAULTS, RECIPES, resolve
from tformer.lm.run import evaluate, generate, load, prepare, setup, train
from tformer.lm.stream import TextStream
from tformer.lm.task import LMTask, evaluate_stream

__all__ = [
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
    "prepare",
    "train",
    "load",
    "generate",
    "evaluate",
    "ChatReply",
    "chat_prompt_ids",
    "reply",
]
