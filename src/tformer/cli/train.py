"""``tformer train translation|lm|bert|classify``: train a model; flags map onto TrainConfig and the model config.

    tformer train translation --data pairs.tsv --out runs/fr --preset small --minutes 30
    tformer train lm --data ../shared/data/tinyshakespeare.txt --out runs/shakespeare --preset shakespeare-char --minutes 1.5
    tformer train bert --data text.txt --out runs/bert --minutes 10
    tformer train classify --data langid.tsv --out runs/langid --init runs/bert --epochs 2

Each family's parser calls that family's entry point (``tformer.translation.train``, ``tformer.lm.train``,
``tformer.bert.train``, ``tformer.bert.train_classifier``) and prints the last evaluation.
"""

from __future__ import annotations

from tformer.cli.common import add_training_flags, train_options
from tformer.cli.validate import (
    count_or_fraction,
    data_source,
    existing_dir,
    existing_file,
    existing_path,
    fraction,
    int_at_least,
    non_negative_int,
    positive_int,
    probability,
)
from tformer.lm.recipes import RECIPES


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model: translation, lm, bert, classify")
    fam = p.add_subparsers(dest="family", metavar="FAMILY", required=True)
    _add_translation(fam)
    _add_lm(fam)
    _add_bert(fam)
    _add_classify(fam)


def _add_translation(fam) -> None:
    t = fam.add_parser("translation", help="encoder-decoder translation model")
    t.add_argument(
        "--data",
        default="builtin",
        type=data_source,
        help="'builtin', a TSV pairs file, or a Multi30k-style directory (with val.*: all of train.* trains, "
        "val.* validates)",
    )
    t.add_argument("--src-lang", default="en")
    t.add_argument("--tgt-lang", default="fr")
    t.add_argument("--preset", choices=["tiny", "small", "base"], default="small")
    t.add_argument("--vocab-size", type=int_at_least(5, " (4 special tokens + 1)"), default=8000)
    t.add_argument("--separate-vocab", action="store_true", help="separate source/target vocabularies (default: joint)")
    t.add_argument("--max-tokens", type=positive_int, default=4096, help="token budget per batch")
    t.add_argument("--label-smoothing", type=fraction, default=0.1)
    t.add_argument(
        "--valid",
        type=count_or_fraction,
        default=0.05,
        help="validation fraction (or count if >= 1; 0: none); a directory with val.* uses val.*",
    )
    t.add_argument("--test", type=count_or_fraction, default=0.05, help="test fraction (or count if >= 1)")
    t.add_argument(
        "--bleu-sentences", type=non_negative_int, default=500, help="validation sentences translated for BLEU"
    )
    t.add_argument("--dropout", type=fraction, help="override the preset's dropout")
    t.add_argument("--max-len", type=positive_int, default=256, help="longest sequence in tokens")
    add_training_flags(t, lr=7e-4, warmup=400, schedule="inverse_sqrt")
    t.set_defaults(func=run_translation)


def _add_lm(fam) -> None:
    t = fam.add_parser(
        "lm",
        help="decoder-only (GPT) language model on a text file, a folder of .txt files or JSONL",
        description="Unset --lr/--warmup-steps/--weight-decay/--batch-size/--block-size/--tokenizer come "
        "from the preset's recipe, else lr 1e-3, warmup 100, weight decay 0.01, batch 16, "
        "the preset's context, char. "
        "Cosine decays over --max-steps, else over --minutes.",
    )
    t.add_argument(
        "--data",
        required=True,
        type=existing_path,
        help="a UTF-8 text file, a folder of .txt files, or a JSONL file with a 'text' field",
    )
    t.add_argument(
        "--preset",
        choices=["tiny", "small", "base", *RECIPES],
        default="tiny",
        help="model size (GPTConfig preset) or a tuned CPU recipe",
    )
    t.add_argument("--tokenizer", choices=["char", "bpe"], help="character-level or byte-level BPE (default: char)")
    t.add_argument(
        "--vocab-size",
        type=int_at_least(4, " (3 special tokens + 1)"),
        help="BPE vocabulary size (default 4096; char: the text's characters)",
    )
    t.add_argument("--block-size", type=positive_int, help="context length in tokens (default: the preset's max_len)")
    t.add_argument("--batch-size", type=positive_int, help="blocks per batch (default 16)")
    t.add_argument("--dropout", type=fraction, help="override the preset's dropout")
    t.add_argument(
        "--batches-per-epoch", type=positive_int, default=200, help="random batches per 'epoch' (evaluation cadence)"
    )
    t.add_argument("--eval-blocks", type=positive_int, default=400, help="validation blocks scored at each evaluation")
    t.add_argument("--val-fraction", type=fraction, default=0.1, help="the last part of the text kept for validation")
    t.add_argument(
        "--compile", action="store_true", help="torch.compile the model for training (the saved model is unwrapped)"
    )
    add_training_flags(t, lr=1e-3, warmup=100, schedule="cosine")
    t.set_defaults(func=run_lm, lr=None, warmup_steps=None, weight_decay=None)


def _bert_model_flags(p, preset: str) -> None:
    g = p.add_argument_group("model and data")
    g.add_argument("--preset", choices=["tiny", "small", "base"], default=preset)
    g.add_argument(
        "--tokenizer-dir",
        type=existing_dir,
        help="use this directory's WordPiece (tokenizer.json or vocab.txt, e.g. the uncased "
        "BERT vocabulary) instead of training one on --data",
    )
    g.add_argument(
        "--vocab-size",
        type=int_at_least(6, " (5 special tokens + 1)"),
        default=8000,
        help="size of the WordPiece trained on --data",
    )
    g.add_argument(
        "--max-len",
        type=int_at_least(3, " ([CLS] A [SEP] B [SEP] needs 3)"),
        default=128,
        help="longest sequence in tokens, [CLS]/[SEP] included",
    )
    g.add_argument("--batch-size", type=positive_int, default=32, help="sequences per batch")
    g.add_argument("--dropout", type=fraction, help="override the preset's dropout")


def _add_bert(fam) -> None:
    b = fam.add_parser("bert", help="encoder-only BERT: MLM + NSP pretraining")
    b.add_argument(
        "--data",
        required=True,
        type=existing_file,
        help="text file (blank line = new document, one sentence per line) or a .tsv (first column)",
    )
    b.add_argument(
        "--valid",
        type=count_or_fraction,
        default=0.05,
        help="held-out tail of the text (fraction, or sentences if >= 1)",
    )
    b.add_argument(
        "--mlm-prob", type=probability, default=0.15, help="fraction of the non-special tokens picked for MLM"
    )
    _bert_model_flags(b, "small")
    add_training_flags(b, lr=5e-4, warmup=400, schedule="inverse_sqrt")
    b.set_defaults(func=run_bert)


def _add_classify(fam) -> None:
    c = fam.add_parser("classify", help="BERT sequence classification on text<TAB>label lines")
    c.add_argument("--data", required=True, type=existing_file, help="TSV file of text<TAB>label lines")
    c.add_argument(
        "--valid", type=count_or_fraction, default=0.1, help="held-out split (fraction, or examples if >= 1)"
    )
    c.add_argument(
        "--init",
        type=existing_dir,
        help="start from this BERT (its tokenizer and weights): a `tformer train bert` run or model, a Hugging Face one",
    )
    _bert_model_flags(c, "small")
    add_training_flags(c, lr=3e-4, warmup=100, schedule="inverse_sqrt")
    c.set_defaults(func=run_classify)


# --------------------------------------------------------------------------------------------- runners


def _bert_options(args) -> dict:
    return dict(
        preset=args.preset,
        tokenizer_dir=args.tokenizer_dir,
        vocab_size=args.vocab_size,
        max_len=args.max_len,
        batch_size=args.batch_size,
        dropout=args.dropout,
        valid=args.valid,
        **train_options(args),
    )


NO_VALIDATION = "no validation data (the model kept is the latest)"


def _report(trainer, result: dict, out: str) -> None:
    from tformer.training.distributed import say

    scores = [f"{k} {v:.4f}" for k, v in result.items() if k not in ("step", "epoch")]
    say(f"done: step {trainer.step}, {', '.join(scores) or NO_VALIDATION} -> {out}")


def run_translation(args) -> int:
    from tformer import translation
    from tformer.training.distributed import say

    trainer, result = translation.train(
        args.data,
        args.out,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        preset=args.preset,
        vocab_size=args.vocab_size,
        joint=not args.separate_vocab,
        max_tokens=args.max_tokens,
        label_smoothing=args.label_smoothing,
        valid=args.valid,
        test=args.test,
        bleu_sentences=args.bleu_sentences,
        dropout=args.dropout,
        max_len=args.max_len,
        **train_options(args),
    )
    if "val_loss" not in result:
        scores = NO_VALIDATION
    else:
        scores = f"val_loss {result['val_loss']:.3f}" + (f", BLEU {result['bleu']:.1f}" if "bleu" in result else "")
    say(f"done: step {trainer.step}, {scores} -> {args.out}")
    return 0


def run_lm(args) -> int:
    from tformer import lm
    from tformer.training.distributed import say

    trainer, result = lm.train(
        args.data,
        args.out,
        args.preset,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        block_size=args.block_size,
        batch_size=args.batch_size,
        dropout=args.dropout,
        batches_per_epoch=args.batches_per_epoch,
        eval_blocks=args.eval_blocks,
        val_fraction=args.val_fraction,
        compile=args.compile,
        **train_options(args),
    )
    if "val_loss" not in result:
        say(f"done: step {trainer.step}, {NO_VALIDATION} -> {args.out}")
        return 0
    say(
        f"done: step {trainer.step}, val_loss {result['val_loss']:.4f} (best {trainer.best:.4f}), "
        f"ppl {result['val_ppl']:.2f}, bpc {result['val_bpc']:.3f} -> {args.out}"
    )
    return 0


def run_bert(args) -> int:
    from tformer import bert

    trainer, result = bert.train(args.data, args.out, mlm_prob=args.mlm_prob, **_bert_options(args))
    _report(trainer, result, args.out)
    return 0


def run_classify(args) -> int:
    from tformer import bert

    trainer, result = bert.train_classifier(args.data, args.out, init=args.init, **_bert_options(args))
    _report(trainer, result, args.out)
    return 0
