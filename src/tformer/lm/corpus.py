"""The language model's corpus: checked before a run touches its directory, its tokenizer, and the training and
validation streams memory-mapped from the shards :mod:`tformer.data` prepared (once, in the cache).

* :func:`prepare` — ``tformer data prepare lm``: the corpus tokenized into the cache ahead of a run;
* :func:`check_data` — ``--data`` and ``--valid-data`` exist and hold text, said in one line;
* :func:`folder_tokenizer` — a prepared folder's tokenizer as the flags name it; another ``--tokenizer`` refused;
* :func:`data_tokenizer` — a new model's tokenizer: ``--tokenizer-dir``'s, a prepared folder's, or one trained on the
  corpus (BPE on a sample), cached;
* :func:`streams` — the train and validation :class:`~tformer.data.TokenStream`\\ s and what they hold, in words;
* :func:`held_out` — how many tokens ``--valid`` holds out of the stream's end (a fraction capped at
  :data:`VALID_CAP`, or a count).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tformer import checks
from tformer.checks import check_settings
from tformer.data import (
    TOKENIZER_SAMPLE,
    TokenStream,
    corpus_tokenizer,
    find_sources,
    is_prepared,
    open_tokens,
    prepare_lm,
    prepared_vocab_size,
    read_manifest,
)
from tformer.finetune import refuse_given, start_from
from tformer.lm.recipes import RECIPES, resolve
from tformer.models.checkpoint import model_dir
from tformer.tokenizers import Tokenizer, load_tokenizer
from tformer.training.distributed import from_rank0, say
from tformer.training.resume import saved_settings

__all__ = [
    "TOKENIZER_KINDS",
    "BOUNDS",
    "VALID_CAP",
    "prepare",
    "check_data",
    "folder_tokenizer",
    "data_tokenizer",
    "streams",
    "held_out",
]

# the recipes' and the CLI's --tokenizer names -> the tokenizer kinds (tformer.tokenizers)
TOKENIZER_KINDS = {"char": "char", "bpe": "byte_bpe"}

# Where the language model's entry points bound a setting otherwise than tformer.checks.SETTINGS (as `tformer train
# lm`'s flags do: tests/test_api_strict.py keeps them equal): a preset or a recipe, a vocabulary of the 3 special
# tokens + 1
BOUNDS: dict[str, checks.Check] = {
    "preset": checks.Choice(("tiny", "small", "base", *RECIPES)),
    "tokenizer": checks.Choice(TOKENIZER_KINDS),
    "vocab_size": checks.Number(int, 4, allowed="an integer >= 4 (3 special tokens + 1)"),
}

# A held-out part given as a fraction of a large corpus is capped at this many tokens: an evaluation scores at most
# --eval-blocks blocks of it, and every token held out is one not trained on (--valid N asks for N tokens)
VALID_CAP = 1_000_000


def check_data(data: str | Path, valid_data: str | Path | None, text_field: str) -> None:
    """``--data`` (and ``--valid-data``) exist and hold text: refused in one line before a run's directory is touched."""
    checks.text_field.check(text_field, "text_field")
    for flag, path in (("--data", data), ("--valid-data", valid_data)):
        if path is not None and not is_prepared(path, "lm"):
            find_sources(path, flag)


def folder_tokenizer(
    data, tokenizer: str | None, vocab_size: int | None, tokenizer_dir=None, resumed=None, log=say
) -> tuple[str | None, int | None] | None:
    """The tokenizer of ``data`` when it is a prepared folder, as ``--tokenizer`` and ``--vocab-size`` name it (the
    kind; the size asked for, else the number of ids: :func:`tformer.data.prepared_vocab_size`), else None. Its ids
    are that tokenizer's: a ``--tokenizer`` other than the folder's is refused in one line, not ignored; so is
    ``--tokenizer`` beside ``--tokenizer-dir``. ``resumed`` (the run's directory on ``--resume``): neither given,
    the run's own values (a run made before this check recorded its preset's), as the run's tokenizer is used."""
    if tokenizer_dir is not None and tokenizer is not None:
        raise ValueError(f"--tokenizer {tokenizer} and --tokenizer-dir {str(tokenizer_dir)!r}: give one of them")
    if not is_prepared(data, "lm"):
        return None
    saved = saved_settings(resumed) if resumed and tokenizer is None and vocab_size is None else {}
    if "tokenizer" in saved and "vocab_size" in saved:
        return saved["tokenizer"], saved["vocab_size"]
    found = (read_manifest(Path(data)) or {}).get("tokenizer_kind")
    kind = {v: k for k, v in TOKENIZER_KINDS.items()}.get(str(found), found)  # tformer.tokenizers' kind -> the flag's
    if tokenizer is not None and tokenizer != kind:
        raise ValueError(
            f"--tokenizer {tokenizer}: --data {str(data)!r} is a folder prepared with a {kind} tokenizer; leave "
            "--tokenizer out, or prepare the text with the one you want (tformer data prepare lm --tokenizer KIND)"
        )
    size = prepared_vocab_size(data, vocab_size, log)
    return (kind if kind in TOKENIZER_KINDS else None), size  # None: not one --tokenizer names (a --tokenizer-dir's)


def data_tokenizer(data, tokenizer_dir, kind: str, vocab_size, sample: int, text_field: str, cache, log) -> Tokenizer:
    """The tokenizer of a new model: ``tokenizer_dir``'s, a prepared folder's own, else one trained on the corpus
    (cached: :func:`tformer.data.corpus_tokenizer`)."""
    if tokenizer_dir is not None:
        tok = load_tokenizer(model_dir(tokenizer_dir), kinds=["char", "byte_bpe", "hf"])  # a run: its best model's
        log(f"tokenizer: {tok.kind}, {tok.vocab_size:,} ids, from {tokenizer_dir}")
        return tok
    if is_prepared(data, "lm"):
        return load_tokenizer(Path(data) / "tokenizer")
    return corpus_tokenizer(data, kind, vocab_size, sample=sample, text_field=text_field, cache=cache, log=log)


def streams(
    data, valid_data, tok: Tokenizer, valid: float, text_field: str, cache, device: str, log
) -> tuple[TokenStream, TokenStream, str]:
    """The training and validation streams, memory-mapped from the prepared shards (prepared first when they are not
    in the cache; by the first process alone under torchrun), and what they hold, in words."""

    def prepared(path, flag: str | None = None) -> TokenStream:
        directory = from_rank0(
            lambda: prepare_lm(path, tok, text_field=text_field, cache=cache, log=log, flag=flag), device
        )
        manifest, stream = open_tokens(directory)
        counts.append(manifest["documents"])
        return stream

    counts: list[int] = []
    stream = prepared(data, "--data")  # (--valid-data's too few tokens are said below)
    if valid_data is not None:
        train, val = stream, prepared(valid_data)
        if len(val) < 2:  # a token and the next: the least a loss is computed on
            raise ValueError(
                f"--valid-data {str(valid_data)!r} holds {len(val)} token(s): too few to validate on; give a longer "
                "text, or leave --valid-data out (then the end of --data is held out: --valid)"
            )
        held = f"{len(val):,} validation tokens (--valid-data)"
        unk = tok.unk_id
        unknown = int((val.tensor() == unk).sum()) if unk is not None else 0
        if unk is not None and unknown:  # text the tokenizer (trained on --data) has no tokens for: scored as unknown
            log(
                f"note: {unknown:,} of the {len(val):,} tokens of --valid-data are {tok.id_to_token(unk)!r}: "
                "its text has characters that --data has not, and the validation loss counts them as unknown"
            )
    else:
        n = held_out(len(stream), valid)
        train, val = stream.split(len(stream) - n)
        held = f"{len(val):,} validation tokens" if len(val) >= 2 else "no validation data"
        if 0 < valid < 1 and n < len(stream) - int(len(stream) * (1 - valid)):
            held += f" (the last {valid:g} capped at {VALID_CAP:,}; --valid N holds out N)"
    return train, val, f"{counts[0]:,} document(s), {len(train):,} train tokens / {held}"


def held_out(total: int, valid: float) -> int:
    """Tokens held out from the end of a stream of ``total``: a fraction ``valid`` < 1 (at most :data:`VALID_CAP`), or
    a count ``valid`` >= 1."""
    if valid >= 1:
        if valid >= total:
            raise ValueError(f"--valid {int(valid)} holds out every token of the text ({total:,}): give fewer")
        return int(valid)
    return min(total - int(total * (1 - valid)), VALID_CAP) if valid > 0 else 0


def prepare(
    data: str | Path,
    preset: str | None = None,
    *,
    init: str | Path | None = None,
    tokenizer: str | None = None,
    tokenizer_dir: str | Path | None = None,
    tokenizer_sample: int = TOKENIZER_SAMPLE,
    vocab_size: int | None = None,
    text_field: str = "text",
    data_cache: str | Path | None = None,
    log: Callable[[str], None] = say,
) -> Path:
    """Tokenize ``data`` into the cache ahead of training (``tformer data prepare lm``): the folder that :func:`setup`
    with the same data and tokenizer settings (``preset``, ``tokenizer``, ``vocab_size``, ``tokenizer_dir`` or
    ``init``'s tokenizer) then maps at once. Returns the folder; it may also be given as ``data`` itself."""
    check_settings(
        {
            "preset": preset or "tiny",
            "tokenizer": tokenizer,
            "vocab_size": vocab_size,
            "text_field": text_field,
            "tokenizer_sample": tokenizer_sample,
        },
        bounds=BOUNDS,
    )
    check_data(data, None, text_field)
    if init is not None:
        refuse_given(
            init,
            {
                "--preset": preset,
                "--tokenizer": tokenizer,
                "--tokenizer-dir": tokenizer_dir,
                "--vocab-size": vocab_size,
            },
        )
        tok = start_from(init, "gpt").require_tokenizer()
    else:
        if tokenizer_dir is not None and tokenizer is not None:  # as train lm refuses them
            raise ValueError(f"--tokenizer {tokenizer} and --tokenizer-dir {str(tokenizer_dir)!r}: give one of them")
        r = resolve(preset or "tiny", tokenizer=tokenizer, vocab_size=vocab_size)
        kind = TOKENIZER_KINDS[r["tokenizer"]]
        tok = data_tokenizer(data, tokenizer_dir, kind, r["vocab_size"], tokenizer_sample, text_field, data_cache, log)
    return prepare_lm(data, tok, text_field=text_field, cache=data_cache, log=log, flag="--data")
