"""tformer — the Transformer from its parts, readable and exact.

>>> import tformer
>>> model = tformer.Seq2SeqTransformer(tformer.Seq2SeqConfig.preset("tiny", src_vocab_size=100, tgt_vocab_size=100))

``tformer.load(DIR)`` reads any run, model or Hugging Face directory of any family, with its tokenizer
(:mod:`tformer.loader`). ``tformer.quantize(model, "int8")`` makes a model's linear layers int8 for inference, and
``tformer.dequantize(model)`` undoes it (:mod:`tformer.fast.quantize`). ``tformer.inspection.trace(model, ids)``
records every intermediate tensor of one forward pass (:mod:`tformer.inspection`).
"""

__version__ = "0.2.0"

from tformer import inspection
from tformer.fast.quantize import dequantize, quantize
from tformer.hf import from_hf
from tformer.loader import Loaded, detect, load
from tformer.models import GPT, Bert, BertConfig, GPTConfig, ModelConfig, Seq2SeqConfig, Seq2SeqTransformer
from tformer.models.checkpoint import load_pretrained
from tformer.nn import hooks
from tformer.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from tformer.nn.cache import KVCache
from tformer.nn.feedforward import FeedForward
from tformer.nn.from_torch import from_torch
from tformer.nn.layers import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, LayerConfig

__all__ = [
    "__version__",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
    "KVCache",
    "hooks",
    "inspection",
    "load",
    "detect",
    "Loaded",
    "load_pretrained",
    "from_hf",
    "from_torch",
    "quantize",
    "dequantize",
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

# The families and the other subpackages, imported when first named (``tformer.translation.train(...)`` after a plain
# ``import tformer``, as ``torch.distributions`` is), so that ``import tformer`` stays as light as it is
_SUBPACKAGES = ("translation", "lm", "bert", "generation", "training", "data", "tokenizers", "fast", "serve", "explore")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"tformer.{name}")
    raise AttributeError(f"module 'tformer' has no attribute {name!r}")
