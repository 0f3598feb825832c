"""Translation's pairs from shards (issue 47): a TSV tokenized once into the cache with a length index, batched from
that index, read a batch at a time; the same pairs, batches and split as the in-memory path, exact resume across a
shard boundary, the cache's checks (changed source, damaged shard), the validation cap said."""

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from scripted import PEAK_MB
from tformer.cli import main
from tformer.data import open_pairs, pairs_tokenizers, prepare_pairs, tokenizer_hash
from tformer.data import pairs as pairs_module
from tformer.translation import run as translation_run
from tformer.translation.batching import EncodedPairs, budget_batches, make_batch, token_budget_batches
from tformer.translation.pairs import filter_pairs, load_splits, read_tsv
from tformer.translation.run import _shard_split, setup, train_tokenizers
from tformer.translation.task import TranslationTask
from tformer.translation.toy_corpus import builtin_pairs
from tformer.translation.translator import Translator


def _old_token_budget_batches(pairs, batch_tokens, seed, shuffle=True):
    """token_budget_batches as it was before the shards (a loop over a list of pairs): the reference."""
    rng = random.Random(seed)
    noise = [rng.random() for _ in pairs] if shuffle else [0.0] * len(pairs)
    order = sorted(range(len(pairs)), key=lambda i: (max(len(pairs[i][0]), len(pairs[i][1]) + 1), noise[i]))
    batches, current, longest = [], [], 0
    for i in order:
        size = max(len(pairs[i][0]), len(pairs[i][1]) + 1)
        if current and max(longest, size) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def _old_encode(translator, pairs, limit):
    """TranslationTask's encoding before the shards: lists, empty sides dropped, each side cut at ``limit``."""
    src = translator.src_tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=True)
    tgt = translator.tgt_tokenizer.encode_batch([t for _, t in pairs])
    return [(s[:limit], t[:limit]) for s, t in zip(src, tgt) if s and t]


def _tsv(path: Path, extra: str = "") -> Path:
    """The built-in pairs (a part) as a TSV, with what the reader must handle: a duplicated source (two references),
    an empty side, an over-long side, CRLF, a third column, blank lines."""
    pairs = builtin_pairs()[::3]
    lines = [f"{s}\t{t}\n" for s, t in pairs]
    lines[5] = f"{pairs[5][0]}\t{pairs[5][1]}\tCC-BY 2.0 (France) Attribution\r\n"
    lines += [f"{pairs[0][0]}\tune autre référence\n", "\n", "\r\n", f"\t{pairs[1][1]}\n", f"{'a' * 301}\tx\n"]
    lines += ["Hello\u00a0 there !\tBonjour\u202f!\n"]
    path.write_text("".join(lines) + extra, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A TSV, its joint BPE (trained on the training pairs, as a run trains it) and its prepared folder, in tiny
    shards (7 ids each: most pairs lie across a shard boundary)."""
    folder = tmp_path_factory.mktemp("pairs")
    tsv = _tsv(folder / "pairs.tsv")
    cache = folder / "cache"
    src_tok, tgt_tok = pairs_tokenizers(tsv, 300, True, seed=0, valid=0.1, test=0.1, cache=cache, log=lambda _: None)
    directory = prepare_pairs(tsv, src_tok, tgt_tok, cache=cache, shard_tokens=7, log=lambda _: None)
    return tsv, cache, src_tok, directory


def _translator(tok, max_len=64):
    from tformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    config = Seq2SeqConfig.preset("tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, max_len=max_len)
    return Translator(Seq2SeqTransformer(config), tok, tok)


def test_shards_hold_the_pairs_and_split_of_the_in_memory_path(corpus):
    tsv, _, tok, directory = corpus
    pairs = open_pairs(directory)
    assert len(pairs.manifest["shards"]) > 10  # tiny shards: pairs across their boundaries
    train, split = _shard_split(pairs, 0, 0.1, 0.1)
    old = load_splits(str(tsv), seed=0, valid=0.1, test=0.1, verbose=False)
    assert split.valid == old.valid and split.test == old.test  # the same held-out pairs, in the same order
    assert len(train) == len(old.train)
    translator = _translator(tok, max_len=6)  # cut at 5 ids: the cut is the batches', the shards keep every id
    expected = _old_encode(translator, old.train, 5)
    cut = train.cut(5)
    assert [cut.pair(i) for i in range(len(cut))] == expected
    kept, stats = filter_pairs(read_tsv(tsv))  # every pair kept, as the in-memory reader reads and filters them
    assert pairs.texts(np.arange(len(pairs))) == kept
    m = pairs.manifest
    assert (
        (m["pairs"], m["dropped_empty"], m["dropped_too_long"])
        == (stats.kept, stats.empty, stats.too_long)
        != (
            len(kept),
            0,
            0,
        )
    )


def test_the_tokenizer_is_trained_on_the_training_pairs_as_before(corpus):
    tsv, cache, tok, _ = corpus
    old = load_splits(str(tsv), seed=0, valid=0.1, test=0.1, verbose=False)
    assert tokenizer_hash(tok) == tokenizer_hash(train_tokenizers(old, 300, True)[0])  # all of them: the same BPE
    said: list[str] = []
    small = pairs_tokenizers(tsv, 300, True, seed=0, valid=0.1, test=0.1, sample=2000, cache=cache, log=said.append)
    assert "sample" in said[-1] and "--tokenizer-sample" in said[-1]
    assert tokenizer_hash(small[0]) != tokenizer_hash(tok)
    said.clear()
    again = pairs_tokenizers(tsv, 300, True, seed=0, valid=0.1, test=0.1, sample=2000, cache=cache, log=said.append)
    assert said == [] and tokenizer_hash(again[0]) == tokenizer_hash(small[0])  # cached: loaded, not trained


@pytest.mark.parametrize("budget", [1, 7, 64, 300])
@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_are_the_old_loops(budget, shuffle):
    rng = random.Random(budget)
    pairs = [([1] * rng.randint(1, 40), [2] * rng.randint(0, 40)) for _ in range(500)]
    for seed in (0, 3, 100_003 * 5 + 2):
        old = _old_token_budget_batches(pairs, budget, seed, shuffle)
        assert token_budget_batches(pairs, budget, seed, shuffle) == old
        sizes = np.array([max(len(s), len(t) + 1) for s, t in pairs])
        assert [b.tolist() for b in budget_batches(sizes, budget, seed, shuffle)] == old


def test_the_task_trains_on_the_old_batches_read_from_the_shards(corpus):
    tsv, _, tok, directory = corpus
    old_split = load_splits(str(tsv), seed=0, valid=0.1, test=0.1, verbose=False)
    train, split = _shard_split(open_pairs(directory), 0, 0.1, 0.1)
    translator = _translator(tok)
    sharded = TranslationTask(translator, train, split.valid, batch_tokens=40, seed=3)
    in_memory = TranslationTask(translator, old_split.train, old_split.valid, batch_tokens=40, seed=3)
    expected = _old_encode(translator, old_split.train, 63)
    for epoch in (0, 1):
        batches = sharded.train_batches(epoch)
        old = _old_token_budget_batches(expected, 40, 3 * 100_003 + epoch)
        assert [b.tolist() for b in batches] == old
        assert [b.tolist() for b in in_memory.train_batches(epoch)] == old
        for b, g in zip(batches, old):
            want = make_batch([expected[i] for i in g])
            got = sharded.fetch(b)
            assert torch.equal(got.src, want.src) and torch.equal(got.tgt_in, want.tgt_in)
            assert torch.equal(got.tgt_out, want.tgt_out)
            assert sharded.count_tokens(b) == want.n_tokens == sharded.count_tokens(got)
    model = translator.model.eval()  # no dropout: the same loss twice
    batch = sharded.train_batches(0)[0]
    loss_ids, n = sharded.loss(model, batch)  # the indices, or the fetched batch: the same loss
    loss_fetched, m = sharded.loss(model, sharded.fetch(batch))
    assert n == m and torch.equal(loss_ids, loss_fetched)


def test_in_memory_pairs_are_encoded_pairs_too():
    pairs = [([5, 6, 7], [8]), ([9], [10, 11]), ([], [3]), ([4], [])]
    encoded = EncodedPairs.of(pairs)
    assert [encoded.pair(i) for i in range(4)] == [(list(s), list(t)) for s, t in pairs]
    cut = encoded.cut(2)
    assert [cut.pair(i) for i in range(len(cut))] == [([5, 6], [8]), ([9], [10, 11])]


ARGS = [
    "train",
    "translation",
    "--preset",
    "tiny",
    "--vocab-size",
    "300",
    "--batch-tokens",
    "256",
    "--log-every",
    "1",
    "--warmup-steps",
    "5",
    "--eval-every",
    "6",
    "--bleu-sentences",
    "3",
    "--no-progress",
    "--valid",
    "0.1",
]


def _losses(out):
    return [
        (r["step"], r["train_loss"])
        for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
        if "train_loss" in r
    ]


def test_resume_is_exact_across_shard_boundaries(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tformer.data.shards.SHARD_TOKENS", 5)  # every batch reads across shard boundaries
    tsv = _tsv(tmp_path / "pairs.tsv")
    args = ARGS + ["--data", str(tsv), "--data-cache", str(tmp_path / "cache")]
    assert main(args + ["--out", str(tmp_path / "full"), "--max-steps", "10"]) == 0
    first = capsys.readouterr().out
    assert "preparing" in first and "split into" in first
    (prepared,) = (tmp_path / "cache").glob("translation-*")
    assert len(json.loads((prepared / "manifest.json").read_text())["shards"]) > 20
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "4"]) == 0
    assert "prepared before, checked" in capsys.readouterr().out  # the cache, not a second preparation
    assert main(args + ["--out", str(tmp_path / "cut"), "--max-steps", "10", "--resume"]) == 0
    full, cut = _losses(tmp_path / "full"), _losses(tmp_path / "cut")
    assert [s for s, _ in full] == list(range(1, 11))
    assert cut == full  # every step's loss, bit for bit
    held = (tmp_path / "full" / "data" / "valid.tsv").read_text(encoding="utf-8").splitlines()
    old = load_splits(str(tsv), seed=0, valid=0.1, test=0.05, verbose=False)
    assert held == [f"{s}\t{t}" for s, t in old.valid]
    # the BLEU of --bleu-sentences: the evaluation of the run
    evals = [json.loads(r) for r in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    assert any("bleu" in r for r in evals)


def test_a_changed_source_is_prepared_into_a_new_folder_the_old_kept(tmp_path, corpus):
    _, _, tok, _ = corpus
    tsv = _tsv(tmp_path / "pairs.tsv")
    said: list[str] = []
    first = prepare_pairs(tsv, tok, tok, cache=tmp_path, log=said.append)
    n = open_pairs(first).manifest["pairs"]
    said.clear()
    assert prepare_pairs(tsv, tok, tok, cache=tmp_path, log=said.append) == first
    assert said[0].startswith("data: prepared before, checked")
    _tsv(tsv, extra="One more.\tUn de plus.\n")
    said.clear()
    again = prepare_pairs(tsv, tok, tok, cache=tmp_path, log=said.append)
    assert again != first and "changed since it was prepared" in said[0] and f"{first}, prepared" in said[0]
    assert open_pairs(again).manifest["pairs"] == n + 1 and open_pairs(first).manifest["pairs"] == n  # kept


def test_a_damaged_shard_or_index_is_refused_and_rebuilt(tmp_path, corpus):
    _, _, tok, _ = corpus
    tsv = _tsv(tmp_path / "pairs.tsv")
    directory = prepare_pairs(tsv, tok, tok, cache=tmp_path, shard_tokens=50, log=lambda _: None)
    for name in ("shard-00001.bin", "lengths.npy"):
        path = directory / name
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # same size, other bytes
        path.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=f"--data .*{name} is damaged"):  # a prepared folder given: refused
            prepare_pairs(directory, tok, tok, cache=tmp_path, log=lambda _: None)
        said: list[str] = []
        assert prepare_pairs(tsv, tok, tok, cache=tmp_path, shard_tokens=50, log=said.append) == directory
        assert f"{name} is damaged" in said[0] and "preparing it again" in said[0]
        assert open_pairs(directory).manifest["pairs"] > 0


def test_another_tokenizer_is_prepared_apart(tmp_path, corpus):
    tsv, _, tok, directory = corpus
    other = train_tokenizers(load_splits(str(tsv), verbose=False), 200, True)[0]
    assert prepare_pairs(tsv, other, other, cache=tmp_path, log=lambda _: None) != directory
    separate = prepare_pairs(tsv, tok, other, cache=tmp_path, log=lambda _: None)  # two vocabularies
    assert (separate / "tokenizer" / "src_tokenizer.json").is_file()
    assert (separate / "tokenizer" / "tgt_tokenizer.json").is_file()
    with pytest.raises(ValueError, match="another tokenizer"):
        prepare_pairs(separate, tok, tok, cache=tmp_path, log=lambda _: None)


def test_the_validation_cap_is_said_and_keeps_the_test_part(tmp_path, monkeypatch, capsys):
    tsv = _tsv(tmp_path / "pairs.tsv")
    monkeypatch.setattr(translation_run, "VALID_CAP", 4)
    common = dict(preset="tiny", vocab_size=300, max_steps=1, bleu_sentences=2, progress=False)
    trainer = setup(str(tsv), tmp_path / "capped", valid=0.3, test=0.1, data_cache=tmp_path / "cache", **common)
    out = capsys.readouterr().out
    assert "(the 0.3 of the source sentences capped at 4 sentences; --valid N holds out N)" in out
    old = load_splits(str(tsv), seed=0, valid=0.3, test=0.1, verbose=False)
    valid = [tuple(line.split("\t")) for line in (tmp_path / "capped" / "data" / "valid.tsv").read_text().splitlines()]
    assert len({s for s, _ in valid}) == 4 and set(valid) < set(old.valid)  # the first 4 of the uncapped part
    assert trainer.task.bleu_sources == [s for s, _ in valid][:2]
    test = (tmp_path / "capped" / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert test == [f"{s}\t{t}" for s, t in old.test]  # the test part where it was
    assert set(trainer.fit()) >= {"val_loss", "bleu", "chrf"}  # BLEU on --bleu-sentences of the capped part
    setup(str(tsv), tmp_path / "count", valid=6, test=0.1, data_cache=tmp_path / "cache", **common)
    assert "capped" not in capsys.readouterr().out  # a count is held out as asked
    valid = (tmp_path / "count" / "data" / "valid.tsv").read_text().splitlines()
    assert len({line.split("\t")[0] for line in valid}) == 6


@pytest.mark.parametrize("data", ["pairs.tsv", "builtin"])
def test_setup_says_its_lines_to_log_as_the_other_families_do(tmp_path, capsys, data):
    """``log`` takes the set-up's lines (lm.setup's and bert.setup's ``log`` too): the split, the tokenizer, the
    prepared pairs; none of them reaches stdout, so a notebook or a logger keeps them."""
    if data != "builtin":
        data = str(_tsv(tmp_path / data))
    lines: list[str] = []
    common = dict(preset="tiny", vocab_size=300, max_steps=1, bleu_sentences=2, progress=False)
    setup(data, tmp_path / "run", data_cache=tmp_path / "cache", log=lines.append, **common)
    assert any(line.startswith("data: ") and "held out by source sentence" in line for line in lines), lines
    if data != "builtin":  # a TSV: its BPE and its shards are said too
        assert any(line.startswith("tokenizer: ") for line in lines) and len(lines) >= 3, lines
    assert capsys.readouterr().out == ""


def test_data_prepare_translation_then_train_on_the_folder(tmp_path, capsys):
    tsv = _tsv(tmp_path / "pairs.tsv")
    cache = tmp_path / "cache"
    prepare = ["data", "prepare", "translation", "--data", str(tsv), "--vocab-size", "300", "--valid", "0.1"]
    assert main(prepare + ["--data-cache", str(cache)]) == 0
    folder = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert (folder / "manifest.json").is_file() and (folder / "lengths.npy").is_file()
    args = ARGS + ["--data", str(tsv), "--data-cache", str(cache), "--out", str(tmp_path / "run"), "--max-steps", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "prepared before, checked" in out and "tokenizer:" not in out  # the tokenizer and pairs from the cache
    args = ARGS + ["--data", str(folder), "--out", str(tmp_path / "run2"), "--max-steps", "1"]
    assert main(args) == 0  # the prepared folder itself as --data
    out = capsys.readouterr().out
    assert "split into" in out and "tokenizer learned from" not in out  # the split its tokenizer was trained on
    assert json.loads((folder / "manifest.json").read_text())["tokenizer_split"] == {
        "seed": 0,
        "valid": 0.1,
        "test": 0.05,
    }
    assert main([*args[:-4], "--out", str(tmp_path / "seed1"), "--max-steps", "1", "--seed", "1"]) == 0
    said = f"note: {folder}'s tokenizer learned from the training pairs of --seed 0 --valid 0.1 --test 0.05; this run"
    assert said in capsys.readouterr().out
    ids = json.loads((folder / "manifest.json").read_text())["vocab_size"]["src"]
    assert yaml.safe_load((tmp_path / "run2" / "config.yaml").read_text())["vocab-size"] == ids  # the folder's
    other = [a if a != "300" else str(ids - 1) for a in ARGS]  # --vocab-size: fewer ids than the folder's tokenizer
    assert main(other + ["--data", str(folder), "--out", str(tmp_path / "run3"), "--max-steps", "1"]) == 2
    assert f"--vocab-size {ids - 1}: --data {str(folder)!r} is a folder prepared with a tokenizer of {ids} ids" in (
        capsys.readouterr().err
    )
    state = tmp_path / "run2" / "last" / "state.json"  # a run made before recorded the default, 8000: it resumes
    meta = json.loads(state.read_text())
    meta["run"]["settings"]["vocab_size"] = 8000
    state.write_text(json.dumps(meta))
    at = ARGS.index("--vocab-size")
    no_size = ARGS[:at] + ARGS[at + 2 :]
    assert main(no_size + ["--data", str(folder), "--out", str(tmp_path / "run2"), "--max-steps", "2", "--resume"]) == 0
    multi30k = tmp_path / "multi30k"
    multi30k.mkdir()
    with pytest.raises(SystemExit):  # an empty folder: a TSV file is what it takes
        main(["data", "prepare", "translation", "--data", str(multi30k)])
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"{str(multi30k)!r} is a folder; this takes a TSV file of source<TAB>target pairs")
    )
    (multi30k / "train.en").write_text("a cat.\n")
    with pytest.raises(SystemExit):  # a Multi30k folder is read by train translation as it is, not prepared
        main(["data", "prepare", "translation", "--data", str(multi30k)])
    assert (
        f"is not prepared: `tformer train translation --data {multi30k}` reads it as it is" in capsys.readouterr().err
    )


def test_the_split_shuffle_is_python_s_and_kept_in_the_cache(tmp_path, monkeypatch):
    """From SHUFFLE_KEPT_FROM sentences on, the split's shuffle (random.Random(seed).shuffle, ~2 s at 5M) is kept in
    the cache and read back; a damaged copy is never used, and a cache that cannot be written costs only the time."""
    monkeypatch.setattr(pairs_module, "SHUFFLE_KEPT_FROM", 10)
    expected = list(range(1000))
    random.Random(3).shuffle(expected)
    assert pairs_module.shuffled(1000, 3, tmp_path).tolist() == expected  # made, and kept
    kept = tmp_path / "shuffle-1000-3" / "order.npy"
    assert kept.is_file()
    made = []
    monkeypatch.setattr(pairs_module, "_shuffle", lambda n, seed: made.append(n) or np.arange(n, dtype=np.int32))
    assert pairs_module.shuffled(1000, 3, tmp_path).tolist() == expected and not made  # read back, not made
    data = bytearray(kept.read_bytes())
    data[-1] ^= 0xFF
    kept.write_bytes(bytes(data))
    assert pairs_module.shuffled(1000, 3, tmp_path).tolist() == list(range(1000)) and made == [1000]  # made again
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert pairs_module.shuffled(50, 1, blocked).tolist() == list(range(50))  # cannot be kept: made all the same
    position, *_ = pairs_module.held_out_positions(9, 0, 2, 2)  # under the threshold: never kept
    assert sorted(position.tolist()) == list(range(9))


def test_held_out_text_is_read_in_any_order_across_reads(corpus, monkeypatch):
    tsv, _, _, directory = corpus
    monkeypatch.setattr(pairs_module, "_READ", 40)  # a read of text.bin holds a pair or two
    pairs = open_pairs(directory)
    kept, _ = filter_pairs(read_tsv(tsv))
    order = np.random.default_rng(0).permutation(len(pairs))[: len(pairs) // 2]
    assert pairs.texts(order) == [kept[i] for i in order.tolist()]
    assert pairs.texts(np.zeros(0, dtype=np.int64)) == []


def test_training_holds_16_bytes_a_pair_and_cut_shares_them(corpus):
    _, _, tok, directory = corpus
    train, _ = _shard_split(open_pairs(directory), 0, 0.1, 0.1)
    assert (train.src_at.dtype, train.src_len.dtype, train.tgt_len.dtype) == (np.int64, np.int32, np.int32)
    task = TranslationTask(_translator(tok, max_len=6), train, [], batch_tokens=40)
    assert task.train_ids.src_at is train.src_at and task.train_ids.limit == 5  # no copy when no pair is dropped


PAIRS_MEMORY_CHILD = (
    r"""
import json, resource, sys
from tformer import translation

data, out, cache = sys.argv[1:4]
translation.train(data, out, preset="tiny", vocab_size=300, batch_tokens=256, max_steps=4, valid=20, test=20,
                  bleu_sentences=0, eval_every=10**6, data_cache=cache, progress=False)
"""
    + PEAK_MB
)


def test_resident_memory_stays_flat_as_the_pairs_grow(tmp_path):
    """A child process prepares and trains 4 steps on 5,000 and on 100,000 pairs: the peak resident memory differs by
    far less than the pairs would take as Python objects (the in-memory path: ~1 KB a pair, ~95 MB more)."""
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("etaoinshrdlu"), size=int(rng.integers(2, 7)))) for _ in range(500)]
    peaks = {}
    for count in (5_000, 100_000):
        path = tmp_path / f"p{count}.tsv"
        chosen = rng.choice(words, size=(count, 12))
        path.write_text("".join(f"{' '.join(r[:6])}\t{' '.join(r[6:])}\n" for r in chosen.tolist()), encoding="utf-8")
        run = subprocess.run(
            [sys.executable, "-c", PAIRS_MEMORY_CHILD, str(path), str(tmp_path / f"r{count}"), str(tmp_path / "c")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        peaks[count] = json.loads(run.stdout.strip().splitlines()[-1])["peak_mb"]
    assert peaks[100_000] - peaks[5_000] < 40, peaks
