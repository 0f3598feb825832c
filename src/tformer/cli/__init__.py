"""The ``tformer`` command line: argument parsing and printing only; the work is done by the library
(``tformer.translation``, ``tformer.lm``, ``tformer.bert``, ``tformer.inspection``, ...).

Each subcommand lives in ``tformer/cli/<name>.py`` (``evaluate-lm`` in ``evaluate_lm.py``) and provides
``add_parser(subparsers)``; the parser it adds sets ``func``, the function that runs it. Flags are declared
once, in :mod:`tformer.cli.flags`, under the library's names for the settings; no module of the CLI imports one
that imports it back."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
import warnings

from tformer import __version__
from tformer.cli.config import expand as expand_config
from tformer.cli.parser import Parser

# Subcommand modules, in the order `tformer --help` lists them.
COMMANDS = [
    "demo",
    "train",
    "translate",
    "evaluate",
    "generate",
    "chat",
    "evaluate_lm",
    "fill_mask",
    "classify",
    "embed",
    "trace",
    "plot",
    "explore",
    "serve",
    "data",
    "export",
    "merge",
    "average",
    "info",
    "bench",
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    """The subcommand (``--no-fast`` is its own: the reference kernels chosen where it loads or trains a model).
    A warning of tformer's own (a source cut to the model's length, ...) is one line, as errors are; others as
    Python shows them."""
    with warnings.catch_warnings():  # restored when the command ends
        shown = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None) -> None:
            if category.__module__.startswith("tformer."):
                print(f"tformer {_command(args)}: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        return args.func(args) or 0


def _command(args) -> str:
    """``train lm``, ``plot attention``, ``data download``, ``data prepare lm``: the words that chose the subcommand."""
    words = [args.command] + [getattr(args, k) for k in ("action", "family", "picture") if getattr(args, k, None)]
    return " ".join(words)


def _out_of_memory(err: BaseException) -> bool:
    """``torch.cuda.OutOfMemoryError``, ``MemoryError``, or the CPU allocator's RuntimeError."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _fail(args, message: str, code: int) -> int:
    with contextlib.suppress(BrokenPipeError):  # stderr's reader gone too: the status still says it
        print(f"tformer {_command(args)}: error: {message}", file=sys.stderr)
    return code


def _closed_pipe() -> int:
    """Status 141 (128 + SIGPIPE, as a Unix tool killed by it): the reader of the output is gone, so what was not
    written is lost; stdout's unwritten rest goes to /dev/null, not into an error at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _missing_package(err: BaseException) -> bool:
    """An optional package that is not installed (``matplotlib``, ``transformers``, ...): not tformer's own."""
    name = (getattr(err, "name", None) or "") if isinstance(err, ModuleNotFoundError) else ""
    return bool(name) and name.split(".")[0] != "tformer"


def _expected(err: Exception) -> tuple[str, int] | None:
    """(message, exit status) of an expected failure; None for a bug.

    Expected: bad input (``ValueError``, which covers ``UnicodeError`` and ``json.JSONDecodeError``; readers
    turn other errors about a file's content into a ``ValueError`` naming the file), a missing file or a
    failed download (status 2), permission, disk full and other ``OSError``, out of memory, a missing optional
    package (status 1)."""
    if isinstance(err, (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, ConnectionError)):
        return str(err) or type(err).__name__, 2
    if _out_of_memory(err):
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"out of memory: {first} (try a smaller batch, model or --max-len)", 1
    if isinstance(err, OSError):  # permission, disk full, ... (a write's WriteError names its target)
        return str(err) or type(err).__name__, 1
    from tformer.files import machine_reason, os_error

    cause = os_error(err)  # a full disk that safetensors or torch reports in its own error's text
    if cause is not None and cause.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        first = str(err).strip().splitlines()[0]
        return f"{machine_reason(cause)}: {first}", 1
    if _missing_package(err):
        name = getattr(err, "name", None) or ""
        return f"this needs the package {name!r}, which is not installed (pip install {name.split('.')[0]})", 1
    return None


def _report_bug(args, err: Exception) -> None:
    """Ask for a report: the line goes under the traceback (a note, Python >= 3.11) or above it (3.10)."""
    line = (
        f"tformer {_command(args)}: this is a bug in tformer ({type(err).__name__}), not a mistake in your input: "
        "please report it with the command you ran and this traceback"
    )
    if hasattr(err, "add_note"):
        err.add_note(line)
    else:
        print(line, file=sys.stderr)


def _check_arguments(words: list[str]) -> None:
    """Every command-line word is UTF-8: Python passes other bytes on as lone surrogates, which no tokenizer,
    file name check or ``print`` can take; refused here once, naming the argument (1 = the word after tformer)."""
    from tformer.text import check_text

    for n, word in enumerate(words, 1):
        before = words[n - 2] if n > 1 else ""
        flag, value = word.partition("=")[::2] if word.startswith("--") else ("", word)  # --prompt=VALUE
        named = flag if flag and value else (before if before.startswith("-") and "=" not in before else "")
        check_text(word, f"argument {n}" + (f" (the value of {named})" if named else ""))


def _split_bench(words: list[str]) -> tuple[list[str], list[str] | None]:
    """``tformer [--debug] bench NAME ARGS...``: (the words up to NAME, ARGS) so that ARGS reach the benchmark as
    they are (argparse would take ``--quick`` for a flag of ``bench`` and refuse it); (words, None) otherwise."""
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 1  # tformer's own options (--debug)
    if i + 1 < len(words) and words[i] == "bench" and not words[i + 1].startswith("-"):
        return words[: i + 2], words[i + 2 :]
    return words, None


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and the CLI's one error boundary.

    Expected failures (:func:`_expected`) print one line ``tformer CMD: error: ...`` and give a non-zero exit
    status: bad input (``ValueError``, status 2), a missing file (``FileNotFoundError``, status 2), permission,
    disk full and other ``OSError`` (status 1), out of memory (status 1), a missing optional package (status 1),
    Ctrl-C outside training (status 130), output whose reader is gone (``| head`` done: status 141, as SIGPIPE; a
    training run saves ``last/`` first). Anything else is a bug: it shows its traceback and a line asking for a
    report. ``tformer --debug CMD`` shows the traceback of every error. Bad flags never get here: their ``type=``
    validators (:mod:`tformer.cli.validate`) make argparse exit with status 2.
    """
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    ours, theirs = _split_bench(words)
    args = parser.parse_args(expand_config(parser, ours))  # train FAMILY --config FILE: its settings first
    if theirs is not None:
        args.args = theirs  # tformer bench NAME ...: the benchmark's own flags, unparsed
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        _check_arguments(words)
        code = _run(args)
        if "torch.distributed" in sys.modules:  # leave a torchrun process group cleanly; only after success,
            from tformer.training.distributed import shutdown  # since a failed rank would leave the others waiting

            shutdown()
        return code
    except BrokenPipeError:  # output piped into `head`, which closed it: the rest unwritten
        return _closed_pipe()
    except KeyboardInterrupt as err:  # training's TrainingInterrupted says what was saved, and its status (130 / 143)
        if args.debug:
            raise
        code = getattr(err, "exit_code", 130)
        if hasattr(err, "exit_code") and "torch.distributed" in sys.modules:  # (torchrun: every rank has it)
            from tformer.training.distributed import is_main_process

            if not is_main_process():  # rank 0 says where the state is saved, once
                return code
        code = _fail(args, str(err) or "interrupted (Ctrl-C)", code)
        return _closed_pipe() if code == 128 + signal.SIGPIPE else code  # (training: stopped, saved, by a closed pipe)
    except Exception as err:
        failure = _expected(err)
        if failure is None:
            _report_bug(args, err)
            raise
        if args.debug:
            raise
        return _fail(args, *failure)


if __name__ == "__main__":
    sys.exit(main())
