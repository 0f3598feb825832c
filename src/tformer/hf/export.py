"""A tformer model written as a Hugging Face directory that ``transformers`` loads with its own classes.

    OUT/
      config.json               the architecture module's config_to_hf, plus the tokenizer's special-token ids
      model.safetensors         the weights in Hugging Face names (tied tensors stored once, as transformers does)
      generation_config.json    bos / eos / pad (and Marian's decoder_start) token ids, as ``generate`` reads them;
                                a tuned length penalty and its beam width (the model directory's decoding.json)
      tokenizer.json            the model's tokenizer as a ``tokenizers`` JSON (when a tokenizer is given)
      tokenizer_config.json     PreTrainedTokenizerFast, the special tokens by name, model_max_length (a BERT's:
                                model_input_names with token_type_ids, its segment ids)
      chat_template.jinja       a chat model's template (tformer.tokenizers.chat_template), as transformers saves it
      target_tokenizer.json     a translator whose target tokenizer is not its source one: the target side
                                (transformers' Marian reads one tokenizer; tformer.hf.load's caller reads both)
      source.spm, target.spm    instead of tokenizer.json, an Opus-MT translator's SentencePiece tokenizer: its two
      vocab.json                models, its vocabulary (and target_vocab.json when the sides have their own) and
                                tokenizer_config.json, as transformers' MarianTokenizer reads them

Which ``transformers`` class each tformer config becomes, and what is refused, is the architecture modules' part
(:mod:`tformer.hf.registry` picks the module). Every refusal — a setting no Hugging Face class holds (named by its
field), a tokenizer larger than the model's vocabulary, an output directory that is not free — happens before a
file is written, and the directory is written as a whole (:func:`tformer.files.staged_dir`): a reader sees the old
directory or the new one.

Tokenizers: those built on the ``tokenizers`` library (byte-level BPE, translation BPE, WordPiece, a Hugging Face
``tokenizer.json``) are written as they are (padding and truncation off). A Marian SentencePiece tokenizer (an Opus-MT
translator's, :class:`tformer.tokenizers.MarianTokenizer`) is written as its own files, and the decoder starts from its
``<pad>`` (``decoder_start_token_id``), as in Opus-MT. A translation BPE is never written as SentencePiece files: those
hold pieces with scores, not the ordered merges and the pre-tokenizer the BPE cuts text with. A character tokenizer has
no such file of its own; it is written as an equivalent one: a word-level vocabulary of its characters (ids unchanged),
a pre-tokenizer that cuts the text into single characters, a decoder that joins them, ``<unk>`` for a character it
lacks. One difference remains: the special tokens' text (``<pad>``, ``<|endoftext|>``) written inside a text is read as
that special token, where tformer's character tokenizer reads its characters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import nn

from tformer.checks import yes_no
from tformer.fast.quantize import require_float
from tformer.files import atomic_write, staged_dir
from tformer.hf import bert, marian, registry
from tformer.models.seq2seq import Seq2SeqConfig
from tformer.outputs import check_new_dir, mark_written

__all__ = ["export"]

_TOKEN_FIELDS = ("bos", "eos", "pad", "unk", "mask", "cls", "sep")  # tformer's names; tokenizer_config adds _token


def export(
    model: nn.Module,
    out_dir: str | os.PathLike,
    tokenizer: Any = None,
    overwrite: bool = False,
    generation: dict[str, Any] | None = None,
    labels: Sequence[str] | None = None,
    untrained: Sequence[str] = (),
) -> Path:
    """Write ``model`` (a GPT, Bert or Seq2SeqTransformer) with its ``tokenizer`` (a :class:`tformer.tokenizers.
    Tokenizer`, a translator's ``(source, target)`` pair, or None) as the Hugging Face directory ``out_dir``;
    ``generation``: decoding settings for ``generation_config.json`` besides the token ids (``length_penalty``,
    ``num_beams``: :func:`tformer.models.checkpoint.read_decoding`'s); ``labels``: a classifier's label names, written
    as ``id2label`` / ``label2id`` (None: transformers' ``LABEL_0``, ...); ``untrained``: a BERT's pretraining heads
    that never trained (``mlm_head``, ``nsp_head``): left out, the class chosen by the heads it has (``BertModel``).

    ``out_dir`` may be missing (its parent must exist) or empty; one tformer wrote (an earlier export, merge or
    average: its ``.tformer-output.json`` lists its files) is replaced with
    ``overwrite``, one holding anything else never. Returns ``out_dir``.
    """
    yes_no.check(overwrite, "overwrite")  # "no" is a true string: refused, never taken as leave to replace
    files = _files(
        model, tokenizer, generation or {}, labels, tuple(untrained)
    )  # every refusal before a file is touched
    out = check_new_dir(out_dir, "out_dir", overwrite=overwrite)
    with staged_dir(out) as tmp:
        for name, write in files.items():
            write(tmp / name)
        mark_written(tmp, "export")
    return out


def _files(
    model: nn.Module,
    tokenizer: Any,
    generation: dict[str, Any],
    labels: Sequence[str] | None = None,
    untrained: tuple[str, ...] = (),
) -> dict[str, Callable[[Path], None]]:
    """Each file of the export (name → a function writing it), computed in memory."""
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"{type(model).__name__} is not a tformer model (no config): nothing to export")
    require_float(model, "a Hugging Face export")  # transformers' classes hold float weights
    dtype = next(model.parameters()).dtype
    source, target = tokenizer if isinstance(tokenizer, tuple) else (tokenizer, tokenizer)
    _check_sizes(config, source, target)
    ids = _special_ids(target)
    if isinstance(config, Seq2SeqConfig):
        hf = marian.config_to_hf(config, dtype, ids.get("bos"), ids.get("eos"))  # bos: what the decoder starts from
    else:
        hf = registry.config_to_hf(config, dtype)
        hf |= {f"{name}_token_id": ids[name] for name in ("bos", "eos") if name in ids}
        ends = list(getattr(target, "eos_ids", ()))
        if len(ends) > 1:  # several ids end a generation (a chat turn's end beside the text's): generate stops at each
            hf["eos_token_id"] = ends
    if labels is not None:
        if len(labels) != getattr(config, "num_labels", 0):
            raise ValueError(f"labels: {len(labels)} names for a model of {getattr(config, 'num_labels', 0)} labels")
        hf |= {
            "id2label": {str(i): name for i, name in enumerate(labels)},
            "label2id": {name: i for i, name in enumerate(labels)},
        }
    if hf.get("pad_token_id") is None and "pad" in ids:
        hf["pad_token_id"] = ids["pad"]
    state = registry.state_to_hf(model.state_dict(), config)
    if untrained and not getattr(config, "num_labels", 0):  # random heads are not written as a checkpoint's own
        prefixes = tuple(bert.HEAD_PREFIXES[head] for head in untrained)
        state = {name: t for name, t in state.items() if not name.startswith(prefixes)}
        hf["architectures"] = [bert.WITHOUT[tuple(h for h in bert.HEAD_PREFIXES if h in untrained)]]
    files: dict[str, Callable[[Path], None]] = {
        "config.json": _json(hf),
        "model.safetensors": lambda path: atomic_write(
            path, lambda tmp: save_file(state, tmp, metadata={"format": "pt"})
        ),
        "generation_config.json": _json(_generation(hf) | generation),
    }
    own = None if source is None else source.hf_files()  # an Opus-MT's: transformers' MarianTokenizer files
    if own is not None:
        files |= {name: _bytes(data) for name, data in own.items()}
    elif tokenizer is not None:
        segments = getattr(config, "n_segments", 0) > 1  # a BERT's: its sentence pairs' segment ids too
        files |= _tokenizer_files(source, target, config.max_len, segments)
    return files


def _check_sizes(config: Any, source: Any, target: Any) -> None:
    """A tokenizer with more ids than the model's vocabulary would give ids the model has no row for."""
    sizes = (
        [("source", source, config.src_vocab_size), ("target", target, config.tgt_vocab_size)]
        if isinstance(config, Seq2SeqConfig)
        else [("", source, config.vocab_size)]
    )
    for side, tok, size in sizes:
        if tok is not None and tok.vocab_size > size:
            field = f"{side[:3]}_vocab_size" if side else "vocab_size"
            raise ValueError(
                f"the {side + ' ' if side else ''}tokenizer has {tok.vocab_size} ids but the model's {field} is "
                f"{size}: they do not belong together"
            )


def _special_ids(tokenizer: Any) -> dict[str, int]:
    """The special tokens' ids by tformer's names (``bos``, ``eos``, ``pad``, ...), those the tokenizer has."""
    if tokenizer is None:
        return {}
    return {name: i for name in _TOKEN_FIELDS if (i := getattr(tokenizer, f"{name}_id", None)) is not None}


def _generation(hf: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json: the token ids ``generate`` starts, ends and pads with."""
    fields = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_eos_token_id")
    return {k: hf[k] for k in fields if k in hf and hf[k] is not None}


def _tokenizer_files(source: Any, target: Any, max_len: int, segments: bool) -> dict[str, Callable[[Path], None]]:
    """tokenizer.json (and target_tokenizer.json where a translator's target differs), tokenizer_config.json;
    ``segments``: the tokenizer returns ``token_type_ids`` (transformers 5's generic class leaves them out, and a
    BERT given a pair without them reads sentence B as sentence A)."""
    text = tokenizer_json(source)
    files = {"tokenizer.json": _text(text)}
    if target is not source and tokenizer_json(target) != text:
        files["target_tokenizer.json"] = _text(tokenizer_json(target))
    settings: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
    }
    if segments:
        settings["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    for name, token in source.special_tokens.items():
        settings[f"{name}_token"] = token
    files["tokenizer_config.json"] = _json(settings)
    template = getattr(source, "chat_template", None)
    if template is not None:  # a chat model's: transformers reads chat_template.jinja beside tokenizer_config.json
        files["chat_template.jinja"] = _text(template)
    return files


def tokenizer_json(tokenizer: Any) -> str:
    """``tokenizer`` as the text of a ``tokenizers`` JSON file (see the module docstring for a character one).

    What tformer adds around a text read by the model (``add_special_tokens``: BERT's ``[CLS] … [SEP]``) is given
    to a file without a post-processor as one (a template, pairs as BERT's ``[CLS] A [SEP] B [SEP]``), so that
    ``transformers`` adds it too.
    """
    library = getattr(tokenizer, "tokenizer", None)
    if library is not None and hasattr(library, "to_str"):
        text = library.to_str()
    elif getattr(tokenizer, "kind", None) == "char":
        text = _char_json(tokenizer)
    else:
        raise ValueError(
            f"a {getattr(tokenizer, 'kind', type(tokenizer).__name__)} tokenizer has no tokenizer.json form"
        )
    from tokenizers import Tokenizer

    library = Tokenizer.from_str(text)
    library.no_padding()  # encode exactly the text, as tformer does
    library.no_truncation()
    if library.post_processor is None:
        library.post_processor = _template(tokenizer)
    return library.to_str()


def _template(tokenizer: Any) -> Any:
    """A ``TemplateProcessing`` post-processor adding the ids tformer puts around a text; None if it adds none."""
    bare, full = tokenizer.encode("a"), tokenizer.encode("a", add_special_tokens=True)
    if bare == full or bare not in [full[i : i + len(bare)] for i in range(len(full))]:
        return None
    start = next(i for i in range(len(full)) if full[i : i + len(bare)] == bare)
    head, tail = full[:start], full[start + len(bare) :]
    from tokenizers import processors

    token = tokenizer.id_to_token
    single = [token(i) for i in head] + ["$A"] + [token(i) for i in tail]
    pair = single + ["$B:1"] + [f"{token(i)}:1" for i in tail]
    specials = sorted({(token(i), i) for i in head + tail})
    return processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair), special_tokens=specials)


def _char_json(tokenizer: Any) -> str:
    """A character tokenizer as a word-level ``tokenizers`` JSON with the same ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(tokenizer.vocabulary())}
    specials = tokenizer.special_tokens
    library = Tokenizer(models.WordLevel(vocab, unk_token=specials.get("unk")))
    library.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one piece per character
    library.decoder = decoders.Fuse()  # the characters joined, no spaces between
    library.add_special_tokens(sorted(set(specials.values()), key=vocab.__getitem__))  # ids unchanged
    return library.to_str()


def _json(data: dict[str, Any]) -> Callable[[Path], None]:
    return _text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _bytes(data: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(data)

    return write


def _text(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return write
