"""Flags shared by several subcommands: the training flags (one per :class:`TrainConfig` field) and the
translation model flags of ``translate`` and ``evaluate``."""

from __future__ import annotations

import argparse

from tformer.cli.validate import (
    Number,
    beam_size,
    device,
    existing_dir,
    length_penalty,
    non_negative_float,
    non_negative_int,
    output_dir,
    positive_float,
    positive_int,
    seed,
)

__all__ = ["add_fast_flag", "add_overwrite_flag", "add_training_flags", "train_options", "add_translation_flags"]


def add_fast_flag(p) -> None:
    """``--no-fast``: run the plain reference code of :mod:`tformer.nn` (``tformer.fast.reference()``)."""
    p.add_argument(
        "--no-fast",
        action="store_true",
        help="no CPU fast paths (tformer.fast): the plain reference code, same numbers to float rounding",
    )


def add_overwrite_flag(p, flag: str) -> None:
    """``--overwrite`` for a command that writes the file named by ``flag`` (checked by
    :func:`tformer.files.check_output`, which refuses an existing file without it)."""
    p.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace the file {flag} names if it exists (a symbolic link, one of this command's inputs, or a "
        "place inside a model or run directory is refused even so)",
    )


def add_training_flags(p: argparse.ArgumentParser, lr: float, warmup: int, schedule: str) -> None:
    """Flags shared by every family; each maps onto a TrainConfig field."""
    g = p.add_argument_group("training (TrainConfig)")
    g.add_argument("--out", required=True, type=output_dir, help="run directory (best model, last state, log, curves)")
    g.add_argument("--lr", type=positive_float, default=lr)
    g.add_argument("--schedule", choices=["inverse_sqrt", "cosine", "constant"], default=schedule)
    g.add_argument("--warmup-steps", type=non_negative_int, default=warmup)
    g.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    g.add_argument("--clip", type=non_negative_float, default=1.0, help="max gradient norm (0 = off)")
    g.add_argument("--accum-steps", type=positive_int, default=1, help="gradient accumulation")
    g.add_argument("--epochs", type=positive_int, help="epochs in all (a resumed run counts the ones it trained)")
    g.add_argument("--max-steps", type=positive_int, help="optimizer steps in all (a resumed run counts its steps)")
    g.add_argument("--minutes", type=positive_float, help="training time budget in all (a resumed run counts its time)")
    g.add_argument("--eval-every", type=positive_int, help="optimizer steps between evaluations (default: every epoch)")
    g.add_argument("--log-every", type=positive_int, default=10)
    g.add_argument("--seed", type=seed, default=0)
    g.add_argument("--bf16", action="store_true", help="bfloat16 autocast (for GPUs; slow on most CPUs)")
    g.add_argument("--device", type=device, default="cpu")
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue exactly from OUT/last; a changed model, data or optimizer flag is refused, the budget, "
        "evaluation, logging and device flags may change",
    )
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run in a non-empty --out, deleting the run there, and only what a run wrote: a folder "
        "with other files is refused (without --overwrite or --resume, a non-empty --out is refused)",
    )
    g.add_argument(
        "--max-bad-steps",
        type=positive_int,
        default=5,
        help="stop when this many steps in a row have a non-finite loss or gradient norm (each is skipped)",
    )
    g.add_argument("--no-progress", action="store_true")
    add_fast_flag(g)


def train_options(args) -> dict:
    """The TrainConfig fields given by the training flags (all but ``out_dir``), plus ``resume``."""
    return dict(
        lr=args.lr,
        schedule=args.schedule,
        warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay,
        clip=args.clip,
        accum_steps=args.accum_steps,
        epochs=args.epochs,
        max_steps=args.max_steps,
        minutes=args.minutes,
        eval_every=args.eval_every,
        log_every=args.log_every,
        seed=args.seed,
        bf16=args.bf16,
        device=args.device,
        progress=not args.no_progress,
        fast=not args.no_fast,
        resume=args.resume,
        overwrite=args.overwrite,
        max_bad_steps=args.max_bad_steps,
    )


def add_translation_flags(p) -> None:
    """The model and decoding flags of ``tformer translate`` and ``tformer evaluate``."""
    p.add_argument(
        "--model",
        required=True,
        type=existing_dir,
        help="a translator: a tformer train translation / demo run or model directory, or a Marian one from tformer export",
    )
    add_fast_flag(p)
    p.add_argument("--beam", type=beam_size, default=1, help="beam size (1 = greedy; at most the target vocabulary)")
    p.add_argument("--length-penalty", type=length_penalty, default=1.0, help="beam search: score / length ** this")
    p.add_argument(
        "--max-len",
        type=Number(int, 1, 1_000_000),
        default=128,
        help="longest translation in tokens (the model's own max_len caps it)",
    )
    p.add_argument("--batch-size", type=Number(int, 1, 100_000), default=64)
    p.add_argument("--device", type=device, default="cpu")
