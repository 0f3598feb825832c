"""``tformer fill-mask --model DIR "the cat sat on the [MASK]."``: the likeliest tokens for each [MASK] of a BERT."""

from __future__ import annotations

from tformer.cli.flags import add


def add_parser(sub) -> None:
    f = sub.add_parser("fill-mask", help="the likeliest tokens for each [MASK] of a BERT model")
    f.add_argument(
        "texts", nargs="*", help='sentences with [MASK], e.g. "the cat sat on the [MASK]." (default: stdin\'s lines)'
    )
    add(
        f,
        "--model",
        "--candidates",
        "--precision",
        model={
            "required": True,
            "help": "a BERT: a `tformer train bert` run or model directory, or a Hugging Face one",
        },
        candidates={"help": "tokens shown for each [MASK]"},
    )
    f.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert import fill_mask, load_masked_lm
    from tformer.cli.texts import texts_in
    from tformer.fast.precision import for_inference

    texts = texts_in(args.texts, "texts")  # else the non-empty lines of stdin, as classify and embed read them
    model, tokenizer = load_masked_lm(args.model, flag="--model")  # through tformer.load
    model = for_inference(model, args.precision, "batched")
    for text in texts:
        print(text)
        for k, candidates in enumerate(fill_mask(model, tokenizer, text, args.candidates), 1):
            print(f"  [MASK] {k}: " + "  ".join(f"{token} {p:.4f}" for token, p in candidates))
    return 0
