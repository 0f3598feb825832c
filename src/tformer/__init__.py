"""tformer — the Transformer from its parts, readable and exact.

>>> import tformer
>>> model = tformer.Seq2SeqTransformer(tformer.Seq2SeqConfig.preset("tiny", src_vocab_size=100, tgt_vocab_size=100))
"""

__version__ = "0.2.0"

from tformer.models import GPT, Bert, BertConfig, GPTConfig, ModelConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.models.checkpoint import load_pretrained
from tformer.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from tformer.nn.cache import KVCache
from tformer.nn.layers import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, FeedForward, LayerConfig
from tformer.nn.recorder import Recorder

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
    "ModelConfig",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
    "GPTConfig",
    "GPT",
    "BertConfig",
    "Bert",
]
