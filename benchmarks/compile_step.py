"""What ``--compile`` does to a training step on the CPU, in one process.

    python -m benchmarks.compile_step                          # the 30-minute character LM recipe, ~4 minutes
    python -m benchmarks.compile_step --precision fp32         # as the avx2 class trains it
    python -m benchmarks.compile_step --quick                  # tiny sizes, seconds: proves the script works

``tformer train ... --compile`` runs the model's forward through ``torch.compile`` (the Trainer's
``torch.compile(model)``). Per recipe of ``tformer.lm.RECIPES`` (its layers, width, context and batch; a 68-character
vocabulary, random ids), each candidate is its own copy of one model, with the CPU fast paths of
``tformer.fast.speed_up`` as the Trainer applies them, timed alternately: ``--steps`` AdamW steps a call (forward
under bfloat16 autocast or in float32, cross-entropy, backward, clipping, optimizer step):

* ``eager`` — the anchor: the step as ``tformer train lm`` runs it without ``--compile``;
* ``compiled`` — the same model compiled;
* ``eager, no dropout`` and ``compiled, no dropout`` — the same with the model's dropout 0: what the compiler does
  with the rest of the step (a compiled graph draws its dropout masks with the compiler's own random numbers and
  leaves tformer's CPU kernels for its own).

The warmup rounds hold the compilation (``--warmup``, at least 1 unless ``--quick``). Throughput is trained tokens per
second. Writes ``OUT/compile_step.json`` and ``OUT/compile_step.md``.
"""

from __future__ import annotations

import copy

import torch

from benchmarks.attention_precision import _candidate, _model
from benchmarks.common import base_parser, compare, machine_info, session, write_report


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "compile_step.json", "compile_step.md")
    p.add_argument("--recipes", nargs="+", default=["shakespeare-char-30min"], help="tformer.lm recipes timed")
    p.add_argument("--steps", type=int, default=10, help="training steps per timed call")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="bf16 autocast or float32")
    args = p.parse_args(argv)
    from tformer.lm import RECIPES

    for name in args.recipes:
        if name not in RECIPES:
            p.error(f"--recipes takes names of {sorted(RECIPES)}, got {name!r}")
    steps = 1 if args.quick else args.steps
    autocast = args.precision == "bf16"
    results = {}
    with session(args):
        if not args.quick:
            args.warmup = max(args.warmup, 1)  # the first call compiles
        for name in args.recipes:
            candidates = []
            for label, fields in (("", {}), (", no dropout", {"dropout": 0.0})):
                torch.manual_seed(args.seed)
                base, b, t = _model(name, args.quick, **fields)
                compiled = torch.compile(copy.deepcopy(base))
                candidates.append(_candidate(f"eager{label}", base, autocast, b, t, steps, args.seed))
                candidates.append(_candidate(f"compiled{label}", compiled, autocast, b, t, steps, args.seed))
            results[name] = compare(
                candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory, anchor="eager"
            )
        machine = machine_info(args, None)
    payload = {
        "benchmark": "compile_step",
        "description": f"Training tokens/s on the CPU, eager and torch.compile ({args.precision}, {steps} steps a call)",
        "machine": machine,
        "config": {"recipes": args.recipes, "precision": args.precision, "steps_per_call": steps},
        "results": results,
    }
    return write_report(args.out, "compile_step", payload, "tokens/s")


if __name__ == "__main__":
    main()
