"""A run's training state on disk, with no pickle: tensors in safetensors, everything else in strict JSON.

``OUT/last/`` holds, next to the model and its tokenizer::

    state.json                    step, epoch, data position, elapsed time, best metric, the TrainConfig
    trainer_state.safetensors     the optimizer's tensors ("optimizer.<param>.<slot>") and every process's
                                  RNG states ("rng.<rank>", and "cuda_rng.<rank>" on a GPU)
    trainer_state.json            the optimizer's param groups and other slots, the scheduler's state

JSON is written with ``allow_nan=False``: a non-finite number (a NaN loss, an infinite metric) is written as
``null`` (:func:`finite_json`), so any strict JSON reader takes the files.

``state.json`` also says in which precision the run trained (``"precision"``), so that an fp16 run's resume finds
its gradient scaler's state or is refused.

:class:`RunState` is the part of the :class:`~tformer.training.trainer.Trainer` that writes ``last/`` and resumes
from it, every file checked as it is read.

tformer 0.1 wrote ``trainer_state.pt``, a pickle. :func:`read_state` still reads it, once, with
``torch.load(weights_only=True)`` (the restricted unpickler, which builds tensors and plain containers only;
CVE-2025-32434 let a crafted file run code through it up to torch 2.5.1, so pyproject.toml asks for
torch >= 2.6), and :func:`convert_legacy` rewrites such a directory in today's format.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tformer.fast.precision import Choice, scaler_state_problem
from tformer.files import WriteError, atomic_write, current_dir, machine_reason, os_error, staged_dir
from tformer.readers import read_json_object
from tformer.training import distributed
from tformer.training.averaging import EMA_NAME
from tformer.training.config import TrainConfig
from tformer.training.meta import STATE_NAME, check_trainer_json, is_int, is_number, read_meta
from tformer.training.sharded import load_whole, shard_optimizer_state, whole_optimizer_state

__all__ = [
    "STATE_NAME",
    "RunState",
    "finite_json",
    "write_json",
    "write_state",
    "read_state",
    "read_meta",
    "convert_legacy",
]

TENSORS_NAME = "trainer_state.safetensors"
JSON_NAME = "trainer_state.json"
LEGACY_NAME = "trainer_state.pt"  # tformer 0.1


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (tuples become lists), ready for strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def dumps(value: Any, **kwargs) -> str:
    """Strict JSON (non-finite numbers as null)."""
    return json.dumps(finite_json(value), allow_nan=False, **kwargs)


def write_json(path: Path, value: Any) -> None:
    text = dumps(value, indent=2) + "\n"
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_state(
    directory: Path,
    optimizer: dict,
    scheduler: dict,
    rng: list[dict[str, torch.Tensor]],
    scaler: dict | None = None,
) -> None:
    """Write an optimizer and a scheduler ``state_dict``, each process's RNG states and (fp16 training) the gradient
    scaler's ``state_dict`` (its scale and growth tracker: plain numbers) into ``directory``."""
    tensors: dict[str, torch.Tensor] = {}
    slots: dict[str, dict[str, Any]] = {}
    for param, state in optimizer["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{param}.{name}"] = value.detach().cpu().contiguous()
            else:
                slots.setdefault(str(param), {})[name] = value
    for rank, states in enumerate(rng):
        for kind, value in states.items():
            tensors[f"{kind}.{rank}"] = value.cpu().contiguous()
    atomic_write(directory / TENSORS_NAME, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    meta = {
        "optimizer": {"param_groups": optimizer["param_groups"], "state": slots},
        "scheduler": scheduler,
        "processes": len(rng),
    }
    if scaler is not None:
        meta["scaler"] = scaler
    write_json(directory / JSON_NAME, meta)


def read_state(directory: Path) -> dict[str, Any]:
    """``{"optimizer": state_dict, "scheduler": state_dict, "rng": [{"rng": ..., "cuda_rng": ...} per rank],
    "scaler": state_dict or None}``.

    Anything else than what :func:`write_state` writes (a file missing, unreadable, of the wrong shape) is an
    error naming the file and what it should hold."""
    if not (directory / JSON_NAME).is_file() and (directory / LEGACY_NAME).is_file():
        return _read_legacy(directory / LEGACY_NAME)
    for name in (JSON_NAME, TENSORS_NAME):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{str(directory / name)!r} is missing: {directory} holds no training state")
    meta = read_json_object(directory / JSON_NAME, "training state")
    check_trainer_json(directory / JSON_NAME, meta)
    try:
        tensors = load_file(str(directory / TENSORS_NAME))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(
            f"{str(directory / TENSORS_NAME)!r}: the training state is unreadable (truncated or corrupted?): {err}"
        ) from None
    state: dict[int, dict[str, Any]] = {int(p): dict(slots) for p, slots in meta["optimizer"]["state"].items()}
    rng: list[dict[str, torch.Tensor]] = [{} for _ in range(meta["processes"])]
    for key, tensor in tensors.items():
        kind, _, rest = key.partition(".")
        if kind == "optimizer" and rest.partition(".")[0].isdigit() and rest.partition(".")[2]:
            param, _, name = rest.partition(".")
            state.setdefault(int(param), {})[name] = tensor
        elif kind in ("rng", "cuda_rng") and rest.isdigit() and int(rest) < len(rng):
            rng[int(rest)][kind] = tensor
        else:
            raise ValueError(
                f"{str(directory / TENSORS_NAME)!r} holds a tensor {key!r}: expected 'optimizer.<param>.<slot>' or "
                f"'rng.<rank>' with a rank below the {len(rng)} processes of {JSON_NAME}"
            )
    for group in meta["optimizer"]["param_groups"]:  # one optimizer's slots in a group (--optimizer muon: two kinds)
        slots = {tuple(sorted(state[p])) for p in group["params"] if p in state}
        if len(slots) > 1:
            raise ValueError(
                f"{str(directory / TENSORS_NAME)!r}: the optimizer's parameters hold different slots "
                f"({sorted(slots)}): expected the same for each parameter of a group (the file is damaged or was mixed with another run's)"
            )
    optimizer = {"state": state, "param_groups": meta["optimizer"]["param_groups"]}
    scaler = meta.get("scaler")
    if scaler is not None and not isinstance(scaler, dict):
        raise ValueError(f"{str(directory / JSON_NAME)!r}: 'scaler' must be the gradient scaler's state (an object)")
    return {"optimizer": optimizer, "scheduler": meta["scheduler"], "rng": rng, "scaler": scaler}


def _read_legacy(path: Path) -> dict[str, Any]:
    """tformer 0.1's ``trainer_state.pt``: tensors and plain containers only (``weights_only=True``)."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - the restricted unpickler refuses anything else, with its own types
        raise ValueError(f"{str(path)!r} is not a tformer 0.1 training state: {err}") from None
    if not isinstance(state, dict) or not {"optimizer", "scheduler", "rng"} <= set(state):
        raise ValueError(
            f"{str(path)!r} is not a tformer 0.1 training state: expected its optimizer, scheduler and rng"
        )
    return {
        "optimizer": state["optimizer"],
        "scheduler": state["scheduler"],
        "rng": [{"rng": r} for r in state["rng"]],
    }


def convert_legacy(directory: Path) -> bool:
    """Rewrite a ``last/`` directory of tformer 0.1 (``trainer_state.pt``) in today's format, as a whole;
    returns whether there was one to convert."""
    if (directory / JSON_NAME).is_file() or not (directory / LEGACY_NAME).is_file():
        return False
    state = _read_legacy(directory / LEGACY_NAME)
    with staged_dir(directory) as tmp:
        for path in directory.iterdir():
            if path.is_file() and path.name != LEGACY_NAME:
                shutil.copy2(path, tmp / path.name)
        write_state(tmp, state["optimizer"], state["scheduler"], state["rng"])
    return True


def _trained_in(meta: dict[str, Any]) -> str | None:
    """The precision the run trained in: as state.json says it, or (written before it said) as it was asked."""
    asked = (meta.get("train_config") or {}).get("precision")
    return meta.get("precision", asked if asked in ("fp32", "bf16", "fp16") else None)


def _decay_end(max_steps: int | None, minutes: float | None) -> tuple[str, str]:
    """Where a cosine decay ends (``"at step 20"``) and the flag that says so: ``max_steps``, else ``minutes``."""
    if max_steps is not None:
        return f"at step {max_steps}", f"--max-steps {max_steps}"
    return f"after {minutes:g} minutes", f"--minutes {minutes:g}"


class RunState:
    """What the :class:`~tformer.training.trainer.Trainer` saves in ``OUT/last`` and restores from it (a mixin; the
    trainer's attributes it uses are declared here)."""

    world: distributed.World
    model: Any  # a tformer model (PretrainedMixin)
    task: Any
    cfg: TrainConfig
    device: Any
    out: Path
    precision: Choice
    scaler: torch.amp.GradScaler | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    step: int
    epoch: int
    batch_index: int
    elapsed: float
    best: float | None
    best_step: int | None
    best_ema: bool
    best_loss: float | None
    skipped_steps: int
    stale_evals: int
    ema: Any  # tformer.training.averaging.EMA, or None
    run_info: dict | None
    _saved_step: int | None
    fsdp: torch.nn.Module | None  # --fsdp: the sharded loss module; None without
    lock: Any  # OUT/.lock (tformer.training.lock.RunLock) while this trainer holds the run's folder; None after
    log: Callable[[str], None] | None = None  # where its report's lines go (rank 0's): the setup's log; None: stdout
    pipes: Any  # tformer.training.signals.Pipes: say() and _warn() write through it

    if TYPE_CHECKING:

        def _whole_model(self) -> Any: ...  # (Evaluation: the model to write, gathered whole with --fsdp)

    def say(self, text: str) -> None:
        """A line of the run's report (the precision, a note, the resume), once, from rank 0: to :attr:`log`."""
        if self.world.is_main:
            self.pipes.write(self.log or _line, text, "stdout")

    def close(self) -> None:
        """Give back the run folder's lock without training: a trainer that ``setup()`` made and never fitted holds
        it (the folder refuses another run) until this, the end of a ``with`` block, or the process ends. ``fit()``
        gives it back itself when it ends."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _warn(self, text: str) -> None:
        if self.world.is_main:
            self.pipes.write(_warning, text, "stderr")

    @contextlib.contextmanager
    def _saving(self, dest: Path) -> Iterator[Path]:
        """A temporary directory that replaces ``dest`` as a whole; a write the machine refuses (a full disk, also
        inside a SafetensorError; a read-only place) is one line naming ``dest``, and ``dest`` is left as it was."""
        before = dest.is_dir()
        try:
            with staged_dir(dest) as tmp:
                yield tmp
        except Exception as err:
            cause = os_error(err)
            if cause is None:
                raise
            kept = f"the previous {dest.name}/ is left as it was" if before else f"no {dest.name}/ had been saved yet"
            if dest.name == "last" and before:
                kept += " (a --resume continues from it)"
            message = f"could not save {dest}: {machine_reason(cause)}; {kept}"
            raise WriteError(cause.errno, cause.strerror, dest, message) from err

    def _rng_state(self) -> dict[str, torch.Tensor]:
        state = {"rng": torch.get_rng_state()}
        if torch.device(self.device).type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def save_last(self) -> None:
        """``OUT/last``: model, tokenizer, optimizer, scheduler, every process's RNG, step and data position."""
        rng = distributed.gather_objects(self._rng_state(), self.world)  # every rank's dropout RNG
        # --fsdp: every process gathers the model, the moments and the average whole for rank 0 to write
        model = self._whole_model()
        optimizer = (
            self.optimizer.state_dict() if self.fsdp is None else whole_optimizer_state(self.optimizer, self.world)
        )
        ema = None if self.ema is None else self.ema.whole(self.world.is_main)
        self._saved_step = self.step
        if not self.world.is_main:
            return
        meta = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "elapsed": self.elapsed,
            "best": self.best,
            "best_step": self.best_step,  # the evaluation best/ is from
            "best_ema": self.best_ema,  # whether best/ holds --ema's moving average
            "best_loss": self.best_loss,  # best/'s val_loss, which breaks a tie of the metric
            "skipped_steps": self.skipped_steps,
            "stale_evals": self.stale_evals,  # evaluations since the best (--patience)
            "precision": self.precision.precision,  # what ran ("auto" chose it): an fp16 run has a scaler to resume
            "train_config": asdict(self.cfg),
        }
        if self.run_info is not None:
            meta["run"] = self.run_info
        with self._saving(self.out / "last") as tmp:
            model.save_pretrained(tmp)
            self.task.save_extra(tmp)
            scaler = None if self.scaler is None else self.scaler.state_dict()
            write_state(tmp, optimizer, self.scheduler.state_dict(), rng, scaler)
            write_json(tmp / STATE_NAME, meta)
            if self.ema is not None:  # --ema: the moving average goes on where it was
                self.ema.save(tmp / EMA_NAME, ema)

    def resume(self) -> None:
        """Continue exactly from ``OUT/last``: model, optimizer, scheduler, gradient scaler, step, RNG, data position.

        Every file is checked: one that is missing, damaged or does not fit this model is an error naming it."""
        last = current_dir(self.out / "last")
        meta = read_meta(last)  # first: "no training state" before any other complaint
        weights = type(self.model).from_pretrained(last).state_dict()
        load_whole(self.model, weights)  # (into this process's shards with --fsdp)
        self.model.train()
        state = read_state(last)
        if meta["step"] > 0 and not state["optimizer"]["state"]:
            raise ValueError(
                f"{str(last / TENSORS_NAME)!r} holds no optimizer state, expected the optimizer's moments of a run "
                f"at step {meta['step']} (the file is damaged or not this run's)"
            )
        self._load(
            last / JSON_NAME,
            "the optimizer",
            lambda: self.optimizer.load_state_dict(shard_optimizer_state(self.optimizer, state["optimizer"])),
        )
        self._load(last / JSON_NAME, "the schedule", lambda: self._load_scheduler(state["scheduler"]))
        if self.scaler is not None:  # fp16: the loss scale goes on where it was
            self._load_scaler(last / JSON_NAME, state.get("scaler"), meta)
        if len(state["rng"]) == self.world.size:  # the same processes: each one's random numbers go on exactly
            mine = state["rng"][self.world.rank]
            if "rng" not in mine:
                raise ValueError(
                    f"{str(last / TENSORS_NAME)!r} has no 'rng.{self.world.rank}': expected every process's RNG"
                )
            self._load(last / TENSORS_NAME, "the RNG", lambda: torch.set_rng_state(mine["rng"]))
            if "cuda_rng" in mine and torch.device(self.device).type == "cuda":
                torch.cuda.set_rng_state(mine["cuda_rng"], self.device)
        else:  # another number of processes: the run goes on, its dropout's draws from new seeds, and it says so
            torch.manual_seed(self.cfg.seed + 1000 * self.world.rank + meta["step"])
            used, accum, now = len(state["rng"]), self.cfg.accum_steps, self.cfg.accum_steps * self.world.size
            self.say(
                f"--resume: the run used {used} process(es), this one has {self.world.size}: the weights, optimizer, "
                f"schedule and data position go on; a step now takes {now} batch{'es' * (now != 1)} (--accum-steps "
                f"{accum} on each process; it took {accum * used}), and dropout draws from new seeds (not the exact "
                "continuation)"
            )
        self.step, self.epoch, self.batch_index = meta["step"], meta["epoch"], meta["batch_index"]
        self.elapsed, self.best = float(meta["elapsed"]), meta["best"]
        self.best_step, self.best_ema = meta.get("best_step"), meta.get("best_ema", False)
        self.best_loss = meta.get("best_loss")  # (a run saved before it: ties are not broken)
        self.skipped_steps = meta.get("skipped_steps", 0)
        self.stale_evals = meta.get("stale_evals", 0)
        if self.ema is not None:
            self.ema.load(last / EMA_NAME)
        self.run_info = self.run_info or meta.get("run")
        self._saved_step = self.step
        self._follow_schedule(meta.get("train_config") or {})

    def _load_scaler(self, path: Path, saved: Any, meta: dict[str, Any]) -> None:
        """The gradient scaler's state, checked (:func:`tformer.fast.precision.scaler_state_problem`); a run that
        trained in fp16 without one is refused: tformer always writes it, so the file is damaged or another's, and
        a fresh scaler would resume inexactly without a word. A run that trained in fp32 or bf16 has none: the
        scaler starts afresh, as the resume line's "--precision fp16 (was ...)" says."""
        remedy = "resume with --precision fp32 or bf16, which use no scaler, or start the run again with --overwrite"
        if saved is None:
            if _trained_in(meta) != "fp16":
                return
            raise ValueError(
                f"{str(path)!r} holds no 'scaler', expected the gradient scaler's state of a run that trained in "
                f"fp16 (the file is damaged or not this run's): {remedy}"
            )
        problem = scaler_state_problem(saved)
        if problem:
            raise ValueError(f"training state {str(path)!r}: {problem} (the file is damaged): {remedy}")
        scaler = self.scaler
        assert scaler is not None
        self._load(path, "the gradient scaler", lambda: scaler.load_state_dict(saved))

    def _follow_schedule(self, saved: dict[str, Any]) -> None:
        """A cosine decay whose end moved since the save (a larger ``--max-steps``; ``--minutes`` without one)
        follows the new end from the next step on, said in one line on stderr with that step's learning rate on
        both schedules. The resumed run is then not the run it would have been: a resume changes nothing silently."""
        steps, minutes = saved.get("max_steps"), saved.get("minutes")
        if self.cfg.schedule != "cosine" or not (is_int(steps) or (steps is None and is_number(minutes))):
            return  # no end to move, or none saved that a cosine run could have had
        old = _decay_end(steps, minutes)
        new = _decay_end(self.cfg.max_steps, self.cfg.minutes)
        if old == new:
            return
        before = self.optimizer.param_groups[0]["lr"]  # what the run's schedule set for the next step
        factor = self.scheduler.lr_lambdas[0](self.step)  # the same one for every group
        for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group["lr"] = base * factor
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]  # type: ignore[attr-defined]
        after, step = self.optimizer.param_groups[0]["lr"], self.step + 1
        lr = f"is {after:.2e} either way" if math.isclose(before, after) else f"is {after:.2e}, not {before:.2e}"
        self._warn(
            f"note: the cosine decay now ends {new[0]} ({new[1]}), not {old[0]} as the run's did ({old[1]}): the "
            f"learning rate at step {step} {lr}"
        )

    def _load_scheduler(self, state: dict) -> None:
        if len(state["base_lrs"]) != len(self.optimizer.param_groups):
            raise ValueError(f"it has {len(state['base_lrs'])} base_lrs, expected {len(self.optimizer.param_groups)}")
        self.scheduler.load_state_dict(state)

    @staticmethod
    def _load(path: Path, what: str, load) -> None:
        """``load()``, its errors (PyTorch's, which name no file) turned into one naming ``path``."""
        try:
            load()
        except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"{str(path)!r} does not fit this model: {what} could not be restored ({reason})"
            ) from None


def _line(text: str) -> None:
    print(text, flush=True)


def _warning(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
