"""``tformer average RUN OUT --last K`` (or ``--best K``): the models a run kept at its evaluations
(``--keep-checkpoints``), averaged parameter by parameter into one model directory.

    tformer train translation --data pairs.tsv --out runs/mt --eval-every 200 --keep-checkpoints 5
    tformer average runs/mt avg/ --last 5         # the 5 newest: config.json, model.safetensors, the tokenizers
    tformer evaluate --model avg/ --src val.en --ref val.fr   # then as any model

``--best K`` takes the K best of the kept checkpoints (the newest ``--keep-checkpoints``) by the metric the run's
``best/`` is chosen by (BLEU for translation, the loss for the others). The average is the library's
:func:`tformer.training.averaging.write_average`. A LoRA run's average keeps the K checkpoints' pairs side by side
(rank K·r: the exact mean of their updates) and writes them as a PEFT adapter on the run's base too.
"""

from __future__ import annotations

from tformer.cli.validate import existing_dir, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "average",
        help="average the models a run kept (--keep-checkpoints) into one model directory",
        description="Write to OUT the average, parameter by parameter, of the models RUN kept at its last "
        "evaluations (train with --keep-checkpoints K): fairseq's and OpenNMT-py's checkpoint averaging.",
    )
    p.add_argument("run", metavar="RUN", type=existing_dir, help="a run directory trained with --keep-checkpoints")
    p.add_argument("out", metavar="OUT", help="the directory to write (missing or empty; its parent must exist)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", metavar="K", type=positive_int, help="average the K newest checkpoints")
    which.add_argument(
        "--best",
        metavar="K",
        type=positive_int,
        help="average the K best of the kept checkpoints (the newest --keep-checkpoints) by the run's metric (each "
        "checkpoint holds the trained weights, scored as such: with --ema, not the moving average's score)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if tformer wrote it (an earlier average, merge or export: their .tformer-output.json lists "
        "its files); any other directory is refused even so",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from tformer.finetune import adapter_writer
    from tformer.outputs import check_new_dir
    from tformer.training.averaging import ADAPTER_FILES, choose_checkpoints, write_average

    out = check_new_dir(args.out, "OUT", [("RUN", args.run)], args.overwrite)  # before any work
    chosen = choose_checkpoints(args.run, args.last, args.best)
    adapter = chosen[-1] / ADAPTER_FILES[1]  # a LoRA run's: the average's pairs as a PEFT adapter too
    base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path") if adapter.is_file() else None
    write_average(chosen, out, [adapter_writer(base)] if base else [])
    print(
        f"wrote {out}: the average of {len(chosen)} checkpoint{'s' * (len(chosen) > 1)} "
        f"({', '.join(d.name for d in chosen)})"
    )
    if base:
        print(
            f"  LoRA: their pairs side by side (rank {len(chosen)} x r: the mean of their updates), and its PEFT adapter"
        )
    return 0
