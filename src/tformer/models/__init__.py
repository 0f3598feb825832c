"""The three model families."""

from .bert import Bert, BertConfig
from .gpt import GPT, GPTConfig
from .seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer", "GPTConfig", "GPT", "BertConfig", "Bert"]
