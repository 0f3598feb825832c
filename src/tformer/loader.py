"""One loader for every model directory: which kind it is (:func:`detect`), and the model with its tokenizer
(:func:`load`, exported as ``tformer.load``). Every command's ``--model``, the explorer and the families' own
loaders (``Translator.load``, ``lm.load``, ``load_masked_lm``, ``TextClassifier.load``) go through it.

    m = tformer.load("runs/lm")             # a `tformer train lm` run: its best model and its tokenizer
    m = tformer.load("./SmolLM2-135M")      # a Hugging Face directory, read without transformers
    m.family, m.kind.describe()             # "gpt", "a GPT (a Hugging Face llama directory)"
    out = m.model(**m.encode("To be"))      # the text as the model read its training data
    tformer.load("runs/lm", family="bert")  # ValueError: 'runs/lm' holds a GPT (a tformer train lm run); ...

The kinds, from what the files declare (never a guess on field names: ``hidden_size`` is Llama's and BERT's):

    run     a tformer training run: best/, last/ or log.jsonl; the model is in best/ (tformer 0.1: at the top)
    model   a tformer model directory: config.json whose model_type is tformer's own (seq2seq, gpt, bert)
    hf      a Hugging Face directory: config.json that says so (:func:`tformer.hf.directory.declares_hf`:
            ``architectures``, ``transformers_version``, or a model_type only Hugging Face writes) with a model_type
            tformer.hf's registry reads (gpt2, gpt_neox, llama, mistral, qwen2, qwen3, gemma3_text → a GPT; bert;
            marian → a translator)

The family comes from the model_type alone; the tokenizers from the files beside the model, of whatever kind
(:func:`tformer.tokenizers.load_tokenizer`). A directory without one still loads (``tformer trace --ids`` reads it);
what needs text asks :meth:`Loaded.require_tokenizer`, which says in one line what is missing.

This module knows the directory layouts, the models' loaders and the tokenizer room; it knows nothing about
training, the families' tasks or the command line (``flag`` only names the argument in a message).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tformer.checks import BadValue, check_device, check_yes_no
from tformer.fast import speed_up, use_reference
from tformer.fast.linear import inference_layout
from tformer.fast.quantize import is_quantized, require_float
from tformer.files import current_dir, staged_dir
from tformer.hf.directory import declares_hf, load_hf_dir
from tformer.hf.export import export as hf_export
from tformer.hf.heads import saved_labels, untrained_heads
from tformer.hf.peft import ADAPTER_CONFIG, is_adapter_dir, load_adapter
from tformer.hf.registry import DECODER_TYPES, MODULES, hf_field
from tformer.models.checkpoint import BEST_DIR, CONFIG_NAME, check_vocab, load_pretrained, model_dir, read_decoding
from tformer.nn.lora import has_lora, merge_lora
from tformer.outputs import check_new_dir, mark_written
from tformer.readers import read_json_object
from tformer.text import check_text, normalize
from tformer.tokenizers import HFTokenizer, MarianTokenizer, Tokenizer, WordPieceTokenizer, load_tokenizer
from tformer.tokens import TRANSLATION_SOS

__all__ = ["Kind", "Loaded", "detect", "load", "FAMILIES"]

FAMILIES = {"seq2seq": "a seq2seq translator", "gpt": "a GPT", "bert": "a BERT"}  # family -> how a message says it
_WRITERS = {"seq2seq": "tformer train translation", "gpt": "tformer train lm", "bert": "tformer train bert"}
_RUN_MARKS = (BEST_DIR, "last", "log.jsonl")  # what a training run writes into OUT (tformer.training.resume)
_KINDS = {  # the tokenizer kinds of each family's own directories (tformer trains these; hf: saved from one)
    "seq2seq": ("bpe", "hf", "marian"),
    "gpt": ("char", "byte_bpe", "hf"),
    "bert": ("wordpiece",),
}
_MARIAN_NOTE = " nor an Opus-MT tokenizer (source.spm, target.spm and vocab.json, read with sentencepiece)"


@dataclass(frozen=True)
class Kind:
    """What a directory holds, as its files declare it."""

    source: str  # "run" | "model" | "hf"
    family: str  # "seq2seq" | "gpt" | "bert"
    model_type: str  # config.json's: tformer's "seq2seq" / "gpt" / "bert", or Hugging Face's "llama", "marian", ...
    path: Path  # the directory as given
    files: Path  # where config.json and the weights are: a run's best/, else ``path``

    @property
    def prefixes(self) -> tuple[str, str]:
        """The file-name prefixes of the (source, target) tokenizers: ``src_`` / ``tgt_`` in a tformer translator,
        ``""`` / ``target_`` in a Hugging Face Marian directory (tformer export), ``""`` for the rest."""
        if self.family != "seq2seq":
            return "", ""
        return ("", "target_") if self.source == "hf" else ("src_", "tgt_")

    def describe(self) -> str:
        """``a GPT (a tformer train lm run)``, ``a BERT (a Hugging Face bert directory)``, ..."""
        what = FAMILIES[self.family]
        if self.source == "hf":
            return f"{what} (a Hugging Face {self.model_type} directory)"
        writer = _WRITERS[self.family]
        if self.family == "bert" and (self.files / "labels.json").is_file():
            writer = "tformer train classify"
        return f"{what} (a {writer} run)" if self.source == "run" else f"{what} (a tformer model directory)"


@dataclass
class Loaded:
    """A model (in eval mode) with its tokenizers, the same shape for every family.

    ``tokenizer`` reads the model's input (a translator's source side); ``target_tokenizer`` reads and writes its
    output (a translator's target side; the same object for a GPT or a BERT), so ``target_tokenizer.decode(ids)``
    turns what any model writes into text. Either is None when the directory has none (``missing`` says why).
    ``start_id``: what a decoder starts from (a translator's ``<sos>``, a Hugging Face Marian's
    ``decoder_start_token_id``; a GPT's start token for an empty prompt); None for a BERT.
    """

    family: str
    model: Any  # a Seq2SeqTransformer, GPT or Bert, in eval mode
    tokenizer: Tokenizer | None
    target_tokenizer: Tokenizer | None
    kind: Kind
    start_id: int | None = None
    missing: str | None = None

    @property
    def directory(self) -> Path:
        """Where the model files are (a run's best/)."""
        return self.kind.files

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def precision(self) -> str:
        """``"int8"`` for an int8 model (:func:`tformer.quantize`), else its weights' dtype (``"float32"``, ...)."""
        if is_quantized(self.model):
            return "int8"
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def require_tokenizer(self) -> Tokenizer:
        """The input tokenizer (and, for a translator, the target one), or one line saying which file is missing."""
        if self.tokenizer is None or self.target_tokenizer is None:
            raise FileNotFoundError(self.missing or f"{str(self.directory)!r} has no tokenizer")
        return self.tokenizer

    def encode(self, text: str, target: str | None = None) -> dict[str, torch.Tensor]:
        """The model's arguments for ``text``, each (1, T) on the model's device, as the model read its training
        data: a translator's ``src`` (the normalised sentence) and ``tgt`` (:meth:`target_ids`: teacher forcing), a
        GPT's ``ids`` (an empty text: its start token), a BERT's ``ids`` (``[CLS] text [SEP]``).
        ``model(**loaded.encode(text))`` runs the model; ``trace``, fill-mask, training and the explorer give the
        same ids."""
        for name, value in (("text", text), ("target", target)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r:.40}")
            if value is not None:
                check_text(value, name)  # no lone surrogate, no NUL
        tok = self.require_tokenizer()
        if self.family == "seq2seq":
            src = tok.encode(normalize(text), add_special_tokens=True)  # Marian's adds </s>; tformer's nothing
            return {"src": self._tensor(src, "text"), "tgt": self._tensor(self.target_ids(target), "target")}
        if target is not None:
            raise ValueError(f"a target text is for a translator (seq2seq); this model is {FAMILIES[self.family]}")
        ids = tok.encode(text, add_special_tokens=True)
        if not ids and self.family == "gpt" and self.start_id is not None:
            ids = [self.start_id]  # no prompt: a new document, as `generate` starts one
        return {"ids": self._tensor(ids, "text")}

    def target_ids(self, target: str | None = None) -> list[int]:
        """A translator's decoder input: ``start_id`` (``<sos>``) and the pieces of ``target`` (normalised)."""
        if self.family != "seq2seq" or self.start_id is None:
            raise ValueError(f"a target text is for a translator (seq2seq); this model is {FAMILIES[self.family]}")
        if not target:
            return [self.start_id]
        self.require_tokenizer()
        assert self.target_tokenizer is not None
        return [self.start_id] + self.target_tokenizer.encode(normalize(target))

    def _tensor(self, ids: list[int], what: str) -> torch.Tensor:
        if not ids:
            raise ValueError(f"the {what} gives no tokens")
        if len(ids) > self.config.max_len:
            raise ValueError(f"the {what} has {len(ids)} tokens; this model reads at most {self.config.max_len}")
        return torch.tensor([ids], device=next(self.model.parameters()).device)  # (1, T)

    def save(self, directory: str | os.PathLike, overwrite: bool = False) -> Path:
        """The model and its tokenizers as a tformer model directory, which :func:`load` reads back; returns it. Written
        whole: a directory not empty is refused unless ``overwrite`` and tformer wrote it, one in a run always."""
        check_yes_no(overwrite=overwrite)  # "no" is a true string: refused
        out = check_new_dir(directory, "directory", [("model", self.directory)], overwrite)
        with staged_dir(out) as tmp:
            self.write_files(tmp)
            mark_written(tmp, "save")
        return out

    def write_files(self, directory: str | os.PathLike) -> Path:
        """:meth:`save`'s files, into ``directory`` as it is, without its checks (``tformer merge`` stages them)."""
        directory = Path(self.model.save_pretrained(directory))
        if self.family == "seq2seq" and self.tokenizer is not None and self.target_tokenizer is not None:
            self.tokenizer.save(directory, "src_")
            self.target_tokenizer.save(directory, "tgt_")
        elif self.tokenizer is not None:
            self.tokenizer.save(directory)
        return directory

    def export(self, out_dir: str | os.PathLike, overwrite: bool = False, labels: Sequence[str] | None = None,
               untrained: Sequence[str] | None = None) -> Path:  # fmt: skip
        """The model and its tokenizers (none when one is missing) as a Hugging Face directory that ``transformers``
        loads with its own classes (:func:`tformer.hf.export`); returns it. As ``tformer export`` writes it: a BERT
        classifier's ``labels`` (None: its labels.json's), a BERT's ``untrained`` heads left out (None: those that
        never trained, :func:`tformer.hf.heads.untrained_heads`; ``()``: every head written)."""
        require_float(self.model, "a Hugging Face export", repr(str(self.directory)))
        if self.family == "bert":
            labels = saved_labels(self.directory) if labels is None else labels
            untrained = untrained_heads(self.directory, self.kind.source == "hf") if untrained is None else untrained
        tokenizer: Any = None
        if self.missing is None:
            pair = (self.tokenizer, self.target_tokenizer)
            tokenizer = pair if self.family == "seq2seq" else self.tokenizer
        return hf_export(
            self.model, out_dir, tokenizer, overwrite, read_decoding(self.directory), labels, untrained or ()
        )


# ---------------------------------------------------------------------------------------------------- detect


def detect(path: str | os.PathLike, flag: str | None = None) -> Kind:
    """The :class:`Kind` of the directory ``path``, from what its files declare (see the module docstring).

    A directory tformer does not read is one line saying what was found: no config.json (and, for a training run
    with no best model yet, where its latest state is), a model_type neither tformer nor its Hugging Face room
    reads. ``flag`` names the argument in the message (``--model``).
    """
    where = _where(path, flag)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a directory (a str or a path), got {type(path).__name__} {path!r:.40}")
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{where} is not a directory")
    run = any((current_dir(path / name) if name == BEST_DIR else path / name).exists() for name in _RUN_MARKS)
    files = model_dir(path)
    config_path = files / CONFIG_NAME
    if not config_path.is_file():
        if run and (path / "last" / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{where} is a training run with no best model yet (no evaluation has finished); its latest state is "
                f"in {str(path / 'last')!r}"
            )
        data = "; it is data tformer data prepare made: give it as --data" * (path / "manifest.json").is_file()
        raise FileNotFoundError(
            f"{where} holds no model: it has no {CONFIG_NAME} (tformer reads its own run and model directories and "
            f"Hugging Face ones){data}"
        )
    config = read_json_object(config_path, "model config")  # not an object: one line naming the file
    model_type = config.get("model_type")
    known = isinstance(model_type, str)
    if known and declares_hf(config) and model_type in MODULES:
        family = "gpt" if model_type in DECODER_TYPES else "seq2seq" if model_type == "marian" else "bert"
        return Kind("hf", family, model_type, path, files)
    if known and not declares_hf(config) and model_type in FAMILIES:
        return Kind("run" if run else "model", model_type, model_type, path, files)
    shown = repr(model_type) if len(repr(model_type)) <= 60 else repr(model_type)[:60] + "…"
    given = f"{flag}: " if flag else ""  # the argument that named it (--init, --model)
    raise ValueError(
        f"{given}model config {str(config_path)!r} has model_type={shown}; tformer reads its own seq2seq, gpt and "
        f"bert and the Hugging Face types {', '.join(sorted(MODULES))}"
    )


def _where(path: str | os.PathLike, flag: str | None) -> str:  # how messages name the directory
    return f"{flag} {str(path)!r}" if flag else repr(str(path))


# ---------------------------------------------------------------------------------------------------- load


def load(
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = torch.float32,
    family: str | Iterable[str] | None = None,
    flag: str | None = None,
    strict: bool = True,
    float_weights: bool = False,
    fast: bool = True,
    merge: bool = True,
) -> Loaded:
    """The model of the directory ``path`` (in eval mode, on ``device``, in ``dtype``; None: as stored) with its
    tokenizers, whatever its kind (:func:`detect`).

    ``family`` (one or several of "seq2seq", "gpt", "bert"): what the caller can use; another family is one line,
    before anything is read. ``flag`` names the argument in messages (``--model``). Files that do not fit together
    are one line naming both: a tokenizer with more ids than the model has rows, and (``strict``) a tformer directory
    whose tokenizer and model differ in size or whose tokenizer its family never trains (``strict=False``: ``trace``).

    An int8 directory (saved after :func:`tformer.quantize`) gives the int8 model, or with ``float_weights`` one line.

    ``fast``: tformer's fast kernels, chosen here (:func:`tformer.fast.speed_up`, ``inference=True``); False: the
    reference kernels, plain PyTorch (:func:`tformer.fast.use_reference`), what ``--no-fast`` loads, in PyTorch's own
    layout (fast: a linear weight column-major, as decoding reads it; its state-dict tensor is then not contiguous).

    A model trained with LoRA (``config.json`` records its layers, :mod:`tformer.nn.lora`) comes with each low-rank
    pair folded into its weight (``merge``): plain linear layers, the same function, as fast as the base model;
    ``merge=False`` keeps the pairs apart. A PEFT LoRA adapter directory loads its base model (its
    ``base_model_name_or_path``, a local directory) with the adapter's pairs (:mod:`tformer.hf.peft`).
    """
    wanted = _families(family)  # the arguments first: a typo is named before a file is read
    check_device(device)
    check_yes_no(strict=strict, float_weights=float_weights, fast=fast, merge=merge)  # "no" is a true string: refused
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise BadValue(f"dtype must be None (as stored) or a floating torch.dtype (torch.float32, ...), got {dtype!r}")
    adapter = isinstance(path, (str, os.PathLike)) and is_adapter_dir(path) and not (Path(path) / CONFIG_NAME).is_file()
    if adapter:  # a PEFT adapter: its base, then its pairs
        return _load_adapter(path, device, dtype, wanted, flag, strict, float_weights, fast, merge)
    kind = detect(path, flag)
    if kind.family not in wanted:
        this = "this command" if flag else "this"
        raise ValueError(
            f"{_where(path, flag)} holds {kind.describe()}; {this} needs {' or '.join(FAMILIES[f] for f in wanted)}"
        )
    (source, target), missing = _tokenizers(kind, strict)  # before the weights: a broken tokenizer fails fast
    if kind.source == "hf":
        model = load_hf_dir(kind.files, device, dtype, prepare=_decoding_layout if fast else None)
    else:
        model = load_pretrained(kind.files, prepare=_decoding_layout if fast else None)
        if float_weights:
            this = "this command" if flag else "this"
            require_float(model, f"{this} (training, conversion)", _where(path, flag))
        model = model.to(device) if dtype is None else model.to(device, dtype)
    _check_sizes(kind, model.config, source, target, strict)
    start = _start_id(kind, target, model.config)
    model.eval()
    if merge and has_lora(model):
        merge_lora(model)  # W + α/r·BA in each LoRA layer's weight, a plain linear layer again
    if fast:
        speed_up(model, inference=True)
    else:
        use_reference(model)
    return Loaded(kind.family, model, source, target, kind, start, missing)


def _load_adapter(path: str | os.PathLike, device: str | torch.device, dtype: torch.dtype | None, family: list[str],
                  flag: str | None, strict: bool, float_weights: bool, fast: bool, merge: bool) -> Loaded:  # fmt: skip
    """A Hugging Face PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors, no config.json):
    the base model its ``base_model_name_or_path`` names (a local directory), with the adapter's pairs on it."""
    config_path = Path(path) / ADAPTER_CONFIG
    base = read_json_object(config_path, "PEFT adapter config").get("base_model_name_or_path")
    if not isinstance(base, str) or not Path(base).is_dir():
        raise ValueError(
            f"{_where(path, flag)} is a PEFT adapter whose base_model_name_or_path ({base!r}, in {str(config_path)!r}) "
            "is not a local directory: set it to the base model's directory (tformer downloads nothing)"
        )
    loaded = load(base, device, dtype, family, flag, strict, float_weights, fast=False)
    load_adapter(loaded.model, path)
    loaded.model.eval()
    if merge:
        merge_lora(loaded.model)
    if fast:
        speed_up(loaded.model, inference=True)
    return loaded


def _decoding_layout(model: nn.Module) -> None:
    """The fast kernels, and each weight decoding reads as Wᵀ allocated column-major before the file is read into it
    (:func:`tformer.fast.linear.inference_layout` without its values): no weight copied after the load."""
    speed_up(model)
    inference_layout(model, values=False)


def _families(family: Any) -> list[str]:
    """``load``'s ``family``: one of :data:`FAMILIES`, a list of them, or None (any); else one line naming it."""
    if family is None:
        return list(FAMILIES)
    wanted = [family] if isinstance(family, str) else list(family) if isinstance(family, Iterable) else [family]
    if not wanted or any(f not in FAMILIES for f in wanted):
        allowed = ", ".join(map(repr, FAMILIES))
        raise BadValue(f"family must be one of {allowed} (or a list of them, or None for any), got {family!r}")
    return wanted


def _tokenizers(kind: Kind, strict: bool) -> tuple[tuple[Tokenizer | None, Tokenizer | None], str | None]:
    """(source, target) tokenizers of ``kind``'s directory (the same object twice outside translation), and why
    there is none (a missing file; a file that is there but unreadable is a ValueError naming it).

    In tformer's own directories a tokenizer is of a kind its family trains (``strict``; or any Hugging Face one):
    a file of another kind is read as the family's, so the message names what is wrong in it (a layout, a field)."""
    files, (src_prefix, tgt_prefix) = kind.files, kind.prefixes
    kinds = _KINDS[kind.family] if strict or kind.family == "bert" else None
    try:
        if kind.family == "bert":  # the family lays out [CLS] A [SEP] B [SEP] with WordPiece's specials
            tok: Tokenizer = WordPieceTokenizer.load(files) if kind.source == "hf" else load_tokenizer(files, "", kinds)
            return (tok, tok), None  # a Hugging Face one: tokenizer.json, else vocab.txt (sentence-transformers)
        if kind.family == "gpt":
            tok = HFTokenizer.load(files) if kind.source == "hf" else load_tokenizer(files, "", kinds)
            return (tok, tok), None
        if kind.source == "hf" and not (files / "tokenizer.json").is_file():
            if (files / "source.spm").is_file():  # transformers' own Marian layout (Opus-MT)
                marian = MarianTokenizer.load(files)
                return (marian, marian.other_side()), None
            return (None, None), f"{str(files)!r} has no tokenizer.json{_MARIAN_NOTE}"
        source = load_tokenizer(files, src_prefix, kinds)
    except FileNotFoundError as err:
        return (None, None), str(err)
    if kind.source == "hf" and not (files / (tgt_prefix + "tokenizer.json")).is_file():
        return (source, source), None  # one tokenizer for both sides, as in OPUS-MT
    try:
        return (source, load_tokenizer(files, tgt_prefix, kinds)), None
    except FileNotFoundError as err:
        return (source, None), str(err)


def _check_sizes(kind: Kind, config: Any, source: Tokenizer | None, target: Tokenizer | None, strict: bool) -> None:
    """A tokenizer and a model belong together: tformer's own have the same size (``strict``); a Hugging Face model
    may have more rows than its tokenizer has ids (Qwen pads its table), never fewer."""
    files, (src_prefix, tgt_prefix) = kind.files, kind.prefixes
    if kind.family == "seq2seq":
        sides = [(source, src_prefix, "src_vocab_size"), (target, tgt_prefix, "tgt_vocab_size")]
    else:
        sides = [(source, "", "vocab_size")]
    for tok, prefix, field in sides:
        if tok is None:
            continue
        size = getattr(config, field)
        name = prefix + (tok.file_name if (files / (prefix + tok.file_name)).is_file() else "vocab.txt")
        if kind.source != "hf" and strict:
            check_vocab(files, name, tok.vocab_size, field, size)
        elif tok.vocab_size > size:
            if kind.source == "hf":  # in the file's words (a Marian's target: decoder_vocab_size)
                field = hf_field(read_json_object(files / CONFIG_NAME, "model config"), field)
            raise ValueError(
                f"{str(files / name)!r} has token ids up to {tok.vocab_size - 1} but {str(files / CONFIG_NAME)!r} "
                f"says {field}={size}: the tokenizer and the model do not belong together"
            )


def _start_id(kind: Kind, target: Tokenizer | None, config: Any) -> int | None:
    """What the decoder starts from: a Hugging Face Marian's decoder_start_token_id, else the target's ``<sos>``; a
    GPT's start token; None for a BERT."""
    if kind.family == "bert":
        return None
    if kind.family == "gpt":
        return None if target is None else target.start_id
    if kind.source == "hf":
        path = kind.files / CONFIG_NAME
        start = read_json_object(path, "model config").get("decoder_start_token_id")
        if start is not None:
            if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < config.tgt_vocab_size:
                raise ValueError(
                    f"model config {str(path)!r}: decoder_start_token_id must be an id below the vocabulary size "
                    f"{config.tgt_vocab_size}, got {start!r}"
                )
            return start
    if target is not None and target.bos_id is not None:
        return target.bos_id  # <sos>; an Opus-MT target's <pad>
    return TRANSLATION_SOS
