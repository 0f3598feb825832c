"""What ``benchmarks.finetune`` measures inside each fresh process: one fine-tuning configuration's memory and step
time, the activations probe, and the adapter check against PEFT.

The server of the fresh processes imports this module once (torch, tformer, transformers and, where installed,
``peft``), so no measurement pays those imports; memory is read as :mod:`benchmarks.memory_child` reads it (its
:func:`~benchmarks.memory_child.rss_mb`, :func:`~benchmarks.memory_child.reset_peak`,
:func:`~benchmarks.memory_child.peak_mb`, :func:`~benchmarks.memory_child.trim`): the process first builds the
configuration on the tiny twin of the model and runs its steps, lets it go, then ``gc`` + ``malloc_trim`` and its
resident set is the baseline; peaks are the kernel's high-water mark (VmHWM) reset just before the first step.

Dimension legend: B batch, T tokens, V vocabulary.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
import transformers
from torch import nn

import tformer
from benchmarks.memory_child import peak_mb, reset_peak, rss_mb, trim

try:
    import peft
except ImportError:  # the two PEFT measurements say so; the others run
    peft = None

gc.freeze()  # what the imports made is never collected: each gc.collect of a measurement sees its own objects only
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*deprecated")  # peft on transformers 5

MB = 2**20
LORA = dict(r=8, alpha=16.0, dropout=0.05)  # both libraries' LoRA: rank, alpha (update × alpha / r), dropout
HF_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]  # PEFT's names of tformer's attn.* (W_Q, W_K, W_V, W_O)
KINDS = ("tformer_full", "tformer_lora", "hf_full", "hf_lora", "activations")


def _settle() -> float:
    gc.collect()
    trim()
    return rss_mb()


def batch(vocab: int, b: int, t: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed batch: inputs (B, T) and next-token labels (B, T), from B × (T + 1) random ids of a fixed seed."""
    ids = torch.randint(4, vocab, (b, t + 1), generator=torch.Generator().manual_seed(seed))  # (B, T + 1)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def param_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters, each tensor once (a tied table counted once)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = max(seen.get(p.data_ptr(), 0), p.numel() * p.element_size())
    return sum(seen.values())


def _tformer_model(path: str, kind: str) -> nn.Module:
    """``tformer.load`` (reference kernels), LoRA pairs beside attn.* for ``tformer_lora``, then ``speed_up`` (the
    Trainer's order: ``start_from``, ``add_adapters``, then the Trainer's fast kernels)."""
    from tformer.fast import speed_up
    from tformer.hf.peft import fused_qkv
    from tformer.nn.lora import LoraConfig, add_lora

    model = tformer.load(path, fast=False).model
    if kind == "tformer_lora":
        add_lora(model, LoraConfig(LORA["r"], LORA["alpha"], LORA["dropout"], ("attn.*",), fused_qkv(model.config)))
    elif kind == "activations":  # nothing trains: autograd keeps what the backward needs from the embedding on
        for p in model.parameters():
            p.requires_grad_(False)
        _grad_from_embedding(model)
    return speed_up(model)


def _hf_model(path: str, kind: str) -> nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if kind == "hf_lora":
        config = peft.LoraConfig(
            r=LORA["r"],
            lora_alpha=LORA["alpha"],
            lora_dropout=LORA["dropout"],
            target_modules=HF_TARGETS,
            task_type="CAUSAL_LM",
        )
        model = peft.get_peft_model(model, config)
    return model


def _grad_from_embedding(model: nn.Module) -> None:
    """Make the token embedding's output require grad (its table stays frozen): a backward then runs through every
    layer, saving and computing what it would for training, but no parameter gradient."""
    table = next(m for m in model.modules() if isinstance(m, nn.Embedding))
    table.register_forward_hook(lambda module, args, out: out.requires_grad_())


def build(kind: str, path: str, s: dict) -> tuple[nn.Module, Callable[[], None]]:
    """The model of configuration ``kind`` from the directory ``path`` and one step of it on the batch
    ``s["batch"]`` × ``s["seq"]``: zero_grad, forward, loss, backward, AdamW step (``make_optimizer``: what the
    Trainer steps with, fused; over the trainable parameters only). ``activations``: forward, loss, backward only."""
    from tformer.fast import sequence_cross_entropy
    from tformer.training.config import TrainConfig, make_optimizer

    model = _tformer_model(path, kind) if kind.startswith("tformer") or kind == "activations" else _hf_model(path, kind)
    model.train()
    inputs, labels = batch(s["vocab"], s["batch"], s["seq"])  # (B, T) each
    if kind.startswith("hf"):
        loss = lambda: model(input_ids=inputs, labels=inputs).loss  # noqa: E731  (shifted inside)
    else:
        loss = lambda: sequence_cross_entropy(model(inputs), labels)  # noqa: E731
    if kind == "activations":
        return model, lambda: loss().backward()
    with tempfile.TemporaryDirectory() as out:  # TrainConfig wants a run directory; nothing is written there
        opt = make_optimizer(model, TrainConfig(out_dir=out, max_steps=1))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    return model, step


def measure(spec: dict) -> dict:
    """One configuration (``spec``: kind, path, twin, sizes, twin_sizes, warmup, repeats, threads) in this fresh
    process: the twin's run, the baseline, the model built (``before``), then ``warmup`` steps and ``repeats`` timed
    ones with the peak reset before the first; all MB above the baseline."""
    kind = spec["kind"]
    if kind.startswith("hf_lora") and peft is None:
        return {"kind": kind, "skipped": "peft is not installed"}
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)  # LoRA's A, dropout masks
    imported = _settle()
    twin, twin_step = build(kind, spec["twin"], spec["twin_sizes"])
    for _ in range(2):
        twin_step()
    del twin, twin_step
    baseline = _settle()
    model, step = build(kind, spec["path"], spec["sizes"])
    before = _settle()
    reset = reset_peak()
    seconds = []
    for i in range(spec["warmup"] + spec["repeats"]):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
        if i == 0:
            first_peak = peak_mb(reset)
    peak = peak_mb(reset)
    after = _settle()
    timed = seconds[spec["warmup"] :]
    trainable = {id(p): p for p in model.parameters() if p.requires_grad}
    return {
        "kind": kind,
        "threads": torch.get_num_threads(),
        "imported_mb": imported,
        "baseline_mb": baseline,
        "above_import_mb": baseline - imported,
        "before_steps_mb": before - baseline,
        "first_step_peak_mb": first_peak - baseline,
        "peak_mb": peak - baseline,
        "peak_above_before_mb": peak - before,
        "after_steps_mb": after - baseline,
        "peak_method": "VmHWM reset before the first step" if reset else "ru_maxrss (whole process)",
        "weights_bytes": param_bytes(model),
        "params": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "trainable_params": sum(p.numel() for p in trainable.values()),
        "first_step_s": seconds[0],
        "step_s_median": statistics.median(timed),
        "step_s_min": min(timed),
        "step_s": timed,
        "pid": os.getpid(),
    }


@torch.no_grad()
def adapter_check(spec: dict) -> dict:
    """tformer's LoRA pairs (seeded: A as initialised, B drawn nonzero) written with ``save_adapter``, read by
    ``peft.PeftModel.from_pretrained`` onto ``AutoModelForCausalLM.from_pretrained`` of the same base; logits of a
    fixed batch in eval mode, with tformer's reference kernels and with the Trainer's (``speed_up``)."""
    if peft is None:
        return {"skipped": "peft is not installed"}
    from tformer.fast import speed_up
    from tformer.hf.peft import fused_qkv, save_adapter
    from tformer.nn.lora import LoraConfig, add_lora, lora_layers

    torch.set_num_threads(spec["threads"])
    path = spec["path"]
    torch.manual_seed(2)
    ours = tformer.load(path, fast=False).model
    add_lora(ours, LoraConfig(LORA["r"], LORA["alpha"], LORA["dropout"], ("attn.*",), fused_qkv(ours.config)))
    g = torch.Generator().manual_seed(3)
    for layer in lora_layers(ours).values():
        for b in layer.lora_B.values():
            b.copy_(torch.randn(b.shape, generator=g) * 0.05)
    ours.eval()
    inputs, _ = batch(spec["vocab"], spec["batch"], spec["seq"], seed=4)  # (B, T)
    reference = ours(inputs).float()  # (B, T, V)
    fast = speed_up(ours)(inputs).float()  # (B, T, V)
    base = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    plain = base(input_ids=inputs).logits.float()  # (B, T, V): the base without the adapter
    with tempfile.TemporaryDirectory() as adapter:
        save_adapter(ours, adapter, path)
        theirs = peft.PeftModel.from_pretrained(base, adapter).eval()
        peft_logits = theirs(input_ids=inputs).logits.float()  # (B, T, V)
    diff_ref = (reference - peft_logits).abs().max().item()
    diff_fast = (fast - peft_logits).abs().max().item()
    return {
        "batch": f"{spec['batch']} × {spec['seq']}",
        "pairs": sum(len(layer.parts) for layer in lora_layers(ours).values()),
        "max_abs_diff": max(diff_ref, diff_fast),
        "max_abs_diff_reference_kernels": diff_ref,
        "max_abs_diff_fast_kernels": diff_fast,
        "max_abs_logit": peft_logits.abs().max().item(),
        "adapter_effect": (peft_logits - plain).abs().max().item(),
    }


def save_base(quick: bool, directory: str) -> dict:
    """The SmolLM2-135M-shaped Llama (``benchmarks.memory_models``' "smollm2": ``benchmarks.decode_llama``'s random
    weights of a fixed seed; ``quick``: its tiny twin) saved by ``save_pretrained`` into ``directory``; its shape."""
    from benchmarks.memory_models import _hf_model, sizes

    s = sizes("smollm2", quick)
    model, _ = _hf_model("smollm2", s)
    model.save_pretrained(directory)
    return {"path": directory, "params": sum(p.numel() for p in model.parameters()), "shape": s}
