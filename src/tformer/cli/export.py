"""``tformer export MODEL --to hf OUT``: a model directory written as a Hugging Face one.

MODEL is a tformer model or training run directory (any family) or a Hugging Face directory tformer reads; OUT
gets ``config.json``, ``model.safetensors``, ``generation_config.json`` and, when MODEL has a tokenizer,
``tokenizer.json`` + ``tokenizer_config.json``, which ``transformers`` loads with its own classes
(:func:`tformer.hf.export` does the work and says which class each model becomes). A setting no Hugging Face class
holds is one line naming the field, and OUT is checked before the model is read (its parent must take new entries:
a read-only or forbidden place is refused first, naming OUT); nothing is written then. A full disk is one line
naming OUT, which is left as it was (:class:`tformer.files.WriteError`).
"""

from __future__ import annotations

import json
import sys

from tformer.cli.validate import existing_dir


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a model as a Hugging Face directory (transformers loads it with its own classes)",
        description="Write MODEL (a tformer run or model directory, or a Hugging Face one) to OUT in another "
        "library's format: --to hf writes config.json, model.safetensors, generation_config.json and the tokenizer "
        "(tokenizer.json) as transformers reads them (GPT -> GPT-2, Llama, Mistral, Qwen2, Qwen3 or Gemma 3 by its "
        "config; BERT -> BertForPreTraining; a translator -> MarianMTModel).",
    )
    p.add_argument("model", metavar="MODEL", type=existing_dir, help="a tformer run or model directory, or a HF one")
    p.add_argument(
        "out", metavar="OUT", help="the directory to write (missing or empty; its parent must exist and be writable)"
    )
    p.add_argument("--to", required=True, choices=["hf"], help="the format: hf (Hugging Face transformers)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if it holds an earlier export (a directory holding other files, a symbolic link, MODEL "
        "itself or a place inside a model or run directory is refused even so)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.files import check_new_dir
    from tformer.hf.export import EXPORT_FILES
    from tformer.loader import load

    out = check_new_dir(args.out, "OUT", [("MODEL", args.model)], args.overwrite, EXPORT_FILES)  # before any work
    loaded = load(args.model, flag="MODEL")  # any family, any kind of directory (tformer.loader)
    loaded.export(out, overwrite=args.overwrite)  # with its tokenizers (a translator's source and target)
    architecture = json.loads((out / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"wrote {out} ({architecture}): {files}")
    if loaded.missing:
        print(f"tformer export: note: {loaded.missing}, so OUT has no tokenizer.json", file=sys.stderr)
    return 0
