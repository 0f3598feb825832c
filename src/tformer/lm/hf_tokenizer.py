"""The tokenizer of a Hugging Face model directory, read with the ``tokenizers`` library alone (no ``transformers``).

    tokenizer.json            the tokenizer itself (vocabulary, merges, pre-tokenizer, post-processor, decoder)
    tokenizer_config.json     bos_token / eos_token / pad_token names                                (optional)
    special_tokens_map.json   the same names, older saves (without added_tokens_decoder) only     (optional)
    generation_config.json    bos_token_id / eos_token_id / pad_token_id, as ``generate`` reads them    (optional)
    config.json               the same ids, when generation_config.json lacks them

:class:`HFTokenizer` wraps it to the interface the LM family's generation uses (``encode``, ``decode``,
``vocab_size``) plus the ids that are fixed constants for tformer's own tokenizers:
``start_id`` (what an empty prompt starts from), ``eos_ids`` (generation stops at any of them) and ``pad_id``.

Whether ``encode`` adds a BOS (or EOS) is what ``transformers`` (5.x) decides for a directory with a
tokenizer.json: tokenizer.json's post-processor alone (Llama 3's template adds ``<|begin_of_text|>``, GPT-2's
ByteLevel adds nothing, no post-processor adds nothing). ``add_bos_token`` / ``add_eos_token`` in
tokenizer_config.json are read by ``transformers`` only when there is no tokenizer.json (it drops them
otherwise), so they change nothing here; a tokenizer.json and its flags that disagree encode as ``transformers``
5 encodes them, which is what the tests compare against.
Decoding is the ``tokenizers`` decode with the special tokens kept, as ``transformers``' ``decode`` by default.
tokenizer.json is read whole, as the model was trained with it; ``transformers`` 5 rebuilds a few named classes
(``tokenizer_class`` GPT2Tokenizer, ...) from the vocabulary and merges with the class's own pre-tokenizer, which
drops, e.g., a pre-tokenizer that splits digits one by one: there the two can differ; tformer keeps tokenizer.json's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tformer.checks import load_tokenizer_file, read_json_object

__all__ = ["HFTokenizer", "Continuation"]

SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token")


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` with the special-token ids of its Hugging Face directory."""

    file_name = "tokenizer.json"

    def __init__(self, tokenizer, start_id: int, eos_ids: Iterable[int], pad_id: int | None) -> None:
        self.tokenizer, self.start_id, self.eos_ids, self.pad_id = tokenizer, start_id, tuple(eos_ids), pad_id
        # one past the largest id, added tokens included: ids may leave gaps, so not the number of tokens
        self.vocab_size = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1

    def encode(self, text: str) -> list[int]:
        """Text → ids, with the BOS / EOS the directory's tokenizer adds (see the module docstring)."""
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    @classmethod
    def load(cls, directory: str | Path) -> HFTokenizer:
        """The tokenizer of the Hugging Face directory ``directory``; unreadable files are one line naming them."""
        directory = Path(directory)
        path = directory / cls.file_name
        if not path.is_file():
            raise FileNotFoundError(
                f"{str(path)!r} is missing: tformer reads a Hugging Face tokenizer from tokenizer.json only "
                "(not vocab.json + merges.txt, nor a sentencepiece tokenizer.model)"
            )
        tokenizer = load_tokenizer_file(path)
        settings = _optional_json(directory / "tokenizer_config.json", "tokenizer config")
        names = {k: settings.get(k) for k in SPECIAL_NAMES}
        if "added_tokens_decoder" not in settings:  # an older save: special_tokens_map.json wins, as in transformers
            special_map = _optional_json(directory / "special_tokens_map.json", "special tokens map")
            names.update({k: special_map[k] for k in SPECIAL_NAMES if special_map.get(k) is not None})
        token_ids = {k: _token_id(tokenizer, names[k], k, directory) for k in SPECIAL_NAMES}
        generation = _optional_json(directory / "generation_config.json", "generation config")
        model = _optional_json(directory / "config.json", "model config")
        ids = {k: _generation_id(k + "_id", generation, model, directory) for k in SPECIAL_NAMES}
        eos_ids = ids["eos_token"] or ([token_ids["eos_token"]] if token_ids["eos_token"] is not None else [])
        bos = ids["bos_token"][0] if ids["bos_token"] else token_ids["bos_token"]
        pad = ids["pad_token"][0] if ids["pad_token"] else token_ids["pad_token"]
        start = bos if bos is not None else (eos_ids[0] if eos_ids else None)
        if start is None:
            raise ValueError(
                f"{str(directory)!r} names neither a BOS nor an EOS token (generation_config.json, config.json, "
                "tokenizer_config.json): generation has nothing to start an empty prompt from"
            )
        return cls(tokenizer, start, eos_ids, pad)


class Continuation:
    """The text that ids add after a prompt, for streaming: ``decode(ids)`` = decode(prompt + ids) minus the
    prompt's own text, as ``transformers``' text-generation pipeline cuts it.

    Decoding the new ids alone is exact for byte-level BPE, but a sentencepiece-style decoder (Llama 2, Mistral
    v0.1: ``▁`` → space, then the first space stripped) would drop the space that starts the continuation.
    """

    def __init__(self, tokenizer: HFTokenizer, prompt_ids: Iterable[int]) -> None:
        self.tokenizer, self.prompt_ids = tokenizer, list(prompt_ids)
        self.prefix = tokenizer.decode(self.prompt_ids)

    def decode(self, ids: Iterable[int]) -> str:
        text = self.tokenizer.decode(self.prompt_ids + list(ids))
        return text[len(self.prefix) :] if text.startswith(self.prefix) else self.tokenizer.decode(ids)


def _optional_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``, or {} when there is no such file (a present but broken one is an error)."""
    return read_json_object(path, what) if path.exists() else {}


def _token_id(tokenizer, name: Any, field: str, directory: Path) -> int | None:
    """The id of a special token named in tokenizer_config.json (a string, or an AddedToken dict with 'content')."""
    if isinstance(name, Mapping):
        name = name.get("content")
    if name is None:
        return None
    if not isinstance(name, str):
        raise ValueError(f"{str(directory / 'tokenizer_config.json')!r}: {field} must be a string, got {name!r}")
    token_id = tokenizer.token_to_id(name)
    if token_id is None:
        raise ValueError(
            f"{str(directory / 'tokenizer_config.json')!r}: {field}={name!r} is not in the vocabulary of "
            f"{str(directory / 'tokenizer.json')!r}"
        )
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
