"""The model the explorer shows: any directory :func:`tformer.load` reads (every family, tformer's runs and model
directories, Hugging Face ones), or the toy.

Dimension legend: none (ids and strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tformer.explore.text_codecs import LMCodec, ToyCodec, TranslationCodec, WordPieceCodec
from tformer.fast import speed_up
from tformer.fast.precision import apply, choose
from tformer.inspection import toy_seq2seq
from tformer.tokenizers import WordPieceTokenizer
from tformer.tokens import TRANSLATION_EOS, TRANSLATION_SOS

__all__ = ["Model", "load_model", "MAX_TOKENS", "check_comparable", "with_precision"]

MAX_TOKENS = 1024  # an input is capped at the model's context and at this
DEFAULT_TEXT = {"seq2seq": "I am good.", "gpt": "To be, or not to be", "bert": "the cat sat on the [MASK]."}


@dataclass
class Model:
    """A loaded model and its codecs: ``src`` (seq2seq source) and ``tgt`` (the target, GPT or BERT text)."""

    family: str  # "seq2seq" | "gpt" | "bert"
    name: str
    source: str  # the directory, or "toy"
    model: Any  # a tformer Seq2SeqTransformer, GPT or Bert, in eval mode
    tgt: Any
    src: Any = None
    default_text: str = ""
    default_target: str | None = None
    default_text_b: str | None = None
    precision: str = "fp32"  # the weights the numbers come from (tformer.fast.precision; the page says it)
    start_id: int = TRANSLATION_SOS  # seq2seq: what the decoder starts from (a Marian's <pad>) and what ends it
    eos_id: int = TRANSLATION_EOS
    untrained: dict[str, str] = field(default_factory=dict)  # a BERT's heads that never trained -> why (refused)

    def untrained_text(self, head: str) -> str:
        """Why ``head`` (one of :attr:`untrained`) gives no answer: what the page and a refusal say."""
        return f"{self.untrained[head]}: its answers would be a random head's, so none is shown"

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def max_tokens(self) -> int:
        """The longest input accepted: the model's context, at most :data:`MAX_TOKENS`."""
        return min(int(self.config.max_len), MAX_TOKENS)

    def encode(self, text: str, codec: Any, field_name: str = "text") -> tuple[list[int], list[str]]:
        """``codec``'s ids and pieces of ``text``, checked to be some and at most :attr:`max_tokens`."""
        ids, tokens = codec.encode(text)
        if not ids:
            raise ValueError(f"{field_name} {text!r} gives no tokens")
        self.check_length(len(ids), field_name)
        return ids, tokens

    def check_length(self, n: int, field_name: str = "text") -> None:
        if n > self.max_tokens:
            raise ValueError(f"{field_name} has {n} tokens, at most {self.max_tokens}")


def load_model(directory: str | Path | None, flag: str = "--model") -> Model:
    """The toy (``None``) or a model directory of any family, through :func:`tformer.load` (``flag`` names the
    argument in its messages)."""
    if directory is None:
        toy = toy_seq2seq()
        return Model(
            "seq2seq",
            "toy: the notes' d_model = 4 translator",
            "toy",
            toy.model,
            ToyCodec(toy.tgt_vocab),
            ToyCodec(toy.src_vocab),
            "I am good.",
            "Je vais bien",
        )
    from tformer.bert.fill_mask import no_head, untrained_heads
    from tformer.loader import load

    loaded = load(directory, flag=flag)  # any family, any kind of directory (tformer.loader)
    tok = loaded.require_tokenizer()  # the page shows text: a model without a tokenizer is one line
    kind, name, model = loaded.family, Path(directory).name, loaded.model
    if kind == "seq2seq":  # tformer's layout (<sos> 2, <eos> 3) or a Marian's (<pad> starts, </s> ends)
        target = loaded.target_tokenizer or tok
        codecs = TranslationCodec(target), TranslationCodec(tok, source=True)
        m = Model(kind, name, str(directory), model, *codecs, DEFAULT_TEXT[kind])
        m.start_id = TRANSLATION_SOS if loaded.start_id is None else loaded.start_id
        m.eos_id = TRANSLATION_EOS if target.eos_id is None else target.eos_id
        return m
    if kind == "gpt":
        return Model(kind, name, str(directory), model, LMCodec(tok), None, DEFAULT_TEXT[kind])
    wordpiece = cast(WordPieceTokenizer, tok)  # a BERT's tokenizer is WordPiece (tformer.loader)
    m = Model(kind, name, str(directory), model, WordPieceCodec(wordpiece), None, DEFAULT_TEXT[kind])
    m.default_text_b = "it was a sunny day."
    m.untrained = {head: no_head(loaded, head) for head in untrained_heads(loaded)}  # fill-mask, NSP: refused
    return m


def with_precision(m: Model, precision: str) -> Model:
    """``m`` with its weights in ``precision`` (the explorer measures: ``auto`` keeps them float32)."""
    choice = choose(precision, "measuring", m.model)
    m.model, m.precision = speed_up(apply(m.model, choice).eval(), inference=True), choice.precision
    return m


def check_comparable(a: Model, b: Model) -> None:
    """Refuse (ValueError, one line naming both directories) two models of another family, shape or vocabulary."""

    def shape(m: Model) -> str:
        c = m.config
        layers = "+".join(
            str(n) for n in ([c.n_encoder_layers, c.n_decoder_layers] if m.family == "seq2seq" else [c.n_layers])
        )
        return f"{m.family} (d_model {c.d_model}, {layers} layers, {c.n_heads} heads, vocabulary {len(m.tgt.vocab)})"

    why = ""
    sa = {k: tuple(v.shape) for k, v in a.model.state_dict().items()}
    sb = {k: tuple(v.shape) for k, v in b.model.state_dict().items()}
    if a.family != b.family or shape(a) != shape(b):
        why = ""
    elif sa != sb:
        k = next(k for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k))
        why = f"; parameter {k}: {list(sa.get(k, ()))} against {list(sb.get(k, ()))}"
    elif list(a.tgt.vocab) != list(b.tgt.vocab) or (a.src is not None and list(a.src.vocab) != list(b.src.vocab)):
        why = "; their vocabularies differ"
    else:
        return
    raise ValueError(
        f"--compare {b.source!r} is a {shape(b)} and --model {a.source!r} a {shape(a)}{why}: "
        "compare needs two checkpoints of one family and shape"
    )
