"""The texts a command reads: those of its command line, else the lines of stdin; and which of them the model cuts."""

from __future__ import annotations

import sys


def texts_in(given: list[str], what: str = "sentences") -> list[str]:
    """The texts of the command line, else the non-empty lines of stdin (each stripped); none is one line."""
    if given:
        return given
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError(f"no {what}: pass them as arguments or pipe them in, one per line")
    from tformer.text import read_stdin_lines

    lines = [line.strip() for line in read_stdin_lines()]  # strict UTF-8: a bad byte is named by its line
    if not any(lines):
        raise ValueError(f"no {what}: stdin held only empty lines")
    return [line for line in lines if line]


def note_cut(command: str, tokenizer, texts: list[str], limit: int) -> None:
    """Texts longer than the model reads (``limit`` tokens, [CLS] and [SEP] included) are cut to their first tokens,
    as Hugging Face's pipelines and sentence-transformers cut them: said on stderr, naming them by their place."""
    lengths = [len(ids) for ids in tokenizer.encode_batch(texts, add_special_tokens=True)]
    cut = [(i + 1, n) for i, n in enumerate(lengths) if n > limit]
    if cut:
        shown = ", ".join(f"{i} ({n:,} tokens)" for i, n in cut[:5]) + (
            f" and {len(cut) - 5} more" if len(cut) > 5 else ""
        )
        which = f"text {shown} is" if len(cut) == 1 else f"texts {shown} are"
        print(
            f"tformer {command}: note: {which} longer than the model reads ({limit} tokens with [CLS] and [SEP]): "
            f"{'each' if len(cut) > 1 else 'it'} is read from its first {limit}",
            file=sys.stderr,
        )
