"""What the Hugging Face converters share: activation names, weight renaming, Q/K/V fusing, tied weights.

:mod:`tformer.interop.hf` (GPT-2, BERT, the ``from_hf`` entry point) and
:mod:`tformer.interop.hf_marian` (Marian) both import from here; neither imports the other back.

Dimension legend: D model dim.
"""

from __future__ import annotations

import re

import torch

__all__ = ["ACTIVATIONS", "activation", "rename", "fuse_qkv", "drop_tied"]

# Hugging Face ``hidden_act`` / ``activation_function`` name -> ours.
ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu2": "relu2",
}

Rules = list[tuple[str, str]]  # (regex, replacement)


def activation(name: str, field: str) -> str:
    """Our activation name for Hugging Face's ``name`` (read from the config field ``field``)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"from_hf: {field}={name!r} is not supported; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def rename(key: str, prefix: Rules, renames: Rules, family: str) -> str:
    """Normalise ``key`` with the ``prefix`` rules, then apply the one ``renames`` rule that matches it."""
    for pattern, repl in prefix:
        key = re.sub(pattern, repl, key)
    for pattern, repl in renames:
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    raise ValueError(f"from_hf: unexpected {family} weight {key!r} (no mapping to tformer)")


def fuse_qkv(state: dict[str, torch.Tensor], names: tuple[str, str, str]) -> dict[str, torch.Tensor]:
    """Each attention's ``<attn>.{q}.{weight,bias}``, ``{k}``, ``{v}`` → one ``<attn>.qkv_proj.*`` (rows Q, K, V).

    ``names`` are the three projection names of the source library, e.g. ``("query", "key", "value")``.
    """
    q_name = f".{names[0]}."
    fused = {}
    for key in [k for k in state if q_name in k]:
        prefix, kind = key.split(q_name)  # e.g. "decoder.layers.0.cross_attn", "weight"
        parts = [state.pop(f"{prefix}.{name}.{kind}") for name in names]
        fused[f"{prefix}.qkv_proj.{kind}"] = torch.cat(parts, dim=0)  # 3 × (D, D) -> (3D, D); bias (3D,)
    return {**state, **fused}


def drop_tied(state: dict[str, torch.Tensor], key: str, tied_to: str, message: str) -> str:
    """Remove ``key`` (tied to ``tied_to`` in our model) after checking the checkpoint really ties them.

    Raises ``ValueError(message)`` when both are present and differ; returns ``key``.
    """
    tensor = state.pop(key, None)
    other = state.get(tied_to)
    if tensor is not None and other is not None and not torch.equal(tensor, other):
        raise ValueError(message)
    return key
