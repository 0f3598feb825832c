"""LoRA against full fine-tuning of a SmolLM2-135M-shaped Llama on the CPU, in tformer and in ``transformers`` +
``peft``: peak resident memory and step time of each, and tformer's adapter read by PEFT (issue 46's goal: LoRA's
peak ≤ 1.3× the float32 weights + the activations of the batch, its step ≤ 0.7× full fine-tuning's, the adapter's
logits equal to PEFT's to 1e-5).

    python -m benchmarks.finetune            # the 135M-parameter model, batch 4 × 128: about 3 to 6 minutes on 2 cores
    python -m benchmarks.finetune --quick    # its tiny twin, batch 2 × 16, one thread: proves the script works

The model: ``benchmarks.memory_models``' "smollm2" (``benchmarks.decode_llama``'s ``LlamaForCausalLM``: 30 × 576,
9 query and 3 key/value heads, SwiGLU 1536, a 49,152-token table tied to its head; random weights of a fixed seed),
made once and saved by ``save_pretrained`` into a temporary directory that every configuration loads; ``--quick``:
its tiny twin (2 × 64, vocabulary 256). Float32 throughout, one fixed batch of random ids and its next-token labels.

Four configurations, each in a fresh process (:mod:`benchmarks.finetune_child`; memory read as
:mod:`benchmarks.memory_child` reads it), each stepping with ``tformer.training.config.make_optimizer`` (the
Trainer's AdamW, fused, weight decay on the matrices) over its trainable parameters only; a step is zero_grad,
forward, loss, backward, AdamW step (no gradient clipping):

* ``tformer full``: ``tformer.load(dir, fast=False)``, then ``tformer.fast.speed_up`` (the Trainer's kernels), every
  parameter trainable, loss ``tformer.fast.sequence_cross_entropy(model(x), y)``.
* ``tformer LoRA``: the same load, ``add_lora`` with r 8, alpha 16, dropout 0.05 on ``attn.*`` (W_Q, W_K, W_V each
  its own pair, as ``fused_qkv`` says of a Llama; W_O), then ``speed_up`` (``start_from``, ``add_adapters``, the
  Trainer: that order).
* ``HF full``: ``AutoModelForCausalLM.from_pretrained(dir, dtype=float32)``, its own loss (``labels=x``, shifted
  inside).
* ``HF + PEFT LoRA``: the same, ``peft.get_peft_model`` with r 8, lora_alpha 16, lora_dropout 0.05 on q_proj,
  k_proj, v_proj, o_proj.

In each process: the configuration built on the tiny twin and stepped twice, then let go (code and libraries loaded on
first use are in the baseline); ``gc`` + ``malloc_trim``: the baseline (VmRSS). Then the model built (``before``),
the peak (VmHWM) reset, ``--warmup`` untimed steps (at least one; the first makes AdamW's moments) and ``--repeats``
timed steps (``--quick``: 1 and 2). Figures, MB above the baseline:

* **peak**: the peak resident set during all the steps, the first included; **first step's peak**: the peak by the
  end of the first step; **resident after**: after the steps, ``gc`` and ``malloc_trim`` (weights, gradients, moments).
* **step time**: the median and the min of the timed steps, and the first step's time apart.
* **weights**: the configuration's parameters in bytes, each tensor once (the tied table once; LoRA's pairs
  included); **trainable**: the parameters the optimizer steps.

**Activations** (a fifth fresh process, tformer): the same model and kernels with every parameter frozen and the
token embedding's output made to require grad (a forward hook), then forward + loss + backward of the same batch,
``--warmup`` + ``--repeats`` times; the figure is the peak resident set during them above the resident set just before
them (the model loaded). That is what autograd keeps for the backward through every layer and the head (the logits,
the loss's saved log-softmax), and the backward's transient gradients of activations, but no gradient of a
parameter and no optimizer state: a lower bound of what any fine-tuning of this batch holds beside its weights.

Ratios: tformer LoRA ÷ tformer full (median step time, peak), tformer LoRA ÷ PEFT LoRA, tformer full ÷ HF full; each
peak ÷ its weights; and the goal's **LoRA peak ÷ (weights + activations)**, weights there being the base model's
float32 parameters (no pairs). The adapter check (one more fresh process): tformer's model with LoRA pairs on attn.*
(A as initialised, B drawn nonzero, seeded), ``tformer.hf.peft.save_adapter``, then
``peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)``; the max absolute difference
of the logits of a fixed batch (eval mode), with tformer's reference kernels and with ``speed_up``'s, beside the
largest logit and the largest change the adapter makes to PEFT's logits (so a small difference is not a trivial one).

Goals: judged from a full run; ``--quick`` (a tiny model, where fixed costs dominate) judges the adapter check only.
Without ``peft`` the two PEFT measurements say so. Writes ``OUT/finetune.json`` and ``OUT/finetune.md`` with the
machine (CPU, ISA class) and the commit measured.
"""

from __future__ import annotations

import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.memory import _ratio, commit, write  # noqa: E402

MB = 2**20
PRELOAD = ["benchmarks.finetune_child"]  # what the forkserver imports once: torch, tformer, transformers, peft
NAMES = {
    "tformer_full": "tformer full",
    "tformer_lora": "tformer LoRA",
    "hf_full": "HF full",
    "hf_lora": "HF + PEFT LoRA",
    "activations": "activations probe (tformer, nothing trains)",
}
TARGETS = {"peak": 1.3, "step": 0.7, "logits": 1e-5}  # issue 46


def attempt(fn, *args) -> dict:
    """``fn(*args)`` in a process of its own, forked from a server that has imported :mod:`benchmarks.finetune_child`
    (and run nothing else); ``{"error": ...}`` where it fails: one failed measurement is a cell, not the end."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    try:
        with ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
            return pool.submit(fn, *args).result()
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {str(err)[-600:]}"}


def _ok(r: dict | None) -> bool:
    return r is not None and "error" not in r and "skipped" not in r


def _get(r: dict | None, key: str):
    return r[key] if _ok(r) else None


def summarize(rows: dict) -> dict:
    """The ratios of the module docstring from the measurements ``rows`` (None where one is missing)."""
    full, lora, hf, peft, probe = (
        rows.get(k) for k in ("tformer_full", "tformer_lora", "hf_full", "hf_lora", "activations")
    )
    base = _get(probe, "weights_bytes") or _get(full, "weights_bytes")  # the base model's parameters, no pairs
    weights = None if base is None else base / MB
    activations = _get(probe, "peak_above_before_mb")
    both = None if weights is None or activations is None else weights + activations

    def x_weights(r):
        return _ratio(_get(r, "peak_mb"), None if not _ok(r) else r["weights_bytes"] / MB)

    return {
        "weights_mb": weights,
        "activations_mb": activations,
        "lora_over_full_step": _ratio(_get(lora, "step_s_median"), _get(full, "step_s_median")),
        "lora_over_full_peak": _ratio(_get(lora, "peak_mb"), _get(full, "peak_mb")),
        "lora_over_peft_step": _ratio(_get(lora, "step_s_median"), _get(peft, "step_s_median")),
        "lora_over_peft_peak": _ratio(_get(lora, "peak_mb"), _get(peft, "peak_mb")),
        "full_over_hf_full_step": _ratio(_get(full, "step_s_median"), _get(hf, "step_s_median")),
        "full_over_hf_full_peak": _ratio(_get(full, "peak_mb"), _get(hf, "peak_mb")),
        "peft_over_hf_full_step": _ratio(_get(peft, "step_s_median"), _get(hf, "step_s_median")),
        "lora_peak_x_weights": x_weights(lora),
        "full_peak_x_weights": x_weights(full),
        "peft_peak_x_weights": x_weights(peft),
        "hf_full_peak_x_weights": x_weights(hf),
        "lora_peak_x_weights_plus_activations": _ratio(_get(lora, "peak_mb"), both),
        "full_peak_x_weights_plus_activations": _ratio(_get(full, "peak_mb"), both),
        "peft_peak_x_weights_plus_activations": _ratio(_get(peft, "peak_mb"), both),
    }


def goals(summary: dict, check: dict, quick: bool) -> list[dict]:
    """Issue 46's LoRA goal in three parts (``met`` None: not measured, or a size-dependent figure under --quick)."""
    peak, step = summary["lora_peak_x_weights_plus_activations"], summary["lora_over_full_step"]
    rows = [
        ("tformer LoRA peak ÷ (float32 weights + activations)", peak, TARGETS["peak"], not quick),
        ("tformer LoRA step time ÷ tformer full fine-tuning's", step, TARGETS["step"], not quick),
        ("adapter logits vs PEFT's, max abs difference", _get(check, "max_abs_diff"), TARGETS["logits"], True),
    ]
    return [
        {"goal": g, "value": v, "target": t, "met": None if v is None or not judged else v <= t}
        for g, v, t, judged in rows
    ]


def _f(x, spec: str = ",.1f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(payload: dict) -> str:
    rows, s, check, c = payload["results"], payload["summary"], payload["adapter_check"], payload["config"]
    out = [
        f"## Fine-tuning steps, float32, batch {c['batch']} × {c['seq']}, {c['threads']} torch thread(s), "
        f"{c['warmup']} untimed + {c['repeats']} timed steps: MB above the baseline (× the configuration's weights)\n",
        "| configuration | trainable params | weights MB | peak | first step's peak | resident after | "
        "step s: median | min | first step s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in rows.items():
        if not _ok(r):
            shown = "error (below)" if "error" in r else f"skipped: {r.get('skipped')}"
            out.append(f"| {NAMES[kind]} | {shown} | | | | | | | |")
            continue
        w = r["weights_bytes"] / MB
        out.append(
            f"| {NAMES[kind]} | {r['trainable_params']:,} | {w:,.1f} | {r['peak_mb']:,.1f} ({r['peak_mb'] / w:.2f}×) | "
            f"{r['first_step_peak_mb']:,.1f} | {r['after_steps_mb']:,.1f} | {r['step_s_median']:.3f} | "
            f"{r['step_s_min']:.3f} | {r['first_step_s']:.3f} |"
        )
    ratios = [
        ("activations MB (probe's peak above its resident set before it)", s["activations_mb"], ",.1f"),
        ("float32 weights MB (base model)", s["weights_mb"], ",.1f"),
        ("tformer LoRA ÷ tformer full: step time", s["lora_over_full_step"], ".2f"),
        ("tformer LoRA ÷ tformer full: peak", s["lora_over_full_peak"], ".2f"),
        ("tformer LoRA ÷ PEFT LoRA: step time", s["lora_over_peft_step"], ".2f"),
        ("tformer LoRA ÷ PEFT LoRA: peak", s["lora_over_peft_peak"], ".2f"),
        ("tformer full ÷ HF full: step time", s["full_over_hf_full_step"], ".2f"),
        ("tformer full ÷ HF full: peak", s["full_over_hf_full_peak"], ".2f"),
        ("tformer LoRA peak ÷ weights", s["lora_peak_x_weights"], ".2f"),
        ("tformer full peak ÷ weights", s["full_peak_x_weights"], ".2f"),
        ("PEFT LoRA peak ÷ weights", s["peft_peak_x_weights"], ".2f"),
        ("tformer LoRA peak ÷ (weights + activations)", s["lora_peak_x_weights_plus_activations"], ".2f"),
        ("tformer full peak ÷ (weights + activations)", s["full_peak_x_weights_plus_activations"], ".2f"),
        ("PEFT LoRA peak ÷ (weights + activations)", s["peft_peak_x_weights_plus_activations"], ".2f"),
    ]
    out += ["\n## Ratios\n", "| figure | value |", "|---|---:|"]
    out += [f"| {name} | {_f(v, spec)} |" for name, v, spec in ratios]
    out.append("\n## Adapter check: tformer's save_adapter read by peft.PeftModel.from_pretrained\n")
    if _ok(check):
        out.append(
            f"Batch {check['batch']}, {check['pairs']} LoRA pairs, eval mode: max |logit difference| "
            f"{check['max_abs_diff']:.2e} (reference kernels {check['max_abs_diff_reference_kernels']:.2e}, "
            f"speed_up's {check['max_abs_diff_fast_kernels']:.2e}); largest |logit| {check['max_abs_logit']:.3f}, "
            f"largest change the adapter makes {check['adapter_effect']:.3f}."
        )
    else:
        out.append(check.get("error") or check.get("skipped"))
    out += ["\n## Goals (issue 46)\n", "| goal | value | target | met |", "|---|---:|---:|---|"]
    for g in payload["goals"]:
        met = "yes" if g["met"] else "no" if g["met"] is not None else "not judged (--quick)"
        if g["value"] is None:
            met = "not measured"
        out.append(f"| {g['goal']} | {_f(g['value'], '.3g')} | ≤ {g['target']:g} | {met} |")
    errors = [f"- {NAMES[k]}: {r['error']}" for k, r in rows.items() if "error" in r]
    errors += [f"- adapter check: {check['error']}"] if "error" in check else []
    return "\n".join(out + (["\n## Errors\n", *errors] if errors else []))


def main(argv=None) -> dict:
    import torch

    from benchmarks import finetune_child as child
    from benchmarks.common import base_parser, machine_info

    p = base_parser(__doc__, "runs/bench", "finetune.json", "finetune.md")
    args = p.parse_args(argv)
    if args.device != "cpu":
        p.error("benchmarks.finetune measures the CPU (--device cpu)")
    warmup, repeats = (1, 2) if args.quick else (max(args.warmup, 1), args.repeats)
    threads = args.threads or (1 if args.quick else torch.get_num_threads())
    args.warmup, args.repeats = warmup, repeats  # what machine_info records
    measured = commit()  # before the run: others may commit while it runs
    rows: dict = {}
    check: dict = {}
    with tempfile.TemporaryDirectory(prefix="tformer-finetune-") as tmp:
        saved = attempt(child.save_base, args.quick, os.path.join(tmp, "base"))
        twin = saved if args.quick or "error" in saved else attempt(child.save_base, True, os.path.join(tmp, "twin"))
        if "error" in saved or "error" in twin:
            raise SystemExit(f"benchmarks.finetune: the model could not be made: {saved.get('error') or twin['error']}")
        s, t = saved["shape"], twin["shape"]
        sizes = dict(vocab=s["vocab"], batch=s["train_batch"], seq=s["train_len"])
        twin_sizes = dict(vocab=t["vocab"], batch=t["train_batch"], seq=t["train_len"])
        spec = dict(path=saved["path"], twin=twin["path"], sizes=sizes, twin_sizes=twin_sizes, threads=threads)
        spec |= dict(warmup=warmup, repeats=repeats)
        for kind in child.KINDS:
            rows[kind] = r = attempt(child.measure, dict(spec, kind=kind))
            shown = r.get("error") or r.get("skipped")
            if shown is None:
                shown = f"peak {r['peak_mb']:,.1f} MB, step {r['step_s_median']:.3f} s (median of {repeats})"
            print(f"{NAMES[kind]}: {shown}", file=sys.stderr)
        check_spec = dict(path=saved["path"], vocab=s["vocab"], batch=2, seq=min(64, s["train_len"]), threads=threads)
        check = attempt(child.adapter_check, check_spec)
    summary = summarize(rows)
    payload = {
        "benchmark": "finetune",
        "description": (
            "LoRA (r 8, alpha 16, dropout 0.05, attention projections) against full fine-tuning with AdamW of a "
            "SmolLM2-135M-shaped Llama (random weights), float32 on the CPU, tformer and transformers + peft, each in a "
            "fresh process: peak resident MB above the baseline during the steps and step time; the activations "
            "probe; tformer's adapter read by PEFT"
        ),
        "machine": machine_info(args, None),
        "measured": measured,
        "config": {
            "quick": args.quick,
            "model": {k: s[k] for k in ("vocab", "d", "heads", "kv_heads", "ff", "layers")},
            "params": saved["params"],
            "batch": sizes["batch"],
            "seq": sizes["seq"],
            "threads": threads,
            "warmup": warmup,
            "repeats": repeats,
            "lora": dict(child.LORA, targets_tformer=["attn.*"], targets_peft=child.HF_TARGETS),
            "optimizer": "tformer.training.config.make_optimizer (fused AdamW, TrainConfig defaults)",
        },
        "results": rows,
        "summary": summary,
        "adapter_check": check,
    }
    payload["goals"] = goals(summary, check, args.quick)
    return write(payload, args, "finetune", markdown(payload))


if __name__ == "__main__":
    main()
