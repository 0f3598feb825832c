"""tformer — the Transformer from its parts, readable and exact.

>>> import tformer
>>> model = tformer.Seq2SeqTransformer(tformer.Seq2SeqConfig.preset("tiny", src_vocab_size=100, tgt_vocab_size=100))
"""

__version__ = "0.1.0"

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .cache import KVCache
from .checkpoint import load_pretrained
from .inspect import Recorder
from .layers import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, FeedForward, LayerConfig
from .models import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer

__all__ = [
    "__version__",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
    "KVCache",
    "Recorder",
    "load_pretrained",
    "LayerConfig",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "EncoderDecoder",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "GPTConfig",
    "GPT",
    "BertConfig",
    "Bert",
]
