"""A corpus encoded in bulk (``Tokenizer.encode_arrays``, what tformer.data prepares with) gives every kind's own ids.

The byte-level BPE's bulk encoder is tiktoken's twin of it where tiktoken is installed (tformer.tokenizers.bpe): the
same ids as the ``tokenizers`` library on any text (hypothesis draws it), the special tokens written in a text too;
without tiktoken the library encodes, and ``bulk_encoder`` says which runs.
"""

import builtins

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tformer.tokenizers import train_tokenizer

CORPUS = [
    "It's the king's men, they'll ride at 5 o'clock!\n\n  Long live the queen.\tNo.",
    "naïve café — ¿qué? 字字字 ✓ 😀😀 1234567 don't DON'T i'm",
] * 20
PIECES = list("ab 'sltdvremN0123\n\t\r.,!?é字😀\u00a0") + ["<pad>", "<|endoftext|>", "<unk>", "'s", "  ", "king"]
TRICKY = st.lists(st.sampled_from(PIECES), max_size=40).map("".join) | st.text(max_size=40)


@pytest.fixture(scope="module")
def byte_bpe():
    pytest.importorskip("tiktoken")
    tok = train_tokenizer("byte_bpe", CORPUS, 400)
    assert tok.bulk_encoder == "tiktoken"
    return tok


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(TRICKY, min_size=1, max_size=4))
def test_tiktokens_twin_gives_the_librarys_ids(byte_bpe, texts):
    twin = byte_bpe._tiktoken
    for text in texts:
        assert twin.encode(text, allowed_special="all") == byte_bpe.encode(text), text
    assert [list(a) for a in byte_bpe.encode_arrays(texts)] == [byte_bpe.encode(t) for t in texts]


def test_a_long_text_and_many_texts_equal_the_library(byte_bpe):
    texts = [" ".join(CORPUS[i : i + 7]) * 30 for i in range(12)]
    got = byte_bpe.encode_arrays(texts)
    assert all(np.array_equal(g, byte_bpe.encode(t)) for g, t in zip(got, texts))


def test_without_tiktoken_the_library_encodes(monkeypatch):
    real = builtins.__import__

    def no_tiktoken(name, *args, **kwargs):
        if name == "tiktoken":
            raise ImportError("no tiktoken here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tiktoken)
    tok = train_tokenizer("byte_bpe", CORPUS, 300)
    assert tok.bulk_encoder == "tokenizers"
    assert [list(a) for a in tok.encode_arrays(CORPUS[:2])] == [tok.encode(t) for t in CORPUS[:2]]


@pytest.mark.parametrize("kind", ["char", "bpe", "wordpiece"])
def test_every_kinds_bulk_ids_are_its_own(kind):
    tok = train_tokenizer(kind, CORPUS, 200)
    texts = CORPUS[:2] + ["zzz unseen ☃", ""]
    assert [list(a) for a in tok.encode_arrays(texts)] == [tok.encode(t) for t in texts]
