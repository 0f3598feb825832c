"""``tformer demo``: the main job — train a small English→French translator, then show what it learned.

Trains on the built-in corpus (or ``--data``) for a few minutes on the CPU, prints translations
including the notes' "I am good." → "Je vais bien.", and writes the checkpoint, the training
curves and a cross-attention heatmap (target tokens × source tokens) as PNG files.
"""

from __future__ import annotations

from pathlib import Path

from tformer.cli.validate import data_source, int_at_least, output_dir, positive_float, seed

# after an interrupt: the demo has no --resume (its run is minutes long), so it names the flag it has
DEMO_RESUME = "the demo does not resume: run it again with --overwrite to start anew"


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="train a small translator on the built-in corpus and show it working")
    p.add_argument(
        "--data", default="builtin", type=data_source, help="'builtin', a TSV pairs file, or a Multi30k-style directory"
    )
    p.add_argument("--out", default="runs/demo", type=output_dir, help="run directory (default: runs/demo)")
    p.add_argument(
        "--overwrite", action="store_true", help="delete the earlier run in a non-empty --out and start anew"
    )
    p.add_argument("--minutes", type=positive_float, default=2.0, help="training time budget")
    p.add_argument("--preset", choices=["tiny", "small", "base"], default="tiny")
    p.add_argument("--vocab-size", type=int_at_least(5, " (4 special tokens + 1)"), default=1000)
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("sentences", nargs="*", help="sentences to translate at the end (default: a few examples)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer import translation
    from tformer.training.resume import check_out_dir
    from tformer.training.trainer import TrainingInterrupted
    from tformer.translation.demo import EXAMPLES, HEATMAP, cross_attention_png

    out = Path(args.out)
    # before anything is trained: a non-empty --out is refused, naming the flag the demo has (no --resume here)
    check_out_dir(out, overwrite=args.overwrite, resumable=False)
    if args.overwrite:
        (out / HEATMAP).unlink(missing_ok=True)  # the demo's own file, not one of the run's
    trainer = translation.setup(
        args.data,
        out,
        preset=args.preset,
        vocab_size=args.vocab_size,
        max_len=128,
        max_tokens=2048,
        bleu_sentences=200,
        lr=1e-3,
        warmup_steps=200,
        minutes=args.minutes,
        eval_every=200,
        seed=args.seed,
        progress=not args.no_progress,
        overwrite=args.overwrite,
    )
    n_params = sum(p.numel() for p in trainer.model.parameters())
    print(
        f"training a {args.preset} Seq2SeqTransformer ({n_params:,} parameters) for {args.minutes:g} min "
        f"on {len(trainer.task.train_pairs)} pairs"
    )
    try:
        result = trainer.fit()
    except TrainingInterrupted as err:  # its "--resume" is train's flag: the demo has none
        text = str(err).replace("run the same command with --resume to continue exactly from there", DEMO_RESUME)
        raise TrainingInterrupted(text, err.exit_code) from None
    print(f"validation: {validation_line(result)}")

    best = translation.Translator.load(out)
    sentences = args.sentences or EXAMPLES
    for src, hyp in zip(sentences, best.translate(sentences)):
        print(f"  {src:32s} → {hyp}")
    heatmap = cross_attention_png(best, sentences[0], out / HEATMAP)
    print(f"wrote {out}/ (model, tokenizers), {out / 'curves.png'}, {heatmap}")
    return 0


def validation_line(result: dict) -> str:
    """The last evaluation in words; with no validation data, says so (never a made-up loss)."""
    if "val_loss" not in result:
        return "no validation data (the model kept is the latest)"
    scores = f"loss {result['val_loss']:.3f}"
    if "bleu" in result:
        scores += f", BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}"
    return scores
