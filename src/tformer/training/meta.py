"""The JSON files of a saved training state, checked field by field as they are read: ``last/state.json`` (step,
epoch, data position, elapsed seconds, best metric, the TrainConfig, the run's kind and settings; :func:`read_meta`)
and ``last/trainer_state.json``'s optimizer, scheduler and process count (:func:`check_trainer_json`). A missing,
empty or damaged file, or a field of the wrong type, is an error naming the file and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tformer.readers import read_json_object

__all__ = ["STATE_NAME", "read_meta", "check_trainer_json", "is_int", "is_number"]

STATE_NAME = "state.json"


def check_trainer_json(path: Path, meta: dict[str, Any]) -> None:
    """``trainer_state.json`` must hold the optimizer's param groups and slots, the scheduler and a process count."""
    optimizer, scheduler, processes = meta.get("optimizer"), meta.get("scheduler"), meta.get("processes")
    problem = None
    if not isinstance(optimizer, dict):
        problem = f"'optimizer' is {_shown(optimizer)}, expected an object with 'param_groups' and 'state'"
    elif not isinstance(optimizer.get("param_groups"), list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in optimizer["param_groups"]
    ):
        problem = "'optimizer.param_groups' must be a list of objects, each with its 'params'"
    elif not isinstance(optimizer.get("state"), dict) or not all(
        k.isdigit() and isinstance(v, dict) for k, v in optimizer["state"].items()
    ):
        problem = "'optimizer.state' must be an object of parameter numbers to objects"
    elif not isinstance(scheduler, dict) or not isinstance(scheduler.get("base_lrs"), list):
        problem = f"'scheduler' is {_shown(scheduler)}, expected the scheduler's state (an object with 'base_lrs')"
    elif not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        problem = f"'processes' is {_shown(processes)}, expected the number of processes (1 or more)"
    if problem:
        raise ValueError(f"training state {str(path)!r}: {problem} (the file is damaged or not tformer's)")


def read_meta(directory: Path) -> dict[str, Any]:
    """``directory/state.json`` (step, epoch, data position, elapsed seconds, best metric, the TrainConfig, the
    run's kind and settings), checked field by field: a missing, empty or damaged file, or a field of the wrong
    type, is an error naming the file and the field."""
    path = directory / STATE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is missing: {directory} holds no training state to resume from")
    meta = read_json_object(path, "training state")
    expected = {
        "step": ("a whole number >= 0", lambda v: is_int(v) and v >= 0),
        "epoch": ("a whole number >= 0", lambda v: is_int(v) and v >= 0),
        "batch_index": ("a whole number >= 0", lambda v: is_int(v) and v >= 0),
        "elapsed": ("a number of seconds >= 0", lambda v: is_number(v) and 0 <= v < math.inf),
        "best": ("a number or null", lambda v: v is None or is_number(v)),
    }
    optional = {
        "skipped_steps": ("a whole number >= 0", lambda v: is_int(v) and v >= 0),
        "stale_evals": ("a whole number >= 0", lambda v: is_int(v) and v >= 0),
        "best_step": ("a whole number >= 0 or null", lambda v: v is None or (is_int(v) and v >= 0)),
        "best_ema": ("true or false", lambda v: isinstance(v, bool)),
        "precision": ("'fp32', 'bf16' or 'fp16'", lambda v: v in ("fp32", "bf16", "fp16")),
        "train_config": ("an object (the TrainConfig)", lambda v: isinstance(v, dict)),
        "run": (
            "an object with the run's 'kind' and 'settings'",
            lambda v: isinstance(v, dict) and isinstance(v.get("kind"), str) and isinstance(v.get("settings"), dict),
        ),
    }
    for name, (what, ok) in {**expected, **optional}.items():
        if name not in meta and name in optional:
            continue
        if name not in meta or not ok(meta[name]):
            got = "missing" if name not in meta else f"{_shown(meta[name])}"
            raise ValueError(f"training state {str(path)!r}: {name!r} is {got}, expected {what}")
    return meta


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = json.dumps(value) if value is not None else "null"
    return text if len(text) <= 40 else text[:37] + "..."
