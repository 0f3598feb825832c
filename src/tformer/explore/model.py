"""The model the explorer shows: any family's directory, loaded through the family's own loader, or the toy.

Dimension legend: none (ids and strings).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tformer.explore.codecs import LMCodec, ToyCodec, TranslationCodec, WordPieceCodec
from tformer.inspect import toy_seq2seq

__all__ = ["Model", "load_model", "MAX_TOKENS", "check_comparable"]

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


def load_model(directory: str | Path | None) -> Model:
    """The toy (``None``) or a model directory of any family, through the family's own loader."""
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
    from tformer.checks import read_json_object
    from tformer.models.checkpoint import model_dir

    path = model_dir(directory)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"--model {str(directory)!r} has no config.json: it is not a model directory")
    config = read_json_object(path / "config.json", "model config")
    from tformer.hf.directory import HF_MODEL_TYPES  # the Hugging Face decoders tformer reads (llama, qwen3, ...)

    kind = config.get("model_type")
    if isinstance(kind, str) and kind in HF_MODEL_TYPES:  # a Hugging Face decoder directory: the LM family's loader
        kind = "gpt"
    elif "hidden_size" in config:  # a Hugging Face BERT
        kind = "bert"
    name = Path(directory).name
    if kind == "seq2seq":
        from tformer.translation import Translator

        tr = Translator.load(path)
        codecs = TranslationCodec(tr.tgt_tokenizer), TranslationCodec(tr.src_tokenizer)
        return Model(kind, name, str(directory), tr.model.eval(), *codecs, DEFAULT_TEXT[kind])
    if kind == "gpt":
        from tformer import lm

        gpt, tok = lm.load(path)
        return Model(kind, name, str(directory), gpt.eval(), LMCodec(tok), None, DEFAULT_TEXT[kind])
    if kind == "bert":
        from tformer.bert import load_masked_lm

        bert, wp = load_masked_lm(path)
        m = Model(kind, name, str(directory), bert.eval(), WordPieceCodec(wp), None, DEFAULT_TEXT[kind])
        m.default_text_b = "it was a sunny day."
        return m
    shown = repr(kind) if len(repr(kind)) <= 60 else repr(kind)[:60] + "…"
    raise ValueError(f"{str(path / 'config.json')!r} has model_type={shown}; expected seq2seq, gpt or bert")


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
