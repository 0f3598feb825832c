"""What the Tiny Shakespeare recipes' CPU choices buy: one training step, four ways, in one process.

    python -m benchmarks.lm_step                                   # the 1.5-minute recipe's shape
    python -m benchmarks.lm_step --recipe shakespeare-char-6min --repeats 11
    python -m benchmarks.lm_step --quick                            # tiny sizes, seconds: proves the script works

The model is the recipe's (``tformer.lm.RECIPES``: layers, width, context, batch) on a
68-character vocabulary, random ids. One call = ``--steps`` AdamW steps (forward, cross-entropy,
backward, gradient clipping, optimizer step). Candidates, each its own model with the same initial
weights:

* ``gelu_tanh, AdamW loop`` — GPT-2's tanh-approximated GELU and PyTorch's CPU default AdamW, which
  updates the parameters one by one from Python (the anchor; it decays every tensor, the Trainer only
  matrices: a few small vectors' worth of extra work);
* ``gelu_tanh, fused AdamW`` — the optimizer :class:`tformer.training.trainer.Trainer` builds;
* ``gelu, fused AdamW`` — and the exact (erf) GELU that nanoGPT uses: the recipes now;
* ``gelu, fused AdamW, rotary positions`` (or ``learned positions`` for a recipe that has rotary ones) —
  the same with the other kind of positions: what RoPE costs a step;
* ``gelu, fused AdamW, table padded to 128 rows`` — the recipe's model as ``tformer train lm`` now builds it, its
  token table and head padded to a multiple of 64 rows (``--pad-vocab 64``, the default; the logits cut back to the
  68 characters): what the padding costs a small vocabulary on the CPU.

Throughput is trained tokens per second. Writes ``OUT/lm_step.json`` and ``OUT/lm_step.md``.
"""

from __future__ import annotations

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report

VOCAB, PAD = 68, 1  # Tiny Shakespeare's characters after the three special tokens; <pad> = 1


def _shape(recipe_name: str, quick: bool) -> dict:
    from tformer.lm import RECIPES

    if recipe_name not in RECIPES:
        raise ValueError(f"--recipe must be one of {sorted(RECIPES)}, got {recipe_name!r}")
    recipe = RECIPES[recipe_name]
    model = {k: v for k, v in recipe["model"].items() if k != "activation"}
    shape = dict(model=model, block_size=recipe["max_len"], batch_size=recipe["batch_size"])
    if quick:
        shape = dict(
            model=dict(
                d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, positional=model.get("positional", "learned")
            ),
            block_size=16,
            batch_size=2,
        )
    return shape


def _candidate(name: str, activation: str, fused: bool, shape: dict, steps: int, seed: int, **model) -> Candidate:
    from tformer.fast import sequence_cross_entropy, speed_up
    from tformer.models.gpt import GPT, GPTConfig
    from tformer.training.trainer import TrainConfig, make_optimizer

    t, b = shape["block_size"], shape["batch_size"]
    config = GPTConfig.preset(
        "tiny", vocab_size=VOCAB, pad_id=PAD, max_len=t, activation=activation, **{**shape["model"], **model}
    )
    torch.manual_seed(seed)
    model = speed_up(GPT(config).train())  # the CPU fast paths, as the Trainer applies them
    if fused:
        optimizer = make_optimizer(model, TrainConfig(out_dir="-", lr=1e-3, max_steps=1))
        assert optimizer.defaults["fused"], "the Trainer's optimizer is the fused one"
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01, foreach=False)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(3, VOCAB, (b, t + 1), generator=generator)  # (B, T+1)

    def run() -> float:
        for _ in range(steps):
            logits = model(rows[:, :-1])  # (B, T, V)
            loss = sequence_cross_entropy(logits, rows[:, 1:], ignore_index=PAD, reduction="sum") / (b * t)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return steps * b * t

    params = sum(p.numel() for p in model.parameters())
    return Candidate(name, run, extra={"parameters": params, "activation": activation, "fused_adamw": fused})


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "lm_step.json", "lm_step.md")
    p.add_argument("--recipe", default="shakespeare-char", help="the tformer train lm recipe whose shape is timed")
    p.add_argument("--steps", type=int, default=10, help="training steps per timed call")
    args = p.parse_args(argv)
    shape = _shape(args.recipe, args.quick)
    steps = 1 if args.quick else args.steps
    with session(args):
        candidates = [
            _candidate("gelu_tanh, AdamW loop", "gelu_tanh", False, shape, steps, args.seed),
            _candidate("gelu_tanh, fused AdamW", "gelu_tanh", True, shape, steps, args.seed),
            _candidate("gelu, fused AdamW", "gelu", True, shape, steps, args.seed),
        ]
        # the other kind of positions (rotary <-> GPT-2's learned table): what RoPE costs a step
        other = "learned" if shape["model"].get("positional") == "rope" else "rope"
        candidates.append(
            _candidate(
                f"gelu, fused AdamW, {'learned' if other == 'learned' else 'rotary'} positions",
                "gelu",
                True,
                shape,
                steps,
                args.seed,
                positional=other,
            )
        )
        candidates.append(
            _candidate(
                "gelu, fused AdamW, table padded to 128 rows", "gelu", True, shape, steps, args.seed, vocab_multiple=64
            )
        )
        stats = compare(candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory)
        machine = machine_info(args, None)
    payload = {
        "benchmark": "lm_step",
        "description": f"Training tokens/s, recipe {args.recipe} ({steps} steps per call)",
        "machine": machine,
        "config": {"recipe": args.recipe, **shape, "steps_per_call": steps},
        "results": {args.recipe: stats},
    }
    return write_report(args.out, "lm_step", payload, "tokens/s")


if __name__ == "__main__":
    main()
