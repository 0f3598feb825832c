"""BERT on the command line.

* ``tformer train bert --data FILE --out DIR``: MLM + NSP pretraining (hooked into ``tformer train``);
* ``tformer train classify --data FILE.tsv --out DIR [--init DIR]``: sequence-classification fine-tuning;
* ``tformer fill-mask --model DIR "the cat sat on the [MASK]."``: top-k tokens for each [MASK];
* ``tformer classify --model DIR "text" …``: label and probability for each text;
* ``tformer data langid --tatoeba FILE --out FILE.tsv``: English-vs-French examples (hooked into ``tformer data``).
"""

from __future__ import annotations

from pathlib import Path

from tformer.cli.train import add_training_flags, say, train_config


def _model_flags(p, preset: str) -> None:
    g = p.add_argument_group("model and data")
    g.add_argument("--preset", choices=["tiny", "small", "base"], default=preset)
    g.add_argument("--tokenizer-dir", help="use this directory's WordPiece (tokenizer.json or vocab.txt, e.g. the uncased "
                                           "BERT vocabulary) instead of training one on --data")
    g.add_argument("--vocab-size", type=int, default=8000, help="size of the WordPiece trained on --data")
    g.add_argument("--max-len", type=int, default=128, help="longest sequence in tokens, [CLS]/[SEP] included")
    g.add_argument("--batch-size", type=int, default=32, help="sequences per batch")
    g.add_argument("--dropout", type=float, help="override the preset's dropout")


def add_train_parsers(fam) -> None:
    """``tformer train bert`` and ``tformer train classify``."""
    b = fam.add_parser("bert", help="encoder-only BERT: MLM + NSP pretraining")
    b.add_argument("--data", required=True, help="text file (blank line = new document, one sentence per line) or a .tsv "
                                                 "(first column)")
    b.add_argument("--valid", type=float, default=0.05, help="held-out tail of the text (fraction, or sentences if >= 1)")
    b.add_argument("--mlm-prob", type=float, default=0.15, help="fraction of the non-special tokens picked for MLM")
    _model_flags(b, "small")
    add_training_flags(b, lr=5e-4, warmup=400, schedule="inverse_sqrt")
    b.set_defaults(func=run_train_bert)

    c = fam.add_parser("classify", help="BERT sequence classification on text<TAB>label lines")
    c.add_argument("--data", required=True, help="TSV file of text<TAB>label lines")
    c.add_argument("--valid", type=float, default=0.1, help="held-out split (fraction, or examples if >= 1)")
    c.add_argument("--init", help="start from this `tformer train bert` model (its tokenizer and weights)")
    _model_flags(c, "small")
    add_training_flags(c, lr=3e-4, warmup=100, schedule="inverse_sqrt")
    c.set_defaults(func=run_train_classify)


def add_data_parsers(sp) -> None:
    """``tformer data langid``."""
    d = sp.add_parser("langid", help="English-vs-French text<TAB>label examples from the Tatoeba pairs")
    d.add_argument("--tatoeba", required=True, help="Tatoeba English<TAB>French TSV (e.g. ../shared/data/tatoeba-eng-fra.tsv)")
    d.add_argument("--out", required=True, help="output TSV")
    d.add_argument("--n", type=int, default=20000, help="number of examples (half English, half French)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=run_langid)


def add_parser(sub) -> None:
    f = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] of a BERT model")
    f.add_argument("texts", nargs="+", help='sentences with [MASK], e.g. "the cat sat on the [MASK]."')
    f.add_argument("--model", required=True, help="`tformer train bert` directory or a Hugging Face BERT directory")
    f.add_argument("--top-k", type=int, default=5)
    f.set_defaults(func=run_fill_mask)
    c = sub.add_parser("classify", help="label texts with a `tformer train classify` model")
    c.add_argument("texts", nargs="+")
    c.add_argument("--model", required=True, help="`tformer train classify` directory")
    c.set_defaults(func=run_classify)


# --------------------------------------------------------------------------------------------- runners


def _tokenizer(args, texts: list[str]):
    from tformer.bert import WordPiece, train_wordpiece
    from tformer.training.distributed import from_rank0

    if args.resume:
        return WordPiece.load(Path(args.out) / "last")
    if args.tokenizer_dir:
        return WordPiece.load(args.tokenizer_dir)
    return from_rank0(lambda: train_wordpiece(texts, args.vocab_size), args.device)  # one WordPiece for all processes


def _overrides(args) -> dict:
    return {} if args.dropout is None else {"dropout": args.dropout}


def _fit(model, task, args) -> dict:
    from tformer.training.trainer import Trainer

    trainer = Trainer(model, task, train_config(args))
    if args.resume:
        trainer.resume()
    result = trainer.fit()
    say(f"done: step {trainer.step}, " + ", ".join(f"{k} {v:.4f}" for k, v in result.items() if k not in ("step", "epoch"))
        + f" -> {args.out}")
    return result


def run_train_bert(args) -> int:
    import torch

    from tformer.bert import BertPretrainTask, read_documents
    from tformer.bert.pretraining import split_documents
    from tformer.models.bert import Bert, BertConfig

    train_docs, valid_docs = split_documents(read_documents(args.data), args.valid)
    say(f"data: {sum(map(len, train_docs))} training / {sum(map(len, valid_docs))} held-out sentences "
        f"in {len(train_docs)} / {len(valid_docs)} documents")
    tokenizer = _tokenizer(args, [s for d in train_docs for s in d])
    config = BertConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, max_len=args.max_len, pad_id=tokenizer.pad_id,
                               **_overrides(args))
    torch.manual_seed(args.seed)
    task = BertPretrainTask(tokenizer, train_docs, valid_docs, args.max_len, args.batch_size, args.seed, args.mlm_prob)
    _fit(Bert(config), task, args)
    return 0


def _classifier_model(args, tokenizer, n_labels: int):
    import torch

    from tformer.models.bert import Bert, BertConfig

    torch.manual_seed(args.seed)
    if not args.init:
        config = BertConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, max_len=args.max_len,
                                   pad_id=tokenizer.pad_id, num_labels=n_labels, **_overrides(args))
        return Bert(config)
    base = Bert.from_pretrained(args.init)
    if args.max_len > base.config.max_len:
        raise ValueError(f"--max-len {args.max_len} exceeds the --init model's max_len {base.config.max_len}")
    model = Bert(base.config.replace(num_labels=n_labels, **_overrides(args)))
    state = {k: v for k, v in base.state_dict().items() if not k.startswith("classifier.")}
    model.load_state_dict(state, strict=False)  # everything but the new classification head
    return model


def run_train_classify(args) -> int:
    from tformer.bert import ClassifyTask, WordPiece, read_labelled_tsv
    from tformer.bert.classification import split_examples

    examples = read_labelled_tsv(args.data)
    labels = sorted({y for _, y in examples})
    if len(labels) < 2:
        raise ValueError(f"--data {args.data!r}: need at least 2 distinct labels, got {labels}")
    train, valid = split_examples(examples, args.valid, args.seed)
    say(f"data: {len(train)} training / {len(valid)} held-out examples, labels {labels}")
    if args.init and not args.resume:
        tokenizer = WordPiece.load(args.init)
    else:
        tokenizer = _tokenizer(args, [t for t, _ in train])
    model = _classifier_model(args, tokenizer, len(labels))
    task = ClassifyTask(tokenizer, labels, train, valid, args.max_len, args.batch_size, args.seed)
    _fit(model, task, args)
    return 0


def run_fill_mask(args) -> int:
    from tformer.bert import fill_mask, load_masked_lm

    model, tokenizer = load_masked_lm(args.model)
    for text in args.texts:
        print(text)
        for k, candidates in enumerate(fill_mask(model, tokenizer, text, args.top_k), 1):
            print(f"  [MASK] {k}: " + "  ".join(f"{token} {p:.4f}" for token, p in candidates))
    return 0


def run_classify(args) -> int:
    from tformer.bert import TextClassifier

    classifier = TextClassifier.load(args.model)
    for text, (label, p) in zip(args.texts, classifier.predict(args.texts)):
        print(f"{label}\t{p:.4f}\t{text}")
    return 0


def run_langid(args) -> int:
    from tformer.bert.classification import langid_examples, write_tsv

    examples = langid_examples(args.tatoeba, args.n, args.seed)
    write_tsv(examples, args.out)
    print(f"wrote {len(examples)} examples ({sum(y == 'en' for _, y in examples)} en, "
          f"{sum(y == 'fr' for _, y in examples)} fr) to {args.out}")
    return 0
