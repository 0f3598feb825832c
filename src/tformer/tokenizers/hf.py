"""The tokenizer of a Hugging Face model directory (``hf``), read with the ``tokenizers`` library alone (no
``transformers``).

    tokenizer.json            the tokenizer itself (vocabulary, merges, pre-tokenizer, post-processor, decoder)
    tokenizer_config.json     the special tokens' names: bos_token, eos_token, pad_token, unk_token, ...   (optional)
    special_tokens_map.json   the same names, older saves (without added_tokens_decoder) only            (optional)
    generation_config.json    bos_token_id / eos_token_id / pad_token_id, as ``generate`` reads them      (optional)
    chat_template.jinja       a chat model's template (else tokenizer_config.json's chat_template)       (optional)
    config.json               the same ids, when generation_config.json lacks them

The specials answer to tformer's names (``bos_id``, ``eos_id``, ``pad_id``, ``unk_id``, ``mask_id``, ``cls_id``,
``sep_id``); ``eos_ids`` holds every id that ends a generation (Llama 3 names several).

What ``add_special_tokens=True`` adds is what ``transformers`` (5.x) adds for a directory with a tokenizer.json:
tokenizer.json's post-processor alone (Llama 3's template adds ``<|begin_of_text|>``, GPT-2's ByteLevel adds
nothing, no post-processor adds nothing). ``add_bos_token`` / ``add_eos_token`` in tokenizer_config.json are read by
``transformers`` only when there is no tokenizer.json (it drops them otherwise), so they change nothing here.
Decoding is the ``tokenizers`` decode, as ``transformers``' ``decode``. tokenizer.json is read whole, as the model
was trained with it; ``transformers`` 5 rebuilds a few named classes (``tokenizer_class`` GPT2Tokenizer, ...) from
the vocabulary and merges with the class's own pre-tokenizer, which drops, e.g., a pre-tokenizer that splits digits
one by one: there the two can differ; tformer keeps tokenizer.json's.

A chat model's template (:attr:`chat_template`, read by :func:`~tformer.tokenizers.chat_template.read_chat_template`)
is rendered by ``apply_chat_template`` with the special tokens tokenizer_config.json names (``bos_token``, ...), as
``transformers`` passes them; a default that a named ``transformers`` class adds when the config names no such token
(Qwen2Tokenizer's ``unk_token``) is not known here.

``save`` writes tokenizer.json and tokenizer_config.json (the one it was loaded with, the special tokens' names set
from the ids) and the chat template as chat_template.jinja (taken out of tokenizer_config.json, as ``transformers``
saves it, so both read the same template; other named templates, such as "tool_use", are not kept). Several end
ids (Llama 3's ``<|eot_id|>`` beside ``<|end_of_text|>``, a chat turn's end beside the text's) are kept as
``generation_config.json``'s ``eos_token_id`` list, merged into the one the directory has: a fine-tuned, merged or
exported model stops where the model it came from stops.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tformer.files import atomic_write
from tformer.readers import load_tokenizer_file, read_json_object
from tformer.tokenizers.chat_template import TEMPLATE_FILE, read_chat_template
from tformer.tokenizers.library import LibraryTokenizer

__all__ = ["HFTokenizer"]

# tokenizer_config.json's names of tformer's specials; the first three are also generation_config.json's ids
FIELDS = {"bos": "bos_token", "eos": "eos_token", "pad": "pad_token"}
OTHER_FIELDS = {"unk": "unk_token", "mask": "mask_token", "cls": "cls_token", "sep": "sep_token"}
CONFIG = "tokenizer_config.json"
GENERATION = "generation_config.json"  # the ids generate starts, ends and pads with


class HFTokenizer(LibraryTokenizer):
    """A ``tokenizers.Tokenizer`` with the special-token ids of its Hugging Face directory."""

    kind = "hf"
    drops_padding = False  # decodes as transformers does

    def __init__(
        self,
        tokenizer: Any,
        specials: Mapping[str, int | None] | None = None,
        eos_ids: Iterable[int] = (),
        settings: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        token_names: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer)
        self.chat_template = chat_template
        for name, i in (specials or {}).items():
            setattr(self, f"{name}_id", i)
        self._eos_ids = tuple(eos_ids) or (() if self.eos_id is None else (self.eos_id,))
        self.settings = dict(settings or {})  # tokenizer_config.json as loaded: kept when saving
        # the special tokens by tokenizer_config.json's names (bos_token, ...), as a chat template sees them
        names = self.settings if token_names is None else token_names
        self._token_names = {f: n for f in (*FIELDS.values(), *OTHER_FIELDS.values()) if (n := _content(names.get(f)))}
        # one past the largest id, added tokens included: ids may leave gaps, so not the number of tokens
        self._size = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1

    @property
    def vocab_size(self) -> int:
        return self._size

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self._eos_ids

    def _template_tokens(self) -> dict[str, str]:
        return dict(self._token_names)

    def _encode_all(self, texts: list[str], add_special_tokens: bool, max_length: int | None) -> list[list[int]]:
        """The library's own encoding, its post-processor adding the specials (after the cut to ``max_length``)."""
        if max_length is None:
            return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)]
        added = self.tokenizer.num_special_tokens_to_add(False) if add_special_tokens else 0
        if max_length < added:
            raise ValueError(f"max_length must be at least {added} here, got {max_length}")
        rows = []
        for enc in self.tokenizer.encode_batch(texts, add_special_tokens=False):
            enc.truncate(max_length - added)
            rows.append(self.tokenizer.post_process(enc, None, add_special_tokens).ids)
        return rows

    def save(self, directory: str | Path, prefix: str = "") -> Path:
        """tokenizer.json, tokenizer_config.json (the special tokens named from their ids) and chat_template.jinja."""
        path = super().save(directory, prefix)
        settings = dict(self.settings)
        settings.pop("chat_template", None)  # the template is in its own file, which transformers reads first
        template = Path(directory) / (prefix + TEMPLATE_FILE)
        if self.chat_template is not None:
            text = self.chat_template
            atomic_write(template, lambda tmp: Path(tmp).write_text(text, encoding="utf-8", newline=""))
        elif template.is_file():  # an older tokenizer's, which transformers would take for this one's
            template.unlink()
        for name, field in {**FIELDS, **OTHER_FIELDS}.items():
            i = getattr(self, f"{name}_id")
            if i is not None and self.id_to_token(i) is not None:
                settings[field] = self.id_to_token(i)
            else:
                settings.pop(field, None)
        settings.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        text = json.dumps(settings, ensure_ascii=False, indent=2)
        atomic_write(Path(directory) / (prefix + CONFIG), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        if not prefix and len(self._eos_ids) > 1:  # tokenizer_config.json names one eos_token: the others kept here
            generation = Path(directory) / GENERATION
            ends = json.dumps({**_optional_json(generation, "generation config"), "eos_token_id": list(self._eos_ids)})
            atomic_write(generation, lambda tmp: Path(tmp).write_text(ends, encoding="utf-8"))
        return path

    @classmethod
    def load(cls, directory: str | Path, prefix: str = "") -> HFTokenizer:
        """The tokenizer of the Hugging Face directory ``directory``; unreadable files are one line naming them."""
        directory = Path(directory)
        path = directory / (prefix + cls.file_name)
        if not path.is_file():
            raise FileNotFoundError(
                f"{str(path)!r} is missing: tformer reads a Hugging Face tokenizer from tokenizer.json only "
                "(not vocab.json + merges.txt, nor a sentencepiece tokenizer.model)"
            )
        tokenizer = load_tokenizer_file(path)
        config = directory / (prefix + CONFIG)
        settings = _optional_json(config, "tokenizer config")
        names = {k: settings.get(k) for k in (*FIELDS.values(), *OTHER_FIELDS.values())}
        if "added_tokens_decoder" not in settings:  # an older save: special_tokens_map.json wins, as in transformers
            special_map = _optional_json(directory / (prefix + "special_tokens_map.json"), "special tokens map")
            names.update({k: special_map[k] for k in names if special_map.get(k) is not None})
        token_ids = {name: _token_id(tokenizer, names[field], field, config, path) for name, field in FIELDS.items()}
        for name, field in OTHER_FIELDS.items():  # looked up when named; a name the vocabulary lacks is no token
            token_ids[name] = _token_id(tokenizer, names[field], field, config, path, strict=False)
        if token_ids["unk"] is None:  # the model's own unknown token (BPE, WordPiece), when the config names none
            unk = json.loads(tokenizer.to_str()).get("model", {}).get("unk_token")
            token_ids["unk"] = tokenizer.token_to_id(unk) if isinstance(unk, str) else None
        generation = _optional_json(directory / GENERATION, "generation config")
        model = _optional_json(directory / "config.json", "model config")
        ids = {name: _generation_id(field + "_id", generation, model, directory) for name, field in FIELDS.items()}
        for name in FIELDS:  # generation_config.json (or config.json) first, as generate reads them
            if ids[name]:
                token_ids[name] = ids[name][0]
        return cls(tokenizer, token_ids, ids["eos"], settings, read_chat_template(directory, prefix), names)


def _optional_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``, or {} when there is no such file (a present but broken one is an error)."""
    return read_json_object(path, what) if path.exists() else {}


def _content(name: Any) -> str | None:
    """A special token's name in tokenizer_config.json: a string, or an AddedToken dict's "content"."""
    if isinstance(name, Mapping):
        name = name.get("content")
    return name if isinstance(name, str) else None


def _token_id(tokenizer, name: Any, field: str, config: Path, path: Path, strict: bool = True) -> int | None:
    """The id of a special token named in tokenizer_config.json (a string, or an AddedToken dict with 'content')."""
    if isinstance(name, Mapping):
        name = name.get("content")
    if name is None:
        return None
    if not isinstance(name, str):
        if not strict:
            return None
        raise ValueError(f"{str(config)!r}: {field} must be a string, got {name!r}")
    token_id = tokenizer.token_to_id(name)
    if token_id is None and strict:
        raise ValueError(f"{str(config)!r}: {field}={name!r} is not in the vocabulary of {str(path)!r}")
    return token_id


def _generation_id(field: str, generation: dict, model: dict, directory: Path) -> list[int]:
    """``field`` (an id or a list of ids) from generation_config.json, else config.json, as ``generate`` reads it."""
    source, value = "generation_config.json", generation.get(field)
    if value is None:
        source, value = "config.json", model.get(field)
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"{str(directory / source)!r}: {field} must be a token id or a list of them, got {value!r}")
    return values
