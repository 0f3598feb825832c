"""A large-vocabulary language model's training step with its logits whole and a chunk at a time (issue 48).

    python -m benchmarks.chunked_loss                 # GPT-2's 50,257 words, 4 × 512 positions, 2 layers × 768
    python -m benchmarks.chunked_loss --quick         # tiny sizes, seconds: proves the script works

One call = ``--steps`` AdamW steps (forward, loss, backward, fused AdamW step) under bf16 autocast (``--fp32``:
float32) of a GPT-2-shaped model whose body is cut to ``--layers`` layers (the head, 38.6 M of GPT-2's 124 M weights,
is what the chunked loss changes). Candidates, in one process, alternating:

* ``Hugging Face GPT2LMHeadModel`` — the anchor: ``model(ids, labels=labels).loss`` (its logits whole, its loss
  ``F.cross_entropy`` on them in float32);
* ``tformer, whole logits`` — ``GPT`` then ``tformer.fast.sequence_cross_entropy`` on the (B, T, V) logits, what the
  language model's training loss was;
* ``tformer, chunked`` — ``GPT(..., head=False)`` then ``tformer.fast.chunked_loss.linear_cross_entropy``: what
  ``tformer train lm`` runs once a batch's logits pass ``LOGITS_AT_ONCE`` (``chunk_rows``);
* ``tformer, chunked, head padded`` — the same with the table and head padded to a multiple of 64 rows (50,304:
  ``GPTConfig.vocab_multiple``, ``tformer train lm``'s default ``--pad-vocab 64``), the padding rows' logits left out.

Tokens/s and each candidate's peak tensor memory during one call (``benchmarks.common.peak_memory_mb``: the
profiler's allocations beyond what was live). Writes ``OUT/chunked_loss.json`` and ``OUT/chunked_loss.md``.
"""

from __future__ import annotations

import contextlib

import torch

from benchmarks.common import Candidate, base_parser, compare, machine_info, session, write_report

GPT2 = dict(vocab=50_257, d_model=768, heads=12, d_ff=3072)


def _shape(args) -> dict:
    if args.quick:
        return dict(vocab=3000, d_model=32, heads=4, d_ff=64, layers=1, batch=2, length=16)
    return dict(GPT2, layers=args.layers, batch=args.batch, length=args.length)


def _models(shape: dict, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    from tformer.fast import speed_up
    from tformer.hf import from_hf

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=shape["vocab"],
        n_positions=shape["length"] + 1,
        n_embd=shape["d_model"],
        n_layer=shape["layers"],
        n_head=shape["heads"],
        n_inner=shape["d_ff"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = GPT2LMHeadModel(config).train()
    return hf, speed_up(from_hf(hf).train())  # the same weights, tformer's training kernels


def _padded(model, seed: int):
    """``model`` (a tformer GPT) with its table and head padded to a multiple of 64 rows: the same words' weights,
    the padding rows drawn as the rest were (GPT-2's N(0, 0.02))."""
    from tformer.fast import speed_up
    from tformer.models.gpt import GPT

    padded = GPT(model.config.replace(vocab_multiple=64))
    state = model.state_dict()
    extra = padded.config.table_rows - model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    for key in GPT.word_tables:
        if key in state:
            state[key] = torch.cat([state[key], 0.02 * torch.randn(extra, state[key].shape[1], generator=g)])
    padded.load_state_dict(state)
    return speed_up(padded.train())


def _candidate(name: str, model, loss_of, rows: torch.Tensor, steps: int, fp32: bool) -> Candidate:
    from tformer.training.trainer import TrainConfig, make_optimizer

    optimizer = make_optimizer(model, TrainConfig(out_dir="-", lr=1e-4, max_steps=1))
    tokens = rows.shape[0] * (rows.shape[1] - 1)

    def run() -> float:
        for _ in range(steps):
            autocast = torch.autocast("cpu", torch.bfloat16) if not fp32 else contextlib.nullcontext()
            with autocast:
                loss = loss_of(rows) / tokens
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return steps * tokens

    return Candidate(name, run)


def main(argv=None) -> dict:
    p = base_parser(__doc__, "runs/bench", "chunked_loss.json", "chunked_loss.md")
    p.add_argument("--layers", type=int, default=2, help="GPT-2's blocks kept (its head and vocabulary are whole)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--steps", type=int, default=1, help="training steps per timed call")
    p.add_argument("--fp32", action="store_true", help="float32 throughout (default: bf16 autocast)")
    args = p.parse_args(argv)
    from tformer.fast import sequence_cross_entropy
    from tformer.fast.chunked_loss import chunk_rows, linear_cross_entropy

    shape = _shape(args)
    with session(args):
        g = torch.Generator().manual_seed(args.seed)
        rows = torch.randint(0, shape["vocab"], (shape["batch"], shape["length"] + 1), generator=g)  # (B, T + 1)
        n = shape["batch"] * shape["length"]
        chunk = chunk_rows(n, shape["vocab"]) or max(n // 4, 1)  # (--quick's logits are small: 4 chunks)
        hf, _ = _models(shape, args.seed)  # each candidate its own copy of the same weights
        _, whole_model = _models(shape, args.seed)
        _, chunked_model = _models(shape, args.seed)
        padded_model = _padded(chunked_model, args.seed)

        def hf_loss(r):  # HF shifts the labels itself: the T + 1 ids in, the last T scored (one position more)
            return hf(r, labels=r).loss * n

        def whole(r):
            return sequence_cross_entropy(whole_model(r[:, :-1]), r[:, 1:], reduction="sum")

        def chunked(r):
            hidden = chunked_model(r[:, :-1], head=False)  # (B, T, D)
            return linear_cross_entropy(hidden, chunked_model.output.weight, r[:, 1:], chunk)

        def padded(r):
            hidden = padded_model(r[:, :-1], head=False)  # (B, T, D)
            words = padded_model.config.vocab_size
            return linear_cross_entropy(hidden, padded_model.output.weight, r[:, 1:], chunk, classes=words)

        rows_padded = padded_model.config.table_rows
        candidates = [
            _candidate("Hugging Face GPT2LMHeadModel", hf, hf_loss, rows, args.steps, args.fp32),
            _candidate("tformer, whole logits", whole_model, whole, rows, args.steps, args.fp32),
            _candidate("tformer, chunked", chunked_model, chunked, rows, args.steps, args.fp32),
            _candidate(
                f"tformer, chunked, head padded ({rows_padded:,} rows)",
                padded_model,
                padded,
                rows,
                args.steps,
                args.fp32,
            ),
        ]
        stats = compare(candidates, args.repeats, args.warmup, args.device, memory=not args.no_memory)
        machine = machine_info(args, None)
    logits_mb = n * shape["vocab"] * 4 / 2**20
    payload = {
        "benchmark": "chunked_loss",
        "description": f"LM training step tokens/s, vocabulary {shape['vocab']:,}, {n:,} positions "
        f"({logits_mb:,.0f} MB of float32 logits whole; chunks of {chunk} rows)",
        "machine": machine,
        "config": {**shape, "steps_per_call": args.steps, "bf16": not args.fp32, "chunk_rows": chunk},
        "results": {"lm step": stats},
    }
    return write_report(args.out, "chunked_loss", payload, "tokens/s")


if __name__ == "__main__":
    main()
