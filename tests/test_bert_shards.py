"""BERT's MLM + NSP pretraining read from memory-mapped shards (tformer.data.sentences), as it read documents in memory.

The shards hold the sentences the in-memory reader (``read_sentence_documents``) gives, across pieces and shard
boundaries; the NSP pairs and the batches are those of the earlier code (kept below as the reference); a resumed run
equals the uninterrupted one with every batch read across shard boundaries; a changed source or a damaged shard or
index is said and prepared again, a prepared folder given as --data refused; a capped validation part is said; the
WordPiece is trained on the training sentences (a sample of a larger corpus), kept in the cache.
"""

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tformer import bert
from tformer.bert import run as bert_run
from tformer.bert.pretraining import (
    BertPretrainTask,
    MLMCollator,
    PairBatch,
    collate,
    nsp_arrays,
    nsp_pairs,
    read_sentence_documents,
    split_documents,
)
from tformer.cli import main
from tformer.data import sentences as sentences_module
from tformer.data import shards, sources
from tformer.data.sentences import Sentences, held_out_sentences, prepare_sentences, sentences_tokenizer
from tformer.tokenizers import train_tokenizer
from tformer.tokenizers.wordpiece import truncate_pair

WORDS = "the king is dead long live the queen and all her men ride to war at dawn".split()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models train faster on one thread, and several threads thrash on a shared, busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _text(n_docs: int, seed: int = 0, longest: int = 14) -> str:
    """Documents of sentences with what a real file has: several blank lines, a blank line of spaces, indented and
    CRLF lines, a long sentence now and then."""
    rng = random.Random(seed)
    out = []
    for d in range(n_docs):
        for s in range(rng.randint(1, 6)):
            n = rng.randint(1, 60 if s == 2 and d % 5 == 0 else longest)
            line = " ".join(rng.choice(WORDS) for _ in range(n))
            out.append(("  " if s % 3 == 1 else "") + line + ("\r" if d % 7 == 3 else ""))
        out.append(["", "", "   ", "\n"][d % 4].rstrip("\n"))
    return "\n".join(out) + "\n"


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of about 300 bytes and shards of 40 ids: a small file crosses many boundaries."""
    monkeypatch.setattr(sources, "PIECE_BYTES", 300)
    monkeypatch.setattr(shards, "SHARD_TOKENS", 40)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer("wordpiece", [_text(40, seed=9)], vocab_size=120, min_frequency=1)


def _documents(corpus: Sentences) -> list[list[list[int]]]:
    """The ids of each sentence of each document of ``corpus``, read back."""
    out, at = [], 0
    for size in corpus.document_sizes().tolist():
        out.append([corpus.ids(i).tolist() for i in range(at, at + size)])
        at += size
    return out


# ------------------------------------------------------------------------------ the sentences, as before


def test_the_shards_hold_the_sentences_of_the_in_memory_reader(tmp_path, small_pieces, tok):
    text = tmp_path / "docs.txt"
    text.write_text(_text(60), encoding="utf-8")
    tsv = tmp_path / "pairs.tsv"  # a repeated source read once; a line with an empty first column; blank lines
    tsv.write_text("Go.\tVa !\nGo.\tMarche.\n\n\tVide\nHi.\tSalut !\nGo.\tEncore.\n  Hi. \tx\n", encoding="utf-8")
    for data in (text, tsv):
        said: list[str] = []
        directory = prepare_sentences(data, tok, cache=tmp_path / "cache", log=said.append)
        corpus = Sentences.open(directory)
        expected = [tok.encode_batch(doc) for doc in read_sentence_documents(data)]
        assert _documents(corpus) == expected
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["sentences"] == len(corpus) == sum(map(len, expected))
        assert manifest["documents"] == len(expected) and manifest["task"] == "bert"
        names = {f["file"] for f in manifest["files"]}
        assert {"sentences.bin", "documents.bin"} <= names and len(manifest["shards"]) > (3 if data == text else 0)
        assert any(line.startswith(f"prepared: {len(expected):,} document(s)") for line in said)
    # the cut between training and held-out sentences falls where split_documents puts it, in a document too
    docs = read_sentence_documents(text)
    corpus = Sentences.open(prepare_sentences(text, tok, cache=tmp_path / "cache", log=lambda _: None))
    for valid in (0.1, 7, 0):
        train, held = split_documents(docs, valid)
        mapped = corpus.split(len(corpus) - held_out_sentences(len(corpus), valid))
        assert [_documents(part) for part in mapped] == [[tok.encode_batch(d) for d in part] for part in (train, held)]


def test_a_folder_and_records_are_documents_of_their_lines(tmp_path, tok):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("the king\nis dead\n", encoding="utf-8")
    (tmp_path / "docs" / "b.txt").write_text("long live\n\nthe queen\nat dawn\n", encoding="utf-8")
    records = tmp_path / "docs.jsonl"
    texts = ["the king\nis dead", "long live\n\nthe queen\nat dawn"]
    records.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    for data in (tmp_path / "docs", records):
        corpus = Sentences.open(prepare_sentences(data, tok, cache=tmp_path / "cache", log=lambda _: None))
        assert corpus.document_sizes().tolist() == [2, 1, 2]  # a file or a record ends its document
        assert [tok.decode(corpus.ids(i).tolist()) for i in range(len(corpus))] == [
            "the king",
            "is dead",
            "long live",
            "the queen",
            "at dawn",
        ]


# ------------------------------------------------------------------- the earlier code: pairs and batches


def _old_nsp_pairs(doc_sizes: list[int], seed: int = 0) -> list[tuple[int, int, int]]:
    """tformer.bert.pretraining.nsp_pairs before the shards, verbatim."""
    starts = [0, *itertools.accumulate(doc_sizes)][:-1]
    total = sum(doc_sizes)
    rng = random.Random(seed)
    pairs = []
    for start, size in zip(starts, doc_sizes):
        for a in range(start, start + size - 1):
            if rng.random() < 0.5:
                pairs.append((a, a + 1, 0))
                continue
            for _ in range(10):
                b = rng.randrange(total)
                if not start <= b < start + size:
                    break
            else:
                b = rng.randrange(total - 2)
                b += 2 if b >= a else 0
            pairs.append((a, b, 1))
    rng.shuffle(pairs)
    return pairs


def _old_batches(tok, docs: list[list[str]], seed: int, max_len: int, batch_size: int, valid: bool = False):
    """BertPretrainTask's batches before the shards: the sentences encoded in memory, the pairs a list."""
    sentences = tok.encode_batch([s for d in docs for s in d])
    sizes = [len(d) for d in docs]
    collator = MLMCollator(tok)
    if valid:
        pairs = _old_nsp_pairs(sizes, seed=12345)
        seeds = [12345 + k for k in range(0, len(pairs), batch_size)]
    else:
        epoch_seed = seed
        pairs = _old_nsp_pairs(sizes, epoch_seed)
        seeds = [epoch_seed * 100_003 + i for i in range((len(pairs) + batch_size - 1) // batch_size)]
    out = []
    for i, k in enumerate(range(0, len(pairs), batch_size)):
        rows = [(*tok.pair(sentences[a], sentences[b], max_len), y) for a, b, y in pairs[k : k + batch_size]]
        out.append(collator(collate(rows, tok.pad_id), torch.Generator().manual_seed(seeds[i])))
    return out


def test_the_nsp_pairs_are_the_earlier_ones():
    rng = random.Random(1)
    for _ in range(40):
        sizes = [rng.randint(0, 9) for _ in range(rng.randint(1, 40))]
        if sum(sizes) < 3:
            continue
        seed = rng.randrange(1000)
        old = _old_nsp_pairs(sizes, seed)
        assert nsp_pairs(sizes, seed) == old
        a, b, y = nsp_arrays(np.asarray(sizes), seed)
        assert a.dtype == np.int64 and y.dtype == np.int8 and list(zip(a.tolist(), b.tolist(), y.tolist())) == old
    assert nsp_pairs([1, 1, 1], 0) == [] and nsp_pairs([60], 3) == _old_nsp_pairs([60], 3)  # one document


def test_a_sentence_read_up_to_max_len_ids_lays_out_the_same_pair():
    for la, lb, budget in itertools.product(range(0, 12), range(0, 12), range(0, 9)):
        a, b = list(range(la)), list(range(100, 100 + lb))
        assert truncate_pair(a[: budget + 3], b[: budget + 3], budget) == truncate_pair(a, b, budget)


def test_the_batches_read_from_the_shards_are_the_earlier_ones(tmp_path, small_pieces, tok):
    data = tmp_path / "docs.txt"
    data.write_text(_text(50, seed=3), encoding="utf-8")
    docs = read_sentence_documents(data)
    train_docs, valid_docs = split_documents(docs, 0.15)
    corpus = Sentences.open(prepare_sentences(data, tok, cache=tmp_path, log=lambda _: None))
    train, held = corpus.split(len(corpus) - held_out_sentences(len(corpus), 0.15))
    seed, max_len, rows = 3, 24, 8
    task = BertPretrainTask(tok, train, held, max_len=max_len, batch_size=rows, seed=seed)
    in_memory = BertPretrainTask(tok, train_docs, valid_docs, max_len=max_len, batch_size=rows, seed=seed)
    fields = ("ids", "token_type_ids", "attention_mask", "labels", "mlm_labels")
    for epoch in (0, 1):
        old = _old_batches(tok, train_docs, seed * 1_000_003 + epoch, max_len, rows)
        for made in (task.train_batches(epoch), in_memory.train_batches(epoch)):
            assert len(made) == len(old)
            for i, (new, before) in enumerate(zip(made, old)):
                assert isinstance(new, PairBatch) and new.key == (seed * 1_000_003 + epoch, i)
                fetched = task.fetch(new)  # what the Trainer's feed reads, in a thread
                assert all(torch.equal(getattr(fetched, f), getattr(before, f)) for f in fields)
                assert task.count_tokens(made[i]) == int((before.mlm_labels != -100).sum())  # kept by fetch
                assert not task._counts  # and handed over: nothing is left behind
    old_valid = _old_batches(tok, valid_docs, seed, max_len, rows, valid=True)
    assert len(task.valid_batches) == len(old_valid) > 0
    for new, before in zip(task.valid_batches, old_valid):
        assert all(torch.equal(getattr(new, f), getattr(before, f)) for f in fields)
    # the loss of a batch read in the step equals that of the batch the feed fetched
    from tformer import Bert, BertConfig

    model = Bert(BertConfig.preset("tiny", vocab_size=tok.vocab_size, max_len=max_len, pad_id=tok.pad_id)).eval()
    batch = task.train_batches(0)[1]
    assert torch.equal(task.loss(model, batch)[0], task.loss(model, task.fetch(batch))[0])


# ---------------------------------------------------------------------------------------- runs and cache

ARGS = [
    "train",
    "bert",
    "--preset",
    "tiny",
    "--vocab-size",
    "120",
    "--max-len",
    "24",
    "--batch-size",
    "4",
    "--valid",
    "6",
    "--log-every",
    "1",
    "--eval-every",
    "5",
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
    monkeypatch.setattr(shards, "SHARD_TOKENS", 7)  # nearly every pair reads across a shard boundary
    data = tmp_path / "docs.txt"
    data.write_text(_text(12, seed=5, longest=6), encoding="utf-8")
    args = ARGS + ["--data", str(data), "--data-cache", str(tmp_path / "cache")]
    assert main(args + ["--out", str(tmp_path / "full"), "--max-steps", "14"]) == 0
    assert "preparing" in capsys.readouterr().out
    (prepared,) = (tmp_path / "cache").glob("bert-*")
    assert len(json.loads((prepared / "manifest.json").read_text())["shards"]) > 20
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "data: prepared before, checked" in out and "tokenizer:" not in out  # both from the cache
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "14", "--resume"]) == 0
    full, cut = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    epochs = {r["epoch"] for r in map(json.loads, (tmp_path / "full" / "log.jsonl").read_text().splitlines())}
    assert [s for s, _ in full] == list(range(1, 15)) and len(epochs - {None}) > 1  # across an epoch too
    assert cut == full  # bit for bit


def test_a_changed_source_is_said_and_prepared_into_a_new_folder(tmp_path, tok):
    data = tmp_path / "docs.txt"
    data.write_text(_text(10), encoding="utf-8")
    said: list[str] = []
    first = prepare_sentences(data, tok, cache=tmp_path, log=said.append)
    said.clear()
    assert prepare_sentences(data, tok, cache=tmp_path, log=said.append) == first
    assert said == [f"data: prepared before, checked: {first}"]
    data.write_text(_text(10) + "\none more sentence\n", encoding="utf-8")
    said.clear()
    again = prepare_sentences(data, tok, cache=tmp_path, log=said.append)
    assert again != first and "docs.txt changed since it was prepared" in said[0] and f"{first}, prepared" in said[0]
    assert _documents(Sentences.open(again))[-1] == [tok.encode("one more sentence")]
    assert _documents(Sentences.open(first))[-1] != [tok.encode("one more sentence")]  # kept as it was


@pytest.mark.parametrize("name", ["shard-00001.bin", "sentences.bin", "documents.bin"])
def test_a_damaged_shard_or_index_is_refused_and_rebuilt(tmp_path, tok, name):
    data = tmp_path / "docs.txt"
    data.write_text(_text(10), encoding="utf-8")
    directory = prepare_sentences(data, tok, cache=tmp_path, shard_tokens=50, log=lambda _: None)
    expected = _documents(Sentences.open(directory))
    path = directory / name
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x7F  # same size, another byte
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"--data .*{name} is damaged"):  # a prepared folder given: refused
        prepare_sentences(directory, tok, cache=tmp_path, log=lambda _: None)
    said: list[str] = []
    assert prepare_sentences(data, tok, cache=tmp_path, shard_tokens=50, log=said.append) == directory
    assert f"{name} is damaged" in said[0] and said[0].endswith(": preparing it again")
    assert _documents(Sentences.open(directory)) == expected


def test_another_tokenizer_is_prepared_apart_and_a_folder_of_another_refused(tmp_path, tok):
    data = tmp_path / "docs.txt"
    data.write_text(_text(10), encoding="utf-8")
    first = prepare_sentences(data, tok, cache=tmp_path, log=lambda _: None)
    other = train_tokenizer("wordpiece", [_text(10)], vocab_size=60, min_frequency=1)
    assert prepare_sentences(data, other, cache=tmp_path, log=lambda _: None) != first
    with pytest.raises(ValueError, match="another tokenizer"):
        prepare_sentences(first, other, cache=tmp_path, log=lambda _: None)


def test_the_held_out_part_is_capped_said_and_a_count_kept(tmp_path, monkeypatch, capsys):
    assert held_out_sentences(1000, 0.05) == 50 and held_out_sentences(1000, 0.05, cap=20) == 20
    assert held_out_sentences(20, 0.01) == 3 and held_out_sentences(1000, 0) == 0  # a pair needs 3
    assert held_out_sentences(1000, 400, cap=20) == 400  # a count is held out as asked
    with pytest.raises(ValueError, match=r"valid=98 leaves too little training text \(100 sentences in all\)"):
        held_out_sentences(100, 98)
    for empty in (0, 2):  # empty files: the text is at fault, not --valid
        with pytest.raises(ValueError, match=rf"^the text holds {empty} sentence\(s\), too few to train on"):
            held_out_sentences(empty, 0.05)
    data = tmp_path / "docs.txt"
    data.write_text(_text(30), encoding="utf-8")
    total = len([s for d in read_sentence_documents(data) for s in d])
    monkeypatch.setattr(bert_run, "VALID_CAP", 5)
    common = dict(preset="tiny", vocab_size=120, max_len=24, max_steps=1, data_cache=tmp_path / "c", progress=False)
    trainer = bert.setup(data, tmp_path / "capped", valid=0.5, **common)
    out = capsys.readouterr().out
    assert f"data: {total - 5} training / 5 held-out sentences" in out
    assert "(the last 0.5 capped at 5 sentences; --valid N holds out N)" in out
    assert len(trainer.task.valid) == 5 and len(trainer.task.train) == total - 5
    bert.setup(data, tmp_path / "count", valid=8, **common)
    out = capsys.readouterr().out
    assert f"data: {total - 8} training / 8 held-out sentences" in out and "capped" not in out


def test_the_wordpiece_is_trained_on_the_training_sentences_or_a_sample_and_kept(tmp_path, monkeypatch):
    data = tmp_path / "docs.txt"
    data.write_text(_text(80), encoding="utf-8")
    seen: list[list[str]] = []
    real = sentences_module.train_tokenizer

    def recording(kind, texts, vocab_size=None, min_frequency=None):
        texts = list(texts)
        seen.append(texts)
        return real(kind, texts, vocab_size, min_frequency)

    monkeypatch.setattr(sentences_module, "train_tokenizer", recording)
    said: list[str] = []
    sentences_tokenizer(data, 100, valid=0.1, cache=tmp_path / "c", log=said.append)
    train, _ = split_documents(read_sentence_documents(data), 0.1)
    assert seen == [[s for d in train for s in d]]  # the in-memory run's: the held-out sentences left out
    assert (
        said[0].startswith("tokenizer: wordpiece, ") and f"ids, from the {len(seen[0]):,} training sentences" in said[0]
    )
    said.clear()
    sentences_tokenizer(data, 100, valid=0.1, cache=tmp_path / "c", log=said.append)
    assert said == [] and len(seen) == 1  # loaded from the cache, not trained again
    size = data.stat().st_size
    sentences_tokenizer(data, 100, valid=0.1, sample=size // 4, cache=tmp_path / "c", log=said.append)
    sample = seen[-1]
    assert size // 8 < sum(len(s.encode()) + 1 for s in sample) <= size // 4
    everything = [s for d in read_sentence_documents(data) for s in d]
    assert sample != everything[: len(sample)] and sample[-1] in everything[-8:]  # spread over it, not its start
    assert "(--tokenizer-sample)" in said[0]


def test_data_prepare_bert_then_train_from_the_cache_and_the_folder(tmp_path, capsys):
    data = tmp_path / "docs.txt"
    data.write_text(_text(20), encoding="utf-8")
    cache = ["--data-cache", str(tmp_path / "cache")]
    assert main(["data", "prepare", "bert", "--data", str(data), "--vocab-size", "120", "--valid", "6", *cache]) == 0
    out = capsys.readouterr().out
    folder = Path(out.strip().splitlines()[-1])
    assert "tokenizer: wordpiece" in out and (folder / "sentences.bin").is_file()
    assert main(ARGS + ["--data", str(data), *cache, "--out", str(tmp_path / "r"), "--max-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert f"data: prepared before, checked: {folder}" in out and "tokenizer:" not in out and "preparing" not in out
    assert main(ARGS + ["--data", str(folder), "--out", str(tmp_path / "r2"), "--max-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "held-out sentences" in out  # the prepared folder itself, its own WordPiece
    ids = json.loads((folder / "manifest.json").read_text())["vocab_size"]
    assert ids < 120 and f"the model has its tokenizer's {ids} ids (--vocab-size 120 asked" in out  # said
    at = ARGS.index("--vocab-size")
    fewer = [*ARGS[:at], "--vocab-size", str(ids - 1), *ARGS[at + 2 :]]  # another WordPiece's: refused
    assert main(fewer + ["--data", str(folder), "--out", str(tmp_path / "r3"), "--max-steps", "1"]) == 2
    assert f"--vocab-size {ids - 1}: --data {str(folder)!r} is a folder prepared with a tokenizer of {ids} ids" in (
        capsys.readouterr().err
    )
