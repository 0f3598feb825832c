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
    "explore",
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
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of any error (default: one line for expected ones)",
    )
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


def _command(args) -> str:
    """``train lm``, ``plot attention``, ``data download``: the words that chose the subcommand."""
    words = [args.command] + [getattr(args, k) for k in ("family", "picture", "action") if getattr(args, k, None)]
    return " ".join(words)


def _out_of_memory(err: BaseException) -> bool:
    """``torch.cuda.OutOfMemoryError``, ``MemoryError``, or the CPU allocator's RuntimeError."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _fail(args, message: str, code: int) -> int:
    print(f"tformer {_command(args)}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and the CLI's one error boundary.

    Expected failures print one line ``tformer CMD: error: ...`` and give a non-zero exit status: bad input
    (``ValueError``), a missing file (``FileNotFoundError``, status 2), permission, disk full and other
    ``OSError`` (status 1), out of memory (status 1), Ctrl-C outside training (status 130). Anything else is a
    bug and shows its traceback, as does every error with ``tformer --debug CMD``. Bad flags never get here:
    their ``type=`` validators (:mod:`tformer.cli.validate`) make argparse exit with status 2.
    """
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
    except KeyboardInterrupt as err:  # training's TrainingInterrupted says what was saved, and its status (130 / 143)
        if args.debug:
            raise
        return _fail(args, str(err) or "interrupted (Ctrl-C)", getattr(err, "exit_code", 130))
    except (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, ConnectionError) as err:
        if args.debug:
            raise
        return _fail(args, str(err), 2)
    except (OSError, MemoryError, RuntimeError) as err:  # permission, disk full, ...; out of memory
        if args.debug or not (isinstance(err, OSError) or _out_of_memory(err)):
            raise
        if _out_of_memory(err):
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return _fail(args, f"out of memory: {first} (try a smaller batch, model or --max-len)", 1)
        return _fail(args, str(err) or type(err).__name__, 1)


if __name__ == "__main__":
    sys.exit(main())
