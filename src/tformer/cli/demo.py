"""``tformer demo``: the main job — train a small English→French translator, then show what it learned.

Trains on the built-in corpus (or ``--data``) for a step target (``--max-steps``, 800 by default: about 1.5 min on
2 free CPU cores, longer on a busy machine; the steps, not the clock, decide what the model learns), prints
translations including the notes' "I am good." → "Je vais bien.", and writes the checkpoint, the training
curves and a cross-attention heatmap (target tokens × source tokens) as PNG files. ``--minutes`` caps the
time; a run it stops before the step target says so plainly, and what to run, instead of printing poor
translations as if they were the promised ones.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tformer.cli.flags import add, training_precision
from tformer.cli.validate import data_source, int_at_least

# The tiny preset on the built-in corpus (seeds 0, 1, 2) translated all five examples right from step 400-500 on
# (held-out BLEU 98.9-100): the demo trains twice that by default, whatever the machine's speed or load.
STEPS = 800
WARMUP = 200  # steps of linear warmup: a quarter of STEPS
PROMISE = ("I am good.", "Je vais bien.")  # what the README promises the built-in corpus teaches
# after an interrupt: the demo has no --resume (its run is minutes long), so it names the flag it has
DEMO_RESUME = "the demo does not resume: run it again with --overwrite to start anew"


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="train a small translator on the built-in corpus and show it working")
    p.add_argument(
        "--data",
        default="builtin",
        type=data_source,
        help="'builtin', a TSV pairs file, a Multi30k-style directory, or a downloaded corpus by name",
    )
    add(
        p,
        "--out",
        "--overwrite",
        "--max-steps",
        "--minutes",
        "--warmup-steps",
        "--preset",
        "--vocab-size",
        "--seed",
        "--precision",
        "--no-progress",
        "--compile",
        defaults=dict(out_dir="runs/demo", max_steps=STEPS, preset="tiny", vocab_size=1000, warmup_steps=WARMUP),
        precision=training_precision(),  # training's; int8 is for inference
        overwrite={"help": "delete the earlier run in a non-empty --out and start anew"},
        max_steps={
            "help": f"optimizer steps to train (default {STEPS}: what the built-in corpus needs, with margin)",
            "old": ("--steps",),
        },
        minutes={"help": "cap on the training time (default: none); stopping before --max-steps is reported as such"},
        vocab_size={"type": int_at_least(5, " (4 special tokens + 1)")},
    )
    p.add_argument("sentences", nargs="*", help="sentences to translate at the end (default: a few examples)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer import translation
    from tformer.training.resume import check_out_dir
    from tformer.training.trainer import TrainingInterrupted
    from tformer.translation.demo import EXAMPLES, HEATMAP, cross_attention_png

    out = Path(args.out_dir)
    # before anything is trained: a non-empty --out is refused, naming the flag the demo has (no --resume here)
    check_out_dir(out, overwrite=args.overwrite, resumable=False).release()  # setup below locks it again
    if args.overwrite:
        (out / HEATMAP).unlink(missing_ok=True)  # the demo's own file, not one of the run's
    trainer = translation.setup(
        args.data,
        out,
        preset=args.preset,
        vocab_size=args.vocab_size,
        max_len=128,
        batch_tokens=2048,
        bleu_sentences=200,
        lr=1e-3,
        warmup_steps=args.warmup_steps,
        max_steps=args.max_steps,
        minutes=args.minutes,
        eval_every=200,
        seed=args.seed,
        precision=args.precision,
        progress=args.progress,
        compile=args.compile,
        overwrite=args.overwrite,
    )
    n_params = sum(p.numel() for p in trainer.model.parameters())
    cap = f" (or {args.minutes:g} min, if that comes first)" if args.minutes else ""
    print(
        f"training a {args.preset} Seq2SeqTransformer ({n_params:,} parameters) for {args.max_steps} steps{cap} "
        f"on {len(trainer.task.train_pairs)} pairs"
    )
    try:
        result = trainer.fit()
    except TrainingInterrupted as err:  # its "--resume" is train's flag: the demo has none
        text = str(err).replace("run the same command with --resume to continue exactly from there", DEMO_RESUME)
        raise TrainingInterrupted(text, err.exit_code) from None
    print(f"validation: {validation_line(result)}")
    short = stopped_short(trainer.step, args)
    if short:
        print(short)

    best = translation.Translator.load(out)
    sentences = args.sentences or EXAMPLES
    translations = best.translate(sentences)
    for src, hyp in zip(sentences, translations):
        print(f"  {src:32s} → {hyp}")
    if not short and args.data == "builtin":
        unkept = promise_missed(dict(zip(sentences, translations)), trainer.step, args)
        if unkept:
            print(unkept)
    heatmap = cross_attention_png(best, sentences[0], out / HEATMAP)
    print(f"wrote {out}/ (model, tokenizers), {out / 'curves.png'}, {heatmap}")
    return 0


def _again(args, steps: int | None = None) -> str:
    """The command that trains the same demo again, anew: without --minutes, with ``steps`` if given."""
    words = ["tformer", "demo", "--overwrite", "--out", str(args.out_dir)]
    if args.data != "builtin":
        words += ["--data", str(args.data)]
    steps = steps or args.max_steps
    if steps != STEPS:  # (the demo's own target needs no flag)
        words += ["--max-steps", str(steps)]
    if args.warmup_steps != WARMUP:
        words += ["--warmup-steps", str(args.warmup_steps)]
    return shlex.join(words)


def stopped_short(step: int, args) -> str | None:
    """What to say when the time cap stopped training before the step target (None when it did not)."""
    if step >= args.max_steps:
        return None
    why = f"--minutes {args.minutes:g} ran out" if args.minutes else "training ended"
    return (
        f"stopped short: {why} after {step} of the {args.max_steps} steps the demo needs "
        "(this machine is slower or busier than expected), so the translations below may be wrong. "
        f"To train all {args.max_steps} steps, run: {_again(args)}"
    )


def promise_missed(translations: dict[str, str], step: int, args) -> str | None:
    """What to say when the built-in corpus's promised translation did not come out (None when it did)."""
    source, target = PROMISE
    got = translations.get(source)
    if got is None or got == target:
        return None
    return (
        f"note: {source!r} came out as {got!r}, not {target!r}, after {step} steps; "
        f"train longer: {_again(args, max(2 * step, STEPS))}"  # at least the demo's own step target
    )


def validation_line(result: dict) -> str:
    """The last evaluation in words; with no validation data, says so (never a made-up loss)."""
    if "val_loss" not in result:
        return "no validation data (the model kept is the latest)"
    scores = f"loss {result['val_loss']:.3f}"
    if "bleu" in result:
        scores += f", BLEU {result['bleu']:.1f}, chrF {result['chrf']:.1f}"
    return scores
