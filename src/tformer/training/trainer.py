"""The training loop shared by the three families.

A *task* knows its data and its loss; the :class:`Trainer` knows everything else: AdamW (weight
decay on matrices only), warmup then inverse-square-root or cosine decay, gradient clipping and
accumulation, bf16 or fp16 autocast (fp16 with a gradient scaler), ``torch.compile``, periodic evaluation, the best checkpoint, a time budget,
exact resume, a progress bar, a JSONL log and a PNG of the curves.

A task provides::

    train_batches(epoch) -> list[batch]        # deterministic for a given epoch
    loss(model, batch) -> (summed_loss, n_tokens)   # loss summed over the batch's real tokens
    count_tokens(batch) -> int                 # real tokens, known before the forward pass
    evaluate(model) -> dict[str, float]        # e.g. {"val_loss": ..., "bleu": ...}
    metric: str, higher_is_better: bool        # which evaluation picks the best checkpoint
    save_extra(directory)                      # tokenizer files etc. next to the weights
    leaves_parameters_unused: bool             # optional (False): its loss leaves some parameters without a gradient
    rate_unit: str                             # optional ("tok"): what count_tokens counts, for the progress line

``TrainConfig.fast`` (default True) trains, evaluates and decodes with the CPU fast paths of
:mod:`tformer.fast`: :func:`tformer.fast.speed_up` chooses them for the model, and the tasks' loss
(``task.cross_entropy``: :func:`tformer.fast.sequence_cross_entropy`) takes its fused backward. ``fast=False``
chooses the reference kernels (:func:`tformer.fast.use_reference`) and the reference loss
(:func:`tformer.nn.losses.sequence_cross_entropy`, ``F.cross_entropy``) for the task, once, at the start.

Several processes (``torchrun --nproc-per-node N -m tformer train ...``) train data-parallel:
see :mod:`tformer.training.distributed`.

Run directory layout::

    OUT/best/                                  the best model so far, with its tokenizer (from_pretrained(OUT))
    OUT/last/                                  the latest full state, for --resume (:mod:`tformer.training.state`)
    OUT/log.jsonl, OUT/curves.png              one record per step and evaluation (strict JSON), and their plot;
                                               the first record of each session (the run's start, each
                                               --resume) also holds "machine": the processor (tformer.machine),
                                               and "precision" (tformer.fast.precision)
    OUT/.lock                                  while the run trains: who runs it (:mod:`tformer.training.lock`)

``max_steps``, ``epochs`` and ``minutes`` are totals, counted from the run's start: a resumed run trains until
the first of them is reached, and one that has reached it already is refused (:func:`budget_reached`), with
nothing written.

A run is never lost: ``best/`` and ``last/`` are each written into a temporary directory, fsynced and swapped
in whole (:func:`tformer.files.staged_dir`), so a crash, a full disk or a refused write leaves the previous
state as it was (the error names the directory). SIGINT and SIGTERM finish the current step, save ``last/``
and raise :class:`TrainingInterrupted` (exit status 130 / 143 in the CLI); a second one stops at once
(:mod:`tformer.training.signals`). A step
whose loss or gradient norm is not finite is skipped (no update, gradients dropped) and counted;
``max_bad_steps`` of them in a row raise :class:`TrainingDiverged`. With one process, no fp16 and fused AdamW, that is
decided on the device and read every ``log_every`` steps, so a step makes the host wait for nothing
(:mod:`tformer.training.tally`: a skipped step then still counts as a step). In fp16 an overflow of the scaled gradients is
the gradient scaler's to handle (it halves its scale and skips the step) up to
:data:`~tformer.fast.precision.NORMAL_OVERFLOWS` in a row; past that, and at the scale's floor
(:data:`~tformer.fast.precision.SCALE_FLOOR`, said once when reached), each one is a bad step too. A non-finite
evaluation is never the best. Saving ``last/`` and resuming from it: :class:`tformer.training.state.RunState`.
Progress: a bar on a terminal, plain lines elsewhere (:mod:`tformer.training.progress`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, cast

import torch

from tformer import fast
from tformer.fast.precision import NORMAL_OVERFLOWS, SCALE_FLOOR, choose, gradient_scaler, tf32_matmuls
from tformer.fast.quantize import require_float
from tformer.models.checkpoint import PretrainedMixin
from tformer.nn.losses import sequence_cross_entropy as reference_cross_entropy
from tformer.training import distributed, sharded
from tformer.training.averaging import EMA
from tformer.training.config import (
    TrainConfig,
    budget_reached,
    budget_spent_message,
    check_accumulation,
    lr_factor,
    make_optimizer,
    patience_spent,
)
from tformer.training.evaluation import Evaluation
from tformer.training.feed import Feed
from tformer.training.progress import Progress, seconds_left, step_text
from tformer.training.rundir import RunLock, check_out_dir
from tformer.training.runlog import RunLog
from tformer.training.signals import Pipes, TrainingInterrupted, stop_signals
from tformer.training.state import RunState
from tformer.training.tally import BadSteps, Tally, TrainingDiverged, takes_found_inf

__all__ = [
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "TrainingInterrupted",
    "budget_reached",
    "budget_spent_message",
    "lr_factor",
    "make_optimizer",
]


class Trainer(BadSteps, RunState, Evaluation):
    def __init__(self, model: torch.nn.Module, task, cfg: TrainConfig) -> None:
        if not isinstance(model, PretrainedMixin):
            raise TypeError(
                f"model must be a tformer model (save_pretrained/from_pretrained), got {type(model).__name__}"
            )
        require_float(model, "training")
        self._signal: int | None = None  # the first SIGINT/SIGTERM received during fit() (or SIGPIPE: self.pipes)
        self.pipes = Pipes(lambda: setattr(self, "_signal", self._signal or signal.SIGPIPE))  # a reader gone: stop
        self.world, device = distributed.init(cfg.device)
        # --fsdp: whole on rank 0's CPU (on the meta device elsewhere: sharded.building) until it is sharded
        self.model: PretrainedMixin = model if cfg.fsdp else model.to(device)
        self.task, self.cfg, self.device = task, cfg, device
        if cfg.accum_steps * self.world.size > 1:  # (the epoch's batches seeded by the epoch: no RNG is used)
            check_accumulation(cfg.accum_steps, self.world.size, len(task.train_batches(0)))
        self.precision = choose(cfg.precision, "training", model, str(device))  # bf16/fp16: autocast in _step
        self.scaler = gradient_scaler(self.precision, str(device))  # fp16: scales the loss; else None
        self.tf32 = torch.device(device).type == "cuda"  # float32 products on the tensor cores, in fit() only
        if cfg.fast:  # the kernels, chosen once, in place: the parameters stay the same objects
            fast.speed_up(self.model)
        else:  # the reference ones, the task's loss too (a model from tformer.load came with the fast ones)
            fast.use_reference(self.model)
            if hasattr(task, "cross_entropy"):
                task.cross_entropy = reference_cross_entropy
            if hasattr(task, "chunked"):  # the logits whole
                task.chunked = False
        # what the task's loss calls: the model itself, or (--compile) its compiled forward over the same parameters;
        # the model saved, evaluated and decoded is always the plain one
        self.forward_model: torch.nn.Module = (
            cast(torch.nn.Module, torch.compile(self.model)) if cfg.compile else self.model
        )
        # rank 0's weights everywhere (a clear error where the processes' models differ); --fsdp: each its shards
        distributed.broadcast_parameters(self.model, self.world, values=not cfg.fsdp)
        self._plain = sharded.plain_copy(self.model, self.world) if cfg.fsdp else None  # --fsdp: what rank 0 writes
        self.fsdp = sharded.shard(task, self.model, self.forward_model, self.world) if cfg.fsdp else None
        if cfg.fsdp:
            sharded.materialize(self.model, self._plain, self.world, device)
        # what a process's loss is multiplied by: DDP averages the processes' gradients, FSDP2 sums them (sharded.shard)
        self._copies = 1 if getattr(self.fsdp, "sums_gradients", False) else self.world.size
        # the loss over the processes: FSDP2's sharded module, or DDP's (None with one process)
        self.ddp: Any = self.fsdp or distributed.data_parallel(task, self.forward_model, self.world)
        self.out = Path(cfg.out_dir)
        self.optimizer = make_optimizer(self.model, cfg)
        time_used = lambda: getattr(self, "elapsed", 0.0) / (60 * cfg.minutes) if cfg.minutes else 0.0  # noqa: E731
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, cfg, time_used()))
        self.step, self.epoch, self.batch_index, self.elapsed = 0, 0, 0, 0.0
        self.step_lr = math.nan  # the learning rate the last step used
        # training time (the budget's clock): each step from its first forward to the end of its optimizer step and
        # average; evaluations and saves are not on it. The part after the processes' one sum is added to the next
        # step's (every process then reads the same clock)
        self._synced_at, self._unclocked = 0.0, 0.0
        self.best: float | None = None
        self.best_step: int | None = None
        self.best_ema = False  # best/ holds --ema's moving average
        self.best_loss: float | None = None  # best/'s val_loss: breaks a tie of the metric (BLEU 0 and BLEU 0)
        self.stale_evals = 0  # evaluations in a row no better than the best (early stopping: cfg.patience)
        self.ema = EMA(self.model, cfg.ema) if cfg.ema is not None else None  # after the kernels are chosen
        self._patience_said = False  # --patience without validation data, said once
        self.history: list[dict] = []
        self.bad_steps, self.skipped_steps = 0, 0  # non-finite steps: in a row, and in all
        self.scaler_skips, self.overflows = 0, 0  # fp16: steps the scaler skipped (overflow): in all, and in a row
        self._floor_said = False  # fp16: the loss scale's floor reached, said once
        on_device = self.scaler is None and self.world.size == 1 and takes_found_inf(self.optimizer)
        self.tally = Tally(device) if on_device else None  # the skip decided on the device, read every log step
        self._shown_loss = math.nan  # the last loss the host read (the progress line's)
        self._stop = False  # a process received one (agreed by all processes at the last step)
        self._saved_step: int | None = None
        self.lock: RunLock | None = None  # OUT/.lock, held by rank 0 while the run trains (taken in fit() if not given)
        self.run_info: dict | None = None  # the family's kind and settings, saved in state.json for --resume's checks
        # what is written beside each best model besides the task's files: (model, directory) -> None (a LoRA
        # run's PEFT adapter, tformer.finetune)
        self.also_save: list = []
        # evaluate (and keep as the best so far) the model as it starts, before step 1: a run from a pretrained model
        # (--init) shows where fine-tuning starts, and never keeps a model worse than that start
        self.evaluate_start = False
        smoothing = getattr(task, "label_smoothing", 0.0)  # train_loss is then above the plain cross-entropy
        about = {"label_smoothing": smoothing} if smoothing else {}
        self.run_log = RunLog(self.out, self.world.is_main, device, self.precision.precision, cfg.log_to, about)
        torch.manual_seed(cfg.seed + 1000 * self.world.rank)  # dropout differs between processes

    # ---------------------------------------------------------------- state: save_last(), resume() (RunState)
    def _log(self, record: dict) -> None:
        """Keep ``record`` in :attr:`history` and append it to ``OUT/log.jsonl`` (:class:`RunLog`)."""
        self.history.append(record)
        self.run_log.append(record)

    # ---------------------------------------------------------------- signals (tformer.training.signals)
    def _on_signal(self, signum: int, frame) -> None:
        name, last = signal.Signals(signum).name, self.out / "last"
        if self._signal is not None:
            raise TrainingInterrupted(
                f"{name} again: stopped at once, without saving; {last} holds the last saved state", 128 + signum
            )
        self._signal = signum
        if self.world.is_main:  # os.write: a print here could re-enter a print the signal interrupted
            doing = f"the evaluation of step {self.step}" if self.evaluating else f"step {self.step + 1}"
            text = f"\n{name}: finishing {doing}, then saving {last} (again to stop at once, unsaved)\n"
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.write(sys.stderr.fileno(), text.encode())

    def _check_stop(self) -> None:
        """After a step: if a signal came (to any process), save ``last/`` and raise TrainingInterrupted."""
        stop = self._stop or (self.world.size == 1 and self._signal is not None)
        if not stop:
            return
        if self._saved_step != self.step:
            self.save_last()
        signum = self._signal or signal.SIGTERM  # a process that got none stops with the others
        why = "SIGPIPE (the reader of its output is gone)" if signum == signal.SIGPIPE else signal.Signals(signum).name
        raise TrainingInterrupted(
            f"interrupted by {why} at step {self.step}: the state is saved in "
            f"{self.out / 'last'}; run the same command with --resume to continue exactly from there",
            128 + signum,
        )

    # ---------------------------------------------------------------- loop
    def _done(self) -> bool:
        return budget_reached(self.cfg, self.step, self.epoch, self.elapsed) is not None or bool(self._patience_spent())

    def _patience_spent(self) -> str | None:
        return patience_spent(self.cfg, self.stale_evals)

    def _autocast(self):
        if self.precision.precision not in ("bf16", "fp16"):
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=self.precision.dtype)

    def _optimizer_step(self, group: list, start: float, fetched: list | None = None) -> tuple[float | None, int]:
        """One optimizer step over ``group`` (gradient accumulation, split across processes).

        The loss is per real token of the whole group, so the summed gradient is the same for any
        number of processes. Returns the group's mean loss (None: the step was skipped, its loss or
        gradient norm not finite) and its token count. ``fetched``: the group's batches as the feed read them
        (:mod:`tformer.training.feed`), trained on in their place.
        """
        self.model.train()
        total_tokens = sum(self.task.count_tokens(b) for b in group)
        loss_sum: torch.Tensor | float = 0.0  # on the device: read once, with the gradient norm, below
        mine = distributed.shares(fetched or group, self.world)  # this process's batches (DDP: as many as the others')
        for i, (batch, counts) in enumerate(mine):  # DDP all-reduces the gradients in the last one's backward
            with self._no_sync(i < len(mine) - 1):
                with self._autocast():
                    loss, _ = self.ddp(batch) if self.ddp else self.task.loss(self.forward_model, batch)
                share = loss * (self._copies if counts else 0) / max(total_tokens, 1)
                (share if self.scaler is None else self.scaler.scale(share)).backward()
            loss_sum = loss_sum + loss.detach().float() if counts else loss_sum
        # the loss, the time and whether any process was asked to stop, summed over the processes
        self._synced_at = time.perf_counter()
        numbers = [loss_sum, self.elapsed + self._unclocked + self._synced_at - start, float(self._signal is not None)]
        loss_sum, elapsed, stop = distributed.all_sum(self.world, numbers, str(self.device))
        self.elapsed = elapsed / self.world.size  # the same on every process, so all stop together
        self._stop = stop > 0
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # the true gradients, for the clip and the norm
        norm_t = sharded.full(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip or math.inf))
        if self.tally is not None:  # no read: fused AdamW skips a non-finite step itself (tformer.training.tally)
            self.tally.step(
                self.optimizer, torch.as_tensor(loss_sum, device=norm_t.device) / max(total_tokens, 1), norm_t
            )
            return self._stepped(), total_tokens
        loss_sum, norm = torch.stack([torch.as_tensor(loss_sum, device=norm_t.device), norm_t.float()]).tolist()
        mean_loss = loss_sum / max(total_tokens, 1)  # (one read of the device, not one per micro-batch and the norm)
        if self.scaler is not None and math.isfinite(mean_loss) and not math.isfinite(norm):
            # fp16: the scaled gradients overflowed. The scaler halves the scale and skips the step while it finds its
            # level; past NORMAL_OVERFLOWS in a row, or at the scale's floor, it is a bad step
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler_skips, self.overflows = self.scaler_skips + 1, self.overflows + 1
            if self._halve_scale():
                self._skip(mean_loss, norm, f"float16 gradients overflowed at the loss scale's floor ({SCALE_FLOOR:g})")
            elif self.overflows > NORMAL_OVERFLOWS:
                scale = f"{self.scaler.get_scale():g}"
                self._skip(
                    mean_loss, norm, f"float16 gradients overflowed {self.overflows} steps in a row (scale {scale})"
                )
            return None, total_tokens
        if not (math.isfinite(mean_loss) and math.isfinite(norm)):  # the same on every process: all skip
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self._halve_scale()
            self._skip(mean_loss, norm)
            return None, total_tokens
        self.bad_steps, self.overflows = 0, 0
        if self.scaler is None:
            self.optimizer.step()
        else:  # the gradients are unscaled and finite: the scaler steps, then may grow the scale
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self._shown_loss = mean_loss
        return self._stepped(mean_loss), total_tokens

    def _no_sync(self, accumulate: bool):
        """A micro-batch whose gradients are only accumulated (not the group's last): no all-reduce (DDP) or
        reduce-scatter (FSDP2) in its backward."""
        if self.fsdp is not None:
            self.fsdp.set_requires_gradient_sync(not accumulate)  # type: ignore[operator]  # (an FSDPModule's)
        elif self.ddp is not None and accumulate:
            return self.ddp.no_sync()
        return contextlib.nullcontext()

    def _stepped(self, loss: float = math.nan) -> float:
        self.step_lr = float(self.scheduler.get_last_lr()[0])  # the rate this step used (logged), before the next one's
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss

    def save_last(self) -> None:
        self._settle()  # the skipped steps counted before they are saved
        super().save_last()

    def fit(self) -> dict:
        """Train until the epochs, steps or minutes run out; returns the last evaluation.

        A run resumed (or fitted before) that has reached its limit already is refused: training it again would
        only append a second evaluation of the same step to the log."""
        reached = budget_reached(self.cfg, self.step, self.epoch, self.elapsed) or self._patience_spent()
        if reached and self._saved_step == self.step:
            raise ValueError(budget_spent_message(self.out, reached))
        if self.world.is_main and self.lock is None:  # built directly: OUT judged as every run's (never a user's files)
            self.lock = check_out_dir(
                self.out, self._saved_step is not None, self.cfg.overwrite, prepared=True
            ).hand_over()
        try:
            with tf32_matmuls(str(self.device)):  # a GPU's TF32, set for the run, the process's own put back after
                return self._fit()
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None

    def _fit(self) -> dict:
        self.say(str(self.precision))  # what runs, and why (auto's choice for this machine)
        if self.tf32:
            self.say("float32 matrix products: TF32 on the GPU's tensor cores (for this run)")
        if self.cfg.compile:  # (on the CPU: docs/benchmarks.md, "--compile on the CPU")
            cpu = "; on the CPU slower with dropout or in bf16" if torch.device(self.device).type == "cpu" else ""
            self.say(f"torch.compile: the first steps compile the model (a minute or more), then run compiled{cpu}")
        steps = self.cfg.max_steps or 0  # warmup is a few % of the run (as nanoGPT's): one that never ends is said
        short = self.cfg.warmup_steps >= steps > self.step  # (max_steps 0 or None: no last step to look at)
        peak = self.cfg.lr * lr_factor(steps - 1, self.cfg) if short else self.cfg.lr
        if peak < self.cfg.lr * (1 - 1e-6):
            self.say(
                f"note: --warmup-steps {self.cfg.warmup_steps} is not shorter than --max-steps {steps}: the learning "
                f"rate climbs to {peak:.3g} at the last step and never reaches --lr {self.cfg.lr:g}; give a smaller "
                "--warmup-steps for a run this short"
            )
        progress = Progress(self.cfg.max_steps, self.step, self.cfg.progress and self.world.is_main, pipes=self.pipes)
        self._session = (self.step, self.elapsed, time.perf_counter())  # for the ETA
        last_eval: dict = {}
        if self.evaluate_start and self.step == 0:
            last_eval = self.evaluate()
            scores = ", ".join(f"{k} {v:.4f}" for k, v in last_eval.items() if isinstance(v, float))
            self.say(f"step 0 (the model it starts from): {scores or 'no validation data'}")
        window_tokens, window_start = 0, time.perf_counter()
        try:
            with stop_signals(self._on_signal):  # SIGINT / SIGTERM: stop after this step
                while not self._done():
                    batches = self.task.train_batches(self.epoch)
                    with self._feed(batches) as feed:  # the next batches read ahead, in a thread
                        while self.batch_index < len(batches) and not self._done():
                            start = time.perf_counter()
                            end = self.batch_index + self.cfg.accum_steps * self.world.size
                            group = batches[self.batch_index : end]
                            fetched = feed.take(self.batch_index, end)
                            loss, tokens = self._optimizer_step(group, start, fetched)
                            self.batch_index += len(group)
                            if loss is not None and self.ema is not None:  # the average takes the step's weights
                                self.ema.update()
                            # the step's optimizer and average, on the clock with the next step
                            self._unclocked = time.perf_counter() - self._synced_at
                            if loss is not None:
                                window_tokens += tokens
                                rate = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                                lr = self.step_lr
                                if self.step % self.cfg.log_every == 0 or self.step == 1:
                                    if self.tally is not None:  # the one read of the device in log_every steps
                                        loss = self._settle()
                                    if loss is not None:  # (not a skipped step's)
                                        record = dict(step=self.step, epoch=self.epoch, train_loss=loss, lr=lr)
                                        self._log(record | {"tokens_per_s": rate, "elapsed_s": round(self.elapsed, 2)})
                                    window_tokens, window_start = 0, time.perf_counter()
                                progress.update(
                                    self.step, functools.partial(self._postfix, float(lr), rate)
                                )  # read if shown
                                if self.cfg.eval_every and self.step % self.cfg.eval_every == 0:
                                    last_eval, paused = self._evaluate_and_save()
                                    window_start += paused  # tokens/s counts training only
                            self._check_stop()
                    if self.batch_index >= len(batches):
                        self.epoch, self.batch_index = self.epoch + 1, 0
                        if not self.cfg.eval_every:
                            last_eval, paused = self._evaluate_and_save()
                            window_start += paused
                        self._check_stop()
                if not last_eval or last_eval["step"] != self.step:
                    last_eval = self.evaluate()
                self.save_last()
        finally:
            progress.close()
        if stopped := self._patience_spent():
            self.say(f"stopped early at step {self.step}: {stopped}; best/ holds the best model ({self.best_text()})")
        if self.world.is_main:
            self.run_log.close()
            self._plot()
        # every process returns rank 0's evaluation and knows its best metric (only rank 0 evaluated)
        last_eval, self.best, self.best_step, self.best_ema = distributed.broadcast_object(
            (last_eval, self.best, self.best_step, self.best_ema), self.world
        )
        return last_eval

    def _evaluate_and_save(self) -> tuple[dict, float]:
        """An evaluation and ``last/`` saved: the evaluation's record and the seconds both took."""
        start = time.perf_counter()
        record = self.evaluate()
        self.save_last()
        return record, time.perf_counter() - start

    def _feed(self, batches: list) -> Feed:
        """The epoch's batches, read ahead in a thread when the task reads its data per batch (``fetch``)."""
        return Feed(getattr(self.task, "fetch", None), batches, pin=torch.device(self.device).type == "cuda")

    def _postfix(self, lr: float, rate: float) -> str:
        """The progress line's values of the step just made (its loss read from the device now, if not yet)."""
        self._settle()
        loss = self._shown_loss
        step0, elapsed0, wall0 = getattr(self, "_session", (0, 0.0, None))  # this session's pace gives the ETA
        wall = None if wall0 is None else time.perf_counter() - wall0
        left = seconds_left(self.cfg.max_steps, self.cfg.minutes, self.step, self.elapsed, step0, elapsed0, wall)
        return step_text(self.epoch, loss, lr, rate, left, getattr(self.task, "rate_unit", "tok"))

    def _plot(self) -> None:
        try:
            from tformer.outputs import write_figure
            from tformer.training.curves import DPI, plot_curves
        except ImportError:  # matplotlib missing: the JSONL log is still there
            return
        write_figure(plot_curves(self.out / "log.jsonl"), self.out / "curves.png", DPI)  # the run's own picture
