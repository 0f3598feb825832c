"""A corpus prepared once into memory-mapped shards (tformer.data), and the language model trained from them.

The stream is the one the in-memory encoding gives (characters and BPE, a large file read in pieces, across shard
boundaries); the inputs people have (text, JSONL, Parquet, Arrow, a saved ``datasets`` dataset, a folder) read the
same documents; the cache is used again when nothing changed and prepared again, saying why, when a source changed,
a shard was damaged or another tokenizer asks; a failed preparation leaves no half cache; a run resumed across a
shard boundary equals the uninterrupted one; and the memory a run takes does not grow with the corpus.
"""

import errno
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from scripted import PEAK_MB
from tformer import data as tdata
from tformer import lm
from tformer.cli import main
from tformer.data import shards, sources
from tformer.lm.data import encode_documents
from tformer.tokenizers import load_tokenizer, train_tokenizer

WORDS = "the king is dead long live the queen and all her men ride to war at dawn".split()


def _text(n_lines: int, seed: int = 0, width: int = 12) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n_lines):
        words = rng.choice(WORDS, size=int(rng.integers(1, width)))
        lead = "  " if i % 7 == 3 else ""  # an indented line: a piece is never cut before a space
        lines.append(lead + " ".join(words) + ("." if i % 3 else ""))
        if i % 11 == 5:
            lines.append("")  # a blank line
    return "\n".join(lines) + "\n"


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of about 300 bytes and shards of 500 ids: a small file crosses many boundaries."""
    monkeypatch.setattr(sources, "PIECE_BYTES", 300)
    monkeypatch.setattr(shards, "SHARD_TOKENS", 500)


@pytest.mark.parametrize("kind", ["char", "byte_bpe"])
def test_the_prepared_stream_is_the_in_memory_encoding_across_pieces_and_shards(tmp_path, small_pieces, kind):
    (tmp_path / "docs").mkdir()
    texts = [_text(120, seed=s) + "é ✓ 字\n" for s in range(3)]
    for i, text in enumerate(texts):
        (tmp_path / "docs" / f"{i}.txt").write_text(text, encoding="utf-8")
    tok = train_tokenizer(kind, texts, 300)
    logs: list[str] = []
    directory = tdata.prepare_lm(tmp_path / "docs", tok, cache=tmp_path / "cache", log=logs.append)
    manifest, stream = tdata.open_tokens(directory)
    expected = encode_documents(tok, texts)
    assert torch.equal(stream.tensor(), expected)
    assert manifest["documents"] == 3 and manifest["tokens"] == len(expected) and len(manifest["shards"]) > 3
    assert manifest["dtype"] == "uint16" and manifest["format"] == 1
    assert [s["path"] for s in manifest["sources"]] == [
        str((tmp_path / "docs" / f"{i}.txt").resolve()) for i in range(3)
    ]
    # blocks read across a shard boundary are the stream's
    starts = torch.tensor([0, 495, 499, len(expected) - 5])
    rows = stream.rows(starts, 12, fill=-100)
    assert torch.equal(rows[1], expected[495:507]) and torch.equal(rows[2], expected[499:511])
    assert rows[3, :5].tolist() == expected[-5:].tolist() and rows[3, 5:].tolist() == [-100] * 7
    train, valid = stream.split(len(stream) - 100)
    assert torch.equal(valid.tensor(), expected[-100:]) and torch.equal(
        train.rows(torch.tensor([3]), 4, 0)[0], expected[3:7]
    )


@pytest.mark.parametrize("kind", ["char", "byte_bpe"])
def test_a_text_without_newlines_is_read_in_bounded_pieces_with_the_whole_texts_ids(tmp_path, small_pieces, kind):
    """text8 is one 100 MB line: its pieces are cut before a space (never a newline to cut after), so memory stays
    flat, and the ids are still those of the whole text."""
    text = _text(400, seed=7).replace("\n", " ").replace("  ", " x ") + "é ✓ 字"
    (tmp_path / "line.txt").write_text(text, encoding="utf-8")
    pieces = [t for _, t in sources.read_pieces(sources.find_sources(tmp_path / "line.txt"))]
    assert "".join(pieces) == text and len(pieces) > 5
    assert max(len(p.encode("utf-8")) for p in pieces) <= 5 * 300  # _LONG_LINE (4 pieces) and a last block
    tok = train_tokenizer(kind, [text], 300)
    directory = tdata.prepare_lm(tmp_path / "line.txt", tok, cache=tmp_path / "cache", log=lambda _: None)
    assert torch.equal(tdata.open_tokens(directory)[1].tensor(), encode_documents(tok, [text]))


def test_inputs_people_have_read_the_same_documents(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = ["a first document", "the second one\nwith two lines", "é ✓ 字"]
    table = pa.table({"body": docs, "id": [1, 2, 3]})
    pq.write_table(table, tmp_path / "docs.parquet")
    with pa.OSFile(str(tmp_path / "docs.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in docs), encoding="utf-8")
    for name in ("docs.parquet", "docs.arrow", "docs.jsonl"):
        assert tdata.read_documents(tmp_path / name, "body") == docs, name
    with pytest.raises(
        ValueError,
        match=r"docs.parquet: no column 'text' \(--text-field names the column\); its columns are \['body', 'id'\]",
    ):
        tdata.read_documents(tmp_path / "docs.parquet")
    with pytest.raises(ValueError, match=r"docs.parquet: column 'id' holds int64, not text"):
        tdata.read_documents(tmp_path / "docs.parquet", "id")
    # JSONL says what Parquet says: the fields there are, a value's type; a null is skipped in both
    with pytest.raises(ValueError, match=r"docs.jsonl:1: no field 'text' \(--text-field names the field\); its fields are \['body'\]"):  # fmt: skip
        tdata.read_documents(tmp_path / "docs.jsonl")
    (tmp_path / "odd.jsonl").write_text('{"body": "a"}\n{"body": null}\n{"body": 12}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"odd.jsonl:3: field 'body' holds int 12, not text"):
        tdata.read_documents(tmp_path / "odd.jsonl", "body")
    pq.write_table(pa.table({"body": pa.array(docs).dictionary_encode()}), tmp_path / "category.parquet")
    assert tdata.read_documents(tmp_path / "category.parquet", "body") == docs  # pandas' category dtype
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"body": docs}).save_to_disk(str(tmp_path / "saved"))
    assert tdata.read_documents(tmp_path / "saved", "body") == docs
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": docs[:2]})}).save_to_disk(str(tmp_path / "dd"))
    assert tdata.read_documents(tmp_path / "dd", "body") == docs[:2]


def test_a_bad_byte_in_a_later_piece_names_the_files_own_line(tmp_path, small_pieces):
    path = tmp_path / "big.txt"
    path.write_bytes(_text(200).encode() + b"fine\nbad \xe9 here\n")
    line = path.read_bytes().count(b"\n")  # the bad line is the last one
    with pytest.raises(ValueError, match=rf"big.txt:{line}: not valid UTF-8 \(byte 0xe9 at column 5\)"):
        list(sources.read_pieces([path]))


def _prepare(data, tok, cache, logs):
    return tdata.prepare_lm(data, tok, cache=cache, log=logs.append)


def test_the_cache_is_used_again_and_prepared_again_saying_why(tmp_path, small_pieces):
    data = tmp_path / "corpus.txt"
    data.write_text(_text(150), encoding="utf-8")
    tok = train_tokenizer("char", [data.read_text()])
    cache, logs = tmp_path / "cache", []
    first = _prepare(data, tok, cache, logs)
    written = {f.name: f.stat().st_mtime_ns for f in first.iterdir()}
    logs.clear()
    assert _prepare(data, tok, cache, logs) == first
    assert {f.name: f.stat().st_mtime_ns for f in first.iterdir()} == written  # used, not rewritten
    assert logs == [f"data: prepared before, checked: {first}"]

    # a damaged shard: said, prepared again, never used
    shard = first / "shard-00001.bin"
    raw = bytearray(shard.read_bytes())
    raw[10] ^= 1
    shard.write_bytes(bytes(raw))
    logs.clear()
    _prepare(data, tok, cache, logs)
    assert (
        logs[0]
        == f"data cache {first}: shard-00001.bin is damaged (its SHA-256 differs from the one written): preparing it again"
    )
    assert torch.equal(tdata.open_tokens(first)[1].tensor(), encode_documents(tok, [data.read_text()]))
    (first / "shard-00002.bin").write_bytes(b"\0\0")  # short
    logs.clear()
    _prepare(data, tok, cache, logs)
    assert "shard-00002.bin is damaged (2 bytes, 1,000 written)" in logs[0]

    # a changed source: said, prepared into a new folder; the one before is kept whole (a run may read it as --data)
    before = tdata.open_tokens(first)[1].tensor().clone()
    data.write_text(_text(150) + "one more line\n", encoding="utf-8")
    logs.clear()
    changed = _prepare(data, tok, cache, logs)
    assert changed != first and "corpus.txt changed since it was prepared" in logs[0]
    assert logs[0].endswith(
        f"preparing it in a new folder; {first}, prepared from the text before, is kept "
        "(delete it when no run reads it)"
    )
    assert torch.equal(tdata.open_tokens(changed)[1].tensor(), encode_documents(tok, [data.read_text()]))
    assert torch.equal(tdata.open_tokens(first)[1].tensor(), before)
    first = changed

    # another tokenizer: another folder; that folder given as --data with this tokenizer is refused
    other = train_tokenizer("char", [data.read_text() + "xyz"])
    second = _prepare(data, other, cache, logs)
    assert second != first
    with pytest.raises(ValueError, match=r"prepared with another tokenizer than this model's; prepare it again"):
        tdata.prepare_lm(second, tok, cache=cache)
    saved = next((second / "tokenizer").iterdir())  # its own copy, which a run on the folder uses, edited by hand:
    saved.write_text(saved.read_text("utf-8").replace('"x"', '"☃"', 1), "utf-8")  # said so, not "another tokenizer"
    with pytest.raises(ValueError, match=r"its tokenizer/ was changed since it was prepared; prepare it again"):
        tdata.prepare_lm(second, load_tokenizer(second / "tokenizer"), cache=cache)


def test_a_failed_preparation_leaves_no_half_cache(tmp_path, monkeypatch):
    data = tmp_path / "corpus.txt"
    data.write_text(_text(50), encoding="utf-8")
    tok = train_tokenizer("char", [data.read_text()])

    def full_disk(self, ids):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards.ShardWriter, "write", full_disk)
    with pytest.raises(OSError):
        tdata.prepare_lm(data, tok, cache=tmp_path / "cache", log=lambda _: None)
    assert not any((tmp_path / "cache").rglob("*.bin")) and not any((tmp_path / "cache").rglob("manifest.json"))
    monkeypatch.undo()
    directory = tdata.prepare_lm(data, tok, cache=tmp_path / "cache", log=lambda _: None)
    assert tdata.open_tokens(directory)[0]["tokens"] == len(data.read_text())


def test_what_a_killed_preparation_left_is_removed_by_the_next_one(tmp_path):
    """A SIGKILL runs no clean-up: its half-written folder (.NAME.tformer-XXXXXXXX, marked with its pid) stays. The next
    preparation of that folder removes it once its writer is dead; a live writer's (another process preparing the
    same corpus now) and an earlier version's, whose writer cannot be told, are left alone."""
    import os
    import signal

    from tformer import files

    data = tmp_path / "corpus.txt"
    data.write_text(_text(50), encoding="utf-8")
    tok = train_tokenizer("char", [data.read_text()])
    directory = tdata.prepare_lm(data, tok, cache=tmp_path / "cache", log=lambda _: None)
    killed = f"""
import os, signal
from tformer.files import staged_dir
with staged_dir({str(directory)!r}) as work:
    (work / "shard-00000.bin").write_bytes(bytes(1000))
    os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", killed], capture_output=True)
    assert done.returncode == -signal.SIGKILL
    (dead,) = [p for p in directory.parent.iterdir() if p.name.startswith(f".{directory.name}.tformer-")]
    assert (dead / "writing" / "shard-00000.bin").is_file() and files.leftover_of(dead) == directory.name
    alive, earlier = (
        directory.parent / f".{directory.name}.tformer-alive000",
        directory.parent / f".{directory.name}.tformer-earlier0",
    )
    for work, mark in ((alive, {"pid": os.getpid(), "host": os.uname().nodename}), (earlier, {})):
        work.mkdir()
        (work / files.MARK).write_text(json.dumps({"saving": directory.name, **mark}))
    with files.staged_dir(directory) as work:  # the next preparation of that folder (a change of its source, say)
        (work / "manifest.json").write_text("{}")
    assert not dead.exists() and alive.is_dir() and earlier.is_dir()


def test_a_bpe_is_trained_on_a_sample_spread_over_the_corpus_and_kept(tmp_path, small_pieces):
    data = tmp_path / "corpus.txt"
    data.write_text(_text(3000), encoding="utf-8")
    size = data.stat().st_size
    pieces = list(sources.read_pieces([data]))
    assert len(pieces) > 20  # (small_pieces: about 300 bytes each)
    sample = list(sources.sample_text([data], size // 10))
    assert abs(sum(len(t.encode()) for t in sample) - size // 10) < 2 * 300
    at = [next(i for i, (_, t) in enumerate(pieces) if t is s or t == s) for s in sample]
    assert at[-1] > 0.8 * len(pieces) and max(b - a for a, b in zip(at, at[1:])) < 0.25 * len(pieces)  # spread
    logs: list[str] = []
    tok = tdata.corpus_tokenizer(data, "byte_bpe", 300, sample=size // 10, cache=tmp_path / "c", log=logs.append)
    assert "sample" in logs[0] and "(--tokenizer-sample)" in logs[0]
    logs.clear()
    again = tdata.corpus_tokenizer(data, "byte_bpe", 300, sample=size // 10, cache=tmp_path / "c", log=logs.append)
    assert logs == [] and tdata.tokenizer_hash(again) == tdata.tokenizer_hash(tok)  # loaded, not trained


LM_ARGS = [
    "--preset",
    "tiny",
    "--max-len",
    "16",
    "--batch-size",
    "4",
    "--batches-per-epoch",
    "5",
    "--eval-blocks",
    "8",
    "--log-every",
    "1",
    "--schedule",
    "inverse_sqrt",
    "--warmup-steps",
    "3",
    "--dropout",
    "0.1",
    "--no-progress",
]


def _losses(out: Path) -> list:
    return [
        (r["step"], r["train_loss"])
        for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
        if "train_loss" in r
    ]


def test_a_run_resumed_across_shard_boundaries_equals_the_uninterrupted_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shards, "SHARD_TOKENS", 64)  # every block of 17 crosses a boundary now and then
    data = tmp_path / "speech.txt"
    data.write_text(_text(200), encoding="utf-8")
    args = ["train", "lm", "--data", str(data), *LM_ARGS, "--data-cache", str(tmp_path / "cache")]
    assert main(args + ["--out", str(tmp_path / "full"), "--max-steps", "12"]) == 0
    manifest = json.loads(next((tmp_path / "cache").glob("lm-*/manifest.json")).read_text())
    assert len(manifest["shards"]) > 50
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "7"]) == 0
    assert "data: prepared before, checked" in capsys.readouterr().out  # the second run maps what the first wrote
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "12", "--resume"]) == 0
    full, cut = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in full] == list(range(1, 13)) and cut == full  # bit for bit


def test_an_empty_text_is_refused_by_data_prepare_lm_as_by_bert(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert (
        main(["data", "prepare", "lm", "--data", str(tmp_path / "empty.txt"), "--data-cache", str(tmp_path / "c")]) == 2
    )
    said = capsys.readouterr()
    last = said.err.strip().splitlines()[-1]
    assert last.endswith("empty.txt: the text is empty: no tokens to train on"), last
    assert "prepared:" not in said.out and not list((tmp_path / "c").glob("lm-*"))  # no "0 ids", no empty folder


def test_data_prepare_then_train_starts_from_the_cache(tmp_path, capsys):
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"body": _text(20, seed=s)}) + "\n" for s in range(10)), encoding="utf-8")
    flags = ["--tokenizer", "bpe", "--vocab-size", "300", "--text-field", "body", "--data-cache", str(tmp_path / "c")]
    assert main(["data", "prepare", "lm", "--data", str(data), *flags]) == 0
    out = capsys.readouterr().out
    folder = out.strip().splitlines()[-1]
    assert "prepared: 10 document(s)" in out and Path(folder, "manifest.json").is_file()
    assert (
        main(["train", "lm", "--data", str(data), *flags, *LM_ARGS, "--out", str(tmp_path / "r"), "--max-steps", "2"])
        == 0
    )
    out = capsys.readouterr().out
    assert f"data: prepared before, checked: {folder}" in out and "preparing" not in out and "tokenizer:" not in out
    # the prepared folder itself is data too, its own tokenizer the model's, and the run records that one
    assert main(["train", "lm", "--data", folder, *LM_ARGS, "--out", str(tmp_path / "r2"), "--max-steps", "2"]) == 0
    capsys.readouterr()
    ids = json.loads(Path(folder, "manifest.json").read_text())["vocab_size"]
    written = yaml.safe_load((tmp_path / "r2" / "config.yaml").read_text())
    assert (written["tokenizer"], written["vocab-size"]) == ("bpe", ids) and ids != 8000  # not the preset's
    run = [*LM_ARGS, "--max-steps", "1"]
    for flag, value, said in (  # another tokenizer's (fewer ids than the folder's): refused, not ignored
        ("--tokenizer", "char", "is a folder prepared with a bpe tokenizer"),
        ("--vocab-size", str(ids - 1), f"is a folder prepared with a tokenizer of {ids} ids"),
    ):
        assert main(["train", "lm", "--data", folder, *run, "--out", str(tmp_path / "r3"), flag, value]) == 2
        assert f"{flag} {value}: --data {folder!r} {said}" in capsys.readouterr().err
    assert not (tmp_path / "r3").exists()
    assert main(["train", "lm", "--config", str(tmp_path / "r2" / "config.yaml"), "--out", str(tmp_path / "r3")]) == 0
    # a run made before this check recorded its preset's tokenizer: --resume on the folder still continues it
    state = tmp_path / "r2" / "last" / "state.json"
    meta = json.loads(state.read_text())
    meta["run"]["settings"].update(tokenizer="char", vocab_size=4096)
    state.write_text(json.dumps(meta))
    assert (
        main(["train", "lm", "--data", folder, *LM_ARGS, "--out", str(tmp_path / "r2"), "--max-steps", "3", "--resume"])
        == 0
    )


def test_a_read_only_cache_serves_what_it_holds_and_names_what_it_cannot_write(tmp_path, monkeypatch, capsys):
    """A cache shared read-only (a team's, a mounted one) is used for what it holds; a corpus it lacks is refused
    naming the folder it could not write. (Tests run as root, whom permissions do not stop: the checks and the
    writes are refused here as a read-only mount refuses them.)"""
    import os

    data, cache = tmp_path / "text.txt", tmp_path / "cache"
    data.write_text(_text(30), encoding="utf-8")
    assert main(["data", "prepare", "lm", "--data", str(data), "--tokenizer", "char", "--data-cache", str(cache)]) == 0
    capsys.readouterr()
    access, mkdir, mkdtemp = os.access, Path.mkdir, tempfile.mkdtemp

    def inside(path) -> bool:
        return Path(path).resolve().is_relative_to(cache.resolve())

    def erofs(path):
        return OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    def read_only_mkdir(self, *args, **kw):
        if inside(self) and not self.is_dir():
            raise erofs(self)
        return mkdir(self, *args, **kw)

    def read_only_mkdtemp(suffix=None, prefix=None, dir=None):
        if dir is not None and inside(dir):
            raise erofs(dir)
        return mkdtemp(suffix, prefix, dir)

    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: access(path, mode, **kw) and not (inside(path) and mode & os.W_OK)
    )
    monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
    monkeypatch.setattr(tempfile, "mkdtemp", read_only_mkdtemp)
    args = ["train", "lm", "--data", str(data), *LM_ARGS, "--max-steps", "1", "--data-cache", str(cache)]
    assert main([*args, "--tokenizer", "char", "--out", str(tmp_path / "r")]) == 0
    assert "data: prepared before, checked" in capsys.readouterr().out
    assert main([*args, "--tokenizer", "bpe", "--vocab-size", "300", "--out", str(tmp_path / "r2")]) == 1
    err = capsys.readouterr().err
    assert f"could not write {str(cache)!r}" in err or f"could not write '{cache}/" in err
    assert "read-only" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "r2").exists()


@pytest.mark.parametrize("family", ["lm", "bert", "translation"])
def test_a_data_cache_inside_out_is_refused_before_any_work(tmp_path, family, capsys):
    """The corpus prepared there would make --out no run's (and --overwrite would delete it): said at once, before
    hours of preparing, with nothing written."""
    text = tmp_path / ("pairs.tsv" if family == "translation" else "t.txt")
    text.write_text("A man walks.\tUn homme marche.\n" * 50 if family == "translation" else "the cat sat.\n" * 50)
    for cache in ("run", "run/cache"):
        argv = ["train", family, "--data", str(text), "--out", str(tmp_path / "run"), "--max-steps", "1"]
        assert main([*argv, "--data-cache", str(tmp_path / cache)]) == 2
        err = capsys.readouterr().err
        assert f"--data-cache {str(tmp_path / cache)!r} lies in --out {str(tmp_path / 'run')!r}" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == [text.name]


@pytest.mark.parametrize("family", ["lm", "bert", "translation", "classify"])
def test_a_data_file_inside_the_run_is_refused_not_deleted_by_overwrite(tmp_path, family, capsys):
    """A run's own file given as --data (its log.csv, say): --overwrite would delete it, a resume would change it."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1, "train_loss": 1.0}\n')  # a run, as a run writes it
    text = "A man walks.\tUn homme marche.\n" if family in ("translation", "classify") else "the cat sat.\n"
    (out / "log.csv").write_text(text * 50)
    argv = ["train", family, "--data", str(out / "log.csv"), "--out", str(out), "--max-steps", "1", "--overwrite"]
    assert main(argv) == 2
    assert f"--data {str(out / 'log.csv')!r} lies in --out {str(out)!r}" in capsys.readouterr().err
    assert (out / "log.csv").read_text() == text * 50 and (out / "log.jsonl").exists()


def test_a_fraction_held_out_of_a_large_stream_is_capped_and_said(monkeypatch):
    from tformer.lm import corpus

    assert corpus.held_out(1000, 0.1) == 100 and corpus.held_out(1000, 0) == 0 and corpus.held_out(1000, 250) == 250
    assert corpus.held_out(10**9, 0.1) == corpus.VALID_CAP
    with pytest.raises(ValueError, match=r"--valid 1000 holds out every token of the text \(1,000\)"):
        corpus.held_out(1000, 1000)


def test_the_feed_reads_ahead_in_order_and_the_task_trains_on_either_form():
    from tformer.training.feed import Feed

    seen: list[int] = []

    def fetch(batch):
        seen.append(batch)
        return torch.tensor([batch])

    with Feed(fetch, list(range(10)), ahead=3) as feed:
        assert [int(t) for t in feed.take(0, 2)] == [0, 1]
        assert [int(t) for t in feed.take(2, 4)] == [2, 3]
    assert sorted(seen) == seen[: len(seen)] and set(seen) <= set(range(10)) and 4 in seen  # read ahead
    with Feed(None, [1, 2]) as feed:
        assert feed.take(0, 1) is None  # a task without fetch: its batches as they are

    tok = train_tokenizer("char", ["abcdefgh" * 20])
    ids = torch.tensor(tok.encode("abcdefgh" * 20))
    task = lm.LMTask(tok, ids, ids[:40], 8, 2)
    from tformer import GPT, GPTConfig

    gpt = GPT(GPTConfig.preset("tiny", vocab_size=tok.vocab_size, max_len=8)).eval()
    starts = task.train_batches(0)[0]
    a, _ = task.loss(gpt, starts)
    b, _ = task.loss(gpt, task.fetch(starts))
    assert torch.equal(a, b)


MEMORY_CHILD = (
    r"""
import json, resource, sys, os
from tformer import lm

data, out, cache = sys.argv[1:4]
lm.train(data, out, "tiny", max_len=64, batch_size=8, batches_per_epoch=4, eval_blocks=4, max_steps=4,
         data_cache=cache, progress=False, log=lambda _: None)
"""
    + PEAK_MB
)


def test_resident_memory_stays_flat_as_the_corpus_grows(tmp_path):
    """A child process trains 4 steps on 2 MB and on 40 MB of text: the peak resident memory (preparation included)
    differs by far less than the text (the old in-memory path took ~26 × the text)."""
    peaks = {}
    block = _text(2000).encode()
    for mb in (2, 40):
        path = tmp_path / f"c{mb}.txt"
        with open(path, "wb") as f:
            for _ in range(mb * (1 << 20) // len(block)):
                f.write(block)
        run = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, str(path), str(tmp_path / f"r{mb}"), str(tmp_path / "cache")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        peaks[mb] = json.loads(run.stdout.strip().splitlines()[-1])["peak_mb"]
    assert peaks[40] - peaks[2] < 60, peaks  # 38 MB more text, 80 MB more ids if they were held


def test_a_resume_on_a_changed_text_is_refused_naming_it(tmp_path, capsys):
    data = tmp_path / "speech.txt"
    data.write_text(_text(200), encoding="utf-8")
    args = ["train", "lm", "--data", str(data), *LM_ARGS, "--out", str(tmp_path / "run")]
    assert main(args + ["--max-steps", "2"]) == 0
    data.write_text(_text(200) + "a line more\n", encoding="utf-8")
    capsys.readouterr()
    assert main(args + ["--max-steps", "4", "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        "the text of --data (SHA-256)" in err and "(the run: " in err and "a resumed run keeps its model, data" in err
    )
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    # a new model from the run's tokenizer (--tokenizer-dir takes the run: its best model's)
    new = ["train", "lm", "--data", str(data), *LM_ARGS, "--out", str(tmp_path / "new"), "--max-steps", "1"]
    assert main(new + ["--tokenizer-dir", str(tmp_path / "run")]) == 0
    assert "tokenizer: char," in capsys.readouterr().out


def test_bad_text_is_refused_before_overwrite_deletes_the_old_run(tmp_path, capsys):
    """The corpus is prepared (read whole, strict UTF-8) before --overwrite deletes anything; a wrong --out is said
    before any of that work."""
    data = tmp_path / "speech.txt"
    data.write_text(_text(100), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "lm", "--data", str(data), *LM_ARGS, "--out", str(run), "--max-steps", "1"]) == 0
    best = sorted(p.name for p in (run / "best").iterdir())
    bad = tmp_path / "bad.txt"
    bad.write_bytes(_text(300).encode() + b"caf\xe9\n")
    capsys.readouterr()
    args = ["train", "lm", "--data", str(bad), *LM_ARGS, "--out", str(run), "--max-steps", "1", "--overwrite"]
    assert main(args) == 2
    assert "not valid UTF-8 (byte 0xe9" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "best").iterdir()) == best  # the old run, untouched
    logs: list[str] = []
    with pytest.raises(ValueError, match="is not empty"):  # no --overwrite: refused before the corpus is read
        lm.setup(bad, run, "tiny", max_steps=1, log=logs.append)
    assert not any("preparing" in line or "tokenizer:" in line for line in logs)


def test_a_source_is_hashed_once_per_state_of_the_file(tmp_path, monkeypatch):
    """A run's fingerprint, its tokenizer's check and its data's check read a large text once, not three times; a
    write (the same size, other bytes) is read again."""
    from tformer.data import prepare as prepare_module

    path = tmp_path / "t.txt"
    path.write_text(_text(200))
    read: list[str] = []
    real = prepare_module._sha256
    monkeypatch.setattr(prepare_module, "_sha256", lambda p: read.append(Path(p).name) or real(p))
    first = tdata.fingerprint(path)
    tok = tdata.corpus_tokenizer(path, "char", None, cache=tmp_path / "c", log=lambda _: None)
    tdata.prepare_lm(path, tok, cache=tmp_path / "c", log=lambda _: None)
    assert read.count("t.txt") == 1
    stamp = path.stat().st_mtime_ns
    while path.stat().st_mtime_ns == stamp:  # a later write: the file's clock ticks (coarse on some systems)
        path.write_text(_text(200).swapcase())
    assert tdata.fingerprint(path) != first and read.count("t.txt") == 2


def test_valid_data_too_short_is_refused_unknown_text_said_and_a_change_refused_on_resume(tmp_path, capsys):
    from tformer.cli import main

    (tmp_path / "train.txt").write_text(_text(300, seed=1), encoding="utf-8")
    out = tmp_path / "run"
    words = ["train", "lm", "--data", str(tmp_path / "train.txt"), "--out", str(out), "--preset", "tiny"]
    words += ["--max-len", "16", "--batch-size", "2", "--no-progress", "--data-cache", str(tmp_path / "cache")]
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    assert main([*words, "--max-steps", "1", "--valid-data", str(tmp_path / "empty.txt")]) == 2
    assert "holds 0 token(s): too few to validate on" in capsys.readouterr().err and not out.exists()
    valid = tmp_path / "valid.txt"
    valid.write_text(_text(20, seed=2) + "ça été\n", encoding="utf-8")  # ç and é: not in the training text
    assert main([*words, "--max-steps", "1", "--valid-data", str(valid)]) == 0
    assert "note: 3 of the" in capsys.readouterr().out  # ç, é, é
    valid.write_text(_text(20, seed=3), encoding="utf-8")
    assert main([*words, "--max-steps", "2", "--valid-data", str(valid), "--resume"]) == 2
    assert "the text of --valid-data (SHA-256)" in capsys.readouterr().err


def test_a_folder_prepared_for_one_family_is_refused_by_the_others_naming_both(tmp_path, capsys):
    """Not a traceback (a translation manifest's tokenizer kind is a dict), not "no tokenizer": the one line that
    says which family the folder is for."""
    from tformer.translation.toy_corpus import builtin_pairs

    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{a}\t{b}\n" for a, b in builtin_pairs()[:200]), encoding="utf-8")
    cache = ["--data-cache", str(tmp_path / "c")]
    assert main(["data", "prepare", "translation", "--data", str(tsv), "--vocab-size", "300", *cache]) == 0
    folder = capsys.readouterr().out.strip().splitlines()[-1]
    for argv in (
        ["train", "lm", "--data", folder, *LM_ARGS, "--out", str(tmp_path / "r"), "--max-steps", "1"],
        ["train", "bert", "--data", folder, "--preset", "tiny", "--out", str(tmp_path / "r"), "--max-steps", "1"],
        ["data", "prepare", "lm", "--data", folder, *cache],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        family = argv[2] if argv[0] == "data" else argv[1]
        assert f"is a folder prepared for 'translation', not '{family}'" in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()
    with pytest.raises(SystemExit) as stop:  # argparse's refusal of --data
        main(["data", "prepare", "translation", "--data", folder, *cache])
    assert stop.value.code == 2 and "is prepared already: tformer train translation --data" in capsys.readouterr().err


def test_languages_that_a_tsv_or_the_built_in_corpus_cannot_follow_are_refused_not_trained_the_other_way(
    tmp_path, capsys
):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("I want time.\tJe veux du temps.\nA dog.\tUn chien.\n", encoding="utf-8")
    for data, said in (
        (str(tsv), f"{str(tsv)!r} is read as source<TAB>target"),
        ("builtin", "the built-in corpus is English→French"),
    ):
        argv = ["train", "translation", "--data", data, "--src-lang", "fr", "--tgt-lang", "en", "--preset", "tiny"]
        assert main([*argv, "--out", str(tmp_path / "r"), "--max-steps", "1"]) == 2
        err = capsys.readouterr().err
        assert f"--src-lang fr --tgt-lang en: {said}" in err and "leave them out" in err, err
    assert not (tmp_path / "r").exists()


def test_a_folder_is_read_without_its_hidden_files_or_tformers_own_and_with_its_linked_folders(tmp_path, capsys):
    """Jupyter's checkpoint copies, .git and a run whose --out lies in --data are not the user's text; a linked
    folder is (once, however many links lead to it)."""
    corpus, elsewhere = tmp_path / "proj", tmp_path / "wiki"
    (corpus / ".ipynb_checkpoints").mkdir(parents=True)
    (corpus / "a.txt").write_text(_text(20), encoding="utf-8")
    (corpus / ".ipynb_checkpoints" / "a-checkpoint.txt").write_text("a copy\n", encoding="utf-8")
    (corpus / ".notes.txt").write_text("hidden\n", encoding="utf-8")
    elsewhere.mkdir()
    (elsewhere / "w.txt").write_text(_text(20, seed=1), encoding="utf-8")
    (corpus / "wiki").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "back").symlink_to(corpus, target_is_directory=True)  # a loop
    assert [p.relative_to(corpus) for p in sources.find_sources(corpus)] == [Path("a.txt"), Path("wiki/w.txt")]
    run = ["train", "lm", "--data", str(corpus), *LM_ARGS, "--max-steps", "1", "--data-cache", str(tmp_path / "c")]
    assert main([*run, "--out", str(corpus / "runs" / "a")]) == 0
    assert (corpus / "runs" / "a" / "log.jsonl").is_file()
    assert [p.relative_to(corpus) for p in sources.find_sources(corpus)] == [Path("a.txt"), Path("wiki/w.txt")]
    assert main([*run, "--out", str(corpus / "runs" / "a"), "--resume", "--max-steps", "2"]) == 0  # the same text
    capsys.readouterr()
    for given, kind in ((corpus / "runs" / "a", "training run directory"), (corpus / "runs" / "a" / "best", "model")):
        argv = ["train", "lm", "--data", str(given), *LM_ARGS, "--max-steps", "1", "--out", str(tmp_path / "b")]
        assert main(argv) == 2  # its log.jsonl was read as a corpus: "no field 'text'"
        assert f"--data {str(given)!r} is a tformer {kind}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["byte_bpe", "char"])
def test_pieces_cut_where_a_bpe_reads_the_same_ids_as_from_the_whole_text(tmp_path, small_pieces, kind):
    """Blank lines, CRLF and trailing spaces make runs of whitespace that a BPE's pre-tokenizer reads whole: a piece
    ending inside one would read it otherwise. A file of one piece's size is not cut at all."""
    lines = _text(160, seed=3).split("\n")
    text = "".join(
        line + ("  \r\n" if i % 5 == 0 else "\r\n\r\n\n" if i % 7 == 0 else "\n") for i, line in enumerate(lines)
    )
    (tmp_path / "ws.txt").write_text(text, encoding="utf-8", newline="")
    (tmp_path / "small.txt").write_text("hello\n\n\nworld\n", encoding="utf-8", newline="")
    assert [t for _, t in sources.read_pieces([tmp_path / "small.txt"])] == ["hello\n\n\nworld\n"]
    tok = train_tokenizer(kind, [text], 400)
    assert kind == "char" or len(tok.encode("\n\n")) == 1  # whitespace runs are merged: not vacuous
    directory = tdata.prepare_lm(tmp_path / "ws.txt", tok, cache=tmp_path / "cache", log=lambda _: None)
    read = text.replace("\r\n", "\n")  # universal newlines
    assert torch.equal(tdata.open_tokens(directory)[1].tensor(), encode_documents(tok, [read]))


def test_a_text_saved_on_windows_reads_as_on_linux_as_python_and_datasets_read_it(tmp_path, small_pieces):
    """CR LF and a lone CR (old Mac) read as LF, as ``open(path)`` and ``datasets``' text loader read them: the
    same ids and the same character vocabulary, whatever the editor; JSONL's strings are read as they are."""
    unix = _text(120, seed=5)
    for name, text in (("lf", unix), ("crlf", unix.replace("\n", "\r\n")), ("cr", unix.replace("\n", "\r"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.txt").write_text(text, encoding="utf-8", newline="")
        assert "".join(t for _, t in sources.read_pieces([tmp_path / name / "t.txt"])) == unix, name
    with open(tmp_path / "crlf" / "t.txt", encoding="utf-8") as f:
        assert f.read() == unix  # what Python reads
    tok = tdata.corpus_tokenizer(tmp_path / "crlf", "char", None, cache=tmp_path / "cache", log=lambda _: None)
    assert tok.lacks("\r") and not tok.lacks("\n")  # no CR in the vocabulary
    streams = [
        tdata.open_tokens(tdata.prepare_lm(tmp_path / n, tok, cache=tmp_path / "cache", log=lambda _: None))[1]
        for n in ("lf", "crlf", "cr")
    ]
    assert all(torch.equal(s.tensor(), encode_documents(tok, [unix])) for s in streams)
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "a\r\nb"}) + "\r\n", encoding="utf-8", newline="")
    assert tdata.read_documents(tmp_path / "d.jsonl") == ["a\r\nb"]  # a string's own CR, as datasets keeps it


def test_a_piece_forced_to_end_inside_a_line_keeps_a_cr_with_its_lf():
    """A line longer than the largest piece is cut at any character: never between a CR and the LF after it,
    which would read as two line ends."""
    assert sources._cut(b"abc\r", True) == 3 and sources._cut(b"ab\xc3\xa9", True) == 2  # (é may go on)
    assert sources._cut(b"abcd", True) == 4 and sources._cut(b"ab\ncd\r", True) == 3
