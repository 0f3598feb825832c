"""``tformer fill-mask --model DIR "the cat sat on the [MASK]."``: top-k tokens for each [MASK] of a BERT model."""

from __future__ import annotations

from tformer.cli.validate import existing_dir, positive_int


def add_parser(sub) -> None:
    f = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] of a BERT model")
    f.add_argument("texts", nargs="+", help='sentences with [MASK], e.g. "the cat sat on the [MASK]."')
    f.add_argument(
        "--model",
        required=True,
        type=existing_dir,
        help="`tformer train bert` directory or a Hugging Face BERT directory",
    )
    f.add_argument("--top-k", type=positive_int, default=5)
    f.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert import fill_mask, load_masked_lm

    model, tokenizer = load_masked_lm(args.model, flag="--model")  # through tformer.load
    for text in args.texts:
        print(text)
        for k, candidates in enumerate(fill_mask(model, tokenizer, text, args.top_k), 1):
            print(f"  [MASK] {k}: " + "  ".join(f"{token} {p:.4f}" for token, p in candidates))
    return 0
