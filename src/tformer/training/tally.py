"""A training step without a host read: the non-finite skip decided on the device, the loss read every log step.

On a GPU every read of a tensor's value by the host (``float(loss)``, ``.tolist()``, ``bool(mask.any())``) makes it
wait until the device has run all it was given: the next step's kernels are not queued meanwhile. The Trainer needs
two numbers of each step, its loss and its gradient norm, to skip a step whose loss or norm is not finite. Here that
decision stays on the device: fused AdamW takes it as ``found_inf`` (the update not applied, its step count undone,
as ``torch.amp.GradScaler`` passes it), and :class:`Tally` counts the skipped steps on the device too. The host reads
everything in one ``tolist`` when it logs (every ``--log-every`` steps), evaluates or saves: one synchronisation per
``--log-every`` steps instead of one or more per step (issue 48; ``tests/test_syncs.py`` counts them).

What changes for the user: a skipped step still counts as a step for the schedule and the budget (as a GradScaler's
skipped steps do in PyTorch and Hugging Face), and skipped steps are reported, and ``max_bad_steps`` in a row stop the
run, at the next read, up to ``--log-every`` steps later. The weights are those of the last finite step either way.

The Trainer takes this path when it can: one process, no fp16 gradient scaler (whose scale has a floor the host
watches) and a fused AdamW (``found_inf``: on CPUs and CUDA GPUs), alone or, on a GPU, beside Muon.
Otherwise it reads the loss and the norm every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tformer.fast.precision import SCALE_FLOOR, halve_scale
from tformer.training.config import TrainConfig
from tformer.training.optimizers import MuonAdamW


class TrainingDiverged(ValueError):
    """The loss or the gradient norm was not finite for ``max_bad_steps`` steps in a row."""


@dataclass
class Read:
    """What the host learns at a read: the last step's mean loss (NaN when it was skipped), the non-finite steps in a
    row at that step, the longest such run and the steps skipped since the previous read, and the last skipped step's
    loss and gradient norm."""

    loss: float
    in_a_row: int
    worst: int
    skipped: int
    bad_loss: float
    bad_norm: float

    @property
    def last_loss(self) -> float | None:
        return self.loss if math.isfinite(self.loss) else None


class Tally:
    """The device side of the steps since the last read (:meth:`step`, :meth:`read`)."""

    def __init__(self, device: torch.device | str, in_a_row: int = 0) -> None:
        zero = torch.zeros((), device=device)
        self.loss = torch.full((), math.nan, device=device)
        self.in_a_row = zero + in_a_row  # carried across reads: a run of bad steps may span one
        self.worst, self.skipped = zero.clone(), zero.clone()
        self.bad = torch.full((2,), math.nan, device=device)  # the last skipped step's loss and gradient norm
        self.pending = 0  # steps since the last read (host)

    def step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, norm: torch.Tensor) -> None:
        """``optimizer.step()`` unless ``loss`` (the step's mean, 0-d) or ``norm`` is not finite, decided on the device."""
        loss, norm = loss.detach().float(), norm.detach().float()
        bad = (loss.isfinite() & norm.isfinite()).logical_not_()
        found = bad.float()
        optimizer.found_inf = found  # type: ignore[attr-defined]  # fused AdamW reads it (GradScaler's protocol)
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
        self.in_a_row = (self.in_a_row + 1) * found
        self.worst = torch.maximum(self.worst, self.in_a_row)
        self.skipped = self.skipped + found
        self.bad = torch.where(bad, torch.stack([loss, norm]), self.bad)
        self.loss = loss
        self.pending += 1

    def read(self) -> Read:
        """One read of the device; the counts since the previous read start again."""
        values = torch.cat([torch.stack([self.loss, self.in_a_row, self.worst, self.skipped]), self.bad]).tolist()
        self.worst, self.skipped = torch.zeros_like(self.worst), torch.zeros_like(self.skipped)
        self.pending = 0
        loss, in_a_row, worst, skipped, bad_loss, bad_norm = values
        return Read(loss, int(in_a_row), int(worst), int(skipped), bad_loss, bad_norm)


def takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` skips on the device: a fused Adam or AdamW (``fused=True``), or Muon beside one
    (:class:`~tformer.training.optimizers.MuonAdamW`, which takes its own Muon step back) on an accelerator. On a CPU
    the host's reads cost nothing and taking Muon's step back costs a copy of its matrices (53 ms on top of its 134 ms
    for the Multi30k hour's model: ``python -m benchmarks.optimizer_step``, 2 threads, amx class), so there a Muon run
    reads the loss and the norm each step."""
    if isinstance(optimizer, MuonAdamW):
        on_cpu = any(p.device.type == "cpu" for g in optimizer.muon.param_groups for p in g["params"])
        return takes_found_inf(optimizer.adamw) and not on_cpu
    return isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(optimizer.defaults.get("fused"))


class BadSteps:
    """The Trainer's handling of non-finite steps: skipped and counted, said, and ``max_bad_steps`` in a row stop the
    run; read from the device's :class:`Tally` (:meth:`_settle`) or, per step, by the Trainer (:meth:`_skip`)."""

    cfg: TrainConfig
    out: Path
    step: int
    bad_steps: int
    skipped_steps: int
    scaler: torch.amp.GradScaler | None
    scheduler: torch.optim.lr_scheduler.LambdaLR
    tally: Tally | None
    _floor_said: bool
    _shown_loss: float
    _warn: Callable[[str], None]  # RunState's: to stderr, from the main process

    def _settle(self) -> float | None:
        """Read what the device tallied since the last read (one read): report the steps it skipped, stop a diverged
        run; the last step's loss (None: it was skipped). Nothing to read: None."""
        if self.tally is None or not self.tally.pending:
            return None
        n, r = self.tally.pending, self.tally.read()
        self.bad_steps, self.skipped_steps = r.in_a_row, self.skipped_steps + r.skipped
        if r.skipped:
            self._warn(
                f"step {self.step}: {r.skipped} of the last {n} steps skipped, their loss or gradient norm not finite "
                f"(last: loss {r.bad_loss}, gradient norm {r.bad_norm}; {r.in_a_row} in a row now)"
            )
        if r.worst >= self.cfg.max_bad_steps:
            self._diverged(self.step, r.worst, r.bad_loss, r.bad_norm)
        self._shown_loss = r.loss
        return r.last_loss

    def _halve_scale(self) -> bool:
        """fp16, after an overflow: the scaler halves its scale, down to its floor; reaching it is said once."""
        assert self.scaler is not None
        floor = halve_scale(self.scaler)
        if floor and not self._floor_said:
            self._floor_said = True
            self._warn(
                f"fp16: the loss scale reached its floor, {SCALE_FLOOR:g}, at step {self.step + 1}: the gradients "
                "overflow float16 (above 65504) even unscaled, so each overflow from now on counts as a bad step "
                f"(--max-bad-steps {self.cfg.max_bad_steps} in a row stop the run)"
            )
        return floor

    def _skip(self, loss: float, norm: float, why: str | None = None) -> None:
        self.bad_steps, self.skipped_steps = self.bad_steps + 1, self.skipped_steps + 1
        step, n = self.step + 1, self.bad_steps
        what = (
            f"{why}: step skipped, a bad step"
            if why
            else f"loss {loss}, gradient norm {norm}: not finite, step skipped"
        )
        self._warn(f"step {step}: {what} ({n} in a row)")
        if n >= self.cfg.max_bad_steps:
            self._diverged(step, n, loss, norm)

    def _diverged(self, step: int, n: int, loss: float, norm: float) -> None:
        lr = self.scheduler.get_last_lr()[0]
        fp16 = ", or --precision bf16 or fp32 (float16 overflows above 65504)" if self.scaler is not None else ""
        raise TrainingDiverged(
            f"training diverged at step {step}: the loss or the gradient norm was not finite for {n} steps in "
            f"a row (last: loss {loss}, gradient norm {norm}, learning rate {lr:.3g}); try a lower --lr "
            f"(now {self.cfg.lr:g}) or a longer --warmup-steps{fp16}; what was saved before in {self.out} is kept"
        )
