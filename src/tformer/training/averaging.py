"""Averaged weights: an exponential moving average kept while a run trains (:class:`EMA`, ``--ema DECAY``), and
checkpoint averaging: the models a run kept at its last evaluations, averaged parameter by parameter into one model
(fairseq's ``average_checkpoints.py``, OpenNMT-py's model averaging). Averaging the weights of nearby points of one
run lands nearer the middle of the valley they circle, and usually scores a little better than any one of them.

    tformer train translation ... --eval-every 200 --keep-checkpoints 5   # OUT/checkpoints/step-0001000 ...
    tformer average runs/mt avg5/ --last 5                               # a model directory: avg5/
    tformer average runs/mt best3/ --best 3                              # the 3 best by the run's own metric

A training run with ``keep_checkpoints=K`` (``--keep-checkpoints K``) saves the model of each evaluation as
``OUT/checkpoints/step-NNNNNNN/`` (what ``best/`` holds: weights, config, tokenizer) with a ``checkpoint.json`` (its
step and metric) and keeps the newest K (:func:`keep_checkpoint`). :func:`average_models` averages any model
directories of one kind and shape, in float64, each tensor stored back in its own dtype; integer buffers must agree.

A LoRA run's checkpoints share their frozen weights and differ in their pairs, whose own means would not give the
mean of the updates (the mean of B·A is not mean(B)·mean(A)). The average keeps all K pairs side by side instead, as
one pair of rank K·r (A's rows stacked, B's columns stacked and divided by K, α times K so that α / r stays): exactly
the mean of the K updates, written as the PEFT adapter of that rank beside the model, as the run wrote its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tformer.files import atomic_write, staged_dir
from tformer.outputs import mark_written
from tformer.training import sharded

__all__ = [
    "EMA",
    "EMA_NAME",
    "CHECKPOINTS",
    "keep_checkpoint",
    "checkpoints",
    "choose_checkpoints",
    "average_models",
    "write_average",
    "ADAPTER_FILES",
]

CHECKPOINTS = "checkpoints"  # OUT/checkpoints/step-NNNNNNN
EMA_NAME = "ema.safetensors"  # in last/: the moving average, for --resume
INFO = "checkpoint.json"  # {"step": ..., "metric": ..., "value": ..., "higher_is_better": ...}
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")  # a LoRA run's PEFT adapter: not the average's


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
    found = [d for d in folder.glob("step-*") if d.name[5:].isdigit() and (d / INFO).is_file()]
    return sorted(found, key=lambda d: int(d.name.removeprefix("step-")))  # the step is in the name


def choose_checkpoints(run: str | Path, last: int | None = None, best: int | None = None) -> list[Path]:
    """The ``last`` newest of a run's checkpoints, or its ``best`` as its ``best/`` is chosen: by the metric, an equal
    one by the lower validation loss (then the newer); each must exist: asking for more than the run kept is one line
    saying how many it has."""
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

    def rank(i: int) -> tuple:  # a checkpoint of an earlier version has no val_loss: then ties go by step alone
        return sign * infos[i]["value"], -(infos[i].get("val_loss") or 0.0), infos[i]["step"]

    ranked = sorted(range(len(kept)), key=rank, reverse=True)
    return sorted((kept[i] for i in ranked[:best]), key=kept.index)


def average_models(directories: Sequence[str | Path]):
    """The models of ``directories`` (of one kind and shape) averaged parameter by parameter: the last one's model
    with the mean of each parameter (computed in float64, stored in its own dtype); a directory whose parameters
    differ in name or shape, or whose integer buffers differ, is one line naming it."""
    from tformer.models.checkpoint import load_pretrained

    if not directories:
        raise ValueError("no model directories to average")
    from tformer.nn.lora import lora_layers

    total: dict[str, torch.Tensor] = {}
    pairs: dict[str, list[dict]] = {}  # a LoRA run's: per layer, each checkpoint's (A, B) per part
    model = None
    for n, directory in enumerate(directories):
        model = load_pretrained(directory)
        for name, layer in lora_layers(model).items():  # copies, not views: the last model gets the mean loaded
            pair = {p: (layer.lora_A[p].detach().clone(), layer.lora_B[p].detach().clone()) for p in layer.parts}
            pairs.setdefault(name, []).append(pair)
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
    model.load_state_dict(mean)  # (a LoRA layer's pairs are then put side by side in place of their means)
    for name, each in pairs.items():
        _side_by_side(model, name, each)
    return model


@torch.no_grad()
def _side_by_side(model: torch.nn.Module, name: str, each: list[dict]) -> None:
    """The LoRA layer ``name`` of ``model`` replaced by one of rank K·r holding the K checkpoints' pairs ``each``:
    (α K) / (K r) · Σ (B_k / K) A_k, the mean of their updates, whatever they are."""
    from tformer.nn.lora import LoRALinear

    layer = model.get_submodule(name)
    assert isinstance(layer, LoRALinear)
    k = len(each)
    wide = LoRALinear(layer, layer.parts, layer.r * k, layer.alpha * k, layer.dropout.p)
    for part in layer.parts:
        a = torch.cat([pair[part][0] for pair in each])
        b = torch.cat([pair[part][1].double() / k for pair in each], dim=1)
        wide.lora_A[part].copy_(a)
        wide.lora_B[part].copy_(b.to(wide.lora_B[part].dtype))
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, wide)


def write_average(
    directories: Sequence[str | Path],
    out: str | Path,
    also_save: Sequence[Callable[[torch.nn.Module, Path], None]] = (),
) -> Path:
    """``out``: the average of ``directories`` (:func:`average_models`) as a model directory, the last one's other
    files (tokenizer, labels) beside it, written whole or not at all; ``also_save``: what writes more beside it, as
    the Trainer's (a LoRA run's PEFT adapter: :func:`tformer.finetune.adapter_writer`)."""
    model = average_models(directories)
    with staged_dir(out) as tmp:
        for f in Path(directories[-1]).iterdir():
            if f.is_file() and f.name not in (INFO, *ADAPTER_FILES):
                shutil.copy2(f, tmp / f.name)
        model.save_pretrained(tmp)
        for write in also_save:
            write(model, tmp)
        mark_written(tmp, "average")
    return Path(out)


class EMA:
    """The exponential moving average of a model's trained weights (``--ema DECAY``: Polyak averaging,
    Marian's exponential smoothing, timm's ModelEmaV2): after each optimizer step ``ema = d * ema + (1 - d) * weight``,
    kept in float32 apart from the model. ``d`` warms up as TensorFlow's ``ExponentialMovingAverage(num_updates=n)``
    does: ``d = min(decay, (1 + n) / (10 + n))`` after n updates, so that the early average follows the weights (with
    0.999 from the start, the random initial weights would still weigh 0.999^600 = 55% after 600 steps).
    :meth:`swapped` puts it in the model for an evaluation or a save, then puts the trained weights back;
    :meth:`save` and :meth:`load` keep it (and n) with ``last/``."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay, self.updates = decay, 0
        # the parameters that train (a LoRA run's frozen base never moves: no copy of it), updated in place
        trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.is_floating_point()]
        self.names = [n for n, _ in trained]
        self._live = [p.detach() for _, p in trained]
        self.shadow = [t.float().clone() for t in self._live]

    def current_decay(self) -> float:
        """The decay of the next update: ``min(decay, (1 + n) / (10 + n))`` after n updates."""
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    def update(self) -> None:
        """One step of the average, after an optimizer step."""
        with torch.no_grad():
            torch._foreach_lerp_(self.shadow, [t.float() for t in self._live], 1.0 - self.current_decay())
        self.updates += 1

    @contextlib.contextmanager
    def swapped(self):
        """The averaged weights in the model for the block; the trained ones back after it, whatever happens."""
        kept = [t.clone() for t in self._live]
        try:
            with torch.no_grad():
                for t, s in zip(self._live, self.shadow):
                    t.copy_(s)
            yield
        finally:
            with torch.no_grad():
                for t, k in zip(self._live, kept):
                    t.copy_(k)

    def whole(self, keep: bool = True) -> dict[str, torch.Tensor]:
        """The average by parameter name, each tensor whole on the CPU (with ``--fsdp`` every process must call it:
        the shards are gathered; where ``keep`` is false, rank 0's others, it is empty)."""
        state = {n: sharded.whole(s, keep) for n, s in zip(self.names, self.shadow)}
        return {n: t for n, t in state.items() if t is not None}

    def save(self, path: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        """Write the average (``state``: :meth:`whole`'s, gathered before) and its number of updates to ``path``."""
        state = self.whole() if state is None else state
        atomic_write(path, lambda tmp: save_file(state, tmp, metadata={"updates": str(self.updates)}))

    def load(self, path: Path) -> None:
        """The average saved in ``path``; a missing file or one of other tensors is an error naming it."""
        if not path.is_file():
            raise FileNotFoundError(f"{str(path)!r} is missing: the run's moving average (--ema) cannot be resumed")
        saved = load_file(str(path))
        if set(saved) != set(self.names) or any(saved[n].shape != s.shape for n, s in zip(self.names, self.shadow)):
            raise ValueError(f"{str(path)!r} does not hold this model's moving average (other tensors or shapes)")
        for n, s in zip(self.names, self.shadow):
            sharded.copy_whole_(s, saved[n])  # (this process's part of it with --fsdp)
        with safe_open(str(path), "pt") as f:
            updates = (f.metadata() or {}).get("updates", "")
        if not updates.isdigit():
            raise ValueError(f"{str(path)!r} does not say how many updates its moving average has had ('updates')")
        self.updates = int(updates)
