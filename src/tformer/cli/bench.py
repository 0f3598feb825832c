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
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark (train_step, decode, throughput_multi30k, bert_encode, ...)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="benchmark name; none: list them")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    p.set_defaults(func=run)


def _import_benchmarks():
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):  # the checkout holding src/, then here
        if (root / "benchmarks" / "__main__.py").is_file():
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            import benchmarks.__main__ as registry

            return registry
    raise FileNotFoundError("no benchmarks/ directory found: run `tformer bench` from a tformer source checkout")


def run(args) -> int:
    registry = _import_benchmarks()
    if not args.name:
        print(registry.listing())
        return 0
    registry.run(args.name, args.args)
    return 0
