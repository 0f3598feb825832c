"""Starting or resuming a run, written once for the three families.

A run directory holds the best model at its top and the latest full state in ``OUT/last`` (see
:mod:`tformer.training.trainer`). Resuming takes the model config and the tokenizer from ``OUT/last``,
builds the model from that config, and lets :meth:`Trainer.resume` restore the weights, the optimizer,
the schedule, the RNG and the data position. This module knows nothing about any family: the model
class and the tokenizer loader are passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tformer.training.trainer import TrainConfig, Trainer

__all__ = ["last_dir", "saved_run", "make_trainer"]


def last_dir(out_dir: str | Path) -> Path:
    """``OUT/last``: where a run keeps its latest full state."""
    return Path(out_dir) / "last"


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
