"""``tformer train FAMILY --config FILE.yaml``: a run's settings kept in a file, by the flags' own names.

    # runs/mt/config.yaml, or a recipe of your own
    data: multi30k/
    preset: small
    max-steps: 6000
    eval-every: 500
    patience: 4

``--config FILE`` reads FILE's settings as if they were given first on the command line: a flag given there too
wins (argparse keeps the last). A key is a flag's name without its dashes (``max-steps``; ``max_steps`` too); an
unknown key is refused with the closest names (``did you mean 'max-steps'?``), as a flag's value is checked as the
flag checks it (a bad one named with the file). A switch takes ``true`` or ``false`` (YAML 1.2's: ``no`` is the
word no), and the command line undoes it by its opposite (``--no-compile`` over a file's ``compile: true``;
``--precision fp32`` over its ``bf16: true``). Every run writes the settings it resolved to ``OUT/config.yaml``
(:func:`write_resolved`), so ``--config OUT/config.yaml`` repeats it, and ``--out OUT --resume`` without
``--config`` reads it (the run's settings under the flags given again; of a prepared folder's run, all but the
tokenizer's kind and size, which the folder decides).

The project's recipes are shipped as such files (``src/tformer/recipes/``, :func:`shipped`): ``--config NAME``
(no path, no suffix, no such file here) reads the recipe ``NAME`` (``multi30k-cpu-hour``, ``shakespeare-char-30min``,
...). A file's ``family: translation`` says which ``tformer train`` command it is for; another one is refused.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, NoReturn

from tformer.checks import did_you_mean
from tformer.cli.parser import Switch, other_name
from tformer.cli.validate import PathArg, device

__all__ = ["CONFIG_NAME", "expand", "shipped", "write_resolved"]

CONFIG_NAME = "config.yaml"  # what a run writes into OUT (tformer.training.resume.RUN_FILES)
_NOT_SETTINGS = {"config", "overwrite", "resume", "help"}  # what a run is asked to do now, not how it is made


def _family_parser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, int] | None:
    """The parser of ``tformer [--debug] train FAMILY`` and where FAMILY's own words start, when ``words`` are such
    a command; else None."""
    at = 0
    while at < len(words) and words[at].startswith("-"):  # the global options before the command (--debug)
        at += 1
    node = parser
    for word in words[at : at + 2]:
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            return None
        node = subs[0].choices[word]
    return (node, at + 2) if words[at : at + 1] == ["train"] and len(words) >= at + 2 else None


def _given(words: list[str]) -> str | None:
    """The FILE of ``--config FILE`` / ``--config=FILE`` in ``words`` (the last one), else None."""
    found = None
    for i, word in enumerate(words):
        if word == "--config" and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith("--config="):
            found = word.split("=", 1)[1]
    return found


def expand(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` with the settings of its ``--config FILE`` inserted as flags after ``train FAMILY`` (before the
    command line's own, which win); ``words`` as they are without one. A bad file or key is the family parser's
    error: one line, exit status 2."""
    found = _family_parser(parser, words)
    if found is None:
        return words
    family, at = found
    options = {o[2:]: a for o, a in family._option_string_actions.items() if o.startswith("--")}
    given = {_setting(a) for a in (_flag(options, w) for w in words[at:]) if a is not None}
    path, runs = _given(words), _the_runs(options, words[at:])
    if path is not None:
        settings, label = _read(family, _where(family, path), f"--config {path}"), f"--config {path}"
    elif runs is not None:  # --resume without --config: the run's own settings, under the flags given
        label = f"{runs} (the run's settings, which --resume reads)"
        settings = _read(family, runs, label)
        if (kind := settings.get("family", words[at - 1])) != words[at - 1]:  # said before --data is asked for
            out = str(runs.parent)
            _refuse(
                family,
                f"--resume: {out!r} holds a `tformer train {kind}` run, not a `train {words[at - 1]}` one: resume it "
                f"with tformer train {kind} --out {out} --resume",
            )
        settings = _for_resume(settings, _value(options, words[at:], "data"), options)
    else:
        return words
    kind = settings.pop("family", None)
    if kind is not None and kind != words[at - 1]:
        _refuse(family, f"{label}: a recipe of `tformer train {kind}`, not of `train {words[at - 1]}`")
    flags: list[str] = []
    keys: dict[str, str] = {}  # setting -> the file's key for it
    for key, value in settings.items():
        name = str(key).replace("_", "-")
        action = options.get(name)
        if name in _NOT_SETTINGS and name != "help":
            _refuse(family, f"{label}: {key!r} is not a setting of a run but what this launch does: give --{name} here")
        if action is None or name in _NOT_SETTINGS:
            names = [n for n in options if n not in _NOT_SETTINGS]
            same = other_name(name, ["--" + n for n in names])
            hint = f"tformer calls it {same[2:]!r}" if same else did_you_mean(name, names)
            _refuse(family, f"{label}: {key!r} is not a setting of this command" + (f"; {hint}" if hint else ""))
        other = keys.setdefault(_setting(action), str(key))
        if other != str(key):  # no-progress and progress, bf16 and precision, max_steps and max-steps
            _refuse(family, f"{label}: {other!r} and {key!r} set the same setting: give one of them")
        if _setting(action) not in given:
            flags += _as_flags(family, label, name, action, value)
        elif not _of_the_machine(action):  # the command line's flag wins; the file's value is still checked
            _as_flags(family, label, name, action, value)
    return words[:at] + flags + words[at:]


_SAME = {"bf16": "precision"}  # a flag that is another's alias: the command line's one wins over the file's other


def _of_the_machine(action: argparse.Action) -> bool:
    """Whether a flag's check asks this machine (a path exists, a device is there): a file's value that the command
    line overrides is not checked so, as a recipe made elsewhere is repeated with --device cpu or another --data."""
    return isinstance(action.type, PathArg) or action.type is device


def _refuse(family: argparse.ArgumentParser, message: str) -> NoReturn:
    """A bad file's error: one line, exit status 2 (without the usage block: the file is at fault, not the words)."""
    family.exit(2, f"{family.prog}: error: {message}\n")


def _flag(options: dict[str, argparse.Action], word: str) -> argparse.Action | None:
    """The action of the command line's ``word`` when it is a flag (``--max-steps=5``; argparse's unique
    abbreviations too: ``--max-st 5``), else None."""
    if not word.startswith("--"):
        return None
    name = word[2:].split("=", 1)[0]
    if name in options:
        return options[name]
    starting = {a for n, a in options.items() if n.startswith(name)}
    return starting.pop() if len(starting) == 1 else None


def _setting(action: argparse.Action) -> str:
    """The setting a flag's action sets (an earlier spelling's too: :func:`tformer.cli.parser.renamed`)."""
    dest = getattr(action, "target", action).dest
    return _SAME.get(dest, dest)


def shipped() -> dict[str, Path]:
    """The recipes tformer ships (``src/tformer/recipes/NAME.yaml``), by name."""
    folder = Path(__file__).resolve().parent.parent / "recipes"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def _where(family: argparse.ArgumentParser, given: str) -> Path:
    """The file ``--config given`` names: a path, else a shipped recipe's name; else the family parser's error."""
    path = Path(given)
    if path.exists() or path.suffix or "/" in given or os.sep in given:
        return path
    recipes = shipped()
    if given not in recipes:
        _refuse(family, f"--config {given}: no such file, and not a recipe tformer ships ({', '.join(recipes)})")
    return recipes[given]


def _loader() -> type:
    """PyYAML's safe loader with YAML 1.2's booleans: ``true``/``false`` only, so that ``tgt-lang: no`` (Norwegian)
    or ``schedule: off`` arrive as the words they are, not as ``false``."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # a key given twice: refused (PyYAML keeps the last)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return Loader


def _the_runs(options: dict[str, argparse.Action], words: list[str]) -> Path | None:
    """``OUT/config.yaml`` when ``words`` (a ``train FAMILY`` command's own) ``--resume`` the run in ``--out OUT``
    and that run wrote one; else None."""
    out = _value(options, words, "out_dir")
    resume = any(a is not None and a.dest == "resume" for a in (_flag(options, w) for w in words))
    file = Path(out) / CONFIG_NAME if resume and out else None
    return file if file is not None and file.is_file() else None


def _value(options: dict[str, argparse.Action], words: list[str], dest: str) -> str | None:
    """The value ``words`` give the flag of ``dest`` (``--out X`` or ``--out=X``; the last one), else None."""
    found = None
    for i, word in enumerate(words):
        action = _flag(options, word)
        if action is not None and action.dest == dest:
            found = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else None)
    return found


_HOW_IT_RUNS = {"device", "fsdp", "compile", "fast", "progress"}  # this launch's, not the run's: never resumed


def _for_resume(settings: dict, data: str | None, options: dict[str, argparse.Action]) -> dict:
    """The run's settings a ``--resume`` takes: not how this launch runs (the device, ``--fsdp`` under torchrun,
    ``--compile``, the kernels, the progress line: a run moves between machines and process counts), and not the
    tokenizer's kind and size when the data is a prepared folder (the folder decides them; a run made before tformer
    recorded the folder's wrote its preset's). ``data``: the ``--data`` given again (None: the run's)."""
    from tformer.data import is_prepared

    dest = lambda key: getattr(options.get(str(key).replace("_", "-")), "dest", None)  # noqa: E731
    settings = {k: v for k, v in settings.items() if dest(k) not in _HOW_IT_RUNS}
    data = data if data is not None else settings.get("data")
    if data is not None and is_prepared(str(data)):
        return {k: v for k, v in settings.items() if str(k).replace("_", "-") not in ("tokenizer", "vocab-size")}
    return settings


def _read(family: argparse.ArgumentParser, path: Path, label: str) -> dict:
    """The settings of the YAML file ``path``; a bad one is refused naming ``label`` (``--config FILE``)."""
    import yaml

    try:
        settings = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader())
    except FileNotFoundError:
        _refuse(family, f"{label}: no such file")
    except IsADirectoryError:
        inside = path / "config.yaml"  # a run's folder: its settings are in it
        _refuse(family, f"{label}: a folder, not a YAML file" + (f"; its run settings are {inside}" * inside.is_file()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        _refuse(family, f"{label}: not a readable YAML file ({str(err).splitlines()[0]})")
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        _refuse(family, f"{label}: expected a mapping of settings (max-steps: 100), got {type(settings).__name__}")
    return settings


def _as_flags(family: argparse.ArgumentParser, label: str, name: str, action: argparse.Action, value: Any) -> list:
    if value is None:  # null: the default
        return []
    if action.nargs == 0:  # a switch: --compile, --no-progress; false: its opposite, when it has one
        if not isinstance(value, bool):
            quoted = (
                " (a quoted string: write it without the quotes)" if str(value).lower() in ("true", "false") else ""
            )
            _refuse(family, f"{label}: {name!r} is a switch, give true or false, got {value!r}{quoted}")
        if value:
            return [f"--{name}"]
        return [action.opposite(f"--{name}")] if isinstance(action, Switch) else []
    if isinstance(value, (dict, list)):
        _refuse(family, f"{label}: {name!r} takes one value, got {value!r}")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:  # checked here, so that the error names the file: the flag's own check, and its choices
        read = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
        _refuse(family, f"{label}: {name}: {err}")
    if action.choices is not None and read not in action.choices:
        _refuse(family, f"{label}: {name}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return [f"--{name}={text}"]  # one word: a value that starts with a dash is a value, not a flag


def _from_run(trainer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What the run chose for the settings left unset (null: the preset's, the family's): the training config's
    values (``lr``, ``warmup_steps`` ...), the family's settings it saved (``batch_size``, ``tokenizer`` ...) and,
    unless it started from ``--init`` (whose shape is the pretrained model's, and those flags refused), the shape
    of the model it built (``d_model``, ``dropout`` ...)."""
    import dataclasses

    from tformer.training.resume import SHAPE_SETTINGS  # (torch: imported once a run has trained)

    sources: list[dict[str, Any]] = []
    cfg = getattr(trainer, "cfg", None)
    if dataclasses.is_dataclass(cfg):
        sources.append({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    if getattr(args, "init", None) is None:
        settings = dict((getattr(trainer, "run_info", None) or {}).get("settings") or {})
        if getattr(args, "tokenizer_dir", None) is not None:  # its tokenizer: a kind or size besides is refused
            settings = {k: v for k, v in settings.items() if k not in ("tokenizer", "vocab_size")}
        sources.append(settings)
        config = getattr(getattr(trainer, "model", None), "config", None)
        sources.append({k: getattr(config, k) for k in SHAPE_SETTINGS if hasattr(config, k)})  # not null
        sources.append({"pad_vocab": getattr(config, "vocab_multiple", None)})  # a GPT's table rounded up
    found: dict[str, Any] = {}
    for source in sources:  # the first that has a value
        found.update({k: v for k, v in source.items() if v is not None and k not in found})
    return {k: v for k, v in found.items() if getattr(args, k, None) is None}


def write_resolved(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: str | Path, trainer: Any = None
) -> Path:
    """``OUT/config.yaml``: every setting of the command that made ``args`` (by flag name, as resolved: the
    defaults, the config file's, the command line's, and for those left unset what ``trainer``'s run chose:
    :func:`_from_run`), written whole; ``--config`` it to repeat the run, even after the presets change."""
    import yaml

    from tformer.files import atomic_write

    found = _family_parser(parser, ["train", args.family])
    assert found is not None
    family = found[0]
    chosen = _from_run(trainer, args) if trainer is not None else {}
    resolved: dict[str, Any] = {}
    for action in family._actions:
        names = [o[2:] for o in action.option_strings if o.startswith("--")]
        if not names or names[0] in _NOT_SETTINGS or action.help == argparse.SUPPRESS:
            continue
        if action.dest == "bf16":  # the alias of precision: bf16, written as that
            continue
        value = getattr(args, action.dest, None)
        if value is None and action.nargs != 0:
            value = chosen.get(action.dest)
        if action.dest == "precision" and getattr(args, "bf16", False):
            value = "bf16"
        if action.nargs == 0:  # a switch: true when it changed its default
            value = value != action.default
        elif isinstance(getattr(action.type, "kind", None), str) and value is not None and os.path.exists(value):
            value = os.path.abspath(value)  # a path (tformer.cli.validate.PathArg): the file repeats from anywhere
        resolved[names[0]] = str(value) if isinstance(value, Path) else value
    text = f"# tformer train {args.family}: the settings this run resolved (--config this file repeats it)\n"
    text += yaml.safe_dump({"family": args.family, **resolved}, sort_keys=False, allow_unicode=True)
    path = Path(out) / CONFIG_NAME
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path
