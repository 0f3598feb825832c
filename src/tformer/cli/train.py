"""``tformer train translation|lm|bert|classify``: train a model; flags map onto TrainConfig and the model config.

    tformer train translation --data pairs.tsv --out runs/fr --preset small --minutes 30
    tformer train lm --data ../shared/data/tinyshakespeare.txt --out runs/shakespeare --preset shakespeare-char --minutes 1.5
    tformer train bert --data text.txt --out runs/bert --minutes 10
    tformer train classify --data langid.tsv --out runs/langid --init runs/bert --epochs 2

Each family's parser calls that family's entry point (``tformer.translation.train``, ``tformer.lm.train``,
``tformer.bert.train``, ``tformer.bert.train_classifier``) and prints the last evaluation.
"""

from __future__ import annotations

from tformer.cli.flags import FLAGS, add, add_start, add_training, defaults, options
from tformer.cli.parser import Switch
from tformer.cli.validate import (
    corpus_path,
    count_or_fraction,
    data_source,
    existing_file,
    fraction,
    int_at_least,
    non_negative_int,
    positive_int,
    probability,
)


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model: translation, lm, bert, classify")
    fam = p.add_subparsers(dest="family", metavar="FAMILY", required=True)
    _add_translation(fam)
    _add_lm(fam)
    _add_bert(fam)
    _add_classify(fam)


def _add_translation(fam) -> None:
    from tformer.translation import run

    entry = defaults(run.setup, run.TRAINING)
    t = fam.add_parser("translation", help="encoder-decoder translation model")
    t.add_argument(
        "--data",
        default="builtin",
        type=data_source,
        help="'builtin', a TSV pairs file (tokenized once into shards kept in --data-cache; or a folder `tformer "
        "data prepare translation` wrote), a Multi30k-style directory (with val.*: all of train.* trains, val.* "
        "validates), or the name of a corpus `tformer data download` fetched (multi30k, tatoeba-eng-fra)",
    )
    add(t, "--tokenizer-sample", "--data-cache", defaults=entry)
    t.add_argument(
        "--src-lang",
        default="en",
        help="source language code: the file suffix of a Multi30k directory (train.LANG); a TSV is read as "
        "source<TAB>target",
    )
    t.add_argument("--tgt-lang", default="fr", help="target language code (the same)")
    add(
        t,
        "--preset",
        "--vocab-size",
        defaults=entry,
        preset={"help": "model size (default: small)"},
        vocab_size={
            "type": int_at_least(5, " (4 special tokens + 1)"),
            "help": "size of the BPE trained on --data (default 8000)",
        },
    )
    t.add_argument(
        "--separate-vocab",
        "--joint-vocab",
        dest="joint",
        action=Switch,
        default=True,
        help="separate source and target vocabularies (--joint-vocab, the default: one vocabulary for both)",
    )
    add(t, "--batch-tokens", defaults=entry)
    t.add_argument("--label-smoothing", type=fraction, default=entry["label_smoothing"], help="of the loss's targets")
    add(t, "--valid", defaults=entry, valid={"help": FLAGS_VALID_DIR})
    t.add_argument(
        "--test",
        type=count_or_fraction,
        default=entry["test"],
        help="held-out test part (fraction, or count if >= 1), written to OUT/data/test.tsv",
    )
    t.add_argument(
        "--bleu-sentences",
        type=non_negative_int,
        default=entry["bleu_sentences"],
        help="validation sentences translated for BLEU",
    )
    add(
        t,
        "--dropout",
        "--ffn-dropout",
        "--max-len",
        defaults=entry,
        max_len={"help": "longest sentence in tokens: the model's positions (default 256)"},
    )
    add(t, "--d-model", "--n-heads", "--d-ff", "--n-encoder-layers", "--n-decoder-layers", defaults=entry)
    add_start(t, entry, lora_targets={"help": LORA_TARGETS_SEQ2SEQ})
    add_training(t, entry)
    t.set_defaults(func=run_translation)


LORA_TARGETS_SEQ2SEQ = (
    "comma-separated layers that get a LoRA pair, shell patterns over attn.q_proj, attn.k_proj, attn.v_proj, "
    "attn.out_proj (self-attention), cross_attn.* (the decoder's cross-attention), ffn.linear1, ffn.linear2"
)
INIT_BERT = (
    "continue the pretraining of this BERT (its WordPiece and weights; heads it lacks start new): a `tformer train "
    "bert` run or model, a Hugging Face one; --preset, --tokenizer-dir, --vocab-size and --dropout are then refused"
)
FLAGS_VALID_DIR = (
    "held-out part for validation (fraction, or count if >= 1; 0: none); a directory with val.* uses val.*"
)


def _add_lm(fam) -> None:
    from tformer.lm import run
    from tformer.lm.recipes import RECIPES

    entry = defaults(run.setup, run.TRAINING)
    t = fam.add_parser(
        "lm",
        help="decoder-only (GPT) language model on a text file, a folder of .txt files or JSONL",
        description="Unset --lr/--warmup-steps/--weight-decay/--batch-size/--max-len/--tokenizer come "
        "from the preset's recipe, else lr 1e-3, warmup 100, weight decay 0.01, batch 16, "
        "the preset's context, char. "
        "Cosine decays over --max-steps, else over --minutes.",
    )
    t.add_argument(
        "--data",
        required=True,
        type=corpus_path,
        help="a UTF-8 text file, a JSONL file (a 'text' field), a Parquet or Arrow file, a dataset saved by Hugging "
        "Face datasets, a folder of those, or a folder `tformer data prepare` wrote; tokenized once into the cache "
        "(--data-cache); with --init also instruction data: JSONL of {'prompt', 'response'} or {'messages': [...]} "
        "(the loss on the answers only)",
    )
    add(t, "--text-field", "--data-cache", "--valid-data", defaults=entry)
    add(
        t,
        "--preset",
        defaults=entry,
        preset={
            "choices": ["tiny", "small", "base", *RECIPES],
            "help": "model size (GPTConfig preset) or a tuned CPU recipe (default: tiny)",
        },
    )
    t.add_argument("--tokenizer", choices=["char", "bpe"], help="character-level or byte-level BPE (default: char)")
    add(
        t,
        "--tokenizer-dir",
        "--tokenizer-sample",
        defaults=entry,
        tokenizer_dir={
            "help": "use this directory's tokenizer (a Hugging Face tokenizer.json, e.g. GPT-2's, or a "
            "tformer run's) instead of training one on --data"
        },
    )
    add(
        t,
        "--vocab-size",
        "--pad-vocab",
        "--max-len",
        "--batch-size",
        "--dropout",
        "--ffn-dropout",
        "--shift-tokens",
        defaults=entry,
        vocab_size={
            "type": int_at_least(4, " (3 special tokens + 1)"),
            "help": "BPE vocabulary size (default 4096; char: the text's characters)",
        },
        pad_vocab={"help": FLAGS["--pad-vocab"].help + f" (default {run.PAD_VOCAB}; not with --init)"},
        max_len={"help": "context length in tokens (default: the preset's)", "old": ("--block-size",)},
        batch_size={"help": "blocks of --max-len tokens per batch (default 16)"},
    )
    add(t, "--d-model", "--n-heads", "--d-ff", "--n-layers", defaults=entry)
    t.add_argument(
        "--batches-per-epoch",
        type=positive_int,
        default=entry["batches_per_epoch"],
        help="random batches per 'epoch' (evaluation cadence)",
    )
    t.add_argument(
        "--eval-blocks",
        type=positive_int,
        default=entry["eval_blocks"],
        help="validation blocks scored at each evaluation",
    )
    add(
        t,
        "--valid",
        defaults=entry,
        valid={
            "help": "the last part of the text held out for validation: a fraction (capped at 1,000,000 tokens) or a "
            "count of tokens if >= 1; of instruction data, of the conversations (0: none)",
            "old": ("--val-fraction",),
        },
    )
    add_start(t, entry)
    add_training(t, entry)
    t.set_defaults(func=run_lm)


def _bert_model_flags(p, entry: dict) -> None:
    g = p.add_argument_group("model and data")
    add(
        g,
        "--preset",
        "--tokenizer-dir",
        "--vocab-size",
        "--max-len",
        "--batch-size",
        "--dropout",
        "--ffn-dropout",
        "--d-model",
        "--n-heads",
        "--d-ff",
        "--n-layers",
        defaults=entry,
        tokenizer_dir={
            "help": "use this directory's WordPiece (tokenizer.json or vocab.txt, e.g. the uncased BERT "
            "vocabulary) instead of training one on --data"
        },
        vocab_size={
            "type": int_at_least(6, " (5 special tokens + 1)"),
            "help": "size of the WordPiece trained on --data",
        },
        max_len={
            "type": int_at_least(3, " ([CLS] A [SEP] B [SEP] needs 3)"),
            "help": "longest sequence in tokens, [CLS]/[SEP] included (default 128; with --init the model's "
            "positions, up to 128)",
        },
    )


def _add_bert(fam) -> None:
    from tformer.bert import run

    entry = defaults(run.setup, run.TRAINING)
    b = fam.add_parser("bert", help="encoder-only BERT: MLM + NSP pretraining")
    b.add_argument(
        "--data",
        required=True,
        type=corpus_path,
        help="text file (blank line = new document, one sentence per line), a .tsv (first column), a folder of text "
        "files, or a folder `tformer data prepare bert` wrote; tokenized once into the cache (--data-cache)",
    )
    add(b, "--data-cache", "--tokenizer-sample", defaults=entry)
    add(
        b,
        "--valid",
        defaults=entry,
        valid={"help": "held-out tail of the text (fraction, capped at 10,000 sentences, or sentences if >= 1)"},
    )
    b.add_argument(
        "--mlm-prob",
        type=probability,
        default=entry["mlm_prob"],
        help="fraction of the non-special tokens picked for MLM",
    )
    _bert_model_flags(b, entry)
    add_start(b, entry, init={"help": INIT_BERT})
    add_training(b, entry)
    b.set_defaults(func=run_bert)


def _add_classify(fam) -> None:
    from tformer.bert import run

    entry = defaults(run.setup_classifier, run.CLASSIFIER_TRAINING)
    c = fam.add_parser("classify", help="BERT sequence classification on text<TAB>label lines")
    c.add_argument("--data", required=True, type=existing_file, help="TSV file of text<TAB>label lines")
    add(c, "--valid", defaults=entry, valid={"help": "held-out split (fraction, or examples if >= 1)"})
    _bert_model_flags(c, entry)
    add_start(
        c,
        entry,
        init={
            "help": "start from this BERT (its tokenizer and weights, a new head): a `tformer train bert` run or "
            "model, a Hugging Face one"
        },
    )
    add_training(c, entry)
    c.set_defaults(func=run_classify)


# --------------------------------------------------------------------------------------------- runners


NO_VALIDATION = "no validation data (the model kept is the latest)"


def _done(trainer, scores: str, out: str) -> None:
    """The run's last line, every family's: the step, the last evaluation's ``scores``, and what ``best/`` holds (its
    score and step, and whether it is ``--ema``'s moving average)."""
    from tformer.training.config import budget_reached
    from tformer.training.distributed import say

    best = f"; best/: {trainer.best_text()}" if scores and trainer.best is not None else ""
    reached = budget_reached(trainer.cfg, trainer.step, trainer.epoch, trainer.elapsed) or ""
    at = f" ({reached.replace(' (', ' reached: ', 1)}" if reached and not reached.startswith("--max-steps") else ""
    say(f"done: step {trainer.step}{at}, {scores or NO_VALIDATION}{best} -> {out}")


def _report(trainer, result: dict, out: str) -> None:
    _done(trainer, ", ".join(f"{k} {v:.4f}" for k, v in result.items() if k not in ("step", "epoch")), out)


def _train(args, setup) -> tuple:
    """The family's ``setup`` with the parsed flags, ``OUT/config.yaml`` (the settings resolved: ``--config`` it to
    repeat the run), then the training: the trainer and its last evaluation."""
    from tformer.cli import build_parser
    from tformer.cli.config import write_resolved
    from tformer.training.distributed import is_main_process

    try:
        trainer = setup(**options(args, setup))
    except ValueError as err:  # the model's config refuses a shape: said with the flags that set it
        raise in_flag_words(err, args) from None
    if is_main_process():
        write_resolved(build_parser(), args, args.out_dir, trainer)
    return trainer, trainer.fit()


def in_flag_words(err: ValueError, args) -> ValueError:
    """A model config's refusal (``Seq2SeqConfig.d_model must be divisible by n_heads, got d_model=63, ...``) in the
    command line's words: each field a flag sets is named by its flag (``--d-model must be divisible by --n-heads,
    got --d-model=63, ...``); any other error is left as it is."""
    import re

    from tformer.hf.common import in_own_words

    found = re.match(r"(\w+Config)\.", str(err))
    if found is None:
        return err
    flags = {name: "--" + name.replace("_", "-") for name in vars(args) if not name.startswith("_")}
    return ValueError(in_own_words(str(err), found.group(1), flags))


def run_translation(args) -> int:
    from tformer import translation

    trainer, result = _train(args, translation.setup)
    scores = ""
    if "val_loss" in result:
        scores = f"val_loss {result['val_loss']:.3f}" + (f", BLEU {result['bleu']:.2f}" if "bleu" in result else "")
    if "ema_val_loss" in result:  # --ema: the moving average's too, as bert's and classify's lines list them
        scores += f"; EMA val_loss {result['ema_val_loss']:.3f}"
        scores += f", BLEU {result['ema_bleu']:.2f}" if "ema_bleu" in result else ""
    _done(trainer, scores, args.out_dir)
    return 0


def run_lm(args) -> int:
    from tformer import lm

    trainer, result = _train(args, lm.setup)
    scores = ""
    if "val_loss" in result:
        bpc = f", bpc {result['val_bpc']:.3f}" if "val_bpc" in result else ""  # a Hugging Face tokenizer has no unit
        ppl = result["val_ppl"]  # a diverged run's: inf (1e6 and more in 3 digits, not 300)
        scores = f"val_loss {result['val_loss']:.4f}, ppl {ppl:{'.2f' if ppl < 1e6 else '.3g'}}{bpc}"
    if "ema_val_loss" in result:  # --ema: the moving average's too
        scores += f"; EMA val_loss {result['ema_val_loss']:.4f}"
    _done(trainer, scores, args.out_dir)
    return 0


def run_bert(args) -> int:
    from tformer import bert

    trainer, result = _train(args, bert.setup)
    _report(trainer, result, args.out_dir)
    return 0


def run_classify(args) -> int:
    from tformer import bert

    trainer, result = _train(args, bert.setup_classifier)
    _report(trainer, result, args.out_dir)
    return 0
