"""Starting or resuming a run, written once for the three families.

A run directory holds the best model in ``OUT/best`` and the latest full state in ``OUT/last`` (see
:mod:`tformer.training.trainer`). :func:`start_run` comes first, before anything is written: a non-empty
``OUT`` is refused unless the run is resumed or ``overwrite`` is given (then the old run's files are
deleted); a resumed run has its ``last/`` repaired if a crash cut a save (:func:`tformer.files.recover_dir`),
converted if tformer 0.1 wrote it, and its ``log.jsonl`` cut back to the steps that ``last/`` holds, so the
log keeps one record per step. Resuming takes the model config and the tokenizer from ``OUT/last``, builds
the model from that config, and lets :meth:`Trainer.resume` restore the weights, the optimizer, the schedule,
the RNG and the data position. This module knows nothing about any family: the model class and the
tokenizer loader are passed in.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tformer.files import atomic_write, current_dir, recover_dir
from tformer.models.checkpoint import BEST_DIR, CONFIG_NAME, WEIGHTS_NAME
from tformer.training import distributed
from tformer.training.state import STATE_NAME, convert_legacy, dumps
from tformer.training.trainer import TrainConfig, Trainer

__all__ = ["last_dir", "start_run", "check_out_dir", "saved_run", "make_trainer", "RUN_FILES"]

# What a run writes into OUT, deleted by --overwrite (CONFIG_NAME and WEIGHTS_NAME: tformer 0.1's best model)
RUN_FILES = (BEST_DIR, "last", "log.jsonl", "curves.png", "data", CONFIG_NAME, WEIGHTS_NAME)


def last_dir(out_dir: str | Path) -> Path:
    """``OUT/last``: where a run keeps its latest full state."""
    return current_dir(Path(out_dir) / "last")


def start_run(cfg: TrainConfig, resume: bool) -> None:
    """Check and prepare ``cfg.out_dir`` before a run writes anything (rank 0 does it; its error reaches all).

    A new run needs an empty or missing directory, or ``cfg.overwrite``; ``resume`` needs a saved state.
    """
    distributed.from_rank0(lambda: check_out_dir(cfg.out_dir, resume, cfg.overwrite), cfg.device)


def check_out_dir(out_dir: str | Path, resume: bool = False, overwrite: bool = False, resumable: bool = True) -> None:
    """What :func:`start_run` does, in this process: refuse a non-empty ``out_dir`` for a new run without
    ``overwrite`` (else delete the old run's files); repair and check ``OUT/last`` for ``resume``.

    ``resumable=False``: the command has no ``--resume`` (``tformer demo``), so the refusal names ``--overwrite`` only.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {str(out)!r} is a file, not a directory")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one of them")
    if resume:
        if out.is_dir():
            for name in (BEST_DIR, "last"):
                recover_dir(out / name)
        last = out / "last"
        if not (last / STATE_NAME).is_file():
            raise FileNotFoundError(
                f"--resume: {str(last)!r} holds no training state to resume from; train without --resume first"
            )
        convert_legacy(last)
        _cut_log(out / "log.jsonl", json.loads((last / STATE_NAME).read_text(encoding="utf-8"))["step"])
        return
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if entries and not overwrite:
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        remedy = (
            "pass --resume to continue the run in it, or --overwrite to delete it and start a new one"
            if resumable
            else "pass --overwrite to delete its run and start a new one, or give another --out"
        )
        raise ValueError(f"--out {str(out)!r} is not empty (it holds {shown}): {remedy}")
    for name in entries:
        path = out / name
        if name in RUN_FILES or name.startswith((f".{BEST_DIR}.", ".last.", ".log.jsonl.")):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _cut_log(path: Path, step: int) -> None:
    """Keep the records of steps up to ``step`` (what ``last/`` holds), and no line a crash cut short."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(dumps(record) + "\n")
    atomic_write(path, lambda tmp: Path(tmp).write_text("".join(kept), encoding="utf-8"))


def saved_run(out_dir: str | Path, model_class, load_tokenizer: Callable[[Path], Any]) -> tuple[Any, Any]:
    """(model config, tokenizer) of the run in ``out_dir``, read from ``OUT/last`` for ``--resume``."""
    last = last_dir(out_dir)
    tokenizer = load_tokenizer(last)
    return model_class.from_pretrained(last).config, tokenizer


def make_trainer(model, task, cfg: TrainConfig, resume: bool = False) -> Trainer:
    """A :class:`Trainer` of ``model`` on ``task``, restored from ``OUT/last`` when ``resume``."""
    trainer = Trainer(model, task, cfg)
    if resume:
        trainer.resume()
    return trainer
