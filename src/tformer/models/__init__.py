"""The three model families."""

from tformer.models.bert import Bert, BertConfig
from tformer.models.gpt import GPT, GPTConfig
from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = ["Seq2SeqConfig", "Seq2SeqTransformer", "GPTConfig", "GPT", "BertConfig", "Bert"]
