"""Starting or resuming a run, written once for the three families.

A run directory holds the best model in ``OUT/best`` and the latest full state in ``OUT/last`` (see
:mod:`tformer.training.trainer`). :func:`start_run` comes first, before anything is read or written:

- it judges ``OUT``, reading only: a folder that is neither empty nor a tformer run, or whose ``.lock`` tformer
  did not write, is refused before anything is written there, naming what it holds (hidden files too);
- it takes the directory's lock (:mod:`tformer.training.lock`), held until training ends (it returns it, as a
  :class:`StartedRun` the caller hands to :func:`make_trainer`: no module keeps it), so a second run, a
  ``--resume`` or an ``--overwrite`` into a directory where a run trains is refused, naming that run; then it
  judges ``OUT`` again, under the lock (another run may have started and ended in between);
- a new run needs an empty or missing ``OUT``; ``overwrite`` deletes what a tformer run wrote there
  (:data:`RUN_FILES`, the leftovers of its cut saves, as :func:`tformer.files.leftover_of` tells them) and
  refuses a directory that holds anything else, deleting nothing;
- a resumed run has its ``last/`` repaired if a crash cut a save (:func:`tformer.files.recover_dir`) and its
  state checked file by file; it must be a run of the same kind (``lm`` is not resumed as ``translation``), with
  the same settings (model, data, optimizer and schedule: a change is refused, naming each flag and both
  values), and with a budget left (``--max-steps``/``--epochs``/``--minutes`` are totals); the budget, evaluation
  cadence and device may change, and the resumed run prints the values it uses. Only then is ``last/``
  converted if tformer 0.1 wrote it, and ``log.jsonl`` cut back to the steps that ``last/`` holds.

Resuming takes the model config and the tokenizer from ``OUT/last``, builds the model from that config, and lets
:meth:`Trainer.resume` restore the weights, the optimizer, the schedule, the RNG and the data position. This
module knows nothing about any family: the kind, the settings, the model class and the tokenizer loader are
passed in.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tformer.files import atomic_write, current_dir
from tformer.models.checkpoint import CONFIG_NAME
from tformer.settings import renamed
from tformer.training import distributed
from tformer.training.lock import RunLocked, in_use, running
from tformer.training.rundir import RUN_FILES, StartedRun, check_out_dir, clearable, judge
from tformer.training.state import STATE_NAME, convert_legacy, dumps, read_meta
from tformer.training.trainer import TrainConfig, Trainer, budget_reached, budget_spent_message

__all__ = [
    "last_dir",
    "StartedRun",
    "start_run",
    "check_out_dir",
    "precheck_out_dir",
    "saved_run",
    "saved_settings",
    "SHAPE_SETTINGS",
    "make_trainer",
    "RUN_FILES",
]

# TrainConfig fields a resumed run must keep (the optimizer, the schedule, the data order); the others (the
# budget, the evaluation cadence, the device, ...) may change. Flags name them; the rest by their field.
FIXED_FIELDS = ("lr", "schedule", "warmup_steps", "min_lr_ratio", "weight_decay", "optimizer", "betas", "clip",
                "accum_steps", "seed", "ema")  # fmt: skip
_BUDGET = ("max_steps", "epochs", "minutes", "eval_every", "log_every", "device", "precision")
REPORTED_FIELDS: tuple[str, ...] = (
    *_BUDGET,
    "max_bad_steps",
    "patience",
    "keep_checkpoints",
    "log_to",
    "fsdp",
    "compile",
)
_NO_FLAG = ("betas",)
# the budget a resume may change, as numbers: what it writes into OUT/config.yaml (_refresh_config)
_BUDGET_NUMBERS = ("max_steps", "epochs", "minutes", "eval_every", "log_every", "max_bad_steps", "patience",
                   "keep_checkpoints")  # fmt: skip


def last_dir(out_dir: str | Path) -> Path:
    """``OUT/last``: where a run keeps its latest full state."""
    return current_dir(Path(out_dir) / "last")


def start_run(
    cfg: TrainConfig, resume: bool, kind: str | None = None, settings: dict | None = None, log: Callable | None = None
) -> StartedRun:
    """Lock, check and prepare ``cfg.out_dir`` before a run reads or writes anything (rank 0 does it; its error
    reaches all); returns the :class:`StartedRun` to hand to :func:`make_trainer`. ``kind`` (``"lm"``,
    ``"translation"``, ...) and ``settings`` (the family's options that make the run, by flag name) are saved with
    the run, so that ``--resume`` can tell a run of another kind or changed settings. A new run needs an empty or
    missing directory, or ``cfg.overwrite``; ``resume`` needs a saved state.
    """
    held: list[StartedRun] = []  # rank 0's (a lock is not handed to the other processes)

    def prepare() -> None:
        started = check_out_dir(cfg.out_dir, resume, cfg.overwrite)
        with started:  # released if what follows fails
            if resume:
                _prepare_resume(cfg, kind, settings or {}, log or distributed.say)
            started.run = {"kind": kind, "settings": _plain(settings or {})} if kind else None
        held.append(started)

    distributed.from_rank0(prepare, cfg.device)
    return held[0] if held else StartedRun(None)


def precheck_out_dir(
    out_dir: str | Path, resume: bool = False, overwrite: bool = False, cache: str | Path | None = None, **inputs: Any
) -> None:
    """What :func:`check_out_dir` would refuse, judged reading only and taking no lock: a family's setup calls it
    before work that takes long and writes nothing in the run (preparing a corpus), so that a wrong ``--out`` is said
    at once, and that work is done before ``--overwrite`` deletes the old run (bad text is refused with it intact).
    ``cache`` (``--data-cache``) and ``inputs`` (``data=...``, ``valid_data=...``: the flags' names) may not lie in
    ``out_dir``: a run's folder holds what the run writes, which ``--overwrite`` deletes and a resume changes."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {str(out)!r} is a file, not a directory")
    real = Path(os.path.realpath(out))
    for name, path in {"data_cache": cache, **inputs}.items():
        if not isinstance(path, (str, os.PathLike)) or not os.path.lexists(path) and name != "data_cache":
            continue  # not given, or a name (--data builtin)
        held = Path(os.path.realpath(path))
        if held == real or real in held.parents:
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} {str(path)!r} lies in --out {str(out)!r}: a run's folder holds what the run writes only, "
                f"which --overwrite deletes and a resumed run changes: give a {flag} outside it"
            )
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one of them")
    judge(out, resume)
    holder = running(out)
    if holder is not None:  # said first: "not empty, pass --resume" would be refused by the lock anyway
        raise RunLocked(in_use(out, holder))
    if not resume:
        clearable(out, overwrite, True)


def _prepare_resume(cfg: TrainConfig, kind: str | None, settings: dict, log: Callable[[str], None]) -> None:
    """Check that ``OUT/last`` can be resumed with ``cfg`` and ``settings``, then convert it and cut the log."""
    out, last = Path(cfg.out_dir), Path(cfg.out_dir) / "last"
    meta = read_meta(last)
    run = meta.get("run")
    if run is not None and kind is not None and run["kind"] != kind:
        raise ValueError(
            f"--resume: {str(out)!r} holds a `tformer train {run['kind']}` run, not a `train {kind}` one: resume it "
            f"with `tformer train {run['kind']} ... --resume`"
        )
    _check_settings(cfg, settings, meta, last / STATE_NAME)
    reached = budget_reached(cfg, meta["step"], meta["epoch"], meta["elapsed"])
    if reached:
        raise ValueError("--resume: " + budget_spent_message(out, reached))
    convert_legacy(last)
    _cut_log(out / "log.jsonl", meta["step"])
    log(_resume_line(cfg, meta))


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists), for comparing with what state.json holds."""
    return json.loads(dumps(value))


def _flag(name: str) -> str:
    if name.endswith("_sha256"):  # the text's content (tformer.data.fingerprint), not a flag
        return f"the text of --{'valid-' * name.startswith('valid')}data (SHA-256)"
    return f"TrainConfig.{name}" if name in _NO_FLAG else "--" + name.replace("_", "-")


_NONE_IS_OFF = {"ema": "0 (none)", "patience": "none", "keep_checkpoints": "none"}  # None: the feature off


def _value(value: Any, name: str = "") -> str:
    if value is None:
        return _NONE_IS_OFF.get(name, "not given")
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"  # a SHA-256
    return f"{value:g}" if isinstance(value, float) else str(value)


def _check_settings(cfg: TrainConfig, settings: dict, meta: dict, path: Path) -> None:
    """Refuse a resume whose fixed settings differ from the run's, naming each with both values."""
    saved_cfg, new_cfg = meta.get("train_config") or {}, _plain(asdict(cfg))
    saved_settings = renamed((meta.get("run") or {}).get("settings") or {}, "", warn=False)  # 0.2.0's names too
    pairs = [(f, saved_cfg[f], new_cfg[f]) for f in FIXED_FIELDS if f in saved_cfg]
    pairs += [(k, saved_settings[k], v) for k, v in _plain(settings).items() if k in saved_settings]
    built = _built_shape(path.parent)

    def same(name: str, old: Any, new: Any) -> bool:  # unset (None: the preset's) is the value the model was built with
        if name == "init" and isinstance(old, str) and isinstance(new, str):  # one directory, however it is spelled
            return os.path.realpath(old) == os.path.realpath(new)
        return old == new or (name in built and None in (old, new) and built[name] == (new if old is None else old))

    def shown(name: str, value: Any) -> str:
        return f"{_value(built[name])}, the preset's" if value is None and name in built else _value(value, name)

    changed = [
        f"{_flag(k)} {shown(k, new)} (the run: {shown(k, old)})" for k, old, new in pairs if not same(k, old, new)
    ]
    if changed:
        raise ValueError(
            f"--resume: {'; '.join(changed)}, as saved in {str(path)!r}: a resumed run keeps its model, data, "
            "optimizer and schedule; give the run's values, or start a new run with --overwrite or another --out"
        )


# the model's shape, by the settings' (and its config's) names: None in a run's settings is the preset's value
SHAPE_SETTINGS = (
    "d_model",
    "n_heads",
    "d_ff",
    "n_layers",
    "n_encoder_layers",
    "n_decoder_layers",
    "dropout",
    "ffn_dropout",
    "shift_tokens",
    "max_len",
)


def _built_shape(last: Path) -> dict[str, Any]:
    """The shape of the model the run built (``last/config.json``), by the settings' names: a setting given as the
    value the preset chose (``OUT/config.yaml`` writes them so) is the same as one left to the preset."""
    try:
        config = json.loads((last / CONFIG_NAME).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    built = {k: config[k] for k in SHAPE_SETTINGS if k in config}
    if "vocab_multiple" in config:  # a GPT's table rows, rounded up to a multiple of --pad-vocab
        built["pad_vocab"] = config["vocab_multiple"]
    return built


def _resume_line(cfg: TrainConfig, meta: dict) -> str:
    """What the resumed run starts from, and the settings it uses that differ from the run's last save."""
    saved_cfg, new_cfg = meta.get("train_config") or {}, _plain(asdict(cfg))
    changed = [
        f"{_flag(f)} {_value(new_cfg[f], f)} (was {_value(saved_cfg[f], f)})"
        for f in REPORTED_FIELDS
        if f in saved_cfg and saved_cfg[f] != new_cfg[f]
    ]
    limits = [f"{_flag(f)} {_value(new_cfg[f])}" for f in ("max_steps", "epochs", "minutes") if new_cfg[f] is not None]
    return (
        f"resuming {str(cfg.out_dir)!r} at step {meta['step']} (epoch {meta['epoch']}, "
        f"{meta['elapsed'] / 60:.2f} min trained), until {' or '.join(limits)} in all; "
        + (f"changed: {', '.join(changed)}" if changed else "every other setting as the run had it")
    )


def _refresh_config(path: Path, cfg: TrainConfig) -> None:
    """``OUT/config.yaml`` (the settings a command-line run resolved, by flag name) with the budget this resume gives
    (``--max-steps``, ``--epochs``, ``--patience``, ...: the numbers that may change), so that the run's record is
    what it trains to: a resume from Python left it saying the old budget, which a later ``--out OUT --resume`` then
    read. (The command line writes the whole file again after its own resume.) No such file: nothing to do."""
    if not path.is_file():
        return
    import yaml

    text = path.read_text(encoding="utf-8")
    head = text.split("\n", 1)[0] + "\n" if text.startswith("#") else ""
    settings = yaml.safe_load(text)
    if not isinstance(settings, dict):
        return
    fields = asdict(cfg)
    now = {k: fields[k.replace("-", "_")] for k in settings if k.replace("-", "_") in _BUDGET_NUMBERS}
    if all(settings[k] == v for k, v in now.items()):
        return
    settings.update(now)
    body = yaml.safe_dump(settings, sort_keys=False, allow_unicode=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(head + body, encoding="utf-8"))


def _cut_log(path: Path, step: int) -> None:
    """Keep the records of steps up to ``step`` (what ``last/`` holds), and no line a crash cut short; rewrite
    the file only if that drops a line. A byte that is not UTF-8 is an error naming the file and the line."""
    if not path.is_file():
        return
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        lineno = data[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{str(path)!r}:{lineno}: byte 0x{data[err.start]:02x} is not UTF-8: expected the run's log, one JSON "
            "record per line; delete that line (or the file: the model and its state are in best/ and last/)"
        ) from None
    kept = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(dumps(record) + "\n")
    if "".join(kept) != text:
        mode = stat.S_IMODE(path.stat().st_mode)  # the temp file's private 0o600 would hide the log from others

        def write(tmp: str) -> None:
            Path(tmp).write_text("".join(kept), encoding="utf-8")
            os.chmod(tmp, mode)

        atomic_write(path, write)


def saved_run(out_dir: str | Path, model_class, load_tokenizer: Callable[[Path], Any]) -> tuple[Any, Any]:
    """(model config, tokenizer) of the run in ``out_dir``, read from ``OUT/last`` for ``--resume``; the model
    first, so that a run of another family is named by its model type rather than by a missing tokenizer."""
    last = last_dir(out_dir)
    config = model_class.from_pretrained(last).config
    return config, load_tokenizer(last)


def saved_settings(out_dir: str | Path) -> dict:
    """The family's settings that the run in ``out_dir`` saved (``OUT/last/state.json``), or {} when there is no
    readable state: that is said when the run is opened for ``--resume``."""
    try:
        return dict((read_meta(last_dir(out_dir)).get("run") or {}).get("settings") or {})
    except (OSError, ValueError):
        return {}


def make_trainer(
    model,
    task,
    cfg: TrainConfig,
    resume: bool = False,
    started: StartedRun | None = None,
    also_save: list | None = None,
    evaluate_start: bool = False,
    log: Callable[[str], None] | None = None,
) -> Trainer:
    """A :class:`Trainer` of ``model`` on ``task``, restored from ``OUT/last`` when ``resume``; it holds the lock
    of ``started`` (:func:`start_run`) until its ``fit()`` ends (without one, ``fit()`` takes the lock itself).
    ``also_save``: functions ``(model, directory)`` that write more files beside each best model (a LoRA run's
    PEFT adapter); ``evaluate_start``: evaluate the model before the first step (a run from a pretrained model);
    ``log``: where the trainer's report goes (the setup's ``log``; None: stdout)."""
    with started or StartedRun(None):  # released if the trainer cannot be made
        trainer = Trainer(model, task, cfg)
        trainer.also_save = list(also_save or [])
        trainer.evaluate_start, trainer.log = evaluate_start, log
        if started is not None:
            trainer.lock, trainer.run_info = started.lock, started.run
        if resume:
            trainer.resume()
            if trainer.world.is_main:  # (resumed whole: a refusal above leaves the file as it was)
                _refresh_config(Path(cfg.out_dir) / "config.yaml", cfg)
    if started is not None:
        started.lock = None  # the trainer's now
    return trainer
