"""Starting a training run from a pretrained model (``--init``), in full or with LoRA: what every family's setup shares.

    loaded = start_from(init, "gpt", given={"--preset": preset, "--tokenizer": tokenizer})   # the model, its tokenizer
    lora = add_adapters(loaded.model, LoraSettings(r=8), log)                              # freeze it, pairs beside it

* :func:`start_from` reads ``--init`` with :func:`tformer.load` (a tformer run or model, a Hugging Face directory of a
  supported architecture, an Opus-MT directory), in float32 with the reference kernels (the Trainer chooses its own),
  every parameter trainable. A flag that would change the architecture or the tokenizer is refused in one line
  naming it: the model and its tokenizer are the pretrained ones.
* :func:`add_adapters` puts LoRA pairs (:mod:`tformer.nn.lora`) beside the targeted projections, Q/K/V split or fused
  as the model's Hugging Face layout has them (so that each pair is a PEFT pair, :mod:`tformer.hf.peft`), and says
  how many parameters train.
* :func:`adapter_writer`: what the Trainer writes beside each best model of a LoRA run: the PEFT adapter
  (``adapter_config.json``, ``adapter_model.safetensors``), naming ``--init`` as its base.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tformer.hf.directory import is_hf_dir
from tformer.hf.peft import fused_qkv, save_adapter
from tformer.loader import Loaded, load
from tformer.nn.lora import LoraConfig, add_lora, lora_layers, target_names

__all__ = [
    "NO_BERT_ADAPTER",
    "LoraSettings",
    "refuse_given",
    "start_from",
    "add_adapters",
    "adapter_writer",
    "count_parameters",
]


NO_BERT_ADAPTER = (  # what a BERT's LoRA run says (tformer.hf.peft refuses its adapter)
    "note: no PEFT adapter is written beside the best model: a BERT's Hugging Face names depend on the head class PEFT "
    "would wrap; `tformer merge RUN OUT` folds the pairs into a plain model"
)


@dataclass(frozen=True)
class LoraSettings:
    """``--lora-r`` (0: no LoRA, full fine-tuning), ``--lora-alpha`` (None: 2 r), ``--lora-dropout``,
    ``--lora-targets`` (comma-separated target names, :mod:`tformer.nn.lora`)."""

    r: int = 0
    alpha: float | None = None
    dropout: float = 0.05
    targets: str = "attn.*"

    def __post_init__(self) -> None:
        if self.r:
            return
        defaults = LoraSettings.__dataclass_fields__
        for name in ("alpha", "dropout", "targets"):  # given without a rank: LoRA is off, so it would do nothing
            value = getattr(self, name)
            if value != defaults[name].default:
                value = f"{value:g}" if isinstance(value, float) else value
                raise ValueError(
                    f"--lora-{name} {value} is a LoRA setting, and without --lora-r (0: full fine-tuning) there is "
                    f"no LoRA: give --lora-r R (8, say), or leave --lora-{name} out"
                )

    def config(self, fused: bool) -> LoraConfig:
        targets = tuple(t.strip() for t in self.targets.split(",") if t.strip())
        if not targets:
            raise ValueError(f"--lora-targets must name at least one layer, got {self.targets!r}")
        return LoraConfig(self.r, self.alpha if self.alpha is not None else 2.0 * self.r, self.dropout, targets, fused)


def refuse_given(init: str | os.PathLike | None, given: Mapping[str, Any]) -> None:
    """Refuse, in one line naming it, each flag of ``given`` (flag or setting name → value, None when not given:
    ``"--preset"`` or ``"d_model"``) that would change the architecture or the tokenizer of the ``--init`` model
    (None: no ``--init``, nothing to refuse)."""
    if init is None:
        return
    for name, value in given.items():
        flag = name if name.startswith("--") else f"--{name.replace('_', '-')}"
        if value is not None:
            shown = flag if value is True else f"{flag} {value}"  # True: a switch
            raise ValueError(
                f"{shown} cannot be used with --init: the model and its tokenizer are --init's "
                f"({str(init)!r}); leave {flag} out"
            )


def start_from(init: str | os.PathLike, family: str, given: Mapping[str, Any] | None = None) -> Loaded:
    """The pretrained model of ``init`` (float32, the reference kernels, every parameter trainable) and its
    tokenizer; ``given``: the flags that would change the architecture or tokenizer (see :func:`refuse_given`)."""
    refuse_given(init, given or {})
    loaded = load(init, family=family, flag="--init", float_weights=True, fast=False)
    loaded.require_tokenizer()
    loaded.model.train()
    for p in loaded.model.parameters():
        p.requires_grad_(True)
    return loaded


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, all) parameters, tied ones counted once."""
    seen: dict[int, nn.Parameter] = {id(p): p for p in model.parameters()}
    return sum(p.numel() for p in seen.values() if p.requires_grad), sum(p.numel() for p in seen.values())


def add_adapters(model: nn.Module, settings: LoraSettings, log: Callable[[str], None]) -> LoraConfig | None:
    """LoRA pairs beside the targeted projections of ``model`` (everything else frozen) when ``settings.r`` > 0, and
    a line saying how many parameters train; None (full fine-tuning) otherwise."""
    if not settings.r:
        trainable, total = count_parameters(model)
        log(f"fine-tuning all {total:,} parameters (--lora-r 0)")
        return None
    config = getattr(model, "config", None)
    fused = fused_qkv(config) if config is not None else False
    lora = add_lora(model, settings.config(fused))
    trainable, total = count_parameters(model)
    log(
        f"LoRA r {lora.r}, alpha {lora.alpha:g}, dropout {lora.dropout:g}: {sum(map(len, lora.layers.values()))} "
        f"pairs ({', '.join(sorted({t for t in target_names(model, fused) if _chosen(t, lora.targets)}))}): "
        f"{trainable:,} trainable parameters of {total:,} ({100 * trainable / max(total, 1):.2f}%)"
    )
    pairs = adapted = 0
    for layer in lora_layers(model).values():
        pairs += sum(p.numel() for p in (*layer.lora_A.values(), *layer.lora_B.values()))
        adapted += sum(layer.in_features * (end - start) for start, end in layer.parts.values())
    if pairs >= adapted:  # r·(in + out) ≥ in·out: no saving left
        log(
            f"note: --lora-r {lora.r} is too large for this model's width: its pairs have {pairs:,} parameters, the "
            f"weights they adapt {adapted:,}; a smaller --lora-r (8 to 64 is usual for a large model), or --lora-r 0 "
            "to train those weights themselves"
        )
    return lora


def _chosen(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def adapter_writer(
    base: str | os.PathLike, log: Callable[[str], None] | None = None
) -> Callable[[nn.Module, Path], None]:
    """What the Trainer calls with each best model it saves: the PEFT adapter beside it (base: ``base``, absolute).
    A base of tformer's own (a run, not a Hugging Face directory) is said to ``log``: PEFT cannot load it."""
    where = str(Path(base).resolve())
    if log is not None and not is_hf_dir(where):
        log(
            f"note: the PEFT adapter written beside best/ names {where} as its base, a tformer model: tformer loads "
            f"it; for PEFT and transformers, export that base (tformer export {base} DIR) and put the adapter on DIR, "
            "or merge the two (tformer merge)"
        )

    def write(model: nn.Module, directory: Path) -> None:
        save_adapter(model, directory, where)

    return write
