"""Each process's memory when two processes train one model: PyTorch's ``DistributedDataParallel`` (a whole copy of
the weights, gradients and AdamW's moments in each: the anchor) against ``--fsdp`` (FSDP2: each holds half, and only
rank 0 builds the model whole, the other on the ``meta`` device), and one process alone on the same global batch.

    python -m benchmarks.fsdp_memory            # a GPT of GPT-2 small's layers (12 × 768, ~85M parameters): ~3 minutes
    python -m benchmarks.fsdp_memory --quick    # a tiny GPT: proves the script works (seconds)

Each configuration is ``tformer train lm`` on a generated text of characters, float32, ``--preset base`` with context
128 and batch 1 a process (``--accum-steps 2`` alone), 2 optimizer steps, one evaluation of 2 blocks, and ``best/`` and
``last/`` written; two processes are ``python -m torch.distributed.run --standalone --nproc-per-node 2`` (gloo), one
thread each. Every process runs :mod:`benchmarks.fsdp_memory_child`, which reads, in MB above its own baseline (torch
and tformer imported): the peak while the run is set up (the model built, sharded, the optimizer made), the resident set
when training starts, and the peak of training (the steps, the evaluation, the files: rank 0 gathers each tensor whole
to write it), and the resident set at the end. Each process runs with glibc's ``MALLOC_MMAP_THRESHOLD_=65536``: a block
of 64 KiB or more is mapped alone and given back when freed, so the resident set is what the process holds; with glibc's
default (``--glibc-default``) the heap keeps much of what FSDP2's gathered layers and whole gradients freed, and that
counts as resident too. ``layers_weights_mb``: the layers' float32 matrices, for scale.

Writes ``OUT/fsdp_memory.json`` and ``OUT/fsdp_memory.md``; the ratio is each figure over DDP's same rank.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import base_parser, machine_info, write_text

ROOT = Path(__file__).resolve().parents[1]
MAPPED_FROM = 65536  # glibc's MALLOC_MMAP_THRESHOLD_ for the processes measured (unless --glibc-default)
FIGURES = ("setup_peak_mb", "setup_resident_mb", "training_peak_mb", "end_resident_mb")


def _text(path: Path, words: int, seed: int = 0) -> None:
    """A text of made-up words (the model's size, not the text, is what is measured)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(500)]
    lines = [" ".join(rng.choice(vocab) for _ in range(12)) for _ in range(words // 12)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _configurations(work: Path, quick: bool) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (launcher, tformer's arguments)."""
    model = ["--preset", "tiny"] if quick else ["--preset", "base"]
    train = ["train", "lm", "--data", str(work / "text.txt"), *model, "--tokenizer", "char", "--max-len", "128"]
    train += ["--batch-size", "1", "--max-steps", "2", "--eval-every", "2", "--eval-blocks", "2", "--no-progress"]
    train += ["--precision", "fp32", "--warmup-steps", "1"]
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return {
        "one process (2 batches accumulated)": ([sys.executable], [*train, "--accum-steps", "2"]),
        "DDP, 2 processes": (two, train),
        "--fsdp, 2 processes": (two, [*train, "--fsdp"]),
    }


def _run(name: str, launcher: list[str], args: list[str], work: Path, mapped: bool) -> list[dict]:
    out = work / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    child = [*launcher, "-m", "benchmarks.fsdp_memory_child", str(out), *args, "--out", str(out / "run")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    if mapped:  # blocks of 64 KiB and up mapped alone, so that freeing one gives it back to the system
        env["MALLOC_MMAP_THRESHOLD_"] = str(MAPPED_FROM)
    proc = subprocess.run(child, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return [json.loads(p.read_text()) for p in sorted(out.glob("memory-rank*.json"))]


def main(argv: list[str] | None = None) -> dict:
    p = base_parser(__doc__.split("\n\n")[0], "runs/benchmarks", "fsdp_memory.json", "fsdp_memory.md")
    p.add_argument(
        "--glibc-default",
        action="store_true",
        help="leave glibc's allocator as it is (freed blocks kept in the heap count as resident)",
    )
    args = p.parse_args(argv)
    from tformer.models.gpt import GPTConfig

    shape = GPTConfig.PRESETS["tiny" if args.quick else "base"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _text(work / "text.txt", 20_000 if args.quick else 200_000)
        configurations = _configurations(work, args.quick).items()
        results = {name: _run(name, *run, work, not args.glibc_default) for name, run in configurations}
    d, layers, ff = shape["d_model"], shape["n_layers"], shape["d_ff"]
    weights_mb = 4 * layers * (4 * d * d + 2 * d * ff) / 2**20  # the layers' matrices (the small table left out)
    anchor = {r["rank"]: r for r in results["DDP, 2 processes"]}
    for rows in results.values():
        for r in rows:
            r["ratio_to_ddp"] = {f: r[f] / anchor[r["rank"]][f] for f in FIGURES if anchor[r["rank"]][f] > 0}
    report = {
        "benchmark": "fsdp_memory",
        "machine": machine_info(args, None),
        "config": {
            "preset": "tiny" if args.quick else "base",
            "shape": shape,
            "layers_weights_mb": weights_mb,
            "malloc_mmap_threshold": None if args.glibc_default else MAPPED_FROM,
        },
        "results": results,
    }
    write_text(args.out, "fsdp_memory.json", json.dumps(report, indent=2))
    lines = [
        f"Layers' float32 weights: {weights_mb:,.0f} MB. MB above each process's baseline; ratio to DDP's same rank.",
        "",
        "| configuration | rank | set-up peak | resident at the first step | training peak | resident at the end | "
        "÷ DDP: set-up peak / training peak / end |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in results.items():
        for r in rows:
            ratios = " / ".join(
                f"{r['ratio_to_ddp'][f]:.2f}" if f in r["ratio_to_ddp"] else "—"
                for f in ("setup_peak_mb", "training_peak_mb", "end_resident_mb")
            )
            lines.append(
                f"| {name} | {r['rank']} | {r['setup_peak_mb']:,.0f} | {r['setup_resident_mb']:,.0f} | "
                f"{r['training_peak_mb']:,.0f} | {r['end_resident_mb']:,.0f} | {ratios} |"
            )
    write_text(args.out, "fsdp_memory.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
