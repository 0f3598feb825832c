"""The ``tformer`` command line: argument parsing and printing only; the work is done by the library
(``tformer.translation``, ``tformer.lm``, ``tformer.bert``, ``tformer.inspect``, ...).

Each subcommand lives in ``tformer/cli/<name>.py`` (``evaluate-lm`` in ``evaluate_lm.py``) and provides
``add_parser(subparsers)``; the parser it adds sets ``func``, the function that runs it. Flags shared
by several subcommands are in :mod:`tformer.cli.common`; no module of the CLI imports one that imports it back."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tformer import __version__

# Subcommand modules, in the order `tformer --help` lists them.
COMMANDS = [
    "demo",
    "train",
    "translate",
    "evaluate",
    "generate",
    "evaluate_lm",
    "fill_mask",
    "classify",
    "embed",
    "trace",
    "plot",
    "data",
    "info",
    "bench",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tformer",
        description="The Transformer from its parts: train, run and inspect seq2seq, GPT and BERT models.",
    )
    parser.add_argument("--version", action="version", version=f"tformer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tformer.cli.{name}").add_parser(sub)
    return parser


def _run(args) -> int:
    """The subcommand; with ``--no-fast``, inside ``tformer.fast.reference()`` (plain code, no swaps)."""
    if not getattr(args, "no_fast", False):
        return args.func(args) or 0
    from tformer.fast import reference

    with reference():
        return args.func(args) or 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        code = _run(args)
        if "torch.distributed" in sys.modules:  # leave a torchrun process group cleanly; only after success,
            from tformer.training.distributed import shutdown  # since a failed rank would leave the others waiting

            shutdown()
        return code
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except (ValueError, TypeError, FileNotFoundError, ConnectionError) as err:
        print(f"tformer {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
