"""``tformer merge MODEL OUT``: a LoRA run's model with each low-rank pair folded into its weight, as a plain model.

    tformer train lm --init ./SmolLM2-135M --data chat.jsonl --out runs/sft --lora-r 8 --max-steps 300
    tformer merge runs/sft merged/            # config.json, model.safetensors, the tokenizer: no LoRA layer left
    tformer export merged/ --to hf hf-out/    # transformers loads it with its own classes

OUT is a tformer model directory (what ``tformer.load`` reads, what every command's ``--model`` takes): W + α/r · B A
in each LoRA layer's place, as fast as the base model, with no base directory needed. (``tformer.load`` merges a LoRA
run on its own when it reads one; ``merge`` writes the result once. ``tformer export RUN --to hf OUT`` merges too.)
A model without LoRA layers is refused: there is nothing to merge.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tformer.cli.validate import existing_dir


def add_parser(sub) -> None:
    p = sub.add_parser(
        "merge",
        help="fold a LoRA run's low-rank pairs into its weights: a plain model directory",
        description="Write MODEL (a run or model trained with --lora-r) to OUT as a tformer model directory whose "
        "weights hold W + alpha/r * B A in each LoRA layer: the same outputs, no LoRA layer, no base model needed.",
    )
    p.add_argument(
        "model", metavar="MODEL", type=existing_dir, help="a tformer run or model directory with LoRA layers"
    )
    p.add_argument("out", metavar="OUT", help="the directory to write (missing or empty; its parent must exist)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if tformer wrote it (an earlier merge, average or export: their .tformer-output.json lists "
        "its files); any other directory, MODEL itself, a symbolic link or a place inside a run is refused even so",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert.classification import LABELS_FILE
    from tformer.files import staged_dir
    from tformer.loader import load
    from tformer.models.checkpoint import DECODING_FILE, model_dir
    from tformer.nn.lora import has_lora, lora_layers, merge_lora
    from tformer.outputs import check_new_dir, mark_written

    out = check_new_dir(args.out, "OUT", [("MODEL", args.model)], args.overwrite)  # before any work
    loaded = load(args.model, flag="MODEL", merge=False, fast=False)
    if not has_lora(loaded.model):
        raise ValueError(f"MODEL {args.model!r} has no LoRA layers to merge ({loaded.kind.describe()})")
    n = len(lora_layers(loaded.model))
    merge_lora(loaded.model)
    with staged_dir(out) as tmp:
        loaded.write_files(tmp)
        for name in (LABELS_FILE, DECODING_FILE):  # a classifier's labels, a translator's tuned length penalty
            if (model_dir(args.model) / name).is_file():
                shutil.copy2(model_dir(args.model) / name, Path(tmp) / name)
        mark_written(tmp, "merge")
    print(f"wrote {out}: {n} LoRA layers merged; {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0
