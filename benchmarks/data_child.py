"""One measurement of :mod:`benchmarks.data` in a fresh process, its figures printed as one JSON line.

    python -m benchmarks.data_child KIND JSON-ARGS

Kinds:

* ``tokenizer``: ``tformer.data.corpus_tokenizer`` (byte-level BPE on a sample of the corpus, cached);
* ``prepare``: ``tformer.data.prepare_lm`` of the corpus into the cache (the tokenizer from the cache);
* ``nanogpt_prepare``: nanoGPT's ``prepare.py`` approach with the same tokenizer: the documents (lines) encoded a
  batch at a time (``encode_batch``, as its ``datasets.map``), each batch's ids appended to a file, then the whole
  copied into one ``uint16`` ``np.memmap`` (``train.bin``);
* ``train``: ``tformer.lm.setup`` on the prepared corpus (a second run: it maps what ``prepare`` wrote), then its
  Trainer's steps (``train lm`` as a user runs it, in the library); the start-up is the seconds ``setup`` took; then
  200 batches read from the map by the task's ``fetch`` (the Trainer's feed does it in a thread), timed apart;
* ``pairs_prepare`` and ``pairs_train``: translation's TSV prepared (``tformer.translation.run.prepare_data``) and
  trained on (``tformer.translation.setup``, the second run: it maps what was prepared), as for the language model;
* ``nanogpt_batches``: 200 batches as nanoGPT's ``get_batch`` makes them from ``train.bin`` (a new ``np.memmap``
  per batch, ``torch.randint`` starts, ``torch.stack`` of the rows), timed.

Memory: the peak resident set (VmHWM) of the process, and its anonymous part at the end (RssAnon; a memory map's
pages read are file-backed, the kernel's to drop).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

MB = 2**20


def _status(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / MB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory() -> dict:
    return {"peak_mb": round(_status("VmHWM"), 1), "anon_mb": round(_status("RssAnon"), 1)}


def _tokenizer(a: dict):
    from tformer.data import corpus_tokenizer

    return corpus_tokenizer(a["data"], "byte_bpe", a["vocab_size"], sample=a["sample"], cache=a["cache"], log=print)


def _batch_ms(make, n: int = 200) -> dict:
    """Milliseconds to make one batch (its rows read from the map): median and max of ``n``, after 10 untimed."""
    for _ in range(10):
        make()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        make()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median": float(np.median(times)), "max": max(times)}


def run(kind: str, a: dict) -> dict:
    torch.set_num_threads(a.get("threads") or torch.get_num_threads())
    out: dict = {"kind": kind}
    if kind == "tokenizer":
        start = time.perf_counter()
        _tokenizer(a)
        out["seconds"] = time.perf_counter() - start
    elif kind == "prepare":
        from tformer.data import open_tokens, prepare_lm

        tok = _tokenizer(a)
        start = time.perf_counter()
        directory = prepare_lm(a["data"], tok, cache=a["cache"], log=print)
        out["seconds"] = time.perf_counter() - start
        out["tokens"] = open_tokens(directory)[0]["tokens"]
    elif kind == "nanogpt_prepare":
        tok = _tokenizer(a)
        start = time.perf_counter()
        parts = Path(a["work"]) / "ids.u16"
        count = 0
        with open(parts, "wb") as sink, open(a["data"], encoding="utf-8") as f:
            while True:
                lines = f.readlines(4 << 20)  # a batch of documents (lines), as datasets.map hands them over
                if not lines:
                    break
                for ids in tok.encode_arrays(lines):
                    sink.write(np.append(ids, tok.eos_id).astype(np.uint16).tobytes())  # nanoGPT appends EOT
                    count += len(ids) + 1
        arr = np.memmap(Path(a["work"]) / "train.bin", dtype=np.uint16, mode="w+", shape=(count,))
        source = np.memmap(parts, dtype=np.uint16, mode="r")
        for lo in range(0, count, 1 << 24):  # nanoGPT writes train.bin in batches
            arr[lo : lo + (1 << 24)] = source[lo : lo + (1 << 24)]
        arr.flush()
        out["seconds"] = time.perf_counter() - start
        out["tokens"] = count
    elif kind == "train":
        from tformer import lm

        start = time.perf_counter()
        trainer = lm.setup(
            a["data"],
            a["out"],
            a["preset"],
            tokenizer="bpe",
            vocab_size=a["vocab_size"],
            tokenizer_sample=a["sample"],
            max_len=a["max_len"],
            batch_size=a["batch_size"],
            dropout=0.0,
            data_cache=a["cache"],
            overwrite=True,
            max_steps=a["steps"],
            eval_every=10**6,
            eval_blocks=1,
            log_every=1,
            progress=False,
            log=print,
        )
        out["startup_seconds"] = time.perf_counter() - start
        trainer.fit()
        records = [json.loads(line) for line in (Path(a["out"]) / "log.jsonl").read_text().splitlines()]
        elapsed = [r["elapsed_s"] for r in records if "train_loss" in r]
        out["step_seconds"] = [b - a_ for a_, b in zip([0.0, *elapsed], elapsed)]
        out["tokens_per_step"] = a["batch_size"] * a["max_len"]
        task = trainer.task
        g = torch.Generator().manual_seed(0)
        high = len(task.train_ids) - a["max_len"]
        out["batch_ms"] = _batch_ms(lambda: task.fetch(torch.randint(high, (a["batch_size"],), generator=g)))
    elif kind == "pairs_prepare":
        from tformer.data import open_pairs
        from tformer.translation.run import prepare_data

        start = time.perf_counter()
        directory = prepare_data(a["data"], vocab_size=a["vocab_size"], data_cache=a["cache"], log=print)
        out["seconds"] = time.perf_counter() - start
        out["pairs"] = len(open_pairs(directory))
    elif kind == "pairs_train":
        from tformer import translation

        start = time.perf_counter()
        trainer = translation.setup(
            a["data"],
            a["out"],
            preset=a["preset"],
            vocab_size=a["vocab_size"],
            batch_tokens=a["batch_tokens"],
            dropout=0.0,
            data_cache=a["cache"],
            bleu_sentences=0,
            overwrite=True,
            max_steps=a["steps"],
            eval_every=10**6,
            log_every=1,
            progress=False,
        )
        out["startup_seconds"] = time.perf_counter() - start
        trainer.fit()
        records = [json.loads(line) for line in (Path(a["out"]) / "log.jsonl").read_text().splitlines()]
        elapsed = [r["elapsed_s"] for r in records if "train_loss" in r]
        out["step_seconds"] = [b - a_ for a_, b in zip([0.0, *elapsed], elapsed)]
    elif kind == "nanogpt_batches":
        T, B = a["max_len"], a["batch_size"]
        g = torch.Generator().manual_seed(0)
        path = Path(a["work"]) / "train.bin"

        def get_batch():  # nanoGPT's get_batch: a new memmap each batch (it leaks otherwise, its comment says)
            data = np.memmap(path, dtype=np.uint16, mode="r")
            ix = torch.randint(len(data) - T - 1, (B,), generator=g)
            x = torch.stack([torch.from_numpy(data[i : i + T].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
            return x, y

        out["batch_ms"] = _batch_ms(get_batch)
    out.update(_memory())
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.loads(sys.argv[2]))))
