"""``tformer plot``: the pictures — attention heatmaps, the positional table, masks, training curves.

    tformer plot attention --toy --block decoder --kind cross --out cross.png
    tformer plot attention --model DIR "I am good." --layer 0 --head 1 --out attn.png
    tformer plot positional --max-len 100 --d-model 64 --out pe.png
    tformer plot mask --kind combined --tokens "<sos> Je vais bien <pad> <pad>" --out mask.png
    tformer plot curves runs/exp1 --out curves.png        # reads runs/exp1/log.jsonl (or: --model runs/exp1)

Every picture is a PNG drawn headless (matplotlib's Agg canvas).
"""

from __future__ import annotations

import sys

from tformer.cli.flags import add
from tformer.cli.trace import add_input_args
from tformer.cli.validate import existing_path, int_in, non_negative_int, output_file

_DEFAULT_TOKENS = "<sos> Je vais bien <pad> <pad>"


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="draw attention heatmaps, the positional encoding, masks, training curves")
    kinds = p.add_subparsers(dest="picture", metavar="PICTURE", required=True)

    a = kinds.add_parser("attention", help="attention weights of one layer: all heads, or --head")
    add_input_args(a)
    a.add_argument("--layer", type=non_negative_int, default=0, help="layer index inside the block")
    a.add_argument("--head", type=non_negative_int, help="one head (default: a grid of all heads)")
    a.add_argument(
        "--block", choices=["encoder", "decoder"], help="default: the decoder for seq2seq and GPT, the encoder for BERT"
    )
    a.add_argument("--kind", choices=["self", "cross"], help="default: cross for seq2seq, self otherwise")
    a.add_argument("--out", default="attention.png", type=output_file, help="PNG file to write")
    add(a, "--overwrite")
    a.set_defaults(func=run_attention)

    pe = kinds.add_parser("positional", help="the sinusoidal positional-encoding table")
    pe.add_argument("--max-len", type=int_in(1, 10_000), default=100, help="positions (rows)")
    pe.add_argument("--d-model", type=int_in(2, 10_000), default=64, help="dimensions (columns)")
    pe.add_argument("--out", default="positional.png", type=output_file, help="PNG file to write")
    add(pe, "--overwrite")
    pe.set_defaults(func=run_positional)

    m = kinds.add_parser("mask", help="a causal, padding or combined attention mask")
    m.add_argument("--kind", choices=["causal", "padding", "combined"], default="combined", help="which mask")
    m.add_argument(
        "--tokens",
        default=_DEFAULT_TOKENS,
        help="space-separated tokens; <pad> marks padding",
    )
    m.add_argument("--out", default="mask.png", type=output_file, help="PNG file to write")
    add(m, "--overwrite")
    m.set_defaults(func=run_mask)

    c = kinds.add_parser("curves", help="training curves from RUN_DIR/log.jsonl")
    run = c.add_mutually_exclusive_group(required=True)
    run.add_argument(
        "run",
        metavar="RUN_DIR",
        nargs="?",
        type=existing_path,
        help="a run directory holding log.jsonl, or the .jsonl file itself; or give it as --model RUN_DIR",
    )
    run.add_argument(
        "--model", metavar="RUN_DIR", type=existing_path, help="the same as RUN_DIR, as other commands take it"
    )
    c.add_argument("--out", default="curves.png", type=output_file, help="PNG file to write")
    add(c, "--overwrite")
    c.set_defaults(func=run_curves)


def _check_out(args, inputs=()) -> None:
    """Refuse an --out that would replace a file without --overwrite, or any of the command's inputs
    (:func:`tformer.outputs.check_output`), before anything is loaded or drawn."""
    from tformer.outputs import check_output

    check_output(args.out, "--out", inputs, args.overwrite)


def _done(path) -> int:
    print(f"wrote {path}")
    return 0


def run_attention(args) -> int:
    from tformer.cli.trace import build_trace, flag_words

    _check_out(args, [("--model", args.model)])
    tr = build_trace(args, own_target=True)
    block = args.block or ("encoder" if tr.model_type == "bert" else "decoder")
    kind = args.kind or ("cross" if tr.model_type == "seq2seq" and block == "decoder" else "self")
    layers = sorted({e.layer for e in tr.entries if e.stage == "weights" and e.block == block and e.kind == kind})
    if not layers:  # a block or kind this model lacks (a GPT's cross-attention, a BERT's decoder)
        there = sorted({f"--block {e.block} --kind {e.kind}" for e in tr.entries if e.stage == "weights"})
        raise ValueError(
            f"--block {block} --kind {kind}: a {tr.model_type} has no such attention; it has {', '.join(there)}"
        )
    if args.layer not in layers:  # said by the flags' names (the library names its parameters)
        raise ValueError(f"--layer must be one of {layers} for the {block}'s {kind} attention, got {args.layer}")
    try:
        tr.plot_attention(args.out, block=block, layer=args.layer, kind=kind, head=args.head)
    except ValueError as err:
        raise flag_words(err) from None
    return _done(args.out)


def run_positional(args) -> int:
    from tformer.inspection.plots import plot_positional_encoding

    _check_out(args)
    if args.d_model % 2:
        raise ValueError(f"--d-model must be even (sin and cos columns in pairs), got {args.d_model}")
    plot_positional_encoding(args.max_len, args.d_model, args.out)
    return _done(args.out)


def mask_for(kind: str, tokens: list[str]):
    """The (T, T) boolean mask of ``kind`` for ``tokens`` (``<pad>`` = padding), True = may attend."""
    import torch

    from tformer.nn.masks import causal_mask, combine_masks, padding_mask

    if not tokens:
        raise ValueError("--tokens must hold at least one token")
    ids = torch.tensor([[0 if t == "<pad>" else 1 for t in tokens]])  # (1, T), 0 = padding
    t = len(tokens)
    parts = {
        "causal": [causal_mask(t)],
        "padding": [padding_mask(ids, 0)],
        "combined": [causal_mask(t), padding_mask(ids, 0)],
    }[kind]
    mask = combine_masks(*parts)
    assert mask is not None  # at least one part
    return mask.expand(1, 1, t, t)[0, 0]  # (T, T)


def run_mask(args) -> int:
    from tformer.inspection.plots import plot_mask

    _check_out(args)
    tokens = args.tokens.split()
    plot_mask(mask_for(args.kind, tokens), args.out, tokens, title=f"{args.kind} mask (1 = may attend)")
    return _done(args.out)


def run_curves(args) -> int:
    from tformer.training.curves import not_finite, plot_curves, read_log

    run, flag = (args.run, "RUN_DIR") if args.run is not None else (args.model, "--model")
    _check_out(args, [(flag, run)])
    try:
        plot_curves(run, args.out)
        missing = not_finite(read_log(run))
    except FileNotFoundError as err:  # the library names its parameter: here it is the argument
        raise FileNotFoundError(str(err).replace("run_dir_or_jsonl", flag, 1)) from None
    for key, steps in missing.items():
        shown = ", ".join(map(str, steps[:10])) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
        print(
            f"tformer plot curves: note: {key} is not finite at step {shown} (NaN, an infinity or null in the "
            "log): not drawn, said on the picture",
            file=sys.stderr,
        )
    return _done(args.out)
