"""Shared fixtures: the three model families at their tiny presets, dropout off, in eval mode; a small text.

Session-scoped (built once; no test trains them or changes a weight) so hypothesis tests can use them too. The
decoding functions leave them plain (they decode through ``tformer.fast.fast_view``, a view sharing the
parameters); a test that swaps fast layers in (``tformer.fast.speed_up``) builds its own model. ``shared_data``: a
file of this project's offline corpora, ../shared/data, or a skip saying it is missing (a user's clone has none).
The prepared-corpus cache (tformer.data) is a folder of the session's own, never the user's ~/.cache.
"""

import os
import random
from pathlib import Path

import pytest
import torch

from tformer import GPT, Bert, BertConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer

VOCAB = 50  # id 0 is the padding token in every family


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs a worker per core) each worker computes on its share of torch's
    threads: two workers with both cores' threads each oversubscribe them (measured on 2 cores: six compute-heavy test
    files took 91-95 s that way, 45-47 s with a thread each)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory):
    """TFORMER_CACHE for the whole session: corpora prepared by the tests stay out of the user's cache (and each
    session starts without any), child processes included."""
    folder = tmp_path_factory.mktemp("tformer-cache")
    old = os.environ.get("TFORMER_CACHE")
    os.environ["TFORMER_CACHE"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("TFORMER_CACHE", None)
    else:
        os.environ["TFORMER_CACHE"] = old


@pytest.fixture(scope="session")
def seq2seq() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig.preset("tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB + 7, dropout=0.0, max_len=64)
    return Seq2SeqTransformer(config).eval()


@pytest.fixture(scope="session")
def gpt() -> GPT:
    torch.manual_seed(1)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=64)).eval()


@pytest.fixture(scope="session")
def gpt_rope() -> GPT:
    """The tiny GPT with rotary positions (``positional="rope"``) instead of learned ones."""
    torch.manual_seed(1)
    return GPT(GPTConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=64, positional="rope")).eval()


@pytest.fixture(scope="session")
def bert() -> Bert:
    torch.manual_seed(2)
    return Bert(BertConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0, max_len=64)).eval()


@pytest.fixture(scope="session")
def words_txt(tmp_path_factory):
    """A 200-line text of 14 words (a few KB): enough for a tiny language model to train a few steps on."""
    rng = random.Random(0)
    words = "the cat sat on a mat and then ran off to see the dog".split()
    path = tmp_path_factory.mktemp("words") / "words.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(200)), encoding="utf-8")
    return path


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data():
    """``shared_data(RELATIVE)``: the path of ../shared/data/RELATIVE beside the repository (the corpora this project
    keeps offline). Where it is missing the test is skipped, saying which file (a user's clone has no ../shared), and
    fails under CI (``CI=true``), whose checkout has ../shared beside it."""

    def find(relative: str) -> Path:
        path = SHARED_DATA / relative
        if not path.is_file():
            message = f"needs ../shared/data/{relative} beside the repository (not in this checkout)"
            if os.environ.get("CI") == "true":
                pytest.fail(message + "; CI has it")
            pytest.skip(message)
        return path

    return find
