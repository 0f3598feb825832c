"""The training loop shared by the three families.

A *task* knows its data and its loss; the :class:`Trainer` knows everything else: AdamW (weight
decay on matrices only), warmup then inverse-square-root or cosine decay, gradient clipping and
accumulation, optional bf16 autocast, periodic evaluation, the best checkpoint, a time budget,
exact resume, a progress bar, a JSONL log and a PNG of the curves.

A task provides::

    train_batches(epoch) -> list[batch]        # deterministic for a given epoch
    loss(model, batch) -> (summed_loss, n_tokens)   # loss summed over the batch's real tokens
    count_tokens(batch) -> int                 # real tokens, known before the forward pass
    evaluate(model) -> dict[str, float]        # e.g. {"val_loss": ..., "bleu": ...}
    metric: str, higher_is_better: bool        # which evaluation picks the best checkpoint
    save_extra(directory)                      # tokenizer files etc. next to the weights

``TrainConfig.fast`` (default True) trains, evaluates and decodes with the CPU fast paths of
:mod:`tformer.fast`: :func:`tformer.fast.speed_up` swaps them into the model, and the tasks' loss
(:func:`tformer.fast.sequence_cross_entropy`) takes its fused backward. ``fast=False`` keeps the model plain and
runs every step and evaluation inside :func:`tformer.fast.reference`, where the loss is ``F.cross_entropy``.

Several processes (``torchrun --nproc-per-node N -m tformer train ...``) train data-parallel:
see :mod:`tformer.training.distributed`.

Run directory layout::

    OUT/config.json, model.safetensors, ...    the best model so far (load with from_pretrained)
    OUT/last/                                  the latest full state, for --resume
    OUT/log.jsonl, OUT/curves.png              every training/evaluation record, and their plot
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from tformer import fast
from tformer.files import atomic_write
from tformer.models.checkpoint import PretrainedMixin
from tformer.training import distributed

__all__ = ["TrainConfig", "Trainer", "lr_factor", "make_optimizer"]


@dataclass(frozen=True)
class TrainConfig:
    out_dir: str
    lr: float = 5e-4
    schedule: str = "inverse_sqrt"  # "inverse_sqrt" (the paper) | "cosine" | "constant"
    warmup_steps: int = 400
    min_lr_ratio: float = 0.1  # cosine decays to lr × min_lr_ratio
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    clip: float = 1.0  # max gradient norm (0 = off)
    accum_steps: int = 1
    epochs: int | None = None
    max_steps: int | None = None
    minutes: float | None = None  # time budget
    eval_every: int | None = None  # optimizer steps between evaluations; None = every epoch
    log_every: int = 10
    seed: int = 0
    bf16: bool = False
    device: str = "cpu"
    progress: bool = True
    fast: bool = True  # CPU fast paths (tformer.fast): swapped into the model, the fused loss backward

    def __post_init__(self) -> None:
        if self.schedule not in ("inverse_sqrt", "cosine", "constant"):
            raise ValueError(f"schedule must be 'inverse_sqrt', 'cosine' or 'constant', got {self.schedule!r}")
        if self.epochs is None and self.max_steps is None and self.minutes is None:
            raise ValueError("give at least one of epochs, max_steps or minutes")
        if self.accum_steps < 1:
            raise ValueError(f"accum_steps must be >= 1, got {self.accum_steps}")
        if self.schedule == "cosine" and self.max_steps is None and self.minutes is None:
            raise ValueError("schedule='cosine' needs max_steps or minutes (the length of the decay)")


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


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (what the Trainer steps with)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor in one pass (CPU and CUDA); without it, PyTorch's CPU default is a
    # Python loop over the parameters, a few percent of a small model's step.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in decay + no_decay)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused or None)


class Trainer:
    def __init__(self, model: torch.nn.Module, task, cfg: TrainConfig) -> None:
        if not isinstance(model, PretrainedMixin):
            raise TypeError(
                f"model must be a tformer model (save_pretrained/from_pretrained), got {type(model).__name__}"
            )
        self.world, device = distributed.init(cfg.device)
        self.model: PretrainedMixin = model.to(device)
        self.task, self.cfg, self.device = task, cfg, device
        if cfg.fast:
            fast.speed_up(self.model)  # in place: the parameters stay the same objects
        distributed.broadcast_parameters(self.model, self.world)
        self.out = Path(cfg.out_dir)
        self.optimizer = make_optimizer(self.model, cfg)
        time_used = lambda: getattr(self, "elapsed", 0.0) / (60 * cfg.minutes) if cfg.minutes else 0.0  # noqa: E731
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, cfg, time_used()))
        self.step, self.epoch, self.batch_index, self.elapsed = 0, 0, 0, 0.0
        self.best: float | None = None
        self.history: list[dict] = []
        torch.manual_seed(cfg.seed + 1000 * self.world.rank)  # dropout differs between processes

    # ---------------------------------------------------------------- state
    def save_last(self) -> None:
        rng = distributed.gather_objects(torch.get_rng_state(), self.world)  # every rank's dropout RNG
        if not self.world.is_main:
            return
        last = self.out / "last"
        self.model.save_pretrained(last)
        self.task.save_extra(last)
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "rng": rng}
        atomic_write(last / "trainer_state.pt", lambda tmp: torch.save(state, tmp))
        meta = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "elapsed": self.elapsed,
            "best": self.best,
            "train_config": asdict(self.cfg),
        }
        atomic_write(last / "state.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2)))

    def resume(self) -> None:
        """Continue exactly from ``OUT/last``: model, optimizer, scheduler, step, RNG, data position."""
        last = self.out / "last"
        if not (last / "state.json").is_file():
            raise FileNotFoundError(f"--resume: {str(last)!r} holds no training state to resume from")
        weights = type(self.model).from_pretrained(last).state_dict()
        self.model.load_state_dict(weights)
        self.model.train()
        state = torch.load(last / "trainer_state.pt", weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if len(state["rng"]) != self.world.size:
            raise ValueError(f"--resume: the run used {len(state['rng'])} processes, this one has {self.world.size}")
        torch.set_rng_state(state["rng"][self.world.rank])
        meta = json.loads((last / "state.json").read_text())
        self.step, self.epoch, self.batch_index = meta["step"], meta["epoch"], meta["batch_index"]
        self.elapsed, self.best = meta["elapsed"], meta["best"]

    def _log(self, record: dict) -> None:
        self.history.append(record)
        if not self.world.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    # ---------------------------------------------------------------- loop
    def _done(self) -> bool:
        c = self.cfg
        return (
            (c.max_steps is not None and self.step >= c.max_steps)
            or (c.epochs is not None and self.epoch >= c.epochs)
            or (c.minutes is not None and self.elapsed >= c.minutes * 60)
        )

    def _paths(self):
        """The fast paths as configured: on (nothing to do), or every fast path on its reference."""
        return contextlib.nullcontext() if self.cfg.fast else fast.reference()

    def _autocast(self):
        if not self.cfg.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16)

    def _optimizer_step(self, group: list, start: float) -> tuple[float, int]:
        """One optimizer step over ``group`` (gradient accumulation, split across processes).

        The loss is per real token of the whole group, so the summed gradient is the same for any
        number of processes. Returns the group's mean loss and its token count.
        """
        self.model.train()
        total_tokens = sum(self.task.count_tokens(b) for b in group)
        loss_sum = 0.0
        for batch in group[self.world.rank :: self.world.size]:  # this process's share
            with self._paths():
                with self._autocast():
                    loss, _ = self.task.loss(self.model, batch)
                (loss / max(total_tokens, 1)).backward()
            loss_sum += float(loss.detach())
        loss_sum, elapsed = distributed.sync_gradients(
            self.model, self.world, [loss_sum, self.elapsed + time.perf_counter() - start]
        )
        self.elapsed = elapsed / self.world.size  # the same on every process, so all stop together
        if self.cfg.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss_sum / max(total_tokens, 1), total_tokens

    def evaluate(self) -> dict:
        if not self.world.is_main:  # rank 0 evaluates and saves; the others go on to the next step
            return {"step": self.step}
        self.model.eval()
        with torch.no_grad(), self._paths():
            metrics = self.task.evaluate(self.model)
        record = {"step": self.step, "epoch": self.epoch, **metrics}
        self._log(record)
        value = metrics[self.task.metric]
        better = self.best is None or (value > self.best if self.task.higher_is_better else value < self.best)
        if better:
            self.best = value
            self.model.save_pretrained(self.out)
            self.task.save_extra(self.out)
        return record

    def fit(self) -> dict:
        """Train until the epochs, steps or minutes run out; returns the last evaluation."""
        if self.world.is_main:
            self.task.save_extra(self.out)
        bar = tqdm(
            total=self.cfg.max_steps,
            initial=self.step,
            disable=not (self.cfg.progress and self.world.is_main),
            unit="step",
            dynamic_ncols=True,
        )
        last_eval: dict = {}
        window_tokens, window_start = 0, time.perf_counter()
        while not self._done():
            batches = self.task.train_batches(self.epoch)
            while self.batch_index < len(batches) and not self._done():
                start = time.perf_counter()
                group = batches[self.batch_index : self.batch_index + self.cfg.accum_steps * self.world.size]
                loss, tokens = self._optimizer_step(group, start)
                self.batch_index += len(group)
                window_tokens += tokens
                if self.step % self.cfg.log_every == 0 or self.step == 1:
                    rate = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                    lr = self.scheduler.get_last_lr()[0]
                    self._log(
                        {
                            "step": self.step,
                            "epoch": self.epoch,
                            "train_loss": loss,
                            "lr": lr,
                            "tokens_per_s": rate,
                            "elapsed_s": round(self.elapsed, 2),
                        }
                    )
                    bar.set_postfix_str(self._postfix(float(loss), float(lr), rate))
                    window_tokens, window_start = 0, time.perf_counter()
                bar.update(1)
                if self.cfg.eval_every and self.step % self.cfg.eval_every == 0:
                    last_eval = self.evaluate()
                    self.save_last()
            if self.batch_index >= len(batches):
                self.epoch, self.batch_index = self.epoch + 1, 0
                if not self.cfg.eval_every:
                    last_eval = self.evaluate()
                    self.save_last()
        bar.close()
        if not last_eval or last_eval["step"] != self.step:
            last_eval = self.evaluate()
        self.save_last()
        if self.world.is_main:
            self._plot()
        # every process returns rank 0's evaluation and knows its best metric (only rank 0 evaluated)
        last_eval, self.best = distributed.broadcast_object((last_eval, self.best), self.world)
        return last_eval

    def _postfix(self, loss: float, lr: float, rate: float) -> str:
        text = f"epoch {self.epoch} loss {loss:.3f} lr {lr:.2e} {rate:,.0f} tok/s"
        if self.cfg.minutes is not None:
            left = max(self.cfg.minutes * 60 - self.elapsed, 0)
            text += f" ETA {int(left // 60)}:{int(left % 60):02d}"
        return text

    def _plot(self) -> None:
        try:
            from tformer.training.curves import plot_curves
        except ImportError:  # matplotlib missing: the JSONL log is still there
            return
        plot_curves(self.out / "log.jsonl", self.out / "curves.png")
