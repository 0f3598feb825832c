"""A run's training state on disk, with no pickle: tensors in safetensors, everything else in strict JSON.

``OUT/last/`` holds, next to the model and its tokenizer::

    state.json                    step, epoch, data position, elapsed time, best metric, the TrainConfig
    trainer_state.safetensors     the optimizer's tensors ("optimizer.<param>.<slot>") and every process's
                                  RNG states ("rng.<rank>", and "cuda_rng.<rank>" on a GPU)
    trainer_state.json            the optimizer's param groups and other slots, the scheduler's state

JSON is written with ``allow_nan=False``: a non-finite number (a NaN loss, an infinite metric) is written as
``null`` (:func:`finite_json`), so any strict JSON reader takes the files.

tformer 0.1 wrote ``trainer_state.pt``, a pickle. :func:`read_state` still reads it, once, with
``torch.load(weights_only=True)`` (the restricted unpickler, which builds tensors and plain containers only;
CVE-2025-32434 let a crafted file run code through it up to torch 2.5.1, so pyproject.toml asks for
torch >= 2.6), and :func:`convert_legacy` rewrites such a directory in today's format.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tformer.files import atomic_write, staged_dir

__all__ = ["STATE_NAME", "finite_json", "write_json", "write_state", "read_state", "convert_legacy"]

STATE_NAME = "state.json"
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


def write_state(directory: Path, optimizer: dict, scheduler: dict, rng: list[dict[str, torch.Tensor]]) -> None:
    """Write an optimizer and a scheduler ``state_dict`` and each process's RNG states into ``directory``."""
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
    save_file(tensors, str(directory / TENSORS_NAME), metadata={"format": "pt"})
    meta = {
        "optimizer": {"param_groups": optimizer["param_groups"], "state": slots},
        "scheduler": scheduler,
        "processes": len(rng),
    }
    write_json(directory / JSON_NAME, meta)


def read_state(directory: Path) -> dict[str, Any]:
    """``{"optimizer": state_dict, "scheduler": state_dict, "rng": [{"rng": ..., "cuda_rng": ...} per rank]}``."""
    if not (directory / JSON_NAME).is_file() and (directory / LEGACY_NAME).is_file():
        return _read_legacy(directory / LEGACY_NAME)
    for name in (JSON_NAME, TENSORS_NAME):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{str(directory / name)!r} is missing: {directory} holds no training state")
    try:
        meta = json.loads((directory / JSON_NAME).read_text(encoding="utf-8"))
        tensors = load_file(str(directory / TENSORS_NAME))
    except (json.JSONDecodeError, UnicodeDecodeError, SafetensorError) as err:
        raise ValueError(
            f"{str(directory)!r}: the training state is unreadable (truncated or corrupted?): {err}"
        ) from None
    state: dict[int, dict[str, Any]] = {int(p): dict(slots) for p, slots in meta["optimizer"]["state"].items()}
    rng: list[dict[str, torch.Tensor]] = [{} for _ in range(meta["processes"])]
    for key, tensor in tensors.items():
        kind, rest = key.split(".", 1)
        if kind == "optimizer":
            param, name = rest.split(".", 1)
            state.setdefault(int(param), {})[name] = tensor
        else:
            rng[int(rest)][kind] = tensor
    optimizer = {"state": state, "param_groups": meta["optimizer"]["param_groups"]}
    return {"optimizer": optimizer, "scheduler": meta["scheduler"], "rng": rng}


def _read_legacy(path: Path) -> dict[str, Any]:
    """tformer 0.1's ``trainer_state.pt``: tensors and plain containers only (``weights_only=True``)."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - the restricted unpickler refuses anything else, with its own types
        raise ValueError(f"{str(path)!r} is not a tformer 0.1 training state: {err}") from None
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
