"""``tformer train translation|...``: train a model; flags map onto TrainConfig and the model config."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_training_flags(p: argparse.ArgumentParser, lr: float, warmup: int, schedule: str) -> None:
    """Flags shared by every family; each maps onto a TrainConfig field."""
    g = p.add_argument_group("training (TrainConfig)")
    g.add_argument("--out", required=True, help="run directory (best model, last state, log, curves)")
    g.add_argument("--lr", type=float, default=lr)
    g.add_argument("--schedule", choices=["inverse_sqrt", "cosine", "constant"], default=schedule)
    g.add_argument("--warmup-steps", type=int, default=warmup)
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--clip", type=float, default=1.0, help="max gradient norm (0 = off)")
    g.add_argument("--accum-steps", type=int, default=1, help="gradient accumulation")
    g.add_argument("--epochs", type=int)
    g.add_argument("--max-steps", type=int)
    g.add_argument("--minutes", type=float, help="training time budget")
    g.add_argument("--eval-every", type=int, help="optimizer steps between evaluations (default: every epoch)")
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--bf16", action="store_true", help="bfloat16 autocast (for GPUs; slow on most CPUs)")
    g.add_argument("--device", default="cpu")
    g.add_argument("--resume", action="store_true", help="continue exactly from OUT/last")
    g.add_argument("--no-progress", action="store_true")


def say(text: str) -> None:
    """Print a line of a training command's report: once, from rank 0, when torchrun runs several processes."""
    from tformer.training.distributed import is_main_process

    if is_main_process():
        print(text, flush=True)


def train_config(args):
    from tformer.training.trainer import TrainConfig

    return TrainConfig(
        out_dir=args.out, lr=args.lr, schedule=args.schedule, warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
        clip=args.clip, accum_steps=args.accum_steps, epochs=args.epochs, max_steps=args.max_steps, minutes=args.minutes,
        eval_every=args.eval_every, log_every=args.log_every, seed=args.seed, bf16=args.bf16, device=args.device,
        progress=not args.no_progress,
    )


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model: translation, lm, bert, classify")
    fam = p.add_subparsers(dest="family", metavar="FAMILY", required=True)
    t = fam.add_parser("translation", help="encoder-decoder translation model")
    t.add_argument("--data", default="builtin", help="'builtin', a TSV pairs file, or a Multi30k-style directory")
    t.add_argument("--src-lang", default="en")
    t.add_argument("--tgt-lang", default="fr")
    t.add_argument("--preset", choices=["tiny", "small", "base"], default="small")
    t.add_argument("--vocab-size", type=int, default=8000)
    t.add_argument("--separate-vocab", action="store_true", help="separate source/target vocabularies (default: joint)")
    t.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    t.add_argument("--label-smoothing", type=float, default=0.1)
    t.add_argument("--valid", type=float, default=0.05, help="validation fraction (or count if >= 1)")
    t.add_argument("--test", type=float, default=0.05, help="test fraction (or count if >= 1)")
    t.add_argument("--bleu-sentences", type=int, default=500, help="validation sentences translated for BLEU")
    t.add_argument("--dropout", type=float, help="override the preset's dropout")
    t.add_argument("--max-len", type=int, default=256, help="longest sequence in tokens")
    add_training_flags(t, lr=7e-4, warmup=400, schedule="inverse_sqrt")
    t.set_defaults(func=run_translation)
    from tformer.cli.lm import add_train_lm_parser

    add_train_lm_parser(fam)
    from tformer.cli.bert import add_train_parsers
    add_train_parsers(fam)


def run_translation(args) -> int:
    from tformer.training.distributed import from_rank0, is_main_process
    from tformer.training.trainer import Trainer
    from tformer.translation.task import TranslationTask, Translator, load_corpus, prepare, split_corpus, train_tokenizers

    cfg = train_config(args)
    overrides = {"max_len": args.max_len}
    if args.dropout is not None:
        overrides["dropout"] = args.dropout
    split = split_corpus(load_corpus(args.data, args.src_lang, args.tgt_lang), args.seed, args.valid, args.test,
                         verbose=is_main_process())
    if args.resume:  # same split (deterministic); tokenizers from the run, weights restored by trainer.resume()
        translator = Translator.load(Path(args.out) / "last")
    else:  # under torchrun rank 0 trains the tokenizers and every process gets them
        tokenizers = from_rank0(lambda: train_tokenizers(split, args.vocab_size, not args.separate_vocab), args.device)
        translator = prepare(split, args.out, args.preset, args.vocab_size, not args.separate_vocab, args.seed,
                             tokenizers, **overrides)
    train, valid = split.train, split.valid
    task = TranslationTask(translator, train, valid, args.max_tokens, args.label_smoothing, args.seed, args.bleu_sentences)
    trainer = Trainer(translator.model, task, cfg)
    if args.resume:
        trainer.resume()
    result = trainer.fit()
    say(f"done: step {trainer.step}, val_loss {result['val_loss']:.3f}, BLEU {result['bleu']:.1f} -> {args.out}")
    return 0
