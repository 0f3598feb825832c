"""The ``tformer`` command line's argparse parser, every subcommand's too.

The parser (:class:`Parser`) shows every default in ``--help``, answers a mistyped flag or command with the
subcommand's usage and a "did you mean", and still takes the spellings earlier releases used (``--block-size``
is ``--max-len`` now), with a note naming today's.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys

from tformer.checks import BadValue, closest

__all__ = ["Parser", "HelpFormatter", "Switch", "renamed"]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, with each flag's default after its help (unless the help already says it), and short
    placeholders that say what a flag takes: ``N`` (an integer), ``X`` (a number), ``DIR``, ``FILE``, ``PATH``."""

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        kind = getattr(action.type, "kind", None)
        if kind is int or kind is float:
            return "N" if kind is int else "X"
        if isinstance(kind, str):  # a path (tformer.cli.validate.PathArg)
            return "DIR" if kind.endswith("dir") else "FILE" if kind.endswith("file") else "PATH"
        return super()._get_default_metavar_for_optional(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default not in (None, [], argparse.SUPPRESS) and not isinstance(action.default, bool)
        if shown and action.option_strings and "default" not in text:
            text += " (default: %(default)s)"
        return text


# Flags other tools spell their own way (Hugging Face's Trainer, nanoGPT), by tformer's name for the same setting:
# a "did you mean" by spelling alone would not find --lr for --learning-rate.
OTHER_NAMES = {
    "--lr": ("--learning-rate", "--learning-rate-init"),
    "--epochs": ("--num-train-epochs", "--num-epochs", "--n-epochs"),
    "--max-steps": ("--max-iters", "--num-steps", "--train-steps", "--iterations"),
    "--warmup-steps": ("--warmup", "--warmup-iters", "--num-warmup-steps"),
    "--clip": ("--grad-clip", "--max-grad-norm", "--clip-grad-norm", "--gradient-clipping"),
    "--accum-steps": ("--gradient-accumulation-steps", "--grad-accum", "--grad-accum-steps"),
    "--out": ("--output-dir", "--out-dir", "--output"),
    "--init": ("--model-name-or-path", "--pretrained", "--from-pretrained"),
    "--batch-size": ("--per-device-train-batch-size", "--train-batch-size"),
    "--n-layers": ("--n-layer", "--num-layers", "--num-hidden-layers"),
    "--n-heads": ("--n-head", "--num-heads", "--num-attention-heads"),
    "--d-model": ("--n-embd", "--hidden-size", "--dim"),
    "--d-ff": ("--intermediate-size", "--ffn-dim"),
    "--eval-every": ("--eval-interval", "--eval-steps"),
    "--log-every": ("--log-interval", "--logging-steps"),
    "--max-new-tokens": ("--max-tokens", "--max-length"),
}


def other_name(word: str, candidates: list[str]) -> str | None:
    """The flag among ``candidates`` that another tool calls ``word`` (``--learning_rate`` → ``--lr``), or None."""
    spelled = "--" + word.lstrip("-").replace("_", "-")
    return next((f for f, names in OTHER_NAMES.items() if spelled in names and f in candidates), None)


def _suggest(word: str, candidates: list[str]) -> str:
    same = other_name(word, candidates)
    if same:
        return f"{word}: tformer calls it {same}"
    close = closest(word, candidates, n=1)
    return f"{word}: did you mean {close[0]}?" if close else ""


USAGE_LINES = 6  # a longer usage is one line before an error (the error is what the user must read); so is any
# usage before the refusal of a value given (`argument --beam: ...`)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (every subcommand's too) that says "did you mean" and shows defaults.

    A word it does not know is refused by the subcommand that got it, with that subcommand's usage; a mistyped
    flag or command gets the nearest one it has."""

    def __init__(self, *args, commands: dict[str, argparse.ArgumentParser] | None = None, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.commands = {} if commands is None else commands  # every parser of this CLI by prog, shared with them
        self.commands[self.prog] = self

    def _get_value(self, action, arg_string):
        """argparse's conversion of a flag's text; a :class:`tformer.checks.BadValue` (a ``ValueError`` said in the
        flag's words: ``must be an integer in [1, 64], got 0``) is printed as it is, where argparse would say
        "invalid ... value"."""
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as err:
            if isinstance(err.__context__, BadValue):
                raise argparse.ArgumentError(action, str(err.__context__)) from None
            raise

    def add_subparsers(self, **kwargs):  # type: ignore[override]
        kwargs.setdefault("parser_class", functools.partial(type(self), commands=self.commands))
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if self._subparsers is None and args is not None:  # before "required" errors hide the typo behind them
            known = [s for a in self._actions for s in a.option_strings]
            own = args[: args.index("--")] if "--" in args else args  # after "--" every word is a value
            words = [a.split("=")[0] for a in own if a.startswith("--")]
            unknown = [w for w in words if not any(k.startswith(w) for k in known)]
            if unknown:
                self.error(f"unrecognized arguments: {' '.join(unknown)}")
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a subcommand's own flags: nothing after it can take these
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _hint(self, word: str, known: list[str]) -> str:
        """A flag another command has is said so (``--init`` on ``train lm``: not "did you mean --minutes?");
        else the nearest flag this command has. A name another tool gives one of this command's flags comes first."""
        if other_name(word, known):
            return _suggest(word, known)
        elsewhere = sorted(
            prog
            for prog, parser in self.commands.items()
            if prog != self.prog and any(word in a.option_strings for a in parser._actions)
        )
        if elsewhere:
            return f"{word} is a flag of {', '.join(elsewhere)}, not of {self.prog}"
        return _suggest(word, known)

    def error(self, message: str):  # type: ignore[override]
        hints: list[str] = []
        if message.startswith("unrecognized arguments: "):
            known = [s for a in self._actions for s in a.option_strings if a.help != argparse.SUPPRESS]
            words = message.split(": ", 1)[1].split()
            hints = [self._hint(w.split("=")[0], known) for w in words if w.startswith("-")]
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            hints = [_suggest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))]
        hint = "; ".join(h for h in hints if h)
        usage = self.format_usage()
        # a training command's every flag would bury the one line that matters, as would any usage above a bad value
        if usage.count("\n") > USAGE_LINES or message.startswith("argument "):
            usage = f"usage: {self.prog} [options] ... ({self.prog} --help lists them)\n"
        self._print_message(usage, sys.stderr)
        self.exit(2, f"{self.prog}: error: {message} ({hint})\n" if hint else f"{self.prog}: error: {message}\n")


class Switch(argparse.Action):
    """A switch with its opposite: ``--compile, --no-compile``, ``--no-progress, --progress``. The first spelling
    turns the setting from its default, the second back to it, so that a command line can undo a ``--config``
    file's switch (the last one given wins, as for any flag)."""

    def __init__(self, option_strings, dest, default=False, required=False, help=None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, (option_string == self.option_strings[0]) != self.default)

    def opposite(self, spelling: str) -> str:
        """The other spelling of this switch (``--no-compile`` for ``--compile``)."""
        first, second = self.option_strings
        return second if spelling == first else first


def renamed(old: str, action: argparse.Action) -> type[argparse.Action]:
    """An action for ``old``, an earlier spelling of ``action``'s flag: a note on stderr, then the same effect."""

    class Renamed(argparse.Action):
        target = action  # what it stands for (tformer.cli.config reads the setting off it)

        def __call__(self, parser, namespace, values, option_string=None) -> None:
            print(f"note: {old} is now called {action.option_strings[0]}", file=sys.stderr)
            action(parser, namespace, values, action.option_strings[0])

    return Renamed
