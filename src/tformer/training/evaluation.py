"""What the :class:`~tformer.training.trainer.Trainer` does at an evaluation: score the model (and ``--ema``'s
average beside it), log the scores, keep ``best/`` when better, keep ``--keep-checkpoints``' models, and count the
evaluations since the best for ``--patience``.

A metric that ties with the best one (BLEU 0 at a translation run's first evaluations, the same accuracy) is broken by
the validation loss: the model with the lower ``val_loss`` is the better one, so early evaluations that all score
BLEU 0 still move ``best/`` forward and do not spend ``--patience`` while the loss falls.

Rank 0 evaluates and writes; the other processes go on to the next step. With ``--fsdp`` every process evaluates
(each forward needs them all, :mod:`tformer.training.sharded`), and each model written is first gathered whole
by all of them.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tformer.models.checkpoint import BEST_DIR, DECODING_FILE
from tformer.training import distributed, sharded
from tformer.training.averaging import keep_checkpoint
from tformer.training.config import TrainConfig

LOSS = "val_loss"  # every task's validation loss: what breaks a tie of another metric


class Evaluation:
    """The trainer's evaluation (a mixin; the trainer's attributes it uses are declared here)."""

    world: distributed.World
    model: Any  # a tformer model (PretrainedMixin); sharded in place with --fsdp
    task: Any
    cfg: TrainConfig
    out: Path
    step: int
    epoch: int
    best: float | None
    best_step: int | None  # the evaluation best/ is from
    best_ema: bool  # whether best/ holds --ema's moving average, not the trained weights
    best_loss: float | None  # best/'s val_loss, which breaks a tie of another metric (None: not known)
    stale_evals: int
    ema: Any  # tformer.training.averaging.EMA, or None
    also_save: list
    fsdp: torch.nn.Module | None  # --fsdp: the sharded loss module (the root); None without
    _plain: torch.nn.Module | None  # --fsdp: rank 0's CPU copy, the one written
    _patience_said: bool
    evaluating: bool = False  # inside evaluate(): what a Ctrl-C now lets finish (Trainer._on_signal)

    if TYPE_CHECKING:  # the trainer's own, from its other parts

        def _settle(self) -> Any: ...  # (BadSteps)

        def _log(self, record: dict) -> None: ...  # (Trainer)

        def _warn(self, text: str) -> None: ...  # (RunState)

        def _saving(self, dest: Path) -> Any: ...  # (RunState)

    def evaluate(self) -> dict:
        """Evaluate, log, and keep ``best/`` when better (rank 0; the others go on to the next step, or with ``--fsdp``
        evaluate too); with ``patience``, every process learns how many evaluations in a row were not better."""
        self._settle()
        self.evaluating = True  # a signal now stops after the evaluation, not after another step (Trainer._on_signal)
        try:
            record = self._evaluate() if self.world.is_main or self.fsdp is not None else {"step": self.step}
        finally:
            self.evaluating = False
        if self.cfg.patience is not None:
            self.stale_evals = distributed.broadcast_object(self.stale_evals, self.world)
        return record

    def _evaluate(self) -> dict:
        self.model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            metrics, averaged = sharded.within(self.fsdp, self._scores)
        record = {"step": self.step, "epoch": self.epoch, **metrics, **{f"ema_{k}": v for k, v in averaged.items()}}
        # what the scores took (Hugging Face's eval_runtime): off the budget's clock, on the person's
        self._log({**record, "eval_s": round(time.perf_counter() - start, 2)} if metrics else record)
        own = value = metrics.get(self.task.metric)  # None: no validation data, so the model kept is the latest
        loss = metrics.get(LOSS)
        # the average is the candidate for best/ when it scores better
        use_ema = self._better(averaged.get(self.task.metric), value, averaged.get(LOSS), loss)
        value, loss = (averaged[self.task.metric], averaged.get(LOSS)) if use_ema else (value, loss)
        if value is None and self.cfg.patience is not None and not self._patience_said:
            self._patience_said = True
            self._warn(
                f"--patience {self.cfg.patience} compares nothing: this run's evaluations give no validation "
                f"{self.task.metric} (no validation data); it trains to its budget"
            )
        if value is not None and not math.isfinite(value):
            self._warn(f"step {self.step}: {self.task.metric} is {value}: not kept as the best model")
            self.stale_evals += 1
            return record
        better = value is None or self._better(value, self.best, loss, self.best_loss)  # value is finite here
        if value is not None:  # early stopping counts the evaluations since the best
            self.stale_evals = 0 if better else self.stale_evals + 1
        if better:
            self.best = value if value is not None else self.best
            if value is not None:
                self.best_step, self.best_ema, self.best_loss = self.step, use_ema, loss
            with self.ema.swapped() if use_ema else contextlib.nullcontext():  # (written while it is in the model)
                model = self._whole_model()
                if self.world.is_main:
                    tuned = (self.out / BEST_DIR / DECODING_FILE).is_file()  # evaluate --tune-length-penalty's
                    with self._saving(self.out / BEST_DIR) as tmp:
                        self._save_model(tmp, model)
                    if tuned:  # tuned for the model replaced: not carried over, and not dropped in silence
                        self._warn(
                            f"note: best/ is now step {self.step}'s model: the length penalty tuned for the one before "
                            f"({DECODING_FILE}) is dropped with it; tune it again: tformer evaluate "
                            "--tune-length-penalty"
                        )
        if self.cfg.keep_checkpoints:  # each evaluation's model, the newest K kept (for tformer average)
            # the score of the weights it holds, the trained ones (not the moving average's): average --best ranks by it
            info = {"metric": self.task.metric, "value": own, "higher_is_better": self.task.higher_is_better}
            info["val_loss"] = loss  # an equal metric is ranked by it, as best/ is (_better)
            model = self._whole_model()
            if self.world.is_main:
                save = lambda directory: self._save_model(directory, model)  # noqa: E731
                keep_checkpoint(self.out, self.step, info, save, self.cfg.keep_checkpoints, self._saving)
        return record

    def best_text(self) -> str:
        """What ``best/`` scored, for a person: ``val_loss 3.431 at step 600``, and when it holds the moving average
        (``--ema``) rather than the trained weights, ``(the moving average, --ema 0.999)``."""
        if self.best is None:
            return f"no {self.task.metric} was finite"
        where = "" if self.best_step is None else f" at step {self.best_step}"
        kind = f" (the moving average, --ema {self.cfg.ema:g})" if self.best_ema else ""
        if self.task.metric == "bleu":  # as the log lines name it, to sacreBLEU's 2 decimals
            return f"BLEU {self.best:.2f}{where}{kind}"
        return f"{self.task.metric} {self.best:.4g}{where}{kind}"

    def _scores(self) -> tuple[dict, dict]:
        """The task's evaluation of the model, and with ``--ema`` of the moving average (else empty)."""
        metrics = self.task.evaluate(self.model)
        with self.ema.swapped() if self.ema else contextlib.nullcontext():  # --ema: the average's, beside
            averaged = self.task.evaluate(self.model) if self.ema else {}
        return metrics, averaged

    def _better(
        self, a: float | None, b: float | None, a_loss: float | None = None, b_loss: float | None = None
    ) -> bool:
        """Whether the metric ``a`` (finite) beats ``b`` (None or not finite: anything does); when they are equal, and
        the metric is not the loss itself, whether ``a``'s validation loss ``a_loss`` is below ``b``'s."""
        if a is None or not math.isfinite(a):
            return False
        if b is None or not math.isfinite(b):
            return True
        if a == b and self.task.metric != LOSS:
            return a_loss is not None and b_loss is not None and a_loss < b_loss
        return a > b if self.task.higher_is_better else a < b

    def _whole_model(self) -> Any:
        """The model to write: the model itself; with ``--fsdp``, rank 0's CPU copy holding the weights gathered whole
        (every process must call it; the others get None)."""
        if self.fsdp is None:
            return self.model
        state = sharded.whole_state(self.model, self.world)
        if self._plain is not None:
            self._plain.load_state_dict(state)
        return self._plain

    def _save_model(self, directory: Path, model: Any = None) -> None:
        """``model`` (the trainer's) as ``best/`` holds it: weights, config, the task's files (tokenizer), the extra
        writers' (a LoRA run's PEFT adapter)."""
        model = self.model if model is None else model
        model.save_pretrained(directory)
        self.task.save_extra(directory)
        for write in self.also_save:
            write(model, directory)
