"""``tformer bench NAME [args]``: run one of the speed/quality benchmarks in ``benchmarks/`` of the source tree.

    tformer bench                                  # list them
    tformer bench train_step --quick --out runs/bench
    tformer bench decode --only greedy --repeats 9

The arguments after NAME go to the benchmark unchanged (``tformer bench NAME --help`` shows them). The
``benchmarks`` package lives next to ``src/`` in a checkout (it is not installed), so this command works
from a source checkout, or from a directory that holds ``benchmarks/``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark (train_step, decode, throughput_multi30k, bert_encode, ...)",
        description=(__doc__ or "").replace("``", "`"),  # the docstring's reST quotes, as a terminal reads them
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="benchmark name; none: list them")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    p.set_defaults(func=run)


def _checkout() -> Path:
    """The directory holding ``benchmarks/``: the checkout this tformer runs from, else the current one."""
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (root / "benchmarks" / "__main__.py").is_file():
            return root
    raise FileNotFoundError("no benchmarks/ directory found: run `tformer bench` from a tformer source checkout")


def run(args) -> int:
    """``python -m benchmarks [NAME ARGS...]`` in a child process that finds the checkout's ``benchmarks``."""
    root = str(_checkout())
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root if not path else root + os.pathsep + path}
    argv = [sys.executable, "-m", "benchmarks", *([args.name] if args.name else ["list"]), *args.args]
    sys.stdout.flush()
    return subprocess.run(argv, env=env).returncode
