"""A corpus of 10 MB, 100 MB and 1 GB of text prepared once and trained on (issue 47), beside nanoGPT's
``prepare.py`` + ``np.memmap`` approach on the same file and with the same tokenizer.

    python -m benchmarks.data                  # 10 MB, 100 MB, 1 GB: about 15 minutes on 2 cores, 3 GB of disk
    python -m benchmarks.data --sizes 10,100   # the smaller two
    python -m benchmarks.data --quick          # 1 and 2 MB, a tiny model: proves the script works

The text: Tiny Shakespeare's lines (../shared/data; else generated lines of words drawn from a Zipf law), shuffled
anew for every 1 MB block and written until the size is reached: English words in English proportions, never the
same block twice. Each measurement runs in a fresh process (:mod:`benchmarks.data_child`), in this order per size:

1. ``tokenizer``: a byte-level BPE of ``--vocab-size`` ids trained on a ``--sample`` sample (``corpus_tokenizer``);
2. ``prepare``: ``tformer.data.prepare_lm`` into a fresh cache; its seconds, MB/s, MB/s per core (``os.cpu_count()``:
   the ``tokenizers`` library encodes on every core) and its peak resident memory;
3. ``train``: ``tformer.lm.setup`` (the second run: it maps the shards) and ``--steps`` Trainer steps of the same
   GPT (``--preset``, ``--batch-size`` × ``--max-len``); its start-up (``setup``'s seconds), median step time (the
   first 3 steps left out), peak resident memory, and the milliseconds to read one batch from the map;
4. ``nanogpt_prepare`` and ``nanogpt_batches``: nanoGPT's approach with the same tokenizer; its seconds and peak,
   and its ``get_batch`` milliseconds.

And once, ``model`` : the same ``train`` on a 0.2 MB text: the model's training memory, with next to no data.

``--pairs 1,5`` (millions; ``--quick``: 2,000 pairs) does the same for translation: a TSV of that many
English–French pairs (Tatoeba's, ../shared/data, each pair's words shuffled anew per copy; else Zipf words), prepared
(``pairs_prepare``) then trained on (``pairs_train``, a ``--pairs-preset`` translator, ``--batch-tokens``), and its
pairs model: the same on 20,000 pairs.

Goals (issue 47): train's peak at 1 GB ≤ the model's training memory + 300 MB, and within 10% of the peak at 10 MB;
the median step at 1 GB within 5% of the one at 10 MB; preparation ≥ 10 MB/s per core for byte-level BPE; a second
run's start-up ≤ 5 s. Writes ``OUT/data.json`` and ``OUT/data.md`` with the machine (CPU, ISA class) measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import SHARED_DATA, base_parser, write_text
from tformer.outputs import WRITTEN

MB = 10**6


def write_corpus(path: Path, size: int, seed: int = 0) -> None:
    """``size`` bytes (about) of English text: blocks of shuffled Shakespeare lines, else Zipf-drawn words."""
    source = SHARED_DATA / "tinyshakespeare.txt"
    if source.is_file():
        lines = [line for line in source.read_text(encoding="utf-8").split("\n") if line.strip()]
    else:
        rng = np.random.default_rng(seed)
        words = ["".join(rng.choice(list("etaoinshrdlucmfwyp"), size=int(rng.integers(1, 9)))) for _ in range(5000)]
        ranks = np.minimum(rng.zipf(1.3, size=200_000), len(words)) - 1
        lines = [" ".join(words[r] for r in ranks[i : i + 9]) + "." for i in range(0, len(ranks), 9)]
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            order = rng.permutation(len(lines))
            block = "\n".join(lines[i] for i in order[: max(1, min(len(order), (size - written) // 40 + 1))]) + "\n\n"
            f.write(block)
            written += len(block.encode("utf-8"))


def write_pairs(path: Path, count: int, seed: int = 0) -> None:
    """``count`` English–French pairs: Tatoeba's, each copy's words shuffled within its sentence; else Zipf words."""
    source = SHARED_DATA / "tatoeba-eng-fra.tsv"
    rng = np.random.default_rng(seed)
    if source.is_file():
        pairs = [
            line.split("\t")[:2] for line in source.read_text(encoding="utf-8").split("\n") if line.count("\t") >= 1
        ]
    else:
        words = ["".join(rng.choice(list("etaoinshrdlu"), size=int(rng.integers(1, 8)))) for _ in range(3000)]
        pairs = [[" ".join(rng.choice(words, 8)), " ".join(rng.choice(words, 9))] for _ in range(20_000)]
    with open(path, "w", encoding="utf-8") as f:
        written, copy = 0, 0
        while written < count:
            order = rng.permutation(len(pairs))[: count - written]
            lines = []
            for i in order:
                src, tgt = pairs[i]
                if copy:  # a new copy: the same words, another order (other sentences to the batcher and BPE)
                    src = " ".join(rng.permutation(src.split()))
                    tgt = " ".join(rng.permutation(tgt.split()))
                lines.append(f"{src}\t{tgt}\n")
            f.write("".join(lines))
            written, copy = written + len(order), copy + 1


def child(kind: str, args: dict) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}  # the tokenizers library on every core
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.data_child", kind, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    if run.returncode != 0:
        raise RuntimeError(f"data_child {kind} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _pairs(args, work: Path, counts: list[int], cores: int) -> list[dict]:
    """Translation's rows: each TSV prepared and trained on, and the translator's memory on 20,000 pairs."""
    if not counts:
        return []
    common = {
        "preset": "tiny" if args.quick else args.pairs_preset,
        "vocab_size": 300 if args.quick else args.vocab_size,
        "batch_tokens": 256 if args.quick else args.batch_tokens,
        "steps": args.steps,
    }
    small = work / "pairs-model.tsv"
    write_pairs(small, 20_000)
    a = {**common, "data": str(small), "cache": str(work / "pc0"), "out": str(work / "pairs-run-model")}
    child("pairs_prepare", a)
    model = child("pairs_train", a)
    rows = []
    for count in counts:
        tsv = work / f"pairs-{count}.tsv"
        write_pairs(tsv, count, seed=count)
        a = {**common, "data": str(tsv), "cache": str(work / f"pc-{count}"), "out": str(work / f"pairs-run-{count}")}
        prep = child("pairs_prepare", a)
        train = child("pairs_train", a)
        rows.append(
            {
                "pairs": prep["pairs"],
                "tsv_bytes": tsv.stat().st_size,
                "prepare_seconds": prep["seconds"],
                "prepare_peak_mb": prep["peak_mb"],
                "startup_seconds": train["startup_seconds"],
                "step_seconds": _median_step(train["step_seconds"]),
                "train_peak_mb": train["peak_mb"],
                "train_anon_mb": train["anon_mb"],
                "model_peak_mb": model["peak_mb"],
            }
        )
        tsv.unlink()
        shutil.rmtree(work / f"pc-{count}", ignore_errors=True)
    return rows


def _cell(value: float | None, digits: int) -> str:
    """A table cell: the number, or a dash where it was not measured (``--no-nanogpt``)."""
    return "—" if value is None else f"{value:.{digits}f}"


def _median_step(seconds: list[float]) -> float:
    return statistics.median(seconds[3:] if len(seconds) > 5 else seconds)


WORK = "tformer benchmarks.data --work"  # a --work directory's record: this benchmark may write and delete there


def _work_dir(text: str) -> str:
    """--work: new, empty, or one this benchmark used before (its record says so); never a user's folder, whose
    ``corpus-1mb.txt`` or ``pc-2000`` it would replace or delete."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, expected a directory")
    entries = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    try:
        ours = json.loads((path / WRITTEN).read_text(encoding="utf-8")).get("written_by") == WORK
    except (OSError, ValueError, AttributeError):
        ours = False
    if entries and not ours:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise argparse.ArgumentTypeError(
            f"{text!r} holds {shown}: this benchmark writes and deletes corpora, caches and runs in --work; name a new "
            "or empty directory"
        )
    return text


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__, "benchmarks/results", "data.json", "data.md")
    p.add_argument(
        "--sizes",
        default=None,
        help="corpus sizes in MB (10^6 bytes), comma-separated (default 10,100,1000; --quick: 1,2)",
    )
    p.add_argument("--preset", default="small", help="the GPT's preset")
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--sample", type=int, default=32 << 20, help="bytes the BPE is trained on (--tokenizer-sample)")
    p.add_argument("--no-nanogpt", action="store_true", help="skip nanoGPT's side")
    p.add_argument("--pairs", default="", help="translation: millions of pairs, comma-separated (e.g. 1,5)")
    p.add_argument("--pairs-preset", default="small", help="the translator's preset")
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument(
        "--work",
        default=None,
        type=_work_dir,
        help="where the corpora, caches and runs go, written and deleted there: a new or empty directory, or one an "
        "earlier run of this benchmark used (default: a temporary folder)",
    )
    args = p.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1,2" if args.quick else "10,100,1000")).split(",") if s]
    pair_counts = [2000] if args.quick else [int(float(m) * 1e6) for m in args.pairs.split(",") if m]
    if args.quick:
        args.preset, args.max_len, args.batch_size, args.steps, args.vocab_size = "tiny", 32, 4, 6, 300
    from tformer.machine import describe

    cpu = describe()
    cores = os.cpu_count() or 1
    work = Path(args.work or tempfile.mkdtemp(prefix="tformer-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / WRITTEN).write_text(json.dumps({"written_by": WORK, "files": []}) + "\n", encoding="utf-8")
    common = {
        "preset": args.preset,
        "max_len": args.max_len,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "vocab_size": args.vocab_size,
        "sample": args.sample,
    }
    rows: list[dict] = []
    try:
        tiny = work / "model.txt"
        write_corpus(tiny, 200_000, seed=99)
        tiny_args = {**common, "data": str(tiny), "out": str(work / "run-model"), "cache": str(work / "c0")}
        child("tokenizer", tiny_args)  # trained apart, as for every corpus: the train process only maps
        model = child("train", tiny_args)
        for size in sizes:
            text = work / f"corpus-{size}mb.txt"
            write_corpus(text, size * MB, seed=size)
            nbytes = text.stat().st_size
            cache, nano = work / f"cache-{size}", work / f"nanogpt-{size}"
            nano.mkdir(exist_ok=True)
            a = {**common, "data": str(text), "cache": str(cache), "work": str(nano), "out": str(work / f"run-{size}")}
            tok = child("tokenizer", a)
            prep = child("prepare", a)
            train = child("train", a)
            row = {
                "size_mb": size,
                "text_bytes": nbytes,
                "tokens": prep["tokens"],
                "tokenizer_seconds": tok["seconds"],
                "prepare_seconds": prep["seconds"],
                "prepare_mb_s": nbytes / MB / prep["seconds"],
                "prepare_mb_s_per_core": nbytes / MB / prep["seconds"] / cores,
                "prepare_peak_mb": prep["peak_mb"],
                "startup_seconds": train["startup_seconds"],
                "step_seconds": _median_step(train["step_seconds"]),
                "train_peak_mb": train["peak_mb"],
                "train_anon_mb": train["anon_mb"],
                "batch_ms": train["batch_ms"]["median"],
            }
            if not args.no_nanogpt:
                nprep = child("nanogpt_prepare", a)
                nbatch = child("nanogpt_batches", a)
                row.update(
                    nanogpt_prepare_seconds=nprep["seconds"],
                    nanogpt_prepare_peak_mb=nprep["peak_mb"],
                    nanogpt_batch_ms=nbatch["batch_ms"]["median"],
                    prepare_speed_ratio=nprep["seconds"] / prep["seconds"],
                    batch_ms_ratio=train["batch_ms"]["median"] / nbatch["batch_ms"]["median"],
                )
            rows.append(row)
            shutil.rmtree(nano, ignore_errors=True)
            text.unlink()  # the disk back before the next size
            shutil.rmtree(cache, ignore_errors=True)
        pair_rows = _pairs(args, work, pair_counts, cores)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    model_peak = model["peak_mb"]
    goals, ratios = {}, {}
    if rows:  # (--sizes "": translation only)
        first, last = rows[0], rows[-1]
        goals = {
            "train peak at the largest ≤ model + 300 MB": last["train_peak_mb"] <= model_peak + 300,
            "train peak largest / smallest ≤ 1.10": last["train_peak_mb"] / first["train_peak_mb"] <= 1.10,
            "step largest / smallest ≤ 1.05": last["step_seconds"] / max(first["step_seconds"], 1e-9) <= 1.05,
            "prepare ≥ 10 MB/s per core (byte-level BPE)": min(r["prepare_mb_s_per_core"] for r in rows) >= 10,
            "second run start-up ≤ 5 s": max(r["startup_seconds"] for r in rows) <= 5,
        }
        ratios = {
            "train_peak_largest_over_smallest": last["train_peak_mb"] / first["train_peak_mb"],
            "train_peak_largest_minus_model_mb": last["train_peak_mb"] - model_peak,
            # the log's times are to 0.01 s: a tiny model's (--quick) median step may read 0
            "step_largest_over_smallest": last["step_seconds"] / max(first["step_seconds"], 1e-9),
        }
    if pair_rows:
        last_pairs = pair_rows[-1]
        goals["translation: train peak at the most pairs ≤ model + 300 MB"] = (
            last_pairs["train_peak_mb"] <= last_pairs["model_peak_mb"] + 300
        )
        goals["translation: second run start-up ≤ 5 s"] = max(r["startup_seconds"] for r in pair_rows) <= 5
    payload = {
        "benchmark": "data",
        "description": "prepare once, then train from the memory map: tformer beside nanoGPT's prepare.py + memmap",
        "machine": {"cpu": cpu.to_dict(), "cpu_count": cores, "quick": args.quick},
        "settings": common,
        "model_training_peak_mb": model_peak,
        "results": rows,
        "pairs": pair_rows,
        "ratios": ratios,
        "goals": goals,
    }
    write_text(args.out, "data.json", json.dumps(payload, indent=2))
    lines = [
        "# data",
        "",
        f"Machine: {cpu.cpu} ({cpu.machine_class} class), {cores} CPUs. Model: GPT {args.preset}, batch "
        f"{args.batch_size} × {args.max_len}, byte-level BPE {args.vocab_size}; the model's training peak "
        f"{model_peak:,.0f} MB (a 0.2 MB text).",
        "",
        "| text | ids | prepare s | MB/s per core | prepare peak MB | start-up s | step s | train peak MB | batch ms "
        "| nanoGPT prepare s | nanoGPT batch ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size_mb']:,} MB | {r['tokens']:,} | {r['prepare_seconds']:.1f} | {r['prepare_mb_s_per_core']:.2f} "
            f"| {r['prepare_peak_mb']:,.0f} | {r['startup_seconds']:.2f} | {r['step_seconds']:.3f} "
            f"| {r['train_peak_mb']:,.0f} | {r['batch_ms']:.2f} | {_cell(r.get('nanogpt_prepare_seconds'), 1)} "
            f"| {_cell(r.get('nanogpt_batch_ms'), 2)} |"
        )
    if pair_rows:
        lines += [
            "",
            f"Translation: a {args.pairs_preset} translator, --batch-tokens {args.batch_tokens}, BPE "
            f"{args.vocab_size}; its training peak on 20,000 pairs {pair_rows[0]['model_peak_mb']:,.0f} MB.",
            "",
            "| pairs | TSV MB | prepare s | prepare peak MB | start-up s | step s | train peak MB |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in pair_rows:
            lines.append(
                f"| {r['pairs']:,} | {r['tsv_bytes'] / MB:,.0f} | {r['prepare_seconds']:.1f} | {r['prepare_peak_mb']:,.0f} "
                f"| {r['startup_seconds']:.2f} | {r['step_seconds']:.3f} | {r['train_peak_mb']:,.0f} |"
            )
    lines += ["", *(f"- {'met' if ok else 'NOT met'}: {goal}" for goal, ok in goals.items())]
    write_text(args.out, "data.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
