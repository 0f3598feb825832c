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
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tformer.files import atomic_write, current_dir, earlier_name, leftover_of, recover_dir
from tformer.models.checkpoint import BEST_DIR, CONFIG_NAME, WEIGHTS_NAME
from tformer.settings import renamed
from tformer.training import distributed
from tformer.training.averaging import CHECKPOINTS
from tformer.training.lock import LOCK_NAME, RunLock, foreign_lock, foreign_message
from tformer.training.runlog import CSV_NAME, TENSORBOARD_DIR
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
    "make_trainer",
    "RUN_FILES",
]

# What a run writes into OUT, and all that --overwrite deletes: the best model, the last state, the log and its
# plot, translation's held-out splits, `tformer demo`'s attention picture, --keep-checkpoints' models, the settings
# resolved (tformer train's OUT/config.yaml), the log's CSV and TensorBoard copies
RUN_FILES = (BEST_DIR, "last", "log.jsonl", "curves.png", "data", "cross_attention.png", CHECKPOINTS, "config.yaml", CSV_NAME, TENSORBOARD_DIR)  # fmt: skip
# tformer 0.1 kept the best model at the top of OUT: its config, weights, tokenizers and labels (a run's only
# beside that model: config and weights at the top)
LEGACY_FILES = (
    CONFIG_NAME,
    WEIGHTS_NAME,
    "src_tokenizer.json",
    "tgt_tokenizer.json",
    "char_tokenizer.json",
    "tokenizer.json",
    "labels.json",
)
_DATA_FILES = {"valid.tsv", "test.tsv"}  # what a run writes into OUT/data
_MARKERS = (BEST_DIR, "last", "log.jsonl", "data")  # any of these (as a run writes it) makes OUT a run

# TrainConfig fields a resumed run must keep (the optimizer, the schedule, the data order); the others (the
# budget, the evaluation cadence, the device, ...) may change. Flags name them; the rest by their field.
FIXED_FIELDS = ("lr", "schedule", "warmup_steps", "min_lr_ratio", "weight_decay", "optimizer", "betas", "clip",
                "accum_steps", "seed", "ema")  # fmt: skip
_BUDGET = ("max_steps", "epochs", "minutes", "eval_every", "log_every", "device", "precision")
REPORTED_FIELDS: tuple[str, ...] = (*_BUDGET, "max_bad_steps", "patience", "keep_checkpoints", "log_to")
_NO_FLAG = ("min_lr_ratio", "betas")


@dataclass
class StartedRun:
    """A run directory this process has judged and locked (rank 0; on the other ranks ``lock`` is None), handed from
    :func:`start_run` to :func:`make_trainer` by the caller. Used as ``with start_run(...) as started:`` around the
    setup between them, it releases the lock if the setup fails (a trainer made from it holds it instead)."""

    lock: RunLock | None
    run: dict | None = None  # {"kind": ..., "settings": ...}, saved into state.json

    def release(self) -> None:
        """Give the lock back (nothing if it was handed to a trainer or given back already)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> StartedRun:
        return self

    def __exit__(self, kind, _value, _traceback) -> None:
        if kind is not None:
            self.release()


def last_dir(out_dir: str | Path) -> Path:
    """``OUT/last``: where a run keeps its latest full state."""
    return current_dir(Path(out_dir) / "last")


def start_run(cfg: TrainConfig, resume: bool, kind: str | None = None, settings: dict | None = None) -> StartedRun:
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
                _prepare_resume(cfg, kind, settings or {})
            started.run = {"kind": kind, "settings": _plain(settings or {})} if kind else None
        held.append(started)

    distributed.from_rank0(prepare, cfg.device)
    return held[0] if held else StartedRun(None)


def check_out_dir(
    out_dir: str | Path, resume: bool = False, overwrite: bool = False, resumable: bool = True
) -> StartedRun:
    """What :func:`start_run` does first, in this process: judge ``out_dir`` (reading only: it must be empty or
    a run, and its ``.lock`` tformer's); take its lock (returned, for the trainer); refuse a non-empty ``out_dir`` for
    a new run without ``overwrite`` (else delete the old run's files, and only those); repair ``OUT/last`` and check
    that it holds a state for ``resume``. Any error releases the lock.

    ``resumable=False``: the command has no ``--resume`` (``tformer demo``), so the refusal names ``--overwrite`` only.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {str(out)!r} is a file, not a directory")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one of them")
    _judge(out, resume)  # before the lock: nothing is written into a folder that is not a run's
    lock = RunLock(out).acquire()
    if lock.stale:
        print(f"note: took over {str(lock.path)!r}, a lock left by a run that is no longer running: {lock.stale}",
              file=sys.stderr)  # fmt: skip
    with StartedRun(lock) as started:  # released if a check fails
        if resume:
            _check_resumable(out)
        else:
            _clear(out, overwrite, resumable)
    return started


def precheck_out_dir(out_dir: str | Path, resume: bool = False, overwrite: bool = False) -> None:
    """What :func:`check_out_dir` would refuse, judged reading only and taking no lock: a family's setup calls it
    before work that takes long and writes nothing in the run (preparing a corpus), so that a wrong ``--out`` is said
    at once, and that work is done before ``--overwrite`` deletes the old run (bad text is refused with it intact)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {str(out)!r} is a file, not a directory")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one of them")
    _judge(out, resume)
    if not resume:
        _clearable(out, overwrite, True)


def _judge(out: Path, resume: bool) -> None:
    """Refuse, reading only, an ``out`` that is neither missing, empty nor a run (all it holds named), or whose
    ``.lock`` tformer did not write (a link, a file of the user's: naming it); the lock is taken only after."""
    entries = _entries(out)
    if not _is_run(out, entries):
        if [name for name in entries if name != LOCK_NAME]:
            raise _no_state(out) if resume else _not_a_run(out, entries)
        if resume and not os.path.lexists(out / LOCK_NAME):  # with a lock, a run may be starting: the lock tells
            raise _no_state(out)
    what = foreign_lock(out)
    if what is not None:
        raise ValueError(foreign_message(out, what))


def _no_state(out: Path) -> FileNotFoundError:
    last = out / "last"
    return FileNotFoundError(
        f"--resume: {str(last)!r} holds no training state to resume from; train without --resume first"
    )


def _not_a_run(out: Path, entries: list[str], overwrite: bool = False) -> ValueError:
    return ValueError(
        f"--out {str(out)!r} is not empty and is not a tformer run (no best/, last/ or log.jsonl; it holds "
        f"{_shown(entries)}): give another --out"
        + (" (--overwrite deletes only what a run wrote)" if overwrite else "")
    )


def _check_resumable(out: Path) -> None:
    for name in (BEST_DIR, "last"):
        recover_dir(out / name)
    if not (out / "last" / STATE_NAME).is_file():
        raise _no_state(out)


def _entries(out: Path) -> list[str]:
    """What ``out`` holds, hidden names included; its ``.lock`` only if tformer did not write it."""
    if not out.is_dir():
        return []
    names = sorted(p.name for p in out.iterdir())
    return [name for name in names if name != LOCK_NAME or foreign_lock(out) is not None]


def _is_run(out: Path, entries: list[str]) -> bool:
    """Whether ``entries`` of ``out`` make it a run's: one of :data:`_MARKERS`, or a cut save, as a run writes it."""
    return any((name in _MARKERS or _cut_short(out / name)) and _written_by_run(out / name) for name in entries)


def _written_by_run(path: Path) -> bool:
    """Whether ``path``, an entry of a run directory, is one that tformer runs write."""
    name = path.name
    if path.is_symlink():
        return False
    if name in (BEST_DIR, "last"):
        return path.is_dir()
    if name == CHECKPOINTS:  # --keep-checkpoints: step-N folders (and what a cut save of one leaves)
        return path.is_dir() and all(p.name.startswith("step-") or leftover_of(p) for p in path.iterdir())
    if name == "data":
        return path.is_dir() and {p.name for p in path.iterdir()} <= _DATA_FILES
    if name == TENSORBOARD_DIR:  # --log-to tensorboard: its event files only
        return path.is_dir() and all(
            p.name.startswith("events.out.tfevents.") and p.is_file() and not p.is_symlink() for p in path.iterdir()
        )
    if name in LEGACY_FILES:
        return path.is_file() and _legacy_layout(path.parent)
    if name in RUN_FILES:
        return path.is_file()
    return _cut_short(path)


def _legacy_layout(out: Path) -> bool:
    """Whether ``out`` holds a tformer 0.1 run's best model at its top (config and weights, as files; a 0.1 run
    resumed since has best/ too): only then are config.json, tokenizers and labels at the top a run's."""
    return all((out / name).is_file() and not (out / name).is_symlink() for name in (CONFIG_NAME, WEIGHTS_NAME))


def _cut_short(path: Path) -> bool:
    """A write or save of one of the run's files that a crash cut short, as tformer names and marks them, or an
    earlier version's save folder by what it holds (:func:`tformer.files.leftover_of`): never a user's
    ``.best.old``, ``.log.jsonl.bak``, ``.log.jsonl.backup01.tmp`` or ``.best.tmp-20250101/``."""
    return leftover_of(path) in RUN_FILES


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _clear(out: Path, overwrite: bool, resumable: bool) -> None:
    """A new run's directory: empty, or (``overwrite``) a run's, whose files are deleted; else refused."""
    for name in _clearable(out, overwrite, resumable):
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _clearable(out: Path, overwrite: bool, resumable: bool) -> list[str]:
    """What :func:`_clear` would delete of ``out`` (reading only); a directory it would refuse is refused here."""
    entries = _entries(out)
    if not entries:
        return []
    ours = [name for name in entries if _written_by_run(out / name)]
    others = [name for name in entries if name not in ours]
    if not _is_run(out, entries):
        raise _not_a_run(out, entries, overwrite)
    if not overwrite:
        remedy = (
            "pass --resume to continue the run in it, or --overwrite to delete it and start a new one"
            if resumable
            else "pass --overwrite to delete its run and start a new one, or give another --out"
        )
        raise ValueError(f"--out {str(out)!r} is not empty (it holds {_shown(entries)}): {remedy}")
    if others:
        earlier = [name for name in others if earlier_name(out / name)]
        which = "which no tformer run writes" + (
            f" or which tformer cannot tell from files of yours ({_shown(earlier)}: named as earlier versions named "
            "their temporary files)"
            if earlier
            else ""
        )
        raise ValueError(
            f"--overwrite: --out {str(out)!r} holds a run and also {_shown(others)}, {which}; nothing was deleted: "
            f"move them out of {str(out)!r}"
            + (" (delete what an earlier tformer left)" if earlier else "")
            + ", or give another --out"
        )
    return ours


def _prepare_resume(cfg: TrainConfig, kind: str | None, settings: dict) -> None:
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
    distributed.say(_resume_line(cfg, meta))


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists), for comparing with what state.json holds."""
    return json.loads(dumps(value))


def _flag(name: str) -> str:
    if name in ("data_sha256", "valid_data_sha256"):  # the text's content (tformer.data.fingerprint), not a flag
        return f"the text of --{'valid-' * (name != 'data_sha256')}data (SHA-256)"
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
    changed = [f"{_flag(k)} {_value(new, k)} (the run: {_value(old, k)})" for k, old, new in pairs if old != new]
    if changed:
        raise ValueError(
            f"--resume: {'; '.join(changed)}, as saved in {str(path)!r}: a resumed run keeps its model, data, "
            "optimizer and schedule; give the run's values, or start a new run with --overwrite or another --out"
        )


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
) -> Trainer:
    """A :class:`Trainer` of ``model`` on ``task``, restored from ``OUT/last`` when ``resume``; it holds the lock
    of ``started`` (:func:`start_run`) until its ``fit()`` ends (without one, ``fit()`` takes the lock itself).
    ``also_save``: functions ``(model, directory)`` that write more files beside each best model (a LoRA run's
    PEFT adapter); ``evaluate_start``: evaluate the model before the first step (a run from a pretrained model)."""
    with started or StartedRun(None):  # released if the trainer cannot be made
        trainer = Trainer(model, task, cfg)
        trainer.also_save = list(also_save or [])
        trainer.evaluate_start = evaluate_start
        if started is not None:
            trainer.lock, trainer.run_info = started.lock, started.run
        if resume:
            trainer.resume()
    if started is not None:
        started.lock = None  # the trainer's now
    return trainer
