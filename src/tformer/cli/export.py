"""``tformer export MODEL --to hf OUT``: a model directory written as a Hugging Face one.

MODEL is a tformer model or training run directory (any family) or a Hugging Face directory tformer reads; OUT
gets ``config.json``, ``model.safetensors``, ``generation_config.json`` and, when MODEL has a tokenizer,
``tokenizer.json`` + ``tokenizer_config.json``, which ``transformers`` loads with its own classes
(:func:`tformer.hf.export` does the work and says which class each model becomes). A setting no Hugging Face class
holds is one line naming the field, and OUT is checked before the model is read (its parent must take new entries:
a read-only or forbidden place is refused first, naming OUT); nothing is written then. A full disk is one line
naming OUT, which is left as it was (:class:`tformer.files.WriteError`).

A translator with an Opus-MT tokenizer (SentencePiece: an Opus-MT directory, or one saved from it) is written in
Opus-MT's layout, ``source.spm``, ``target.spm``, ``vocab.json`` and ``tokenizer_config.json``, which transformers reads
with its MarianTokenizer; ``--tokenizer spm`` asks for that layout and refuses, saying why, a tokenizer that is not
SentencePiece (a translator trained here has a BPE of the ``tokenizers`` library: its ordered merges and pre-tokenizer
are no SentencePiece model, so it is written as tokenizer.json); ``--tokenizer json`` asks for tokenizer.json.
"""

from __future__ import annotations

import json
import sys

from tformer.cli.validate import existing_dir

FORMATS = ("auto", "spm", "json")


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
        "--tokenizer",
        choices=FORMATS,
        default="auto",
        help="the tokenizer's files: spm (an Opus-MT translator's source.spm, target.spm, vocab.json: transformers' "
        "MarianTokenizer), json (tokenizer.json), auto (default: the one MODEL's tokenizer has)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if tformer wrote it (an earlier export, merge or average: their .tformer-output.json lists "
        "its files); any other directory, one holding other files, a symbolic link, MODEL itself or a place inside a "
        "model or run directory is refused even so",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from tformer.bert.fill_mask import no_head, untrained_heads
    from tformer.loader import load
    from tformer.outputs import check_new_dir

    out = check_new_dir(args.out, "OUT", [("MODEL", args.model)], args.overwrite)  # before any work
    loaded = load(args.model, flag="MODEL")  # any family, any kind of directory (tformer.loader)
    _check_format(loaded, args.tokenizer)
    untrained = untrained_heads(loaded)  # a BERT's heads that never trained: left out (as export does), and said
    loaded.export(out, overwrite=args.overwrite, untrained=untrained)  # with its tokenizers, a classifier's labels
    architecture = json.loads((out / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"wrote {out} ({architecture}): {files}")
    if loaded.missing:
        print(f"tformer export: note: {loaded.missing}, so OUT has no tokenizer.json", file=sys.stderr)
    for head in untrained if not getattr(loaded.config, "num_labels", 0) else ():
        print(f"tformer export: note: {no_head(loaded, head)}; not written (transformers starts it at random)",
              file=sys.stderr)  # fmt: skip
    return 0


def _check_format(loaded, wanted: str) -> None:
    """``--tokenizer spm`` needs a SentencePiece (Opus-MT) tokenizer, ``json`` one with a tokenizer.json form."""
    kind = "none" if loaded.tokenizer is None else loaded.tokenizer.kind
    if wanted == "auto" or (wanted == "spm") == (kind == "marian"):
        return
    if wanted == "json":
        raise ValueError(
            "--tokenizer json: MODEL's tokenizer is an Opus-MT SentencePiece one (source.spm, target.spm, vocab.json), "
            "which has no tokenizer.json form here; leave --tokenizer out to write its own files"
        )
    if kind == "none":
        raise ValueError(f"--tokenizer spm: MODEL has no tokenizer ({loaded.missing})")
    raise ValueError(
        f"--tokenizer spm: MODEL's tokenizer is a {kind} one, not SentencePiece: transformers' MarianTokenizer reads "
        "SentencePiece models (source.spm, target.spm), and a BPE's ordered merges and pre-tokenizer cannot be written "
        "as one without changing how text is cut; leave --tokenizer out to write tokenizer.json, which transformers "
        "loads with AutoTokenizer"
    )
