"""Two Tiny Shakespeare recipes at equal CPU time: the LayerNorm + GELU recipe against the one rebuilt from the options
of today's decoders (RMSNorm, SwiGLU, no bias): ``shakespeare-char-6min`` / ``-6min-llama`` and
``shakespeare-char-30min-gelu`` / ``-30min`` (the winner of each budget carries the plain name).

    python -m benchmarks.lm_recipes --minutes 6 30                    # side by side, one core each
    python -m benchmarks.lm_recipes --minutes 0.1 --quick             # smoke test
    python -m benchmarks.lm_recipes --minutes 30 --recipes shakespeare-char-30min shakespeare-char-30min \
        --set optimizer=adamw optimizer=muon,lr=4e-3                  # one recipe, two settings (any lm.train option)

For each budget the two recipes train *at the same time*, each in its own process pinned to one thread
(``torch.set_num_threads(1)``), for the same wall-clock budget: each gets one of this machine's two cores, and both
see whatever else the machine does in that hour (it varies up to 2× between days here), so the comparison is at
equal CPU time. ``--sequential`` trains them one after the other with every core instead. The score is the
validation loss of ``benchmarks.lm_shakespeare`` (last 10% of the text, non-overlapping blocks of the context).
Writes ``OUT/lm_recipes.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import report_dir, write_text
from benchmarks.lm_shakespeare import SHARED, recipe_for
from tformer.lm import RECIPES


def settings(text: str) -> dict:
    """``"optimizer=muon,lr=4e-3"`` as ``lm.train``'s options (a number where the value reads as one)."""
    options: dict = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set: {item!r} is not KEY=VALUE (e.g. optimizer=muon,lr=4e-3)")
        try:
            options[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            options[key.strip()] = value.strip()
    return options


def child(recipe: str, minutes: float, out: Path, data: Path, threads: int, quick: bool, changes: str = "") -> None:
    """Train ``recipe`` (with ``changes``: :func:`settings`) for ``minutes`` in this process and write its result to
    ``out/result.json``."""
    import torch

    from benchmarks.lm_shakespeare import run_budget

    if threads:
        torch.set_num_threads(threads)
    extra: dict = {"preset": recipe, **settings(changes)}
    if quick:
        extra.update(max_len=32, batch_size=4, eval_blocks=4)
    cpu = time.process_time()
    result = run_budget(minutes, out, data, extra)
    result.update(
        recipe=recipe, set=changes, threads=torch.get_num_threads(), cpu_seconds=round(time.process_time() - cpu, 1)
    )
    (out / "result.json").write_text(json.dumps(result, indent=2))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, nargs="+", default=[6.0])
    p.add_argument("--recipes", nargs=2, default=None, help="two recipe names (default: the budget's GELU and SwiGLU)")
    p.add_argument("--data", default=str(SHARED / "tinyshakespeare.txt"))
    p.add_argument("--out", default="runs/bench-lm-recipes", type=report_dir("lm_recipes.json"))
    p.add_argument(
        "--set", nargs=2, default=["", ""], metavar=("A", "B"), help="each run's options, KEY=VALUE,... (lm.train's)"
    )
    p.add_argument("--sequential", action="store_true", help="one after the other, every core each")
    p.add_argument("--quick", action="store_true", help="short blocks, small batches: a smoke test")
    p.add_argument("--child", nargs=2, metavar=("RECIPE", "MINUTES"), help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(
            args.child[0], float(args.child[1]), Path(args.out), Path(args.data), args.threads, args.quick, args.set[0]
        )
        return {}
    results = []
    for minutes in args.minutes:
        base = recipe_for(minutes)
        recipes = args.recipes or [name for name in (f"{base}-gelu", base, f"{base}-llama") if name in RECIPES]
        runs = []
        for i, recipe in enumerate(recipes):
            out = Path(args.out) / f"{minutes:g}min" / (recipe + (f"-{args.set[i]}" if args.set[i] else ""))
            out.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", "benchmarks.lm_recipes", "--child", recipe, f"{minutes}"]
            command += ["--out", str(out), "--data", args.data, "--threads", "0" if args.sequential else "1"]
            command += ["--set", args.set[i], ""]
            command += ["--quick"] if args.quick else []
            runs.append((out, subprocess.Popen(command)))
            if args.sequential:
                runs[-1][1].wait()
        for out, process in runs:
            if process.wait() != 0:
                raise SystemExit(f"{out}: the training process failed (exit {process.returncode})")
        pair = [json.loads((out / "result.json").read_text()) for out, _ in runs]
        results.append({"minutes": minutes, "side_by_side": not args.sequential, "runs": pair})
    write_text(args.out, "lm_recipes.json", json.dumps(results, indent=2))
    print("| budget | recipe | steps | CPU s | val loss |\n|---|---|---:|---:|---:|")
    for r in results:
        for run in r["runs"]:
            print(
                f"| {r['minutes']:g} min | {run['recipe']} {run['set']} | {run['steps']} | {run['cpu_seconds']} | "
                f"{run['val_loss']:.4f} |"
            )
        a, b = r["runs"]
        print(f"| | difference (second − first) | | | {b['val_loss'] - a['val_loss']:+.4f} |")
    return {"results": results}


if __name__ == "__main__":
    main()
