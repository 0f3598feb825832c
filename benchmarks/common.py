"""What every speed benchmark shares: alternating timing, medians, peak memory, the machine's matmul peak,
and the report (JSON + a markdown table) written to ``--out``.

How a comparison is timed (:func:`compare`): the candidates run in one process, one call each per round,
the order rotating every round so none always runs first (thermal and cache drift hit all alike);
``warmup`` rounds are discarded, then ``repeats`` rounds are kept. Each call returns the work it did
(tokens, sentences); a round's throughput is work / seconds, and the report gives the median and the
min–max of those, and the ratio of medians against the anchor (the first candidate unless named).

Peak memory (:func:`peak_memory_mb`) is the peak of tensor bytes allocated during one extra call beyond
what was live before it (activations, gradients, temporaries; not the weights or optimizer state already
there), from the torch profiler's allocation events on CPU and ``torch.cuda.max_memory_allocated`` on GPU.

Dimension legend: n matrix side.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tformer.outputs import WRITTEN, record_written, written

__all__ = [
    "Candidate",
    "base_parser",
    "session",
    "compare",
    "peak_memory_mb",
    "matmul_peak_gflops",
    "machine_info",
    "write_report",
    "report_dir",
    "write_text",
    "SHARED_DATA",
]

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass
class Candidate:
    """One thing to time: ``run()`` does one unit of work and returns how much (tokens, sentences)."""

    name: str
    run: Callable[[], float]
    flops: float | None = None  # floating-point operations per call, for GFLOP/s
    extra: dict = field(default_factory=dict)  # anything else for the report (parameter count, ...)


def options(words: list[str]) -> dict:
    """Keyword arguments of a library entry point given on a benchmark's command line, as ``key=value`` or as
    the CLI's ``--key-name value``: ``["lr=3e-3", "--max-steps", "9000"]`` → ``{"lr": 0.003, "max_steps": 9000}``
    (numbers, booleans and None parsed; anything else is a string; a ``--flag`` without a value is True)."""
    import ast

    def value(text: str):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text  # a plain string

    out, k = {}, 0
    while k < len(words):
        word = words[k]
        if word.startswith("--"):
            key = word[2:].replace("-", "_")
            has_value = k + 1 < len(words) and not words[k + 1].startswith("--")
            out[key], k = (value(words[k + 1]), k + 2) if has_value else (True, k + 1)
        else:
            key, sep, text = word.partition("=")
            if not sep or not key.isidentifier():
                raise ValueError(
                    f"expected key=value or --key value (a keyword argument of the entry point), got {word!r}"
                )
            out[key], k = value(text), k + 1
    return out


def _at_least(low: int) -> Callable[[str], int]:
    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {value}")
        return value

    return number


def _device(text: str) -> str:
    try:
        kind = torch.device(text).type
    except (RuntimeError, ValueError):
        kind = None
    if kind not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


def report_dir(*reports: str) -> Callable[[str], str]:
    """``--out``'s check, before any work: a directory (new or not) where each of the file names ``reports`` is
    absent or a report a benchmark wrote there (:func:`write_text` records them), never a user's file of that name."""

    def directory(text: str) -> str:
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a file, expected a directory for the reports")
        theirs = [
            name for name in reports if (path / name).exists() and Path(name).name not in written((path / name).parent)
        ]
        if theirs:
            raise argparse.ArgumentTypeError(
                f"{text!r} holds {', '.join(theirs)}, which no benchmark wrote there (its {WRITTEN} does not list "
                "it): the report would replace it; name another directory, or move the file"
            )
        return text

    return directory


def write_text(out: str | Path, name: str, text: str) -> Path:
    """Write the report ``OUT/NAME`` (making ``OUT``) and record it as a benchmark's own, which a later run may
    replace; a file of that name that no benchmark wrote is refused (:func:`report_dir` checked it first)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if path.exists() and name not in written(out):
        raise FileExistsError(f"{str(path)!r} appeared during the benchmark and is not its report: not replaced")
    path.write_text(text, encoding="utf-8")
    record_written(out, name, "benchmarks")
    return path


def base_parser(description: str, default_out: str, *reports: str) -> argparse.ArgumentParser:
    """The flags every speed benchmark takes; ``reports`` are the file names it writes into ``--out``."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--out", default=default_out, type=report_dir(*reports), help="directory for the JSON and markdown report"
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round: proves the script works (seconds)")
    p.add_argument(
        "--repeats", type=_at_least(1), default=7, help="timed rounds per candidate (median over them; --quick: 1)"
    )
    p.add_argument("--warmup", type=_at_least(0), default=2, help="untimed rounds first (--quick: 0)")
    p.add_argument(
        "--threads",
        type=_at_least(1),
        default=None,
        help="torch.set_num_threads (default: torch's choice; --quick: 1)",
    )
    p.add_argument("--device", default="cpu", type=_device, help="cpu, cuda or cuda:N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    return p


@contextlib.contextmanager
def session(args):
    """Apply the common flags for the duration of a benchmark, then restore torch's thread count.

    ``--quick`` means one timed round, no warmup, and one thread unless ``--threads`` says otherwise (a
    tiny model on a busy machine spends most of its time waking worker threads).
    """
    if args.quick:
        args.repeats, args.warmup = 1, 0
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads or (1 if args.quick else threads))
    torch.manual_seed(args.seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare(
    candidates: list[Candidate],
    repeats: int,
    warmup: int,
    device: str = "cpu",
    memory: bool = True,
    anchor: str | None = None,
) -> dict:
    """Time ``candidates`` alternately; returns ``{name: stats}`` with ``ratio`` against ``anchor``."""
    rounds: dict[str, list[float]] = {c.name: [] for c in candidates}
    seconds: dict[str, list[float]] = {c.name: [] for c in candidates}
    for r in range(warmup + repeats):
        shift = r % len(candidates)
        for c in candidates[shift:] + candidates[:shift]:  # rotate who goes first
            _sync(device)
            start = time.perf_counter()
            work = c.run()
            _sync(device)
            elapsed = time.perf_counter() - start
            if r >= warmup:
                rounds[c.name].append(work / elapsed)
                seconds[c.name].append(elapsed)
    stats = {}
    for c in candidates:
        tput, secs = rounds[c.name], seconds[c.name]
        s = {
            "median": statistics.median(tput),
            "min": min(tput),
            "max": max(tput),
            "median_seconds": statistics.median(secs),
            "rounds": len(tput),
            **c.extra,
        }
        if c.flops:
            s["gflops"] = c.flops / s["median_seconds"] / 1e9
        if memory:
            s["peak_memory_mb"] = peak_memory_mb(c.run, device)
        stats[c.name] = s
    anchor = anchor or candidates[0].name
    for s in stats.values():
        s["ratio"] = s["median"] / stats[anchor]["median"]
    return stats


def peak_memory_mb(fn: Callable[[], object], device: str = "cpu") -> float:
    """Peak of the tensor memory allocated during one ``fn()`` beyond what was live before it (MiB)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):  # +bytes on allocation, -bytes on free
        live += event.nbytes()
        peak = max(peak, live)
    return peak / 2**20


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """Float32 ``torch.matmul`` throughput of this machine on (n, n) @ (n, n): 2·n³ flops per product; best of ``repeats``."""
    a = torch.randn(n, n, device=device)  # (n, n)
    b = torch.randn(n, n, device=device)  # (n, n)
    torch.matmul(a, b)  # warm up
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        torch.matmul(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _cpu(machine: dict) -> str:
    """``AMD EPYC (family 26, model 2), class avx512_bf16, `` for a header; empty for results saved before it existed."""
    cpu = machine.get("cpu")
    return f"{cpu['cpu']}, class {cpu['machine_class']}, " if cpu else ""


def machine_info(args, peak: float | None) -> dict:
    from tformer.machine import describe

    return {
        "cpu": describe().to_dict(),  # model, cores, ISA features, machine class, torch's CPU capability
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": args.device,
        "matmul_peak_gflops_fp32": peak,
        "quick": args.quick,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }


def _fmt(x, spec: str = ",.0f") -> str:
    return "" if x is None else format(x, spec)


def markdown_table(results: dict[str, dict[str, dict]], unit: str) -> str:
    lines = [
        f"| group | candidate | median {unit} | min–max | ratio | GFLOP/s | % of peak | peak MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for group, stats in results.items():
        for name, s in stats.items():
            frac = s.get("fraction_of_peak")
            lines.append(
                f"| {group} | {name} | {_fmt(s['median'])} | {_fmt(s['min'])}–{_fmt(s['max'])} | {s['ratio']:.2f}× | "
                f"{_fmt(s.get('gflops'), '.1f')} | {_fmt(None if frac is None else 100 * frac, '.0f')} | "
                f"{_fmt(s.get('peak_memory_mb'), '.1f')} |"
            )
    return "\n".join(lines)


def write_report(out: str | Path, name: str, payload: dict, unit: str) -> dict:
    """Write ``OUT/<name>.json`` and ``OUT/<name>.md``; print the table; return ``payload``."""
    table = markdown_table(payload["results"], unit)
    write_text(out, f"{name}.json", json.dumps(payload, indent=2))
    machine = payload["machine"]
    peak = machine.get("matmul_peak_gflops_fp32")
    peak = "" if peak is None else f"; fp32 matmul peak {_fmt(peak, '.1f')} GFLOP/s"  # measured for training only
    header = (
        f"# {name}\n\n{payload.get('description', '')}\n\nMachine: {_cpu(machine)}{machine['cpu_count']} CPUs, "
        f"{machine['torch_threads']} torch threads, torch {machine['torch']}, device {machine['device']}{peak}.\n\n"
    )
    write_text(out, f"{name}.md", header + table + "\n")
    print(header + table)
    return payload
