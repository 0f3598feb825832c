"""Input checks shared by the models: clear errors instead of shape errors from deep inside PyTorch."""

from __future__ import annotations

import torch

__all__ = ["check_ids", "check_length", "check_positive", "check_positive_int"]


def check_ids(ids: torch.Tensor, name: str, vocab_size: int) -> None:
    """``ids`` must be a non-empty (B, T) integer tensor with values in [0, vocab_size)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype in (torch.bool,) or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}): need at least one sequence of one token")
    if torch.compiler.is_compiling():  # value checks would break the compiled graph; shapes were checked
        return
    lo, hi = (int(x) for x in torch.aminmax(ids))
    if lo < 0 or hi >= vocab_size:
        bad = hi if hi >= vocab_size else lo
        raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size})")


def check_length(length: int, max_len: int, name: str) -> None:
    if length > max_len:
        raise ValueError(
            f"{name} reaches position {length}, longer than max_len={max_len} (the positional table); "
            "use a config with a larger max_len or shorter inputs"
        )


def check_positive_int(value, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_positive(config, *names: str) -> None:
    """Each named field of a config must be a positive integer."""
    for name in names:
        check_positive_int(getattr(config, name), f"{type(config).__name__}.{name}")
