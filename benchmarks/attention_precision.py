"""What attention in float32 buys a bfloat16 training step on the CPU, in one process.

    python -m benchmarks.attention_precision                   # the character LM recipes, ~3 minutes on 2 cores
    python -m benchmarks.attention_precision --quick           # tiny sizes, seconds: proves the script works

Under bfloat16 autocast the attention kernel gets bfloat16 Q, K and V. tformer's fast kernel
(:func:`tformer.fast.attention.attend`) then runs PyTorch's fused kernel in float32 while autograd records
(:func:`tformer.fast.attention.fused_in_float32`); the anchor is that same fused kernel as autocast alone gives it,
in bfloat16. Per recipe of ``tformer.lm.RECIPES`` (its layers, width, context and batch; a 68-character vocabulary,
random ids; no weight dropout in attention, as those recipes have), each candidate is its own copy of one model,
timed alternately, ``--steps`` AdamW steps a call (forward under autocast, cross-entropy, backward, clipping,
optimizer step), the CPU fast paths of ``tformer.fast.speed_up`` in every one:

* ``bf16 autocast, attention in bfloat16 (PyTorch's fused kernel)`` — the anchor;
* ``bf16 autocast, attention in float32`` — the model as ``tformer train lm`` builds it;
* ``float32`` — no autocast at all, for scale.

Then the attention alone (``--shapes``, B × H × T × Dh): one call = forward and backward of a causal self-attention
under bfloat16 autocast, PyTorch's fused kernel in bfloat16 (``bf16_attend``) against the same in float32
(``float32_attend``), whatever the size (the fast kernel casts up where keys x head dim is at most
``tformer.fast.attention.FLOAT32_MAX_KEY_ELEMENTS``, chosen from these rows); its throughput is query positions per
second.

Throughput is trained tokens per second. Writes ``OUT/attention_precision.json`` and ``OUT/attention_precision.md``.
"""

from __future__ import annotations

import copy

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report
from benchmarks.lm_step import PAD, VOCAB  # Tiny Shakespeare's 68 ids; <pad> = 1

RECIPES = ("shakespeare-char-6min", "shakespeare-char-30min")
SHAPES = ("32x4x32x32", "32x4x32x64", "16x4x128x32", "16x4x128x64", "8x4x256x32", "8x4x256x64", "4x4x512x32")
SHAPES += ("32x4x64x128", "16x4x128x128", "8x4x256x128")  # 128 dims a head: on each side of the limit


def bf16_attend(q, k, v, mask=None, causal=False, window=None, dropout_p=0.0, scale=None):
    """The fast kernel's shortcuts (its mask) with PyTorch's fused kernel in the inputs' own dtype: the anchor."""
    from tformer.fast.attention import fast_mask
    from tformer.nn.scaled_dot_product import scaled_dot_product_attention

    mask, is_causal = fast_mask(mask, causal, window, q, k)
    return scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=is_causal, scale=scale)


def float32_attend(q, k, v, mask=None, causal=False, window=None, dropout_p=0.0, scale=None):
    """The same in float32 whatever the size (tformer's kernel does this up to FLOAT32_MAX_KEY_ELEMENTS)."""
    with torch.autocast("cpu", enabled=False):
        return bf16_attend(q.float(), k.float(), v.float(), mask, causal, window, dropout_p, scale).to(q.dtype)


def _attention_candidate(name: str, kernel, shape: tuple[int, ...], calls: int, seed: int) -> Candidate:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g).bfloat16().requires_grad_() for _ in range(3))  # (B, H, T, Dh)
    grad = torch.randn(shape, generator=g).bfloat16()

    def run() -> float:
        for _ in range(calls):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = kernel(q, k, v, causal=True)  # (B, H, T, Dh)
            out.backward(grad)
        return calls * shape[0] * shape[2]

    return Candidate(name, run, extra={"shape": list(shape)})


def _model(recipe_name: str, quick: bool, **fields):
    """The recipe's model (``fields``: GPTConfig fields over it, as ``dropout=0.0``), the Trainer's CPU fast paths."""
    from tformer.fast import speed_up
    from tformer.lm import RECIPES as LM_RECIPES
    from tformer.models.gpt import GPT, GPTConfig

    recipe = LM_RECIPES[recipe_name]
    model, t, b = dict(recipe["model"]), recipe["max_len"], recipe["batch_size"]
    if quick:
        model.update(d_model=32, n_heads=4, n_layers=1, d_ff=64)
        t, b = 16, 2
    config = GPTConfig.preset("tiny", vocab_size=VOCAB, pad_id=PAD, max_len=t, vocab_multiple=64, **(model | fields))
    return speed_up(GPT(config).train()), b, t


def _candidate(name: str, model, autocast: bool, b: int, t: int, steps: int, seed: int) -> Candidate:
    from tformer.fast import sequence_cross_entropy
    from tformer.training.trainer import TrainConfig, make_optimizer

    optimizer = make_optimizer(model, TrainConfig(out_dir="-", lr=1e-3, max_steps=1))
    rows = torch.randint(3, VOCAB, (b, t + 1), generator=torch.Generator().manual_seed(seed))  # (B, T+1)

    def run() -> float:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(rows[:, :-1])  # (B, T, V)
            loss = sequence_cross_entropy(logits.float(), rows[:, 1:], ignore_index=PAD, reduction="sum") / (b * t)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return steps * b * t

    return Candidate(name, run, extra={"batch": b, "context": t})


def main(argv=None) -> dict:
    from tformer.fast.attention import attend
    from tformer.nn.attention import MultiHeadAttention

    p = base_parser(__doc__, "runs/bench", "attention_precision.json", "attention_precision.md")
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), help="tformer.lm recipes whose shape is timed")
    p.add_argument("--steps", type=int, default=10, help="training steps per timed call")
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), help="attention shapes BxHxTxDh timed alone")
    args = p.parse_args(argv)
    for text in args.shapes:
        if len(text.split("x")) != 4 or not all(n.isdigit() and int(n) > 0 for n in text.split("x")):
            p.error(f"--shapes takes B x H x T x Dh as four positive integers, like 16x4x128x32; got {text!r}")
    steps = 1 if args.quick else args.steps
    results, anchor = {}, "bf16 autocast, attention in bfloat16 (PyTorch's fused kernel)"
    with session(args):
        for name in args.recipes:
            torch.manual_seed(args.seed)
            base, b, t = _model(name, args.quick)
            in_bf16 = copy.deepcopy(base)
            for m in in_bf16.modules():
                if isinstance(m, MultiHeadAttention):
                    assert m.kernel is attend, "speed_up chose tformer's fast kernel"
                    m.kernel = bf16_attend
            candidates = [
                _candidate(anchor, in_bf16, True, b, t, steps, args.seed),
                _candidate("bf16 autocast, attention in float32", copy.deepcopy(base), True, b, t, steps, args.seed),
                _candidate("float32", copy.deepcopy(base), False, b, t, steps, args.seed),
            ]
            results[name] = compare(
                candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory, anchor=anchor
            )
        for text in ["2x2x8x8"] if args.quick else args.shapes:
            shape = tuple(int(n) for n in text.split("x"))  # (B, H, T, Dh)
            kernels = [
                ("bfloat16 (PyTorch's fused kernel)", bf16_attend),
                ("float32, cast up and back", float32_attend),
            ]
            calls = 1 if args.quick else 5
            candidates = [_attention_candidate(n, kernel, shape, calls, args.seed) for n, kernel in kernels]
            results[f"attention {text}, forward + backward"] = compare(
                candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory
            )
        machine = machine_info(args, None)
    payload = {
        "benchmark": "attention_precision",
        "description": (
            f"Training tokens/s of the character LM recipes under bf16 autocast ({steps} steps per call); "
            "for the attention alone, query positions/s of its forward and backward"
        ),
        "machine": machine,
        "config": {"recipes": args.recipes, "steps_per_call": steps, "attention_shapes": args.shapes},
        "results": results,
    }
    return write_report(args.out, "attention_precision", payload, "tokens/s")


if __name__ == "__main__":
    main()
