"""A model's LoRA pairs (:mod:`tformer.nn.lora`) as a Hugging Face PEFT adapter, and a PEFT adapter read back.

    ADAPTER/
      adapter_config.json          peft_type LORA, r, lora_alpha, lora_dropout, target_modules (Hugging Face layer
                                   names), fan_in_fan_out (GPT-2's Conv1D), task_type, base_model_name_or_path
      adapter_model.safetensors    base_model.model.<Hugging Face layer>.lora_A.weight (r, in) and .lora_B.weight
                                   (out, r) for each pair

``peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), ADAPTER)`` then gives the logits tformer
gives (tests/test_lora.py checks it with the ``peft`` package). Each pair is placed by the name its weight has in
the base model's Hugging Face layout (:mod:`tformer.hf.registry`): ``decoder.layers.3.self_attn.qkv_proj``'s Q part
is Llama's ``model.layers.3.self_attn.q_proj``; a GPT-2's whole ``qkv_proj`` is ``transformer.h.3.attn.c_attn``.

What has no PEFT form is refused in one line before a file is written: a BERT (whose Hugging Face names depend on
the head class PEFT would wrap) and a translator whose channels tformer reorders on export (a sinusoidal model of
its own; an Opus-MT model keeps Marian's order). Such a model's pairs are merged instead (``tformer merge``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tformer.files import atomic_write
from tformer.hf import gemma3, gpt2, gpt_neox, llama, marian, registry
from tformer.hf.common import rename, translate
from tformer.models.config import ModelConfig
from tformer.models.seq2seq import Seq2SeqConfig
from tformer.nn import lora
from tformer.readers import read_json_object

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "is_adapter_dir",
    "exportable",
    "save_adapter",
    "load_adapter",
    "fused_qkv",
]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def fused_qkv(config: ModelConfig) -> bool:
    """True where the model's Hugging Face layout keeps W_Q, W_K, W_V as one matrix (GPT-2's ``c_attn``, GPT-NeoX's
    ``query_key_value``): a LoRA pair then covers the three, as PEFT's does; elsewhere each has its own."""
    return registry.module_for(config) in (gpt2, gpt_neox)


def exportable(config: ModelConfig, base: str | os.PathLike | None = None) -> str | None:
    """None when a model of ``config`` can write its LoRA pairs as a PEFT adapter on ``base`` (the model it started
    from), else why not (one line)."""
    if base is not None and (Path(base) / ADAPTER_CONFIG).is_file():  # PEFT would put the new pairs on its base alone
        return (
            f"it started from the PEFT adapter {str(base)!r}, whose pairs are now part of its weights: merge that "
            "adapter into its base first (tformer merge, or PEFT's merge_and_unload) and start from the merged model"
        )
    try:
        _check_exportable(config)
    except ValueError as err:
        return str(err)
    return None


def _check_exportable(config: ModelConfig) -> Any:
    module = registry.module_for(config)
    if module is registry.bert:
        raise ValueError(
            "a BERT's LoRA pairs are not written as a PEFT adapter (its Hugging Face names depend on the head class "
            "PEFT would wrap): merge them into the model (tformer merge) and export that"
        )
    if module is marian and isinstance(config, Seq2SeqConfig) and config.positional == "sinusoidal":
        raise ValueError(
            "this translator's channels are reordered when it is written in Marian's layout (a sinusoidal model of "
            "tformer's own), so its LoRA pairs have no PEFT form: merge them (tformer merge) and export that"
        )
    return module


def _hf_layer(module: Any, layer: str, part: str) -> str:
    """The Hugging Face name of the layer that pair ``part`` of our ``layer`` is PEFT's pair on."""
    if part == lora.WHOLE:
        key = f"{layer}.weight"
    else:  # q_proj / k_proj / v_proj of a split qkv_proj: Llama's and Marian's names for them too
        key = f"{layer.rpartition('.')[0]}.{part}.weight"
    if module is marian:
        name: str | None = rename(key, [], marian._WRITE, "Marian", to_ours=False)
    else:
        names = {gpt2: gpt2.NAMES, gpt_neox: gpt_neox.NAMES, llama: llama.NAMES, gemma3: gemma3.NAMES}[module]
        name = translate(key, names, to_ours=False)
    if name is None:
        raise ValueError(f"LoRA layer {layer!r} has no place in the Hugging Face layout")
    return name.removesuffix(".weight")


def _all_layers(model: nn.Module, fused: bool) -> Iterable[tuple[str, str]]:
    """(our layer, part) of every projection a pair could go beside, LoRA or not."""
    for name, _, attr, _ in lora._linears(model):
        parts = lora.QKV_PARTS if attr == "qkv_proj" and not fused else (lora.WHOLE,)
        for part in parts:
            yield f"{name}.{attr}", part


def _target_modules(module: Any, model: nn.Module, chosen: set[str], fused: bool) -> list[str]:
    """PEFT's ``target_modules``: the layers' last names (``q_proj``) where they pick exactly the layers with a pair,
    else the full names."""
    every = [_hf_layer(module, layer, part) for layer, part in _all_layers(model, fused)]
    short = sorted({name.rpartition(".")[2] for name in chosen})
    if {name for name in every if name.rpartition(".")[2] in short} == chosen:
        return short
    return sorted(chosen)


def save_adapter(model: nn.Module, directory: str | os.PathLike, base_model: str | os.PathLike | None) -> Path:
    """Write the LoRA pairs of ``model`` (a GPT, or an Opus-MT-layout translator) as the PEFT adapter
    ``directory`` (made if missing; its two files replaced atomically); ``base_model``: the directory (or Hub id)
    the pairs go on, recorded as ``base_model_name_or_path``. Returns ``directory``."""
    config = getattr(model, "config", None)
    layers = lora.lora_layers(model)
    if not layers or not isinstance(config, ModelConfig):
        raise ValueError("the model has no LoRA layers to write as an adapter")
    module = _check_exportable(config)
    record = lora.lora_record(model)
    assert record is not None
    fused = fused_qkv(config)
    state: dict[str, torch.Tensor] = {}
    chosen: set[str] = set()
    for name, layer in layers.items():
        for part in layer.parts:
            hf = _hf_layer(module, name, part)
            chosen.add(hf)
            state[f"{PREFIX}{hf}.lora_A.weight"] = layer.lora_A[part].detach().cpu().contiguous().clone()
            lora_b = layer.lora_B[part].detach().cpu()  # (out, r): GPT-NeoX groups W_Q, W_K, W_V's rows by head
            regroup = module is gpt_neox and name.endswith("qkv_proj")
            lora_b = gpt_neox.regroup_qkv(lora_b, config.n_heads, to_ours=False) if regroup else lora_b
            state[f"{PREFIX}{hf}.lora_B.weight"] = lora_b.contiguous().clone()
    adapter = {
        "peft_type": "LORA",
        "task_type": "SEQ_2_SEQ_LM" if module is marian else "CAUSAL_LM",
        "base_model_name_or_path": None if base_model is None else str(base_model),
        "r": record["r"],
        "lora_alpha": record["alpha"],
        "lora_dropout": record["dropout"],
        "target_modules": _target_modules(module, model, chosen, fused),
        "fan_in_fan_out": module is gpt2,  # GPT-2's Conv1D stores W transposed; the pairs are Linear's shapes
        "bias": "none",
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "modules_to_save": None,
    }
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(adapter, indent=2) + "\n"
    atomic_write(out / ADAPTER_WEIGHTS, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    atomic_write(out / ADAPTER_CONFIG, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return out


_ENDS = {half: (f".{half}.weight", f".{half}.default.weight") for half in ("lora_A", "lora_B")}
# what an adapter tformer cannot apply asks of the user (tformer reads the LoRA pairs of linear projections only)
_MERGE_FIRST = (
    " (tformer reads the LoRA pairs of linear projections; merge this adapter into its base with PEFT's "
    "merge_and_unload() and save_pretrained(), then give that directory)"
)


def load_adapter(model: nn.Module, directory: str | os.PathLike) -> nn.Module:
    """Put the PEFT LoRA adapter ``directory`` on ``model`` (its base: a GPT or an Opus-MT-layout translator),
    as :class:`~tformer.nn.lora.LoRALinear` layers holding its pairs; returns ``model``. What does not fit (another
    peft_type, a layer the model lacks, a pair of another shape, a tensor that is no linear layer's pair: an
    embedding's pair, ``modules_to_save``) is one line naming the file, never a part of the adapter left out."""
    directory = Path(directory)
    path = directory / ADAPTER_CONFIG
    adapter = read_json_object(path, "PEFT adapter config")
    if adapter.get("peft_type") != "LORA":
        raise ValueError(
            f"{str(path)!r}: peft_type must be 'LORA' (tformer reads LoRA adapters), got {adapter.get('peft_type')!r}"
        )
    for field, wanted in (("bias", "none"), ("use_rslora", False), ("use_dora", False)):
        if adapter.get(field, wanted) != wanted:
            raise ValueError(f"{str(path)!r}: {field}={adapter[field]!r} is not supported (tformer's LoRA: {wanted!r})")
    if adapter.get("rank_pattern") or adapter.get("alpha_pattern"):
        raise ValueError(f"{str(path)!r}: rank_pattern / alpha_pattern (a rank per layer) are not supported")
    if adapter.get("modules_to_save"):
        raise ValueError(
            f"{str(path)!r}: modules_to_save={adapter['modules_to_save']!r} is not supported{_MERGE_FIRST}"
        )
    weights = directory / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{str(weights)!r} is missing: the adapter has no weights")
    state = load_file(str(weights))
    config = getattr(model, "config", None)
    assert isinstance(config, ModelConfig)
    module = _check_exportable(config)
    fused = fused_qkv(config)
    where = {_hf_layer(module, layer, part): (layer, part) for layer, part in _all_layers(model, fused)}
    found: dict[str, dict[str, dict[str, torch.Tensor]]] = {}
    for key, tensor in state.items():
        stem = key.removeprefix(PREFIX)
        pair = [(half, stem[: -len(end)]) for half in ("lora_A", "lora_B") for end in _ENDS[half] if stem.endswith(end)]
        if not pair:  # an embedding's pair, a whole module trained beside the pairs, ...: not dropped in silence
            raise ValueError(f"{str(weights)!r}: {key!r} is not a LoRA pair of a linear projection{_MERGE_FIRST}")
        half, hf = pair[0]
        if hf not in where:
            raise ValueError(f"{str(weights)!r}: {key!r} names no projection of this model")
        layer, part = where[hf]
        if half == "lora_B" and module is gpt_neox and layer.endswith("qkv_proj"):  # its rows grouped by head
            tensor = gpt_neox.regroup_qkv(tensor, config.n_heads, to_ours=True)
        found.setdefault(layer, {}).setdefault(part, {})[half] = tensor
    if not found:
        raise ValueError(f"{str(weights)!r} holds no LoRA pairs")
    r, alpha = cast(int, adapter.get("r")), cast(float, adapter.get("lora_alpha"))
    record = lora.LoraConfig(
        r,
        alpha,
        float(adapter.get("lora_dropout") or 0.0),
        fused_qkv=fused,  # type: ignore[arg-type]
        layers={layer: list(parts) for layer, parts in found.items()},
    )
    lora.apply_layers(model, record)
    layers = lora.lora_layers(model)
    with torch.no_grad():
        for layer, parts in found.items():
            for part, halves in parts.items():
                target = layers[layer]
                for half, tensor in halves.items():
                    param = getattr(target, half)[part]
                    if tuple(param.shape) != tuple(tensor.shape):
                        raise ValueError(
                            f"{str(weights)!r}: {half} of {layer} ({part}) has shape {tuple(tensor.shape)}, this model "
                            f"needs {tuple(param.shape)}"
                        )
                    param.copy_(tensor)
    return model
