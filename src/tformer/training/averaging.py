"""Checkpoint averaging: the models a run kept at its last evaluations, averaged parameter by parameter into one model
(fairseq's ``average_checkpoints.py``, OpenNMT-py's model averaging). Averaging the weights of nearby points of one
run lands nearer the middle of the valley they circle, and usually scores a little better than any one of them.

    tformer train translation ... --eval-every 200 --keep-checkpoints 5   # OUT/checkpoints/step-0001000 ...
    tformer average runs/mt avg5/ --last 5                               # a model directory: avg5/
    tformer average runs/mt best3/ --best 3                              # the 3 best by the run's own metric

A training run with ``keep_checkpoints=K`` (``--keep-checkpoints K``) saves the model of each evaluation as
``OUT/checkpoints/step-NNNNNNN/`` (what ``best/`` holds: weights, config, tokenizer) with a ``checkpoint.json`` (its
step and metric) and keeps the newest K (:func:`keep_checkpoint`). :func:`average_models` averages any model
directories of one kind and shape, in float64, each tensor stored back in its own dtype; integer buffers must agree.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from tformer.files import staged_dir

__all__ = [
    "CHECKPOINTS",
    "keep_checkpoint",
    "checkpoints",
    "choose_checkpoints",
    "average_models",
    "write_average",
]

CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-NNNNNNN
INFO = "checkpoint.json"  # {"step": ..., "metric": ..., "value": ..., "higher_is_better": ...}
_ADAPTER = ("adapter_model.safetensors", "adapter_config.json")  # a LoRA run's PEFT adapter: not the average's


def keep_checkpoint(out: Path, step: int, info: dict, save: Callable[[Path], None], keep: int, saving) -> None:
    """``out/checkpoints/step-NNNNNNN`` written whole by ``save(directory)`` inside ``saving(dest)`` (the Trainer's
    staged write), with ``info`` as its ``checkpoint.json``; then only the newest ``keep`` checkpoints are left."""
    with saving(out / CHECKPOINTS / f"step-{step:07d}") as tmp:
        save(tmp)
        (tmp / INFO).write_text(json.dumps({"step": step, **info}))
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def checkpoints(run: str | Path) -> list[Path]:
    """The checkpoints a run kept (``RUN/checkpoints/step-*`` with their ``checkpoint.json``), oldest first."""
    folder = Path(run) / CHECKPOINTS
    found = [d for d in folder.glob("step-*") if (d / INFO).is_file()] if folder.is_dir() else []
    return sorted(found, key=lambda d: json.loads((d / INFO).read_text())["step"])


def choose_checkpoints(run: str | Path, last: int | None = None, best: int | None = None) -> list[Path]:
    """The ``last`` newest of a run's checkpoints, or its ``best`` by the metric its ``best/`` is chosen by (ties:
    the newer); each must exist: asking for more than the run kept is one line saying how many it has."""
    kept = checkpoints(run)
    want = last if last is not None else best
    if not kept:
        raise FileNotFoundError(
            f"{str(run)!r} holds no checkpoints to average ({CHECKPOINTS}/step-*): train it with --keep-checkpoints K"
        )
    if want is None or want > len(kept):
        raise ValueError(f"--{'last' if last is not None else 'best'} {want}: {run} kept {len(kept)} checkpoint(s)")
    if last is not None:
        return kept[-last:]
    infos = [json.loads((d / INFO).read_text()) for d in kept]
    if any(i.get("value") is None for i in infos):
        raise ValueError(f"--best {best}: {run}'s checkpoints have no validation metric to rank them (use --last)")
    sign = 1.0 if infos[0]["higher_is_better"] else -1.0
    ranked = sorted(range(len(kept)), key=lambda i: (sign * infos[i]["value"], infos[i]["step"]), reverse=True)
    return sorted((kept[i] for i in ranked[:best]), key=kept.index)


def average_models(directories: Sequence[str | Path]):
    """The models of ``directories`` (of one kind and shape) averaged parameter by parameter: the last one's model
    with the mean of each parameter (computed in float64, stored in its own dtype); a directory whose parameters
    differ in name or shape, or whose integer buffers differ, is one line naming it."""
    from tformer.models.checkpoint import load_pretrained

    if not directories:
        raise ValueError("no model directories to average")
    total: dict[str, torch.Tensor] = {}
    model = None
    for n, directory in enumerate(directories):
        model = load_pretrained(directory)
        state = model.state_dict()
        if n == 0:
            total = {k: v.double() if v.is_floating_point() else v.clone() for k, v in state.items()}
            continue
        if {k: tuple(v.shape) for k, v in state.items()} != {k: tuple(v.shape) for k, v in total.items()}:
            raise ValueError(f"{str(directory)!r} does not have the parameters of {str(directories[0])!r}: not one run")
        for k, v in state.items():
            if v.is_floating_point():
                total[k] += v.double()
            elif not torch.equal(v, total[k]):
                raise ValueError(f"{str(directory)!r}: {k} differs from {str(directories[0])!r}'s (not averaged)")
    assert model is not None
    own = model.state_dict()
    mean = {k: (v / len(directories)).to(own[k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    model.load_state_dict(mean)
    return model


def write_average(directories: Sequence[str | Path], out: str | Path) -> Path:
    """``out``: the average of ``directories`` (:func:`average_models`) as a model directory, the last one's other
    files (tokenizer, labels) beside it, written whole or not at all."""
    model = average_models(directories)
    with staged_dir(out) as tmp:
        for f in Path(directories[-1]).iterdir():
            if f.is_file() and f.name not in (INFO, *_ADAPTER):
                shutil.copy2(f, tmp / f.name)
        model.save_pretrained(tmp)
    return Path(out)
