"""``tformer classify --model DIR "text" …``: label and probability for each text (a `tformer train classify` model);
with no texts, the non-empty lines of stdin."""

from __future__ import annotations

from tformer.cli.flags import add


def add_parser(sub) -> None:
    c = sub.add_parser("classify", help="label texts with a `tformer train classify` model")
    c.add_argument("texts", nargs="*", help="texts to label (default: the non-empty lines of stdin)")
    add(c, "--precision")
    add(
        c,
        "--model",
        model={
            "required": True,
            "help": "a `tformer train classify` run or model directory, or a Hugging Face "
            "BertForSequenceClassification one",
        },
    )
    c.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert import TextClassifier
    from tformer.cli.texts import note_cut, texts_in
    from tformer.fast.precision import for_inference

    blank = [i + 1 for i, text in enumerate(args.texts) if not text.strip()]
    if blank:  # a label for nothing would look like an answer
        raise ValueError(f"texts: text {', '.join(map(str, blank))} is empty: nothing to label")
    texts = texts_in(args.texts, "texts")
    classifier = TextClassifier.load(args.model, flag="--model")  # through tformer.load
    classifier.model = for_inference(classifier.model, args.precision, "batched")
    note_cut("classify", classifier.tokenizer, texts, classifier.model.config.max_len)
    for text, (label, p) in zip(texts, classifier.predict(texts)):
        print(f"{label}\t{p:.4f}\t{text}")
    return 0
