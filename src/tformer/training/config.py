"""What a training run is asked to do: :class:`TrainConfig` (the settings every family shares; an entry point's
options checked against it by :func:`known_train_options`), when its budget is spent (:func:`budget_reached`), the
learning-rate schedule (:func:`lr_factor`) and the optimizer (:func:`make_optimizer`, made by
:mod:`~tformer.training.optimizers`). The :class:`~tformer.training.trainer.Trainer` runs them; this module knows
nothing about models, tasks or files.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from tformer.checks import BadValue, Number, check_device, check_settings, did_you_mean, log_sinks
from tformer.training import optimizers

__all__ = [
    "GPU_MIN_TOKENS",
    "TRAINING_PRECISIONS",
    "TrainConfig",
    "gpu_batch_note",
    "budget_reached",
    "budget_spent_message",
    "check_accumulation",
    "patience_spent",
    "lr_factor",
    "make_optimizer",
]


_BETA = Number(float, 0, 1, high_open=True)  # each of AdamW's betas
_MIN_LR_RATIO = 0.1  # where the cosine decay ends by default (nanoGPT's min_lr = lr / 10)

# what a training run accepts for precision (int8 is for inference only: training keeps float weights)
TRAINING_PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class TrainConfig:
    out_dir: str
    lr: float = 5e-4
    schedule: str = "inverse_sqrt"  # "inverse_sqrt" (the paper) | "cosine" | "constant"
    warmup_steps: int = 400
    min_lr_ratio: float = _MIN_LR_RATIO  # cosine decays to lr × min_lr_ratio (only cosine has an end to set)
    weight_decay: float = 0.01
    optimizer: str = "adamw"  # "adamw" | "muon" (Muon on the layers' weight matrices, AdamW on the rest: optimizers)
    betas: tuple[float, float] = (0.9, 0.98)
    clip: float = 1.0  # max gradient norm (0 = off)
    accum_steps: int = 1
    epochs: int | None = None
    max_steps: int | None = None
    minutes: float | None = None  # time budget: training steps only, evaluations and saves not counted
    eval_every: int | None = None  # optimizer steps between evaluations; None = every epoch
    log_every: int = 10
    seed: int = 0
    # "fp32" | "bf16" (autocast, float32 master weights) | "fp16" (autocast with a gradient scaler) | "auto"
    # (tformer.fast.precision: per device and machine class)
    precision: str = "auto"
    bf16: bool = False  # 0.2.0's precision="bf16"
    device: str = "cpu"
    progress: bool = True
    fast: bool = True  # CPU fast paths (tformer.fast): swapped into the model, the fused loss backward
    compile: bool = False  # torch.compile the model's forward for the training steps (the saved model is plain)
    fsdp: bool = False  # torchrun: shard the weights, gradients and optimizer state over the processes (FSDP2)
    overwrite: bool = False  # start a new run in a non-empty out_dir (its old run is deleted); else refused
    max_bad_steps: int = 5  # stop after this many steps in a row with a non-finite loss or gradient norm
    patience: int | None = None  # stop after this many evaluations in a row without a better task metric (None: never)
    keep_checkpoints: int | None = None  # keep the last K evaluations' models in OUT/checkpoints (tformer average)
    # a moving average of the weights with this decay, evaluated beside them (ema_*); 0 or None: none (--ema 0 turns
    # off a recipe file's)
    ema: float | None = None
    # where the records of OUT/log.jsonl go too: "csv" (OUT/log.csv), "tensorboard" (OUT/tensorboard/, needs the
    # tensorboard package), both ("csv,tensorboard" or a tuple), or none
    log_to: str | tuple[str, ...] = "none"

    def __post_init__(self) -> None:
        # lr > 0, overwrite True or False, ...: the flags' words, before a field is read (a string "no" is true)
        check_settings({f.name: getattr(self, f.name) for f in fields(self)})
        if not isinstance(self.out_dir, (str, os.PathLike)):
            raise BadValue(f"out_dir must be a directory (a str or a path), got {self.out_dir!r:.60}")
        betas = self.betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2 or not all(_BETA.accepts(b) for b in betas):
            raise BadValue(f"betas must be two numbers in [0, 1) (AdamW's, e.g. (0.9, 0.98)), got {betas!r:.60}")
        check_device(self.device)  # one that this machine has: cuda on a CPU-only build is refused here, named
        if self.bf16 and self.precision not in ("auto", "bf16"):
            raise ValueError(f"bf16=True (--bf16) and precision={self.precision!r} contradict each other: give one")
        if self.bf16:
            object.__setattr__(self, "precision", "bf16")
        object.__setattr__(self, "bf16", self.precision == "bf16")  # the alias follows: one truth, not two
        object.__setattr__(self, "log_to", log_sinks.names(self.log_to, "log_to"))
        if self.ema == 0:  # a decay of 0 averages nothing: no moving average, one truth (None) for the trainer
            object.__setattr__(self, "ema", None)
        if "tensorboard" in self.log_to and importlib.util.find_spec("tensorboard") is None:
            raise BadValue(
                "log_to='tensorboard' (--log-to tensorboard) needs the tensorboard package: pip install "
                "'tformer[tensorboard]' (or give --log-to csv)"
            )
        if self.fsdp and int(os.environ.get("WORLD_SIZE", "1")) < 2:  # said before any data is read
            raise BadValue(
                "--fsdp shards the model over the processes of a torchrun job, and this run has one process: run it "
                "with torchrun --nproc-per-node N (N > 1), or without --fsdp"
            )
        if self.precision not in TRAINING_PRECISIONS:
            choices = ", ".join(map(repr, TRAINING_PRECISIONS))
            raise ValueError(f"precision must be one of {choices} for training, got {self.precision!r}")
        optimizers.check_optimizer(self.optimizer)
        if self.fsdp and self.optimizer == "muon":
            raise BadValue(
                "--optimizer muon orthogonalizes each whole weight matrix, and --fsdp shards them over the processes: "
                "give one of the two (DDP, torchrun without --fsdp, takes muon)"
            )
        if self.schedule not in ("inverse_sqrt", "cosine", "constant"):
            raise ValueError(f"schedule must be 'inverse_sqrt', 'cosine' or 'constant', got {self.schedule!r}")
        if self.schedule != "cosine" and self.min_lr_ratio != _MIN_LR_RATIO:  # a setting that would do nothing
            raise BadValue(
                f"min_lr_ratio={self.min_lr_ratio:g} (--min-lr-ratio) sets where the cosine schedule ends, and "
                f"schedule={self.schedule!r} (--schedule {self.schedule}) has no decay to end: give --schedule cosine, "
                "or leave --min-lr-ratio out"
            )
        if self.epochs is None and self.max_steps is None and self.minutes is None:
            raise ValueError("give at least one of epochs, max_steps or minutes (--epochs, --max-steps, --minutes)")
        if self.schedule == "cosine" and self.max_steps is None and self.minutes is None:
            raise ValueError(
                "schedule='cosine' (--schedule cosine) needs max_steps or minutes (--max-steps, --minutes): the "
                "length of its decay"
            )


def known_train_options(options: Mapping[str, Any], entry: Callable) -> Mapping[str, Any]:
    """``options``, an entry point's ``**train_options``, when each names a :class:`TrainConfig` field; else a
    ``TypeError`` (Python's error for an unknown keyword) naming the entry point, the option and the closest of its
    parameters and the fields: ``tformer.lm.setup() got an unknown option 'max_step'; did you mean 'max_steps'?``"""
    fields_ = [f.name for f in fields(TrainConfig) if f.name != "out_dir"]
    for key in options:
        if key not in fields_:
            own = [p for p, v in inspect.signature(entry).parameters.items() if v.kind is not v.VAR_KEYWORD]
            hint = did_you_mean(key, fields_ + own) or "the options are TrainConfig's fields"
            where = f"{entry.__module__.removesuffix('.run')}.{entry.__name__}"
            raise TypeError(f"{where}() got an unknown option {key!r}; {hint}")
    return options


# Tokens an optimizer step below which a GPU waits on kernel launches more than it computes (the issue 39 measurement:
# the Multi30k recipe's 3,000 tokens a step ran an H100 at 5-6% of its peak); the CPU recipes' batches are far below.
GPU_MIN_TOKENS = 16384


def gpu_batch_note(device: str, tokens_per_step: int, batch: str, instead: str) -> str | None:
    """The line a training run on a GPU prints when its batch is a CPU recipe's (under :data:`GPU_MIN_TOKENS` tokens
    a step): what it uses (``batch``: its flags) and what it would use instead; None on a CPU or with a big batch."""
    if not str(device).startswith("cuda") or tokens_per_step >= GPU_MIN_TOKENS:
        return None
    return (
        f"note: {batch} is {tokens_per_step:,} tokens a step, a CPU recipe's batch: a GPU runs that mostly idle "
        f"(launch-bound). For a GPU: {instead}"
    )


def check_accumulation(accum_steps: int, processes: int, count: int) -> None:
    """A step never spans two epochs: ``accum_steps`` on ``processes`` asking for more batches than an epoch has
    (``count``) is refused before anything is written, not cut to the epoch's batches in silence."""
    per_step = accum_steps * processes
    if count >= per_step or count == 0:
        return
    procs = f" on {processes} processes" if processes > 1 else ""
    raise ValueError(
        f"--accum-steps {accum_steps}{procs} makes a step of {per_step} batches, but an epoch of this run's training "
        f"data has {count}: a step never spans two epochs, so each would be cut to {count}; give --accum-steps "
        f"{max(count // processes, 1)} or less, or more batches an epoch (a larger --batches-per-epoch, a smaller "
        "--batch-size or --batch-tokens, more data)"
    )


def budget_reached(cfg: TrainConfig, step: int, epoch: int, elapsed: float) -> str | None:
    """Which limit of ``cfg`` a run at ``step``, ``epoch`` and ``elapsed`` seconds has reached, in the CLI's words
    (``"--max-steps 10 (it is at step 10)"``); None while it may train on. Each limit is a total for the run."""
    if cfg.max_steps is not None and step >= cfg.max_steps:
        return f"--max-steps {cfg.max_steps} (it is at step {step})"
    if cfg.epochs is not None and epoch >= cfg.epochs:
        return f"--epochs {cfg.epochs} (it has trained {epoch})"
    if cfg.minutes is not None and elapsed >= cfg.minutes * 60:
        return f"--minutes {cfg.minutes:g} (it has trained {elapsed / 60:.2f} min)"
    return None


def patience_spent(cfg: TrainConfig, stale: int) -> str | None:
    """Why early stopping ends a run whose last ``stale`` evaluations in a row were no better than its best, in the
    CLI's words (``"--patience 3 (3 evaluations in a row without a better one)"``); None while it may train on."""
    if cfg.patience is not None and stale >= cfg.patience:
        return f"--patience {cfg.patience} ({stale} evaluations in a row without a better one)"
    return None


def budget_spent_message(out: Path | str, reached: str) -> str:
    """Why a resumed run that has reached a limit does not train, and how to give it more."""
    if reached.startswith("--patience"):
        return (
            f"the run in {str(out)!r} stopped early, at {reached}: nothing was trained and nothing was written; "
            "give a larger --patience to train further (best/ holds its best model)"
        )
    return (
        f"the run in {str(out)!r} has already reached {reached}: nothing is left to train and nothing was written; "
        "--max-steps, --epochs and --minutes count from the run's start (totals, not more on top), so give a "
        "larger one to train further"
    )


def lr_factor(step: int, cfg: TrainConfig, time_used: float = 0.0) -> float:
    """Multiplier of ``cfg.lr`` at optimizer step ``step`` (0-based).

    Cosine decays over ``max_steps``; without it, over the ``minutes`` budget (``time_used`` = the
    fraction of it spent), so a time-limited run still ends at ``lr × min_lr_ratio``.
    """
    s, w = step + 1, max(cfg.warmup_steps, 1)
    if cfg.schedule == "inverse_sqrt":
        return min(s / w, math.sqrt(w / s))
    if s <= w:
        return s / w
    if cfg.schedule == "constant":
        return 1.0
    progress = min((s - w) / max(cfg.max_steps - w, 1) if cfg.max_steps is not None else time_used, 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """What the Trainer steps with: ``cfg.optimizer`` (AdamW, or Muon with AdamW), weight decay on the matrices only
    (:mod:`tformer.training.optimizers`)."""
    return optimizers.make_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.betas)
