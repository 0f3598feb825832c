"""``tformer classify --model DIR "text" …``: label and probability for each text (a `tformer train classify` model)."""

from __future__ import annotations

from tformer.cli.flags import add


def add_parser(sub) -> None:
    c = sub.add_parser("classify", help="label texts with a `tformer train classify` model")
    c.add_argument("texts", nargs="+", help="texts to label")
    add(c, "--precision")
    add(c, "--model", model={"required": True, "help": "a `tformer train classify` run or model directory"})
    c.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert import TextClassifier
    from tformer.fast.precision import for_inference

    classifier = TextClassifier.load(args.model, flag="--model")  # through tformer.load
    classifier.model = for_inference(classifier.model, args.precision, "batched")
    for text, (label, p) in zip(args.texts, classifier.predict(args.texts)):
        print(f"{label}\t{p:.4f}\t{text}")
    return 0
